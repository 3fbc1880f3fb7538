"""Independent check of the multi-node NVLink rules (#24), from the domain models only.

A unit whose GPUs span nodes and that asks for NVLink (``minNVLinkBandwidthGbpsPerPair``
> 0), for one node (``maxHopCount: 0``) or is a slice (:mod:`hyperplace.models.slices`;
each of its pods whole on one node, ``slice-shape``), with a GPU on a tray of a multi-node NVLink
domain (:class:`~hyperplace.models.nvlink.NVLinkDomain`), must have every GPU on trays of
that one domain and, in a partitioned domain, of one partition (``nvlink-domain``); the
domain's per-GPU NVLink rate (its ``gigabytesPerSecondPerGpu``, else the trays' GPU type
figure) meets the floor across trays (``nvlink-bandwidth``). A unit larger than a node that is "on one
NVLink domain" passes the rule that ``maxHopCount: 0`` means one node (``unit-span``); a
unit that fits in one node still sits on one node (``nvlink-split``, ``unit-split``: a
tray's GPUs are the tightest NVLink set), and trays of one domain are 0 hops apart
(:meth:`~hyperplace.models.fabric.Fabric.path`).
"""

from __future__ import annotations

from hyperplace.models import Cluster, GangUnit, GPUType


def _why(unit: GangUnit) -> str:
    if unit.slice_pods:
        return f"a slice of {unit.slice_pods} pods"
    return "minNVLinkBandwidthGbpsPerPair" if unit.min_nvlink_gbps > 0 else "maxHopCount 0"


def one_domain(cluster: Cluster, nodes: list[str]) -> tuple[str, int] | None:
    """(domain, partition) when every node of ``nodes`` is a tray of one NVLink domain and
    partition, else None."""
    net = cluster.network
    if not net.nvlink_domains:
        return None
    first = net.nvlink_domain_of(nodes[0])
    if first is None:
        return None
    part = first.partition_of(nodes[0])
    for n in nodes[1:]:
        if net.nvlink_domain_of(n) is not first or first.partition_of(n) != part:
            return None
    return first.name, part


def unit_problems(cluster: Cluster, unit: GangUnit, nodes: list[str], gpu_type: GPUType,
                  per_node: dict[str, int] | None = None
                  ) -> tuple[bool, list[tuple[str, str]]]:
    """(the unit sits on one NVLink domain at its floor, problems as (code, message)) for a
    unit spanning ``nodes`` (two or more, sorted) of ``cluster``; ``per_node``: its GPUs
    on each node (for a slice's pods)."""
    net = cluster.network
    if not net.nvlink_domains:
        return False, []
    trays = [n for n in nodes if net.nvlink_domain_of(n) is not None]
    if not trays:
        return False, []
    asks = unit.min_nvlink_gbps > 0 or unit.max_hop_count == 0 or unit.slice_pods > 0
    where = one_domain(cluster, nodes)
    problems: list[tuple[str, str]] = []
    if unit.slice_pods and per_node is not None:
        pod = unit.gpus // unit.slice_pods
        cut = sorted(n for n, k in per_node.items() if k % pod)
        if cut:
            problems.append(("slice-shape", (
                f"a slice of {unit.slice_pods} pods of {pod} GPUs keeps each pod on one node, "
                f"but {cut[0]} holds {per_node[cut[0]]} of its GPUs")))
    if where is None:
        if asks:
            doms = sorted({net.nvlink_domain_of(n).name for n in trays})  # type: ignore[union-attr]
            off = len(nodes) - len(trays)
            problems.append(("nvlink-domain", (
                f"unit needs one NVLink domain ({_why(unit)}) "
                f"but spans {len(nodes)} nodes: domain(s) {', '.join(doms)}"
                + (f" and {off} node(s) in none" if off else "")
                + (" (or several partitions)" if len(doms) == 1 and not off else ""))))
        return False, problems
    d = net.nvlink_domain_of(nodes[0])
    assert d is not None
    gbps = d.gbps_per_gpu if d.gbps_per_gpu is not None else gpu_type.nvlink_gbps
    if unit.min_nvlink_gbps > 0 and gbps + 1e-9 < unit.min_nvlink_gbps:
        problems.append(("nvlink-bandwidth", (
            f"NVLink domain {d.name} gives {gbps:g} GB/s per GPU across its trays, unit needs "
            f">= {unit.min_nvlink_gbps:g}")))
        return False, problems
    return True, problems
