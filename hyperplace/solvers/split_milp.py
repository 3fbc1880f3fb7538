"""MILP encoding of the layer split (PuLP -> HiGHS, else CBC).

Variables: ``c[k, j] ∈ {0, 1}``, stage k's last layer is ``j - 1`` (one cut per boundary).
Because prefix sums turn a range's cost into ``T[k, end] - T[k, start]`` and each endpoint is
a one-hot choice, every stage load and memory is *linear* in ``c`` without per-layer
assignment variables:

    load_k = Σ_j T[k,j]·c[k,j] - Σ_j T[k,j]·c[k-1,j] + Σ_j X[k-1,j]·c[k-1,j] + Σ_j X[k,j]·c[k,j]
    t >= load_k;  memory_k <= capacity_k;  cut_k < cut_{k+1} (cumulative form, tight)

Phase one minimises t; phase two fixes ``load_k <= t*`` and minimises Σ load_k. Times are in
milliseconds and memory in GB so coefficients stay well scaled; the final objective is
recomputed from the chosen cuts in floats by ``evaluate_split``.
"""

from __future__ import annotations

import os
import sys
import time

import pulp

from hyperplace.formulations.layer_split import SplitData, SplitSolution
from hyperplace.models.result import SolveStatus

MIP_CAPABLE = True
MS = 1e3
GBYTES = 1e-9


_BANNER_DONE = False


def _silence_highs_banner() -> None:
    """highspy prints a copyright banner on stdout the first time a Highs() is made, which
    would corrupt ``--format json``; make that first instance with fd 1 pointed at devnull."""
    global _BANNER_DONE
    if _BANNER_DONE:
        return
    _BANNER_DONE = True
    try:
        import highspy
    except ImportError:
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _solver(time_limit: float | None) -> tuple[pulp.LpSolver, str]:
    kwargs = dict(msg=False, timeLimit=time_limit, gapRel=0.0, gapAbs=1e-9)
    if "HiGHS" in pulp.listSolvers(onlyAvailable=True):
        _silence_highs_banner()
        return pulp.HiGHS(**kwargs), "milp-highs"
    return pulp.PULP_CBC_CMD(**kwargs), "milp-cbc"


def _build(data: SplitData, sense_sum: bool, cap_t: float | None):
    P, L = data.num_stages, data.num_layers
    prob = pulp.LpProblem("layer_split", pulp.LpMinimize)
    # cut positions for boundaries 0..P-2; stage k ends at cut j in [k+1, L-(P-1-k)]
    c: dict[tuple[int, int], pulp.LpVariable] = {}
    rng = {k: range(k + 1, L - (P - 1 - k) + 1) for k in range(P - 1)}
    for k in range(P - 1):
        for j in rng[k]:
            c[k, j] = prob.add_variable(f"c_{k}_{j}", cat="Binary")
        prob += pulp.lpSum(c[k, j] for j in rng[k]) == 1, f"one_cut_{k}"
    for k in range(P - 2):
        # stage k+1 ended by cut j  =>  stage k ended by cut j-1
        for j in rng[k + 1]:
            prob += (pulp.lpSum(c[k + 1, i] for i in rng[k + 1] if i <= j)
                     <= pulp.lpSum(c[k, i] for i in rng[k] if i <= j - 1)), f"order_{k}_{j}"

    def at(k_cut: int, table) -> pulp.LpAffineExpression:
        """Σ_j table[j]·c[k_cut, j], with the fixed cuts 0 (k_cut=-1) and L (k_cut=P-1)."""
        if k_cut < 0:
            return pulp.LpAffineExpression(constant=float(table[0]))
        if k_cut >= P - 1:
            return pulp.LpAffineExpression(constant=float(table[L]))
        return pulp.lpSum(float(table[j]) * c[k_cut, j] for j in rng[k_cut])

    t = prob.add_variable("t", lowBound=0)
    loads = []
    for k in range(P):
        load = at(k, data.prefix_time[k] * MS) - at(k - 1, data.prefix_time[k] * MS)
        if k > 0:
            load = load + at(k - 1, data.xfer[k - 1] * MS)
        if k < P - 1:
            load = load + at(k, data.xfer[k] * MS)
        loads.append(load)
        prob += t >= load, f"bottleneck_{k}"
        mem = at(k, data.prefix_mem[k] * GBYTES) - at(k - 1, data.prefix_mem[k] * GBYTES)
        prob += mem <= float((data.mem_cap[k] - data.mem_const[k]) * GBYTES), f"memory_{k}"
    if cap_t is not None:
        prob += t <= cap_t, "bottleneck_cap"
    prob += (pulp.lpSum(loads) if sense_sum else t)
    return prob, c, t, rng


def _cuts(data: SplitData, c, rng) -> list[int]:
    P, L = data.num_stages, data.num_layers
    cuts = [0]
    for k in range(P - 1):
        cuts.append(max(rng[k], key=lambda j: c[k, j].value() or 0.0))
    cuts.append(L)
    return cuts


def solve_milp(data: SplitData, time_limit: float | None = 10.0,
               hint_cuts: list[int] | None = None) -> SplitSolution:
    """Optimal split by MILP; ``feasible`` when the time limit stops it with an incumbent.

    ``hint_cuts`` is not used: PuLP's warm start is not honoured by every backend, and the
    model proves these sizes quickly without it.
    """
    start = time.perf_counter()
    solver, name = _solver(time_limit)
    if data.num_stages == 1:
        from hyperplace.solvers.split_dp import solve_dp  # one stage: nothing to decide

        sol = solve_dp(data)
        sol.solver = name
        return sol
    prob, c, t, rng = _build(data, sense_sum=False, cap_t=None)
    prob.solve(solver)
    status = pulp.LpStatus[prob.status]
    has_sol = prob.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible)
    if status == "Infeasible":
        return SplitSolution(solver=name, status=SolveStatus.INFEASIBLE,
                             runtime_s=time.perf_counter() - start,
                             message="MILP: no split fits every stage's memory")
    if not has_sol:
        return SplitSolution(solver=name, status=SolveStatus.NO_SOLUTION,
                             runtime_s=time.perf_counter() - start, message=f"MILP: {status}")
    proven = prob.sol_status == pulp.LpSolutionOptimal
    t_star = float(t.value())
    cuts = _cuts(data, c, rng)
    if proven:
        remaining = None if time_limit is None else max(1.0, time_limit - (time.perf_counter() - start))
        solver2, _ = _solver(remaining)
        prob2, c2, _, rng2 = _build(data, sense_sum=True, cap_t=t_star + 1e-6)
        prob2.solve(solver2)
        if prob2.sol_status in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            cuts = _cuts(data, c2, rng2)
    return SplitSolution(
        solver=name, status=SolveStatus.OPTIMAL if proven else SolveStatus.FEASIBLE, cuts=cuts,
        bound=t_star / MS if proven else None, runtime_s=time.perf_counter() - start,
        message="" if proven else "MILP: time limit reached with an incumbent",
    )
