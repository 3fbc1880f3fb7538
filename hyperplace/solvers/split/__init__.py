"""The layer-split driver: stage subsets and orders, one exact backend, baselines, fallback.

``solve_split(problem, solver="auto")``:

1. Stages marked ``optional`` may be left out: every subset is tried (exact up to
   ``MAX_OPTIONAL_EXACT`` optional stages; beyond that only "all stages" is tried).
2. For each subset, the candidate orders of ``formulations.layer_split.candidate_orders``
   (the given order when ``fixed_order``), plus the given order itself, are ranked by the
   exact DP, which takes
   milliseconds per order: lowest bottleneck, then shortest step time (1F1B pipeline plus
   the DP sync and optimizer update of the slowest stage).
3. The requested backend (``dp``, ``milp``, ``cpsat`` or ``proportional``) solves the
   chosen order and its answer is mapped to a plan by ``evaluate_split``. ``auto`` is the
   DP. If a backend fails or stops without a plan, the proportional split is returned,
   marked ``fallback``.
4. The symmetric and proportional splits of the chosen order are reported with their ratio
   to the optimum. When nothing fits, the plan is infeasible and says which stage runs out
   of memory by how much in the least-bad split.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

from hyperplace.costmodel.calibration import Calibration
from hyperplace.formulations.layer_split import (
    TIE_RTOL,
    SplitData,
    SplitSolution,
    StageRows,
    build_split_data,
    candidate_orders,
    evaluate_split,
    stage_rows,
    summarise_baseline,
    to_plan,
)
from hyperplace.errors import InputError
from hyperplace.models.gpu import GPUCatalog, default_catalog
from hyperplace.models.result import SolveStatus
from hyperplace.models.split import SplitPlan, SplitProblem, Stage
from hyperplace.solvers.split.baselines import proportional_cuts, solve_proportional, symmetric_cuts
from hyperplace.solvers.split.cpsat import solve_cpsat
from hyperplace.solvers.split.dp import memory_diagnosis, minmax_path, solve_dp
from hyperplace.solvers.split.milp import solve_milp

SOLVERS: dict[str, Callable[..., SplitSolution]] = {
    "dp": solve_dp,
    "milp": solve_milp,
    "cpsat": solve_cpsat,
    "proportional": solve_proportional,
}
SOLVER_NAMES = ("auto", *SOLVERS)
MAX_OPTIONAL_EXACT = 10


def _subsets(problem: SplitProblem) -> tuple[list[list[Stage]], bool]:
    optional = [s for s in problem.stages if s.optional]
    if not optional:
        return [list(problem.stages)], True
    if len(optional) > MAX_OPTIONAL_EXACT:
        return [list(problem.stages)], False
    out = []
    for r in range(len(optional) + 1):
        for dropped in itertools.combinations(optional, r):
            names = {s.name for s in dropped}
            keep = [s for s in problem.stages if s.name not in names]
            if keep:
                out.append(keep)
    return out, True


def _rank_key(data: SplitData, cuts: list[int]) -> tuple[float, float]:
    """Orders and subsets are ranked like splits: bottleneck, then step time."""
    ev = evaluate_split(data, cuts)
    return ev.bottleneck_s, ev.step_time_s


def _better(a: tuple[float, float], b: tuple[float, float] | None) -> bool:
    if b is None:
        return True
    if a[0] < b[0] * (1 - TIE_RTOL):
        return True
    return a[0] <= b[0] * (1 + TIE_RTOL) and a[1] < b[1] * (1 - TIE_RTOL)


@dataclass
class _Search:
    """What the search over subsets and orders found (phase 2 of :func:`solve_split`)."""

    best: tuple[tuple[float, float], SplitData, list[int]] | None = None
    least_bad: tuple[float, SplitData] | None = None
    n_orders: int = 0
    orders_exact: bool = True
    first_data: SplitData | None = None


def _price_stages(problem: SplitProblem, solver: str, catalog: GPUCatalog,
                  calibration: Calibration | None) -> tuple[list, dict[str, StageRows]]:
    """Phase 1: check the input and price every stage's layers once."""
    if solver not in SOLVER_NAMES:
        raise InputError(f"unknown solver {solver!r}; choose from {', '.join(SOLVER_NAMES)}",
                         path="solver")
    layers = problem.model.build_layers()
    if not layers:
        raise InputError("model has zero layers", path="model")
    required = [s for s in problem.stages if not s.optional]
    if len(required) > len(layers):
        raise InputError(f"{len(required)} stages but only {len(layers)} layers: every stage "
                         f"needs a layer (mark some stages optional)", path="stages")
    cache: dict[str, StageRows] = {}
    for s in problem.stages:  # surfaces unknown GPU types before any search
        cache[s.name] = stage_rows(problem, s, layers, catalog, calibration)
    return layers, cache


def _orders(problem: SplitProblem, subset: list[Stage]) -> tuple[list[list[Stage]], bool]:
    """Candidate orders of one subset (and whether they are all of them)."""
    sub_problem = problem.model_copy(update={"stages": subset})
    orders, exact = candidate_orders(sub_problem)
    if not problem.fixed_order and [s.name for s in subset] not in (
            [s.name for s in o] for o in orders):
        # Fewest WAN crossings is not always the lowest bottleneck (a heavy boundary can
        # be the one left on the WAN), so the order the user listed is always a
        # candidate too: the plan is never worse than its best split in that order.
        orders = [*orders, list(subset)]
    return orders, exact


def _try_order(search: _Search, data: SplitData) -> None:
    """Rank one order's exact DP split into ``search`` (or its least-bad overflow)."""
    search.first_data = search.first_data or data
    sol = solve_dp(data)
    if sol.cuts is None:
        mats = [data.memory_matrix(k) - data.mem_cap[k] for k in range(data.num_stages)]
        worst, _ = minmax_path(mats)
        if search.least_bad is None or worst < search.least_bad[0]:
            search.least_bad = (worst, data)
        return
    key = _rank_key(data, sol.cuts)
    if search.best is None or _better(key, search.best[0]):
        search.best = (key, data, sol.cuts)


def _search(problem: SplitProblem, subsets: list[list[Stage]], layers: list,
            cache: dict[str, StageRows], catalog: GPUCatalog,
            calibration: Calibration | None) -> _Search:
    """Phase 2: every subset and candidate order, ranked by the exact DP."""
    search = _Search()
    for subset in subsets:
        if len(subset) > len(layers):
            continue
        orders, exact = _orders(problem, subset)
        search.orders_exact &= exact
        for order in orders:
            search.n_orders += 1
            _try_order(search, build_split_data(problem, order, catalog, layers=layers,
                                                cache=cache, calibration=calibration))
    return search


def _search_notes(problem: SplitProblem, search: _Search, subsets_exact: bool) -> list[str]:
    notes: list[str] = []
    if not problem.fixed_order and len(problem.stages) > 1:
        notes.append(
            f"stage order chosen among {search.n_orders} candidate orders "
            + ("(every order with the fewest WAN crossings, and the given order)"
               if search.orders_exact
               else "(heuristic orders and the given order: too many stages to enumerate)")
        )
    if not subsets_exact:
        notes.append("too many optional stages to enumerate: all stages kept")
    return notes


def _infeasible(search: _Search, solver: str, start: float, notes: list[str]) -> SplitPlan:
    """Phase 3 when nothing fits: the least-bad order's memory diagnosis."""
    assert search.first_data is not None
    data = search.least_bad[1] if search.least_bad else search.first_data
    reason = memory_diagnosis(data)
    sol = SplitSolution(solver=solver if solver != "auto" else "dp",
                        status=SolveStatus.INFEASIBLE,
                        runtime_s=time.perf_counter() - start, message=reason)
    sym = summarise_baseline("symmetric", data, symmetric_cuts(data), None)
    return to_plan(data, sol, symmetric=sym, notes=notes, infeasible_reason=reason)


def _run_backend(data: SplitData, dp_cuts: list[int], solver: str,
                 time_limit: float | None, start: float) -> SplitSolution:
    """Phase 3: the requested backend on the chosen order; the proportional split when it
    fails or stops without a plan, the DP's split when it wrongly claims infeasible."""
    backend_name = "dp" if solver == "auto" else solver
    try:
        remaining = (None if time_limit is None
                     else max(0.1, time_limit - (time.perf_counter() - start)))
        sol = SOLVERS[backend_name](data, time_limit=remaining)
    except Exception as exc:  # a backend failure must not lose the user a plan
        sol = SplitSolution(solver=backend_name, status=SolveStatus.ERROR,
                            message=f"{backend_name} failed: {exc}")
    if sol.cuts is None and sol.status != SolveStatus.INFEASIBLE:
        fallback = proportional_cuts(data)
        msg = sol.message or f"{backend_name} returned no plan"
        sol = SplitSolution(solver=f"{backend_name}->proportional",
                            status=SolveStatus.FALLBACK if fallback else SolveStatus.NO_SOLUTION,
                            cuts=fallback, message=msg)
    elif sol.status == SolveStatus.INFEASIBLE:
        # The DP found a split for this order, so a backend claiming infeasible is wrong.
        sol = SplitSolution(solver=backend_name, status=SolveStatus.ERROR, cuts=dp_cuts,
                            message=f"{backend_name} claimed infeasible; DP split returned")
    sol.runtime_s = time.perf_counter() - start
    return sol


def _with_baselines(problem: SplitProblem, data: SplitData, dp_cuts: list[int],
                    sol: SplitSolution, layers: list, cache: dict[str, StageRows],
                    catalog: GPUCatalog, calibration: Calibration | None,
                    notes: list[str]) -> SplitPlan:
    """Phase 4: the symmetric and proportional baselines against the optimum, the plan."""
    optimum = evaluate_split(data, sol.cuts).bottleneck_s if sol.cuts else None
    if sol.status != SolveStatus.OPTIMAL:
        optimum = evaluate_split(data, dp_cuts).bottleneck_s
    # Symmetric is what people run today: every stage, in the order they listed them.
    given = (build_split_data(problem, list(problem.stages), catalog, layers=layers,
                              cache=cache, calibration=calibration)
             if len(problem.stages) <= len(layers) else data)
    sym = summarise_baseline("symmetric", given, symmetric_cuts(given), optimum)
    prop_cuts = proportional_cuts(data)
    prop = summarise_baseline("proportional", data, prop_cuts, optimum,
                              "" if prop_cuts else "could not be repaired to fit memory")
    chosen = {s.name for s in data.stages}
    left_out = [s for s in problem.stages if s.name not in chosen]
    if left_out:
        notes.append("left empty: " + ", ".join(s.name for s in left_out))
    return to_plan(data, sol, symmetric=sym, proportional=prop, left_out=left_out, notes=notes)


def solve_split(
    problem: SplitProblem,
    solver: str = "auto",
    time_limit: float | None = 10.0,
    catalog: GPUCatalog | None = None,
    calibration: Calibration | None = None,
) -> SplitPlan:
    """Best contiguous layer split of ``problem`` under the cost model, with baselines.

    ``calibration`` (default: the bundled one, fitted on Sailor's profiles) is the fitted
    cost model that prices every layer (``hyperplace calibrate`` writes others). Phases:
    price the stages, search subsets and orders, run the backend, add the baselines.
    """
    start = time.perf_counter()
    catalog = catalog or default_catalog()
    layers, cache = _price_stages(problem, solver, catalog, calibration)
    subsets, subsets_exact = _subsets(problem)
    search = _search(problem, subsets, layers, cache, catalog, calibration)
    notes = _search_notes(problem, search, subsets_exact)
    if search.best is None:
        return _infeasible(search, solver, start, notes)
    _, data, dp_cuts = search.best
    sol = _run_backend(data, dp_cuts, solver, time_limit, start)
    return _with_baselines(problem, data, dp_cuts, sol, layers, cache, catalog, calibration,
                           notes)
