"""Regressions from review: whole-job-on-one-node jobs, the priority promise under greedy and
time limits, many priority levels, unreachable bandwidth, and budgets on DGX-1 fleets."""

from __future__ import annotations

import pytest
from placement_helpers import instance, job, node

from hyperplace.check import check
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.models import TrainingJob
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.driver import solve_placement


def admitted(plan) -> set[str]:
    return {j.job for j in plan.jobs}


def test_replicas_with_max_hop_zero_share_one_node(solver):
    # 3 jobs of 2x4 GPUs whose replicas must share a node, on 4 free nodes: all 3 run
    inst = instance([node(f"n{i}") for i in range(4)],
                    [job(f"j{i}", tp=4, replicas=2, dp_hop=0) for i in range(3)])
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert admitted(plan) == {"j0", "j1", "j2"}
    assert check(plan, inst) == []
    for j in plan.jobs:
        assert len(j.node_names) == 1


def test_max_hop_zero_on_dgx1_splits_into_nvlink_quads(solver):
    # 2 units of 4 with NVLink >= 50 on one DGX-1: {0,1,2,3} and {4,5,6,7} are the quads
    inst = instance([node("d", "V100-32", nvlink="hybrid_cube_mesh")],
                    [job("j", tp=4, replicas=2, dp_hop=0, accel="V100", nvlink=50, mem=32)])
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert admitted(plan) == {"j"}
    assert check(plan, inst) == []
    quads = sorted(tuple(sorted(g.gpu for g in p.gpus)) for p in plan.placements)
    assert quads == [(0, 1, 2, 3), (4, 5, 6, 7)]


@pytest.mark.parametrize("solver", ["greedy", "auto"])
def test_greedy_keeps_the_priority_promise(solver):
    # six leaves with 4 scattered free GPUs, a seventh with two whole free nodes; the
    # high-priority job (2x4 on one leaf) fits only in the seventh
    busy = {i: "old" for i in range(2, 8)}
    nodes = [node(f"n{i}", allocated=busy) for i in range(12)] + [node("f0"), node("f1")]
    jobs = [job("hi", tp=4, priority="high", dp_hop=1), job("lo", tp=8, priority="low")]
    inst = instance(nodes, jobs, nodes_per_leaf=2)
    plan = solve_placement(inst, solver=solver, budget_s=0.05 if solver == "auto" else 5)
    assert "hi" in admitted(plan)
    assert check(plan, inst) == []


def test_many_priority_levels_do_not_overflow(exact_solver):
    # 7 levels x 72 GPUs on 256 free: lexicographic weights would pass 2**40, so the levels
    # are solved as several tiers
    nodes = [node(f"n{i}") for i in range(32)]
    jobs = [job(f"p{p}-{k}", tp=8, priority=p) for p in range(1, 8) for k in range(9)]
    inst = instance(nodes, jobs, nodes_per_leaf=8)
    assert len(PlacementProblem(inst).priority_phases) > 1
    plan = solve_placement(inst, solver=exact_solver, budget_s=20)
    assert plan.status == SolveStatus.OPTIMAL
    # the 32 free nodes go to the highest levels: 9 each of 7, 6, 5, then 5 of level 4
    levels = sorted(j.priority for j in plan.jobs)
    assert levels == [4] * 5 + [5] * 9 + [6] * 9 + [7] * 9
    assert plan.objective <= plan.bound
    assert check(plan, inst) == []


def _ib_job(name: str, tp: int, replicas: int, ib: float) -> TrainingJob:
    doc = job(name, tp=tp, replicas=replicas).model_dump(by_alias=True, mode="json")
    for g in doc["spec"]["resourceGroups"]:
        if g["type"] == "DataParallel":
            g["interNodeConnectivity"]["minInfiniBandBandwidthGbps"] = ib
    return TrainingJob.model_validate(doc)


def test_unreachable_bandwidth_means_one_node_or_a_reason(solver):
    # 800 Gb/s between replicas on a 400 Gb/s fabric: 2x4 runs on one node, 2x8 cannot
    inst = instance([node(f"n{i}") for i in range(4)],
                    [_ib_job("big", 8, 2, 800), _ib_job("small", 4, 2, 800)])
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert admitted(plan) == {"small"}
    assert check(plan, inst) == []
    (reason,) = next(p for p in plan.pending if p.job == "big").reasons
    assert "800" in reason and "400" in reason


def test_dgx1_fleet_under_a_small_budget_gives_a_checked_plan():
    # 4-GPU pieces without an NVLink floor have C(8,4) = 70 GPU sets per free DGX-1 node
    nodes = [node(f"d{i}", "V100-32", nvlink="hybrid_cube_mesh") for i in range(64)]
    jobs = [job(f"j{k}", tp=4, accel="V100", nvlink=0, mem=32, priority=1 + k % 3)
            for k in range(60)]
    plan = solve_placement(instance(nodes, jobs, nodes_per_leaf=8), solver="auto", budget_s=1)
    assert check(plan, instance(nodes, jobs, nodes_per_leaf=8)) == []


@pytest.mark.parametrize("backend", ["cpsat", "milp"])
def test_an_empty_queue_is_proven_optimal(backend):
    """Nothing pending (a queue whose only workload asks for no GPU, new user): the empty
    plan is optimal. HiGHS reports an empty model as kModelEmpty without a solution, and the
    round came back as 'fallback' to greedy."""
    inst = instance([node("n0"), node("n1")], [])
    plan = solve_placement(inst, solver=backend, budget_s=5)
    assert plan.status == SolveStatus.OPTIMAL and plan.solver == backend, plan.message
    assert plan.objective == 0 and plan.bound == 0 and plan.gap == 0
    assert check(plan, inst) == [] and not plan.placements and not plan.pending
