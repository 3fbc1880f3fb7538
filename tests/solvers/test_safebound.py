"""The dual bound behind every LP bound on objective 1 or 2 (solvers.backends.safebound): never
below the exact LP optimum (computed in fractions by enumerating vertices) nor below any
feasible integer point, whatever the multipliers, and tight with HiGHS's duals."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import highspy
import numpy as np
import pytest

from hyperplace.formulations.linear import LinearModel
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.instances.generator import generate
from hyperplace.solvers.backends.aggregate import SparseLp, aggregate_bound
from hyperplace.solvers.backends.relax import lp_max
from hyperplace.solvers.backends.safebound import dual_bound, integer_bound
from hyperplace.solvers.driver import solve_placement

INF = math.inf


def random_lp(rng: random.Random, scale: int) -> dict:
    """A small LP with integer data around a random integer point of the box (so feasible):
    rows sometimes one-sided, sometimes equalities; ``scale`` multiplies the costs and the
    box (objective values up to ~1e12 at scale 1e5)."""
    n, m = rng.randint(2, 3), rng.randint(1, 4)
    lb = [rng.randint(-3, 0) * scale for _ in range(n)]
    ub = [lo + rng.randint(0, 6) * scale for lo in lb]
    x0 = [rng.randint(lo, hi) for lo, hi in zip(lb, ub)]
    a = [[rng.randint(-5, 5) for _ in range(n)] for _ in range(m)]
    lo, hi = [], []
    for row in a:
        r = sum(c * x for c, x in zip(row, x0))
        kind = rng.random()
        if kind < 0.2:
            lo.append(r), hi.append(r)
        else:
            lo.append(-INF if kind < 0.5 else r - rng.randint(0, 3) * scale)
            hi.append(INF if 0.5 <= kind < 0.75 else r + rng.randint(0, 3) * scale)
    cost = [rng.randint(-9, 9) * scale for _ in range(n)]
    return {"n": n, "m": m, "lb": lb, "ub": ub, "a": a, "lo": lo, "hi": hi, "cost": cost,
            "x0": x0}


def exact_lp_max(lp: dict) -> Fraction:
    """The LP's optimum in exact arithmetic: the best feasible vertex (the box is finite and
    the LP feasible, so the optimum is at a vertex: n independent tight constraints)."""
    n, a = lp["n"], lp["a"]
    planes: list[tuple[list[int], int]] = []
    for row, lo, hi in zip(a, lp["lo"], lp["hi"]):
        planes += [(row, side) for side in (lo, hi) if side not in (-INF, INF)]
    for j in range(n):
        unit = [int(i == j) for i in range(n)]
        planes += [(unit, lp["lb"][j]), (unit, lp["ub"][j])]
    best: Fraction | None = None
    for pick in itertools.combinations(planes, n):
        x = solve_exact([list(map(Fraction, p[0])) for p in pick], [Fraction(p[1]) for p in pick])
        if x is None or not feasible(lp, x):
            continue
        v = sum(Fraction(c) * xi for c, xi in zip(lp["cost"], x))
        best = v if best is None or v > best else best
    assert best is not None
    return best


def solve_exact(m: list[list[Fraction]], b: list[Fraction]) -> list[Fraction] | None:
    n = len(b)
    rows = [r[:] + [bi] for r, bi in zip(m, b)]
    for col in range(n):
        piv = next((r for r in range(col, n) if rows[r][col] != 0), None)
        if piv is None:
            return None
        rows[col], rows[piv] = rows[piv], rows[col]
        for r in range(n):
            if r != col and rows[r][col] != 0:
                f = rows[r][col] / rows[col][col]
                rows[r] = [x - f * y for x, y in zip(rows[r], rows[col])]
    return [rows[i][n] / rows[i][i] for i in range(n)]


def feasible(lp: dict, x: list) -> bool:
    if any(not lo <= xi <= hi for xi, lo, hi in zip(x, lp["lb"], lp["ub"])):
        return False
    for row, lo, hi in zip(lp["a"], lp["lo"], lp["hi"]):
        r = sum(c * xi for c, xi in zip(row, x))
        if not lo <= r <= hi:
            return False
    return True


def best_integer(lp: dict) -> int:
    """Objective of the best integer point found: every point of the box on a grid (every
    one at scale 1), and x0, the point the rows were drawn around."""
    step = max(1, (max(u - lo for u, lo in zip(lp["ub"], lp["lb"])) // 12))
    grids = [sorted(set(range(lo, hi + 1, step)) | {hi}) for lo, hi in zip(lp["lb"], lp["ub"])]
    points = [lp["x0"]] + [list(pt) for pt in itertools.product(*grids)]
    return max(sum(c * x for c, x in zip(lp["cost"], pt)) for pt in points if feasible(lp, pt))


def arrays(lp: dict) -> tuple:
    """The LP as dual_bound's arguments (rows compressed), without the multipliers."""
    starts, index, value = [], [], []
    for row in lp["a"]:
        starts.append(len(index))
        for j, c in enumerate(row):
            if c:
                index.append(j), value.append(float(c))
    return (np.asarray(lp["cost"], float), np.asarray(lp["lb"], float),
            np.asarray(lp["ub"], float), np.asarray(lp["lo"], float),
            np.asarray(lp["hi"], float), np.asarray(starts), np.asarray(index, dtype=np.int64),
            np.asarray(value))


def exact_formula(lp: dict, y: np.ndarray) -> Fraction:
    """The bound's formula for these multipliers in exact arithmetic (a multiplier whose row
    side is infinite taken as 0, as dual_bound does; every column bound finite here)."""
    ys = [Fraction(float(v)) for v in y]
    ys = [Fraction(0) if (v > 0 and hi == INF) or (v < 0 and lo == -INF) else v
          for v, lo, hi in zip(ys, lp["lo"], lp["hi"])]
    total = sum((v * (hi if v > 0 else lo) for v, lo, hi in zip(ys, lp["lo"], lp["hi"]) if v),
                Fraction(0))
    for j in range(lp["n"]):
        d = Fraction(lp["cost"][j]) - sum(Fraction(row[j]) * v for row, v in zip(lp["a"], ys))
        total += max(d * lp["lb"][j], d * lp["ub"][j])
    return total


def highs_duals(lp: dict) -> tuple[float, np.ndarray]:
    """HiGHS's optimum and the maximisation's multipliers (negated row duals)."""
    cost, lb, ub, lo, hi, starts, index, value = arrays(lp)
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.addVars(len(cost), lb, ub)
    h.changeColsCost(len(cost), np.arange(len(cost), dtype=np.int32), -cost)
    h.addRows(len(lo), lo, hi, len(index), starts.astype(np.int32), index.astype(np.int32),
              value)
    h.run()
    assert h.getModelStatus().name == "kOptimal"
    return (-h.getInfo().objective_function_value,
            -np.asarray(h.getSolution().row_dual, dtype=np.float64))


def sparse_lp(lp: dict) -> SparseLp:
    out = SparseLp()
    for c, lo, hi in zip(lp["cost"], lp["lb"], lp["ub"]):
        out.col(lo, hi, c)
    for row, lo, hi in zip(lp["a"], lp["lo"], lp["hi"]):
        out.row([(j, float(c)) for j, c in enumerate(row) if c], lo, hi)
    return out


def linear_model(lp: dict) -> LinearModel:
    """The LP as the relaxation's LinearModel (lp_max's input)."""
    lm = LinearModel()
    for j in range(lp["n"]):
        lm.var(f"x{j}", lp["lb"][j], lp["ub"][j])
    for i, row in enumerate(lp["a"]):
        lm.add([(j, c) for j, c in enumerate(row) if c], lp["lo"][i], lp["hi"][i], f"r{i}")
    return lm


@pytest.mark.parametrize("scale", [1, 1000, 100_000])
def test_the_bound_is_valid_and_tight_with_highs_duals(scale):
    """Against the exact optimum (fractions) and every integer point; both wrappers (the
    aggregated model's SparseLp and the relaxation's lp_max) report the same proven bound."""
    rng = random.Random(scale)
    for _ in range(60):
        lp = random_lp(rng, scale)
        exact = exact_lp_max(lp)
        _, y = highs_duals(lp)
        bound = dual_bound(*arrays(lp), y)
        assert bound is not None and Fraction(bound) >= exact_formula(lp, y) >= exact
        assert bound <= exact + 1e-6 * max(1, abs(exact))  # HiGHS's duals: tight
        assert integer_bound(bound) >= best_integer(lp)
        via, status, _ = sparse_lp(lp).maximise(10.0)
        assert status == "kOptimal" and via is not None and Fraction(via) >= exact
        got = lp_max(linear_model(lp), [(j, c) for j, c in enumerate(lp["cost"]) if c], 10.0)
        assert got is not None and Fraction(got) >= exact


def test_one_rule_without_duals_for_both_lp_paths(monkeypatch):
    """HiGHS optimal without valid duals: the relaxation's lp_max and the aggregated model's
    SparseLp give the same bound, zero multipliers' (the column bounds': valid, looser).
    lp_max said None there while SparseLp used zeros: two rules for one question."""
    real = highspy.Highs.getSolution

    def no_duals(self):
        solution = real(self)
        solution.dual_valid = False
        return solution

    monkeypatch.setattr(highspy.Highs, "getSolution", no_duals)
    rng = random.Random(11)
    for _ in range(30):
        lp = random_lp(rng, 1000)
        exact = exact_lp_max(lp)
        zero = dual_bound(*arrays(lp), np.zeros(lp["m"]))
        via, status, _ = sparse_lp(lp).maximise(10.0)
        got = lp_max(linear_model(lp), [(j, c) for j, c in enumerate(lp["cost"]) if c], 10.0)
        assert status == "kOptimal" and zero is not None and Fraction(zero) >= exact
        assert via == got == zero


def test_poor_multipliers_give_a_looser_bound_never_an_invalid_one():
    """Perturbed duals, duals of the wrong sign on a one-sided row, no duals at all, random
    ones: the bound holds (only looser); HiGHS's is the tightest of them."""
    rng = random.Random(7)
    nprng = np.random.default_rng(7)
    for _ in range(60):
        lp = random_lp(rng, rng.choice([1, 10_000]))
        exact = exact_lp_max(lp)
        _, y = highs_duals(lp)
        tight = dual_bound(*arrays(lp), y)
        assert tight is not None
        scale = 1.0 + np.abs(y).max()
        for poor in (y + nprng.normal(0, 1e-3, len(y)) * scale,
                     y * (1 + nprng.normal(0, 0.3, len(y))),
                     -y, np.zeros(len(y)), nprng.normal(0, 10, len(y)) * scale):
            loose = dual_bound(*arrays(lp), poor)
            assert loose is not None  # every column's bounds are finite
            assert Fraction(loose) >= exact_formula(lp, poor) >= exact
            assert loose >= tight - 1e-6 * max(1, abs(tight))


def test_an_infinite_column_bound_with_a_wrong_reduced_cost_is_no_bound():
    """max x s.t. x - z <= 1, 0 <= x <= 5, z >= 0 unbounded above: with y = 1 the bound is
    1 + 5 * 0 + z's term (d = 0 - (-1) = 1 on an infinite bound: unbounded) -> None; with
    y = 0 (no row used) it is x's bound, 5, valid."""
    args = (np.array([1.0, 0.0]), np.array([0.0, 0.0]), np.array([5.0, INF]),
            np.array([-INF]), np.array([1.0]), np.array([0]), np.array([0, 1]),
            np.array([1.0, -1.0]))
    assert dual_bound(*args, np.array([1.0])) is None
    assert dual_bound(*args, np.array([0.0])) == pytest.approx(5.0)
    assert dual_bound(*args, np.array([0.0])) >= 5.0


def test_the_aggregated_bound_proves_a_tight_lp():
    """On a fragmented round where greedy's plan is optimal and the aggregated model's LP is
    tight, its bound equals the optimum: the old rule (a relative 1e-6 up, rounded up) gave
    optimum + 1, so objective 1 could never be proven by it."""
    inst = generate(512, 60, ["H100-80", "A100-80"], 0.9, 11, size_scale=2)
    exact = solve_placement(inst, solver="milp", budget_s=30)
    assert exact.status.value == "optimal"
    found = aggregate_bound(PlacementProblem(inst))
    assert found.bound == exact.objective


def test_the_float_error_of_the_sum_is_bounded():
    """max x s.t. 3x <= 3, 0 <= x <= 1e15, y = fl(1/3): in floats 3 * y rounds to 1, so
    d = 1 - 3y computes as 0 and the bound as 1; exactly, d = 1 - 3 fl(1/3) = 2^-54 > 0 and
    the formula is 3y + d * 1e15 ~ 1.0555. The bound returned must be at least that (it
    bounds every x with its y), so the computed d is widened by its error bound."""
    lp = {"n": 1, "m": 1, "lb": [0], "ub": [10**15], "a": [[3]], "lo": [-INF], "hi": [3],
          "cost": [1], "x0": [0]}
    y = np.array([1.0 / 3.0])
    exact = exact_formula(lp, y)
    assert exact > Fraction(1) + Fraction(1, 20)
    bound = dual_bound(*arrays(lp), y)
    assert bound is not None and Fraction(bound) >= exact
    assert bound < 3  # widened by the worst-case error bound (1.33 here), no more


def test_a_fallback_plan_proven_by_the_aggregated_bound_alone_says_so(monkeypatch):
    """The exact backend judged too large and the model's relaxation too slow for what is
    left (as at 131,072 GPUs): the aggregated bound alone proves greedy's objective 1, and the
    plan says by what, with gap 0 (the old rounding left 1e-6 here at best)."""
    from hyperplace.check import check
    from hyperplace.solvers.backends import relax
    from hyperplace.solvers.params import BudgetParams, SolveParams

    inst = generate(512, 60, ["H100-80", "A100-80"], 0.9, 11, size_scale=2)
    exact = solve_placement(inst, solver="milp", budget_s=30)
    monkeypatch.setattr(relax, "SECONDS_PER_VAR", 1e3)  # the relaxation never fits
    tiny = SolveParams(budget=BudgetParams(cpsat_vars_per_second=1, milp_vars_per_second=1))
    plan = solve_placement(inst, solver="auto", budget_s=10, params=tiny)
    assert check(plan, inst) == []
    assert plan.status.value == "fallback"
    assert plan.objective == exact.objective == plan.bound
    assert plan.objective_gaps["admitted_priority_demand"] == 0.0
    assert "equals the aggregated model's LP bound, so it is optimal" in plan.message
    assert "LP relaxation's bound" not in plan.message


def test_costs_beyond_exact_floats_are_bounded_too():
    """Objective 1's weights pass 2**53 with many priority levels: max (2**60 + 1) x + y,
    x <= 1, y <= 1 in floats has cost 2**60 (the +1 lost), yet the bound must hold for the
    exact costs: at least 2**60 + 2."""
    big = 2**60 + 1
    args = (np.array([float(big), 1.0]), np.zeros(2), np.ones(2), np.array([-INF]),
            np.array([2.0]), np.array([0]), np.array([0, 1]), np.array([1.0, 1.0]))
    assert float(big) == 2.0**60
    for y in (np.array([0.0]), np.array([1.0])):
        bound = dual_bound(*args, y)
        assert bound is not None and Fraction(bound) >= big + 1
