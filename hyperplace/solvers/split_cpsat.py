"""CP-SAT encoding of the layer split (OR-Tools).

One integer per boundary, ``cut_k ∈ [k+1, L-(P-1-k)]`` with ``cut_k < cut_{k+1}``; stage
costs come from prefix-sum tables through ``add_element`` (a stage's compute is
``T[k][cut_k] - T[k][cut_{k-1}]``), so the model has O(P) variables whatever L is, and
propagation on the bottleneck ``t >= load_k`` is strong. Times are integer nanoseconds
(prefix sums rounded once, so a range's cost is off by at most 1 ns), memory integer
bytes. Phase one minimises t; phase two keeps ``load_k <= t*`` and minimises Σ load_k.
The reported objective is recomputed from the cuts in floats by ``evaluate_split``.
"""

from __future__ import annotations

import time

import numpy as np
from ortools.sat.python import cp_model

from hyperplace.formulations.layer_split import SplitData, SplitSolution
from hyperplace.models.result import SolveStatus

NS = 1e9


def _ints(values: np.ndarray, scale: float, fill: int = 0) -> list[int]:
    out = []
    for v in values:
        out.append(int(round(float(v) * scale)) if np.isfinite(v) else fill)
    return out


def _model(data: SplitData, hint_cuts: list[int] | None, t_cap: int | None):
    P, L = data.num_stages, data.num_layers
    model = cp_model.CpModel()
    cuts: list[cp_model.IntVar | int] = [0]
    for k in range(P - 1):
        cuts.append(model.new_int_var(k + 1, L - (P - 1 - k), f"cut_{k}"))
    cuts.append(L)
    for k in range(P):
        if not (isinstance(cuts[k], int) and isinstance(cuts[k + 1], int)):
            model.add(cuts[k] + 1 <= cuts[k + 1])

    def element(index, table: list[int], lo: int, hi: int, name: str):
        if isinstance(index, int):
            return table[index]
        var = model.new_int_var(lo, hi, name)
        model.add_element(index, table, var)
        return var

    xfer_tables = [_ints(data.xfer[k], NS) for k in range(P - 1)]
    xfer = [element(cuts[k + 1], xfer_tables[k], min(xfer_tables[k][1:L] or [0]),
                    max(xfer_tables[k] or [0]), f"x_{k}") for k in range(P - 1)]
    loads = []
    load_hi = 0
    for k in range(P):
        pt = _ints(data.prefix_time[k], NS)
        pm = _ints(data.prefix_mem[k], 1.0)
        end_t = element(cuts[k + 1], pt, 0, pt[L], f"te_{k}")
        start_t = element(cuts[k], pt, 0, pt[L], f"ts_{k}")
        end_m = element(cuts[k + 1], pm, 0, pm[L], f"me_{k}")
        start_m = element(cuts[k], pm, 0, pm[L], f"ms_{k}")
        cap = int((data.mem_cap[k] - data.mem_const[k]) // 1)
        model.add(end_m - start_m <= cap)
        expr = end_t - start_t
        hi = pt[L]
        if k > 0:
            expr = expr + xfer[k - 1]
            hi += max(xfer_tables[k - 1])
        if k < P - 1:
            expr = expr + xfer[k]
            hi += max(xfer_tables[k])
        load = model.new_int_var(0, hi, f"load_{k}")
        model.add(load == expr)
        loads.append(load)
        load_hi = max(load_hi, hi)
    t = model.new_int_var(0, load_hi if t_cap is None else t_cap, "t")
    for load in loads:
        model.add(load <= t)
    if hint_cuts is not None and len(hint_cuts) == P + 1:
        for k in range(1, P):
            model.add_hint(cuts[k], hint_cuts[k])
    return model, cuts, t, loads


def _solver(time_limit: float | None) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 8
    solver.parameters.random_seed = 0
    if time_limit is not None:
        solver.parameters.max_time_in_seconds = float(time_limit)
    return solver


def solve_cpsat(data: SplitData, time_limit: float | None = 10.0,
                hint_cuts: list[int] | None = None) -> SplitSolution:
    """Optimal split by CP-SAT; ``feasible`` when the time limit stops it with an incumbent."""
    start = time.perf_counter()
    P = data.num_stages
    model, cuts, t, _ = _model(data, hint_cuts, None)
    model.minimize(t)
    solver = _solver(time_limit)
    status = solver.solve(model)
    if status == cp_model.INFEASIBLE:
        return SplitSolution(solver="cpsat", status=SolveStatus.INFEASIBLE,
                             runtime_s=time.perf_counter() - start,
                             message="CP-SAT: no split fits every stage's memory")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return SplitSolution(solver="cpsat", status=SolveStatus.NO_SOLUTION,
                             runtime_s=time.perf_counter() - start,
                             message=f"CP-SAT: {solver.status_name(status)}")

    def read(s: cp_model.CpSolver, cs) -> list[int]:
        return [c if isinstance(c, int) else int(s.value(c)) for c in cs]

    result = read(solver, cuts)
    proven = status == cp_model.OPTIMAL
    bound_ns = solver.best_objective_bound
    t_star = int(solver.value(t))
    if proven and P > 1:
        remaining = None if time_limit is None else max(1.0, time_limit - (time.perf_counter() - start))
        model2, cuts2, _, loads2 = _model(data, result, t_star)
        model2.minimize(sum(loads2))
        solver2 = _solver(remaining)
        status2 = solver2.solve(model2)
        if status2 in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            result = read(solver2, cuts2)
    return SplitSolution(
        solver="cpsat", status=SolveStatus.OPTIMAL if proven else SolveStatus.FEASIBLE,
        cuts=result, bound=max(0.0, (bound_ns - 2) / NS),
        runtime_s=time.perf_counter() - start,
        message="" if proven else "CP-SAT: time limit reached with an incumbent",
    )
