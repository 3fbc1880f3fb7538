"""Rack-scale NVLink clusters (#24): GB200/GB300 NVL72 racks under a leaf/spine fabric,
alone or beside HGX nodes, as :class:`~hyperplace.models.cluster.Cluster` objects.

An NVL72 rack is 18 compute trays of 4 GPUs (nodes ``<rack>-t00`` .. ``-t17``) in one
NVLink domain (9 NVLink switch trays, 1.8 TB/s per GPU); each tray's NICs go to the rack's
leaf switch (``racks_per_leaf`` racks per leaf), every leaf to every spine. HGX nodes of 8
GPUs sit on leaves of their own under the same spines, so one fabric holds trees of two
depths (tray -> rack -> leaf -> spine beside node -> leaf -> spine).
"""

from __future__ import annotations

from typing import Any

from hyperplace.models import Cluster, FabricSpec, GPUType, Node
from hyperplace.models.fabric import Link, Switch
from hyperplace.models.gpu import GPUCatalog
from hyperplace.models.nvlink import NVLinkDomain

#: NVL72: compute trays per rack, GPUs per tray, NVLink switch trays, per-GPU NVLink GB/s
NVL72_TRAYS, NVL72_TRAY_GPUS, NVL72_SWITCH_TRAYS, NVL72_GBPS = 18, 4, 9, 1800.0

#: Stand-ins used only while the GPU catalog has no rack-scale type of that name (the
#: catalog's own GB200/GB300 rows, with their datasheet sources, take precedence).
_FALLBACK: dict[str, dict[str, Any]] = {
    "GB200": dict(family="GB200", bf16_tflops=2500.0, hbm_gb=186.0, hbm_tb_s=8.0,
                  nvlink_gbps=1800.0, nvlink_generation=5, pcie_generation=6, nic_gbps=400.0,
                  mfu=0.40, cost_per_hour=9.0,
                  source="NVIDIA GB200 NVL72 datasheet: 360 PF dense BF16 / 72 GPUs, 13.4 TB "
                         "HBM3e / 72, 576 TB/s / 72, 130 TB/s NVLink / 72"),
    "GB300": dict(family="GB300", bf16_tflops=2500.0, hbm_gb=279.0, hbm_tb_s=8.0,
                  nvlink_gbps=1800.0, nvlink_generation=5, pcie_generation=6, nic_gbps=800.0,
                  mfu=0.40, cost_per_hour=11.0,
                  source="NVIDIA GB300 NVL72 datasheet: 20 TB HBM3e / 72, 130 TB/s NVLink / "
                         "72, ConnectX-8 800 Gb/s per GPU"),
}


def declared_types(*names: str) -> list[GPUType]:
    """GPU types an instance must declare for ``names`` (none once the catalog has them)."""
    catalog = GPUCatalog()
    return [GPUType(name=n, **_FALLBACK[n]) for n in names if n not in catalog]


def rack_nodes(rack: str, gpu_type: str = "GB200", *, trays: int = NVL72_TRAYS,
               allocated: dict[int, dict[int, str]] | None = None,
               faulty: dict[int, list[int]] | None = None) -> list[Node]:
    """The compute trays of one rack (``<rack>-t00``..), state given by tray index."""
    allocated = allocated or {}
    faulty = faulty or {}
    return [Node(name=f"{rack}-t{i:02d}", gpu_type=gpu_type, gpu_count=NVL72_TRAY_GPUS,
                 labels={"nvidia.com/gpu.clique": f"{rack}.0"},
                 allocated=allocated.get(i, {}), faulty=faulty.get(i, []))
            for i in range(trays)]


def rack_domain(rack: str, nodes: list[Node], *, system: str = "GB200 NVL72",
                gbps: float | None = NVL72_GBPS, partition_trays: int | None = None,
                spare_trays: int = 0) -> NVLinkDomain:
    """The NVLink domain of one rack's trays."""
    return NVLinkDomain(name=rack, nodes=[n.name for n in nodes], gbps_per_gpu=gbps,
                        system=system, switch_trays=NVL72_SWITCH_TRAYS,
                        partition_trays=partition_trays, spare_trays=spare_trays)


def rack_cluster(name: str, racks: dict[str, list[Node]], *, hgx: list[Node] | None = None,
                 hgx_per_leaf: int = 16, racks_per_leaf: int = 1, spines: int = 4,
                 nic_gbps: float = 400.0, uplink_gbps: float = 800.0,
                 domains: list[NVLinkDomain] | None = None, region: str = "") -> Cluster:
    """A cluster of NVL72 racks (and HGX nodes) on one leaf/spine fabric.

    Parameters
    ----------
    racks : dict
        Rack name -> its trays (:func:`rack_nodes`); one NVLink domain each unless
        ``domains`` are given.
    hgx : list of Node
        Ordinary nodes, ``hgx_per_leaf`` to a leaf of their own.
    """
    switches: list[Switch] = []
    links: list[Link] = []
    leaf_names: list[str] = []

    def leaf(nodes: list[Node]) -> None:
        s = f"leaf{len(leaf_names):03d}"
        leaf_names.append(s)
        switches.append(Switch(name=s, tier=1))
        links.extend(Link(a=n.name, b=s, gbps=nic_gbps) for n in nodes)

    names = list(racks)
    for i in range(0, len(names), racks_per_leaf):
        leaf([n for r in names[i:i + racks_per_leaf] for n in racks[r]])
    hgx = hgx or []
    for i in range(0, len(hgx), hgx_per_leaf):
        leaf(list(hgx[i:i + hgx_per_leaf]))
    per = max(1, (racks_per_leaf * NVL72_TRAYS) // spines)
    for j in range(spines):
        switches.append(Switch(name=f"spine{j:02d}", tier=2))
        links.extend(Link(a=s, b=f"spine{j:02d}", gbps=uplink_gbps, count=per)
                     for s in leaf_names)
    if domains is None:
        domains = [rack_domain(r, trays) for r, trays in racks.items()]
    nodes = [n for r in names for n in racks[r]] + list(hgx)
    return Cluster(name=name, region=region, nodes=nodes,
                   fabric=FabricSpec(switches=switches, links=links, nvlink_domains=domains))
