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

import math
import time

from hyperplace.formulations.explain import explain
from hyperplace.formulations.mapping import Assignment, decode, encode, objective_terms, to_plan
from hyperplace.formulations.placement import PlacementModel, PlacementProblem, build_model
from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.result import SolveStats, SolveStatus, relative_gap
from hyperplace.solvers import cpsat, milp
from hyperplace.solvers.greedy import repair_priority, solve_greedy

SOLVERS = ("auto", "cpsat", "milp", "greedy")
BACKENDS = {"cpsat": cpsat.solve, "milp": milp.solve}

# Share of the budget kept back for mapping, explanations and the plan itself.
RESERVE_FRACTION = 0.08
RESERVE_S = 0.1
# Pieces variables a backend is given per second of budget before we judge it hopeless.
VARS_PER_SECOND = {"cpsat": 60_000, "milp": 40_000}
# `auto` hands models above this size to HiGHS when every node is NVSwitch-uniform: there the
# folded count model's LP relaxation is nearly integral and HiGHS proves what CP-SAT cannot
# in the budget (bench: 16,384 GPUs x 2,000 jobs proven optimal in 3.8 s, CP-SAT feasible).
# Smaller models, and models with clique variables (DGX-1, PCIe nodes), go to CP-SAT.
AUTO_MILP_ABOVE_VARS = 3_000


def demand_bound(p: PlacementProblem) -> float:
    """Upper bound on objective 1 without a solver: the free GPUs filled best-weight first."""
    left = p.free_gpus
    total = 0.0
    for jv in sorted(p.jobs, key=lambda j: -p.weights[j.priority]):
        if jv.impossible:
            continue
        take = min(left, jv.gpus)
        total += p.weights[jv.priority] * take
        left -= take
        if left <= 0:
            break
    return total


def _auto_backend(p: PlacementProblem) -> str:
    uniform = all(nc.uniform for nc in p.node_classes)
    return "milp" if uniform and _estimate_vars(p) > AUTO_MILP_ABOVE_VARS else "cpsat"


def _estimate_vars(p: PlacementProblem) -> int:
    """Piece variables the model would have: one per (class, size, uniform node class), and
    up to one per candidate GPU set on non-uniform nodes (DGX-1, PCIe)."""
    uniform = sum(1 for nc in p.node_classes if nc.uniform)
    odd = [len(nc.rep.free) for nc in p.node_classes if not nc.uniform]
    total = 0
    for b in p.bundles:
        for c in p.jobs[b[0]].classes:
            for size in set(c.pieces):
                total += uniform + sum(math.comb(f, size) for f in odd if f >= size)
    return total


def solve_placement(instance: Instance, *, solver: str = "auto", budget_s: float = 10.0,
                    policy: str = "performance", seed: int = 0, workers: int = 2
                    ) -> PlacementPlan:
    """Solve one scheduling round of ``instance`` within ``budget_s`` seconds."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; use one of {', '.join(SOLVERS)}")
    start = time.perf_counter()
    deadline = start + budget_s

    def left() -> float:
        return deadline - time.perf_counter()

    problem = PlacementProblem(instance, policy)
    greedy_start = time.perf_counter()
    greedy = solve_greedy(problem)
    greedy_s = time.perf_counter() - greedy_start
    message = ""
    pm: PlacementModel | None = None
    chosen: Assignment = greedy
    name = "greedy"
    status = SolveStatus.FEASIBLE
    bound: float | None = None

    if solver != "greedy":
        backend = solver if solver != "auto" else _auto_backend(problem)
        # mapping back, the priority repair and the explanations each cost about a greedy pass
        reserve = RESERVE_S + RESERVE_FRACTION * budget_s + 1.5 * greedy_s
        est = _estimate_vars(problem)
        if est > VARS_PER_SECOND[backend] * max(0.0, left() - reserve):
            status = SolveStatus.FALLBACK
            message = (f"{backend}: model of about {est} variables is too large for the "
                       f"{budget_s:g} s budget; returning greedy's plan")
        else:
            pm = build_model(problem)
            hint = encode(pm, greedy)
            bad = pm.lm.violated(hint)
            if bad:
                message = f"greedy hint rejected ({bad[0]}); "
                hint = None
            else:
                # the optimum's top tier is at least greedy's (later tiers are conditional)
                g1 = pm.lm.evaluate(pm.lm.objectives[0].terms, hint)
                pm.lm.add(pm.lm.objectives[0].terms, lo=g1, name="at-least-greedy")
            limit = left() - reserve
            if limit <= 0.02:
                status = SolveStatus.FALLBACK
                message += f"{backend}: no time left after building the model; greedy's plan"
            else:
                kwargs = {"hint": hint, "seed": seed, "workers": workers} if backend == "cpsat" else {}
                raw = BACKENDS[backend](pm.lm, limit, **kwargs)
                if raw.values is None:
                    status = SolveStatus.FALLBACK
                    message += f"{backend}: {raw.status} within the budget; greedy's plan. {raw.message}"
                else:
                    exact = decode(pm, raw.values)
                    name = backend
                    chosen = exact
                    status = SolveStatus.OPTIMAL if raw.status == "optimal" else SolveStatus.FEASIBLE
                    if exact.notes:
                        status = SolveStatus.FEASIBLE
                        message += "some jobs were dropped when mapping counts to GPUs; "
                    bound = _weighted_bound(problem, pm, raw)
                    message += f"{backend}: phases {raw.status}"
                    if status != SolveStatus.OPTIMAL:
                        # an incumbent cut short may still leave a job out for lower ones
                        chosen = repair_priority(problem, exact)
                    if _score(problem, chosen) < _score(problem, greedy):
                        # possible only when greedy's hint was rejected or a job was dropped
                        chosen, name, status = greedy, backend, SolveStatus.FALLBACK
                        message += "; greedy's plan admits more, returning it"
        if status == SolveStatus.FALLBACK:
            name = f"greedy (fallback from {backend})"
    terms = _terms(problem, pm, chosen)
    objective = terms.get("admitted_priority_demand", 0.0)
    if status == SolveStatus.OPTIMAL:
        bound = objective
    elif bound is None:
        bound = demand_bound(problem)
    reasons = explain(problem, chosen, deadline=deadline)
    stats = SolveStats(status=status, solver=name, objective=objective, bound=bound,
                       gap=relative_gap(objective, bound),
                       runtime_s=time.perf_counter() - start, budget_s=budget_s,
                       message=message.strip())
    return to_plan(problem, chosen, stats, reasons, terms)


def _weighted(p: PlacementProblem, a: Assignment) -> int:
    """Objective 1 as reported: priority-weighted admitted GPUs (exact Python integers)."""
    return sum(p.weights[p.jobs[j].priority] * p.jobs[j].gpus for j in a.units)


def _score(p: PlacementProblem, a: Assignment) -> tuple[int, int]:
    return _weighted(p, a), len(a.units)


def _weighted_bound(p: PlacementProblem, pm: PlacementModel, raw) -> float | None:
    """A valid bound on objective 1 from the per-tier phases.

    One tier (the usual case): its bound is the bound. Several tiers: exact when every tier
    was proven optimal, else the solver-free bound (every tier's bound is conditional on the
    tiers above it).
    """
    tiers = len(p.priority_tiers)
    if not raw.objective_bounds:
        return None
    if tiers == 1:
        return raw.objective_bounds[0]
    solved = raw.objective_values[:tiers]
    bounds = raw.objective_bounds[:tiers]
    if len(solved) == tiers and all(b is not None and abs(b - v) < 0.5 for v, b in zip(solved, bounds)):
        return None  # proven: the driver reports the objective itself
    return demand_bound(p)


def _terms(p: PlacementProblem, pm: PlacementModel | None, a: Assignment) -> dict[str, float]:
    out: dict[str, float] = {"admitted_priority_demand": float(_weighted(p, a))}
    if pm is not None:
        out.update({k: v for k, v in objective_terms(pm, encode(pm, a)).items()
                    if not k.startswith("demand_tier")})
    else:
        out["admitted_jobs"] = float(len(a.units))
    return out
