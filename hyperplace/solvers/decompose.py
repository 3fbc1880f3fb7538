"""A round of several clusters solved cluster by cluster: each job to one cluster by the
aggregated model's LP (:mod:`~hyperplace.solvers.backends.aggregate`), each cluster's part
solved by the driver under its share of the budget, the parts merged into one plan of the
whole round, whose bound, gaps and explanations are the whole round's.

Why: a job runs in one cluster, so once each job has a cluster the clusters are independent
rounds: each part's model is a sixteenth of the whole at 16 clusters, and the exact
backend fits in a part's share where the whole model fits in no budget. What is lost is
the choice of cluster: a job the LP sent to one cluster is not tried in another (the
merged plan's priority repair runs on the whole round, so no pending job fits on free or
lower-priority GPUs anywhere, the checker's rule). The merged plan is never ``optimal``
unless its bound proves objective 1 and each part was proven; its lower objectives have no
valid bound for the whole (their gaps are None).

The budget is split by measured need: after every part's problem is built (the time that
took is measured), each part gets what is left in proportion to what it needs, its exact
model's estimated time (``estimate_vars / vars_per_second``) plus its build time (greedy's
pass costs about as much); a part that finishes early leaves its time to the parts after
it, solved largest need first.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.backends.aggregate import aggregate_bound
from hyperplace.solvers.budget import Budget
from hyperplace.solvers.driver import SOLVERS, SolveRound, estimate_vars, finish, search
from hyperplace.solvers.heuristics.greedy import repair_priority
from hyperplace.solvers.params import SolveParams
from hyperplace.words import plural

__all__ = ["Part", "solve_decomposed"]

#: Share of the budget kept for the merged round's priority repair, bounds, explanations
#: and plan (the driver's own tail; at least ``BudgetParams.reserve_s``).
TAIL_FRACTION = 0.12


@dataclass
class Part:
    """One cluster's share of the round: its jobs, its need, what its solve took and said."""

    cluster: str
    jobs: list[int]  # indices of the whole round's jobs
    build_s: float = 0.0
    need_s: float = 0.0
    budget_s: float = 0.0
    solve_s: float = 0.0
    status: str = ""
    solver: str = ""
    admitted: int = 0
    problem: PlacementProblem | None = field(default=None, repr=False)


def solve_decomposed(instance: Instance, *, solver: str = "auto", budget_s: float = 10.0,
                     policy: str = "performance", seed: int = 0, workers: int = 2,
                     params: SolveParams | None = None, deadline: float | None = None,
                     parts_out: list[Part] | None = None) -> PlacementPlan:
    """Solve one round of ``instance`` cluster by cluster within ``budget_s`` seconds (see
    the module docstring); one cluster, or a round the aggregated model does not cover,
    is solved whole by the driver. ``parts_out`` receives each part's record (the bench's
    per-cluster figures)."""
    from hyperplace.solvers.driver import solve_placement

    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; use one of {', '.join(SOLVERS)}")
    params = params or SolveParams()
    budget = Budget(budget_s, params.budget, deadline)
    if len(instance.clusters) < 2 or instance.queue_set is not None:
        # one cluster: nothing to split; quotas: they hold across clusters
        plan = solve_placement(instance, solver=solver, budget_s=budget_s, policy=policy,
                               seed=seed, workers=workers, params=params,
                               deadline=budget.deadline)
        why = ("one cluster" if len(instance.clusters) < 2
               else "queues with quotas, which hold across clusters")
        return plan.model_copy(update={"message": "; ".join(filter(None, [
            plan.message, f"not decomposed ({why}): solved as one round"]))})
    p = PlacementProblem(instance, policy, params.model)
    built_s = budget.elapsed()
    tail = max(params.budget.reserve_s, TAIL_FRACTION * budget_s)
    whole = aggregate_bound(p, budget.deadline - tail, assign=True)
    assignment = whole.assignment if whole.assignment is not None else _by_room(p)
    parts = {c.name: Part(c.name, []) for c in instance.clusters}
    for j, cluster in sorted(assignment.items()):
        parts[cluster].jobs.append(j)
    todo = [part for part in parts.values() if part.jobs]
    for part in todo:
        t = time.perf_counter()
        part.problem = PlacementProblem(_part_instance(instance, part, p), policy,
                                        params.model, previous=p)
        part.build_s = time.perf_counter() - t
        backend = "milp" if solver in ("auto", "milp") else "cpsat"
        part.need_s = part.build_s + estimate_vars(part.problem) / \
            params.budget.vars_per_second(backend)
    merged = Assignment()
    parts_start = time.perf_counter()
    todo.sort(key=lambda part: -part.need_s)
    for k, part in enumerate(todo):
        assert part.problem is not None
        left = budget.left() - tail
        share = left * part.need_s / max(1e-9, sum(q.need_s for q in todo[k:]))
        part.budget_s = max(0.0, share)
        t = time.perf_counter()
        sub = SolveRound(part.problem, Budget(max(part.budget_s, 1e-3), params.budget,
                                               deadline=t + part.budget_s), params)
        search(sub, solver, seed=seed, workers=workers, aggregate=False)
        part.solve_s = time.perf_counter() - t
        part.status, part.solver = sub.status.value, sub.name
        part.admitted = len(sub.chosen.units)
        _merge(p, part.problem, sub.chosen, merged)
    parts_s = time.perf_counter() - parts_start
    r = SolveRound(p, budget, params, budget_s=budget_s)
    r.agg_bound, r.agg_s = whole.bound, whole.seconds
    t = time.perf_counter()
    r.chosen = r.greedy = repair_priority(p, merged, params.greedy, budget.deadline)
    repair_s = time.perf_counter() - t
    statuses = {part.status for part in todo}
    exact = statuses <= {SolveStatus.OPTIMAL.value, SolveStatus.FEASIBLE.value}
    r.status = SolveStatus.FEASIBLE if exact or not todo else SolveStatus.FALLBACK
    r.name = f"decomposed ({plural(len(todo), 'cluster')}: " + ", ".join(
        sorted({part.solver for part in todo})) + ")"
    how = (f"the aggregated model's LP ({whole.seconds:.2f} s)" if whole.assignment is not None
           else f"free room (the aggregated model's LP: {whole.status or 'not solved'})")
    r.note(f"decomposed by cluster: the whole round's problem {built_s:.1f} s, each job to "
           f"one cluster by {how}, the parts {parts_s:.1f} s, the priority repair of the "
           f"whole {repair_s:.1f} s; parts solved under budgets split by measured need ("
           + "; ".join(f"{part.cluster} {len(part.jobs)} jobs {part.budget_s:.1f} s "
                       f"{part.status}" for part in todo[:8])
           + ("; ..." if len(todo) > 8 else "") + ")")
    if parts_out is not None:
        parts_out.extend(todo)
    return finish(r)


def _by_room(p: PlacementProblem) -> dict[int, str]:
    """Each pending job to the cluster with the most free GPUs left of the types it may use
    (queue order, the job's GPUs taken off): the assignment when the LP did not run."""
    room: dict[tuple[str, str], int] = {}
    for n in p.nodes:
        key = (n.cluster.name, n.gpu_type.name)
        room[key] = room.get(key, 0) + len(n.free)
    out: dict[int, str] = {}
    for jv in p.pending:
        if jv.impossible:
            continue
        types = p.types_for(jv.classes)
        per_cluster: dict[str, int] = {}
        for (cluster, t), free in room.items():
            if t in types:
                per_cluster[cluster] = per_cluster.get(cluster, 0) + free
        if not per_cluster:
            continue
        best = max(per_cluster, key=lambda c: per_cluster[c])
        out[jv.index] = best
        left = jv.gpus
        for (cluster, t) in sorted(room, key=lambda k: -room[k]):
            if cluster == best and t in types and left > 0:
                take = min(left, room[(cluster, t)])
                room[(cluster, t)] -= take
                left -= take
    return out


def _part_instance(instance: Instance, part: Part, p: PlacementProblem) -> Instance:
    """The part's cluster in its current state with the part's jobs as its queue."""
    cluster = next(c for c in instance.clusters if c.name == part.cluster)
    jobs = [p.jobs[j].job for j in part.jobs]
    spec = instance.spec.model_copy(update={"clusters": [cluster], "jobs": jobs,
                                            "inter_cluster_links": []})
    return instance.model_copy(update={"spec": spec})


def _merge(p: PlacementProblem, sub: PlacementProblem, a: Assignment, into: Assignment) -> None:
    """The part's placements as the whole round's (job and unit class indices mapped by job
    name and class position; a job whose classes differ between the two views is left out,
    so the merged plan stays valid)."""
    index = {jv.name: jv.index for jv in p.jobs}
    for sj, units in a.units.items():
        name = sub.jobs[sj].name
        gj = index[name]
        mine, theirs = sub.jobs[sj].classes, p.jobs[gj].classes
        if [(c.size, c.count, c.group) for c in mine] != \
                [(c.size, c.count, c.group) for c in theirs]:
            continue
        pos = {c.index: k for k, c in enumerate(mine)}
        into.units[gj] = [PlacedUnit(theirs[pos[u.uclass]].index, u.unit, u.pieces)
                          for u in units]
    into.untried.update(index[sub.jobs[j].name] for j in a.untried)
