"""OR-Tools CP-SAT backend for :class:`~hyperplace.formulations.linear.LinearModel`.

Lexicographic objectives are solved in turn; each solved objective is then fixed (``==`` its
value when proven optimal, no worse than the incumbent otherwise) before the next.
"""

from __future__ import annotations

import math
import time

from ortools.sat.python import cp_model

from hyperplace.formulations.linear import (
    LinearModel,
    Objective,
    PhaseResult,
    RawSolution,
    solve_lexicographic,
)

LARGE_MODEL_VARS = 20_000

CAPABILITIES = {"integer": True, "lexicographic": True, "bound": True, "hints": True}

_STATUS = {
    cp_model.OPTIMAL: "optimal",
    cp_model.FEASIBLE: "feasible",
    cp_model.INFEASIBLE: "infeasible",
    cp_model.MODEL_INVALID: "error",
    cp_model.UNKNOWN: "no_solution",
}


def _expr(xs: list, terms: list[tuple[int, int]]):
    if not terms:
        return 0
    return cp_model.LinearExpr.weighted_sum([xs[i] for i, _ in terms], [c for _, c in terms])


def solve(model: LinearModel, time_limit_s: float, *, hint: list[int] | None = None,
          seed: int = 0, workers: int = 2, shares: list[float] | None = None) -> RawSolution:
    """Solve ``model`` within ``time_limit_s`` seconds (wall clock, all objectives together)."""
    start = time.perf_counter()
    cp = cp_model.CpModel()
    xs = [cp.new_int_var(lb, ub, name) for name, lb, ub in zip(model.names, model.lbs, model.ubs)]
    for c in model.constraints:
        expr = _expr(xs, c.terms)
        if c.lo == c.hi:
            cp.add(expr == int(round(c.lo)))
        else:
            if c.lo != -math.inf:
                cp.add(expr >= int(math.ceil(c.lo - 1e-9)))
            if c.hi != math.inf:
                cp.add(expr <= int(math.floor(c.hi + 1e-9)))
    if hint is not None:
        for x, v in zip(xs, hint):
            cp.add_hint(x, v)

    def phase(k: int, obj: Objective, limit: float) -> PhaseResult:
        expr = _expr(xs, obj.terms)
        if obj.sense == "max":
            cp.maximize(expr)
        else:
            cp.minimize(expr)
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.01, limit)
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = seed
        if model.num_vars > LARGE_MODEL_VARS:
            # On large rounds presolve (probing, symmetry) alone can eat the whole budget;
            # the greedy hint already gives a solution, so spend the time searching.
            solver.parameters.symmetry_level = 0
            solver.parameters.cp_model_probing_level = 0
            solver.parameters.max_presolve_iterations = 1
        status = solver.solve(cp)
        st = _STATUS.get(status, "error")
        if st not in ("optimal", "feasible"):
            return PhaseResult(st, message=f"CP-SAT: {solver.status_name(status)}")
        values = [int(solver.value(x)) for x in xs]
        cp.clear_hints()  # the next phase starts from this solution
        for x, v in zip(xs, values):
            cp.add_hint(x, v)
        return PhaseResult(st, values, solver.objective_value, solver.best_objective_bound)

    def fix(k: int, obj: Objective, value: float, proven: bool) -> None:
        expr = _expr(xs, obj.terms)
        iv = int(round(value))
        if proven:
            cp.add(expr == iv)
        elif obj.sense == "max":
            cp.add(expr >= iv)
        else:
            cp.add(expr <= iv)
        cp.clear_objective()

    return solve_lexicographic(model, time_limit_s, start, phase, fix, 0.01, shares)
