"""Who may stop whom under Kueue's policies, with two queues (#14), every backend, every
plan through the checker.

``lower-priority`` is Kueue's ``withinClusterQueue: LowerPriority``: a job stops only
lower-priority jobs of its own queue; across queues only ``reclaim-within-cohort`` stops,
and only jobs of a borrowing queue (kueue ``classifyPreemptionVariant``,
``pkg/scheduler/preemption/classical/hierarchical_preemption.go``). One node of 8 H100.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from hyperplace.check import check
from hyperplace.models.instance import RunningJob
from hyperplace.models.plan import Preemption
from hyperplace.models.preemption_policy import StopRule
from hyperplace.solvers.workflows.preemption import solve_with_preemption
from placement_helpers import instance, job, node
from test_sharing_preemption import _rounds_with_queues
from test_sharing_quotas import _cq, _in_queue


def _round(pending_queue: str, nominal_b: int, *, low: tuple[str, int] | None = None):
    """Running r (queue b, priority 1, 8 GPUs on n0); pending hi (priority 5, 8 GPUs) in
    ``pending_queue``; queues a (nominal 8) and b (``nominal_b``) in cohort org. ``low``:
    one more pending job (queue, priority) of 8 GPUs."""
    jobs = [_in_queue(job("hi", priority=5), pending_queue)]
    if low is not None:
        jobs.append(_in_queue(job("k", priority=low[1]), low[0]))
    inst = instance([node("n0", allocated={g: "r" for g in range(8)})], jobs)
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name="r", queue="b", priority=1, checkpoint_age_s=10)]})
    inst = inst.model_copy(update={"spec": spec})
    return inst.with_queues([_cq("a", 8, cohort="org"), _cq("b", nominal_b, cohort="org")])


def _solve(inst, solver, policy):
    plan = solve_with_preemption(inst, preemption=policy, solver=solver, budget_s=20)
    assert check(plan, inst) == [], (solver, policy, plan.preemptions)
    return plan


def test_lower_priority_stops_only_jobs_of_its_own_queue(solver):
    # hi (queue a) outranks r (queue b), but lower-priority stays within a ClusterQueue
    plan = _solve(_round("a", 8), solver, "lower-priority")
    assert plan.preemptions == [] and plan.admitted == []
    (pending,) = plan.pending
    assert any(r.startswith("preemption: 1 lower-priority running job(s) are in other queues")
               for r in pending.reasons), pending.reasons
    # in r's own queue it may
    plan = _solve(_round("b", 8), solver, "lower-priority")
    assert [(p.job, p.why) for p in plan.preemptions] == [("r", "lower-priority")]
    assert plan.admitted == ["hi"]


def test_reclaim_crosses_queues_only_to_a_borrower(solver):
    # b within its nominal 8: nobody of another queue may stop r, whatever the priorities
    plan = _solve(_round("a", 8), solver, "reclaim-within-cohort")
    assert plan.preemptions == [] and plan.admitted == []
    # b borrows (nominal 0, r holds 8): a reclaims, a within its nominal 8 afterwards
    plan = _solve(_round("a", 0), solver, "reclaim-within-cohort")
    assert [(p.job, p.why, p.preemptor) for p in plan.preemptions] == \
        [("r", "reclaim-within-cohort", "hi")]
    # ... and under lower-priority the borrower stays (no reclaim across queues)
    plan = _solve(_round("a", 0), solver, "lower-priority")
    assert plan.preemptions == [] and plan.admitted == []


def test_a_stop_within_a_queue_is_no_inversion_for_another_queue(solver):
    # k (queue b, priority 2) stops r (b, 1); hi (queue a, priority 5) may not stop r under
    # lower-priority, so k on r's GPUs is no priority inversion (the checker's first fit
    # does not hand hi the GPUs of a job only b may stop); reclaiming, hi wins them
    inst = _round("a", 0, low=("b", 2))
    plan = _solve(inst, solver, "lower-priority")
    assert [p.job for p in plan.preemptions] == ["r"] and plan.admitted == ["k"]
    plan = _solve(inst, solver, "reclaim-within-cohort")
    assert [(p.job, p.why) for p in plan.preemptions] == [("r", "reclaim-within-cohort")]
    assert plan.admitted == ["hi"]


def test_checker_refuses_a_stop_across_queues_under_lower_priority():
    own = _round("b", 8)
    plan = _solve(own, "greedy", "lower-priority")
    assert [p.job for p in plan.preemptions] == ["r"]
    # the same plan for a round where hi is in queue a: it stopped another queue's job
    codes = {v.code for v in check(plan, _round("a", 8))}
    assert "preempt-reuse" in codes
    # under reclaim, with b within nominal, still no
    relabelled = plan.model_copy(update={
        "preemption_policy": "reclaim-within-cohort",
        "preemptions": [Preemption(job="r", why="reclaim-within-cohort", preemptor="hi",
                                   gpus=8, lost_gpu_seconds=80)]})
    assert "preempt-reuse" in {v.code for v in check(relabelled, _round("a", 8))}
    # with b borrowing, that reclaim is allowed; said as lower-priority it is refused
    assert check(relabelled, _round("a", 0)) == []
    assert "preempt-reuse" in {v.code for v in check(plan, _round("a", 0))}


def test_without_queues_every_job_is_in_one_queue(solver):
    inst = instance([node("n0", allocated={g: "r" for g in range(8)})], [job("hi", priority=5)])
    spec = inst.spec.model_copy(update={"running_jobs": [RunningJob(name="r", priority=1)]})
    inst = inst.model_copy(update={"spec": spec})
    assert StopRule.of(inst, "lower-priority").why("default", 5, "default", 1) == "lower-priority"
    assert StopRule.of(inst, "lower-priority").why("default", 1, "default", 1) is None
    assert StopRule.of(inst, "never").why("default", 5, "default", 1) is None
    plan = _solve(inst, solver, "lower-priority")
    assert [(p.job, p.why) for p in plan.preemptions] == [("r", "lower-priority")]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=_rounds_with_queues())
def test_random_lower_priority_rounds_with_queues_stop_only_within_a_queue(inst):
    info = inst.running_job_info
    queue_of = {j.name: inst.queue_of(j) for j in inst.jobs}
    greedy = _solve(inst, "greedy", "lower-priority")
    exact = _solve(inst, "cpsat", "lower-priority")
    assert exact.objective >= greedy.objective - 1e-9
    for plan in (greedy, exact):
        for p in plan.preemptions:
            assert p.why == "lower-priority"
            assert p.preemptor == "" or queue_of[p.preemptor] == info[p.job].queue


def _quota_round():
    """n0 held by r (queue b, nominal 0: all 8 borrowed), n1 free; hi (queue a, nominal 8,
    priority 5) is held back only by the cohort's quota (b borrows a's 8); bb (queue b,
    priority 2, 2 x 8 GPUs) may stop r but does not fit beside hi."""
    jobs = [_in_queue(job("hi", priority=5), "a"),
            _in_queue(job("bb", priority=2, replicas=2), "b")]
    inst = instance([node("n0", allocated={g: "r" for g in range(8)}), node("n1")], jobs)
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name="r", queue="b", priority=1, checkpoint_age_s=10)]})
    inst = inst.model_copy(update={"spec": spec})
    return inst.with_queues([_cq("a", 8, cohort="org"), _cq("b", 0, cohort="org")])


def test_a_stop_does_not_free_quota_for_another_queue(solver):
    # lower-priority: only bb may stop r; stopping r so that hi fits the cohort's quota
    # would be a stop across queues through the quota (the model's stopper row)
    inst = _quota_round()
    plan = _solve(inst, solver, "lower-priority")
    assert plan.preemptions == [] and plan.admitted == []
    plan = _solve(inst, solver, "reclaim-within-cohort")  # a reclaims its nominal 8
    assert [(p.job, p.why, p.preemptor) for p in plan.preemptions] == \
        [("r", "reclaim-within-cohort", "hi")] and plan.admitted == ["hi"]


def test_checker_refuses_a_stop_for_another_queues_quota():
    inst = _quota_round()
    plan = _solve(inst, "greedy", "reclaim-within-cohort")
    on_n1 = [u.model_copy(update={"gpus": [g.model_copy(update={"node": "n1"}) for g in u.gpus]})
             for u in plan.placements]
    jobs = [j.model_copy(update={"node_names": ["n1"]}) for j in plan.jobs]
    reclaim = plan.model_copy(update={"placements": on_n1, "jobs": jobs})
    assert check(reclaim, inst) == []  # hi on n1, r stopped for a's quota: a reclaim
    said = reclaim.model_copy(update={
        "preemption_policy": "lower-priority",
        "preemptions": [p.model_copy(update={"why": "lower-priority", "preemptor": ""})
                        for p in plan.preemptions]})
    assert "preempt-stopper" in {v.code for v in check(said, inst)}


def test_peer_rules_preempt_within_the_preemptors_queue():
    # Kueue's withinClusterQueue and Volcano's preempt action both stay within a queue
    from hyperplace.baselines.preemption import kueue_style, volcano_style

    for rule in (kueue_style, volcano_style):
        other = _round("a", 8)
        assert rule(other, other.jobs[0]).victims == []
        own = _round("b", 8)
        peer = rule(own, own.jobs[0])
        assert peer.victims == ["r"] and peer.fits


def test_reclaim_leaves_the_borrower_its_guarantee(solver):
    """Queue b (nominal 8) runs v1 and v2 (8 GPUs each: 8 borrowed); queue a (nominal 16)
    has two 8-GPU jobs. Kueue reclaims v1 (b is then within nominal) and no more
    (``candidateIsValid``); stopping v2 too would take b's guaranteed 8."""
    jobs = [_in_queue(job("x1", priority=1), "a"), _in_queue(job("x2", priority=1), "a")]
    inst = instance([node("n0", allocated={g: "v1" for g in range(8)}),
                     node("n1", allocated={g: "v2" for g in range(8)})], jobs)
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name="v1", queue="b", priority=3, checkpoint_age_s=10),
        RunningJob(name="v2", queue="b", priority=3, checkpoint_age_s=20)]})
    inst = inst.model_copy(update={"spec": spec})
    inst = inst.with_queues([_cq("a", 16, cohort="org"), _cq("b", 8, cohort="org")])
    plan = _solve(inst, solver, "reclaim-within-cohort")
    assert [(p.job, p.why) for p in plan.preemptions] == [("v1", "reclaim-within-cohort")]
    assert plan.admitted == ["x1"]
    # both reclaimed: refused
    other = [u.model_copy(update={"job": "x2", "unit": u.unit.replace("x1", "x2"),
                                  "gpus": [g.model_copy(update={"node": "n1"}) for g in u.gpus]})
             for u in plan.placements]
    both = plan.model_copy(update={
        "placements": [*plan.placements, *other], "objective": None, "bound": None,
        "gap": None, "objective_terms": {}, "jobs": [],
        "pending": [pe for pe in plan.pending if pe.job != "x2"],
        "preemptions": [*plan.preemptions, Preemption(
            job="v2", why="reclaim-within-cohort", preemptor="x2", gpus=8,
            lost_gpu_seconds=160)]})
    assert any(v.code == "preempt-reclaim" and "below its nominal quota" in v.message
               for v in check(both, inst))


def test_quota_freed_by_another_queues_stops_is_no_inversion(solver):
    from pathlib import Path

    import yaml

    from hyperplace.models.instance import Instance

    doc = yaml.safe_load((Path(__file__).parents[1] / "data" / "stop-quota-priority-inversion.yaml")
                         .read_text())
    inst = Instance.model_validate(doc)
    for policy in ("lower-priority", "reclaim-within-cohort"):
        _solve(inst, solver, policy)
