"""The budgeted driver: greedy first, then an exact backend started from greedy's plan.

``auto`` picks the backend: CP-SAT, hinted with greedy's complete assignment, for small models
and models with NVLink-clique variables; HiGHS (through PuLP) for large all-NVSwitch models,
where it proves optima CP-SAT does not reach in the budget. Either way greedy's objective is a
lower-bound cut and greedy's plan the fallback.

A budget is a promise: whatever happens, a valid plan comes back within it, and its status
says which one it is (``optimal``/``feasible`` from the exact backend, ``fallback`` when the
exact backend had nothing better in time, ``feasible`` for ``--solver greedy``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from dataclasses import dataclass, field

from hyperplace.formulations.explain import explain
from hyperplace.formulations.linear import RawSolution
from hyperplace.formulations.mapping import (
    Assignment,
    decode,
    encode,
    objective_terms,
    to_plan,
)
from hyperplace.formulations.placement import PlacementModel, PlacementProblem, build_model
from hyperplace.models.migration import MigrationPolicy
from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.result import SolveStats, SolveStatus, relative_gap
from hyperplace.solvers.backends.backend import Backend, BackendOptions
from hyperplace.solvers.heuristics.greedy import (
    GreedyStats,
    fit_probe,
    fix_inversions,
    solve_greedy,
)
from hyperplace.solvers.heuristics import families
from hyperplace.solvers.budget import Budget
from hyperplace.solvers.params import SolveParams
from hyperplace.solvers.heuristics.warm import WarmStart

SOLVERS = ("auto", "cpsat", "milp", "greedy")
EXACT_BACKENDS = ("cpsat", "milp")


def make_backend(name: str, params: SolveParams | None = None) -> Backend:
    """The exact backend called ``name`` (``"cpsat"`` or ``"milp"``)."""
    params = params or SolveParams()
    if name == "cpsat":
        from hyperplace.solvers.backends.cpsat import CpSatBackend  # loaded when used: OR-Tools and
        # the pandas it imports cost a second of start-up that --solver milp/greedy never use

        return CpSatBackend(params.cpsat)
    if name == "milp":
        from hyperplace.solvers.backends.milp import MilpBackend

        return MilpBackend()
    raise ValueError(f"unknown backend {name!r}; use one of {', '.join(EXACT_BACKENDS)}")


def demand_bound(p: PlacementProblem) -> float:
    """Upper bound on objective 1 without a solver: the free GPUs filled best-weight first,
    with the GPUs and demands the round's families add (:meth:`RoundExtension.bound_demands
    <hyperplace.formulations.placement.extensions.RoundExtension.bound_demands>`; with
    preemption: the candidates' GPUs, filled by pending jobs and candidates kept alike,
    plus the running jobs that cannot be stopped; with migrations: the free GPUs alone, a
    mover taking no fewer GPUs than it frees)."""
    left = p.free_gpus
    items = [(p.weights[jv.priority], jv.gpus) for jv in p.pending if not jv.impossible]
    for ext in p.extensions:
        freed, demands = ext.bound_demands()
        left += freed
        items += demands
    total = float(p.kept_running_demand(range(len(p.stoppable))))
    for weight, gpus in sorted(items, key=lambda t: -t[0]):
        take = min(left, gpus)
        total += weight * take
        left -= take
        if left <= 0:
            break
    return total


def placeable_gpus(p: PlacementProblem) -> int:
    """GPUs a plan of the round can place at most, what building its plan scales with (it
    lists every placed GPU): the free GPUs and those the families count (with preemption
    the running jobs'), at most what the round's jobs ask (131,072 GPUs / 16,384 jobs at
    fragmentation 0.6: 22,095 of 52,429 free)."""
    return min(p.weight_capacity, sum(jv.gpus for jv in p.jobs))


def auto_backend(p: PlacementProblem, params: SolveParams | None = None) -> str:
    """The backend ``auto`` uses: HiGHS for large all-NVSwitch models, CP-SAT otherwise."""
    budget = (params or SolveParams()).budget
    uniform = all(nc.uniform for nc in p.node_classes)
    return "milp" if uniform and estimate_vars(p) > budget.auto_milp_above_vars else "cpsat"


def estimate_vars(p: PlacementProblem) -> int:
    """Piece variables the model would have: one per (class, size, uniform node class), and
    up to one per candidate GPU set on non-uniform nodes (DGX-1, PCIe)."""
    known: int | None = p.__dict__.get("_estimated_vars")
    if known is not None:  # the driver asks up to three times
        return known
    uniform = sum(1 for nc in p.node_classes if nc.uniform)
    odd = [len(nc.rep.free) for nc in p.node_classes if not nc.uniform]
    total = 0
    for b in p.bundles:
        for c in p.jobs[b[0]].classes:
            copies = c.count if c.flexible else 1  # flexible pieces: variables per unit
            for size in c.size_options:
                total += copies * (uniform + sum(math.comb(f, size) for f in odd if f >= size))
    p.__dict__["_estimated_vars"] = total
    return total


def solve_placement(instance: Instance, *, solver: str = "auto", budget_s: float = 10.0,
                    policy: str = "performance", seed: int = 0, workers: int = 2,
                    params: SolveParams | None = None, deadline: float | None = None,
                    warm: WarmStart | None = None, preemption: str = "never",
                    migration: MigrationPolicy | None = None, hot_spares: int = 0,
                    write_s: float = 0.0) -> PlacementPlan:
    """Solve one scheduling round of ``instance`` within ``budget_s`` seconds.

    Parameters
    ----------
    instance : Instance
        Clusters with their GPU state and the pending jobs.
    solver : str
        ``auto``, ``cpsat``, ``milp`` or ``greedy``.
    budget_s : float
        Seconds from the loaded instance to the plan, explanations included.
    policy : str
        ``performance`` or ``cost`` (objective 4).
    seed, workers : int
        For backends that use them (CP-SAT).
    params : SolveParams, optional
        Tunables of the model, the budget split and the solvers.
    deadline : float, optional
        A ``time.perf_counter()`` value the plan must be ready by, when that is sooner than
        ``budget_s`` from now: the CLI passes process start + budget - the time it keeps
        for writing, so that the budget covers reading the files too.
    write_s : float
        That time for writing, an idle machine's figure already taken off ``deadline``:
        the plan is made ready earlier by ``(slowdown - 1) x write_s`` as the machine is
        measured slower (:meth:`~hyperplace.solvers.budget.Budget.slowdown`).
    warm : WarmStart, optional
        What the previous round of the same clusters left (``PlacementSession`` and the
        simulator pass one): unchanged node and job views are reused, and the previous
        placements still valid start the round when they score at least as well as greedy
        (see :mod:`~hyperplace.solvers.heuristics.warm`). Updated with this round's problem and plan.
    preemption : str
        ``never``, ``lower-priority`` or ``reclaim-within-cohort``: running jobs
        (``spec.runningJobs``) the round may stop, decided inside the one model
        (:mod:`~hyperplace.formulations.placement.preemption`); greedy's plan then tries
        victim sets in order of lost work (:func:`~hyperplace.solvers.heuristics.greedy_preempt.greedy_preempt`).
    hot_spares : int
        Whole free nodes every leaf keeps free for repairs (an operator setting,
        :mod:`~hyperplace.formulations.placement.spares`): a constraint of the model, so
        the solver chooses which nodes stay spare; greedy keeps the same rule. The plan
        records it (``hotSpares``).

    Returns
    -------
    PlacementPlan
        A plan that passes the independent checker, with status, bound and gap.
    """
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; use one of {', '.join(SOLVERS)}")
    params = params or SolveParams()
    budget = Budget(budget_s, params.budget, deadline, write_s=write_s)
    if migration is not None and migration.max_movers is None:
        # the CLI's deadline has reading the files taken off already
        migration = dataclasses.replace(migration, max_movers=budget.max_movers())
    if warm is not None and (preemption != "never" or migration is not None):
        warm = None  # such a round is built whole (victims' or movers' GPUs marked on its views)
    problem = (warm.build(instance, policy, params.model, hot_spares) if warm is not None
               else PlacementProblem(instance, policy, params.model, preemption=preemption,
                                     migration=migration, hot_spares=hot_spares))
    r = SolveRound(problem, budget, params, budget_s=budget_s)
    search(r, solver, warm=warm, seed=seed, workers=workers)
    return finish(r, warm=warm, hot_spares=hot_spares)


def search(r: SolveRound, solver: str, *, warm: WarmStart | None = None, seed: int = 0,
           workers: int = 2, aggregate: bool = True) -> None:
    """Phases 0-2 of a round: the aggregated bound (when ``aggregate``), greedy, the exact
    backend; ``r.chosen`` is then the plan's assignment."""
    problem, params = r.problem, r.params
    if aggregate:
        _aggregate(r)
    backend_name = None if solver == "greedy" else \
        solver if solver != "auto" else auto_backend(problem, params)
    _heuristics(r, warm, backend_name)
    if backend_name is not None:
        _exact(r, backend_name, BackendOptions(seed=seed, workers=workers))
        if r.greedy_stats.second_skipped:
            r.note(f"greedy ran one pass ({r.greedy_stats.first_pass_s:.1f} s): a second "
                   f"would have taken the time {backend_name}'s model needs")


def finish(r: SolveRound, *, warm: WarmStart | None = None, hot_spares: int = 0,
           tighten: bool = True) -> PlacementPlan:
    """Phases 3-4 of a round: bounds, gaps, explanations, and the plan of ``r.chosen``
    (``tighten``: try the LP relaxation's bound; a caller that bounds the round itself, as
    a decomposed round's parts, skips it)."""
    problem, budget = r.problem, r.budget
    _restrictions(r)
    _bounds(r, tighten)
    _gaps(r)
    skipped: set[int] = set()
    reasons = _explanations(r, skipped)
    if skipped:
        r.note(f"{len(skipped):,} of {len(reasons):,} pending jobs got a generic reason only "
               "(the per-job analysis did not fit in the budget; their entries say "
               "analysis: skipped)")
    stats = SolveStats(status=r.status, solver=r.name, objective=r.objective, bound=r.bound,
                       gap=relative_gap(r.objective, r.bound), objective_gaps=r.gaps,
                       runtime_s=budget.elapsed(), budget_s=r.budget_s,
                       message=r.message.strip())
    if warm is not None:
        warm.remember(problem, r.chosen)
    plan = to_plan(problem, r.chosen, stats, reasons, r.terms, skipped)
    # runtimeS is stamped once the plan is built: it covers what the caller waited for
    # (building the plan of 131,072 GPUs took 2.5 s of wall at load 11, and a runtimeS
    # stamped before it said 9.3 s of a 10 s budget for a solve that took 11.8 s)
    update: dict[str, object] = {"runtime_s": round(budget.elapsed(), 4)}
    if hot_spares:
        update["hot_spares"] = hot_spares
    return plan.model_copy(update=update)


@dataclass
class SolveRound:
    """What the phases of one solve share: the problem, the budget, the plan chosen so far
    and what the plan will say of it (``budget_s``: the budget the plan reports)."""

    problem: PlacementProblem
    budget: Budget
    params: SolveParams
    budget_s: float | None = None
    greedy: Assignment = field(default_factory=Assignment)
    chosen: Assignment = field(default_factory=Assignment)
    greedy_start: float = 0.0
    greedy_pass_s: float = 0.0
    greedy_s: float = 0.0
    greedy_stats: GreedyStats = field(default_factory=GreedyStats)
    name: str = "greedy"
    status: SolveStatus = SolveStatus.FEASIBLE
    message: str = ""
    pm: PlacementModel | None = None
    bound: float | None = None
    raw_used: RawSolution | None = None  # the exact solution the plan is, when it is one
    restricted: list[str] = field(default_factory=list)
    lp_bound: float | None = None
    #: the aggregated model's LP bound on objective 1 (solvers.backends.aggregate)
    agg_bound: float | None = None
    agg_s: float = 0.0
    #: the aggregated bound was run (phase 0 or its second chance in phase 3)
    agg_tried: bool = False
    terms: dict[str, float] = field(default_factory=dict)
    objective: float = 0.0
    gaps: dict[str, float | None] = field(default_factory=dict)

    def note(self, text: str) -> None:
        """Append a sentence to the message, after "; " when there is one."""
        self.message += ("; " if self.message.strip() else "") + text


def _aggregate(r: SolveRound, late: bool = False) -> None:
    """Phase 0: the aggregated model's LP bound on objective 1 (leaves folded, jobs by
    shape: a few hundred columns, :mod:`~hyperplace.solvers.backends.aggregate`), when the
    budget affords it (:meth:`Budget.aggregate_fits`). It runs first because it needs no
    plan and is cheap: on the largest rounds nothing else that bounds the optimum fits
    (131,072 GPUs: 0.3 s, where the model's own relaxation needs its 4-5 s build).

    ``late``: its second chance in phase 3, when phase 0 found too little left (reading and
    building took most of the budget on a loaded machine: 131,072 GPUs at load 7 then
    reported the demand bound's gap, 0.126, for a plan 1e-6 from it); it runs when its
    estimate fits before the explanations' deadline (:meth:`Budget.aggregate_fits_late`:
    262,144 GPUs / 32,768 jobs at budget 10 had 2.5 s left there, 3.4 s short of the bounds'
    deadline, for a bound that takes 0.1-0.2 s)."""
    p = r.problem
    if p.stops_jobs is not None or r.agg_tried:  # a round that may stop running jobs: not
        return  # aggregated; and it runs once
    jobs, budget = len(p.jobs), r.budget
    if not (budget.aggregate_fits_late(jobs, placeable_gpus(p)) if late
            else budget.aggregate_fits(jobs)):
        return
    from hyperplace.solvers.backends.aggregate import aggregate_bound  # HiGHS: when it runs

    found = aggregate_bound(p, budget.explain_deadline(jobs, placeable_gpus(p)) if late
                            else budget.bounds_deadline(jobs))
    r.agg_bound, r.agg_s, r.agg_tried = found.bound, found.seconds, True


def _heuristics(r: SolveRound, warm: WarmStart | None, backend_name: str | None) -> None:
    """Phase 1: greedy (then the previous round's placements when better, then greedy's
    preemption or migration heuristic), stopping in time for what follows.

    Greedy's second pass (another job order) runs only when it leaves the exact backend the
    time its model needs (:meth:`Budget.second_pass_ok`): on the largest rounds one pass
    and the exact model beat two passes and no exact model."""
    p, budget, gp = r.problem, r.budget, r.params.greedy
    greedy_start = time.perf_counter()
    stop = budget.greedy_deadline(len(p.pending))
    stats = GreedyStats()
    ok = None
    if backend_name is not None:
        need = budget.exact_need_s(estimate_vars(p), r.params.budget.vars_per_second(backend_name))
        ok = functools.partial(budget.second_pass_ok, need)
    greedy = solve_greedy(p, gp, deadline=stop, late_pass_s=budget.late_pass_s, stats=stats,
                          second_pass_ok=ok)
    r.greedy_stats = stats
    if warm is not None:  # the previous round's placements that still hold, when better
        greedy = warm.start(p, greedy, gp, stop)
    # one greedy pass (the first): what the reserve is counted in (the migration and
    # preemption heuristics after it are longer, and nothing after them repeats them)
    r.greedy_pass_s = stats.first_pass_s
    greedy = families.improve(p, greedy, gp, deadline=stop)  # preemption, migration, repair
    r.greedy = r.chosen = greedy
    r.greedy_start, r.greedy_s = greedy_start, time.perf_counter() - greedy_start


def _exact(r: SolveRound, backend_name: str, options: BackendOptions) -> None:
    """Phase 2: the exact backend, hinted with greedy's plan, when the model fits in what is
    left after the reserve; greedy's plan is the fallback."""
    p, budget, bp = r.problem, r.budget, r.params.budget
    reserve = budget.reserve(r.greedy_pass_s)
    est = estimate_vars(p)
    if not budget.exact_fits(est, bp.vars_per_second(backend_name), reserve):
        r.status = SolveStatus.FALLBACK
        r.message = _not_run(backend_name, est, bp.vars_per_second(backend_name),
                             budget.budget_s, budget.exact_left(reserve), reserve,
                             reading=budget.reading_s,
                             building=r.greedy_start - budget.start - r.agg_s,
                             greedy=r.greedy_s, aggregate=r.agg_s)
    else:
        backend = make_backend(backend_name, r.params)  # imported only when it will run
        r.pm = pm = build_model(p)
        hint = _hint(r, pm)
        limit = budget.solve_limit(reserve)
        if limit is None:
            r.status = SolveStatus.FALLBACK
            r.message += f"{backend.name}: no time left after building the model; greedy's plan"
        else:
            options = dataclasses.replace(options, hint=hint if backend.accepts_hint else None)
            _take_exact(r, backend, backend.solve(pm.lm, limit, options))
    if r.status == SolveStatus.FALLBACK:
        r.name = f"greedy (fallback from {backend_name})"


def _hint(r: SolveRound, pm: PlacementModel) -> list[int] | None:
    """Greedy's plan as the backend's hint, and its objective 1 as a cut (the optimum's top
    phase is at least greedy's; later phases are conditional); None when the model rejects it."""
    hint: list[int] | None = encode(pm, r.greedy)
    bad = pm.lm.violated(hint) if hint is not None else []
    if bad:
        r.message = f"greedy hint rejected ({bad[0]}); "
        return None
    if hint is not None:
        g1 = pm.lm.evaluate(pm.lm.objectives[0].terms, hint)
        pm.lm.add(pm.lm.objectives[0].terms, lo=g1, name="at-least-greedy")
    return hint


#: what a plan's message says when the wall clock cut phases of a solve that has a
#: deterministic limit (``RawSolution.wall_cuts``; the simulator's planning engine counts
#: such plans: they are not reproducible)
WALL_CUT_NOTE = "phase(s) cut by the wall clock before their deterministic limit"


def _take_exact(r: SolveRound, backend: Backend, raw: RawSolution) -> None:
    """The backend's solution mapped back to GPUs, repaired for priority when not proven,
    kept when it scores at least as well as greedy's plan."""
    p, pm = r.problem, r.pm
    assert pm is not None
    if raw.wall_cuts and backend.name == "cpsat" and \
            r.params.cpsat.max_deterministic_time is not None:  # else the wall is the limit
        r.message += f"{raw.wall_cuts} {WALL_CUT_NOTE}; "
    if raw.values is None:
        r.status = SolveStatus.FALLBACK
        r.message += f"{backend.name}: {raw.status} within the budget; greedy's plan. {raw.message}"
        return
    exact = decode(pm, raw.values)
    r.name, r.chosen, r.status = backend.name, exact, raw.status
    if exact.notes:
        r.status = SolveStatus.FEASIBLE
        r.message += "some jobs were dropped when mapping counts to GPUs; "
    r.bound = _weighted_bound(p, raw)
    r.message += f"{backend.name}: phases {raw.status}"
    r.raw_used = None if exact.notes else raw
    if r.status != SolveStatus.OPTIMAL:
        # an incumbent cut short may still leave a job out for lower ones
        r.chosen = fix_inversions(p, exact, r.params.greedy, r.budget.deadline)
        if r.chosen is not exact and r.chosen.units != exact.units:
            r.raw_used = None
    if _score(p, r.chosen, pm) < _score(p, r.greedy, pm):
        # possible only when greedy's hint was rejected or a job was dropped
        r.chosen, r.status, r.raw_used = r.greedy, SolveStatus.FALLBACK, None
        r.message += "; greedy's plan admits more, returning it"


def _restrictions(r: SolveRound) -> None:
    """The model sees fewer placements than the rules allow: its optimum and its bounds (the
    backend's, the relaxation's) hold only within it; the demand bound does not."""
    r.restricted = r.problem.restrictions()
    if not r.restricted:
        return
    if r.status == SolveStatus.OPTIMAL:
        r.status = SolveStatus.FEASIBLE
        r.message += "; optimal within the model's restriction only"
    r.note("restricted model: " + "; ".join(r.restricted))
    r.bound, r.raw_used = None, None


def _bounds(r: SolveRound, tighten: bool = True) -> None:
    """Phase 3: the plan's objective terms and the best valid bound on objective 1 (the
    solver's, the aggregated model's (phase 0), the LP relaxation's when it fits in what is
    left and the others are not tight, or the demand bound)."""
    p = r.problem
    demand = demand_bound(p)

    def known() -> float:
        return min(demand, r.bound if r.bound is not None else math.inf,
                   r.agg_bound if r.agg_bound is not None else math.inf)

    open_gap = tighten and r.status != SolveStatus.OPTIMAL and p.relaxation_bounds and \
        not r.restricted
    if open_gap and known() > _weighted(p, r.chosen) + 0.5:
        _aggregate(r, late=True)  # phase 0 had no time for it: before the relaxation
    if open_gap and min(demand, r.bound if r.bound is not None else math.inf) > \
            _weighted(p, r.chosen) + 0.5:
        # the demand bound ignores where the free GPUs are: the model's LP relaxation is a
        # valid bound that does not (solvers.backends.relax), when it fits in what is left
        # (objective 1 of a preempting round also counts the running jobs kept: not written
        # there yet). It runs even where the aggregated bound already proves objective 1:
        # its model is what bounds admitted jobs among such plans (_gaps)
        from hyperplace.solvers.backends.relax import tighten_bound  # numpy: only when it runs

        r.pm, r.lp_bound = tighten_bound(r.pm, lambda: build_model(p), estimate_vars(p),
                                         r.budget.bounds_deadline(len(p.jobs)))
    r.terms = _terms(p, r.pm, r.chosen)
    r.objective = objective = r.terms.get("admitted_priority_demand", 0.0)
    if r.status == SolveStatus.OPTIMAL:
        r.bound = objective
        return
    # the best valid bound: the solver's, the LP relaxation's, or the demand bound when it
    # is tighter (it equals the objective when every job that can run is admitted)
    agg = r.agg_bound if r.agg_bound is not None and not r.restricted else math.inf
    r.bound = min(demand, r.bound if r.bound is not None else math.inf,
                  r.lp_bound if r.lp_bound is not None else math.inf, agg)
    if r.bound < objective - 1e-9:
        # the plan lies outside the model (greedy's, where a model row is stricter than the
        # rules, e.g. reclaim within nominal): the model's bounds do not bound it
        r.bound = demand_bound(p)
        r.note("the plan is outside the model's stricter rows, so objective 1 is bounded "
               "by the demand bound")
    elif r.bound == agg and agg < min(demand, r.lp_bound if r.lp_bound is not None
                                      else math.inf):
        r.note(f"objective 1 is bounded by the aggregated model's LP relaxation (leaves "
               f"folded, jobs by shape; {r.agg_s:.2f} s)")
    if r.bound <= objective + 1e-9 and r.status == SolveStatus.FALLBACK and \
            p.plan_objective is None:  # a repair round maximises its repairs first
        if r.lp_bound is not None and r.lp_bound <= objective + 1e-9:
            r.message += ("; objective 1 equals the LP relaxation's bound, so it is "
                          "optimal (lower objectives not proven)")
        elif agg <= objective + 1e-9:
            r.message += ("; objective 1 equals the aggregated model's LP bound, so it is "
                          "optimal (lower objectives not proven)")
        else:
            r.message += ("; every job that can run is admitted, so objective 1 is optimal "
                          "(lower objectives not proven)")


def _gaps(r: SolveRound) -> None:
    """Phase 3, continued: the gap of every objective; objective 1 proven and objective 2
    not, the relaxation's bound on admitted jobs among plans at this objective 1 when
    tighter than the backend's (solvers.backends.relax)."""
    p, bound = r.problem, r.bound
    assert bound is not None  # _bounds always sets one
    r.gaps = gaps = _objective_gaps(p, r.pm, r.raw_used, r.terms, r.objective, bound, r.status)
    jobs_gap = gaps.get("admitted_jobs", 0.0)
    if r.pm is not None and r.status != SolveStatus.OPTIMAL and p.relaxation_bounds and \
            not r.restricted and bound <= r.objective + 1e-9 and \
            (jobs_gap is None or jobs_gap > 0):
        from hyperplace.solvers.backends.relax import admitted_jobs_bound

        jobs_bound = admitted_jobs_bound(r.pm, r.objective, r.budget.bounds_deadline(len(p.jobs)))
        if jobs_bound is not None:
            lp_gap = relative_gap(r.terms["admitted_jobs"], jobs_bound)
            if lp_gap is not None and (jobs_gap is None or lp_gap < jobs_gap):
                gaps["admitted_jobs"] = lp_gap


def _explanations(r: SolveRound, skipped: set[int]) -> dict[int, list[str]]:
    """Phase 4: why each pending job is pending, stopping in time for the plan (``skipped``
    gets the jobs whose per-job analysis did not fit)."""
    p, chosen, gp = r.problem, r.chosen, r.params.greedy
    if chosen.untried:
        r.note(f"greedy ran out of time: {len(chosen.untried)} pending jobs were not tried "
               "(their reasons say so)")
    reasons = explain(p, chosen,
                      deadline=r.budget.explain_deadline(len(p.jobs), placeable_gpus(p)),
                      fits_alone=fit_probe(p, gp),
                      held_by_spares=families.spare_probe(p, chosen, gp),
                      skipped=skipped)
    proven = r.status == SolveStatus.OPTIMAL
    for ext in p.extensions:  # preemption's, migration's
        ext.reasons(chosen, reasons, proven)
    return reasons


def _not_run(backend: str, est: int, per_second: int, budget_s: float, available: float,
             reserve: float, *, reading: float, building: float, greedy: float,
             aggregate: float = 0.0) -> str:
    """Why the exact backend was not started, with where the budget went."""
    spent = [f"start-up and reading used {reading:.1f} s (with what is kept for writing)"
             if reading >= 0.05 else "",
             f"building the problem {building:.1f} s",
             f"the aggregated bound {aggregate:.1f} s" if aggregate >= 0.05 else "",
             f"greedy {greedy:.1f} s",
             f"{reserve:.1f} s kept for mapping back and the inversion fix"]
    text = (f"{backend}: not run: a model of about {est:,} variables needs about "
            f"{est / per_second:.1f} s, {available:.1f} s were left ("
            + ", ".join(x for x in spent if x) + f" of the {budget_s:g} s budget); "
            "returning greedy's plan")
    if available <= 0 and reading > 0.5:
        text += " (give the round a larger budget)"
    return text


def _objective_gaps(p: PlacementProblem, pm: PlacementModel | None, raw: RawSolution | None,
                    terms: dict[str, float], objective: float, bound: float,
                    status: SolveStatus) -> dict[str, float | None]:
    """Relative gap of every objective the plan reports: objective 1 against the best valid
    bound; the lower ones against their phase's bound when the plan is the exact backend's
    solution and every phase above was proven (a lower phase's bound is conditional on the
    ones above), else None (no valid bound). Proven optimal: all 0."""
    names = _objective_names(p, pm, terms)
    gaps: dict[str, float | None] = {name: None for name in names}
    gaps["admitted_priority_demand"] = relative_gap(objective, bound)
    if terms.get("admitted_jobs") == sum(1 for jv in p.pending if not jv.impossible):
        gaps["admitted_jobs"] = 0.0  # every job that can run is admitted
    if status == SolveStatus.OPTIMAL:
        return {name: 0.0 for name in gaps}
    if pm is None or raw is None:
        return gaps
    phases = len(p.priority_phases)
    proven_above = True
    for k, obj in enumerate(pm.lm.objectives):
        if k >= len(raw.objective_values):
            break
        value, phase_bound = raw.objective_values[k], raw.objective_bounds[k]
        if k >= phases and obj.name in gaps and proven_above and phase_bound is not None:
            gaps[obj.name] = relative_gap(value, phase_bound)
        proven_above = proven_above and phase_bound is not None and \
            abs(phase_bound - value) < 0.5
    return gaps


def _objective_names(p: PlacementProblem, pm: PlacementModel | None, terms: dict[str, float]
                     ) -> list[str]:
    """The objectives a plan reports a gap for, in the model's order: the plan's objective 1
    (the model's is per priority phase, ``demand_phase<i>``) and what a family reports
    beside it (a repair's repaired demand), then the model's objectives after its demand
    phases; without a model, the families' objectives in hook order and admitted jobs."""
    first = ["admitted_priority_demand"] + [ext.plan_objective for ext in p.extensions
                                            if ext.plan_objective is not None]
    if pm is None:
        lower = [n for ext in p.extensions for n in ext.round_objectives()] + ["admitted_jobs"]
    else:
        lower = [o.name for o in pm.lm.objectives[len(p.priority_phases):]]
    return [n for n in first if n in terms] + [n for n in lower if n in terms]


def _weighted(p: PlacementProblem, a: Assignment) -> int:
    """Objective 1 as reported: priority-weighted admitted GPUs (exact Python integers),
    with preemption those of the running jobs kept too."""
    return sum(p.weights[p.jobs[j].priority] * p.jobs[j].gpus for j in a.units
               if not p.is_copy(j)) + p.kept_running_demand(a.stopped)


def _score(p: PlacementProblem, a: Assignment, pm: PlacementModel | None = None
           ) -> tuple[float, ...]:
    """Objective 1, then the round extensions' values (a repair's repaired demand, a
    defrag's largest free domain), then (with preemption) less lost work and fewer victims, then the
    fair-share objective (it ranks above admitted jobs: a plan that serves an under-served
    queue with fewer, larger jobs is the better one), then jobs."""
    fair = 0.0
    if pm is not None and any(o.name == "fair_share" for o in pm.lm.objectives):
        values = encode(pm, a)
        if values is not None:
            fair = objective_terms(pm, values).get("fair_share", 0.0)
    lost = sum(p.stoppable[v].lost_units for v in a.stopped)
    families = tuple(ext.plan_value(a) for ext in p.extensions)  # repair, free domain
    return (_weighted(p, a), *families, -lost, -len(a.stopped), fair, _admitted(p, a))




def _admitted(p: PlacementProblem, a: Assignment) -> int:
    """Pending jobs admitted (movers' copies are not)."""
    return sum(1 for j in a.units if not p.is_copy(j))


def _weighted_bound(p: PlacementProblem, raw: RawSolution) -> float | None:
    """A valid bound on objective 1 from the priority phases.

    One phase (the usual case): its bound is the bound. Several phases: exact when every
    phase was proven optimal, else the solver-free bound (every phase's bound is conditional
    on the phases above it).
    """
    phases = len(p.priority_phases)
    if not raw.objective_bounds:
        return None
    if phases == 1:
        # the model leaves out the running jobs' constant (it counts only what stops lose)
        bound = raw.objective_bounds[0]
        return None if bound is None else bound + p.kept_running_demand()
    solved = raw.objective_values[:phases]
    bounds = raw.objective_bounds[:phases]
    if len(solved) == phases and all(b is not None and abs(b - v) < 0.5
                                    for v, b in zip(solved, bounds)):
        return None  # proven: the driver reports the objective itself
    return demand_bound(p)


def _terms(p: PlacementProblem, pm: PlacementModel | None, a: Assignment) -> dict[str, float]:
    out: dict[str, float] = {"admitted_priority_demand": _weighted(p, a)}  # exact int
    if pm is not None:
        out.update({k: v for k, v in objective_terms(pm, encode(pm, a)).items()
                    if not k.startswith("demand_phase")})
    else:
        out["admitted_jobs"] = float(_admitted(p, a))
    for ext in p.extensions:  # repaired demand, the largest free domain, migrations, stops
        out.update(ext.terms(a))
    return out
