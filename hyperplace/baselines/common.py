"""What the peer baselines share: queue order, pods, topology levels, free GPUs, plan output.

The baselines re-implement the rules of Volcano, Kueue TAS and Slurm's tree plugin from
their source (each module cites file and line). They see what those systems see, and no
more:

* GPU type and memory: yes (node labels / resource flavors / gres types select them).
* GPU *counts* per node and the switch tree (HyperNode tiers, topology levels, switches).
* NVLink cliques: the scheduler does not; the component that hands out device indices on
  the node decides which GPUs a pod gets (``gpu_choice``: NVIDIA's device plugin for the
  Kubernetes peers, Slurm's gres selection for Slurm). On NVSwitch nodes any choice is
  equally good; on DGX-1 (hybrid cube mesh) nodes it decides whether a 4-GPU pod gets an
  NVLink clique, and no peer can ask for one.
* Link bandwidths: no (Slurm documents that ``LinkSpeed`` is unused; tiers are ranks).

Pods (the modelling choice every baseline shares): a gang unit of ``g`` GPUs becomes one pod
asking for ``g`` GPUs when ``g`` is at most the size of the largest node that suits it
(type and memory), else ``ceil(g / size)`` pods of ``size`` GPUs (the last one takes the
remainder). That is how people write these jobs for Kubernetes (one pod per TP group or per
node, GPUs as an extended resource), and it means a pod never spans nodes. Pods request
only ``nvidia.com/gpu``: CPU and memory are not modelled, which matters for the scoring
plugins that weigh only CPU and memory by default (see ``volcano``).

Queue order is the same for all: priority descending, then queue (creation) order.
Volcano's DRF share is not modelled (one queue, one tenant).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hyperplace.baselines.gpu_choice import CHOOSERS
from hyperplace.models import (
    Cluster,
    GangUnit,
    GPUCatalog,
    Instance,
    Node,
    PlacementPlan,
    TrainingJob,
)
from hyperplace.models.plan import GPURef
from hyperplace.models.plan_builder import PlanBuilder
from hyperplace.models.result import SolveStatus

INF_RADIUS = 10**9


def queue_order(instance: Instance) -> list[TrainingJob]:
    """Priority descending, then the order jobs were queued (stable sort)."""
    return sorted(instance.jobs, key=lambda j: -j.priority)


@dataclass(frozen=True)
class Pod:
    """One Kubernetes pod (or Slurm task) of a unit: ``gpus`` GPUs on one node."""

    unit: GangUnit
    index: int
    gpus: int


def suits(unit: GangUnit, node: Node, catalog: GPUCatalog) -> bool:
    """Type selector and memory: the part of a unit's request labels can express."""
    t = catalog.get(node.gpu_type)
    if unit.gpu_types is not None and not t.matches(unit.gpu_types):
        return False
    return t.hbm_gb >= unit.min_memory_gb


def pods_for(unit: GangUnit, node_size: int) -> list[Pod]:
    """The unit as pods: one when it fits a node, else node-sized pods plus a remainder."""
    if node_size <= 0:
        return []
    if unit.gpus <= node_size:
        return [Pod(unit, 0, unit.gpus)]
    full, rest = divmod(unit.gpus, node_size)
    sizes = [node_size] * full + ([rest] if rest else [])
    return [Pod(unit, i, s) for i, s in enumerate(sizes)]


@dataclass
class Level:
    """One level of a cluster's topology tree: hop radius and its domains (node lists)."""

    radius: int
    domains: list[tuple[str, list[str]]]


def _clique_level(cluster: Cluster, order: list[str], pos: dict[str, int]) -> Level | None:
    """The NVLink domains as a level between the node and the leaf (radius 0: trays of one
    domain are 0 hops apart), other nodes each a domain of their own; None without domains,
    or when a domain straddles two leaves (the levels must nest)."""
    net = cluster.network
    if not net.nvlink_domains:
        return None
    radii = net.radii
    for d in net.nvlink_domains:
        if radii and len({net.node_domain(n, radii[0]) for n in d.nodes}) > 1:
            return None
    doms = [(f"nvl:{d.name}", sorted(d.nodes, key=pos.__getitem__)) for d in net.nvlink_domains]
    held = {n for d in net.nvlink_domains for n in d.nodes}
    doms += [(f"node:{n}", [n]) for n in order if n not in held]
    doms.sort(key=lambda d: pos[d[1][0]])
    return Level(0, doms)


class ClusterView:
    """A cluster's topology levels (node -> leaf -> ... -> cluster), computed once.

    Level 0 is the node itself (radius 0), then one level per hop radius of the fabric
    (1 = leaf switch, 3 = spine/pod, ...), and the whole cluster on top. These are Volcano's
    HyperNode tiers, Kueue's topology levels and Slurm's switch levels alike.
    """

    def __init__(self, cluster: Cluster, catalog: GPUCatalog):
        self.cluster = cluster
        self.catalog = catalog
        self.nodes = {n.name: n for n in cluster.nodes}
        self._suits: dict[tuple[str | None, float, str], bool] = {}
        self._node_size: dict[tuple[str | None, float], int] = {}
        self.eligible_cache: dict[frozenset[tuple[str | None, float]], frozenset[str]] = {}
        order = [n.name for n in cluster.nodes]
        self.levels: list[Level] = [Level(0, [(n, [n]) for n in order])]
        network = cluster.network
        pos = {n: i for i, n in enumerate(order)}
        #: level index of the NVLink domains (racks; Kueue's clique level, Volcano's NVL72
        #: tier, Slurm's blocks), None without multi-node NVLink domains (#24)
        self.clique_level: int | None = None
        cliques = _clique_level(cluster, order, pos)
        if cliques is not None:
            self.levels.append(cliques)
            self.clique_level = 1
        for radius in network.radii:
            found = network.domains(radius)
            seen = {n for nodes in found.values() for n in nodes}
            doms = [(name, sorted((n for n in nodes if n in pos), key=pos.__getitem__))
                    for name, nodes in found.items()]
            doms += [(f"node:{n}", [n]) for n in order if n not in seen]
            doms = [d for d in doms if d[1]]
            doms.sort(key=lambda d: pos[d[1][0]])
            self.levels.append(Level(radius, doms))
        if len(self.levels[-1].domains) > 1 or len(self.levels) == 1:
            self.levels.append(Level(INF_RADIUS, [(f"cluster:{cluster.name}", order)]))
        # node -> index of its domain, per level (and as arrays in node order)
        self.order = order
        self.index = {n: i for i, n in enumerate(order)}
        self.member: list[dict[str, int]] = [
            {n: i for i, (_, nodes) in enumerate(level.domains) for n in nodes}
            for level in self.levels]
        self.member_idx = [np.array([m[n] for n in order], dtype=np.int64) for m in self.member]
        self.allocatable = np.array(
            [self.nodes[n].gpu_count - len(self.nodes[n].faulty) for n in order], dtype=float)
        # level -> domain -> its child domains one level down
        self.children: list[list[list[int]]] = [[[] for _ in self.levels[0].domains]]
        for lv in range(1, len(self.levels)):
            kids: list[list[int]] = [[] for _ in self.levels[lv].domains]
            for j, (_, nodes) in enumerate(self.levels[lv - 1].domains):
                kids[self.member[lv][nodes[0]]].append(j)
            self.children.append(kids)
        # HyperNode tiers: the fabric's levels (1 = leaf), not the artificial cluster level
        self.hypernode_levels: list[int] = [
            i for i, level in enumerate(self.levels) if 0 < i and level.radius != INF_RADIUS]

    def unit_hops(self, unit: GangUnit) -> int | None:
        """The hop limit a peer's user writes for ``unit`` (#24): on a cluster with NVLink
        domains, 0 (the clique level: Kueue ``podset-required-topology:
        nvidia.com/gpu.clique``, Volcano ``highestTierAllowed`` of the NVL72 tier, a KAI
        segment) for a slice or a unit larger than a node that asks for NVLink or one node;
        else the unit's own ``maxHopCount``."""
        if self.clique_level is not None and (unit.slice_pods or (
                unit.gpus > self.node_size(unit) and
                (unit.min_nvlink_gbps > 0 or unit.max_hop_count == 0))):
            return 0
        return unit.max_hop_count

    def lca_level(self, a: str, b: str) -> int | None:
        """Lowest level with one domain holding both nodes (None: none below the cluster)."""
        for i, member in enumerate(self.member):
            if member[a] == member[b]:
                return i
        return None

    def suits(self, unit: GangUnit, node: Node) -> bool:
        """:func:`suits`, memoised by (selector, memory, node type): asked millions of times."""
        key = (unit.gpu_types, unit.min_memory_gb, node.gpu_type)
        hit = self._suits.get(key)
        if hit is None:
            hit = self._suits[key] = suits(unit, node, self.catalog)
        return hit

    def level_for_hops(self, max_hops: int | None) -> int:
        """Highest level whose domains keep every node pair within ``max_hops``."""
        if max_hops is None:
            return len(self.levels) - 1
        best = 0
        for i, level in enumerate(self.levels):
            if level.radius <= max_hops:
                best = i
        return best

    def leaf_level(self) -> int:
        return 1 if len(self.levels) > 1 else 0

    def node_size(self, unit: GangUnit) -> int:
        """GPUs of the largest node that suits the unit: the biggest pod it can ask for."""
        key = (unit.gpu_types, unit.min_memory_gb)
        if key not in self._node_size:
            self._node_size[key] = max(
                (n.gpu_count for n in self.nodes.values() if self.suits(unit, n)), default=0)
        return self._node_size[key]


class FreeState:
    """Free GPU indices per node (ascending), updated as pods are bound.

    ``chooser`` names the rule that picks a pod's GPU indices on its node
    (``gpu_choice.CHOOSERS``: ``device-plugin``, ``slurm-gres``, ``lowest-index``). The
    over-time simulation keeps one of these per cluster state and calls :meth:`release`
    when a job ends.
    """

    def __init__(self, instance: Instance, chooser: str = "device-plugin"):
        self.nodes: dict[str, Node] = {n.name: n for c in instance.clusters for n in c.nodes}
        self.catalog = instance.catalog
        self.chooser = chooser
        self.free: dict[str, list[int]] = {name: list(n.free_gpus) for name, n in self.nodes.items()}
        self.used: dict[str, int] = {name: len(n.allocated) for name, n in self.nodes.items()}
        self.allocatable: dict[str, int] = {
            name: n.gpu_count - len(n.faulty) for name, n in self.nodes.items()}
        # quota (GPUs) reserved per cluster by admitted jobs whose pods are not bound
        self.reserved: dict[str, int] = {}
        # job name -> seconds it has waited (the over-time simulation sets it; rules with a
        # time-based relaxation read it: Slurm's max_switch_wait)
        self.waited_s: dict[str, float] = {}

    def copy(self, nodes: list[str] | None = None) -> FreeState:
        """A scratch copy (of ``nodes`` only, when given) for dry runs."""
        out = FreeState.__new__(FreeState)
        keys = nodes if nodes is not None else list(self.free)
        out.nodes = self.nodes
        out.catalog = self.catalog
        out.chooser = self.chooser
        out.free = {n: list(self.free[n]) for n in keys}
        out.used = {n: self.used[n] for n in keys}
        out.allocatable = {n: self.allocatable[n] for n in keys}
        out.reserved = dict(self.reserved)
        out.waited_s = self.waited_s
        return out

    def count(self, node: str) -> int:
        return len(self.free[node])

    def choose(self, node: str, k: int) -> list[int]:
        """The ``k`` GPUs the node's device manager would hand out now (not taken yet)."""
        return CHOOSERS[self.chooser](self.nodes[node], tuple(self.free[node]), k, self.catalog)

    def take(self, node: str, k: int) -> list[int]:
        """Bind ``k`` GPUs of ``node`` to a pod, chosen by :attr:`chooser`; returns them."""
        got = self.choose(node, k)
        self.hold(node, got)
        return got

    def hold(self, node: str, gpus: list[int]) -> None:
        """Mark ``gpus`` of ``node`` busy (they must be free)."""
        taken = set(gpus)
        missing = taken - set(self.free[node])
        if missing:
            raise ValueError(f"GPUs {sorted(missing)} of {node} are not free")
        self.free[node] = [g for g in self.free[node] if g not in taken]
        self.used[node] += len(taken)

    def release(self, node: str, gpus: list[int]) -> None:
        """Give ``gpus`` of ``node`` back (a job ended)."""
        back = set(gpus) - set(self.free[node])
        self.free[node] = sorted(set(self.free[node]) | back)
        self.used[node] -= len(back)

    def commit(self, other: FreeState) -> None:
        """Adopt a dry run's state for the nodes it covers."""
        for n in other.free:
            self.free[n] = other.free[n]
            self.used[n] = other.used[n]
        self.reserved = dict(other.reserved)


@dataclass
class JobOutcome:
    """A baseline's decision for one job: unit name -> GPUs, or the reasons it is pending.

    ``held``: GPUs bound to pods of a job that is *not* running (a partly bound job whose
    other pods found no node); they stay busy in the state and serve nobody.
    """

    units: dict[str, list[GPURef]] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    held: list[GPURef] = field(default_factory=list)

    @property
    def placed(self) -> bool:
        return bool(self.units)


def eligible_nodes(view: ClusterView, units: list[GangUnit]) -> set[str]:
    """Nodes with a GPU type and memory that at least one of the units accepts."""
    kinds = {(u.gpu_types, u.min_memory_gb): u for u in units}
    key = frozenset(kinds)
    if key not in view.eligible_cache:
        view.eligible_cache[key] = frozenset(
            n for n, node in view.nodes.items() if any(view.suits(u, node) for u in kinds.values()))
    return set(view.eligible_cache[key])


PlaceJob = Callable[[TrainingJob, FreeState, list[ClusterView], random.Random], JobOutcome]


def run_baseline(instance: Instance, solver: str, place_job: PlaceJob, seed: int = 0,
                 chooser: str = "device-plugin") -> PlacementPlan:
    """Place jobs one at a time in queue order with ``place_job``; never revisit a decision.

    ``seed`` drives the peer's random tie-breaking (Volcano); rules without randomness
    ignore it.
    """
    start = time.perf_counter()
    views = [ClusterView(c, instance.catalog) for c in instance.clusters]
    state = FreeState(instance, chooser)
    rng = random.Random(seed)
    outcomes: dict[str, JobOutcome] = {}
    for job in queue_order(instance):
        outcomes[job.name] = place_job(job, state, views, rng)
    plan = build_plan(instance, solver, outcomes, time.perf_counter() - start)
    return plan.model_copy(update={"message": f"{plan.message}; seed {seed}"})


def build_plan(instance: Instance, solver: str, outcomes: dict[str, JobOutcome],
               runtime_s: float) -> PlacementPlan:
    """Placements, per-job summaries (with a Kueue-style topology assignment) and reasons
    (the one plan builder, :class:`~hyperplace.models.plan_builder.PlanBuilder`)."""
    b = PlanBuilder(instance)
    held = sum(len(o.held) for o in outcomes.values())
    for job in instance.jobs:
        outcome = outcomes.get(job.name)
        if outcome is None or not outcome.units:
            b.wait(job.name, outcome.reasons if outcome and outcome.reasons else ["not considered"])
            continue
        units = [(unit.name, outcome.units[unit.name]) for unit in job.units()]
        b.place(job.name, job.priority, units, sort_nodes=False,
                topology=b.host_topology([g for _, refs in units for g in refs]))
    return b.build(solver, status=SolveStatus.FEASIBLE, solver=solver, runtime_s=runtime_s,
                   objective_terms={"held_gpus": held} if held else {},
                   message="one job at a time in queue order; no bound")


def ceil_div(a: int, b: int) -> int:
    return math.ceil(a / b) if b else 0
