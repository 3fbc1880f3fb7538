"""Hot spares as a constraint of the placement model (#14): every leaf keeps
``min(N, its whole free nodes)`` whole free nodes for repairs, and the solver chooses which.
Every plan goes through the checker, every backend."""

from __future__ import annotations

import pytest

from hyperplace.check import check
from hyperplace.solvers.driver import solve_placement
from placement_helpers import instance, job, node


def _mixed_leaf(*jobs):
    # one leaf of three whole free nodes: two H100 and, last, an A100
    return instance([node("n0"), node("n1"), node("n2", gpu_type="A100-80")], list(jobs),
                    nodes_per_leaf=3)


def _used_nodes(plan):
    return {g.node for p in plan.placements for g in p.gpus}


def test_the_solver_chooses_which_node_stays_spare(solver):
    # keeping the last whole free node (n2, the only A100) spare would leave the A100 job
    # out; keeping an H100 node spare places both (the designated-node approach failed this)
    inst = _mixed_leaf(job("a100", accel="A100", nvlink=600), job("h100"))
    plan = solve_placement(inst, solver=solver, budget_s=10, hot_spares=1)
    assert set(plan.admitted) == {"a100", "h100"}
    assert plan.hot_spares == 1 and check(plan, inst) == []
    assert len(_used_nodes(plan)) == 2 and "n2" in _used_nodes(plan)


def test_a_small_round_with_spares_is_proven_optimal(exact_solver):
    inst = _mixed_leaf(job("a100", accel="A100", nvlink=600), job("h100"), job("h100b"))
    plan = solve_placement(inst, solver=exact_solver, budget_s=10, hot_spares=1)
    assert plan.status.value == "optimal", plan.message
    assert len(plan.admitted) == 2 and check(plan, inst) == []


def test_a_job_held_back_by_the_spares_says_so(solver):
    inst = instance([node(f"n{i}") for i in range(3)], [job(f"j{i}") for i in range(3)],
                    nodes_per_leaf=3)
    plan = solve_placement(inst, solver=solver, budget_s=10, hot_spares=1)
    assert len(plan.admitted) == 2 and check(plan, inst) == []
    (pending,) = plan.pending
    assert any("keeps 1 hot spare node for repairs" in r for r in pending.reasons), pending
    # every leaf keeps min(N, what it has): with more spares than nodes nothing is placed
    none = solve_placement(inst, solver=solver, budget_s=10, hot_spares=5)
    assert none.admitted == [] and check(none, inst) == []
    # partly used nodes are not spares: they stay usable
    busy = instance([node("n0", allocated={0: "x"}), node("n1")], [job("small", tp=4)],
                    nodes_per_leaf=2)
    small = solve_placement(busy, solver=solver, budget_s=10, hot_spares=1)
    assert _used_nodes(small) == {"n0"} and check(small, busy) == []


def test_pieces_that_do_not_divide_the_node_are_counted_per_node(solver):
    # 3-GPU jobs: two fit on an 8-GPU node, so two openable nodes hold four, not five
    # (15 GPUs would fit two nodes by GPU count alone)
    inst = instance([node(f"n{i}") for i in range(3)], [job(f"s{i}", tp=3) for i in range(5)],
                    nodes_per_leaf=3)
    plan = solve_placement(inst, solver=solver, budget_s=10, hot_spares=1)
    assert len(plan.admitted) == 4 and check(plan, inst) == []
    assert len(_used_nodes(plan)) == 2


def test_the_checker_flags_a_plan_that_eats_the_spares():
    inst = _mixed_leaf(job("a100", accel="A100", nvlink=600), job("h100"), job("h100b"))
    plain = solve_placement(inst, solver="greedy", budget_s=5)
    assert len(plain.admitted) == 3 and check(plain, inst) == []
    eats = plain.model_copy(update={"hot_spares": 1})
    violations = [v for v in check(eats, inst) if v.code == "hot-spares"]
    assert len(violations) == 1 and "c/" in violations[0].message
    # the same plan without h100b keeps one spare: valid with one, not with two
    kept = eats.model_copy(update={
        "placements": [p for p in eats.placements if p.job != "h100b"],
        "jobs": [s for s in eats.jobs if s.job != "h100b"]})
    assert "hot-spares" not in {v.code for v in check(kept, inst)}
    two = kept.model_copy(update={"hot_spares": 2})
    assert "hot-spares" in {v.code for v in check(two, inst)}


def test_warm_rounds_keep_the_spares():
    from hyperplace.solvers.heuristics.warm import WarmStart

    inst = instance([node(f"n{i}") for i in range(4)], [job(f"j{i}") for i in range(3)],
                    nodes_per_leaf=4)
    warm = WarmStart()
    first = solve_placement(inst, solver="greedy", budget_s=5, warm=warm)
    assert len(first.admitted) == 3
    second = solve_placement(inst, solver="greedy", budget_s=5, warm=warm, hot_spares=2)
    assert len(second.admitted) == 2 and check(second, inst) == []


def test_negative_spares_are_refused():
    inst = _mixed_leaf(job("h100"))
    with pytest.raises(ValueError, match="hot spares"):
        solve_placement(inst, solver="greedy", hot_spares=-1)


def test_preemption_keeps_the_spares(solver):
    from hyperplace.models.instance import RunningJob

    # n0 held by a low-priority job, n1 and n2 whole free; one spare: one high job on a
    # whole free node, the other only by stopping the low job
    nodes = [node("n0", allocated={g: "low" for g in range(8)}), node("n1"), node("n2")]
    inst = instance(nodes, [job("hi1", priority="high"), job("hi2", priority="high")],
                    nodes_per_leaf=3)
    inst = inst.model_copy(update={"spec": inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name="low", priority=1, checkpoint_age_s=60)]})})
    plan = solve_placement(inst, solver=solver, budget_s=10, hot_spares=1,
                           preemption="lower-priority")
    assert set(plan.admitted) == {"hi1", "hi2"} and [p.job for p in plan.preemptions] == ["low"]
    assert check(plan, inst) == [] and len(_used_nodes(plan) - {"n0"}) == 1


def test_migrations_keep_the_spares(solver):
    from pathlib import Path

    from hyperplace.models.migration import MigrationPolicy
    from hyperplace.commands.solve import resolve_instance

    inst = resolve_instance(str(Path(__file__).resolve().parents[2] / "examples" /
                                "busy-cluster.yaml"), None, None)
    for spares in (0, 1, 2):
        plan = solve_placement(inst, solver=solver, budget_s=10, hot_spares=spares,
                               migration=MigrationPolicy())
        assert plan.hot_spares == spares and check(plan, inst) == [], (spares, plan.message)


def test_the_mapping_drops_a_job_that_would_open_a_spare():
    # the guard behind the model's node count (pieces that do not divide each other may
    # pack into more nodes than counted): an assignment opening every node loses one job
    from hyperplace.formulations.mapping import Assignment, PlacedUnit
    from hyperplace.formulations.placement import PlacementProblem

    inst = instance([node(f"n{i}") for i in range(3)],
                    [job("j0", priority="high"), job("j1"), job("j2", tp=4)], nodes_per_leaf=3)
    p = PlacementProblem(inst, hot_spares=1)
    a = Assignment()
    for jv, name in zip(p.jobs, ("n0", "n1", "n2")):
        uc = jv.classes[0]
        a.units[jv.index] = [PlacedUnit(uc.index, uc.units[0].name, [(name, tuple(range(uc.size)))])]
    assert p.hot_spare_rule is not None and p.extensions == [p.hot_spare_rule]
    p.hot_spare_rule.settle(a)
    assert sorted(a.units) == [0, 1] and "hot spares" in a.notes[2]


def test_greedy_keeps_the_familys_counter_and_asks_its_probe():
    # the hot-spare family owns greedy's counter (its opening rule) and, through the greedy
    # registry, the explanations' probe; a round without spares has neither
    from hyperplace.formulations.mapping import Assignment
    from hyperplace.formulations.placement import PlacementProblem
    from hyperplace.formulations.placement.spares import SpareCounter
    from hyperplace.solvers.heuristics import families
    from hyperplace.solvers.heuristics.greedy import State, solve_greedy
    from hyperplace.solvers.params import GreedyParams

    inst = instance([node(f"n{i}") for i in range(3)], [job(f"j{i}") for i in range(3)],
                    nodes_per_leaf=3)
    p = PlacementProblem(inst, hot_spares=1)
    state = State(p)
    assert [type(r) for r in state.openings] == [SpareCounter]
    assert state.openings[0].left == p.spare_allowance and State(p, rules=False).openings == ()
    for name in ("n0", "n1"):  # open two of the three whole free nodes: the third is spare
        state.take(name, (0,))
    leaf = p.node_by_name["n2"].leaf
    assert not state.may_open(leaf) and State(p, rules=False).may_open(leaf)
    state.give("n1", (0,))  # whole free again: one may be opened
    assert state.may_open(leaf)
    a = solve_greedy(p)
    (left,) = [jv for jv in p.jobs if jv.index not in a.units]
    probe = families.spare_probe(p, a, GreedyParams())
    assert probe is not None and probe(left) == [leaf]
    plain = PlacementProblem(inst)
    assert families.spare_probe(plain, Assignment(), GreedyParams()) is None
    assert State(plain).openings == ()


def test_switch_groups_are_the_leaves_off_trees(solver):
    # not a tree: L1 - L2, n1 n2 on L1, n3 n4 on L2, x on both (a group of its own); the
    # model and the checker share one leaf (the switch group), so each of the three keeps one
    from hyperplace.models import Cluster, FabricSpec, Instance, InstanceSpec
    from hyperplace.models.fabric import Link, Switch
    from hyperplace.models.job import ObjectMeta
    from hyperplace.models.sharing import whole_free_per_leaf

    links = [Link(a="L1", b="L2", gbps=400), Link(a="x", b="L1", gbps=400),
             Link(a="x", b="L2", gbps=400)]
    links += [Link(a=f"n{i}", b=f"L{(i + 1) // 2}", gbps=400) for i in range(1, 5)]
    cluster = Cluster(name="c", nodes=[node(f"n{i}") for i in range(1, 5)] + [node("x")],
                      fabric=FabricSpec(switches=[Switch(name="L1"), Switch(name="L2")],
                                        links=links))
    inst = Instance(metadata=ObjectMeta(name="line"), spec=InstanceSpec(
        clusters=[cluster], jobs=[job(f"j{i}") for i in range(5)]))
    assert not cluster.network.is_tree and len(whole_free_per_leaf(inst)) == 3
    plan = solve_placement(inst, solver=solver, budget_s=10, hot_spares=1)
    assert len(plan.admitted) == 2 and check(plan, inst) == []
    assert "x" not in _used_nodes(plan)
