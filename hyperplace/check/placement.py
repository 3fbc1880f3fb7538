"""An independent checker for placement plans: recomputes every rule from the models.

Why independent: every backend (CP-SAT, MILP, greedy) and every baseline answer goes through
this one function, so it must not share code with the formulations that produced the
answers (a bug there would otherwise vouch for itself). It reads only the domain models
(``Instance``, ``TrainingJob.units()``, ``Node.pair_bandwidths``, ``Fabric.path``), the
priority definition and the preemption policies' rule of who may stop whom
(:class:`hyperplace.models.preemption_policy.StopRule`).

What is checked (each failure is one :class:`Violation` with a stable ``code``):

* GPUs: every referenced node exists (``unknown-node``), the index is on the node
  (``unknown-gpu``), the GPU is free in the instance, i.e. neither held by a running job
  (``gpu-allocated``) nor faulty (``gpu-faulty``), and no GPU is used twice
  (``gpu-reused``).
* Units: each placement names a pending job (``unknown-job``) and one of its units
  (``unknown-unit``), at most once (``duplicate-unit``), with exactly the unit's GPU count
  (``unit-size``). Gang: an admitted job has all its units placed (``partial-gang``).
* Per unit: GPU type matches the unit's selector (``gpu-type``), HBM >= ``min_memory_gb``
  (``gpu-memory``); with ``min_nvlink_gbps > 0`` every same-node pair meets it
  (``nvlink-bandwidth``) and a unit that fits in one node of its type sits in one node
  (``nvlink-split``: NVLink does not cross nodes); a unit without an NVLink floor that
  fits in one node of its type sits in one node unless its group declares
  ``maxHopCount`` >= 1 (``unit-split``); a unit that spans nodes may have any number of
  GPUs on each node, the floor holding among those of one node (no assumption about
  piece sizes); across nodes the pairwise hop count is
  <= ``max_hop_count`` (``hop-count``; ``max_hop_count == 0`` means one node,
  ``unit-span``) and the path bottleneck >= ``min_ib_gbps`` (``ib-bandwidth``; a node that
  declares NICs is no faster than their total rate); nodes with
  no path between them (``disconnected``); one cluster only (``cross-cluster-unit``).
* Multi-node NVLink domains (NVL72 racks, :mod:`.nvlink`): a unit spanning nodes that asks
  for NVLink, for one node (``maxHopCount: 0``) or is a slice, with a GPU on a tray, lies on
  the trays of one domain (and partition), ``nvlink-domain``, whose per-GPU rate meets the
  floor (``nvlink-bandwidth``); a slice keeps each pod whole on one node (``slice-shape``);
  trays of one domain are 0 hops apart (``Fabric.path``); a domain's ``spareTrays`` are
  kept whole free like ``hotSpares`` (``hot-spares``).
* Per job: all node pairs of the job within the DataParallel group's ``maxHopCount``
  (``replica-hop-count``) and ``minInfiniBandBandwidthGbps`` (``replica-ib-bandwidth``);
  one cluster only (``cross-cluster-job``, federation is planned separately).
* Priority (``priority-inversion``), the simple sufficient case only: for a pending job J
  whose units each fit in one node, take the GPUs that are free in the instance and not
  used by admitted jobs of priority >= J's (i.e. J may take everything lower-priority jobs
  hold; the GPUs of a running job the plan stops, and the quota its stop frees, only when
  J could stop it itself, as a job of its queue that outranks it); first-fit J's units, one node per unit, in node order, honouring type, memory and
  NVLink pair bandwidth (a clique search on non-uniform nodes), per cluster. If that
  produces a placement that also passes J's between-replica hop and bandwidth rules, the
  plan left J out for lower-priority work: a violation. With queues, it is one only if J's
  queue's quotas then allow J too (counting the admitted jobs J may not displace), and the
  admitted jobs of another queue that ends the round within its nominal quota are not
  displaceable whatever their priority (that quota is their queue's guarantee: Kueue preempts
  across queues only to reclaim from borrowers). Not finding such a placement
  proves nothing (multi-node units and cleverer packings are not tried), so this check
  has no false positives and may miss inversions.
* Claims (``claim-*``): the plan's objective and ``objectiveTerms`` recomputed from its
  placements (for a plan whose round could preempt, ``preemptionPolicy``, objective 1 also
  counts the running jobs kept, see :func:`running_demand`), bound >= objective, gap consistent with them, ``optimal`` only with gap 0, no
  placements under a status that has no plan. (Runtime against budget is not judged: it
  depends on the machine the plan was made on.)
* Decisions that move running work, checked first, the rest of the plan then checked on the
  instance they leave: ``preemptions[]`` (:mod:`.preemption`), ``migrations[]``
  (``migrate-*``, :mod:`.migration`: a migrated job placed whole on its old GPUs released,
  its lost work, and that it was needed); ``hotSpares`` (``hot-spares``, :mod:`.spares`:
  whole free nodes left per leaf by placements other than repairs, on the instance as
  given; the priority check then counts a fit only where it leaves the spares too).
* Bookkeeping: every pending job listed with >= 1 reason (``pending-no-reason``), no job
  both admitted and pending (``pending-and-admitted``), every queued job either admitted
  or pending (``job-missing``), pending entries name queued jobs (``unknown-pending``),
  and ``jobs[]`` agrees with the placements (``summary-*``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import combinations
from math import comb

from pydantic import BaseModel, ConfigDict

from hyperplace.check.migration import migration_problems
from hyperplace.check.nvlink import unit_problems as nvlink_unit_problems
from hyperplace.check.preemption import preemption_problems
from hyperplace.check.spares import spare_problems, spare_shortfall
from hyperplace.check.quotas import Usage, used_per_key, quota_problems, running_usage
from hyperplace.models.sharing import declared_spares
from hyperplace.models.priority import priority_weights
from hyperplace.models.preemption_policy import LOWER_PRIORITY, POLICIES, StopRule, running_levels
from hyperplace.models import (
    Cluster,
    GangUnit,
    GPUType,
    Instance,
    Node,
    PlacementPlan,
    TrainingJob,
)
from hyperplace.models.plan import JobSummary
from hyperplace.models.result import SolveStatus

GPU = tuple[str, int]  # (node name, GPU index)

# Subsets tried per node in the priority check's clique search (C(8, 4) = 70 on DGX-1).
_MAX_CLIQUE_SEARCH = 5000


class Violation(BaseModel):
    """One broken rule, named by a stable code so tests and tools can match on it."""

    model_config = ConfigDict(frozen=True)

    code: str
    job: str | None = None
    unit: str | None = None
    message: str

    def __str__(self) -> str:
        where = "/".join(p for p in (self.job, self.unit) if p)
        return f"[{self.code}] {where + ': ' if where else ''}{self.message}"


def format_violations(violations: list[Violation]) -> str:
    """Human-readable report: one line per violation, or a single OK line."""
    if not violations:
        return "OK: no violations"
    lines = [f"{len(violations)} violation{'s' if len(violations) != 1 else ''}:"]
    lines += [f"  {v}" for v in violations]
    return "\n".join(lines)


class _Context:
    """Lookups derived once from the instance (catalog, nodes, pair bandwidths, paths)."""

    def __init__(self, instance: Instance, moved: frozenset[str] | set[str] = frozenset()):
        self.instance = instance
        self.moved = moved  # migrated running jobs: placed, but not pending jobs admitted
        self.pending_jobs = [j for j in instance.jobs if j.name not in moved]
        self.nodes: dict[str, tuple[Cluster, Node]] = {
            n.name: (c, n) for c in instance.clusters for n in c.nodes
        }
        self.jobs: dict[str, TrainingJob] = {j.name: j for j in instance.jobs}
        self._units: dict[str, dict[str, GangUnit]] = {}
        self._types: dict[str, GPUType] = {}
        self._pairs: dict[str, dict[tuple[int, int], float]] = {}
        self._paths: dict[tuple[str, str], tuple[int | None, float | None]] = {}
        #: (selector, memory floor) -> GPUs of the largest node suiting it
        self._largest: dict[tuple[str | None, float], int] = {}

    def set_job(self, job: TrainingJob | None, name: str = "") -> None:
        """Add ``job`` to the jobs checked (None: drop the job ``name``)."""
        name = job.name if job is not None else name
        self._units.pop(name, None)
        if job is None:
            self.jobs.pop(name, None)
        else:
            self.jobs[name] = job

    def units(self, job: str) -> dict[str, GangUnit]:
        if job not in self._units:
            self._units[job] = {u.name: u for u in self.jobs[job].units()}
        return self._units[job]

    def gpu_type(self, node: Node) -> GPUType:
        if node.gpu_type not in self._types:
            self._types[node.gpu_type] = self.instance.catalog.get(node.gpu_type)
        return self._types[node.gpu_type]

    def pair_bw(self, node: Node) -> dict[tuple[int, int], float]:
        if node.name not in self._pairs:
            t = self.gpu_type(node)
            self._pairs[node.name] = node.pair_bandwidths(
                t.nvlink_per_link_gbps, t.nvlink_gbps, t.pcie_gbps)
        return self._pairs[node.name]

    def path(self, u: str, v: str) -> tuple[int | None, float | None]:
        """Hops and bottleneck Gb/s between two nodes: the fabric path, and the NICs at both
        ends when the nodes declare them (the slower of NIC and link counts)."""
        key = (u, v) if u < v else (v, u)
        if key not in self._paths:
            cluster = self.nodes[u][0]
            if cluster is not self.nodes[v][0]:
                self._paths[key] = (None, None)
            else:
                hops, bw = cluster.network.path(*key)
                for end in key:
                    nics = self.nodes[end][1].nics
                    if bw is not None and nics:
                        bw = min(bw, sum(n.gbps for n in nics))
                self._paths[key] = (hops, bw)
        return self._paths[key]

    def type_ok(self, unit: GangUnit, node: Node) -> bool:
        t = self.gpu_type(node)
        return unit.gpu_types is None or t.matches(unit.gpu_types)

    def memory_ok(self, unit: GangUnit, node: Node) -> bool:
        return self.gpu_type(node).hbm_gb >= unit.min_memory_gb

    def largest_node(self, unit: GangUnit) -> int:
        """GPUs of the largest node whose type and memory suit the unit (0 if none)."""
        key = (unit.gpu_types, unit.min_memory_gb)
        found = self._largest.get(key)
        if found is None:
            found = self._largest[key] = max(
                (n.gpu_count for _, n in self.nodes.values()
                 if self.type_ok(unit, n) and self.memory_ok(unit, n)), default=0)
        return found


def check(plan: PlacementPlan, instance: Instance) -> list[Violation]:
    """All rules the plan breaks on this instance (empty list = valid plan)."""
    out: list[Violation] = []
    as_given = instance  # the hot-spare rule counts the whole free nodes the round began with
    if plan.hot_spares or declared_spares(instance):  # whole free nodes kept for repairs
        out += [Violation(code="hot-spares", message=m) for m in spare_problems(plan, instance)]
    running = running_demand(plan, instance)
    stopped = _stopped_gpus(plan, instance)
    if plan.preemptions:  # the rest of the plan is checked with the victims released
        problems, instance = preemption_problems(plan, instance)
        out += [Violation(code=code, job=job, message=msg) for code, job, msg in problems]
    moved: set[str] = set()
    # objective 1's weights: over the GPUs free before any migration (a migrated job takes
    # as many GPUs as it frees, so pending jobs can use no more; the plan's decisions do not
    # change the scale)
    free = sum(n.free_count for c in instance.clusters for n in c.nodes)
    if plan.migrations:  # migrated jobs: released, queued, checked as jobs that must run
        problems, instance, moved = migration_problems(plan, instance)
        out += [Violation(code=code, job=job, message=msg) for code, job, msg in problems]
    ctx = _Context(instance, moved)
    placed: dict[str, dict[str, list[GPU]]] = defaultdict(dict)
    used: Counter[GPU] = Counter()

    for p in plan.placements:
        gpus = [(g.node, g.gpu) for g in p.gpus]
        out += _check_gpu_refs(ctx, p.job, p.unit, gpus)
        used.update(set(gpus))
        if len(set(gpus)) != len(gpus):
            out.append(Violation(code="gpu-reused", job=p.job, unit=p.unit,
                                 message="the unit lists the same GPU more than once"))
        if p.job not in ctx.jobs:
            out.append(Violation(code="unknown-job", job=p.job, unit=p.unit,
                                 message="placed job is not in the pending queue"))
            continue
        known = ctx.units(p.job)
        if p.unit not in known:
            out.append(Violation(code="unknown-unit", job=p.job, unit=p.unit,
                                 message=f"job has no unit {p.unit!r} (units: "
                                         f"{', '.join(list(known)[:6])}{'...' if len(known) > 6 else ''})"))
            continue
        if p.unit in placed[p.job]:
            out.append(Violation(code="duplicate-unit", job=p.job, unit=p.unit,
                                 message="unit placed more than once"))
            continue
        placed[p.job][p.unit] = gpus

    for gpu, count in used.items():
        if count > 1:
            out.append(Violation(code="gpu-reused",
                                 message=f"GPU {gpu[0]}:{gpu[1]} is used by {count} units"))

    for job, units in placed.items():
        out += _check_job(ctx, job, units)

    out += _check_bookkeeping(ctx, plan, placed)
    repairs = frozenset(m.job for m in plan.migrations if m.why == "repair")
    out += _check_priority(ctx, placed, stopped, (as_given, plan.hot_spares, repairs))
    out += [Violation(code="quota", message=m)
            for m in quota_problems(instance, _queue_usage(ctx, placed))]
    out += _check_claims(ctx, plan, placed, running, free)
    return out


RunningLevels = tuple[int, dict[str, tuple[float, int]]]


def running_demand(plan: PlacementPlan, instance: Instance) -> RunningLevels:
    """For a plan whose round could preempt (``preemptionPolicy`` set): the GPUs objective 1
    can count (free + held by running jobs) and, per running job of the instance as it was,
    (the level it counts in, its GPUs). Objective 1 then counts each running job that keeps
    running in a level just above its priority (priority + 0.5: above pending jobs of its
    priority, below those that outrank it); under ``reclaim-within-cohort`` a job of a
    queue in a cohort whose running jobs hold more than its nominal quota (borrowed GPUs)
    counts one level below the lowest priority of the round. (0, {}) otherwise."""
    if plan.preemption_policy in (None, "never"):
        return 0, {}
    capacity = sum(n.free_count + len(n.allocated) for c in instance.clusters for n in c.nodes)
    return capacity, running_levels(instance, plan.preemption_policy,
                                    (j.priority for j in instance.jobs))


def _check_claims(ctx: _Context, plan: PlacementPlan,
                  placed: dict[str, dict[str, list[GPU]]],
                  running: RunningLevels = (0, {}), free: int | None = None) -> list[Violation]:
    """What the plan says about itself, recomputed: objective 1 from the placements (the
    priority definition over the instance's queue and free GPUs), the admitted-jobs term,
    bound >= objective, the gap from objective and bound, and a status that agrees with
    them (``optimal`` means gap 0; a status without a plan has no placements)."""
    out: list[Violation] = []
    if free is None:
        free = sum(n.free_count for _, n in ctx.nodes.values())
    capacity, run = running
    demands = [(j.priority, j.total_gpus) for j in ctx.pending_jobs]
    weights = priority_weights(demands + list(run.values()), capacity) if run else \
        priority_weights(demands, free)
    admitted = [ctx.jobs[j] for j, units in placed.items()
                if j in ctx.jobs and j not in ctx.moved and set(units) == set(ctx.units(j))]
    objective = sum(weights[j.priority] * j.total_gpus for j in admitted)
    if run:  # the running jobs kept (victims released from ctx.instance) count too
        kept = Counter(holder for _, n in ctx.nodes.values() for holder in n.allocated.values())
        objective += sum(weights[run[j][0]] * g for j, g in kept.items())
    tol = 0.5
    if plan.objective is not None and abs(plan.objective - objective) > tol:
        out.append(Violation(code="claim-objective", message=(
            f"plan claims objective {plan.objective:g}; its placements give {objective:g}")))
    claimed = plan.objective_terms.get("admitted_priority_demand")
    if claimed is not None and abs(claimed - objective) > tol:
        out.append(Violation(code="claim-objective", message=(
            f"objectiveTerms.admittedPriorityDemand is {claimed:g}; the placements give "
            f"{objective:g}")))
    jobs = plan.objective_terms.get("admitted_jobs")
    if jobs is not None and jobs != len(admitted):
        out.append(Violation(code="claim-admitted-jobs", message=(
            f"objectiveTerms.admittedJobs is {jobs:g}; {len(admitted)} jobs are placed")))
    if plan.objective is None:
        return out
    if plan.bound is not None and plan.bound - objective < -tol:  # exact for ints
        out.append(Violation(code="claim-bound", message=(
            f"bound {plan.bound:g} is below the objective {objective:g} (a maximisation "
            "bound is never below a valid plan's value)")))
    if plan.bound is not None and plan.gap is not None:
        expected = abs(plan.bound - objective) / max(1.0, abs(objective))
        if abs(plan.gap - expected) > 1e-6:
            out.append(Violation(code="claim-gap", message=(
                f"gap {plan.gap:g} does not follow from objective {objective:g} and bound "
                f"{plan.bound:g} ({expected:g})")))
        if plan.status == SolveStatus.OPTIMAL and expected > 1e-9:
            out.append(Violation(code="claim-status", message=(
                f"status optimal with a gap of {expected:g}")))
    if plan.status in (SolveStatus.INFEASIBLE, SolveStatus.NO_SOLUTION, SolveStatus.ERROR) \
            and plan.placements:
        out.append(Violation(code="claim-status", message=(
            f"status {plan.status} but the plan places {len(plan.placements)} units")))
    return out


def _queue_usage(ctx: _Context, placed: dict[str, dict[str, list[GPU]]]) -> Usage:
    """GPUs admitted per (queue, GPU type) by the placed jobs (quota accounting)."""
    usage: Usage = defaultdict(int)
    if ctx.instance.queue_set is None:
        return usage
    for job, units in placed.items():
        if job not in ctx.jobs:
            continue
        queue = ctx.instance.running_job_info[job].queue if job in ctx.moved \
            else ctx.instance.queue_of(ctx.jobs[job])
        for gpus in units.values():
            for node, _ in gpus:
                if node in ctx.nodes:
                    usage[(queue, ctx.nodes[node][1].gpu_type)] += 1
    return usage


# ---- GPUs ------------------------------------------------------------------------------

def _check_gpu_refs(ctx: _Context, job: str, unit: str, gpus: list[GPU]) -> list[Violation]:
    out = []
    for node_name, idx in gpus:
        found = ctx.nodes.get(node_name)
        if found is None:
            out.append(Violation(code="unknown-node", job=job, unit=unit,
                                 message=f"node {node_name!r} is not in the instance"))
            continue
        node = found[1]
        if not 0 <= idx < node.gpu_count:
            out.append(Violation(code="unknown-gpu", job=job, unit=unit,
                                 message=f"{node_name} has GPUs 0..{node.gpu_count - 1}, not {idx}"))
        elif idx in node.faulty:
            out.append(Violation(code="gpu-faulty", job=job, unit=unit,
                                 message=f"GPU {node_name}:{idx} is faulty"))
        elif idx in node.allocated:
            out.append(Violation(code="gpu-allocated", job=job, unit=unit,
                                 message=f"GPU {node_name}:{idx} is held by running job "
                                         f"{node.allocated[idx]!r}"))
    return out


# ---- units and jobs ----------------------------------------------------------------------

def _known(ctx: _Context, gpus: list[GPU]) -> list[GPU]:
    return [(n, i) for n, i in gpus if n in ctx.nodes]


def _check_unit(ctx: _Context, unit: GangUnit, gpus: list[GPU]) -> list[Violation]:
    """Size, type, memory, NVLink, hop count and bandwidth rules of one placed unit."""
    job, name = unit.job, unit.name
    out: list[Violation] = []

    def v(code: str, message: str) -> None:
        out.append(Violation(code=code, job=job, unit=name, message=message))

    if len(gpus) != unit.gpus:
        v("unit-size", f"unit needs {unit.gpus} GPUs, plan gives {len(gpus)}")
    gpus = _known(ctx, gpus)
    by_node: dict[str, list[int]] = defaultdict(list)
    for n, i in gpus:
        by_node[n].append(i)
    for node_name in by_node:
        node = ctx.nodes[node_name][1]
        t = ctx.gpu_type(node)
        if not ctx.type_ok(unit, node):
            v("gpu-type", f"{node_name} has {t.name}, unit asks for {unit.gpu_types}")
        if not ctx.memory_ok(unit, node):
            v("gpu-memory", f"{node_name} has {t.hbm_gb:g} GB GPUs, unit needs "
                            f">= {unit.min_memory_gb:g} GB")
    clusters = {ctx.nodes[n][0].name for n in by_node}
    if len(clusters) > 1:
        v("cross-cluster-unit", f"unit spans clusters {', '.join(sorted(clusters))}")
        return out

    # multi-node NVLink domains (NVL72 racks): one domain at the floor, or a violation
    on_rack = False
    if len(by_node) > 1:
        first = ctx.nodes[next(iter(by_node))]
        on_rack, rack_problems = nvlink_unit_problems(
            first[0], unit, sorted(by_node), ctx.gpu_type(first[1]),
            {n: len(set(g)) for n, g in by_node.items()})
        for code, message in rack_problems:
            v(code, message)
    if unit.min_nvlink_gbps > 0:
        for node_name, idxs in by_node.items():
            bw = ctx.pair_bw(ctx.nodes[node_name][1])
            low = [(a, b, bw.get((a, b), 0.0)) for a, b in combinations(sorted(set(idxs)), 2)
                   if bw.get((a, b), 0.0) < unit.min_nvlink_gbps]
            if low:
                a, b, g = low[0]
                v("nvlink-bandwidth", f"GPUs {a} and {b} on {node_name} have {g:g} GB/s, unit "
                                      f"needs >= {unit.min_nvlink_gbps:g} per pair "
                                      f"({len(low)} such pair{'s' if len(low) > 1 else ''})")
        if len(by_node) > 1 and unit.gpus <= ctx.largest_node(unit):
            v("nvlink-split", f"unit needs NVLink (>= {unit.min_nvlink_gbps:g} GB/s per pair) and "
                              f"fits in one node, but spans {len(by_node)} nodes")
    elif len(by_node) > 1 and unit.max_hop_count is None and unit.gpus <= ctx.largest_node(unit):
        v("unit-split", f"unit fits in one node and its group declares no maxHopCount >= 1, "
                        f"but spans {len(by_node)} nodes")

    if len(by_node) > 1:
        if unit.max_hop_count == 0 and not (on_rack and unit.gpus > ctx.largest_node(unit)):
            v("unit-span", f"maxHopCount 0 means one node, unit spans {len(by_node)}")
        else:
            out += _pairwise(ctx, sorted(by_node), unit.max_hop_count, unit.min_ib_gbps,
                             job, name, "hop-count", "ib-bandwidth")
    return out


def _pairwise(ctx: _Context, nodes: list[str], max_hops: int | None, min_gbps: float,
              job: str, unit: str | None, hop_code: str, bw_code: str) -> list[Violation]:
    """Hop-count and bottleneck rules over every node pair; one violation per rule."""
    worst_hops: tuple[int, str, str] | None = None
    worst_bw: tuple[float, str, str] | None = None
    disconnected: tuple[str, str] | None = None
    for a, b in combinations(nodes, 2):
        hops, bw = ctx.path(a, b)
        if hops is None:
            disconnected = disconnected or (a, b)
            continue
        if max_hops is not None and hops > max_hops and (worst_hops is None or hops > worst_hops[0]):
            worst_hops = (hops, a, b)
        if min_gbps > 0 and bw is not None and bw < min_gbps and (worst_bw is None or bw < worst_bw[0]):
            worst_bw = (bw, a, b)
    out = []
    if disconnected:
        out.append(Violation(code="disconnected", job=job, unit=unit,
                             message=f"no network path between {disconnected[0]} and {disconnected[1]}"))
    if worst_hops:
        out.append(Violation(code=hop_code, job=job, unit=unit,
                             message=f"{worst_hops[1]} and {worst_hops[2]} are {worst_hops[0]} hops "
                                     f"apart, limit is {max_hops}"))
    if worst_bw:
        out.append(Violation(code=bw_code, job=job, unit=unit,
                             message=f"path {worst_bw[1]}-{worst_bw[2]} bottleneck is "
                                     f"{worst_bw[0]:g} Gb/s, needs >= {min_gbps:g}"))
    return out


def _check_job(ctx: _Context, job: str, placed: dict[str, list[GPU]]) -> list[Violation]:
    out: list[Violation] = []
    units = ctx.units(job)
    missing = [u for u in units if u not in placed]
    if missing:
        out.append(Violation(code="partial-gang", job=job,
                             message=f"{len(placed)} of {len(units)} units placed; missing "
                                     f"{', '.join(missing[:4])}{'...' if len(missing) > 4 else ''}"))
    for unit_name, gpus in placed.items():
        out += _check_unit(ctx, units[unit_name], gpus)
    nodes = sorted({n for gpus in placed.values() for n, _ in _known(ctx, gpus)})
    clusters = {ctx.nodes[n][0].name for n in nodes}
    if len(clusters) > 1:
        out.append(Violation(code="cross-cluster-job", job=job,
                             message=f"job spans clusters {', '.join(sorted(clusters))}"))
        return out
    between = ctx.jobs[job].between_replicas
    if len(nodes) > 1 and (between.max_hop_count is not None or between.min_infiniband_bandwidth_gbps > 0):
        out += _pairwise(ctx, nodes, between.max_hop_count, between.min_infiniband_bandwidth_gbps,
                         job, None, "replica-hop-count", "replica-ib-bandwidth")
    return out


class JobRules:
    """The per-job rules of :func:`check` (each unit's size, type, memory, NVLink, hop and
    bandwidth rules; the between-replica hop and bandwidth rules; one cluster) for jobs
    placed one at a time on an instance's hardware, whatever else runs: what a replay asks
    of every start, so that a peer whose upstream rule cannot express a job's limit is
    counted when it breaks it (:attr:`hyperplace.sim.policies.Policy.tolerated`)."""

    def __init__(self, instance: Instance):
        self._ctx = _Context(instance.with_jobs([]))

    def start_violations(self, job: TrainingJob, placed: dict[str, list[GPU]]
                         ) -> list[Violation]:
        """The job's own rules ``placed`` breaks. Unit names are the job's own, or carry
        the ``cluster:`` prefix a federation's policies give a job placed whole in one
        member; a job split over members gets [] here (the federation's checker judges
        each part)."""
        ctx = self._ctx
        ctx.set_job(job)
        try:
            names = ctx.units(job.name)
            if not all(u in names for u in placed):
                parts = [u.partition(":") for u in placed]
                if len({c for c, _, _ in parts}) != 1 or not all(
                        sep and rest in names for _, sep, rest in parts):
                    return []
                placed = {rest: g for (_, _, rest), g in zip(parts, placed.values())}
            return _check_job(ctx, job.name, placed)
        finally:
            ctx.set_job(None, job.name)


# ---- bookkeeping ---------------------------------------------------------------------------

def _check_bookkeeping(ctx: _Context, plan: PlacementPlan,
                       placed: dict[str, dict[str, list[GPU]]]) -> list[Violation]:
    out: list[Violation] = []
    pending_names = set()
    for p in plan.pending:
        pending_names.add(p.job)
        if p.job not in ctx.jobs:
            out.append(Violation(code="unknown-pending", job=p.job,
                                 message="pending entry names a job that is not queued"))
        if not [r for r in p.reasons if r.strip()]:
            out.append(Violation(code="pending-no-reason", job=p.job,
                                 message="pending job has no reason"))
        if p.job in placed:
            out.append(Violation(code="pending-and-admitted", job=p.job,
                                 message="job is both placed and listed as pending"))
    for job in ctx.jobs:
        if job in ctx.moved and job in pending_names:
            out.append(Violation(code="pending-and-admitted", job=job,
                                 message="a migrated running job cannot be pending"))
        if job not in placed and job not in pending_names and job not in ctx.moved:
            out.append(Violation(code="job-missing", job=job,
                                 message="queued job is neither placed nor listed as pending"))

    summaries: dict[str, JobSummary] = {}
    for s in plan.jobs:
        if s.job in summaries:
            out.append(Violation(code="summary-duplicate", job=s.job, message="job summarised twice"))
        summaries[s.job] = s
    for job, units in placed.items():
        summary = summaries.get(job)
        if summary is None:
            out.append(Violation(code="summary-missing", job=job,
                                 message="admitted job has no entry in jobs[]"))
            continue
        s = summary
        gpus = [g for us in units.values() for g in _known(ctx, us)]
        if s.gpus != sum(len(us) for us in units.values()):
            out.append(Violation(code="summary-gpus", job=job,
                                 message=f"jobs[] says {s.gpus} GPUs, placements hold "
                                         f"{sum(len(us) for us in units.values())}"))
        if s.priority != ctx.jobs[job].priority:
            out.append(Violation(code="summary-priority", job=job,
                                 message=f"jobs[] says priority {s.priority}, the job has "
                                         f"{ctx.jobs[job].priority}"))
        nodes = sorted({n for n, _ in gpus})
        if sorted(set(s.node_names)) != nodes:
            out.append(Violation(code="summary-nodes", job=job,
                                 message=f"jobs[].nodeNames {sorted(set(s.node_names))} != "
                                         f"placed nodes {nodes}"))
        types = Counter(ctx.gpu_type(ctx.nodes[n][1]).name for n, _ in gpus)
        if s.gpu_types and dict(types) != dict(s.gpu_types):
            out.append(Violation(code="summary-types", job=job,
                                 message=f"jobs[].gpuTypes {dict(s.gpu_types)} != placed {dict(types)}"))
        ta = s.topology_assignment
        if ta is not None and sum(d.count for d in ta.domains) != s.gpus:
            out.append(Violation(code="summary-topology", job=job,
                                 message=f"topologyAssignment counts {sum(d.count for d in ta.domains)}"
                                         f" GPUs, the job has {s.gpus}"))
    for job in summaries:
        if job not in placed:
            out.append(Violation(code="summary-extra", job=job,
                                 message="jobs[] lists a job that has no placement"))
    return out


# ---- priority ------------------------------------------------------------------------------

Stopped = tuple[StopRule, dict[GPU, tuple[str, int]]] | None


def _stopped_gpus(plan: PlacementPlan, instance: Instance) -> Stopped:
    """For a plan that preempts: the policy's rule on the round as it was, and each GPU of a
    stopped running job with that job's (queue, priority)."""
    if not plan.preemptions:
        return None
    policy = plan.preemption_policy if plan.preemption_policy in POLICIES else "never"
    info = instance.running_job_info
    gone = {p.job for p in plan.preemptions}
    gpus = {(n.name, g): (info[j].queue, info[j].priority) for c in instance.clusters
            for n in c.nodes for g, j in n.allocated.items() if j in gone and j in info}
    return StopRule.of(instance, policy), gpus


def _check_priority(ctx: _Context, placed: dict[str, dict[str, list[GPU]]],
                    stopped: Stopped = None,
                    spares: tuple[Instance, int, frozenset[str]] | None = None
                    ) -> list[Violation]:
    """Flag pending jobs that a simple first-fit could place on lower-priority jobs' GPUs
    (the GPUs of a stopped running job only for a job that may stop it as outranking it
    in its queue).

    With hot spares (``spares``: the instance as given, N, the repaired jobs), a fit counts
    only if the kept jobs (repairs aside) and the fit together still leave every leaf its
    spares (:func:`.spares.spare_shortfall`): a job held back by the spare rule is not an
    inversion.

    What a pending job J may take depends only on J's priority and queue (which admitted
    jobs it may displace, which stopped jobs' GPUs it may use), and whether J fits there
    only on what its units and between-replica rules ask: so the GPUs J may take are worked
    out once per (priority, queue) (:class:`_Outranked`) and the first fit once per
    (priority, queue, shape). Linear in the plan and the queue (times the few distinct
    priorities, queues and job shapes), where a copy of every node's free GPUs per pending
    job made it quadratic (131,072 GPUs: minutes)."""
    out: list[Violation] = []
    pending = [j for j in ctx.pending_jobs if j.name not in placed]
    if not pending:
        return out
    admitted_prio = {job: (ctx.jobs[job].priority if job not in ctx.moved else 10**9)
                     for job in placed if job in ctx.jobs}
    guaranteed = _within_nominal(ctx, placed)
    instance_free: dict[str, set[int]] = {name: set(n.free_gpus) for name, (_, n) in ctx.nodes.items()}
    with_queues = ctx.instance.queue_set is not None
    states: dict[tuple[int, str], _Outranked] = {}
    fits: dict[tuple[object, ...], dict[str, str] | None] = {}
    for job in pending:
        units = job.units()
        if any(u.gpus > ctx.largest_node(u) for u in units):
            continue  # multi-node units: not the simple case
        mine = ctx.instance.queue_of(job)
        key = (job.priority, mine)
        state = states.get(key)
        if state is None:
            state = states[key] = _Outranked(ctx, placed, job.priority, mine, with_queues,
                                             admitted_prio, guaranteed, instance_free, stopped)
        if not state.lower:
            continue
        between = job.between_replicas
        shape = (key, between.max_hop_count, between.min_infiniband_bandwidth_gbps,
                 tuple((u.name, u.gpus, u.gpu_types, u.min_memory_gb, u.min_nvlink_gbps)
                       for u in units))
        if shape not in fits:
            fits[shape] = _inversion_fit(ctx, job, units, state, placed, spares)
        fit = fits[shape]
        if fit is not None:
            out.append(Violation(
                code="priority-inversion", job=job.name,
                message=f"pending at priority {job.priority}, but it fits on GPUs held by "
                        f"lower-priority jobs ({', '.join(sorted(state.lower)[:4])}) plus free GPUs, e.g. "
                        + "; ".join(f"{u}: {n}" for u, n in list(fit.items())[:3])))
    return out


class _Outranked:
    """What a pending job of one priority and queue may take (:func:`_check_priority`):
    the GPUs free in the instance and not held by jobs it may not displace, the admitted
    jobs it may displace (``lower``), and the stopped running jobs' GPUs it may not use."""

    def __init__(self, ctx: _Context, placed: dict[str, dict[str, list[GPU]]], priority: int,
                 mine: str, with_queues: bool, admitted_prio: dict[str, int],
                 guaranteed: set[str], instance_free: dict[str, set[int]], stopped: Stopped):
        queue = mine if with_queues else None  # another queue's guarantee: only with queues
        self.priority, self.queue = priority, mine
        self.protected = {j for j in admitted_prio
                          if admitted_prio[j] >= priority
                          or (j in guaranteed and _queue_of_placed(ctx, j) != queue)}
        # placed jobs not in ctx.jobs count as protected (their priority is the job's own)
        self.protected |= {j for j in placed if j not in admitted_prio}
        self.lower = [j for j in admitted_prio if j not in self.protected]
        if not self.lower:
            return
        free = dict(instance_free)  # shared sets; a node losing GPUs gets its own copy
        copied: set[str] = set()

        def take(n: str, i: int) -> None:
            s = free.get(n)
            if s is None or i not in s:
                return
            if n not in copied:
                s = free[n] = set(s)
                copied.add(n)
            s.discard(i)

        #: (queue, GPU type) of each stopped job's GPU this job may not use (its quota)
        self.kept_running: list[tuple[str, str]] = []
        if stopped is not None:  # a stopped job's GPUs and quota: only if J could stop it
            rule, victim_of = stopped
            for (n, i), (vq, vp) in victim_of.items():
                if rule.why(mine, priority, vq, vp) != LOWER_PRIORITY:
                    take(n, i)
                    if n in ctx.nodes:
                        self.kept_running.append((vq, ctx.nodes[n][1].gpu_type))
        for other in self.protected:
            for gpus in placed[other].values():
                for n, i in gpus:
                    take(n, i)
        self.free = free
        self._by_size: dict[tuple[int, int], list[Node]] = {}

    def candidates(self, cluster_index: int, cluster: Cluster, gpus: int) -> list[Node]:
        """The cluster's nodes, in order, with at least ``gpus`` GPUs this job may take."""
        key = (cluster_index, gpus)
        found = self._by_size.get(key)
        if found is None:
            free = self.free
            found = self._by_size[key] = [n for n in cluster.nodes if len(free[n.name]) >= gpus]
        return found


def _queue_of_placed(ctx: _Context, job: str) -> str:
    return ctx.instance.running_job_info[job].queue if job in ctx.moved \
        else ctx.instance.queue_of(ctx.jobs[job])


def _within_nominal(ctx: _Context, placed: dict[str, dict[str, list[GPU]]]) -> set[str]:
    """Placed jobs of declared queues that end the round within their nominal quota on
    every key (running jobs kept + admitted now): their GPUs are their queue's guarantee,
    which no job of another queue may take whatever its priority (Kueue preempts across
    queues only to reclaim from borrowers, and admits a workload that fits its nominal
    quota before one that must borrow)."""
    qs = ctx.instance.queue_set
    if qs is None:
        return set()
    after: Usage = defaultdict(int, running_usage(ctx.instance))
    for k, n in _queue_usage(ctx, placed).items():
        after[k] += n
    ok = {q.name for q in qs.queues.values()
          if all(used_per_key(qs, after, q.name, key) <= quota.nominal + 1e-9
                 for key, quota in q.quotas.items())}
    return {j for j in placed if j in ctx.jobs and _queue_of_placed(ctx, j) in ok}


def _inversion_fit(ctx: _Context, job: TrainingJob, units: list[GangUnit], state: _Outranked,
                   placed: dict[str, dict[str, list[GPU]]],
                   spares: tuple[Instance, int, frozenset[str]] | None) -> dict[str, str] | None:
    """The first fit of ``job`` on what it may take (``state``) that is an inversion: it
    leaves every leaf its hot spares and, with queues, the job's queue's quotas allow it."""
    fit = _first_fit(ctx, job, units, state)
    if fit is not None and spares is not None and (spares[1] > 0 or declared_spares(spares[0])):
        as_given, n_spares, repairs = spares
        busy = {g for other in state.protected if other not in repairs
                for gpus in placed[other].values() for g in gpus}
        busy |= {(n, 0) for n in fit.values()}  # a node the fit uses is no longer whole free
        if spare_shortfall(as_given, n_spares, busy):
            fit = None
    if fit is not None and ctx.instance.queue_set is not None:
        # with quotas, it is an inversion only if its queue's quotas would allow it too
        usage = _queue_usage(ctx, {j: placed[j] for j in placed if j in state.protected})
        for key in state.kept_running:
            usage[key] += 1
        for unit in units:
            usage[(state.queue, ctx.nodes[fit[unit.name]][1].gpu_type)] += unit.gpus
        if quota_problems(ctx.instance, usage):
            fit = None
    return fit


def _first_fit(ctx: _Context, job: TrainingJob, units: list[GangUnit],
               state: _Outranked) -> dict[str, str] | None:
    """One-node-per-unit first fit within one cluster, verified against the job's rules.

    Nodes are tried in order among those with enough GPUs the job may take
    (:meth:`_Outranked.candidates`); GPUs taken by earlier units are kept aside per node."""
    between = job.between_replicas
    free = state.free
    for ci, cluster in enumerate(ctx.instance.clusters):
        left: dict[str, set[int]] = {}  # nodes an earlier unit used: the GPUs still free
        chosen: dict[str, str] = {}
        for unit in units:
            for node in state.candidates(ci, cluster, unit.gpus):
                avail = left.get(node.name, free[node.name])
                if len(avail) < unit.gpus:
                    continue
                if not (ctx.type_ok(unit, node) and ctx.memory_ok(unit, node)):
                    continue
                gpus = _pick_gpus(ctx, node, avail, unit)
                if gpus is not None:
                    left[node.name] = avail - set(gpus)
                    chosen[unit.name] = node.name
                    break
            else:
                break
        if len(chosen) != len(units):
            continue
        nodes = sorted(set(chosen.values()))
        if len(nodes) > 1 and _pairwise(ctx, nodes, between.max_hop_count,
                                        between.min_infiniband_bandwidth_gbps, job.name, None,
                                        "h", "b"):
            continue
        return chosen
    return None


def _pick_gpus(ctx: _Context, node: Node, avail: set[int], unit: GangUnit) -> list[int] | None:
    """``unit.gpus`` free GPUs of ``node`` meeting the unit's NVLink pair bandwidth, if any."""
    free = sorted(avail)
    if unit.min_nvlink_gbps <= 0 or unit.gpus <= 1:
        return free[:unit.gpus]
    bw = ctx.pair_bw(node)
    if node.is_uniform:
        any_pair = bw.get((0, 1), 0.0) if node.gpu_count > 1 else 0.0
        return free[:unit.gpus] if any_pair >= unit.min_nvlink_gbps else None
    if comb(len(free), unit.gpus) > _MAX_CLIQUE_SEARCH:
        return None  # too many subsets to try: unknown, and unknown is never flagged
    for combo in combinations(free, unit.gpus):
        if all(bw.get(p, 0.0) >= unit.min_nvlink_gbps for p in combinations(combo, 2)):
            return list(combo)
    return None


__all__ = ["Violation", "check", "format_violations"]
