"""The exact backends: declared capabilities, status maps, the same answers on small models."""

from __future__ import annotations

import pytest

from hyperplace.formulations.linear import LinearModel, Objective
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.backends.backend import BackendOptions
from hyperplace.solvers.driver import make_backend
from hyperplace.solvers.params import BudgetParams, CpSatParams, GreedyParams, SolveParams


def _knapsack() -> LinearModel:
    # max 5a + 4b + 3c  s.t. 2a + 3b + c <= 4 (binary): a + c = 8, then fewest items
    lm = LinearModel()
    a, b, c = lm.bool("a"), lm.bool("b"), lm.bool("c")
    lm.add([(a, 2), (b, 3), (c, 1)], hi=4, name="cap")
    lm.objectives = [Objective([(a, 5), (b, 4), (c, 3)], "value", "max"),
                     Objective([(a, 1), (b, 1), (c, 1)], "items", "min")]
    return lm


def test_backend_solves_and_proves(exact_solver):
    raw = make_backend(exact_solver).solve(_knapsack(), 10.0, BackendOptions(workers=1))
    assert raw.status == SolveStatus.OPTIMAL
    assert raw.values == [1, 0, 1]
    assert raw.objective_values == [8.0, 2.0]
    assert raw.objective_bounds[0] == pytest.approx(8.0)


def test_backend_reports_infeasible(exact_solver):
    lm = LinearModel()
    x = lm.bool("x")
    lm.add([(x, 1)], lo=2, name="impossible")
    lm.objectives = [Objective([(x, 1)], "x", "max")]
    raw = make_backend(exact_solver).solve(lm, 5.0)
    assert raw.values is None and raw.status == SolveStatus.INFEASIBLE


def test_capabilities_are_declared_and_statuses_mapped(exact_solver):
    backend = make_backend(exact_solver)
    assert backend.name == exact_solver
    assert backend.integer and backend.lexicographic and backend.proves_bound
    assert set(backend.status_map.values()) <= set(SolveStatus)
    assert SolveStatus.OPTIMAL in backend.status_map.values()
    assert SolveStatus.INFEASIBLE in backend.status_map.values()


def test_hints_only_where_accepted(exact_solver):
    backend = make_backend(exact_solver)
    options = BackendOptions(hint=[1, 0, 1], workers=1)
    if backend.accepts_hint:
        assert backend.solve(_knapsack(), 5.0, options).status == SolveStatus.OPTIMAL
    else:
        with pytest.raises(ValueError, match="does not accept a hint"):
            backend.solve(_knapsack(), 5.0, options)


def test_unknown_backend_and_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="unknown backend"):
        make_backend("gurobi")
    with pytest.raises(ValueError, match="reserve_fraction"):
        BudgetParams(reserve_fraction=1.0)
    with pytest.raises(ValueError, match="large_model_vars"):
        CpSatParams(large_model_vars=0)
    with pytest.raises(ValueError, match="max_domain_trials"):
        GreedyParams(max_domain_trials=True)
    assert SolveParams().budget.vars_per_second("milp") == 40_000


def test_a_variable_repeated_in_a_row_counts_each_time(exact_solver):
    # stop[v] once per GPU of a victim in a quota row: x + x <= 1 is 2x <= 1. HiGHS refuses
    # a row batch with a repeated index (no row at all was added) and PuLP keeps one of the
    # two coefficients, so the row is merged when it is added
    lm = LinearModel()
    x, y = lm.bool("x"), lm.bool("y")
    lm.add([(x, 1), (y, 1), (x, 1)], hi=1, name="twice")
    lm.add([(y, 1), (y, -1)], hi=0, name="cancels")
    assert [sorted(c.terms) for c in lm.constraints] == [[(x, 2), (y, 1)]]
    lm.objectives = [Objective([(x, 3), (y, 1)], "value", "max")]
    raw = make_backend(exact_solver).solve(lm, 10.0, BackendOptions(workers=1))
    assert raw.status == SolveStatus.OPTIMAL and raw.values == [0, 1]


def test_cpsat_s_deterministic_limit_reaches_every_phase(monkeypatch):
    """``CpSatParams.max_deterministic_time`` is set on each phase's solver (a replay's
    placements then do not depend on the machine's load); bad values are refused."""
    from ortools.sat.python import cp_model

    from hyperplace.solvers.backends.cpsat import CpSatBackend

    seen = []
    real = cp_model.CpSolver.solve

    def spy(self, model, *a, **k):
        seen.append(self.parameters.max_deterministic_time)
        return real(self, model, *a, **k)

    monkeypatch.setattr(cp_model.CpSolver, "solve", spy)
    raw = CpSatBackend(CpSatParams(max_deterministic_time=0.5)).solve(
        _knapsack(), 10.0, BackendOptions(workers=1))
    assert raw.status == SolveStatus.OPTIMAL and raw.values == [1, 0, 1]
    assert seen == [0.5, 0.5]  # both lexicographic phases
    seen.clear()
    CpSatBackend().solve(_knapsack(), 10.0, BackendOptions(workers=1))
    assert seen and all(v > 1e9 for v in seen)  # CP-SAT's default: no such limit
    for bad in (0, -1.0, float("inf"), True, "1"):
        with pytest.raises(ValueError, match="max_deterministic_time"):
            CpSatParams(max_deterministic_time=bad)


def test_a_phase_the_wall_clock_cuts_is_counted_and_one_stopped_by_work_is_not():
    """``RawSolution.wall_cuts`` (a replay's placements are reproducible only without any):
    CP-SAT with a deterministic limit marks a phase its wall-clock limit stopped unproven
    (``PhaseResult.wall_cut``), not one stopped by that limit or proven; the phase loop counts
    those and the phases it had no time left to run."""
    import time

    from hyperplace.formulations.linear import PhaseResult, solve_lexicographic
    from hyperplace.solvers.backends.cpsat import CpSatBackend

    # the knapsack is proven at once: no cut, whatever the limit
    raw = CpSatBackend(CpSatParams(max_deterministic_time=0.5)).solve(
        _knapsack(), 10.0, BackendOptions(workers=1))
    assert raw.status == SolveStatus.OPTIMAL and raw.wall_cuts == 0
    # a model far too large for 10 ms of wall (20,000 variables; proven in about 5 s on a
    # 2-core machine): cut by the wall clock with deterministic time to spare; a smaller one
    # with a tiny deterministic limit and a minute of wall: stopped by work, not cut
    def chain(n: int) -> LinearModel:
        m = LinearModel()
        xs = [m.var(f"x{i}", 0, 50) for i in range(n)]
        for i in range(0, n - 2, 2):
            m.add([(xs[i], 3), (xs[i + 1], 5), (xs[i + 2], 7)], hi=101, name=f"c{i}")
        m.objectives = [Objective([(x, 1 + i % 7) for i, x in enumerate(xs)], "v", "max")]
        return m

    raw = CpSatBackend(CpSatParams(max_deterministic_time=1e6)).solve(
        chain(20_000), 0.01, BackendOptions(workers=1))
    assert raw.status != SolveStatus.OPTIMAL and raw.wall_cuts == 1
    raw = CpSatBackend(CpSatParams(max_deterministic_time=1e-9)).solve(
        chain(2_000), 60.0, BackendOptions(workers=1))
    assert raw.status != SolveStatus.OPTIMAL and raw.wall_cuts == 0
    # the loop: phase 0 cut, phase 1 fine, then no time left for phases 2 and 3
    lm = _knapsack()
    lm.objectives = [lm.objectives[0]] * 4

    def phase(k, obj, limit):
        if k == 1:
            time.sleep(0.05)
        return PhaseResult(SolveStatus.FEASIBLE, [1, 0, 1], 1.0, 2.0, wall_cut=k == 0)

    raw = solve_lexicographic(lm, 0.05, time.perf_counter(), phase, lambda *a: None, 0.01)
    assert raw.values == [1, 0, 1] and raw.wall_cuts == 3


def test_the_plan_names_wall_cuts_only_for_a_solve_with_a_deterministic_limit():
    """The driver's plan message counts the phases the wall clock cut when CP-SAT had a
    deterministic limit (the replay engine's placements), and says nothing of the kind for a
    solve whose limit is the wall clock itself (the CLI's and the service's)."""
    from types import SimpleNamespace

    from hyperplace.formulations.linear import RawSolution
    from hyperplace.solvers import driver

    def message(work):
        r = SimpleNamespace(problem=None, pm=object(), message="", status=None,
                            params=SolveParams(cpsat=CpSatParams(max_deterministic_time=work)))
        raw = RawSolution(None, SolveStatus.NO_SOLUTION, wall_cuts=2)
        driver._take_exact(r, SimpleNamespace(name="cpsat"), raw)
        return r.message

    assert message(0.25).startswith(f"2 {driver.WALL_CUT_NOTE}; ")
    assert driver.WALL_CUT_NOTE not in message(None)
