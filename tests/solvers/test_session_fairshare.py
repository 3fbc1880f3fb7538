"""Usage history in a PlacementSession (#14): rounds driven by the caller remember which queue
got the GPUs, with Slurm's decay (the same QueueUsage rule as the simulator), so a queue that
starves with a per-round fair share only is served within two rounds; the decay matches a
hand computation; running jobs keep their queue across commits. Every plan goes through the
checker."""

from __future__ import annotations

import math

import pytest
from queue_helpers import cluster_queue, one_node, queued

from hyperplace.check import check
from hyperplace.models import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.solvers.workflows.session import PlacementSession, RoundDelta


def _rounds(half_life_s: float | None, rounds: int = 8) -> dict[str, int]:
    """One 8-GPU node, queues a and b of equal weight: a offers twelve 4-GPU jobs, b two 8-GPU
    jobs (the simulator test's workload). Every 60 s a round is solved and committed and the
    jobs it started finish before the next round. Returns the round each job started in."""
    base = one_node([cluster_queue("a"), cluster_queue("b")])
    jobs = [queued(base, f"a{i:02d}", 4, "a") for i in range(12)]
    jobs += [queued(base, f"b{i}", 8, "b") for i in range(2)]
    session = PlacementSession(base.with_jobs(jobs), solver="cpsat", half_life_s=half_life_s)
    started: dict[str, int] = {}
    for r in range(rounds):
        now = 60.0 * r
        if r:
            session.apply(RoundDelta(completions=sorted(session.running)), now_s=now)
        plan = session.solve(budget_s=5, now_s=now)
        assert check(plan, session.instance) == []
        session.commit(plan, now_s=now)
        for job in plan.admitted:
            started[job] = r
        running = {rj.name: rj.queue for rj in session.instance.spec.running_jobs}
        assert running == {j: j[0] for j in plan.admitted}  # each under its own queue
    return started


def test_a_queue_starved_per_round_is_served_within_two_rounds_with_history():
    plain = _rounds(None)
    # per round only: a's twelve jobs go two by two, b waits six rounds
    assert min(plain["b0"], plain["b1"]) == 6
    history = _rounds(3600.0)
    assert min(history["b0"], history["b1"]) <= 1  # the first round with history serves b
    assert max(history["b0"], history["b1"]) <= 3  # and b's second job does not wait for a


def test_session_usage_follows_the_decay_by_hand():
    # 8 GPUs of queue a from t=0 to t=1 h, half-life 1 h, from a history of 10 GPU-h:
    # U = (10 + 8 * 1) * 2^-1 = 9 at 1 h; half an hour later, idle: 9 * 2^-0.5
    inst = one_node([cluster_queue("a"), cluster_queue("b")])
    doc = inst.with_jobs([queued(inst, "a0", 8, "a")]).to_doc()
    doc["spec"]["queueUsage"] = {"a": 10.0}
    session = PlacementSession(Instance.model_validate(doc), solver="cpsat", half_life_s=3600.0,
                               clock=lambda: 0.0)
    plan = session.solve(budget_s=5)  # at clock() = 0
    assert check(plan, session.instance) == [] and plan.admitted == ["a0"]
    assert session.instance.spec.queue_usage == {"a": 10.0}
    session.commit(plan)
    session.apply(RoundDelta(completions=["a0"], arrivals=[queued(inst, "b0", 8, "b")]),
                  now_s=3600.0)
    assert session.usage.gpu_hours["a"] == pytest.approx((10 + 8) * 0.5)
    plan = session.solve(budget_s=5, now_s=5400.0)
    assert check(plan, session.instance) == [] and plan.admitted == ["b0"]
    assert session.instance.spec.queue_usage == pytest.approx({"a": 9 / math.sqrt(2)})
    session.commit(plan, now_s=5400.0)
    # b holds 8 GPUs for 1 h more: b = 8 * 1/2, a = 9 * 2^-0.5 * 1/2
    assert session.accrue(9000.0) == pytest.approx({"a": 9 / math.sqrt(2) / 2, "b": 4.0})
    # an earlier time accrues nothing and decays nothing
    assert session.accrue(100.0) == pytest.approx({"a": 9 / math.sqrt(2) / 2, "b": 4.0})


def test_committed_priorities_outside_the_running_range_are_clamped():
    inst = one_node([cluster_queue("a"), cluster_queue("b")])
    jobs = [queued(inst, "hi", 4, "a"), queued(inst, "lo", 4, "b")]
    docs = [j.to_doc() for j in jobs]
    docs[0]["spec"]["priority"], docs[1]["spec"]["priority"] = 10**8, -3
    session = PlacementSession(inst.with_jobs([TrainingJob.model_validate(d) for d in docs]),
                               solver="greedy", half_life_s=60.0, clock=lambda: 0.0)
    session.commit(session.solve(budget_s=2))
    assert {(r.name, r.queue, r.priority) for r in session.instance.spec.running_jobs} == {
        ("hi", "a", 1_000_000), ("lo", "b", 0)}
    Instance.model_validate(session.instance.to_doc())  # still a valid instance


def test_without_a_half_life_the_instance_usage_is_left_as_given():
    inst = one_node([cluster_queue("a"), cluster_queue("b")])
    doc = inst.with_jobs([queued(inst, "a0", 8, "a")]).to_doc()
    doc["spec"]["queueUsage"] = {"b": 3.0}
    session = PlacementSession(Instance.model_validate(doc), solver="greedy")
    plan = session.solve(budget_s=2)
    session.commit(plan)
    session.apply(RoundDelta(completions=["a0"]))
    assert session.instance.spec.queue_usage == {"b": 3.0} and session.accrue() == {}
    assert session.instance.spec.running_jobs == []  # a0 left the list when it completed
