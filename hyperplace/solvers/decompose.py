"""A round of several clusters solved cluster by cluster, without ever building the whole
round's problem: each job is routed to one cluster by a small LP read straight off the
instance, each cluster's part is built and solved by the driver lazily under its share of
the budget, pending jobs that might fit in another cluster get a repair there, and the parts
are merged into one plan of the whole round with the whole round's weights, bound and gaps.

Why: a job runs in one cluster, so once each job has a cluster the clusters are independent
rounds. At 16 clusters of 65,536 GPUs (1,048,576 GPUs, 100,000 jobs) building the whole
round's :class:`PlacementProblem` alone took 30 s of CPU (2026-12-02), more than any budget;
a part costs about a sixteenth of it.

1. **Routing** (:func:`route`): jobs grouped by shape (priority, GPUs, each unit's GPUs, type
   selector and memory floor), clusters by GPU type (free GPUs, GPUs on whole free nodes).
   The LP has per shape and cluster a ``run`` column and per eligible type a GPU column;
   GPUs per (cluster, type) are capped by the free ones, and GPUs of whole-node units by
   those on whole free nodes. Its runs, rounded down, send jobs to clusters; the rest go to
   the cluster with most room of their types. Its optimum without the whole-node rows (every
   row then holds for every valid plan, on a superset of each job's types) bounds objective
   1 from above; the plan's bound is the smallest of it, the demand bound and, when every
   cluster with free GPUs was built and its estimate fits in what is left, the aggregated
   model's LP relaxation of the whole round from the parts' node views
   (:meth:`_Run.aggregated_bound`: it knows where the free GPUs are).
2. **Parts, by measured need**: a part needs its build and greedy's pass (seconds per node
   and per job, measured on the parts built so far; the first part's from the defaults) and
   its exact model (``estimate_vars / vars_per_second``, known once built). When the needs
   fit in what is left, each part gets what is left in proportion to its need; when they do
   not, parts are served in order of routed weighted demand per second of need, each given
   its need, and those that no longer fit stay **unbuilt** (their jobs pending, named in the
   plan). A part whose share runs out inside greedy keeps greedy's partial plan (its untried
   jobs say so).
3. **Across clusters**: a pending job whose types have, in another built cluster, as many
   free GPUs plus GPUs of lower-priority admitted jobs as it needs is a candidate there; that
   cluster's part is rebuilt with the candidates (its node and job views reused) and its
   inversion fix (:func:`~hyperplace.solvers.heuristics.greedy.fix_inversions`) places
   them or proves (as the checker's rule asks) that they do not fit on free or
   lower-priority GPUs. A candidate for an unbuilt cluster, or for a built one the budget
   left no repair for, cannot be cleared: then every admitted job of lower priority than
   the highest such candidate is left out (it says why), so no pending job of higher
   priority could have used its GPUs, and the merged plan stays valid.

The merged plan is never ``optimal`` (no part proves the whole round; a part's routing is a
choice the LP made); it is ``feasible`` when every part was solved by its exact backend and
nothing was left out, else ``fallback``. Lower objectives have no valid bound for the whole
(their gaps are None).
"""

from __future__ import annotations

import gc
import math
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.models.gpu import GPUType
from hyperplace.models.instance import Instance
from hyperplace.models.job import MODEL_PARALLEL, GroupType, TrainingJob
from hyperplace.models.plan import PendingJob, PlacementPlan
from hyperplace.models.plan_builder import PlanBuilder
from hyperplace.models.priority import priority_weights
from hyperplace.models.result import SolveStatus, relative_gap
from hyperplace.solvers.backends.aggregate import Columns, SparseLp, one_cluster
from hyperplace.solvers.backends.safebound import integer_bound
from hyperplace.solvers.budget import Budget
from hyperplace.solvers.driver import SOLVERS, SolveRound, estimate_vars, finish, search
from hyperplace.solvers.heuristics.greedy import GreedyStats, fix_inversions, solve_greedy
from hyperplace.solvers.params import SolveParams
from hyperplace.words import plural

__all__ = ["Part", "Route", "route", "solve_decomposed"]

#: Share of the budget kept for the cross-cluster repair, the explanations and the merged
#: plan (at least ``BudgetParams.reserve_s``), and seconds per job the merge itself takes
#: (100,000 jobs pending, collector paused: 2.0 s of wall at load 10 where the routing read
#: a 3.9x slowdown, so about 5 us each idle; 10 us before).
TAIL_FRACTION = 0.12
MERGE_S_PER_JOB = 6e-6
#: Seconds per job the routing takes on an idle machine (100,000 jobs: about 1.5 s of CPU);
#: what it took against this is how much slower the machine is now, and the merge's reserve
#: is scaled by it (at load 12 every phase took 3-4x its CPU time).
ROUTE_S_PER_JOB = 15e-6
#: plus what any routing takes (its two LPs set up and solved: 14 ms for 60 jobs over 3
#: clusters, idle; a small round's slowdown was that against 1 ms, 14x)
ROUTE_FIXED_S = 0.02
#: Share of the budget the routing may take before it stops reading jobs (see
#: solve_decomposed; 100,000 jobs need about 1.8 s of CPU: 0.36 of 5 s on an idle machine)
ROUTE_SHARE = 0.45
#: and per node, for the free GPUs per cluster and type it reads first (131,072 nodes: about
#: 0.4 s): the first measure of the machine's slowdown, before any job is read
ROUTE_S_PER_NODE = 3e-6
#: Before any part is measured: seconds per node and per job to build a part's problem and
#: run greedy's first pass, fabrics built (65,536 GPUs, 2026-12-02, CPU at load 10: node
#: views 0.33 s per 8,192 nodes, job views 0.01-0.02 ms and one greedy pass 0.09-0.13 ms per
#: job at 9,372 and 12,942 jobs; 1.6e-4 / 4.5e-4 before, with the collector running).
NODE_S = 6e-5
JOB_S = 2e-4
#: Seconds per admitted job a part's plan takes to write (its placements, summaries and
#: topology assignments, and the explanations in what the shares leave): kept back from the
#: parts after it, scaled by the slowdown, so an idle machine's figure. 1M GPUs (16 x
#: 65,536, 100,000 jobs, fragmentation 0.6, collector paused, 2026-12-02 12:55 UTC, load
#: 1.2-2.0, slowdown read 1.0-1.07): 3.3e-5 and 4.5e-5 s of CPU per admitted job (81,440
#: and 25,275 admitted) with the explanations; at load 10 0.10-0.12 ms where the slowdown
#: read 2.3-3.9. Was 1.5e-4 (the load-10 figure, then scaled by the slowdown again): a 30 s
#: round ended at 19.4 s with 2 parts unbuilt, whose might-fit jobs left out 62,000 admitted.
PLAN_S_PER_ADMITTED = 6e-5
#: Of which building the part's problem (the rest is greedy's pass): what a part's build
#: time is measured against (the slowdown every later estimate is scaled by).
BUILD_JOB_S = 2e-5
#: and per node (65,536 GPUs / 406 jobs: 0.34 s of CPU, 2026-12-02, load 4); a part cut
#: (:meth:`_Run._cut_share`) is built only if this and MIN_GREEDY_S of greedy fit
BUILD_NODE_S = 4e-5
MIN_GREEDY_S = 0.5
#: Seconds per job read that the parts then take, idle (:class:`Fill`): its view 0.01-0.02
#: ms, greedy's pass over it 0.09-0.13 ms, its plan 0.03-0.05 ms (the figures above). With
#: JOB_S + PLAN_S_PER_ADMITTED (0.26 ms, the parts' cautious first estimate) the routing
#: read too few at load 3.5: the rounds ended 2.7-3.3 s before their 10 s budget.
READ_JOB_S = 1.7e-4
#: Seconds per job kind and cluster of the whole round's aggregated bound's LP (the merged
#: plan's bound, :meth:`_Run.aggregated_bound`): 1M GPUs, 201 kinds x 16 clusters, 16,272
#: columns: 0.18 s (2026-12-02, load 1.4; its views and columns 1.38 s); kept with margin.
AGG_S_PER_COLUMN_SET = 1e-4
#: A round whose whole problem (:func:`whole_round_s`) takes at most this share of the
#: budget is solved whole: split into parts it would only get shares of the budget, each
#: paying its own start-up (4 x 1,024 GPUs / 400 jobs at budget 1 s: whole 364 admitted,
#: optimal, 0.8 s; decomposed 0 admitted, review of 2026-12-02).
WHOLE_FRACTION = 0.5
#: The whole round's rates for that rule (a whole solve also builds the fabrics and bounds
#: and explains the round: the parts' first figures, 65,536 GPUs / 6,250 jobs idle with the
#: collector running, 2026-12-02: fabric 0.65 s, node views 0.6 s, job views 0.6 s, greedy
#: 2.2 s; kept so the rule of afa9363 stands)
WHOLE_NODE_S = 1.6e-4
WHOLE_JOB_S = 4.5e-4


def whole_round_s(instance: Instance) -> float:
    """Seconds the whole round's problem and greedy's first pass take on an idle machine
    (``WHOLE_NODE_S`` per node, ``WHOLE_JOB_S`` per job)."""
    return WHOLE_NODE_S * sum(len(c.nodes) for c in instance.clusters) + \
        WHOLE_JOB_S * len(instance.jobs)


@dataclass
class Part:
    """One cluster's share of the round: its jobs, its need, what its solve took and said."""

    cluster: str
    jobs: list[int]  # indices of the whole round's jobs (instance.jobs) routed here
    nodes: int = 0
    #: jobs of other clusters' lists queued here too by the cross-cluster repair
    extra: list[int] = field(default_factory=list)
    est_s: float = 0.0  # its need as estimated before it was built
    left_s: float = 0.0  # what was left for the parts not yet served when it was
    rest_s: float = 0.0  # what those parts (this one included) were estimated to need
    value: float = 0.0  # routed weighted demand
    build_s: float = 0.0
    need_s: float = 0.0
    budget_s: float = 0.0
    solve_s: float = 0.0
    status: str = "unbuilt"
    solver: str = ""
    admitted: int = 0
    problem: PlacementProblem | None = field(default=None, repr=False)
    round: SolveRound | None = field(default=None, repr=False)


@dataclass
class Route:
    """Each job's cluster, and the routing LP's valid bound on objective 1."""

    assignment: dict[int, str]  # instance.jobs index -> cluster
    bound: float | None
    weights: dict[float, int]
    shapes: int
    seconds: float
    status: str
    #: instance.jobs index -> (priority, GPUs, GPU types it may use)
    jobs: dict[int, tuple[int, int, frozenset[str]]] = field(default_factory=dict)
    #: (cluster, GPU type) -> free GPUs
    free: dict[tuple[str, str], int] = field(default_factory=dict)
    #: jobs the routing had no time to read (pending, none admitted: see solve_parts)
    unrouted: list[int] = field(default_factory=list)
    #: job -> its units' GPUs when each stays on one node, else () (:func:`might_fit`)
    units: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: (cluster, GPU type) -> free GPUs on a node -> nodes with that many
    hist: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)
    largest: int = 8  # GPUs of the largest node
    #: job -> its kind (jobs of one kind have the same spec and annotations)
    kinds: dict[int, int] = field(default_factory=dict)


@dataclass
class Fill:
    """What the jobs the routing reads will cost after it, so that it reads only what the
    parts can place in the budget (:func:`route`): idle seconds, scaled by the round's
    measured slowdown. Without it the routing read jobs until its own deadline: 1M GPUs
    at budget 10 under load read 75,000-88,000 of 100,000 jobs in 4-5 s of wall, and no
    part was left the time to be built (0 admitted, 2026-12-02).

    Attributes
    ----------
    end : float
        A ``time.perf_counter()`` value the parts and the merge must be done by.
    merge_s : float
        The merge's idle seconds (every job of the round: its plan or its pending entry).
    fixed_s : float
        The first part's idle seconds before its first job: building its node views.
    per_job_s : float
        Idle seconds per job read: its view, greedy's pass over it and its plan.
    slowdown : callable
        The round's measured slowdown (:meth:`Budget.slowdown`).
    """

    end: float
    merge_s: float
    fixed_s: float
    per_job_s: float
    slowdown: Callable[[], float]

    def full(self, jobs: int, slow: float) -> bool:
        """``jobs`` read would take the parts past :attr:`end` at ``slow`` (or the round's
        slowdown when larger)."""
        slow = max(slow, self.slowdown())
        return time.perf_counter() + slow * (self.merge_s + self.fixed_s +
                                             jobs * self.per_job_s) > self.end


def solve_decomposed(instance: Instance, *, solver: str = "auto", budget_s: float = 10.0,
                     policy: str = "performance", seed: int = 0, workers: int = 2,
                     params: SolveParams | None = None, deadline: float | None = None,
                     parts_out: list[Part] | None = None, always: bool = False
                     ) -> PlacementPlan:
    """Solve one round of ``instance`` cluster by cluster within ``budget_s`` seconds (see
    the module docstring); one cluster, a round with quotas, or (unless ``always``) a round
    whose whole problem is cheap (:func:`whole_round_s` at most ``WHOLE_FRACTION`` of the
    budget) is solved whole by the driver. ``parts_out`` receives each part's record (the
    bench's per-cluster figures)."""
    # the round's time is a budget: Python's cyclic collector passes over a 1M-GPU heap
    # (about 5 million objects; one full pass cost 1-3 s of CPU inside a round, 2026-12-02)
    # run after it, not inside it (as ``sim.planning``'s rounds and the ``solve`` command)
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _solve_decomposed(instance, solver=solver, budget_s=budget_s, policy=policy,
                                 seed=seed, workers=workers, params=params, deadline=deadline,
                                 parts_out=parts_out, always=always)
    finally:
        if enabled:
            gc.enable()


def _solve_decomposed(instance: Instance, *, solver: str, budget_s: float, policy: str,
                      seed: int, workers: int, params: SolveParams | None,
                      deadline: float | None, parts_out: list[Part] | None, always: bool
                      ) -> PlacementPlan:
    from hyperplace.solvers.driver import solve_placement

    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; use one of {', '.join(SOLVERS)}")
    params = params or SolveParams()
    budget = Budget(budget_s, params.budget, deadline)
    whole_s = whole_round_s(instance)
    cheap = not always and whole_s <= WHOLE_FRACTION * budget_s
    if len(instance.clusters) < 2 or instance.queue_set is not None or cheap:
        # one cluster: nothing to split; quotas: they hold across clusters; a cheap round:
        # the whole problem is proven or bounded where parts would only share the budget
        plan = solve_placement(instance, solver=solver, budget_s=budget_s, policy=policy,
                               seed=seed, workers=workers, params=params,
                               deadline=budget.deadline)
        why = ("one cluster" if len(instance.clusters) < 2
               else "queues with quotas, which hold across clusters"
               if instance.queue_set is not None
               else f"the whole round's problem takes about {whole_s:.2f} s to build and "
                    f"search on an idle machine, at most {WHOLE_FRACTION:.0%} of the budget")
        return plan.model_copy(update={"message": "; ".join(filter(None, [
            plan.message, f"not decomposed ({why}): solved as one round"]))})
    base = max(params.budget.reserve_s, TAIL_FRACTION * budget_s)
    # the routing reads jobs highest priority first and leaves the parts at least what is
    # left after ROUTE_SHARE of the budget: on a loaded machine it stops early, and the
    # parts place the priorities it read (1M GPUs at load 13: routing alone took 5 s of a
    # 10 s budget and no part was solved)
    # and it reads no more jobs than the parts can then place in the budget at the
    # measured slowdown (:class:`Fill`): under load, fewer jobs routed, and a part built
    fill = Fill(end=budget.deadline - base, merge_s=MERGE_S_PER_JOB * len(instance.jobs),
                fixed_s=BUILD_NODE_S * max(len(c.nodes) for c in instance.clusters),
                per_job_s=READ_JOB_S, slowdown=budget.slowdown)
    found = route(instance, min(budget.deadline - base - MERGE_S_PER_JOB * len(instance.jobs),
                                time.perf_counter() + ROUTE_SHARE * budget.left()),
                  after_s=MERGE_S_PER_JOB * len(instance.jobs), fill=fill)
    slowdown = max(1.0, found.seconds / (ROUTE_FIXED_S + ROUTE_S_PER_JOB * len(instance.jobs)))
    tail = base + MERGE_S_PER_JOB * len(instance.jobs) * slowdown
    parts = {c.name: Part(c.name, [], nodes=len(c.nodes)) for c in instance.clusters}
    for j, cluster in sorted(found.assignment.items()):
        parts[cluster].jobs.append(j)
        prio, gpus, _ = found.jobs[j]
        parts[cluster].value += found.weights.get(prio, 1) * gpus
    todo = [part for part in parts.values() if part.jobs]
    run = _Run(instance, found, params, solver, policy, seed, workers, budget)
    run.merge_s_per_job = MERGE_S_PER_JOB * slowdown
    run.slow = slowdown
    t = time.perf_counter()
    run.solve_parts(todo, budget, tail)
    parts_s = time.perf_counter() - t
    t = time.perf_counter()
    run.refresh_slowdown()
    owed = run.slow * PLAN_S_PER_ADMITTED * sum(part.admitted for part in todo)
    left_out = run.across(todo, budget.deadline - 0.6 * tail - owed)
    across_s = time.perf_counter() - t
    plan = run.merge(todo, left_out, budget, budget_s, notes=[
        f"decomposed by cluster without the whole round's problem: each job to one cluster "
        f"by the routing LP ({found.shapes} shapes, {found.seconds:.2f} s, {found.status}), "
        f"the parts {parts_s:.1f} s, the cross-cluster repair {across_s:.1f} s"])
    if parts_out is not None:
        parts_out.extend(todo)
    return plan


# ---- routing -----------------------------------------------------------------------

UKey = tuple[tuple[int, str, float], ...]  # a job's units as the routing LP reads them
ShapeKey = tuple[int, int, UKey]  # (priority, GPUs, units)


@dataclass
class _Room:
    """Free GPUs per (cluster, type), of them on wholly free nodes, the largest node."""

    free: dict[tuple[str, str], int]
    whole: dict[tuple[str, str], int]
    per_node: dict[tuple[str, str], int]
    types: dict[str, GPUType]
    largest: int = 0  # GPUs of the largest node
    #: (cluster, type) -> free GPUs on a node -> nodes with that many (the slot screen)
    hist: dict[tuple[str, str], dict[int, int]] = field(default_factory=dict)


@dataclass
class _Shapes:
    """The pending jobs grouped by what the routing LP reads of them."""

    shapes: dict[ShapeKey, list[int]]
    info: dict[int, tuple[int, int, frozenset[str]]]  # job -> (priority, GPUs, types)
    types_of: dict[UKey, frozenset[str]]
    big_gpus: dict[UKey, int]  # GPUs in units of whole 8-GPU nodes
    unrouted: list[int]  # jobs not read before the deadline
    #: job -> GPUs of each of its units when every unit stays on one node (the slot
    #: screen, :func:`might_fit`); () when a unit may be cut across nodes
    units: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: job -> its kind: jobs of one kind have the same spec and annotations (all but their
    #: names), so one view of each kind per cluster is what the aggregated bound reads
    kinds: dict[int, int] = field(default_factory=dict)
    #: every job's priority (read or not), by instance.jobs index
    prios: list[int] = field(default_factory=list)


def route(instance: Instance, deadline: float | None = None, after_s: float = 0.0,
          fill: Fill | None = None) -> Route:
    """Each pending job of ``instance`` to one cluster, from the routing LP (see the module
    docstring), and that LP's valid bound on objective 1; without time for the LP (by
    ``deadline``, a ``time.perf_counter()`` value), by free room alone (bound: the demand
    bound). ``after_s``: what the caller needs after it on an idle machine; the jobs are
    read until ``deadline`` less that much more as the node count took longer than idle,
    and (``fill``) until the jobs read are what the parts can place in the budget."""
    t0 = time.perf_counter()
    room = _free_room(instance)
    slow = max(1.0, (time.perf_counter() - t0) /
               max(1e-9, ROUTE_S_PER_NODE * sum(len(c.nodes) for c in instance.clusters)))
    if deadline is not None:
        deadline -= after_s * (slow - 1.0)
    filled = False

    def stop(k: int) -> bool:
        nonlocal filled
        if deadline is not None and time.perf_counter() > deadline:
            return True
        filled = fill is not None and fill.full(k, slow)
        return filled

    sh = _read_shapes(instance, room.types, stop, room.largest)
    total_free = sum(room.free.values())
    weights = _round_weights(instance, sh, total_free)
    clusters = [c.name for c in instance.clusters]
    lp_route, cols = _routing_lp(sh, room, weights, clusters, rows=True)
    lp_bound, _ = _routing_lp(sh, room, weights, clusters, rows=False)
    left = math.inf if deadline is None else deadline - time.perf_counter()
    x: list[float] | None = None
    bound: float | None = None
    status = "no time left"
    if left > 0.05:
        _, status, x = lp_route.maximise(min(left / 2, 30.0))
        value, _, _ = lp_bound.maximise(max(0.01, min(left / 2, 30.0)))
        if value is not None:
            bound = integer_bound(value)
    demand = _demand_bound(sh.info, weights, total_free)
    bound = demand if bound is None else min(bound, demand)
    assignment = _assign(cols, x, sh.info, room.free, clusters)
    if sh.unrouted:  # no bound: the jobs not read are part of the round (nothing is admitted)
        status = (f"read the {len(sh.info):,} highest-priority of {len(instance.jobs):,} jobs: "
                  "what the parts can place in the budget at the measured slowdown "
                  f"({max(slow, fill.slowdown()):.1f}x)" if filled and fill is not None else
                  f"no time left after reading {len(sh.info):,} of {len(instance.jobs):,} jobs")
        bound = None
    return Route(assignment, bound, weights, len(sh.shapes), time.perf_counter() - t0,
                 status if x is not None else f"by free room ({status})", sh.info,
                 dict(room.free), sh.unrouted, sh.units, room.hist, room.largest, sh.kinds)


def _round_weights(instance: Instance, sh: _Shapes, free: int) -> dict[float, int]:
    """The whole round's weights (the checker's): the jobs not read count too. A level's
    weight reads its demand only up to the free GPUs (:func:`priority_weights`), so the jobs
    not read are counted until their level's demand reaches them, their priorities as read
    (1M GPUs under load: each job's GPUs and priority read again for 98,000 jobs not routed
    took 2-3 s of a 10 s round's wall)."""
    per_level: dict[float, int] = defaultdict(int)
    for p, g, _ in sh.info.values():
        per_level[p] += g
    jobs, prios = instance.jobs, sh.prios
    for j in sh.unrouted:
        level = prios[j]
        if per_level[level] < free:
            per_level[level] += spec_gpus(jobs[j])
    return priority_weights(per_level.items(), free)


def spec_gpus(job: TrainingJob) -> int:
    """``job.total_gpus`` read off its spec (about 1 us, where building its units takes
    50): each replica's model-parallel groups, or its first data-parallel group, times the
    replicas, plus the auxiliary groups once, as ``TrainingJob.units`` counts them. A job
    with annotations (a slice size may regroup its units) takes ``total_gpus``."""
    if job.metadata.annotations:
        return job.total_gpus
    groups = job.spec.resource_groups
    mp = [g.gpus_per_group for g in groups if g.type in MODEL_PARALLEL]
    dp = next((g.gpus_per_group for g in groups if g.type == GroupType.DATA_PARALLEL), 0)
    aux = sum(g.gpus_per_group for g in groups if g.type == GroupType.AUXILIARY)
    return (sum(mp) if mp else dp) * job.spec.replica_count + aux


def _free_room(instance: Instance) -> _Room:
    catalog = instance.catalog
    room = _Room(defaultdict(int), defaultdict(int), defaultdict(int), {})
    type_of: dict[str, GPUType] = {}
    for cl in instance.clusters:
        # nodes counted by (type, GPUs, free GPUs): one step per node, the room per kind
        # (131,072 nodes: 0.39 -> 0.1 s of CPU)
        kinds: dict[tuple[str, int, int], int] = defaultdict(int)
        for n in cl.nodes:
            # no faulty GPU: the allocated ones (a dict, validated in range) are the busy
            # ones; free_gpus' tuple (what a part's build reads) is left to the parts built
            kinds[(n.gpu_type, n.gpu_count, n.gpu_count - len(n.allocated) if not n.faulty
                   else n.free_count)] += 1
        for (type_name, count, k), nodes in kinds.items():
            gt = type_of.get(type_name)
            if gt is None:
                gt = type_of[type_name] = catalog.get(type_name)
                room.types[gt.name] = gt
            at = (cl.name, gt.name)
            room.free[at] += k * nodes
            room.per_node[at] = max(room.per_node[at], count)
            room.largest = max(room.largest, count)
            if k == count:
                room.whole[at] += k * nodes
            hist = room.hist.get(at)
            if hist is None:
                hist = room.hist[at] = defaultdict(int)
            hist[k] += nodes
    return room


def _slots(hist: dict[int, int], size: int) -> int:
    """Units of ``size`` GPUs that nodes with these free counts (free GPUs -> nodes) hold,
    one node per unit."""
    return sum(nodes * (k // size) for k, nodes in hist.items() if k >= size)


def might_fit(units: tuple[int, ...], gpus: int, hists: list[dict[int, int]],
              largest: int) -> bool:
    """A necessary condition for a job of ``units`` (GPUs per unit) to fit on nodes with
    these free counts (one histogram per GPU type it may use): as many GPUs as it needs,
    and for each unit size u at least as many u-slots as its units of u GPUs or more take
    (a node of k free GPUs holds units of total size <= k, so at most k // u slots' worth).
    A unit larger than ``largest`` (a node) spans nodes: then only the GPU count."""
    if sum(k * nodes for h in hists for k, nodes in h.items()) < gpus:
        return False
    if not units or max(units) > largest:
        return True
    for u in set(units):
        need = sum(v // u for v in units if v >= u)
        if sum(_slots(h, u) for h in hists) < need:
            return False
    return True


def _read_shapes(instance: Instance, types: dict[str, GPUType],
                 stop: Callable[[int], bool] | None, largest: int = 8) -> _Shapes:
    """The jobs by shape, highest priority first, read until ``stop`` (given the jobs read,
    asked every 1,000 jobs) says so: the jobs not read are of the lowest priorities, which
    the round may still leave pending (no job of lower priority than one not read is
    admitted)."""
    sh = _Shapes(defaultdict(list), {}, {}, {}, [])
    # a job's units follow from its spec and annotations (a slice size) alone
    by_spec: dict[tuple[str, str], tuple[UKey, int, tuple[int, ...]]] = {}
    kind_of: dict[tuple[str, str], int] = {}
    jobs = instance.jobs
    # each job's priority read once, through its spec's value (the property's lookup
    # once per distinct value: 100,000 jobs, 0.15 -> 0.03 s of CPU)
    level: dict[object, int] = {}
    prios = [level[raw] if (raw := job.spec.priority) in level else
             level.setdefault(raw, job.priority) for job in jobs]
    sh.prios = prios
    order = sorted(range(len(jobs)), key=prios.__getitem__, reverse=True)  # stable
    for k, j in enumerate(order):
        if k % 1000 == 999 and stop is not None and stop(k):
            sh.unrouted = order[k:]  # no time to read them: pending
            break
        job, prio = jobs[j], prios[j]
        # 7x cheaper than units(); 146 distinct in 12,500 generated jobs
        annotations = job.metadata.annotations
        spec = (job.spec.model_dump_json(), repr(sorted(annotations.items())) if annotations
                else "")
        known = by_spec.get(spec)
        if known is None:
            units = job.units()
            bound = () if any(PlacementProblem.may_span(u, largest) for u in units) \
                else tuple(sorted(u.gpus for u in units))
            known = by_spec[spec] = (tuple(sorted((u.gpus, u.gpu_types or "", u.min_memory_gb)
                                                  for u in units)), sum(u.gpus for u in units),
                                     bound)
            kind_of[spec] = len(kind_of)
        ukey, gpus, sh.units[j] = known
        sh.kinds[j] = kind_of[spec]
        if ukey not in sh.types_of:
            sh.types_of[ukey] = frozenset(
                name for name, gt in types.items()
                if any((not sel or gt.matches(sel)) and gt.hbm_gb + 1e-9 >= mem
                       for _, sel, mem in ukey))
            sh.big_gpus[ukey] = sum(size for size, _, _ in ukey if size % 8 == 0)
        sh.info[j] = (prio, gpus, sh.types_of[ukey])
        sh.shapes[(prio, gpus, ukey)].append(j)
    return sh


def _routing_lp(sh: _Shapes, room: _Room, weights: dict[float, int], clusters: list[str],
                rows: bool) -> tuple[SparseLp, list[tuple[list[int], dict[str, int], UKey]]]:
    """The routing LP (``rows``: with the whole-node rows, and the columns per shape that
    the rounding reads) or, without them, the bound's relaxation."""
    lp = SparseLp()
    cols: list[tuple[list[int], dict[str, int], UKey]] = []
    free = room.free
    gpu_terms: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    big_terms: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for (prio, gpus, ukey), members in sh.shapes.items():
        eligible = sh.types_of[ukey]
        runs: dict[str, int] = {}
        for name in clusters:
            # in sorted order, not the frozenset's (it changes with the process's hash
            # seed, and with it the LP's columns and its vertex: 4 clusters x 1,024 GPUs
            # routed 500 jobs two ways under 4 seeds)
            mine = [tn for tn in sorted(eligible) if free.get((name, tn), 0) > 0]
            if not mine or sum(free[(name, tn)] for tn in mine) < gpus or gpus == 0:
                continue
            run = lp.col(0, len(members), float(weights.get(prio, 1)) * gpus)
            runs[name] = run
            share = []
            for tn in mine:
                g = lp.col(0, free[(name, tn)])
                share.append((g, 1.0))
                gpu_terms[(name, tn)].append((g, 1.0))
                if rows and sh.big_gpus[ukey] and room.per_node[(name, tn)] == 8:
                    big_terms[(name, tn)].append((g, sh.big_gpus[ukey] / gpus))
            lp.row(share + [(run, -float(gpus))], 0.0, 0.0)
        if len(runs) > 1:
            lp.row([(r, 1.0) for r in runs.values()], -math.inf, len(members))
        if rows:
            cols.append((members, runs, ukey))
    for at, terms in gpu_terms.items():
        lp.row(terms, -math.inf, free[at])
    for at, terms in big_terms.items():
        lp.row(terms, -math.inf, room.whole.get(at, 0))
    return lp, cols


def _assign(cols: list[tuple[list[int], dict[str, int], UKey]], x: list[float] | None,
            info: dict[int, tuple[int, int, frozenset[str]]], free: dict[tuple[str, str], int],
            clusters: list[str]) -> dict[int, str]:
    """The LP's amounts rounded down per shape and cluster, then exchanged by priority
    (:func:`_by_priority`); the rest where most room is left (all of it so without the LP's
    solution ``x``: then :func:`_first_fit`)."""
    if x is None:
        return _first_fit(cols, info, free, clusters)
    room = {c: sum(v for (cc, _), v in free.items() if cc == c) for c in clusters}
    assignment: dict[int, str] = {}
    routed: dict[UKey, list[int]] = defaultdict(list)
    for members, runs, ukey in cols:
        if not runs:  # fits nowhere now: its own part says why (the most GPUs of its types)
            allowed = info[members[0]][2]
            home = max(clusters, key=lambda c: (sum(free.get((c, tn), 0) for tn in allowed),
                                                -clusters.index(c)))
            assignment.update((j, home) for j in members)
            continue
        amounts = {c: (x[r] if x is not None else 0.0) for c, r in runs.items()}
        queue = iter(members)
        for name, amount in sorted(amounts.items(), key=lambda kv: -kv[1]):
            for _ in range(int(math.floor(amount + 1e-6))):
                nxt = next(queue, None)
                if nxt is None:
                    break
                assignment[nxt] = name
                routed[ukey].append(nxt)
                room[name] -= info[nxt][1]
        for j in queue:  # the rest: where most room of its types is left
            best = max(runs, key=lambda c: (room[c], -clusters.index(c)))
            assignment[j] = best
            room[best] -= info[j][1]
    _by_priority(assignment, routed, info, clusters)
    return assignment


def _first_fit(cols: list[tuple[list[int], dict[str, int], UKey]],
               info: dict[int, tuple[int, int, frozenset[str]]],
               free: dict[tuple[str, str], int], clusters: list[str]) -> dict[int, str]:
    """Without the LP's solution (no time for it): jobs highest priority first, each to the
    first cluster (in order) with as many free GPUs of its types left, the GPUs taken from
    its types there; a job that fits nowhere goes where most GPUs of its types are free (its
    part says why). Concentrates high priority in the first clusters, as
    :func:`_by_priority` does after the LP, and costs a step or two per job: the most-room
    rule took about 0.5 s of CPU for 86,000 jobs x 16 clusters (1M GPUs at load 8, where
    the routing's share ran out and its LP was skipped)."""
    left = dict(free)
    assignment: dict[int, str] = {}
    for members, runs, _ in sorted(cols, key=lambda col: -info[col[0][0]][0]):
        _, gpus, allowed = info[members[0]]
        types = sorted(allowed)
        where = [c for c in clusters if c in runs] if runs else []
        home = max(clusters, key=lambda c: (sum(free.get((c, t), 0) for t in types),
                                            -clusters.index(c)))
        at = 0  # free GPUs only fall: a cluster too full for one job of the shape stays so
        for j in members:
            while at < len(where) and \
                    sum(left.get((where[at], t), 0) for t in types) < gpus:
                at += 1
            if at == len(where):
                assignment[j] = home
                continue
            c = where[at]
            assignment[j] = c
            need = gpus
            for t in types:
                take = min(need, left.get((c, t), 0))
                if take:
                    left[(c, t)] -= take
                    need -= take
    return assignment


def _by_priority(assignment: dict[int, str], routed: dict[UKey, list[int]],
                 info: dict[int, tuple[int, int, frozenset[str]]], clusters: list[str]) -> None:
    """Jobs of the same units (so the same GPUs, types and whole-node GPUs: every routing
    row reads them alike) exchanged between the clusters the LP sent them to, highest
    priority to the first cluster: the LP's amounts per cluster, its rows and its objective
    stay as they were, and high priority is no longer spread over every cluster.

    Why: parts are solved one by one and, within a part, greedy places high priority first;
    a part not solved in the budget leaves its jobs pending, and a pending job that might
    fit there leaves out every admitted job of lower priority (:meth:`_Run.across`). With
    the high-priority jobs in the first clusters, what the budget solves is theirs and what
    it does not is the lowest priorities'. (1M GPUs, fragmentation 0.6: the LP's vertex sent
    the 19,543 high-priority jobs it routes to 7 of the 16 clusters, among the normal and low
    jobs there: 9,038 to c00, 94 to c11.)"""
    order = {c: k for k, c in enumerate(clusters)}
    for jobs in routed.values():
        seats = sorted((assignment[j] for j in jobs), key=order.__getitem__)
        for j, c in zip(sorted(jobs, key=lambda j: (-info[j][0], j)), seats):
            assignment[j] = c


def _demand_bound(info: dict[int, tuple[int, int, frozenset[str]]], weights: dict[float, int],
                  free: int) -> float:
    """Free GPUs filled best weight first: a valid bound on objective 1 (jobs counted per
    (priority, GPUs): within one weight the order of the jobs does not change the sum)."""
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for prio, gpus, _ in info.values():
        counts[(prio, gpus)] += 1
    total, left = 0.0, free
    for (prio, gpus), jobs in sorted(counts.items(), key=lambda t: -weights.get(t[0][0], 1)):
        take = min(left, gpus * jobs)
        total += weights.get(prio, 1) * take
        left -= take
        if left <= 0:
            break
    return total


def _one_greedy_pass(r: SolveRound) -> None:
    """Phase 1 of a round as greedy's first pass alone (cut at the round's greedy deadline,
    highest priority first) and its inversion fix: a part solved so that the others get
    the time an exact model or a second pass would take. Labelled a fallback (the exact
    backend was not run for want of budget). A part whose running jobs may be stopped or
    moved keeps the driver's heuristics."""
    p, budget = r.problem, r.budget
    if p.stoppable:
        search(r, "greedy", aggregate=False)
    else:
        start = time.perf_counter()
        stats = GreedyStats()
        r.greedy = r.chosen = solve_greedy(
            p, r.params.greedy, deadline=budget.greedy_deadline(len(p.pending)),
            late_pass_s=budget.late_pass_s, stats=stats, second_pass_ok=lambda _s: False)
        r.greedy_stats, r.greedy_pass_s = stats, stats.first_pass_s
        r.greedy_start, r.greedy_s = start, time.perf_counter() - start
    r.status = SolveStatus.FALLBACK
    r.name = "greedy (one pass: the budget went to the other clusters)"


@dataclass
class _PartRoom:
    """A built part's nodes after its plan: free GPUs, GPU type, GPUs held per priority."""

    free: dict[str, int]
    type_of: dict[str, str]
    held: dict[str, dict[int, int]]

    def hists(self, priority: int) -> dict[str, dict[int, int]]:
        """Per GPU type: GPUs per node that a job of ``priority`` may take (free or held by
        lower priority) -> nodes with that many."""
        out: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        held = self.held
        for node, k in self.free.items():
            mine = held.get(node)
            if mine:
                k += sum(g for level, g in mine.items() if level < priority)
            out[self.type_of[node]][k] += 1
        return out


# ---- parts ---------------------------------------------------------------------------

@dataclass
class _AggregateInputs:
    """What the merge's aggregated bound reads of the round (:meth:`_Run._aggregate_inputs`):
    jobs by kind, built parts by cluster, clusters with free GPUs, its estimated seconds."""

    kinds: dict[int, list[int]]
    have: dict[str, Part]
    free: set[str]
    est_s: float


class _Run:
    """One decomposed round: the parts solved, the cross-cluster repair, the merge."""

    def __init__(self, instance: Instance, found: Route, params: SolveParams, solver: str,
                 policy: str, seed: int, workers: int, budget: Budget) -> None:
        self.instance, self.found, self.params = instance, found, params
        self.solver, self.policy, self.seed, self.workers = solver, policy, seed, workers
        #: the round's budget, whose slowdown (wall per CPU second since the round started,
        #: :meth:`Budget.slowdown`) is what the other processes take of this one's core
        self.budget = budget
        #: how much slower than the idle figures the machine runs now: the routing's, then
        #: the parts' builds (measured; greedy's passes are assumed to slow alike), never
        #: below the round's budget's slowdown (:meth:`refresh_slowdown`)
        self.slow = 1.0
        self.by_name = {job.name: j for j, job in enumerate(instance.jobs)}
        self.cluster_of = {c.name: c for c in instance.clusters}
        self.unbuilt_reason = ""
        self.merge_s_per_job = MERGE_S_PER_JOB

    def estimate(self, part: Part) -> float:
        return self.slow * (NODE_S * part.nodes + JOB_S * len(part.jobs))

    def refresh_slowdown(self) -> None:
        """``slow`` raised to the round's budget's slowdown when that is larger. The builds'
        slowdown is measured once per part; a machine that becomes loaded after them is
        seen here (1M GPUs, budget 30: the builds read 1.2x, the load rose from 1.8 to 7,
        and the cross-cluster repair and the merge, judged at 1.2x, ended the round at
        36.3 s)."""
        self.slow = max(self.slow, self.budget.slowdown())

    def solve_parts(self, todo: list[Part], budget: Budget, tail: float) -> None:
        """Build and solve each part under its share (module docstring, step 2)."""
        for part in todo:
            part.est_s = part.need_s = self.estimate(part)
        todo.sort(key=lambda part: (-part.value / max(1e-9, part.need_s), part.cluster))
        modelled = built_s = 0.0
        for k, part in enumerate(todo):
            rest = todo[k:]
            for q in rest:
                q.est_s = q.need_s = self.estimate(q)
            # what the parts solved so far will take to write, kept back
            owed = self.slow * PLAN_S_PER_ADMITTED * sum(q.admitted for q in todo[:k])
            left = budget.left() - tail - owed
            needs = sum(q.need_s for q in rest)
            part.left_s, part.rest_s = left, needs
            share = left * part.need_s / needs if needs <= left else min(part.need_s, left)
            if share < 0.8 * part.need_s:
                share = self._cut_share(part, left)
            if share <= 0.05:
                self.unbuilt_reason = (f"{left:.1f} s were left for {plural(len(rest), 'part')} "
                                       f"needing about {needs:.1f} s")
                continue  # a smaller part later may still fit
            part.budget_s = share
            t = time.perf_counter()
            part.problem = PlacementProblem(self.part_instance(part.cluster, part.jobs),
                                            self.policy, self.params.model)
            part.build_s = time.perf_counter() - t
            r = SolveRound(part.problem, Budget(share, self.params.budget,
                                                deadline=t + share), self.params)
            if needs > left and self.solver != "greedy":
                # the parts not yet served do not all fit: no exact model now, one greedy
                # pass, and the time it leaves goes to them
                _one_greedy_pass(r)
            else:
                search(r, self.solver, seed=self.seed, workers=self.workers, aggregate=False)
            part.solve_s = time.perf_counter() - t
            part.round = r
            part.status, part.solver = r.status.value, r.name
            part.admitted = len(r.chosen.units)
            # the slowdown the next parts' needs are judged by: the builds so far against
            # their idle figures (a cut greedy pass says nothing of a whole one's time)
            modelled += BUILD_NODE_S * part.nodes + BUILD_JOB_S * len(part.jobs)
            built_s += part.build_s
            # (1M GPUs at load 10: the builds read 2.3x where the routing, cold, read 3.9x
            # and the plans then took 2.4x their idle figure to write)
            self.slow = max(1.0, built_s / modelled, self.budget.slowdown())
            est = estimate_vars(part.problem)
            if r.pm is not None or est:  # what its exact model needed, for the record
                vps = self.params.budget.vars_per_second(
                    "milp" if self.solver in ("auto", "milp") else "cpsat")
                part.need_s = part.build_s + r.greedy_s + est / vps

    def _cut_share(self, part: Part, left: float) -> float:
        """The share of a part that does not fit whole in ``left`` seconds: built, and its
        greedy pass cut (it places high priority first; the jobs not reached stay pending)
        where what it places can still be written; 0 when not even its build and
        ``MIN_GREEDY_S`` of greedy fit. Parts are served by weighted demand per second of
        need, so the one cut holds the most valuable jobs not yet placed (see
        :func:`_by_priority`): a part solved in part beats none."""
        build = self.slow * (BUILD_NODE_S * part.nodes + BUILD_JOB_S * len(part.jobs))
        if left < build + self.slow * MIN_GREEDY_S:
            return 0.0
        # each job greedy places costs about JOB_S to search and PLAN_S_PER_ADMITTED to write
        return build + (left - build) * JOB_S / (JOB_S + PLAN_S_PER_ADMITTED)

    def part_instance(self, cluster: str, jobs: list[int]) -> Instance:
        """One cluster in its current state with ``jobs`` (instance.jobs indices) queued."""
        spec = self.instance.spec.model_copy(update={
            "clusters": [self.cluster_of[cluster]],
            "jobs": [self.instance.jobs[j] for j in jobs], "inter_cluster_links": []})
        return self.instance.model_copy(update={"spec": spec})

    # ---- across clusters (module docstring, step 3) ----------------------------------

    def _room(self, part: Part) -> _PartRoom:
        """A built part's GPUs per node after its plan: free, and held by each priority."""
        assert part.problem is not None and part.round is not None
        p, a = part.problem, part.round.chosen
        room = _PartRoom({n.name: len(n.free) for n in p.nodes},
                         {n.name: n.gpu_type.name for n in p.nodes}, defaultdict(dict))
        for j, units in a.units.items():
            prio = p.jobs[j].priority
            for u in units:
                for node, gpus in u.pieces:
                    room.free[node] -= len(gpus)
                    held = room.held[node]
                    held[prio] = held.get(prio, 0) + len(gpus)
        return room

    def _pending(self, todo: list[Part]) -> dict[int, str]:
        """Pending jobs (instance.jobs index -> the cluster whose list they are on)."""
        placed: set[int] = set()
        out: dict[int, str] = {}
        for part in todo:
            if part.problem is None or part.round is None:
                for j in part.jobs:
                    out.setdefault(j, part.cluster)
                continue
            p, a = part.problem, part.round.chosen
            for jv in p.jobs:
                j = self.by_name[jv.name]
                if jv.index in a.units:
                    placed.add(j)
                elif not jv.impossible:
                    out.setdefault(j, part.cluster)
        return {j: c for j, c in out.items() if j not in placed}

    def _candidates(self, todo: list[Part], tried: dict[str, set[int]]
                    ) -> tuple[dict[str, list[int]], dict[int, str]]:
        """Per cluster, the pending jobs that might fit there on free or lower-priority GPUs
        (not yet tried there), and those that might fit in an unbuilt cluster (job ->
        cluster). Screened per job shape (priority, GPUs, types, units) by
        :func:`might_fit` on the GPUs per node: a necessary condition."""
        pending = self._pending(todo)
        found = self.found
        rooms = {part.cluster: self._room(part) for part in todo if part.round is not None}
        unbuilt: dict[str, dict[str, dict[int, int]]] = defaultdict(dict)
        for (c, t), hist in found.hist.items():
            if c not in rooms:
                unbuilt[c][t] = hist
        shapes: dict[tuple[int, int, frozenset[str], tuple[int, ...]], list[int]] = \
            defaultdict(list)
        for j in pending:
            shapes[(*found.jobs[j], found.units.get(j, ()))].append(j)
        # (cluster, priority) -> type -> GPUs per node a job of that priority may take
        hists: dict[tuple[str, int], dict[str, dict[int, int]]] = {}
        out: dict[str, list[int]] = defaultdict(list)
        stuck: dict[int, str] = {}
        for (prio, gpus, types, units), members in shapes.items():
            for c, room in rooms.items():
                h = hists.get((c, prio))
                if h is None:
                    h = hists[(c, prio)] = room.hists(prio)
                if might_fit(units, gpus, [h[t] for t in types if t in h], found.largest):
                    done = tried.get(c, set())
                    out[c] += [j for j in members if j not in done]
            for c, free in unbuilt.items():
                if might_fit(units, gpus, [free[t] for t in types if t in free],
                             found.largest):
                    for j in members:
                        stuck[j] = c
                    break
        return {c: js for c, js in out.items() if js}, stuck

    def across(self, todo: list[Part], deadline: float) -> dict[int, str]:
        """The cross-cluster repair, then what must be left out for the priority rule:
        admitted job (instance.jobs index) -> the reason it was left out."""
        tried: dict[str, set[int]] = defaultdict(set)
        built = {part.cluster: part for part in todo if part.round is not None}
        if not built:
            return {}
        stuck = self._repair_passes(todo, built, tried, deadline)
        candidates, stuck2 = self._candidates(todo, tried)
        stuck.update(stuck2)
        candidates = self._above_stuck(candidates, stuck)  # below it the left-out rule clears
        unresolved = {j: f"cluster {c} (no time for its repair)" for c, js in candidates.items()
                      for j in js}
        unresolved.update({j: f"cluster {c} (not solved: {self.unbuilt_reason or 'no time'})"
                           for j, c in stuck.items()})
        if self.found.unrouted:  # not read: they might fit anywhere (read by priority, so
            # the first is the highest: it alone sets what is left out)
            unresolved[self.found.unrouted[0]] = \
                "any cluster (the budget ran out before it was routed)"
        return self._left_out(built, unresolved)

    def priority(self, j: int) -> int:
        """The priority of the whole round's job ``j``."""
        info = self.found.jobs.get(j)
        return info[0] if info is not None else self.instance.jobs[j].priority

    def _above_stuck(self, candidates: dict[str, list[int]], stuck: dict[int, str]
                     ) -> dict[str, list[int]]:
        """A job that might fit in an unsolved cluster leaves out every admitted job of lower
        priority anyway: only candidates above the highest such job need a repair."""
        floor = max((self.found.jobs[j][0] for j in stuck), default=None)
        if self.found.unrouted:  # the first not read is the highest of them
            low = self.priority(self.found.unrouted[0])
            floor = low if floor is None else max(floor, low)
        if floor is None:
            return candidates
        out = {c: [j for j in js if self.found.jobs[j][0] > floor] for c, js in candidates.items()}
        return {c: js for c, js in out.items() if js}

    def _repair_passes(self, todo: list[Part], built: dict[str, Part],
                       tried: dict[str, set[int]], deadline: float) -> dict[int, str]:
        """Up to four passes of priority repairs with other clusters' pending jobs (each pass
        only adds tried pairs; the released rarely cascade); the jobs that might fit in an
        unsolved cluster, as the last pass found them."""
        stuck: dict[int, str] = {}
        for _ in range(4):
            if time.perf_counter() >= deadline:
                break  # the candidates are found once more after the passes (across)
            candidates, stuck = self._candidates(todo, tried)
            candidates = self._above_stuck(candidates, stuck)
            if not candidates:
                break
            admitted = {c: self._admitted(part) for c, part in built.items()}
            for c, jobs in sorted(candidates.items(), key=lambda kv: -len(kv[1])):
                # a job one repair of this pass placed is no one else's candidate
                elsewhere = set().union(*(a for cc, a in admitted.items() if cc != c))
                jobs = [j for j in jobs if j not in elsewhere]
                # the repair's cost: the part's views copied, the candidates' built, searched
                self.refresh_slowdown()
                cost = self.slow * (0.3 * NODE_S * built[c].nodes + JOB_S * len(jobs))
                if time.perf_counter() + cost >= deadline:
                    continue  # left to the priority rule
                if jobs:
                    self._repair_with(built[c], jobs, deadline)
                    admitted[c] = self._admitted(built[c])
                tried[c].update(jobs)
            if time.perf_counter() >= deadline:
                break
        return stuck

    def _left_out(self, built: dict[str, Part], unresolved: dict[int, str]) -> dict[int, str]:
        """Every admitted job below the highest unresolved pending job's priority, with the
        reason (that job might fit elsewhere)."""
        if not unresolved:
            return {}
        top = max(self.priority(j) for j in unresolved)
        example = next(j for j in unresolved if self.priority(j) == top)
        why = (f"left out for the priority rule: pending job "
               f"{self.instance.jobs[example].name} (priority {top}) might fit on free GPUs "
               f"of {unresolved[example]}, so no job of lower priority is admitted")
        out: dict[int, str] = {}
        for part in built.values():
            assert part.problem is not None and part.round is not None
            for jv_index in part.round.chosen.units:
                jv = part.problem.jobs[jv_index]
                if jv.priority < top:
                    out[self.by_name[jv.name]] = why
        return out

    def _admitted(self, part: Part) -> set[int]:
        """The instance.jobs indices ``part``'s plan admits."""
        assert part.problem is not None and part.round is not None
        jobs = part.problem.jobs
        return {self.by_name[jobs[j].name] for j in part.round.chosen.units}

    def _repair_with(self, part: Part, extra: list[int], deadline: float) -> None:
        """Rebuild ``part`` with ``extra`` jobs queued too (views reused) and run its priority
        repair from its plan: they are placed, or do not fit on its free and lower-priority
        GPUs."""
        assert part.problem is not None and part.round is not None
        old, a = part.problem, part.round.chosen
        mine = set(part.jobs) | set(part.extra)
        part.extra += [j for j in extra if j not in mine]
        jobs = part.jobs + part.extra
        p = PlacementProblem(self.part_instance(part.cluster, jobs), self.policy,
                             self.params.model, previous=old)
        index = {jv.name: jv.index for jv in p.jobs}
        start = Assignment()
        for j, units in a.units.items():
            jv_old = old.jobs[j]
            jv = p.jobs[index[jv_old.name]]
            pos = {c.index: k for k, c in enumerate(jv_old.classes)}
            start.units[jv.index] = [PlacedUnit(jv.classes[pos[u.uclass]].index, u.unit,
                                                u.pieces) for u in units]
        r = part.round
        r.problem = p
        r.chosen = r.greedy = fix_inversions(p, start, self.params.greedy, deadline)
        r.pm, r.raw_used = None, None  # the exact solution no longer is the plan
        if r.status == SolveStatus.OPTIMAL:
            r.status = SolveStatus.FEASIBLE
        part.problem = p
        part.admitted = len(r.chosen.units)

    # ---- the merged plan -------------------------------------------------------------

    def merge(self, todo: list[Part], left_out: dict[int, str], budget: Budget,
              budget_s: float, notes: list[str]) -> PlacementPlan:
        """One plan of the whole round from the parts' plans (explained in what is left)."""
        built = [part for part in todo if part.round is not None]
        unbuilt = [part for part in todo if part.round is None]
        self.refresh_slowdown()
        self.merge_s_per_job = max(self.merge_s_per_job, MERGE_S_PER_JOB * self.slow)
        # the aggregated bound after the parts' plans, whose explanations leave it its
        # estimate (the plans' own writing is estimated high: 1M GPUs at load 1.4 ended a
        # 30 s round at 16 s): it knows where the free GPUs are, the routing LP only how
        # many there are per cluster and type
        inputs = self._aggregate_inputs(built)
        b, placed, pending, terms = self._part_plans(built, left_out, budget, inputs.est_s)
        agg, agg_note = self.aggregated_bound(
            inputs, budget.deadline - self.merge_s_per_job * len(self.instance.jobs))
        self._not_solved(pending, left_out, unbuilt)
        b.pending = [pj for name, pj in pending.items() if name not in placed]
        weights = self.found.weights
        objective = sum(weights.get(job.priority, 1) * job.gpus for job in b.jobs)  # exact int
        bound = self.found.bound
        if agg is not None and (bound is None or agg < bound):
            bound = agg
        if bound is not None and bound < objective:
            bound = objective  # never: both bounds are valid (kept safe)
        status, name = _label(todo, built, left_out, unbuilt)
        gap, gaps, out_terms = self._gaps_and_terms(objective, bound, len(b.jobs), terms,
                                                    whole=not unbuilt and not left_out)
        notes = notes + _merge_notes(todo, unbuilt, left_out) + [
            f"objective 1 is bounded by {agg_note}" if agg is not None and bound == agg else
            "objective 1 is bounded by the routing LP (GPUs per cluster and type) and the "
            f"demand bound ({agg_note})" if agg is None else
            "objective 1 is bounded by the routing LP (GPUs per cluster and type), tighter "
            f"than {agg_note}"]
        if objective <= 0 and bound:
            notes.append(f"no gap: nothing admitted (objective 0 against a bound of {bound:,.0f})")
        plan = b.build("plan", status=status, solver=name, objective=objective, bound=bound,
                       gap=gap, objective_gaps=gaps, runtime_s=0.0, budget_s=budget_s,
                       message="; ".join(notes), objective_terms=out_terms)
        # stamped once the whole round's plan is built and validated (5,000-100,000 jobs at
        # 1M GPUs: up to a second under load), as the driver's plans are
        return plan.model_copy(update={"runtime_s": round(budget.elapsed(), 4)})

    def _aggregate_inputs(self, built: list[Part]) -> _AggregateInputs:
        """What :meth:`aggregated_bound` reads of the round, derived once: the jobs by kind
        (:attr:`Route.kinds`), the built parts by cluster, the clusters with free GPUs, and
        the seconds it is estimated to take (0 when it cannot run: a job not routed): per
        node of a view-reusing rebuild of a built part (``0.3 x BUILD_NODE_S``), of a whole
        build (``WHOLE_NODE_S``: fabric and views) for a cluster with free GPUs and no part,
        per kind and cluster of its views (``BUILD_JOB_S``) and LP
        (``AGG_S_PER_COLUMN_SET``); times the slowdown."""
        found = self.found
        kinds: dict[int, list[int]] = defaultdict(list)
        have = {part.cluster: part for part in built if part.problem is not None}
        free = {c for (c, _), k in found.free.items() if k > 0}
        if found.unrouted:
            return _AggregateInputs(kinds, have, free, 0.0)
        for j, kind in found.kinds.items():
            kinds[kind].append(j)
        est = self.slow * (
            0.3 * BUILD_NODE_S * sum(part.nodes for c, part in have.items() if c in free) +
            WHOLE_NODE_S * sum(len(self.cluster_of[c].nodes) for c in free - set(have)) +
            (BUILD_JOB_S + AGG_S_PER_COLUMN_SET) * len(kinds) * len(free))
        return _AggregateInputs(kinds, have, free, est)

    def aggregated_bound(self, inputs: _AggregateInputs, deadline: float
                         ) -> tuple[float | None, str]:
        """The aggregated model's bound on objective 1 of the whole round
        (:mod:`~hyperplace.solvers.backends.aggregate`), from the parts' node views, and
        what the plan says of it: None (and why) when a job was not routed, a cluster's
        model is a restriction, or its estimate ``est`` (:meth:`_aggregate_estimate`) does
        not fit before ``deadline``.

        Per cluster with free GPUs a problem of one job of each kind (``kinds``) on its
        part's node views (reused: ``previous=``) or new ones, its jobs' columns written
        with the whole round's weights; one row per kind across clusters (each job runs in
        one). Every row holds for every valid plan of the whole round, whatever the
        routing, so the LP optimum bounds objective 1 (the one rounding, :func:`~hyperplace.solvers.backends.safebound.integer_bound`)."""
        t0 = time.perf_counter()
        found = self.found
        if found.unrouted:
            return None, "no aggregated bound: it needs every job routed"
        kinds, have, free, est = inputs.kinds, inputs.have, inputs.free, inputs.est_s
        fresh = free - set(have)
        reps = [members[0] for members in kinds.values()]
        if time.perf_counter() + est > deadline:
            return None, (f"no aggregated bound: its estimated {est:.1f} s did not fit"
                          + (f" ({plural(len(fresh), 'cluster')} with free GPUs and no part "
                             "to build)" if fresh else ""))
        lp = SparseLp()
        runs: list[list[int]] = [[] for _ in reps]
        for cluster in sorted(free):
            part = have.get(cluster)
            probe = PlacementProblem(self.part_instance(cluster, reps), self.policy,
                                     self.params.model,
                                     previous=None if part is None else part.problem)
            if probe.restrictions():
                return None, f"no aggregated bound: cluster {cluster}'s model is a restriction"
            views = {jv.name: jv for jv in probe.pending}
            columns = Columns(lp, probe, found.weights)
            for k, members in enumerate(kinds.values()):
                jv = views[self.instance.jobs[members[0]].name]
                if not jv.impossible:  # in this cluster
                    runs[k] += [run for run, _ in columns.add(jv, len(members)).values()]
            columns.close()
        for k, members in enumerate(kinds.values()):
            one_cluster(lp, runs[k], len(members))
        built_s = time.perf_counter() - t0
        left = deadline - time.perf_counter()
        if left <= 0.01:
            return None, "no aggregated bound: no time left for its LP"
        value, status, _ = lp.maximise(left)
        if value is None:
            return None, f"no aggregated bound: HiGHS {status}"
        return integer_bound(value), (
            f"the aggregated model's LP relaxation over every cluster ({len(reps):,} job "
            f"kinds, {len(lp.lb):,} columns, {time.perf_counter() - t0:.2f} s, of which "
            f"views and columns {built_s:.2f} s)")

    def _gaps_and_terms(self, objective: float, bound: float | None, admitted: int,
                        terms: dict[str, float], whole: bool
                        ) -> tuple[float | None, dict[str, float | None], dict[str, float]]:
        """Objective 1's gap, every objective's gap and the plan's terms; the lower terms
        add up over clusters only when every part was built and none was cut (``whole``)."""
        pending_ok = sum(1 for j, (_, _, types) in self.found.jobs.items() if types)
        # nothing admitted: the gap (bound - 0) / 1 would be the bound itself (7e13 at 1M
        # GPUs), true but no ratio anyone reads; the bound stays, the message says both
        gap = relative_gap(objective, bound) if objective > 0 else None
        gaps: dict[str, float | None] = {"admitted_priority_demand": gap}
        gaps["admitted_jobs"] = 0.0 if admitted >= pending_ok else None
        out_terms = {"admitted_priority_demand": objective, "admitted_jobs": float(admitted)}
        if whole:
            for term, value in terms.items():
                if term not in out_terms:
                    out_terms[term] = value
                    gaps.setdefault(term, None)
        return gap, gaps, out_terms

    def _part_plans(self, built: list[Part], left_out: dict[int, str], budget: Budget,
                    kept_s: float = 0.0
                    ) -> tuple[PlanBuilder, set[str], dict[str, PendingJob], dict[str, float]]:
        """The solved parts' plans, finished under shares of what is left (less ``kept_s``
        seconds, kept for the aggregated bound) and merged: the builder with their admitted
        jobs (less ``left_out``), the names placed, the pending jobs (a job's own cluster
        says why first) and the objective terms summed."""
        b = PlanBuilder(self.instance)
        placed: set[str] = set()
        pending: dict[str, PendingJob] = {}
        elsewhere: dict[str, PendingJob] = {}
        terms: dict[str, float] = defaultdict(float)
        for k, part in enumerate(built):
            r = part.round
            assert r is not None
            # explanations share what the plans (this one's and the later ones') leave
            owed = [self.slow * PLAN_S_PER_ADMITTED * q.admitted for q in built[k:]]
            spare = budget.left() - self.merge_s_per_job * len(self.instance.jobs) - \
                sum(owed) - kept_s
            share = max(0.0, spare) / (len(built) - k) + owed[0]
            r.budget = Budget(share, self.params.budget, deadline=time.perf_counter() + share)
            r.budget_s = share
            plan = finish(r, tighten=False)
            keep = [job for job in plan.jobs if self.by_name[job.job] not in left_out]
            names = {job.job for job in keep}
            b.placements += [u for u in plan.placements if u.job in names]
            b.jobs += keep
            placed |= names
            for pj in plan.pending:
                j = self.by_name[pj.job]
                if self.found.assignment.get(j) == part.cluster:
                    pending[pj.job] = pj
                else:
                    elsewhere.setdefault(pj.job, pj)
            for name, value in plan.objective_terms.items():
                terms[name] += value
        for name, pj in elsewhere.items():
            pending.setdefault(name, pj)
        return b, placed, pending, terms

    def _not_solved(self, pending: dict[str, PendingJob], left_out: dict[int, str],
                    unbuilt: list[Part]) -> None:
        """Reasons for the jobs no part's plan explains: left out for the priority rule, in
        a part not built, not routed."""
        templates: dict[str, list[str]] = {}

        def waiting(name: str, why: str) -> PendingJob:
            reasons = templates.get(why)
            if reasons is None:  # validated once per reason
                reasons = templates[why] = PendingJob(job=name, reasons=[why]).reasons
            return _pending_entry(name, reasons)

        for j, why in left_out.items():
            name = self.instance.jobs[j].name
            pending[name] = waiting(name, why)
        for part in unbuilt:
            why = (f"not tried: the budget ran out before cluster {part.cluster}'s part "
                   f"({len(part.jobs):,} jobs) was built ({self.unbuilt_reason})")
            for j in part.jobs:
                name = self.instance.jobs[j].name
                if name not in pending:
                    pending[name] = waiting(name, why)
        why = (f"not tried: the budget ran out while jobs were routed to clusters "
               f"({len(self.found.unrouted):,} jobs not reached)")
        for j in self.found.unrouted:
            name = self.instance.jobs[j].name
            if name not in pending:
                pending[name] = waiting(name, why)


_SLOTS = BaseModel.__dict__  # pydantic's slot setters, as models.job's units use them
_SET_DICT = _SLOTS["__dict__"].__set__
_SET_FIELDS = _SLOTS["__pydantic_fields_set__"].__set__
_SET_EXTRA = _SLOTS["__pydantic_extra__"].__set__
_SET_PRIVATE = _SLOTS["__pydantic_private__"].__set__
_PENDING_FIELDS = frozenset({"job", "reasons", "analysis"})


def _pending_entry(name: str, reasons: list[str]) -> PendingJob:
    """A pending job with a reason already validated (``analysis: skipped``), its fields
    set directly: 100,000 of them in a 1M-GPU round's merge, where ``model_copy`` per entry
    cost 0.59 s of CPU and this 0.40 s (2026-12-02). The reasons list is shared, as a
    shallow ``model_copy`` shares it."""
    entry = object.__new__(PendingJob)
    _SET_DICT(entry, {"job": name, "reasons": reasons, "analysis": "skipped",
                      "inadmissible": False})
    _SET_FIELDS(entry, set(_PENDING_FIELDS))
    _SET_EXTRA(entry, None)
    _SET_PRIVATE(entry, None)
    return entry



def _label(todo: list[Part], built: list[Part], left_out: dict[int, str],
           unbuilt: list[Part]) -> tuple[SolveStatus, str]:
    """The merged plan's status (feasible only when every part was solved exactly, none cut,
    none left out) and its solver's name."""
    exact = all(part.status in ("optimal", "feasible") for part in todo) and \
        not left_out and not unbuilt
    status = SolveStatus.FEASIBLE if exact else SolveStatus.FALLBACK
    solvers = sorted({part.solver for part in built})
    name = f"decomposed ({plural(len(todo), 'cluster')}: " + ", ".join(solvers) + ")" \
        if solvers else f"decomposed ({plural(len(todo), 'cluster')}: none solved)"
    return status, name

def _merge_notes(todo: list[Part], unbuilt: list[Part], left_out: dict[int, str]) -> list[str]:
    """What the merged plan's message says of its parts."""
    notes = [
        "parts solved under budgets split by measured need (" + "; ".join(
            f"{part.cluster} {len(part.jobs):,} jobs need {part.need_s:.1f} s -> "
            f"{part.budget_s:.1f} s {part.status}" for part in todo[:6])
        + ("; ..." if len(todo) > 6 else "") + ")"]
    if unbuilt:
        notes.append(f"{plural(len(unbuilt), 'cluster')} not solved in the budget ("
                     + ", ".join(part.cluster for part in unbuilt[:8])
                     + ("..." if len(unbuilt) > 8 else "") + "): their jobs are pending")
    if left_out:
        notes.append(f"{len(left_out):,} admitted jobs left out for the priority rule "
                     "(their reasons say why)")
    notes.append("the merged plan is never labelled optimal")
    return notes
