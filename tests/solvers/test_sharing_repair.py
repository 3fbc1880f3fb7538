"""Repair after failures (#14): keep healthy units in place when the hop rules allow, else
move the whole job; hot spares; every repair plan through the checker, every backend."""

from __future__ import annotations

import pytest

from hyperplace.check import check
from hyperplace.models.instance import RunningJob
from hyperplace.solvers.workflows.repair import parse_failed, repair, repair_instance
from placement_helpers import instance, job, node


def _setup(spare_in_leaf: bool, pending=()):
    # leaves of three nodes; "train" (2 x 8 GPUs, replicas within one leaf) on n0 and n1
    held = {g: "train" for g in range(8)}
    nodes = [node("n0", allocated=held), node("n1", allocated=held),
             node("n2", allocated={} if spare_in_leaf else {g: "other" for g in range(8)}),
             node("n3"), node("n4"), node("n5")]
    inst = instance(nodes, list(pending), nodes_per_leaf=3)
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name="train", checkpoint_age_s=60,
                   job=job("train", replicas=2, dp_hop=2)), RunningJob(name="other")]})
    return inst.model_copy(update={"spec": spec})


def _checked(inst, failed, result):
    assert check(result.plan, repair_instance(inst, failed)) == []


def _nodes(plan, unit=None):
    return {g.node for p in plan.placements if unit in (None, p.unit) for g in p.gpus}


def test_repair_keeps_the_healthy_unit_in_place(solver):
    inst = _setup(spare_in_leaf=True)
    failed = [("n1", 3)]
    result = repair(inst, failed, solver=solver)
    _checked(inst, failed, result)
    (r,) = result.jobs
    assert r.placed and r.kept_units == ["tp/0"] and r.gpus_moved == 8
    assert r.lost_gpu_seconds == 16 * 60
    assert _nodes(result.plan, "tp/0") == {"n0"} and _nodes(result.plan, "tp/1") == {"n2"}
    (m,) = result.plan.migrations
    assert (m.job, m.why, m.gpus, m.gpus_moved, m.lost_gpu_seconds) == ("train", "repair", 16, 8, 960)


def test_repair_moves_the_whole_job_when_no_replacement_is_near(solver):
    inst = _setup(spare_in_leaf=False)
    failed = [("n1", None)]
    result = repair(inst, failed, solver=solver)
    _checked(inst, failed, result)
    (r,) = result.jobs
    assert r.placed and r.kept_units == [] and r.gpus_moved == 16
    assert _nodes(result.plan) <= {"n3", "n4", "n5"}


def test_replace_all_and_replace_everything_move_at_least_as_much():
    inst = _setup(spare_in_leaf=True)
    failed = [("n1", 3)]
    minimal = repair(inst, failed, solver="cpsat")
    everything = repair(inst, failed, solver="cpsat", strategy="replace-all")
    _checked(inst, failed, everything)
    scratch = repair(inst, failed, solver="cpsat", strategy="replace-everything")
    assert minimal.gpus_moved <= everything.gpus_moved
    assert minimal.gpus_moved <= scratch.gpus_moved


def test_hot_spares_are_kept_by_new_placements_and_used_by_repairs(solver):
    from hyperplace.solvers.driver import solve_placement

    # leaf n3-n5 is whole free: with 2 spares per leaf a 2 x 8 job has no leaf left
    inst = _setup(spare_in_leaf=True, pending=[job("new", replicas=2, dp_hop=2)])
    plain = solve_placement(inst, solver=solver, budget_s=10)
    assert "new" in plain.admitted
    plan = solve_placement(inst, solver=solver, budget_s=10, hot_spares=2)
    assert plan.hot_spares == 2
    assert "new" not in plan.admitted and check(plan, inst) == []
    one = solve_placement(inst, solver=solver, budget_s=10, hot_spares=1)
    assert "new" in one.admitted and check(one, inst) == []
    # the checker catches a plan that eats the spares
    eats = plain.model_copy(update={"hot_spares": 2})
    assert "hot-spares" in {v.code for v in check(eats, inst)}
    # a repair may use the spares: the failed unit's replacement goes to n2, a spare
    failed = [("n1", 3)]
    result = repair(inst.with_jobs([]), failed, solver=solver, hot_spares=2)
    assert result.plan.hot_spares == 2 and result.jobs[0].kept_units == ["tp/0"]
    _checked(inst.with_jobs([]), failed, result)


def test_checker_rejects_a_repair_of_a_healthy_job():
    inst = _setup(spare_in_leaf=True)
    result = repair(inst, [("n1", 3)], solver="cpsat")
    # on the instance before the failure the job is healthy: moving it was not needed
    codes = {v.code for v in check(result.plan, inst)}
    assert "migrate-unneeded" in codes or "migrate-lost-work" in codes


def test_repair_refuses_bad_input():
    inst = _setup(spare_in_leaf=True)
    with pytest.raises(ValueError, match="unknown node"):
        repair(inst, [("nx", 0)])
    with pytest.raises(ValueError, match="no GPU 9"):
        repair(inst, [("n1", 9)])
    with pytest.raises(ValueError, match="unknown repair strategy"):
        repair(inst, [("n1", 1)], strategy="pray")
    with pytest.raises(ValueError, match="neither NODE"):
        parse_failed("n1:x")
    assert parse_failed("n1:3, n2\n# c\nn4:0") == [("n1", 3), ("n2", None), ("n4", 0)]


def test_cli_repair(tmp_path, capsys):
    import yaml
    from cli_run import run_main

    inst = _setup(spare_in_leaf=True)
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(inst.to_doc()))
    out = tmp_path / "plan.yaml"
    code = run_main(["repair", "--instance", str(path), "--failed", "n1:3", "--budget", "10",
                     "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    from hyperplace.models.plan import PlacementPlan

    plan = PlacementPlan.model_validate(yaml.safe_load(out.read_text()))
    assert check(plan, repair_instance(inst, [("n1", 3)])) == []
    assert capsys.readouterr().out == ""  # -o FILE: the file and a line on stderr (#26)
    assert run_main(["repair", "--instance", str(path), "--failed", "n1:3", "--budget", "10"]) == 0
    table = capsys.readouterr().out
    assert "train" in table and "repair" in table
    assert run_main(["check", str(out), "--instance", str(path), "--failed", "n1:3"]) == 0
    assert run_main(["check", str(out), "--instance", str(path)]) == 1  # before the failure
    capsys.readouterr()
    for args in (["--failed", "n9:0"], ["--failed", "n1:12"], ["--failed", "n1:3",
                                                                "--hot-spares", "-1"]):
        code = run_main(["repair", "--instance", str(path), *args])
        err = capsys.readouterr().err
        assert code == 2 and len(err.strip().splitlines()) == 1, err
        assert "--failed" in err or "--hot-spares" in err, err


def test_cli_solve_hot_spares(tmp_path, capsys):
    import yaml
    from cli_run import run_main

    from hyperplace.models.plan import PlacementPlan

    inst = _setup(spare_in_leaf=True, pending=[job("new", replicas=2, dp_hop=2)])
    path, out = tmp_path / "inst.yaml", tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(inst.to_doc()))
    assert run_main(["solve", "--instance", str(path), "--hot-spares", "2", "--budget", "5",
                     "-o", str(out)]) == 0
    plan = PlacementPlan.model_validate(yaml.safe_load(out.read_text()))
    assert plan.hot_spares == 2 and "new" not in plan.admitted and check(plan, inst) == []
    capsys.readouterr()
    assert run_main(["solve", "--instance", str(path), "--hot-spares", "-1"]) == 2
    assert "--hot-spares" in capsys.readouterr().err


def test_repairs_are_decided_jointly(exact_solver):
    # leaf 0: n0, n1 (x, 2 x 8 within a leaf; fails on n1), n2 free; leaf 1: n3, n4 (y,
    # 2 x 8 anywhere; fails on n4), n5 busy; leaf 2: n6 free. x can be repaired only in part
    # and only on n2; y in part on n2 or n6, whole on no two free nodes. Both are repaired
    # only if y's unit goes to n6: one solve decides both (a repair of y first that took n2
    # would leave x broken).
    x = {g: "x" for g in range(8)}
    y = {g: "y" for g in range(8)}
    nodes = [node("n0", allocated=x), node("n1", allocated=x), node("n2"),
             node("n3", allocated=y), node("n4", allocated=y),
             node("n5", allocated={g: "other" for g in range(8)}), node("n6")]
    inst = instance(nodes, [], nodes_per_leaf=3)
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name="x", checkpoint_age_s=60, job=job("x", replicas=2, dp_hop=2)),
        RunningJob(name="y", checkpoint_age_s=60, job=job("y", replicas=2)),
        RunningJob(name="other")]})
    inst = inst.model_copy(update={"spec": spec})
    failed = [("n1", 0), ("n4", 0)]
    result = repair(inst, failed, solver=exact_solver)
    _checked(inst, failed, result)
    assert result.plan.status.value == "optimal"
    assert {r.job: (r.placed, r.kept_units) for r in result.jobs} == {
        "x": (True, ["tp/0"]), "y": (True, ["tp/0"])}
    assert _nodes(result.plan) == {"n0", "n2", "n3", "n6"}
    assert result.gpus_moved == 16


def test_repair_in_an_over_borrowed_cohort_is_valid(solver):
    # queue a (nominal 8) runs x on 16 GPUs while b lends nothing: the cohort is already
    # over-borrowed. A repair's new GPUs count against a's quota, so x cannot be repaired;
    # the round must still be solvable (it was infeasible for the exact backends, and
    # greedy's repair ignored quotas, which the checker refused).
    from test_sharing_quotas import _cq

    x = {g: "x" for g in range(8)}
    nodes = [node("n0", allocated=x), node("n1", allocated=x), node("n2")]
    inst = instance(nodes, [], nodes_per_leaf=3)
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name="x", queue="a", checkpoint_age_s=60, job=job("x", replicas=2, dp_hop=2))]})
    inst = inst.model_copy(update={"spec": spec}).with_queues(
        [_cq("a", 8, cohort="org"), _cq("b", 8, cohort="org", lend=0)])
    failed = [("n1", 0)]
    result = repair(inst, failed, solver=solver)
    _checked(inst, failed, result)
    assert result.plan.status.value != "fallback" or solver == "greedy", result.plan.message


def test_a_repair_plan_reports_the_gap_of_its_models_objectives(exact_solver):
    """The objectives a plan reports gaps for come from the model (#20): a repair round's
    model minimises the GPUs its repairs place (``repair_gpus_placed``), not migrations."""
    inst = _setup(spare_in_leaf=True)
    failed = [("n1", 3)]
    result = repair(inst, failed, solver=exact_solver)
    _checked(inst, failed, result)
    plan = result.plan
    assert plan.status.value == "optimal"
    assert plan.objective_gaps["repair_gpus_placed"] == 0.0
    assert "migrated_jobs" not in plan.objective_gaps
    assert set(plan.objective_gaps) <= set(plan.objective_terms)


@pytest.mark.parametrize(("spare_in_leaf", "failed", "placed"),
                         [(True, ("n1", 3), 8), (False, ("n1", None), 16)],
                         ids=["in-part", "whole"])
def test_every_solver_reports_the_repair_objective_and_no_migration_gap(
        solver, spare_in_leaf, failed, placed):
    """Review R4 (#20): a greedy repair plan (no model) reported gaps for migration's
    objectives, which a repair round's model does not have, and none for its
    ``repair_gpus_placed``. Now every solver reports the model's objective: the GPUs its
    repairs place (the failed unit's 8 when repaired in part, the job's 16 when moved
    whole; the exact backends' figure is the model's objective evaluated)."""
    inst = _setup(spare_in_leaf=spare_in_leaf)
    result = repair(inst, [failed], solver=solver)
    _checked(inst, [failed], result)
    plan = result.plan
    assert plan.objective_terms["repair_gpus_placed"] == placed
    assert "repair_gpus_placed" in plan.objective_gaps
    assert not any(k.startswith("migrated_") for k in plan.objective_gaps)
    assert set(plan.objective_gaps) <= set(plan.objective_terms)


def test_a_replace_everything_plan_is_named_a_repair():
    """Was ``<instance>-defrag`` (#20): the plan of every strategy is ``<instance>-repair``."""
    inst = _setup(spare_in_leaf=True)
    for strategy in ("minimal", "replace-all", "replace-everything"):
        plan = repair(inst, [("n1", 3)], strategy=strategy, solver="greedy").plan
        assert plan.metadata.name == f"{inst.name}-repair", strategy
