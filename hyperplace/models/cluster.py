"""Clusters (nodes + fabric), federations of clusters, and the links between clusters."""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import Field, model_validator

from hyperplace.models.base import HPModel
from hyperplace.models.limits import MAX_FABRIC_LINKS, MAX_FABRIC_SWITCHES, Name
from hyperplace.models.fabric import (
    Fabric,
    Link,
    Switch,
    fat_tree_three_tier,
    fat_tree_two_tier,
    superpod_rail_optimized,
)
from hyperplace.models.node import Node
from hyperplace.models.nvlink import NVLinkDomain, check_domains, check_tray_nodes


class FabricGenerator(HPModel):
    """A fabric described by its shape instead of every cable (applied to nodes in order)."""

    type: Literal["fat-tree-2", "fat-tree-3", "superpod-rail"]
    nodes_per_leaf: int = Field(default=16, gt=0)
    spines: int = Field(default=4, gt=0)
    leaves_per_pod: int = Field(default=4, gt=0)
    spines_per_pod: int = Field(default=4, gt=0)
    cores: int = Field(default=4, gt=0)
    nodes_per_su: int = Field(default=32, gt=0)
    sus_per_spine_group: int = Field(default=8, gt=0)
    node_gbps: float = Field(default=400.0, gt=0)
    uplink_gbps: float = Field(default=400.0, gt=0)

    def size(self, node_count: int) -> tuple[int, int]:
        """(switches, links) the generator makes for ``node_count`` nodes, without making
        them, so that a generator asking for millions is refused before it runs."""
        if self.type == "fat-tree-2":
            leaves = -(-node_count // self.nodes_per_leaf)
            return leaves + self.spines, node_count + leaves * self.spines
        if self.type == "fat-tree-3":
            leaves = -(-node_count // self.nodes_per_leaf)
            pods = -(-leaves // self.leaves_per_pod)
            spines = pods * self.spines_per_pod
            return (leaves + spines + self.cores,
                    node_count + leaves * self.spines_per_pod + spines * self.cores)
        return 0, 0  # superpod-rail: sized by NVIDIA's reference table, bounded by the nodes

    def build(self, nodes: list[Node]) -> Fabric:
        names = [n.name for n in nodes]
        if self.type == "fat-tree-2":
            return fat_tree_two_tier(names, self.nodes_per_leaf, self.spines, self.node_gbps,
                                     self.uplink_gbps)
        if self.type == "fat-tree-3":
            return fat_tree_three_tier(names, self.nodes_per_leaf, self.leaves_per_pod,
                                       self.spines_per_pod, self.cores, self.node_gbps,
                                       self.uplink_gbps)
        gpus = max((n.gpu_count for n in nodes), default=8)
        return superpod_rail_optimized(names, gpus, self.nodes_per_su, self.node_gbps,
                                       self.sus_per_spine_group)


class FabricSpec(HPModel):
    """Either a generator or explicit switches and links (or both: links are added)."""

    generator: FabricGenerator | None = None
    switches: list[Switch] = Field(default_factory=list)
    links: list[Link] = Field(default_factory=list)
    #: multi-node NVLink domains (NVL72 racks, NVLink Switch Systems), see models/nvlink.py
    nvlink_domains: list[NVLinkDomain] = Field(default_factory=list)


class Cluster(HPModel):
    name: Name
    region: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    nodes: list[Node] = Field(default_factory=list)
    fabric: FabricSpec = Field(default_factory=FabricSpec)

    @model_validator(mode="after")
    def _consistent(self) -> "Cluster":
        names: set[str] = set()
        for i, n in enumerate(self.nodes):
            if n.name in names:
                raise ValueError(f"nodes[{i}].name: duplicate node {n.name!r}")
            names.add(n.name)
        switches: set[str] = set()
        for i, sw in enumerate(self.fabric.switches):
            if sw.name in switches:
                raise ValueError(f"fabric.switches[{i}].name: duplicate switch {sw.name!r}")
            if sw.name in names:
                raise ValueError(f"fabric.switches[{i}].name: {sw.name!r} is also a node's name")
            switches.add(sw.name)
        for i, link in enumerate(self.fabric.links):
            if link.a == link.b:
                raise ValueError(f"fabric.links[{i}]: both ends are {link.a!r}")
            for end in ("a", "b"):
                ep = getattr(link, end)
                if ep not in switches and ep not in names:
                    raise ValueError(
                        f"fabric.links[{i}].{end}: {ep!r} is neither a switch nor a node of this cluster"
                    )
        counts = {n.name: (n.gpu_type, n.gpu_count) for n in self.nodes}
        check_tray_nodes(counts, [n.name for n in self.nodes])
        if self.fabric.nvlink_domains:
            check_domains(self.fabric.nvlink_domains, names, counts, "fabric.nvlinkDomains")
        if self.fabric.generator is not None:
            switch_count, link_count = self.fabric.generator.size(len(self.nodes))
            if switch_count > MAX_FABRIC_SWITCHES or link_count > MAX_FABRIC_LINKS:
                raise ValueError(
                    f"fabric.generator: makes {switch_count:,} switches and {link_count:,} "
                    f"links, more than the limits of {MAX_FABRIC_SWITCHES:,} and "
                    f"{MAX_FABRIC_LINKS:,}")
        if self.fabric.generator is not None and self.fabric.switches:
            generated = {sw.name for sw in self.fabric.generator.build(self.nodes).switches}
            for i, sw in enumerate(self.fabric.switches):
                if sw.name in generated:
                    raise ValueError(f"fabric.switches[{i}].name: {sw.name!r} is also a switch "
                                     "the generator makes; give the added switch another name")
        return self

    @cached_property
    def network(self) -> Fabric:
        """The full fabric (generated part plus explicit switches and links)."""
        nvl = self.fabric.nvlink_domains
        if self.fabric.generator is None:
            return Fabric(switches=self.fabric.switches, links=self.fabric.links,
                          nvlink_domains=nvl)
        gen = self.fabric.generator.build(self.nodes)
        if not self.fabric.switches and not self.fabric.links:
            if nvl:  # the generated cabling with the racks' NVLink domains beside it
                out = Fabric.model_construct(kind=gen.kind, switches=gen.switches,
                                             links=gen.links, nvlink_domains=nvl)
                for table in ("attachments", "_switch_adj"):  # the cabling's, filled
                    if table in gen.__dict__:
                        out.__dict__[table] = gen.__dict__[table]
                return out
            return gen  # nothing added: the generated fabric itself (not validated twice)
        return Fabric(kind=gen.kind, switches=[*gen.switches, *self.fabric.switches],
                      links=[*gen.links, *self.fabric.links], nvlink_domains=nvl)

    @cached_property
    def node_by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @property
    def gpu_count(self) -> int:
        return sum(n.gpu_count for n in self.nodes)


MAX_LINK_GBPS = 1e6


class InterClusterLink(HPModel):
    """A WAN (or campus) link between two clusters of a federation."""

    a: str
    b: str
    #: 1 Pb/s, far above any WAN; the federation's CP-SAT rows hold a link's capacity in
    #: Mb/s as a 64-bit integer (1e18 Gb/s overflowed it: a traceback, a 500 in the service)
    gbps: float = Field(gt=0, le=MAX_LINK_GBPS)
    latency_ms: float = Field(default=20.0, ge=0)


class Federation(HPModel):
    clusters: list[Cluster] = Field(min_length=1)
    links: list[InterClusterLink] = Field(default_factory=list)

    @model_validator(mode="after")
    def _links_known(self) -> "Federation":
        self.check_links()
        return self

    def check_links(self) -> None:
        """Cluster names unique; every link joins two known clusters, once (ValueError)."""
        names = [c.name for c in self.clusters]
        if len(set(names)) != len(names):
            raise ValueError("clusters: duplicate cluster name")
        pairs: list[frozenset[str]] = []
        for i, link in enumerate(self.links):
            if link.a == link.b:
                raise ValueError(f"links[{i}]: both ends are cluster {link.a!r}")
            if frozenset((link.a, link.b)) in pairs:
                raise ValueError(f"links[{i}]: clusters {link.a!r} and {link.b!r} are already "
                                 f"linked by links[{pairs.index(frozenset((link.a, link.b)))}]")
            pairs.append(frozenset((link.a, link.b)))
            for end in ("a", "b"):
                if getattr(link, end) not in names:
                    raise ValueError(f"links[{i}].{end}: unknown cluster {getattr(link, end)!r}")

    def link(self, a: str, b: str) -> InterClusterLink | None:
        for link in self.links:
            if {link.a, link.b} == {a, b}:
                return link
        return None
