"""MILP backend: PuLP with HiGHS (CBC when HiGHS is absent) for a LinearModel.

PuLP reports "Optimal" for some backends when a time limit stops them with an incumbent,
so the status is read from ``sol_status`` and, with HiGHS, from the solver's own MIP gap.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterator
from typing import ClassVar

import pulp

from hyperplace.formulations.linear import (
    LinearModel,
    Objective,
    PhaseResult,
    RawSolution,
    solve_lexicographic,
)
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.backend import Backend, BackendOptions, run_interruptibly

#: PuLP's solution status (``prob.sol_status``) -> the one vocabulary. "Optimal" is then
#: confirmed against HiGHS's own MIP bound, because PuLP reports it on time limits too.
STATUS_MAP: dict[int, SolveStatus] = {
    pulp.LpSolutionOptimal: SolveStatus.OPTIMAL,
    pulp.LpSolutionIntegerFeasible: SolveStatus.FEASIBLE,
    pulp.LpSolutionInfeasible: SolveStatus.INFEASIBLE,
    pulp.LpSolutionUnbounded: SolveStatus.ERROR,
    pulp.LpSolutionNoSolutionFound: SolveStatus.NO_SOLUTION,
}



def available_backend() -> str:
    """``"highs"`` when PuLP finds HiGHS, else ``"cbc"``."""
    names = pulp.listSolvers(onlyAvailable=True)
    return "highs" if "HiGHS" in names else "cbc"


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """HiGHS prints its banner on fd 1 when created; keep stdout clean for JSON/YAML output."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no real fd 1 (embedded use): nothing to protect
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _cancel(prob: pulp.LpProblem) -> None:
    """Ask a running HiGHS solve to stop (Ctrl-C); CBC runs as a child process that
    receives the same SIGINT from the terminal."""
    model = getattr(prob, "solverModel", None)
    if model is not None and hasattr(model, "cancelSolve"):
        model.cancelSolve()


def _make_solver(backend: str, limit: float, msg: bool = False) -> pulp.LpSolver:
    if backend == "highs":
        return pulp.HiGHS(msg=msg, timeLimit=max(0.05, limit), gapRel=0.0, gapAbs=0.5, threads=1)
    return pulp.PULP_CBC_CMD(msg=msg, timeLimit=max(1, int(math.ceil(limit))), gapRel=0.0,
                             gapAbs=0.5)


def _bound(prob: pulp.LpProblem, backend: str) -> float | None:
    if backend != "highs":
        return None
    h = getattr(prob, "solverModel", None)
    if h is None:
        return None
    try:
        info = h.getInfo()
        b = info.mip_dual_bound
        return None if b is None or math.isinf(b) else float(b)
    except Exception:  # noqa: BLE001 - bound is informative only
        return None


class MilpBackend(Backend):
    """HiGHS (CBC when HiGHS is absent) through PuLP: no hints, one thread, bounds from
    HiGHS's MIP dual bound.

    Parameters
    ----------
    engine : str, optional
        ``"highs"`` or ``"cbc"``; default: HiGHS when available.
    """

    name = "milp"
    status_map: ClassVar[dict[int, SolveStatus]] = STATUS_MAP

    def __init__(self, engine: str | None = None):
        if engine not in (None, "highs", "cbc"):
            raise ValueError(f"unknown MILP engine {engine!r}; use highs or cbc")
        self.engine = engine

    def solve(self, model: LinearModel, time_limit_s: float,
              options: BackendOptions | None = None) -> RawSolution:
        """See :meth:`Backend.solve`."""
        options = self._check(options)
        start = time.perf_counter()
        engine = self.engine or available_backend()
        prob = pulp.LpProblem("hyperplace", pulp.LpMinimize)
        add_var = getattr(prob, "add_variable", None)  # PuLP >= 3.3; LpVariable() is deprecated
        if add_var is not None:
            xs = [add_var(f"x{i}", lowBound=lb, upBound=ub, cat=pulp.LpInteger)
                  for i, (lb, ub) in enumerate(zip(model.lbs, model.ubs))]
        else:  # pragma: no cover - older PuLP
            xs = [pulp.LpVariable(f"x{i}", lowBound=lb, upBound=ub, cat=pulp.LpInteger)
                  for i, (lb, ub) in enumerate(zip(model.lbs, model.ubs))]
        for ci, c in enumerate(model.constraints):
            expr = pulp.LpAffineExpression([(xs[i], a) for i, a in c.terms])
            if c.lo == c.hi:
                prob += expr == c.lo, f"c{ci}"
            else:
                if c.lo != -math.inf:
                    prob += expr >= c.lo, f"c{ci}l"
                if c.hi != math.inf:
                    prob += expr <= c.hi, f"c{ci}u"

        def phase(k: int, obj: Objective, limit: float) -> PhaseResult:
            sign = -1 if obj.sense == "max" else 1
            prob.setObjective(pulp.LpAffineExpression([(xs[i], sign * a) for i, a in obj.terms]))
            prob.sense = pulp.LpMinimize
            try:
                with _quiet_stdout():
                    run_interruptibly(lambda: prob.solve(_make_solver(engine, limit)),
                                      lambda: _cancel(prob))
            except pulp.PulpSolverError as exc:
                return PhaseResult(SolveStatus.ERROR, message=str(exc))
            status = self.status_map.get(prob.sol_status, SolveStatus.NO_SOLUTION)
            if status not in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE):
                if prob.status == pulp.LpStatusInfeasible:
                    return PhaseResult(SolveStatus.INFEASIBLE, message="MILP: infeasible")
                return PhaseResult(SolveStatus.NO_SOLUTION,
                                   message=f"MILP: {pulp.LpStatus[prob.status]} without a solution")
            values = [int(round(x.value() or 0)) for x in xs]
            val = float(sum(a * values[i] for i, a in obj.terms))
            bound = _bound(prob, engine)
            # PuLP may say Optimal on a time limit: trust HiGHS's own bound where there is one
            proven = status == SolveStatus.OPTIMAL
            if bound is not None:
                bound = sign * bound
                proven = proven and abs(bound - val) < 0.5 + 1e-9
            elif proven:
                bound = val
            return PhaseResult(SolveStatus.OPTIMAL if proven else SolveStatus.FEASIBLE,
                               values, val, bound)

        def fix(k: int, obj: Objective, value: float, proven: bool) -> None:
            fixed = pulp.LpAffineExpression([(xs[i], a) for i, a in obj.terms])
            if proven:
                prob.addConstraint(fixed == value, f"lex{k}")
            elif obj.sense == "max":
                prob.addConstraint(fixed >= value, f"lex{k}")
            else:
                prob.addConstraint(fixed <= value, f"lex{k}")

        return solve_lexicographic(model, time_limit_s, start, phase, fix, 0.05, options.shares)


def solve(model: LinearModel, time_limit_s: float, *, backend: str | None = None,
          shares: list[float] | None = None) -> RawSolution:
    """Solve ``model`` with HiGHS or CBC through PuLP (see :meth:`MilpBackend.solve`)."""
    return MilpBackend(backend).solve(model, time_limit_s, BackendOptions(shares=shares))
