"""Placement engine: every constraint on small instances whose optimum is known by hand."""

from __future__ import annotations

import pytest
from placement_helpers import instance, job, node

from hyperplace.formulations.mapping import encode
from hyperplace.formulations.placement import PlacementProblem, build_model
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.heuristics.greedy import solve_greedy


def admitted(plan) -> set[str]:
    return {j.job for j in plan.jobs}


def gpus_of(plan, job_name):
    return [(g.node, g.gpu) for p in plan.placements if p.job == job_name for g in p.gpus]


def test_nvlink_clique_on_dgx1_hybrid_cube_mesh(exact_solver):
    solver = exact_solver
    # node a has 4 free GPUs {0,1,4,5}: not a 4-clique in the hybrid cube mesh (0-5, 1-4 lack
    # NVLink); node b has {0,1,2,3}, a clique. Two 4-GPU NVLink jobs: only one can run.
    busy_a = {2: "r", 3: "r", 6: "r", 7: "r"}
    busy_b = {4: "r", 5: "r", 6: "r", 7: "r"}
    nodes = [node("a", "V100-32", nvlink="hybrid_cube_mesh", allocated=busy_a),
             node("b", "V100-32", nvlink="hybrid_cube_mesh", allocated=busy_b)]
    jobs = [job("j1", tp=4, accel="V100", nvlink=50, mem=32),
            job("j2", tp=4, accel="V100", nvlink=50, mem=32)]
    plan = solve_placement(instance(nodes, jobs), solver=solver, budget_s=10)
    assert plan.status == SolveStatus.OPTIMAL
    assert len(plan.jobs) == 1
    (name,) = admitted(plan)
    assert {n for n, _ in gpus_of(plan, name)} == {"b"}
    (pending,) = plan.pending
    assert "largest such free set" in pending.reasons[0] or "outranked" in pending.reasons[0]
    # without the NVLink requirement both fit (any 4 GPUs of a node)
    jobs = [job("j1", tp=4, accel="V100", nvlink=0, mem=32),
            job("j2", tp=4, accel="V100", nvlink=0, mem=32)]
    plan = solve_placement(instance(nodes, jobs), solver=solver, budget_s=10)
    assert admitted(plan) == {"j1", "j2"}


def test_gang_is_all_or_nothing(solver):
    # 3 replicas of 8 on two free nodes: the job cannot run, and nothing of it is placed
    nodes = [node("n0"), node("n1"), node("n2", allocated={i: "r" for i in range(8)})]
    plan = solve_placement(instance(nodes, [job("big", tp=8, replicas=3)]), solver=solver)
    assert plan.placements == []
    assert plan.pending[0].job == "big"
    assert "needs 24" in plan.pending[0].reasons[0]


def test_type_memory_and_faulty_gpus(solver):
    nodes = [node("a100", "A100-80"), node("h100", "H100-80", faulty=[0])]
    jobs = [job("wants-h100", tp=7, accel="H100"), job("wants-a100", tp=8, accel="A100", nvlink=600),
            job("needs-141gb", tp=1, accel=None, mem=141)]
    plan = solve_placement(instance(nodes, jobs), solver=solver)
    assert admitted(plan) == {"wants-h100", "wants-a100"}
    assert all(n == "h100" and g != 0 for n, g in gpus_of(plan, "wants-h100"))
    assert all(n == "a100" for n, _ in gpus_of(plan, "wants-a100"))
    reason = next(p for p in plan.pending if p.job == "needs-141gb").reasons[0]
    assert "141" in reason and "none" in reason


def test_nvlink_bandwidth_excludes_slower_nodes(solver):
    # 900 GB/s pairs exist only on H100 nodes; an A100 NVSwitch node has 600
    nodes = [node("a", "A100-80")]
    plan = solve_placement(instance(nodes, [job("tp8", tp=8, accel=None, nvlink=900)]), solver=solver)
    assert plan.placements == []
    assert "900" in plan.pending[0].reasons[0]


def test_hop_count_between_replicas(solver):
    # leaves of 2 nodes: leaf0 = n0 (4 free) + n1 (8); leaf1 = n2 (8) + n3 (8).
    nodes = [node("n0", allocated={i: "r" for i in range(4)}), node("n1"), node("n2"), node("n3")]
    jobs = [job("same-leaf", tp=8, replicas=2, dp_hop=1)]
    plan = solve_placement(instance(nodes, jobs), solver=solver)
    assert {n for n, _ in gpus_of(plan, "same-leaf")} == {"n2", "n3"}


def test_tp_group_larger_than_a_node(solver):
    nodes = [node("n0"), node("n1"), node("n2")]
    jobs = [job("tp16-hop0", tp=16, tp_hop=0), job("tp16-hop1", tp=16, tp_hop=1)]
    plan = solve_placement(instance(nodes, jobs, nodes_per_leaf=2), solver=solver)
    # hop 0 is impossible on 8-GPU nodes; hop 1 needs both nodes of leaf0
    assert admitted(plan) == {"tp16-hop1"}
    assert {n for n, _ in gpus_of(plan, "tp16-hop1")} == {"n0", "n1"}
    reason = next(p for p in plan.pending if p.job == "tp16-hop0").reasons[0]
    assert "maxHopCount 0" in reason


def test_priority_never_loses_to_lower(solver):
    # one free node; a high-priority 8-GPU job vs two low 4-GPU jobs (same total)
    nodes = [node("n0")]
    jobs = [job("low1", tp=4, priority="low"), job("low2", tp=4, priority="low"),
            job("high", tp=8, priority="high")]
    plan = solve_placement(instance(nodes, jobs), solver=solver)
    assert admitted(plan) == {"high"}
    assert all("outranked by high" in p.reasons[0] for p in plan.pending)


def test_whole_window_beats_one_at_a_time(exact_solver):
    solver = exact_solver
    # free 6 + 2 + 8 GPUs; jobs 8 and 6 and 2: one-at-a-time best fit of the 6 first would
    # still work, but greedy takes the 8 first onto the 8-node... construct: 4+4 on one node
    nodes = [node("n0", allocated={0: "r", 1: "r"}), node("n1", allocated={i: "r" for i in range(6)}),
             node("n2")]
    jobs = [job("eight", tp=8), job("six", tp=6), job("two", tp=2)]
    plan = solve_placement(instance(nodes, jobs), solver=solver)
    assert admitted(plan) == {"eight", "six", "two"}
    assert plan.status == SolveStatus.OPTIMAL


def test_fragmentation_prefers_partly_used_nodes(exact_solver):
    solver = exact_solver
    nodes = [node("n0", allocated={0: "r", 1: "r", 2: "r", 3: "r"}), node("n1")]
    plan = solve_placement(instance(nodes, [job("four", tp=4)], nodes_per_leaf=1), solver=solver)
    assert {n for n, _ in gpus_of(plan, "four")} == {"n0"}
    assert plan.objective_terms["fragmentation"] == 0


def test_policy_performance_and_cost(exact_solver):
    solver = exact_solver
    nodes = [node("h", "H100-80"), node("a", "A100-80")]
    j = [job("any", tp=8, accel=None, nvlink=600)]
    fast = solve_placement(instance(nodes, j), solver=solver, policy="performance")
    cheap = solve_placement(instance(nodes, j), solver=solver, policy="cost")
    assert {n for n, _ in gpus_of(fast, "any")} == {"h"}
    assert {n for n, _ in gpus_of(cheap, "any")} == {"a"}


def test_exact_backends_agree_on_every_objective():
    nodes = [node(f"n{i}", allocated={k: "r" for k in range(i % 4)}) for i in range(6)]
    jobs = [job("a", tp=8, replicas=2, priority="high"), job("b", tp=4, replicas=3),
            job("c", tp=2, replicas=2, dp_hop=1), job("d", tp=1, replicas=5, priority="low"),
            job("e", tp=16, tp_hop=3)]
    inst = instance(nodes, jobs)
    a = solve_placement(inst, solver="cpsat", budget_s=20)
    b = solve_placement(inst, solver="milp", budget_s=20)
    assert a.status == b.status == SolveStatus.OPTIMAL
    assert a.objective_terms == b.objective_terms
    g = solve_placement(inst, solver="greedy")
    assert g.objective <= a.objective <= a.bound + 1e-9


def test_greedy_hint_is_a_valid_assignment_of_the_model():
    nodes = [node(f"n{i}", allocated={k: "r" for k in range(i % 3)}) for i in range(4)]
    jobs = [job("a", tp=8), job("b", tp=4, replicas=2), job("c", tp=16, tp_hop=3)]
    p = PlacementProblem(instance(nodes, jobs))
    pm = build_model(p)
    assert pm.lm.violated(encode(pm, solve_greedy(p))) == []


def test_budget_too_small_returns_greedy_marked_fallback():
    nodes = [node(f"n{i}") for i in range(8)]
    jobs = [job(f"j{i}", tp=4) for i in range(6)]
    plan = solve_placement(instance(nodes, jobs), solver="cpsat", budget_s=0.05)
    assert plan.status == SolveStatus.FALLBACK
    assert plan.solver.startswith("greedy")
    assert len(plan.jobs) == 6


def test_unknown_solver_and_policy_are_rejected():
    inst = instance([node("n0")], [job("a", tp=1)])
    with pytest.raises(ValueError, match="unknown solver"):
        solve_placement(inst, solver="magic")
    with pytest.raises(ValueError, match="unknown policy"):
        solve_placement(inst, policy="cheapest")


def test_the_model_asks_the_eligibility_rule_once_per_kind_of_node(monkeypatch):
    """Node classes alike but for their leaf (same GPU type, pair and link rates, free
    count) take the same pieces: the model builder asks node_eligible and piece_capacity
    once per such kind and piece size, and builds the very model that asking every class
    builds (same variables, bounds, rows), which solves to the same optimum."""
    from hyperplace.check import check

    nodes = [node(f"n{i:02d}", allocated={g: f"r{i}" for g in range(i % 3 * 2)})
             for i in range(48)]
    jobs = [job("a", tp=2), job("b", tp=4, replicas=2), job("c", tp=8), job("d", tp=1)]
    inst = instance(nodes, jobs, nodes_per_leaf=4)
    asked: list[str] = []
    real = PlacementProblem.node_eligible

    def spy(self, jv, uc, n):
        asked.append(n.name)
        return real(self, jv, uc, n)

    monkeypatch.setattr(PlacementProblem, "node_eligible", spy)
    p = PlacementProblem(inst)
    memo = build_model(p)
    few = len(asked)
    monkeypatch.setattr(PlacementProblem, "capacity_key", staticmethod(lambda n: None))
    asked.clear()
    q = PlacementProblem(inst)
    every = build_model(q)
    # 12 leaves x 3 free counts (8, 6, 4): 36 classes, 3 kinds; 4 jobs of one piece size
    assert len(q.node_classes) == 36 and len(asked) == 4 * 36 and few == 4 * 3
    assert memo.lm.names == every.lm.names and memo.lm.ubs == every.lm.ubs
    assert [(c.terms, c.lo, c.hi) for c in memo.lm.constraints] == \
        [(c.terms, c.lo, c.hi) for c in every.lm.constraints]
    monkeypatch.undo()
    plan = solve_placement(inst, solver="milp", budget_s=20)
    assert check(plan, inst) == [] and plan.status == SolveStatus.OPTIMAL
