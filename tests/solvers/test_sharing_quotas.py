"""Queues with quotas and fair share inside the placement formulation (#14), every backend.

Optima by hand: nodes of 8 H100 on one leaf; jobs of one 8-GPU unit each.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hyperplace.check import check
from hyperplace.cli import app
from hyperplace.models.instance import RunningJob
from hyperplace.models.job import TrainingJob
from hyperplace.solvers.driver import solve_placement
from placement_helpers import instance, job, node


def _in_queue(j: TrainingJob, queue: str, *, volcano: bool = False) -> TrainingJob:
    label = "volcano.sh/queue-name" if volcano else "kueue.x-k8s.io/queue-name"
    meta = j.metadata.model_copy(update={"labels": {label: queue}})
    return j.model_copy(update={"metadata": meta})


def _cq(name: str, nominal: int, *, cohort: str | None = None, weight: float = 1,
        borrow: int | None = None, lend: int | None = None, flavor: str = "h100") -> dict:
    res: dict = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    if borrow is not None:
        res["borrowingLimit"] = borrow
    if lend is not None:
        res["lendingLimit"] = lend
    spec: dict = {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                      "flavors": [{"name": flavor, "resources": [res]}]}],
                  "fairSharing": {"weight": weight}}
    if cohort:
        spec["cohort"] = cohort
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
            "metadata": {"name": name}, "spec": spec}


def _solve(inst, solver):
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == [], solver
    return plan, {j.job for j in plan.jobs}


def test_a_queue_stays_within_its_nominal_quota(solver):
    jobs = [_in_queue(job(f"a{i}"), "a") for i in range(3)]
    inst = instance([node(f"n{i}") for i in range(4)], jobs).with_queues([_cq("a", 8)])
    plan, admitted = _solve(inst, solver)
    assert len(admitted) == 1  # 32 GPUs free, but the queue may hold 8
    reason = " ".join(plan.pending[0].reasons)
    assert "queue a: 8 of 8 H100 nominal in use" in reason and "no cohort" in reason


def test_running_jobs_count_against_the_quota(solver):
    nodes = [node("n0", allocated={g: "old" for g in range(8)}), node("n1"), node("n2")]
    base = instance(nodes, [_in_queue(job("new"), "a")])
    spec = base.spec.model_copy(update={"running_jobs": [RunningJob(name="old", queue="a")]})
    inst = base.model_copy(update={"spec": spec}).with_queues([_cq("a", 8)])
    _, admitted = _solve(inst, solver)
    assert admitted == set()


def test_borrowing_within_a_cohort_up_to_what_others_lend(solver):
    jobs = [_in_queue(job(f"a{i}"), "a") for i in range(4)]
    queues = [_cq("a", 8, cohort="org"), _cq("b", 16, cohort="org", lend=8)]
    inst = instance([node(f"n{i}") for i in range(4)], jobs).with_queues(queues)
    _, admitted = _solve(inst, solver)
    assert len(admitted) == 2  # 8 own + 8 lent by b (its lending limit)
    queues = [_cq("a", 8, cohort="org", borrow=0), _cq("b", 16, cohort="org")]
    _, admitted = _solve(instance([node(f"n{i}") for i in range(4)], jobs).with_queues(queues), solver)
    assert len(admitted) == 1  # borrowingLimit 0


def test_fair_share_by_weight_across_three_queues(solver):
    # 32 GPUs, 12 jobs of 8 in three queues weighted 2:1:1 -> shares 16/8/8 GPUs
    jobs = [_in_queue(job(f"{q}{i}"), q) for i in range(4) for q in "abc"]
    queues = [_cq("a", 32, weight=2), _cq("b", 32), _cq("c", 32)]
    inst = instance([node(f"n{i}") for i in range(4)], jobs).with_queues(queues)
    plan, admitted = _solve(inst, solver)
    per_queue = {q: sum(1 for j in admitted if j.startswith(q)) for q in "abc"}
    if plan.status.value == "fallback" or solver == "greedy":
        assert sum(per_queue.values()) == 4  # greedy keeps quotas, not fairness
    else:
        assert per_queue == {"a": 2, "b": 1, "c": 1}


def test_fair_share_across_two_queues_prefers_the_underserved_one(exact_solver):
    # queue a already runs 8 GPUs; 16 free; both queues ask for 16 more -> b gets 16
    nodes = [node("n0", allocated={g: "old" for g in range(8)}), node("n1"), node("n2")]
    jobs = [_in_queue(job(f"{q}{i}"), q) for q in "ab" for i in range(2)]
    base = instance(nodes, jobs)
    spec = base.spec.model_copy(update={"running_jobs": [RunningJob(name="old", queue="a")]})
    inst = base.model_copy(update={"spec": spec}).with_queues([_cq("a", 24), _cq("b", 24)])
    _, admitted = _solve(inst, exact_solver)
    assert admitted == {"b0", "b1"}


def test_volcano_queue_capability_caps_usage(solver):
    jobs = [_in_queue(job(f"v{i}"), "v", volcano=True) for i in range(3)]
    vq = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
          "metadata": {"name": "v"}, "spec": {"weight": 1, "capability": {"nvidia.com/gpu": 16}}}
    inst = instance([node(f"n{i}") for i in range(4)], jobs).with_queues([vq])
    _, admitted = _solve(inst, solver)
    assert len(admitted) == 2


def test_a_queue_without_a_quota_for_a_type_cannot_use_it(solver):
    jobs = [_in_queue(job("a0", accel=None, mem=0, nvlink=0), "a")]
    nodes = [node("h0"), node("x0", gpu_type="A100-80")]
    inst = instance(nodes, jobs).with_queues([_cq("a", 8, flavor="a100")])
    plan, admitted = _solve(inst, solver)
    assert admitted == {"a0"}
    assert {g.node for p in plan.placements for g in p.gpus} == {"x0"}


def test_checker_flags_a_plan_over_quota():
    jobs = [_in_queue(job(f"a{i}"), "a") for i in range(2)]
    free = instance([node("n0"), node("n1")], jobs)
    plan = solve_placement(free, solver="greedy", budget_s=5)  # no quotas: both admitted
    assert len(plan.jobs) == 2
    codes = {v.code for v in check(plan, free.with_queues([_cq("a", 8)]))}
    assert "quota" in codes


def test_cli_solve_with_queue_file_and_bad_ones(tmp_path: Path):
    runner = CliRunner()
    good = tmp_path / "queues.yaml"
    good.write_text(yaml.safe_dump_all([_cq("research", 8)]))
    out = runner.invoke(app, ["solve", "--queues", str(good), "--budget", "5"])
    assert out.exit_code == 0, out.output  # bundled jobs name no queue: the default queue
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump_all([_cq("research", -1)]))
    out = runner.invoke(app, ["solve", "--queues", str(bad)])
    assert out.exit_code != 0
    assert isinstance(out.exception, Exception)
    assert "nominalQuota" in str(out.exception) and "non-negative" in str(out.exception)


def test_a_job_naming_an_unknown_queue_is_refused():
    inst = instance([node("n0")], [_in_queue(job("x"), "nope")])
    with pytest.raises(ValueError, match="names queue 'nope', which is not declared"):
        inst.with_queues([_cq("a", 8)])


def test_a_job_larger_than_its_queue_may_ever_hold_says_so(tmp_path: Path):
    """A Volcano Queue's capability (16 GPUs, no guarantee) under a Volcano Job of 4 x 8
    GPUs: the reason said "0 of 0 * nominal in use, needs 32 more; cohort volcano has 0 to
    lend, borrowing limit 16" (new user); it now says the job can never be admitted there."""
    queue = {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
             "metadata": {"name": "research"},
             "spec": {"weight": 1, "capability": {"nvidia.com/gpu": 16}}}
    task = {"name": "worker", "replicas": 4, "template": {"spec": {
        "containers": [{"name": "t", "image": "x", "resources": {
            "limits": {"nvidia.com/gpu": 8}}}]}}}
    vcjob = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
             "metadata": {"name": "big"},
             "spec": {"minAvailable": 4, "queue": "research", "tasks": [task]}}
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(queue))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(vcjob))
    out = tmp_path / "plan.yaml"
    cluster = Path(__file__).parents[2] / "examples" / "my-cluster.yaml"
    res = CliRunner().invoke(app, ["solve", "--cluster", str(cluster), "--jobs",
                              str(tmp_path / "job.yaml"), "--queues", str(tmp_path / "q.yaml"),
                              "--budget", "5", "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(out.read_text())
    (pending,) = doc["pending"]
    assert pending["reasons"][0].startswith("queue research may never hold more than 16 "
                                            "GPUs (nominal 0 + borrowing limit 16")
    assert "the job asks 32: it cannot be admitted in this queue" in pending["reasons"][0]
    (forecast,) = [f for f in doc["forecasts"] if f["job"] == "big"]
    assert forecast["text"] == "not planned: " + pending["reasons"][0]
    assert forecast.get("earliestS") is None


def test_a_queue_covering_no_gpu_gets_no_forecast_start(tmp_path: Path):
    """A Kueue ClusterQueue that covers only cpu and memory (as Kueue's TAS samples are
    written) never admits a GPU job: the reason said so, but the forecast planned it "in
    ~5m, 4 H100-80" (the over-time schedule has no quotas). It now plans no start."""
    docs = [{"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
             "metadata": {"name": "tas-flavor"}, "spec": {}},
            {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
             "metadata": {"name": "cq"}, "spec": {"namespaceSelector": {}, "resourceGroups": [
                 {"coveredResources": ["cpu", "memory"], "flavors": [{"name": "tas-flavor",
                  "resources": [{"name": "cpu", "nominalQuota": 100},
                                {"name": "memory", "nominalQuota": "100Gi"}]}]}]}},
            {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
             "metadata": {"name": "lq"}, "spec": {"clusterQueue": "cq"}}]
    pod = {"containers": [{"name": "t", "image": "x",
                           "resources": {"limits": {"nvidia.com/gpu": 4}}}],
           "restartPolicy": "Never"}
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "gpu-job", "labels": {"kueue.x-k8s.io/queue-name": "lq"}},
           "spec": {"parallelism": 1, "completions": 1, "template": {"spec": pod}}}
    (tmp_path / "q.yaml").write_text(yaml.safe_dump_all(docs))
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(job))
    out = tmp_path / "plan.yaml"
    cluster = Path(__file__).parents[2] / "examples" / "my-cluster.yaml"
    res = CliRunner().invoke(app, ["solve", "--cluster", str(cluster), "--jobs",
                                   str(tmp_path / "job.yaml"), "--queues",
                                   str(tmp_path / "q.yaml"), "--budget", "5", "-o", str(out)])
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(out.read_text())
    (pending,) = doc["pending"]
    assert pending["reasons"][0].startswith("queue cq: no quota covers ")
    (forecast,) = doc["forecasts"]
    assert forecast["text"] == "not planned: " + pending["reasons"][0]


def _pending_and_forecast(inst):
    from hyperplace.sim.forecast import forecast_plan

    plan, _ = _solve(inst, "greedy")
    (pending,) = plan.pending
    (fc,) = [f for f in forecast_plan(inst, plan) if f.job == pending.job]
    return pending, fc


def test_a_queue_covering_one_of_the_jobs_types_may_admit_it_later():
    """Queue a covers H100 (its 8 held by a running job) and no A100; the job may use
    either. It waits for the H100 quota, and is planned when the running job ends: the
    reason said 'no quota covers A100-80/H100-80 GPUs' (the first type's key decided) and
    the forecast planned no start."""
    nodes = [node("n0", allocated={g: "old" for g in range(8)}), node("a0", "A100-80")]
    base = instance(nodes, [_in_queue(job("x", accel=None, nvlink=600), "a")])
    spec = base.spec.model_copy(update={"running_jobs": [
        RunningJob(name="old", queue="a", remaining_s=600)]})
    inst = base.model_copy(update={"spec": spec}).with_queues([_cq("a", 8)])
    pending, fc = _pending_and_forecast(inst)
    assert pending.reasons[0].startswith("queue a: 8 of 8 H100 nominal in use, needs 8 more")
    assert not pending.inadmissible
    assert fc.earliest_s is not None and not fc.text.startswith("not planned")


def test_a_queue_without_a_cohort_never_holds_more_than_its_nominal_quota():
    """16 GPUs in a ClusterQueue of nominal 8 with no cohort (it cannot borrow): never
    admitted, and so not planned (the reason said what was in use now, and the forecast
    planned a start the queue would never allow). The plan says so as a field, which the
    forecast reads, not the reason's words."""
    inst = instance([node(f"n{i}") for i in range(4)],
                    [_in_queue(job("x", replicas=2), "a")]).with_queues([_cq("a", 8)])
    pending, fc = _pending_and_forecast(inst)
    assert pending.inadmissible and pending.reasons[0] == (
        "queue a may never hold more than 8 H100 GPUs (nominal 8, and no cohort to borrow "
        "from) and the job asks 16: it cannot be admitted in this queue")
    assert fc.earliest_s is None and fc.text == "not planned: " + pending.reasons[0]


def test_the_forecast_reads_the_plans_inadmissible_field_not_the_reasons_words():
    """Reworded reasons change nothing: the forecast plans no start for an inadmissible
    job whatever its reason says, and plans one for a job that is not, even when its reason
    reads like a queue that never admits it (it matched the reason's words before)."""
    from hyperplace.sim.forecast import forecast_plan

    inst = instance([node(f"n{i}") for i in range(4)],
                    [_in_queue(job("x", replicas=2), "a")]).with_queues([_cq("a", 8)])
    plan, _ = _solve(inst, "greedy")
    (pending,) = plan.pending
    for flag, why in ((True, "anything"), (False, "queue a: no quota covers H100-80 GPUs")):
        entry = pending.model_copy(update={"reasons": [why], "inadmissible": flag})
        (fc,) = [f for f in forecast_plan(inst, plan.model_copy(update={"pending": [entry]}))
                 if f.job == "x"]
        assert (fc.text == f"not planned: {why}") == flag and (fc.earliest_s is None) == flag
