"""Every backend against a brute-force optimum on tiny rounds (see ``placement_oracle``).

An exact backend that says ``optimal`` must reach the oracle's objective 1 and its
tie-breaker; every plan's objective is at most the oracle's and its bound at least.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_helpers import instance, job, node
from placement_oracle import Oracle

from hyperplace.check import check
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.driver import solve_placement

EXAMPLES = int(os.environ.get("HP_ORACLE_EXAMPLES", "12"))


def _compare(inst, solver: str) -> None:
    best_weighted, best_jobs = Oracle(inst).best()
    plan = solve_placement(inst, solver=solver, budget_s=10, workers=1)
    assert check(plan, inst) == []
    assert plan.objective <= best_weighted + 1e-6, (plan.objective, best_weighted)
    assert plan.bound >= best_weighted - 1e-6, (plan.bound, best_weighted)
    if plan.status == SolveStatus.OPTIMAL:
        assert plan.objective == best_weighted
        assert len(plan.jobs) == best_jobs


@st.composite
def tiny_rounds(draw):
    """2-3 nodes of 4 or 8 GPUs (NVSwitch H100/A100), partly busy; 1-3 jobs whose units fit
    one node and have an NVLink floor, so that each sits on one node."""
    nodes = []
    for i in range(draw(st.integers(2, 3))):
        gpu_type = draw(st.sampled_from(["H100-80", "A100-80"]))
        gpus = draw(st.sampled_from([4, 8]))
        busy = draw(st.sets(st.integers(0, gpus - 1), max_size=gpus - 1))
        nodes.append(node(f"n{i}", gpu_type, gpus=gpus, allocated={g: "r" for g in busy}))
    jobs = [job(f"j{k}", tp=draw(st.sampled_from([1, 2, 4])), replicas=draw(st.integers(1, 2)),
                accel=draw(st.sampled_from([None, "H100", "A100"])),
                priority=draw(st.sampled_from(["low", "normal", "high"])),
                dp_hop=draw(st.sampled_from([None, 1])),
                nvlink=draw(st.sampled_from([600, 900])), mem=40)
            for k in range(draw(st.integers(1, 3)))]
    return instance(nodes, jobs, nodes_per_leaf=draw(st.integers(1, 2)))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=tiny_rounds())
def test_backend_matches_brute_force_on_tiny_rounds(solver, inst):
    _compare(inst, solver)


def test_oracle_on_a_hand_checked_round(solver):
    # one free 8-GPU node: high 8 beats two low 4s (one GPU of high outweighs all low ones)
    inst = instance([node("n0")], [job("low1", tp=4, priority="low"),
                                   job("low2", tp=4, priority="low"),
                                   job("high", tp=8, priority="high")])
    oracle = Oracle(inst)
    assert oracle.best() == (oracle.weights[job("h", priority="high").priority] * 8, 1)
    _compare(inst, solver)


def test_dgx1_cliques_against_brute_force(solver):
    # DGX-1 with {0,1,4,5} free (no 4-clique: 0-5 and 1-4 lack NVLink) and a fresh one
    nodes = [node("a", "V100-32", nvlink="hybrid_cube_mesh", allocated={2: "r", 3: "r", 6: "r", 7: "r"}),
             node("b", "V100-32", nvlink="hybrid_cube_mesh")]
    jobs = [job("q1", tp=4, accel="V100", nvlink=50, mem=32),
            job("q2", tp=4, accel="V100", nvlink=50, mem=32),
            job("p1", tp=2, accel="V100", nvlink=50, mem=32, priority="low")]
    _compare(instance(nodes, jobs, nodes_per_leaf=2), solver)
