"""MILP backend: HiGHS through highspy (CBC through PuLP when HiGHS is absent) for a LinearModel.

HiGHS gets the model directly as arrays (``highspy.Highs``): one model for every
lexicographic phase (a phase changes the costs and adds the row fixing the phase before),
a starting solution (``setSolution``) from the hint or the phase before, and its own MIP
status and dual bound. Through PuLP the model was rebuilt in Python for every phase: at
32,768 GPUs the five phases took 3.9 s there, against 0.2 s for the first phase here
(bench/results/scale.md). CBC (``engine="cbc"``) still runs through PuLP, where "Optimal" is
also reported on time limits, so its status is read from ``sol_status``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

import numpy as np
import pulp

from hyperplace.formulations.linear import (
    LinearModel,
    Objective,
    PhaseResult,
    RawSolution,
    solve_lexicographic,
)
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.backends.backend import Backend, BackendOptions, run_interruptibly

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
    """``"highs"`` when highspy is installed (a dependency), else ``"cbc"``."""
    try:
        import highspy  # noqa: F401
    except ImportError:  # pragma: no cover - highspy is a dependency
        return "cbc"
    return "highs"


def highs_rows(rows: Iterable[tuple[list[tuple[int, int]], float, float]]
               ) -> tuple[Any, ...] | None:
    """Rows ``lo <= sum(a x) <= hi`` as the arguments of ``highspy.Highs.addRows``
    (compressed rows, infinite sides as HiGHS's infinity); None when there are none."""
    import highspy

    inf = highspy.kHighsInf
    starts: list[int] = []
    index: list[int] = []
    value: list[float] = []
    lower: list[float] = []
    upper: list[float] = []
    for terms, lo, hi in rows:
        starts.append(len(index))
        for i, a in terms:
            index.append(i)
            value.append(float(a))
        lower.append(-inf if lo == -math.inf else float(lo))
        upper.append(inf if hi == math.inf else float(hi))
    if not lower:
        return None
    return (len(lower), np.asarray(lower), np.asarray(upper), len(index),
            np.asarray(starts, dtype=np.int32), np.asarray(index, dtype=np.int32),
            np.asarray(value, dtype=np.float64))


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
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
    """HiGHS through highspy (CBC through PuLP when asked for or without HiGHS): one thread,
    bounds from HiGHS's MIP dual bound, a starting solution from the hint (HiGHS; CBC
    ignores it).

    Parameters
    ----------
    engine : str, optional
        ``"highs"`` or ``"cbc"``; default: HiGHS when available.
    """

    name = "milp"
    #: HiGHS starts from the hint (``setSolution``); CBC through PuLP ignores it
    accepts_hint = True
    status_map: ClassVar[dict[int, SolveStatus]] = STATUS_MAP

    def __init__(self, engine: str | None = None):
        if engine not in (None, "highs", "cbc"):
            raise ValueError(f"unknown MILP engine {engine!r}; use highs or cbc")
        self.engine = engine or available_backend()

    def solve(self, model: LinearModel, time_limit_s: float,
              options: BackendOptions | None = None) -> RawSolution:
        """See :meth:`Backend.solve`."""
        options = self._check(options)
        if self.engine == "highs":
            return _solve_highs(model, time_limit_s, options)
        return self._solve_pulp(model, time_limit_s, options)

    def _solve_pulp(self, model: LinearModel, time_limit_s: float,
                    options: BackendOptions) -> RawSolution:
        start = time.perf_counter()
        engine = self.engine
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
                with quiet_stdout():
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


#: HiGHS's model status -> the one vocabulary (a time limit with an incumbent is feasible)
HIGHS_STATUS: dict[str, SolveStatus] = {
    "kOptimal": SolveStatus.OPTIMAL,
    "kInfeasible": SolveStatus.INFEASIBLE,
    "kUnboundedOrInfeasible": SolveStatus.INFEASIBLE,
    "kUnbounded": SolveStatus.ERROR,
    "kModelError": SolveStatus.ERROR,
    "kLoadError": SolveStatus.ERROR,
}


def _highs_phase(model: LinearModel, obj: Objective, h: Any, sign: int) -> PhaseResult:
    """Run one built HiGHS phase and read it back; HiGHS's objective and dual bound are kept
    only when they agree with the solution it returns."""
    run_interruptibly(h.run, h.cancelSolve)
    status_name = h.getModelStatus().name
    if status_name == "kModelEmpty" and model.num_vars == 0:  # no variable: the empty
        return PhaseResult(SolveStatus.OPTIMAL, [], 0.0, 0.0)  # solution, proven (value 0)
    info = h.getInfo()
    if info.primal_solution_status != 2:  # kSolutionStatusFeasible: no solution
        mapped = HIGHS_STATUS.get(status_name, SolveStatus.NO_SOLUTION)
        if mapped == SolveStatus.OPTIMAL:
            mapped = SolveStatus.NO_SOLUTION
        return PhaseResult(mapped, message=f"HiGHS: {status_name} without a solution")
    values = [int(round(v)) for v in h.getSolution().col_value]
    if model.violated(values):  # integrality or feasibility outside tolerance
        return PhaseResult(SolveStatus.NO_SOLUTION,
                           message="HiGHS: solution outside the model's tolerances")
    val = float(sum(a * values[i] for i, a in obj.terms))
    reported = sign * float(info.objective_function_value)
    bound: float | None = None if math.isinf(info.mip_dual_bound) else \
        sign * float(info.mip_dual_bound)
    if abs(reported - val) > 0.5 + 1e-9 or (bound is not None and (
            bound < val - 0.5 if obj.sense == "max" else bound > val + 0.5)):
        bound = None  # HiGHS's figures do not describe the solution: trust neither
    proven = status_name == "kOptimal" and bound is not None and abs(bound - val) < 0.5 + 1e-9
    return PhaseResult(SolveStatus.OPTIMAL if proven else SolveStatus.FEASIBLE, values, val,
                       bound)


def _solve_highs(model: LinearModel, time_limit_s: float, options: BackendOptions
                 ) -> RawSolution:
    """Every lexicographic phase with HiGHS (see the module docstring).

    Each phase gets a fresh ``highspy.Highs`` built from the same arrays plus the rows fixing
    the phases before (building takes milliseconds even at 65,536 GPUs), started from the
    hint or the phase before. HiGHS's own figures are checked against the solution it
    returns: with a starting solution, HiGHS 1.16 reported an objective and a dual bound of
    108 for a returned solution worth 120 whose true optimum was 120 (the last phase of a
    256-GPU placement model; CP-SAT and HiGHS without the start both proved 120). Such a
    phase is solved again without the start when time is left, else kept without a bound.
    """
    import highspy

    start = time.perf_counter()
    n = model.num_vars
    cols = np.arange(n, dtype=np.int32)
    lbs = np.asarray(model.lbs, dtype=np.float64)
    ubs = np.asarray(model.ubs, dtype=np.float64)
    rows = highs_rows((c.terms, c.lo, c.hi) for c in model.constraints)  # built once
    fixed: list[tuple[list[tuple[int, int]], float, float]] = []  # earlier phases' objectives
    start_values: list[int] | None = options.hint

    def build(cost: np.ndarray, limit: float, warm: bool) -> highspy.Highs:
        with quiet_stdout():
            h = highspy.Highs()  # type: ignore[no-untyped-call]
        h.setOptionValue("output_flag", False)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 0.5)  # integer objectives: within 0.5 is proven
        h.setOptionValue("threads", 1)
        h.setOptionValue("time_limit", max(0.05, limit))
        if n:
            h.addVars(n, lbs, ubs)
            h.changeColsIntegrality(n, cols, np.full(n, highspy.HighsVarType.kInteger))
            h.changeColsCost(n, cols, cost)
        for block in (rows, highs_rows(fixed)):
            if block is not None:
                h.addRows(*block)
        if warm and start_values is not None:
            sol = highspy.HighsSolution()
            sol.col_value = [float(v) for v in start_values]
            sol.value_valid = True
            h.setSolution(sol)
        return h

    def phase(k: int, obj: Objective, limit: float) -> PhaseResult:
        nonlocal start_values  # each phase starts from the hint, then from the phase before
        sign = -1 if obj.sense == "max" else 1
        cost = np.zeros(n)
        for i, a in obj.terms:
            cost[i] += sign * a
        ends = time.perf_counter() + limit
        result = _highs_phase(model, obj, build(cost, limit, True), sign)
        if result.values is not None and result.bound is None and start_values is not None \
                and ends - time.perf_counter() > 0.05:
            again = _highs_phase(model, obj, build(cost, ends - time.perf_counter(), False),
                                 sign)
            if again.values is not None and again.bound is not None and (
                    again.value is not None and result.value is not None and
                    (again.value >= result.value if obj.sense == "max"
                     else again.value <= result.value)):
                result = again
        if result.values is not None:
            start_values = result.values
        return result

    def fix(k: int, obj: Objective, value: float, proven: bool) -> None:
        lo, hi = (value, value) if proven else \
            ((value, math.inf) if obj.sense == "max" else (-math.inf, value))
        fixed.append((obj.terms, lo, hi))

    return solve_lexicographic(model, time_limit_s, start, phase, fix, 0.05, options.shares)


def solve(model: LinearModel, time_limit_s: float, *, backend: str | None = None,
          shares: list[float] | None = None) -> RawSolution:
    """Solve ``model`` with HiGHS or CBC through PuLP (see :meth:`MilpBackend.solve`)."""
    return MilpBackend(backend).solve(model, time_limit_s, BackendOptions(shares=shares))
