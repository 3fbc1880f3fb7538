"""Preemption with the least lost work (#14), every backend, every plan through the checker.

Nodes of 8 H100, two per leaf; optima by hand in each test.
"""

from __future__ import annotations

import pytest

from hyperplace.check import check
from hyperplace.models.instance import RunningJob
from hyperplace.models.plan import Preemption
from hyperplace.solvers.preemption import solve_with_preemption
from placement_helpers import instance, job, node


def _with_running(inst, running: list[RunningJob]):
    spec = inst.spec.model_copy(update={"running_jobs": running})
    return inst.model_copy(update={"spec": spec})


def _solve(inst, solver, policy="lower-priority"):
    plan = solve_with_preemption(inst, preemption=policy, solver=solver, budget_s=20)
    assert check(plan, inst) == [], (solver, plan.preemptions)
    return plan


def test_the_victim_with_least_lost_work_is_chosen(solver):
    nodes = [node("n0", allocated={g: "a" for g in range(8)}),
             node("n1", allocated={g: "b" for g in range(8)})]
    inst = _with_running(instance(nodes, [job("hi", priority="high")]), [
        RunningJob(name="a", priority=1, checkpoint_age_s=100),
        RunningJob(name="b", priority=1, checkpoint_age_s=10)])
    plan = _solve(inst, solver)
    assert plan.admitted == ["hi"]
    assert [(p.job, p.lost_gpu_seconds, p.preemptor) for p in plan.preemptions] == [("b", 80, "hi")]
    assert plan.objective_terms["preempted_lost_gpu_seconds"] == 80


def test_one_victim_that_frees_the_node_beats_several_small_ones(solver):
    # n0: four 2-GPU jobs with 100 s of work each (800 GPU-s); n1: one 8-GPU job with 10 s (80)
    alloc = {g: f"s{g // 2}" for g in range(8)}
    nodes = [node("n0", allocated=alloc), node("n1", allocated={g: "big" for g in range(8)})]
    running = [RunningJob(name=f"s{i}", priority=1, checkpoint_age_s=100) for i in range(4)]
    inst = _with_running(instance(nodes, [job("hi", priority="high")]),
                         [*running, RunningJob(name="big", priority=1, checkpoint_age_s=10)])
    plan = _solve(inst, solver)
    assert [p.job for p in plan.preemptions] == ["big"]


def test_preemption_refused_when_the_gang_still_would_not_fit(solver):
    # every node: 4 GPUs of a low job, 4 of a high one; the pending job needs 8 on one node
    nodes = [node(f"n{i}", allocated={**{g: f"low{i}" for g in range(4)},
                                      **{g: f"top{i}" for g in range(4, 8)}}) for i in range(2)]
    running = [RunningJob(name=f"low{i}", priority=1) for i in range(2)] + \
              [RunningJob(name=f"top{i}", priority=4) for i in range(2)]
    inst = _with_running(instance(nodes, [job("hi", priority="high")]), running)
    plan = _solve(inst, solver)
    assert plan.preemptions == [] and plan.admitted == []


def test_never_preempt_for_a_job_that_outranks_nobody(solver):
    nodes = [node("n0", allocated={g: "a" for g in range(8)})]
    inst = _with_running(instance(nodes, [job("eq", priority="low")]),
                         [RunningJob(name="a", priority=1)])
    plan = _solve(inst, solver)
    assert plan.preemptions == [] and plan.admitted == []
    plan = _solve(inst, solver, policy="never")
    assert plan.preemptions == []


def test_reclaim_within_cohort_stops_a_borrower(solver):
    from test_sharing_quotas import _cq, _in_queue

    nodes = [node("n0", allocated={g: "b1" for g in range(8)}),
             node("n1", allocated={g: "b2" for g in range(8)})]
    inst = _with_running(instance(nodes, [_in_queue(job("mine", priority="low"), "a")]),
                         [RunningJob(name="b1", queue="b", priority=4, checkpoint_age_s=5),
                          RunningJob(name="b2", queue="b", priority=4, checkpoint_age_s=50)])
    inst = inst.with_queues([_cq("a", 8, cohort="org"), _cq("b", 8, cohort="org")])
    assert _solve(inst, solver).preemptions == []  # lower-priority: b's jobs outrank it
    plan = _solve(inst, solver, policy="reclaim-within-cohort")
    assert [(p.job, p.why) for p in plan.preemptions] == [("b1", "reclaim-within-cohort")]


def test_checker_refuses_an_unneeded_or_misstated_preemption():
    nodes = [node("n0", allocated={g: "a" for g in range(8)}), node("n1")]
    inst = _with_running(instance(nodes, [job("hi", priority="high")]),
                         [RunningJob(name="a", priority=1, checkpoint_age_s=3)])
    plan = solve_with_preemption(inst, preemption="lower-priority", solver="greedy", budget_s=5)
    assert plan.preemptions == [] and plan.admitted == ["hi"]  # n1 was free: nobody stopped
    bad = plan.model_copy(update={"preemptions": [
        Preemption(job="a", why="lower-priority", preemptor="hi", gpus=8, lost_gpu_seconds=1)]})
    codes = {v.code for v in check(bad, inst)}
    assert {"preempt-unneeded", "preempt-lost-work"} <= codes


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="unknown preemption policy"):
        solve_with_preemption(instance([node("n0")], []), preemption="sometimes")


def test_cli_solve_with_preemption_shows_the_victims(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from hyperplace.cli import app

    nodes = [node("n0", allocated={g: "a" for g in range(8)})]
    inst = _with_running(instance(nodes, [job("hi", priority="high")]),
                         [RunningJob(name="a", priority=1, checkpoint_age_s=7)])
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(inst.to_doc()))
    runner = CliRunner()
    out = runner.invoke(app, ["solve", "--instance", str(path), "--preemption", "lower-priority",
                              "--solver", "greedy", "--budget", "5"])
    assert out.exit_code == 0, out.output
    assert "preempted running jobs" in out.output and "56" in out.output
    plan_path = tmp_path / "plan.yaml"
    out = runner.invoke(app, ["solve", "--instance", str(path), "--preemption", "lower-priority",
                              "--solver", "greedy", "-o", str(plan_path)])
    assert out.exit_code == 0, out.output
    assert runner.invoke(app, ["check", str(plan_path), "--instance", str(path)]).exit_code == 0
    bad = runner.invoke(app, ["solve", "--instance", str(path), "--preemption", "sometimes"])
    assert bad.exit_code == 2
