"""What ``hyperplace instances show`` prints, as data (so the service can return it too).

Fragmentation figure, defined here once:

    fragmentation = 1 - (free GPUs on whole-free nodes) / (free GPUs)

A *whole-free* node has every GPU free (none allocated, none faulty). The figure is the share
of free capacity that cannot host a whole-node group (a TP-8 gang on 8-GPU nodes) because it
sits on nodes already partly used or partly broken: 0 = every free GPU is on an empty node,
1 = no empty node is left. It is 0 when nothing is free (nothing left to fragment).

Largest free NVLink set: the most free GPUs of one node whose every pair is joined by NVLink
(through an NVSwitch, or a direct link on a DGX-1 hybrid cube mesh), whatever its rate. On
NVSwitch nodes that is the free count; on a hybrid cube mesh it is the largest clique of free
GPUs, which is why 4 free GPUs on a DGX-1 may not host a 4-GPU NVLink group; on PCIe-only
nodes it is 1. The clique search is the placement formulation's
(:func:`hyperplace.models.cliques.largest_clique`), which the explanations use with
a job's NVLink floor.
"""

from __future__ import annotations

from pydantic import Field

from hyperplace.models.cliques import largest_clique
from hyperplace.instances.registry import describe
from hyperplace.models import Cluster, Instance, Node, NVLinkTopology
from hyperplace.models.base import HPModel
from hyperplace.models.node import DGX1_LINKS


class GPUStateCount(HPModel):
    gpu_type: str
    total: int
    free: int
    allocated: int
    faulty: int


class DomainSummary(HPModel):
    name: str
    nodes: int
    gpus: int
    free_gpus: int
    whole_free_nodes: int


class TierSummary(HPModel):
    """Domains of one tier: nodes pairwise within ``radius`` hops (tier = (radius + 1) / 2)."""

    tier: int
    radius: int
    domain_count: int
    domains: list[DomainSummary] = Field(description="most free GPUs first")


class ClusterSummary(HPModel):
    name: str
    region: str
    fabric: str
    nodes: int
    gpus_by_type: list[GPUStateCount]
    tiers: list[TierSummary]
    fragmentation: float
    largest_free_nvlink_set: dict[str, int]
    #: multi-node NVLink domains (racks), most free GPUs first; nodes = trays
    nvlink_domains: list[DomainSummary] = Field(default_factory=list)


class InterClusterLinkSummary(HPModel):
    a: str
    b: str
    gbps: float
    latency_ms: float


class InstanceSummary(HPModel):
    name: str
    description: str
    source: str
    model: str | None
    gpus_by_type: list[GPUStateCount]
    fragmentation: float
    largest_free_nvlink_set: dict[str, int]
    clusters: list[ClusterSummary]
    inter_cluster_links: list[InterClusterLinkSummary]
    running_jobs: int
    pending_jobs: int
    pending_gpus: int


def largest_free_nvlink_set(node: Node) -> int:
    """Most free GPUs of ``node`` that are pairwise NVLink-connected (see module docstring)."""
    free = node.free_gpus
    if not free:
        return 0
    if node.nvlink == NVLinkTopology.NVSWITCH:
        return len(free) if node.nvlink_gbps != 0 else 1
    if node.nvlink == NVLinkTopology.PCIE:
        return 1
    if node.nvlink == NVLinkTopology.HYBRID_CUBE_MESH:
        linked = {pair for pair, links in DGX1_LINKS.items() if links > 0}
    else:
        linked = {(min(p.a, p.b), max(p.a, p.b)) for p in node.nvlink_pairs
                  if p.gigabytes_per_second > 0}
    return largest_clique(free, lambda a, b: (a, b) in linked)


def fragmentation(nodes: list[Node]) -> float:
    """Share of free GPUs not on whole-free nodes (see the module docstring)."""
    free = sum(n.free_count for n in nodes)
    if free == 0:
        return 0.0
    whole = sum(n.free_count for n in nodes if n.free_count == n.gpu_count)
    return 1.0 - whole / free


def _by_type(nodes: list[Node]) -> list[GPUStateCount]:
    acc: dict[str, list[int]] = {}
    for n in nodes:
        row = acc.setdefault(n.gpu_type, [0, 0, 0, 0])
        row[0] += n.gpu_count
        row[1] += n.free_count
        row[2] += len(n.allocated)
        row[3] += len(n.faulty)
    return [GPUStateCount(gpu_type=t, total=r[0], free=r[1], allocated=r[2], faulty=r[3])
            for t, r in sorted(acc.items())]


def _largest_sets(nodes: list[Node], clusters: list[Cluster] | None = None) -> dict[str, int]:
    """Per GPU type, the most free GPUs pairwise NVLink-connected: on one node, or on the
    trays of one multi-node NVLink domain (an NVL72 rack, whose switch layer joins them)."""
    out: dict[str, int] = {}
    for n in nodes:
        out[n.gpu_type] = max(out.get(n.gpu_type, 0), largest_free_nvlink_set(n))
    for c in clusters or []:
        for d in c.network.nvlink_domains:
            trays = [c.node_by_name[m] for m in d.nodes]
            free = sum(largest_free_nvlink_set(t) for t in trays)
            t = trays[0].gpu_type
            out[t] = max(out.get(t, 0), free)
    return dict(sorted(out.items()))


def _racks(cluster: Cluster) -> list[DomainSummary]:
    """The cluster's multi-node NVLink domains, most free GPUs first."""
    out = []
    for d in cluster.network.nvlink_domains:
        trays = [cluster.node_by_name[m] for m in d.nodes]
        out.append(DomainSummary(
            name=d.name, nodes=len(trays), gpus=sum(n.gpu_count for n in trays),
            free_gpus=sum(n.free_count for n in trays),
            whole_free_nodes=sum(n.free_count == n.gpu_count for n in trays)))
    return sorted(out, key=lambda d: (-d.free_gpus, d.name))


def _tiers(cluster: Cluster) -> list[TierSummary]:
    network = cluster.network
    by_name = cluster.node_by_name
    tiers = []
    for radius in network.radii:
        domains = []
        for name, members in network.domains(radius).items():
            nodes = [by_name[m] for m in members if m in by_name]
            domains.append(DomainSummary(
                name=name, nodes=len(nodes), gpus=sum(n.gpu_count for n in nodes),
                free_gpus=sum(n.free_count for n in nodes),
                whole_free_nodes=sum(n.free_count == n.gpu_count for n in nodes)))
        domains.sort(key=lambda d: (-d.free_gpus, d.name))
        tiers.append(TierSummary(tier=(radius + 1) // 2, radius=radius,
                                 domain_count=len(domains), domains=domains))
    return tiers


def summarize_cluster(cluster: Cluster) -> ClusterSummary:
    """GPU state, domains per tier, fragmentation and NVLink headroom of one cluster."""
    return ClusterSummary(
        name=cluster.name, region=cluster.region, fabric=cluster.network.kind,
        nodes=len(cluster.nodes), gpus_by_type=_by_type(cluster.nodes), tiers=_tiers(cluster),
        fragmentation=fragmentation(cluster.nodes),
        largest_free_nvlink_set=_largest_sets(cluster.nodes, [cluster]),
        nvlink_domains=_racks(cluster),
    )


def summarize(instance: Instance) -> InstanceSummary:
    """GPU state, domains per tier, fragmentation and NVLink headroom of an instance."""
    nodes = [n for c in instance.clusters for n in c.nodes]
    description, source = describe(instance)
    return InstanceSummary(
        name=instance.name, description=description, source=source, model=instance.spec.model,
        gpus_by_type=_by_type(nodes), fragmentation=fragmentation(nodes),
        largest_free_nvlink_set=_largest_sets(nodes, instance.clusters),
        clusters=[summarize_cluster(c) for c in instance.clusters],
        inter_cluster_links=[
            InterClusterLinkSummary(a=link.a, b=link.b, gbps=link.gbps,
                                    latency_ms=link.latency_ms)
            for link in instance.spec.inter_cluster_links],
        running_jobs=len(instance.running_jobs()),
        pending_jobs=len(instance.jobs),
        pending_gpus=sum(j.total_gpus for j in instance.jobs),
    )
