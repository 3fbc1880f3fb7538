"""The paths that keep a 131,072-GPU round within its budget, on tiny instances.

Scale itself is measured in ``bench/bench_scale.py``; these tests pin what the fast paths
must keep true: a SuperPOD past NVIDIA's table keeps its hop counts with linearly many
cables, the inversion fix does not search a job shape again that it already failed,
explanations are worked out once per job shape, and a search cut short by the budget says
which jobs it never tried.
"""

from __future__ import annotations

import itertools

import pytest

from placement_helpers import instance, job, node

import hyperplace.solvers.heuristics.greedy as greedy_module
from hyperplace.check import check
from hyperplace.formulations.explain import explain
from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.models.fabric import superpod_rail_optimized
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.heuristics.greedy import fix_inversions, solve_greedy


def test_superpod_past_the_reference_table_grows_linearly_and_keeps_its_hops():
    nodes = [f"n{i:05d}" for i in range(128 * 32)]  # 128 SUs: twice the table's largest row
    fabric = superpod_rail_optimized(nodes)
    tier = {s.name: s.tier for s in fabric.switches}
    core_cables = sum(link.count for link in fabric.links
                      if tier.get(link.a) == 2 and tier.get(link.b) == 3)
    assert core_cables == 2 * 16_384  # the 64-SU row has 16,384 spine-core cables
    down: dict[str, int] = {}
    up: dict[str, int] = {}
    for link in fabric.links:
        if tier.get(link.a) == 1 and tier.get(link.b) == 2:
            down[link.b] = down.get(link.b, 0) + link.count
        if tier.get(link.a) == 2 and tier.get(link.b) == 3:
            up[link.a] = up.get(link.a, 0) + link.count
    assert down == up  # every spine non-blocking: as many core uplinks as leaf downlinks
    assert fabric.path(nodes[0], nodes[-1]) == (5, 400.0)  # across spine groups
    assert fabric.path(nodes[0], nodes[100]) == (3, 400.0)  # same spine group, other SU
    assert fabric.radii == [1, 3, 5] and fabric.is_tree


def test_the_priority_repair_does_not_search_a_failed_shape_again(monkeypatch):
    # three identical high-priority 16-GPU gangs that fit nowhere (one 8-GPU node each
    # side of a 1-hop limit), a low-priority job holding GPUs: one search, not 3
    nodes = [node("n0"), node("n1")]
    jobs = [job("low", tp=8, priority="low")] + \
        [job(f"big{i}", tp=8, replicas=3, dp_hop=1, priority="high") for i in range(3)]
    p = PlacementProblem(instance(nodes, jobs, nodes_per_leaf=1))
    start = Assignment(units={0: [PlacedUnit(p.jobs[0].classes[0].index, "tp/0",
                                             [("n0", tuple(range(8)))])]})
    calls, probes = [], []
    real = greedy_module.give_back
    monkeypatch.setattr(greedy_module, "give_back", lambda s, u: (calls.append(1), real(s, u)))
    fits = greedy_module._LevelProbe.fits
    monkeypatch.setattr(greedy_module._LevelProbe, "fits",
                        lambda self, jv, trials: (probes.append(jv.name), fits(self, jv, trials))[1])
    out = fix_inversions(p, start)
    # one search for the shape: the level probe's (with low released), which fails, so
    # nothing is released and given back
    assert set(out.units) == {0} and probes == ["big0"] and calls == []


def test_explanations_are_worked_out_once_per_shape():
    nodes = [node("n0")]
    jobs = [job(f"j{i}", tp=8) for i in range(5)]
    p = PlacementProblem(instance(nodes, jobs))
    probed = []
    reasons = explain(p, Assignment(), fits_alone=lambda jv: probed.append(jv.name) or False)
    assert probed == ["j0"]
    assert len({tuple(r) for r in reasons.values()}) == 1 and len(reasons) == 5


def test_a_search_cut_short_names_the_jobs_it_never_tried(monkeypatch):
    nodes = [node(f"n{i}") for i in range(4)]
    inst = instance(nodes, [job(f"j{i}", tp=8) for i in range(4)])
    p = PlacementProblem(inst)
    ticks = itertools.count()
    # a clock that moves 1 s per reading: the first pass stops after its first job
    monkeypatch.setattr(greedy_module.time, "perf_counter", lambda: float(next(ticks)))
    cut = solve_greedy(p, deadline=2.5)
    monkeypatch.undo()
    assert cut.units and cut.untried and not set(cut.units) & cut.untried
    reasons = explain(p, cut)
    assert all(reasons[j][0].startswith("not tried: the time budget ran out") for j in cut.untried)
    late = explain(p, Assignment(), deadline=0.0)
    assert "per-job analysis skipped: the time budget was spent" in late[0][0]


def test_a_job_that_cannot_fit_says_why_even_past_the_deadline():
    """Past the explanations' deadline a job that cannot fit the free GPUs at all still says
    why (counts, once per shape); it said "per-job analysis skipped: the time budget was
    spent", which the solve summary counts as "budget spent" (a new user's finding)."""
    inst = instance([node("n0"), node("n1")], [job("fits", tp=8), job("never", tp=8, replicas=3)])
    p = PlacementProblem(inst)
    late = explain(p, Assignment(), deadline=0.0)
    never = next(jv.index for jv in p.jobs if jv.name == "never")
    fits = next(jv.index for jv in p.jobs if jv.name == "fits")
    assert late[never] == ["group tp needs 24 H100 GPUs; 16 are free"]
    assert "per-job analysis skipped" in late[fits][0]


def test_a_fallback_says_where_the_budget_went():
    inst = instance([node(f"n{i}") for i in range(4)], [job(f"j{i}", tp=8) for i in range(6)])
    import time

    plan = solve_placement(inst, solver="milp", budget_s=1, deadline=time.perf_counter() - 1)
    assert plan.status.value == "fallback" and check(plan, inst) == []
    assert "milp: not run" in plan.message and "start-up and reading used" in plan.message
    assert "greedy" in plan.message and "kept for mapping back" in plan.message
    # the explanations ran past the deadline: the pending jobs say their analysis was skipped
    assert plan.pending and all(pj.analysis == "skipped" for pj in plan.pending)
    assert "got a generic reason only" in plan.message


class _Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_budget_reads_the_clocks_as_they_are_when_it_is_made(monkeypatch):
    """Budget's default clocks are time.perf_counter and time.process_time looked up when
    the budget is made: a default bound at import hid a patched clock (as e70d594 fixed
    for solve_schedule)."""
    import time

    from hyperplace.solvers.budget import Budget
    from hyperplace.solvers.params import BudgetParams

    wall, cpu = _Clock(), _Clock()
    wall.now, cpu.now = 100.0, 50.0
    monkeypatch.setattr(time, "perf_counter", wall)
    monkeypatch.setattr(time, "process_time", cpu)
    budget = Budget(10.0, BudgetParams())
    assert budget.start == 100.0 and budget.cpu_start == 50.0
    wall.now = 104.0
    assert budget.elapsed() == 4.0 and budget.left() == 6.0


def test_the_reserve_holds_one_greedy_pass_and_no_explanations():
    from hyperplace.solvers.budget import Budget
    from hyperplace.solvers.params import BudgetParams

    params = BudgetParams()
    budget = Budget(10.0, params, clock=_Clock())
    # reserve_s + reserve_fraction x budget + greedy_reserve_factor x the first pass
    assert budget.reserve(2.0) == params.reserve_s + params.reserve_fraction * 10.0 + \
        params.greedy_reserve_factor * 2.0
    assert params.greedy_reserve_factor == 1.0
    # the explanations stop before the deadline, by their per-item tail
    assert budget.explain_deadline(100, 900) == 10.0 - params.explain_tail_s_per_item * 1000


def test_what_is_kept_for_the_plan_grows_with_the_measured_slowdown():
    """The rule (solvers.budget): every tail kept for the plan and its writing is an idle
    CPU figure times the slowdown, wall seconds per CPU second of the solve so far (read
    from ``slowdown_after_s`` of wall on, never lowered)."""
    from hyperplace.solvers.budget import Budget
    from hyperplace.solvers.params import BudgetParams

    p = BudgetParams()
    wall, cpu = _Clock(), _Clock()
    b = Budget(10.0, p, deadline=9.5, clock=wall, cpu_clock=cpu, write_s=0.5)
    jobs, free = 1_000, 9_000
    tail = p.explain_tail_s_per_item * (jobs + free)

    def rule(slow: float) -> tuple[float, ...]:
        ready = 9.5 - (slow - 1.0) * 0.5  # the caller kept 0.5 s of writing, idle
        return (ready, ready - slow * tail,
                ready - p.reserve_s - slow * p.bound_tail_s_per_job * jobs,
                ready - p.reserve_s - slow * p.greedy_tail_s_per_job * jobs,
                slow * p.aggregate_s_per_job * jobs + 0.005)

    def kept() -> tuple[float, ...]:
        return (b.deadline, b.explain_deadline(jobs, free), b.bounds_deadline(jobs),
                b.greedy_deadline(jobs), b.aggregate_s(jobs))

    assert kept() == rule(1.0)
    wall.now, cpu.now = 0.1, 0.01  # 10x, but under slowdown_after_s of wall: not read yet
    assert b.slowdown() == 1.0 and kept() == rule(1.0)
    wall.now, cpu.now = 1.2, 0.3  # a loaded machine: 4 s of wall per CPU second
    assert b.slowdown() == 4.0
    assert kept() == pytest.approx(rule(4.0))
    assert b.explain_deadline(jobs, free) < 9.5 - 4 * tail  # and more than the writing
    wall.now, cpu.now = 2.0, 1.9  # an exact backend's two threads: CPU catches up
    assert b.slowdown() == 4.0 and kept() == pytest.approx(rule(4.0))


def test_the_plan_is_kept_time_for_the_gpus_it_can_place():
    """Building the plan scales with the GPUs it places: the explanations stop the plan's
    tail before the deadline for the free GPUs, at most what the round's jobs ask."""
    from hyperplace.solvers.driver import placeable_gpus

    nodes = [node(f"n{i}") for i in range(4)]  # 32 free GPUs
    few = PlacementProblem(instance(nodes, [job("a", tp=8), job("b", tp=4)]))
    assert few.free_gpus == 32 and placeable_gpus(few) == 12
    many = PlacementProblem(instance(nodes, [job(f"j{i}", tp=8) for i in range(6)]))
    assert placeable_gpus(many) == 32


def test_the_plans_runtime_covers_building_it(monkeypatch):
    """runtimeS is stamped once the plan is built: a clock that advances 3 s while the plan
    is written shows in it (it was stamped before, and said 9.3 s of a solve of 11.8 s)."""
    import time

    import hyperplace.solvers.driver as driver
    from hyperplace.solvers.budget import Budget
    from hyperplace.solvers.params import SolveParams

    inst = instance([node("n0"), node("n1")], [job(f"j{i}", tp=8) for i in range(3)])
    offset = [0.0]
    real_to_plan = driver.to_plan

    def slow_to_plan(*args, **kwargs):
        plan = real_to_plan(*args, **kwargs)
        offset[0] += 3.0  # writing the plan took 3 s
        return plan

    monkeypatch.setattr(driver, "to_plan", slow_to_plan)
    params = SolveParams()
    budget = Budget(10.0, params.budget, clock=lambda: time.perf_counter() + offset[0])
    r = driver.SolveRound(PlacementProblem(inst), budget, params, budget_s=10.0)
    driver.search(r, "greedy")
    plan = driver.finish(r)
    assert check(plan, inst) == []
    assert 3.0 <= plan.runtime_s < 3.0 + budget.elapsed()


def test_greedy_leaves_out_its_second_pass_when_it_would_take_the_exact_models_time():
    from hyperplace.solvers.budget import Budget
    from hyperplace.solvers.heuristics.greedy import GreedyStats
    from hyperplace.solvers.params import BudgetParams

    clock = _Clock()
    budget = Budget(10.0, BudgetParams(), clock=clock, cpu_clock=clock)  # not slowed
    clock.now = 3.0  # 7 s left; a first pass of 1 s: the reserve is 0.1 + 0.8 + 1.0 = 1.9 s
    # 5.1 s left for the model without a second pass, 3.9 s after one (1.2 x the first)
    assert budget.second_pass_ok(3.5, 1.0)  # the model needs 3.5 s: both fit
    assert not budget.second_pass_ok(4.5, 1.0)  # needs 4.5 s: only without the second pass
    assert budget.second_pass_ok(6.0, 1.0)  # needs 6 s: cannot run anyway, two passes
    inst = instance([node(f"n{i}") for i in range(2)], [job(f"j{i}", tp=8) for i in range(3)])
    p = PlacementProblem(inst)
    stats = GreedyStats()
    one = solve_greedy(p, stats=stats, second_pass_ok=lambda first_s: False)
    assert stats.passes == 1 and stats.second_skipped and len(one.units) == 2
    both = GreedyStats()
    solve_greedy(p, stats=both)
    assert both.passes == 2 and not both.second_skipped and both.first_pass_s > 0


def test_jobs_whose_analysis_was_skipped_say_so_in_the_plan():
    from hyperplace.formulations.mapping import to_plan
    from hyperplace.models.result import SolveStats, SolveStatus

    inst = instance([node("n0")], [job(f"j{i}", tp=8) for i in range(3)])
    p = PlacementProblem(inst)
    a = solve_greedy(p)
    skipped: set[int] = set()
    reasons = explain(p, a, deadline=0.0, fits_alone=lambda jv: True, skipped=skipped)
    assert skipped == set(reasons) and len(skipped) == 2
    stats = SolveStats(status=SolveStatus.FEASIBLE, solver="greedy", objective=8.0,
                       bound=None, gap=None, runtime_s=0.0, budget_s=1.0)
    plan = to_plan(p, a, stats, reasons, skipped=skipped)
    assert [pj.analysis for pj in plan.pending] == ["skipped", "skipped"]
    assert check(plan, inst) == []
    full = to_plan(p, a, stats, explain(p, a, fits_alone=lambda jv: True))
    assert all(pj.analysis == "full" for pj in full.pending)
    assert "analysis" not in full.to_doc()["pending"][0]  # the default is left out
