"""Multi-node NVLink domains from what clusters publish (#24).

* GPU Feature Discovery's ``nvidia.com/gpu.clique`` node label (``<clusterUUID>.<cliqueId>``;
  Topograph's ``accelerator.topograph.run/domain`` and its older keys likewise): nodes with
  one value share one NVLink domain (:func:`domains_from_labels`). The Kubernetes reader
  (:mod:`.kubernetes`) calls it, so ``instances import --from kubernetes`` of GB200 trays
  gives NVL72 racks.
* Slurm's ``topology/block`` plugin file (``topology.conf`` with ``BlockName=... Nodes=...``
  lines, as Topograph writes it for NVL72 racks; ``BlockSizes=`` optional): each block is an
  NVLink domain (:func:`domains_from_block_conf`).
* Volcano HyperNodes whose tier is an NVLink network (:func:`split_nvlink_tier`): the
  HyperNodes of that tier become NVLink domains instead of switches, their member nodes
  cabled to the parent HyperNode's switch (the InfiniBand leaf), as Volcano #5732 draws a
  GB200 tree beside an H100 one (tray -> NVL72 (tier 1) -> IB leaf (tier 2) -> spine).

A clique shared by one node only is no multi-node domain and is left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from hyperplace.errors import InputError
from hyperplace.models.fabric import Link, Switch
from hyperplace.models.node import Node
from hyperplace.models.nvlink import NVLinkDomain

#: Node label keys naming a node's NVLink domain, first found wins (as the Kubernetes reader)
CLIQUE_LABELS = ("nvidia.com/gpu.clique", "accelerator.topograph.run/domain",
                 "network.topology.nvidia.com/accelerator",
                 "network.topology.kubernetes.io/accelerator")
_NAME_BAD = re.compile(r"[\x00-\x1f\x7f]")


def clique_of(labels: Mapping[str, str]) -> str | None:
    """The NVLink domain a node's labels name, or None."""
    for key in CLIQUE_LABELS:
        value = labels.get(key)
        if value:
            return value
    return None


def domains_from_labels(nodes: Sequence[Node], gbps_per_gpu: float | None = None
                        ) -> list[NVLinkDomain]:
    """NVLink domains of the nodes that share a clique label value (two or more nodes)."""
    groups: dict[str, list[str]] = {}
    for n in nodes:
        c = clique_of(n.labels)
        if c is not None:
            groups.setdefault(c, []).append(n.name)
    return [NVLinkDomain(name=name, nodes=members, gbps_per_gpu=gbps_per_gpu,
                         system="clique (nvidia.com/gpu.clique)")
            for name, members in groups.items() if len(members) > 1]


def domains_from_block_conf(text: str, source: str, known: Iterable[str] | None = None
                            ) -> list[NVLinkDomain]:
    """NVLink domains from a Slurm ``topology/block`` file (``BlockName=b1 Nodes=n[1-18]``).

    Node lists use Slurm's host-range syntax (``gb-[001-018]``, ``a,b``); a line that is not
    a ``BlockName=`` line (``BlockSizes=``, comments, blank) is skipped.
    """
    names = set(known) if known is not None else None
    out: list[NVLinkDomain] = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line.lower().startswith("blockname="):
            continue
        fields = dict(part.split("=", 1) for part in line.split() if "=" in part)
        fields = {k.lower(): v for k, v in fields.items()}
        block = fields.get("blockname", "")
        where = f"line {lineno}"
        if not block or _NAME_BAD.search(block):
            raise InputError("BlockName needs a name", source=source, path=where)
        if "nodes" not in fields:
            raise InputError(f"block {block!r} lists no Nodes=", source=source, path=where)
        members = expand_hostlist(fields["nodes"], source, where)
        if names is not None:
            unknown = [m for m in members if m not in names]
            if unknown:
                raise InputError(f"block {block!r} names {unknown[0]!r}, which is not a node "
                                 "of the cluster", source=source, path=f"{where}: Nodes")
        out.append(NVLinkDomain(name=block, nodes=members, system="Slurm topology/block"))
    if not out:
        raise InputError("no BlockName= line: not a topology/block file", source=source)
    return out


def expand_hostlist(spec: str, source: str = "<hostlist>", where: str = "") -> list[str]:
    """Slurm host ranges: ``gb-[001-003,007],x1`` -> gb-001 gb-002 gb-003 gb-007 x1."""
    out: list[str] = []
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", spec):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", part)
        if m is None:
            out.append(part)
            continue
        head, ranges, tail = m.groups()
        for r in ranges.split(","):
            lo, _, hi = r.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise InputError(f"bad host range {r!r} in {spec!r}", source=source, path=where)
            width = len(lo)
            for i in range(int(lo), int(hi or lo) + 1):
                out.append(f"{head}{i:0{width}d}{tail}")
    if len(out) > 4096:
        raise InputError(f"{len(out)} nodes in one block, more than 4,096", source=source,
                         path=where)
    return out


def split_nvlink_tier(switches: list[Switch], links: list[Link], nvlink: set[str]
                      ) -> tuple[list[Switch], list[Link], list[NVLinkDomain]]:
    """Turn the switches named in ``nvlink`` (HyperNodes of an NVLink tier) into NVLink
    domains: their member nodes form the domain and are cabled to the domain's parent
    switch instead (with the node's own link rate); the domain's switch and uplink go."""
    members: dict[str, list[Link]] = {s: [] for s in nvlink}
    parent: dict[str, Link] = {}
    keep: list[Link] = []
    switch_names = {s.name for s in switches}
    for link in links:
        if link.b in nvlink and link.a not in switch_names:
            members[link.b].append(link)
        elif link.a in nvlink and link.b in switch_names:
            parent[link.a] = link
        elif link.a in nvlink or link.b in nvlink:
            raise ValueError(f"HyperNode {link.a if link.a in nvlink else link.b!r} of the "
                             "NVLink tier has HyperNode members; an NVLink domain holds nodes")
        else:
            keep.append(link)
    domains = []
    for name in sorted(nvlink):
        nodes = members[name]
        if not nodes:
            continue
        up = parent.get(name)
        if up is not None:
            keep.extend(Link(a=m.a, b=up.b, gbps=m.gbps, count=m.count,
                             latency_us=m.latency_us) for m in nodes)
        domains.append(NVLinkDomain(name=name, nodes=[m.a for m in nodes],
                                    system="Volcano HyperNode (NVLink tier)"))
    return [s for s in switches if s.name not in nvlink], keep, domains


def nvlink_hypernodes(docs: Sequence[Mapping[str, Any]], tier: int | None) -> set[str]:
    """HyperNodes that are NVLink networks: those of ``tier``, and any labelled
    ``hyperplace.io/network: nvlink`` (Volcano has no field for it, #5732)."""
    out = set()
    for d in docs:
        meta = d.get("metadata") or {}
        spec = d.get("spec") or {}
        labels = meta.get("labels") or {}
        if (tier is not None and spec.get("tier") == tier) or \
                str(labels.get("hyperplace.io/network", "")).lower() == "nvlink":
            out.add(meta.get("name"))
    return out
