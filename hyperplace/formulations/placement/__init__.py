"""The placement formulation: a scheduling round as backend-independent problem data.

Written once; :mod:`hyperplace.solvers.cpsat` and :mod:`hyperplace.solvers.milp` encode the
same :class:`~hyperplace.formulations.linear.LinearModel`, and
:mod:`hyperplace.solvers.greedy` works on the same :class:`PlacementProblem`.

Modelling choices (see ``docs`` in the README):

* **Pieces.** A gang unit of at most one node's GPUs is one *piece*: GPUs of one node, like
  one pod. A larger unit (a 16-GPU TP group on 8-GPU nodes) is split into node-sized pieces
  that must sit in one domain of the radius its ``maxHopCount`` allows.
* **NVLink.** A piece of a unit with ``minNVLinkBandwidthGbpsPerPair`` must be a clique of
  free GPUs whose every pair has at least that bandwidth. On NVSwitch nodes any free GPUs
  qualify (if the node's pair bandwidth is high enough); on hybrid-cube-mesh, PCIe or
  explicit nodes the model chooses among the actual cliques.
* **Folding.** Uniform nodes with the same cluster, leaf domain, GPU type, free count and
  state are one *node class* with a multiplicity; per class the model counts pieces by size.
  With piece sizes that divide each other (1, 2, 4, 8) the per-size capacity rows below are
  exact (bin packing with divisible sizes); otherwise they are a relaxation and the mapping
  back drops a job whose pieces do not pack (the plan stays valid and says so).
* **Domains.** ``maxHopCount`` h maps to the fabric tier of the largest radius <= h: all
  pieces of a unit, or all units of a job (the DataParallel group's connectivity), lie in one
  domain of that tier. No unit or job crosses a cluster boundary in this formulation.

Objectives, strictly lexicographic:
1. maximise priority-weighted admitted GPUs (:mod:`~hyperplace.formulations.priority`; one
   phase per tier of priority levels, see :attr:`PlacementProblem.priority_tiers`);
   then, among plans that tie on it, admit the most jobs (fewer people left waiting);
2. minimise communication cost: leaf and spine domains each job touches, weighted by its
   traffic (multi-node TP 100, PP 10, DP 1);
3. minimise fragmentation: whole free nodes opened (x1) and whole free leaf domains opened
   (x8), so partly used domains fill first and whole domains stay free for large jobs;
4. policy: ``performance`` prefers the fastest GPU type that qualifies, ``cost`` the cheapest.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from functools import cached_property
from itertools import combinations

from hyperplace.formulations.linear import LinearModel, Objective
from hyperplace.formulations.priority import priority_weights
from hyperplace.models.cluster import Cluster
from hyperplace.models.gpu import GPUType
from hyperplace.models.instance import Instance
from hyperplace.models.job import GangUnit, GroupType, TrainingJob
from hyperplace.models.node import Node

TRAFFIC_WEIGHT = {"tp": 100, "pp": 10, "dp": 1}
LEAF_OPEN_WEIGHT = 8
MAX_CLIQUE_ENUM = 5000  # cliques per (node, size, bandwidth) before we stop enumerating


# ---------------------------------------------------------------------------------------
# Views of nodes and jobs
# ---------------------------------------------------------------------------------------

@dataclass
class NodeView:
    index: int
    node: Node
    cluster: Cluster
    gpu_type: GPUType
    free: tuple[int, ...]
    pair_gbps: dict[tuple[int, int], float]
    uniform_gbps: float | None  # the pair bandwidth when every pair has the same
    attach_gbps: float | None  # slowest link from the node into the fabric
    leaf: str  # radius-1 domain key (the node itself when it is not on a fabric)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def fully_free(self) -> bool:
        return len(self.free) == self.node.gpu_count

    def bw(self, a: int, b: int) -> float:
        return self.pair_gbps[(a, b) if a < b else (b, a)]

    def partition(self, combo: tuple[int, ...], parts: tuple[int, ...], min_gbps: float
                  ) -> list[tuple[int, ...]] | None:
        """Split ``combo`` into cliques of the sizes in ``parts`` (each pair >= min_gbps)."""
        if not combo:
            return [] if not parts else None
        g, rest = combo[0], combo[1:]
        for p in sorted(set(parts)):
            left = list(parts)
            left.remove(p)
            for mates in combinations(rest, p - 1):
                group = (g, *mates)
                if all(self.bw(a, b) >= min_gbps for a, b in combinations(group, 2)):
                    remaining = tuple(x for x in rest if x not in mates)
                    tail = self.partition(remaining, tuple(left), min_gbps)
                    if tail is not None:
                        return [group, *tail]
        return None

    def _partitions(self, combo: tuple[int, ...], parts: tuple[int, ...], min_gbps: float) -> bool:
        return self.partition(combo, parts, min_gbps) is not None

    def cliques(self, size: int, min_gbps: float, gpus: tuple[int, ...] | None = None,
                parts: tuple[int, ...] | None = None) -> list[tuple[int, ...]]:
        """Sets of ``size`` free GPUs whose every pair has at least ``min_gbps``; with
        ``parts``, sets that split into cliques of those sizes (units sharing one node).
        Cached per (size, floor, parts, pool): the model, greedy and explanations ask the
        same questions many times."""
        pool = self.free if gpus is None else gpus
        key = (size, min_gbps, parts, pool)
        cache = self.__dict__.setdefault("_clique_cache", {})
        if key in cache:
            return cache[key]
        if size == 1 or (min_gbps <= 0 and not parts):
            out = list(combinations(pool, size))[:MAX_CLIQUE_ENUM]
        else:
            out = []
            for combo in combinations(pool, size):
                ok = (self._partitions(combo, parts, min_gbps) if parts and len(parts) > 1 else
                      all(self.bw(a, b) >= min_gbps for a, b in combinations(combo, 2)))
                if ok:
                    out.append(combo)
                    if len(out) >= MAX_CLIQUE_ENUM:
                        break
        cache[key] = out
        return out

    def max_disjoint(self, size: int, min_gbps: float, gpus: tuple[int, ...] | None = None,
                     parts: tuple[int, ...] | None = None) -> int:
        pool = self.free if gpus is None else gpus
        if self.uniform_gbps is not None:
            needs_links = size > 1 and (not parts or max(parts) > 1)
            return len(pool) // size if (not needs_links or self.uniform_gbps >= min_gbps) else 0
        best = 0

        def grow(avail: tuple[int, ...], count: int) -> None:
            nonlocal best
            best = max(best, count)
            if count + len(avail) // size <= best:
                return
            cl = self.cliques(size, min_gbps, avail, parts)
            if not cl:
                return
            first = cl[0][0]
            for c in cl:
                if c[0] != first:
                    break
                grow(tuple(g for g in avail if g not in c), count + 1)
            grow(tuple(g for g in avail if g != first), count)

        grow(pool, 0)
        return best


@dataclass
class UnitClass:
    """Identical units of one job (one resource group over its replicas)."""

    index: int
    job: int
    group: str
    group_type: GroupType
    units: list[GangUnit]
    size: int
    pieces: list[int]  # piece sizes of one unit, largest first
    hop_limit: int | None  # for multi-piece units; None = the job's domain
    gpu_types: str | None
    min_memory_gb: float
    min_nvlink_gbps: float
    min_ib_gbps: float
    parts: tuple[int, ...] | None = None  # whole-job piece: the unit sizes sharing the node

    @property
    def count(self) -> int:
        """How many times the piece pattern is placed (a whole-job piece: once)."""
        return 1 if self.parts else len(self.units)

    @property
    def multi_node(self) -> bool:
        return len(self.pieces) > 1

    def split_whole(self, node: "NodeView", gpus: tuple[int, ...]
                    ) -> list[tuple[GangUnit, tuple[int, ...]]]:
        """The GPUs of a whole-job piece, handed to its units so each unit is a clique."""
        groups = node.partition(tuple(sorted(gpus)), self.parts or (len(gpus),),
                                self.min_nvlink_gbps) or []
        out = []
        for u in sorted(self.units, key=lambda u: -u.gpus):
            k = next(i for i, grp in enumerate(groups) if len(grp) == u.gpus)
            out.append((u, groups.pop(k)))
        return out


@dataclass
class JobView:
    index: int
    job: TrainingJob
    priority: int
    gpus: int
    hop_limit: int | None  # between replicas; None = anywhere in one cluster
    min_ib_gbps: float
    classes: list[UnitClass] = field(default_factory=list)
    impossible: list[str] = field(default_factory=list)  # reasons known before solving

    @property
    def name(self) -> str:
        return self.job.name

    @property
    def num_pieces(self) -> int:
        return sum(len(c.pieces) * c.count for c in self.classes)

    @property
    def traffic_weight(self) -> int:
        if any(c.multi_node and c.group_type == GroupType.TENSOR_PARALLEL for c in self.classes):
            return TRAFFIC_WEIGHT["tp"]
        if any(c.group_type == GroupType.PIPELINE_PARALLEL for c in self.classes):
            return TRAFFIC_WEIGHT["pp"]
        return TRAFFIC_WEIGHT["dp"]


@dataclass
class NodeClass:
    """Interchangeable nodes (or one node, when its GPU graph is not uniform)."""

    index: int
    nodes: list[NodeView]
    leaf: str

    @property
    def rep(self) -> NodeView:
        return self.nodes[0]

    @property
    def multiplicity(self) -> int:
        return len(self.nodes)

    @property
    def free_per_node(self) -> int:
        return len(self.rep.free)

    @property
    def uniform(self) -> bool:
        return self.rep.uniform_gbps is not None


# ---------------------------------------------------------------------------------------
# The problem
# ---------------------------------------------------------------------------------------

def _radius_for(cluster: Cluster, hop_limit: int | None) -> int | None:
    """Fabric radius for a hop limit: None = whole cluster, 0 = one node."""
    if hop_limit is None:
        return None
    radii = cluster.network.radii
    fitting = [r for r in radii if r <= hop_limit]
    if not fitting:
        return 0
    if fitting[-1] == radii[-1] and len(cluster.network.domains(radii[-1])) <= 1:
        return None
    return fitting[-1]


class PlacementProblem:
    """Everything a backend needs, derived once from an :class:`Instance`."""

    def __init__(self, instance: Instance, policy: str = "performance"):
        if policy not in ("performance", "cost"):
            raise ValueError(f"unknown policy {policy!r}; use performance or cost")
        self.instance = instance
        self.policy = policy
        self.catalog = instance.catalog
        self.nodes: list[NodeView] = []
        for cluster in instance.clusters:
            net = cluster.network
            for node in cluster.nodes:
                t = self.catalog.get(node.gpu_type)
                pairs = node.pair_bandwidths(t.nvlink_per_link_gbps, t.nvlink_gbps, t.pcie_gbps)
                values = set(pairs.values())
                uniform = next(iter(values)) if len(values) == 1 else (
                    math.inf if not pairs else None)
                att = net.attachments.get(node.name)
                leaf = net.node_domain(node.name, 1) if att else None
                self.nodes.append(NodeView(
                    index=len(self.nodes), node=node, cluster=cluster, gpu_type=t,
                    free=node.free_gpus, pair_gbps=pairs, uniform_gbps=uniform,
                    attach_gbps=min(att.values()) if att else None,
                    leaf=f"{cluster.name}/{leaf}" if leaf else f"{cluster.name}/node:{node.name}",
                ))
        self.node_by_name = {n.name: n for n in self.nodes}
        self.max_gpus_per_node = max((n.node.gpu_count for n in self.nodes), default=0)
        self.free_gpus = sum(len(n.free) for n in self.nodes)
        self.jobs: list[JobView] = []
        self.classes: list[UnitClass] = []
        for job in instance.jobs:
            self._add_job(job)
        self.weights = priority_weights(((j.priority, j.gpus) for j in self.jobs), self.free_gpus)
        self._domain_cache: dict[tuple[str, int | None], str] = {}

    # ---- jobs -------------------------------------------------------------------
    def _add_job(self, job: TrainingJob) -> None:
        units = job.units()
        between = job.between_replicas
        jv = JobView(index=len(self.jobs), job=job, priority=job.priority,
                     gpus=sum(u.gpus for u in units), hop_limit=between.max_hop_count,
                     min_ib_gbps=between.min_infiniband_bandwidth_gbps)
        by_group: dict[str, list[GangUnit]] = defaultdict(list)
        for u in units:
            by_group[u.group].append(u)
        g_max = self._max_node_gpus_for(units[0]) if units else 0
        # The fabric cannot give the bandwidth asked between nodes: the job can still run if
        # it all fits on one node (then no fabric link is used).
        fabric_best = self._best_link_gbps(units)
        ib_unreachable = jv.min_ib_gbps > fabric_best and len(units) > 1
        if ib_unreachable and jv.gpus > self.max_gpus_per_node:
            jv.impossible.append(
                f"needs >= {jv.min_ib_gbps:g} Gb/s between its nodes "
                f"(minInfiniBandBandwidthGbps), but the fastest node link of its GPU types is "
                f"{fabric_best:g} Gb/s, and its {jv.gpus} GPUs do not fit on one node")
        if jv.hop_limit == 0 or ib_unreachable:
            # the whole job on one node: one piece holding every unit
            strictest = max(units, key=lambda u: (u.min_nvlink_gbps, u.min_memory_gb))
            if jv.gpus > self.max_gpus_per_node and not ib_unreachable:
                jv.impossible.append(
                    f"all {jv.gpus} GPUs must share one node (maxHopCount 0 between replicas), "
                    f"but nodes have at most {self.max_gpus_per_node} GPUs")
            jv.hop_limit = 0
            jv.min_ib_gbps = 0.0
            self._add_class(jv, group="(whole job)", gtype=strictest.group_type, units=units,
                            size=jv.gpus, pieces=[jv.gpus], hop=None, proto=strictest,
                            min_mem=max(u.min_memory_gb for u in units))
        else:
            for group, us in by_group.items():
                proto = us[0]
                g_node = self._max_node_gpus_for(proto) or g_max or self.max_gpus_per_node or 1
                if proto.gpus <= g_node:
                    pieces = [proto.gpus]
                else:
                    full, rest = divmod(proto.gpus, g_node)
                    pieces = [g_node] * full + ([rest] if rest else [])
                    if proto.max_hop_count == 0:
                        jv.impossible.append(
                            f"group {group} needs {proto.gpus} GPUs with maxHopCount 0 (one node), "
                            f"but the largest eligible node has {g_node} GPUs")
                for u in us:
                    if u.gpus != proto.gpus:
                        raise AssertionError("units of one group differ in size")
                self._add_class(jv, group=group, gtype=proto.group_type, units=us,
                                size=proto.gpus, pieces=pieces, hop=proto.max_hop_count,
                                proto=proto, min_mem=proto.min_memory_gb)
        self.jobs.append(jv)

    def _add_class(self, jv: JobView, *, group: str, gtype: GroupType, units: list[GangUnit],
                   size: int, pieces: list[int], hop: int | None, proto: GangUnit,
                   min_mem: float) -> None:
        whole = group == "(whole job)"
        uc = UnitClass(index=len(self.classes), job=jv.index, group=group, group_type=gtype,
                       units=list(units), size=size, pieces=sorted(pieces, reverse=True),
                       hop_limit=hop, gpu_types=proto.gpu_types, min_memory_gb=min_mem,
                       min_nvlink_gbps=proto.min_nvlink_gbps, min_ib_gbps=proto.min_ib_gbps,
                       parts=tuple(sorted((u.gpus for u in units), reverse=True)) if whole else None)
        self.classes.append(uc)
        jv.classes.append(uc)

    def _best_link_gbps(self, units: list[GangUnit]) -> float:
        """Fastest node link into the fabric among nodes of the units' GPU types."""
        ok = frozenset().union(*(self.eligible_types(u.gpu_types, u.min_memory_gb) for u in units))
        cache = self.__dict__.setdefault("_best_link_cache", {})
        if ok not in cache:
            cache[ok] = max((n.attach_gbps or 0.0 for n in self.nodes if n.gpu_type.name in ok),
                            default=0.0)
        return cache[ok]

    def _max_node_gpus_for(self, unit: GangUnit) -> int:
        ok = self.eligible_types(unit.gpu_types, unit.min_memory_gb)
        return max((self.max_gpus_by_type[t] for t in ok), default=0)

    # ---- eligibility --------------------------------------------------------------
    @cached_property
    def types_present(self) -> dict[str, GPUType]:
        return {n.gpu_type.name: n.gpu_type for n in self.nodes}

    @cached_property
    def max_gpus_by_type(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.gpu_type.name] = max(out.get(n.gpu_type.name, 0), n.node.gpu_count)
        return out

    def eligible_types(self, selector: str | None, min_mem: float) -> frozenset[str]:
        """Names of the GPU types present that match a selector and a memory floor."""
        key = (selector, min_mem)
        cache = self.__dict__.setdefault("_eligible_cache", {})
        if key not in cache:
            cache[key] = frozenset(
                name for name, t in self.types_present.items()
                if (not selector or t.matches(selector)) and t.hbm_gb + 1e-9 >= min_mem)
        return cache[key]

    def type_ok(self, selector: str | None, min_mem: float, n: NodeView) -> bool:
        return n.gpu_type.name in self.eligible_types(selector, min_mem)

    def piece_capacity(self, uc: UnitClass, piece: int, n: NodeView) -> int:
        """How many pieces of this size and class fit on the node's free GPUs."""
        if not self.type_ok(uc.gpu_types, uc.min_memory_gb, n) or piece > len(n.free):
            return 0
        return n.max_disjoint(piece, uc.min_nvlink_gbps, parts=uc.parts)

    def needs_fabric(self, jv: JobView) -> bool:
        return jv.num_pieces > 1

    def domain(self, n: NodeView, hop_limit: int | None, *, job_level: bool = False) -> str:
        """Key of the domain a node belongs to for a hop limit (cluster-qualified)."""
        key = (n.name, hop_limit)
        d = self._domain_cache.get(key)
        if d is None:
            r = _radius_for(n.cluster, hop_limit)
            if r is None:
                d = n.cluster.name
            elif r == 0 or n.attach_gbps is None:
                d = f"{n.cluster.name}/node:{n.name}"
            else:
                d = f"{n.cluster.name}/{n.cluster.network.node_domain(n.name, r)}"
            self._domain_cache[key] = d
        return d

    def domain_bandwidth(self, members: list[NodeView]) -> float:
        """A lower bound on the bottleneck Gb/s between any two nodes of a domain.

        Within one leaf group it is the slowest node link; across leaf groups the slowest
        switch-to-switch link of the cluster joins in. Conservative (it may turn a domain
        down that would do, never the reverse) and O(1) per domain instead of a widest-path
        search per pair; the checker still verifies every pair of a plan.
        """
        if len(members) <= 1:
            return math.inf
        if len({m.cluster.name for m in members}) > 1:
            return 0.0
        worst = min((m.attach_gbps or 0.0) for m in members)
        if len({m.leaf for m in members}) > 1:
            worst = min(worst, self._slowest_uplink(members[0].cluster))
        return worst

    def _slowest_uplink(self, cluster: Cluster) -> float:
        cache = self.__dict__.setdefault("_uplink_cache", {})
        if cluster.name not in cache:
            net = cluster.network
            sw = net.switch_names
            bws = [link.gbps * link.count for link in net.links if link.a in sw and link.b in sw]
            cache[cluster.name] = min(bws, default=0.0)
        return cache[cluster.name]

    # ---- priority tiers ----------------------------------------------------------------
    @cached_property
    def priority_tiers(self) -> list[list[int]]:
        """Priority levels grouped, highest first, into tiers whose weighted objective stays
        well inside integer and floating-point precision (< 2**40); each tier is one
        lexicographic phase. Three or four levels are one tier; many levels on a large
        cluster become several, instead of weights that overflow."""
        levels = sorted({jv.priority for jv in self.jobs}, reverse=True)
        demand: dict[int, int] = defaultdict(int)
        for jv in self.jobs:
            demand[jv.priority] += jv.gpus
        tiers: list[list[int]] = []
        for lvl in levels:
            if tiers:
                trial = [*tiers[-1], lvl]
                w = priority_weights(((q, demand[q]) for q in trial), self.free_gpus)
                if sum(w[q] * min(demand[q], self.free_gpus) for q in trial) < 2**40:
                    tiers[-1] = trial
                    continue
            tiers.append([lvl])
        return tiers

    @cached_property
    def tier_weights(self) -> dict[int, int]:
        """Weight of a GPU of each level inside its tier (lexicographic within the tier)."""
        demand: dict[int, int] = defaultdict(int)
        for jv in self.jobs:
            demand[jv.priority] += jv.gpus
        out: dict[int, int] = {}
        for tier in self.priority_tiers:
            out.update(priority_weights(((q, demand[q]) for q in tier), self.free_gpus))
        return out

    # ---- bundles of interchangeable jobs ------------------------------------------------
    @cached_property
    def bundles(self) -> list[list[int]]:
        """Jobs that are one single-node piece with identical requirements, grouped.

        Such jobs are interchangeable for every objective, so the model counts how many of a
        bundle run instead of deciding each one; the mapping back admits them in queue order.
        Every other job is a bundle of its own.
        """
        groups: dict[tuple, list[int]] = {}
        out: list[list[int]] = []
        for jv in self.jobs:
            if jv.num_pieces == 1 and not jv.impossible:
                uc = jv.classes[0]
                key = (jv.priority, uc.size, uc.gpu_types, uc.min_memory_gb, uc.min_nvlink_gbps,
                       uc.parts)
                if key in groups:
                    groups[key].append(jv.index)
                    continue
                groups[key] = [jv.index]
                out.append(groups[key])
            else:
                out.append([jv.index])
        return out

    # ---- node classes ----------------------------------------------------------------
    @cached_property
    def node_classes(self) -> list[NodeClass]:
        groups: dict[tuple, list[NodeView]] = defaultdict(list)
        for n in self.nodes:
            if not n.free:
                continue
            if n.uniform_gbps is not None and not n.leaf.split("/", 1)[1].startswith("node:"):
                key = ("u", n.cluster.name, n.leaf, n.gpu_type.name, n.node.gpu_count,
                       len(n.free), n.fully_free, n.uniform_gbps, n.attach_gbps)
            else:
                key = ("n", n.name)
            groups[key].append(n)
        return [NodeClass(index=i, nodes=ns, leaf=ns[0].leaf)
                for i, ns in enumerate(groups.values())]

    @cached_property
    def leaf_fully_free(self) -> dict[str, bool]:
        state: dict[str, bool] = {}
        for n in self.nodes:
            state[n.leaf] = state.get(n.leaf, True) and n.fully_free
        return state

    @cached_property
    def _penalties(self) -> dict[str, int]:
        types = self.types_present.values()
        if not types:
            return {}
        if self.policy == "performance":
            best = max(x.bf16_tflops * x.mfu for x in types)
            return {x.name: round(10 * (1 - (x.bf16_tflops * x.mfu) / best)) for x in types}
        worst = max(x.cost_per_hour for x in types) or 1.0
        return {x.name: round(10 * x.cost_per_hour / worst) for x in types}

    def policy_penalty(self, t: GPUType) -> int:
        """Per-GPU penalty of objective (4): 0 for the preferred type, up to 10."""
        return self._penalties[t.name]


# ---------------------------------------------------------------------------------------
# The linear model
# ---------------------------------------------------------------------------------------

@dataclass
class PieceVar:
    uclass: int
    piece: int  # piece size
    node_class: int
    var: int
    clique: tuple[int, ...] | None = None  # non-uniform nodes: the exact GPUs


@dataclass
class PlacementModel:
    """The encoded :class:`LinearModel` and the index maps needed to read a solution."""

    problem: PlacementProblem
    lm: LinearModel
    run: dict[int, int]  # bundle leader job -> var (how many jobs of the bundle run)
    bundles: dict[int, list[int]]  # bundle leader -> its jobs in queue order
    class_alias: dict[int, int]  # unit class of a bundled job -> the leader's unit class
    job_domain: dict[tuple[int, str], int]  # (job, domain) -> var
    unit_domain: dict[tuple[int, str], int]  # (class, domain) -> var
    pieces: list[PieceVar]
    touch: dict[tuple[int, str], int]  # (job, leaf or spine domain) -> var
    opened_nodes: dict[int, int]  # node class -> var
    opened_leaf: dict[str, int]
    objective_names: list[str]
    eligible_pieces: dict[int, list[PieceVar]] = field(default_factory=dict)
    # auxiliary = ceil(sum(coef * var) / divisor): how hints complete the auxiliaries
    aux_links: list[tuple[int, list[tuple[int, int]], int]] = field(default_factory=list)

    def complete(self, primary: dict[int, int]) -> list[int]:
        """A full assignment from primary values (run, domains, pieces), auxiliaries derived."""
        values = [0] * self.lm.num_vars
        for v, x in primary.items():
            values[v] = x
        for aux, terms, divisor in self.aux_links:
            total = sum(c * values[v] for v, c in terms)
            values[aux] = min(self.lm.ubs[aux], -(-total // divisor))
        return values


def build_model(problem: PlacementProblem) -> PlacementModel:
    """Encode the round as a lexicographic integer model."""
    lm = LinearModel()
    p = problem
    run: dict[int, int] = {}
    bundles = {b[0]: b for b in p.bundles}
    class_alias = {p.jobs[j].classes[0].index: p.jobs[b[0]].classes[0].index
                   for b in p.bundles if len(b) > 1 for j in b}
    job_domain: dict[tuple[int, str], int] = {}
    unit_domain: dict[tuple[int, str], int] = {}
    pieces: list[PieceVar] = []
    touch: dict[tuple[int, str], int] = {}
    per_class_pieces: dict[int, list[PieceVar]] = defaultdict(list)
    ncs = p.node_classes
    aux_links: list[tuple[int, list[tuple[int, int]], int]] = []
    # capacity rows per node class: size -> list of (var, gpus)
    cap_terms: dict[int, list[tuple[int, int]]] = defaultdict(list)  # (var, piece size)
    gpu_terms: dict[tuple[int, int], list[int]] = defaultdict(list)  # (class, gpu) -> vars

    obj_demand_by_level: dict[int, list[tuple[int, int]]] = defaultdict(list)
    obj_comm: list[tuple[int, int]] = []
    obj_frag: list[tuple[int, int]] = []
    obj_policy: list[tuple[int, int]] = []

    for j, bundle_jobs in bundles.items():
        jv = p.jobs[j]
        n_jobs = len(bundle_jobs)
        r = lm.var(f"run[{jv.name}]" + (f"+{n_jobs - 1}" if n_jobs > 1 else ""), 0, n_jobs)
        run[j] = r
        if jv.impossible:
            lm.eq([(r, 1)], 0, f"impossible[{jv.name}]")
            continue
        obj_demand_by_level[jv.priority].append((r, jv.gpus))
        spans = p.needs_fabric(jv)
        # eligible node classes per (class, piece size)
        elig: dict[tuple[int, int], list[tuple[NodeClass, int]]] = {}
        for uc in jv.classes:
            for size in sorted(set(uc.pieces)):
                lst = []
                for nc in ncs:
                    rep = nc.rep
                    if spans and jv.min_ib_gbps and (rep.attach_gbps or 0) < jv.min_ib_gbps:
                        continue
                    if uc.multi_node and uc.min_ib_gbps and (rep.attach_gbps or 0) < uc.min_ib_gbps:
                        continue
                    if uc.multi_node and uc.min_nvlink_gbps and not nc.uniform:
                        continue  # multi-node NVLink groups only on NVSwitch nodes (documented)
                    capn = p.piece_capacity(uc, size, rep)
                    if capn > 0:
                        lst.append((nc, capn))
                elig[(uc.index, size)] = lst
        # job domains
        dom_members: dict[str, list[NodeView]] = defaultdict(list)
        for (_, _), lst in elig.items():
            for nc, _ in lst:
                for n in nc.nodes:
                    dom_members[p.domain(n, jv.hop_limit, job_level=True)].append(n)
        cand_domains = []
        for d, in_domain in dom_members.items():
            uniq = {m.name: m for m in in_domain}
            if spans and jv.min_ib_gbps and p.domain_bandwidth(list(uniq.values())) < jv.min_ib_gbps:
                continue
            cand_domains.append(d)
        cand_set = set(cand_domains)
        zvars = {}
        if len(cand_domains) > 1 and jv.num_pieces > 1:  # one piece is always in one domain
            for d in sorted(cand_domains):
                zvars[d] = lm.bool(f"z[{jv.name},{d}]")
                job_domain[(j, d)] = zvars[d]
            lm.eq([(v, 1) for v in zvars.values()] + [(r, -1)], 0, f"onedomain[{jv.name}]")
        elif not cand_domains:
            lm.eq([(r, 1)], 0, f"nodomain[{jv.name}]")
            continue
        touched_leaf: dict[str, list[int]] = defaultdict(list)
        touched_spine: dict[str, list[int]] = defaultdict(list)
        for uc in jv.classes:
            # unit-level domains for multi-node units finer than the job's domain
            ydom: dict[str, int] = {}
            use_y = uc.multi_node and uc.hop_limit is not None and uc.hop_limit != jv.hop_limit
            class_vars: list[tuple[int, int]] = []
            by_size_vars: dict[int, list[tuple[int, NodeClass]]] = defaultdict(list)
            for size in sorted(set(uc.pieces)):
                for nc, capn in elig[(uc.index, size)]:
                    jd = p.domain(nc.rep, jv.hop_limit, job_level=True)
                    if jd not in cand_set:
                        continue
                    per_unit = uc.pieces.count(size)
                    if nc.uniform:
                        ub = min(n_jobs * uc.count * per_unit, capn * nc.multiplicity)
                        v = lm.var(f"k[{jv.name},{uc.group},{size},nc{nc.index}]", 0, ub)
                        pv = PieceVar(uc.index, size, nc.index, v)
                        pieces.append(pv)
                        per_class_pieces[uc.index].append(pv)
                        cap_terms[nc.index].append((v, size))
                        by_size_vars[size].append((v, nc))
                    else:
                        rep = nc.rep
                        for clique in rep.cliques(size, uc.min_nvlink_gbps, parts=uc.parts):
                            v = lm.bool(f"w[{jv.name},{uc.group},{rep.name},{clique}]")
                            pv = PieceVar(uc.index, size, nc.index, v, clique)
                            pieces.append(pv)
                            per_class_pieces[uc.index].append(pv)
                            for g in clique:
                                gpu_terms[(nc.index, g)].append(v)
                            by_size_vars[size].append((v, nc))
            for size in sorted(set(uc.pieces)):
                per_unit = uc.pieces.count(size)
                vs = by_size_vars.get(size, [])
                lm.eq([(v, 1) for v, _ in vs] + [(r, -uc.count * per_unit)], 0,
                      f"gang[{jv.name},{uc.group},{size}]")
                for v, nc in vs:
                    class_vars.append((v, nc.index))
                    n0 = nc.rep
                    touched_leaf[n0.leaf].append(v)
                    if n0.attach_gbps is not None and 3 in n0.cluster.network.radii:
                        touched_spine[p.domain(n0, 3)].append(v)
                    obj_policy.append((v, size * p.policy_penalty(n0.gpu_type)))
                    if use_y:
                        ud = p.domain(n0, uc.hop_limit)
                        if ud not in ydom:
                            ydom[ud] = lm.var(f"y[{jv.name},{uc.group},{ud}]", 0, uc.count)
                            unit_domain[(uc.index, ud)] = ydom[ud]
            if use_y:
                lm.eq([(v, 1) for v in ydom.values()] + [(r, -uc.count)], 0,
                      f"unitdomains[{jv.name},{uc.group}]")
                for size in sorted(set(uc.pieces)):
                    per_unit = uc.pieces.count(size)
                    by_dom: dict[str, list[int]] = defaultdict(list)
                    for v, nc in by_size_vars.get(size, []):
                        by_dom[p.domain(nc.rep, uc.hop_limit)].append(v)
                    for ud, yv in ydom.items():
                        lm.eq([(v, 1) for v in by_dom.get(ud, [])] + [(yv, -per_unit)], 0,
                              f"unitdomain[{jv.name},{uc.group},{ud},{size}]")
            if zvars:
                per_dom: dict[str, list[int]] = defaultdict(list)
                for v, nci in class_vars:
                    per_dom[p.domain(ncs[nci].rep, jv.hop_limit, job_level=True)].append(v)
                total = uc.count * len(uc.pieces)
                for d, vs in per_dom.items():
                    lm.add([(v, 1) for v in vs] + [(zvars[d], -total)], hi=0,
                           name=f"indomain[{jv.name},{uc.group},{d}]")
        big = jv.num_pieces
        for kind, touched in (("leaf", touched_leaf), ("spine", touched_spine)):
            if (len(touched) <= 1 and kind == "spine") or jv.num_pieces == 1:
                continue  # a single piece touches exactly one leaf: a constant
            for d, vs in touched.items():
                t = lm.bool(f"touch[{jv.name},{d}]")
                touch[(j, d)] = t
                lm.add([(v, 1) for v in vs] + [(t, -big)], hi=0, name=f"touch[{jv.name},{d}]")
                aux_links.append((t, [(v, 1) for v in vs], big))
                obj_comm.append((t, jv.traffic_weight * (3 if kind == "spine" else 1)))

    # capacity per node class: per-size rows (exact for divisible sizes) + total
    opened_nodes: dict[int, int] = {}
    for nci, terms in cap_terms.items():
        nc = ncs[nci]
        f, m = nc.free_per_node, nc.multiplicity
        sizes = sorted({s for _, s in terms}, reverse=True)
        for s in sizes:
            big = [(v, size) for v, size in terms if size >= s]
            if all(size % s == 0 for _, size in big):
                # pieces that are multiples of s use at most s*floor(f/s) GPUs of a node
                lm.add(big, hi=m * s * (f // s), name=f"cap[nc{nci},{s}]")
            else:
                lm.add([(v, 1) for v, _ in big], hi=m * (f // s), name=f"cap[nc{nci},#{s}]")
        lm.add(list(terms), hi=m * f, name=f"cap[nc{nci}]")
        if nc.rep.fully_free:
            o = lm.var(f"open[nc{nci}]", 0, m)
            opened_nodes[nci] = o
            lm.add(list(terms) + [(o, -nc.rep.node.gpu_count)], hi=0, name=f"open[nc{nci}]")
            aux_links.append((o, list(terms), nc.rep.node.gpu_count))
            obj_frag.append((o, 1))
    for (nci, g), vs in gpu_terms.items():
        lm.add([(v, 1) for v in vs], hi=1, name=f"gpu[nc{nci},{g}]")
    clique_vars: dict[int, list[int]] = defaultdict(list)
    for pv in pieces:
        if pv.clique is not None:
            clique_vars[pv.node_class].append(pv.var)
    for nci, vs in clique_vars.items():
        nc = ncs[nci]
        if nc.rep.fully_free:
            o = lm.bool(f"open[nc{nci}]")
            opened_nodes[nci] = o
            lm.add([(v, 1) for v in vs] + [(o, -len(vs))], hi=0, name=f"open[nc{nci}]")
            aux_links.append((o, [(v, 1) for v in vs], len(vs)))
            obj_frag.append((o, 1))
    opened_leaf: dict[str, int] = {}
    leaf_vars: dict[str, list[int]] = defaultdict(list)
    for pv in pieces:
        leaf = ncs[pv.node_class].leaf
        if p.leaf_fully_free.get(leaf) and not leaf.split("/", 1)[1].startswith("node:"):
            leaf_vars[leaf].append(pv.var)
    for leaf, vs in leaf_vars.items():
        o = lm.bool(f"openleaf[{leaf}]")
        opened_leaf[leaf] = o
        big_leaf = max(1, sum(lm.ubs[v] for v in vs))
        lm.add([(v, 1) for v in vs] + [(o, -big_leaf)], hi=0, name=f"openleaf[{leaf}]")
        aux_links.append((o, [(v, 1) for v in vs], big_leaf))
        obj_frag.append((o, LEAF_OPEN_WEIGHT))

    obj_jobs = [(r, 1) for j, r in run.items() if not p.jobs[j].impossible]
    demand = [Objective([(v, w * g) for lvl in tier for v, g in obj_demand_by_level[lvl]
                         for w in [p.tier_weights[lvl]]], f"demand_tier{i}", "max")
              for i, tier in enumerate(p.priority_tiers)]
    lm.objectives = [
        *demand,
        Objective(obj_jobs, "admitted_jobs", "max"),
        Objective(obj_comm, "communication", "min"),
        Objective(obj_frag, "fragmentation", "min"),
        Objective(obj_policy, "policy", "min"),
    ]
    names = [o.name for o in lm.objectives]
    return PlacementModel(problem=p, lm=lm, run=run, bundles=bundles, class_alias=class_alias,
                          job_domain=job_domain,
                          unit_domain=unit_domain, pieces=pieces, touch=touch,
                          opened_nodes=opened_nodes, opened_leaf=opened_leaf,
                          objective_names=names, eligible_pieces=dict(per_class_pieces),
                          aux_links=aux_links)
