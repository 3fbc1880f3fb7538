"""OR-Tools CP-SAT backend for :class:`~hyperplace.formulations.linear.LinearModel`.

Lexicographic objectives are solved in turn; each solved objective is then fixed (``==`` its
value when proven optimal, no worse than the incumbent otherwise) before the next.
"""

from __future__ import annotations

import math
import time
from typing import Any, ClassVar

from ortools.sat.python import cp_model

from hyperplace.formulations.linear import (
    LinearModel,
    Objective,
    PhaseResult,
    RawSolution,
    solve_lexicographic,
)
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.backends.backend import Backend, BackendOptions, run_interruptibly
from hyperplace.solvers.params import CpSatParams, cut_by_wall

STATUS_MAP: dict[Any, SolveStatus] = {
    cp_model.OPTIMAL: SolveStatus.OPTIMAL,
    cp_model.FEASIBLE: SolveStatus.FEASIBLE,
    cp_model.INFEASIBLE: SolveStatus.INFEASIBLE,
    cp_model.MODEL_INVALID: SolveStatus.ERROR,
    cp_model.UNKNOWN: SolveStatus.NO_SOLUTION,
}


def _expr(xs: list[cp_model.IntVar], terms: list[tuple[int, int]]) -> cp_model.LinearExprT:
    if not terms:
        return 0
    return cp_model.LinearExpr.weighted_sum([xs[i] for i, _ in terms], [c for _, c in terms])


class CpSatBackend(Backend):
    """CP-SAT: hints, seeds and workers; bounds from ``best_objective_bound``.

    Parameters
    ----------
    params : CpSatParams, optional
        When to cut presolve short on large models.
    """

    name = "cpsat"
    accepts_hint = True
    uses_seed = True
    uses_workers = True
    status_map: ClassVar[dict[Any, SolveStatus]] = STATUS_MAP

    def __init__(self, params: CpSatParams | None = None):
        self.params = params or CpSatParams()

    def solve(self, model: LinearModel, time_limit_s: float,
              options: BackendOptions | None = None) -> RawSolution:
        """See :meth:`Backend.solve`."""
        options = self._check(options)
        start = time.perf_counter()
        cp = cp_model.CpModel()
        xs = [cp.new_int_var(lb, ub, name)
              for name, lb, ub in zip(model.names, model.lbs, model.ubs)]
        for c in model.constraints:
            expr = _expr(xs, c.terms)
            if c.lo == c.hi:
                cp.add(expr == int(round(c.lo)))
            else:
                if c.lo != -math.inf:
                    cp.add(expr >= int(math.ceil(c.lo - 1e-9)))
                if c.hi != math.inf:
                    cp.add(expr <= int(math.floor(c.hi + 1e-9)))
        if options.hint is not None:
            for x, v in zip(xs, options.hint):
                cp.add_hint(x, v)
        large = model.num_vars > self.params.large_model_vars

        def phase(k: int, obj: Objective, limit: float) -> PhaseResult:
            expr = _expr(xs, obj.terms)
            if obj.sense == "max":
                cp.maximize(expr)
            else:
                cp.minimize(expr)
            solver = cp_model.CpSolver()
            solver.parameters.max_time_in_seconds = max(0.01, limit)
            if self.params.max_deterministic_time is not None:
                solver.parameters.max_deterministic_time = self.params.max_deterministic_time
            solver.parameters.num_workers = options.workers
            solver.parameters.random_seed = options.seed
            # Ctrl-C is Python's to handle (run_interruptibly stops the search); CP-SAT's own
            # SIGINT handler, installed from the solve thread, aborted the process instead
            solver.parameters.catch_sigint_signal = False
            if large:
                # On large rounds presolve (probing, symmetry) alone can eat the whole
                # budget; the greedy hint already gives a solution, so spend it searching.
                solver.parameters.symmetry_level = 0
                solver.parameters.cp_model_probing_level = 0
                solver.parameters.max_presolve_iterations = 1
            code = run_interruptibly(lambda: solver.solve(cp), solver.stop_search)
            status = self.status_map.get(code, SolveStatus.ERROR)
            work = self.params.max_deterministic_time
            # unproven, and the wall clock (or a stop) ended it before its work limit
            cut = (work is not None and status != SolveStatus.OPTIMAL
                   and cut_by_wall(solver.wall_time, solver.deterministic_time,
                                   solver.parameters.max_time_in_seconds, work))
            if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
                return PhaseResult(status, message=f"CP-SAT: {solver.status_name(code)}",
                                   wall_cut=cut and status == SolveStatus.NO_SOLUTION)
            values = [int(solver.value(x)) for x in xs]
            cp.clear_hints()  # type: ignore[no-untyped-call]  # next phase starts here
            for x, v in zip(xs, values):
                cp.add_hint(x, v)
            return PhaseResult(status, values, solver.objective_value, solver.best_objective_bound,
                               wall_cut=cut)

        def fix(k: int, obj: Objective, value: float, proven: bool) -> None:
            expr = _expr(xs, obj.terms)
            iv = int(round(value))
            if proven:
                cp.add(expr == iv)
            elif obj.sense == "max":
                cp.add(expr >= iv)
            else:
                cp.add(expr <= iv)
            cp.clear_objective()  # type: ignore[no-untyped-call]

        return solve_lexicographic(model, time_limit_s, start, phase, fix, 0.01, options.shares)


def solve(model: LinearModel, time_limit_s: float, *, hint: list[int] | None = None,
          seed: int = 0, workers: int = 2, shares: list[float] | None = None) -> RawSolution:
    """Solve ``model`` with CP-SAT (see :meth:`CpSatBackend.solve`)."""
    return CpSatBackend().solve(model, time_limit_s, BackendOptions(
        hint=hint, seed=seed, workers=workers, shares=shares))
