"""The paths that keep a 131,072-GPU round within its budget, on tiny instances.

Scale itself is measured in ``bench/bench_scale.py``; these tests pin what the fast paths
must keep true: a SuperPOD past NVIDIA's table keeps its hop counts with linearly many
cables, the priority repair does not search a job shape again that it already failed,
explanations are worked out once per job shape, and a search cut short by the budget says
which jobs it never tried.
"""

from __future__ import annotations

import itertools

from placement_helpers import instance, job, node

import hyperplace.solvers.heuristics.greedy as greedy_module
from hyperplace.check import check
from hyperplace.formulations.explain import explain
from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.models.fabric import superpod_rail_optimized
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.heuristics.greedy import repair_priority, solve_greedy


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
    # side of a 1-hop limit), a low-priority job holding GPUs: one release-all search, not 3
    nodes = [node("n0"), node("n1")]
    jobs = [job("low", tp=8, priority="low")] + \
        [job(f"big{i}", tp=8, replicas=3, dp_hop=1, priority="high") for i in range(3)]
    p = PlacementProblem(instance(nodes, jobs, nodes_per_leaf=1))
    start = Assignment(units={0: [PlacedUnit(p.jobs[0].classes[0].index, "tp/0",
                                             [("n0", tuple(range(8)))])]})
    calls = []
    real = greedy_module._give_back
    monkeypatch.setattr(greedy_module, "_give_back", lambda s, u: (calls.append(1), real(s, u)))
    out = repair_priority(p, start)
    assert set(out.units) == {0} and len(calls) == 1


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


def test_a_fallback_says_where_the_budget_went():
    inst = instance([node(f"n{i}") for i in range(4)], [job(f"j{i}", tp=8) for i in range(6)])
    import time

    plan = solve_placement(inst, solver="milp", budget_s=1, deadline=time.perf_counter() - 1)
    assert plan.status.value == "fallback" and check(plan, inst) == []
    assert "milp: not run" in plan.message and "start-up and reading used" in plan.message
    assert "greedy" in plan.message and "kept for the plan" in plan.message
