"""The backend-independent integer model: bounds, rows, violations, the phase loop."""

from __future__ import annotations

import math

import pytest

from hyperplace.formulations.linear import (
    LinearModel,
    Objective,
    PhaseResult,
    phase_limits,
    phase_time,
    solve_lexicographic,
)
from hyperplace.models.result import SolveStatus


def test_variables_rows_and_violations():
    lm = LinearModel()
    x, y = lm.var("x", 0, 3), lm.bool("y")
    lm.add([(x, 1), (y, 2)], hi=3, name="cap")
    lm.eq([(x, 1)], 1, "fix")
    assert lm.num_vars == 2 and lm.names == ["x", "y"]
    assert lm.evaluate([(x, 2), (y, 5)], [1, 1]) == 7
    assert lm.violated([1, 1]) == []
    assert lm.violated([2, 1]) == ["cap", "fix"]
    assert lm.violated([1, 2]) == ["bounds of y", "cap"]


def test_empty_domains_and_empty_violated_rows_are_errors():
    lm = LinearModel()
    with pytest.raises(ValueError, match="empty domain"):
        lm.var("x", 2, 1)
    lm.add([], lo=-1, hi=1)  # empty and satisfied: dropped
    assert lm.constraints == []
    with pytest.raises(ValueError, match="empty and violated"):
        lm.add([], lo=1, name="bad")


def test_phase_shares_give_the_first_objective_half_and_pass_on_unused_time():
    assert phase_limits(1) == [1.0]
    assert phase_limits(3) == [0.5, 0.25, 0.25]
    shares = phase_limits(3)
    assert math.isclose(phase_time(0, shares, 10.0), 5.0)
    assert math.isclose(phase_time(1, shares, 8.0), 4.0)  # half of what is left
    assert phase_time(2, shares, 3.0) == 3.0  # the last phase takes the rest


def _model() -> LinearModel:
    lm = LinearModel()
    x = lm.var("x", 0, 4)
    y = lm.var("y", 0, 4)
    lm.add([(x, 1), (y, 1)], hi=4)
    lm.objectives = [Objective([(x, 1), (y, 1)], "total", "max"), Objective([(x, 1)], "x", "min")]
    return lm


def test_phase_loop_fixes_each_objective_before_the_next():
    lm, fixed = _model(), []
    answers = {0: PhaseResult(SolveStatus.OPTIMAL, [2, 2], 4, 4),
               1: PhaseResult(SolveStatus.OPTIMAL, [0, 4], 0, 0)}
    raw = solve_lexicographic(lm, 10.0, __import__("time").perf_counter(),
                              lambda k, o, t: answers[k],
                              lambda k, o, v, proven: fixed.append((o.name, v, proven)), 0.01)
    assert raw.status == SolveStatus.OPTIMAL
    assert raw.values == [0, 4] and raw.objective_values == [4.0, 0.0]
    assert fixed == [("total", 4.0, True), ("x", 0.0, True)]


def test_phase_loop_keeps_the_incumbent_when_a_later_phase_finds_nothing():
    lm = _model()
    answers = {0: PhaseResult(SolveStatus.FEASIBLE, [1, 2], 3, 4),
               1: PhaseResult(SolveStatus.NO_SOLUTION)}
    raw = solve_lexicographic(lm, 10.0, __import__("time").perf_counter(),
                              lambda k, o, t: answers[k], lambda *a: None, 0.01)
    assert raw.status == SolveStatus.FEASIBLE and raw.values == [1, 2]
    assert raw.objective_bounds == [4]


def test_phase_loop_without_any_solution_reports_the_phase_status():
    raw = solve_lexicographic(_model(), 10.0, __import__("time").perf_counter(),
                              lambda k, o, t: PhaseResult(SolveStatus.INFEASIBLE, message="no"),
                              lambda *a: None, 0.01)
    assert raw.values is None and raw.status == SolveStatus.INFEASIBLE and raw.message == "no"
