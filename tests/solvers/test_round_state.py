"""The one round state (solvers/workflows/session.RoundState): every kind of delta, checked
before anything changes, with an injectable clock; the simulator, the session and the
service drive this class."""

from __future__ import annotations

import pytest
from placement_helpers import instance, job, node

from hyperplace.check import check
from hyperplace.errors import ConflictError, InputError
from hyperplace.solvers.workflows.session import RoundDelta, RoundState


def _state(**kw) -> RoundState:
    nodes = [node("n0", allocated={0: "r", 1: "r"}, faulty=[7]), node("n1"), node("n2"),
             node("n3")]
    return RoundState(instance(nodes, [job("a", tp=8), job("b", tp=4)], nodes_per_leaf=2), **kw)


def test_it_starts_from_the_instance_and_builds_a_valid_round_instance():
    s = _state()
    assert s.jobs == {"r": [("n0", 0), ("n0", 1)]} and s.unusable("n0") == {7}
    assert [j.name for j in s.pending()] == ["a", "b"]
    inst = s.instance()
    assert inst is s.instance()  # cached while nothing changes
    n0 = inst.clusters[0].node_by_name["n0"]
    assert n0.allocated == {0: "r", 1: "r"} and n0.faulty == [7]
    assert [j.name for j in inst.jobs] == ["a", "b"]


def test_each_kind_of_change_and_what_it_interrupts():
    s = _state()
    s.commit({"a": [("n1", g) for g in range(8)]})
    assert "a" in s.jobs and [j.name for j in s.pending()] == ["b"]
    hit = s.apply(RoundDelta(failures=[("n1", 3)], arrivals=[job("c", tp=2)]))
    assert hit == ["a"] and 3 in s.unusable("n1") and "a" not in s.jobs
    assert [j.name for j in s.pending()] == ["b", "a", "c"]  # a (started here) requeued
    hit = s.apply(RoundDelta(node_failures=["n0"]))
    assert hit == ["r"] and s.unusable("n0") == set(range(8))
    assert "r" not in {j.name for j in s.pending()}  # running at the start: not requeued
    s.apply(RoundDelta(node_repairs=["n0"], recoveries=[("n1", [3])]))
    assert s.unusable("n0") == {7} and s.unusable("n1") == set()  # its own fault stays
    sw = sorted(s.switches_of["n2"])[0]
    s.apply(RoundDelta(allocations=[("x", [("n2", 0)])], withdrawals=["c"]))
    assert s.jobs["x"] == [("n2", 0)] and [j.name for j in s.pending()] == ["b", "a"]
    assert s.apply(RoundDelta(switch_failures=[sw])) == ["x"]
    assert s.node_down("n2")
    s.apply(RoundDelta(switch_repairs=[sw]))
    s.commit({"b": [("n2", g) for g in range(4)]})
    assert s.apply(RoundDelta(interruptions=["b"], completions=[])) == ["b"]
    assert no_gpu_both_held_and_faulty(s)


def no_gpu_both_held_and_faulty(s: RoundState) -> bool:
    inst = s.instance()
    return all(not (set(n.allocated) & set(n.faulty)) for c in inst.clusters for n in c.nodes)


@pytest.mark.parametrize("delta, error, path", [
    (RoundDelta(completions=["zz"]), "not running", "completions[0]"),
    (RoundDelta(interruptions=["a"]), "not running", "interruptions[0]"),
    (RoundDelta(withdrawals=["zz"]), "not pending", "withdrawals[0]"),
    (RoundDelta(failures=["nope"]), "unknown node", "failures[0]"),
    (RoundDelta(failures=[("nope", [1])]), "unknown node", "failures[0].node"),
    (RoundDelta(failures=[("n1", 9)]), "no GPU 9", "failures[0].gpu"),
    (RoundDelta(recoveries=[("n1", [0, 8])]), "no GPU 8", "recoveries[0].gpus[1]"),
    (RoundDelta(node_failures=["x"]), "unknown node", "node_failures[0]"),
    (RoundDelta(switch_failures=["x"]), "unknown switch", "switch_failures[0]"),
    (RoundDelta(allocations=[("q", [("n0", 0)])]), "held by 'r'", "allocations[0].gpus[0]"),
    (RoundDelta(allocations=[("q", [("n0", 7)])]), "faulty", "allocations[0].gpus[0]"),
    (RoundDelta(allocations=[("q", [("zz", 7)])]), "unknown node", "allocations[0].gpus[0].node"),
    (RoundDelta(arrivals=[job("a")]), "already pending", "arrivals[0].metadata.name"),
    (RoundDelta(arrivals=[job("r")]), "is running", "arrivals[0].metadata.name"),
])
def test_a_bad_delta_names_the_field_and_changes_nothing(delta, error, path):
    s = _state()
    before = (dict(s.jobs), dict(s.queue), {n: set(g) for n, g in s.failed_gpus.items()})
    with pytest.raises(InputError, match=error) as err:
        s.apply(RoundDelta(arrivals=[job("new")], failures=[("n2", 0)]))  # a good one first
        s.apply(delta)
    assert err.value.path == path
    conflict = error in ("already pending",) or error.startswith("held")
    assert isinstance(err.value, ConflictError) == conflict
    after = (dict(s.jobs), dict(s.queue), {n: set(g) for n, g in s.failed_gpus.items()})
    assert after[0] == before[0] and "new" in after[1] and after[2]["n2"] == {0}


def test_completing_a_job_frees_it_for_a_new_arrival_of_the_same_name():
    s = _state()
    s.apply(RoundDelta(completions=["r"], arrivals=[job("r", tp=2)]))
    assert "r" not in s.jobs and [j.name for j in s.pending()] == ["a", "b", "r"]


def test_usage_accrues_at_the_injected_clock_before_gpus_change():
    t = [0.0]
    s = _state(half_life_s=3600.0, clock=lambda: t[0])
    s.accrue()
    t[0] = 3600.0
    s.apply(RoundDelta(arrivals=[job("c", tp=2)]))  # takes no GPUs: nothing accrues yet
    assert s.usage.time_s == 0.0
    s.apply(RoundDelta(completions=["r"]))  # r (default queue) held 2 GPUs for 1 h
    assert s.usage.time_s == 3600.0
    assert s.usage.gpu_hours["default"] == pytest.approx(2 * 0.5)


def test_a_session_plan_commits_through_the_state():
    from hyperplace.solvers.workflows.session import PlacementSession

    nodes = [node(f"n{i}") for i in range(2)]
    sess = PlacementSession(instance(nodes, [job("a", tp=8), job("b", tp=8)]), solver="greedy")
    plan = sess.solve(budget_s=2)
    assert check(plan, sess.instance) == []
    sess.commit(plan)
    assert set(sess.running) == {"a", "b"} and sess.state.jobs.keys() == {"a", "b"}


def test_the_round_instance_follows_the_manifests_not_only_their_names():
    # a policy may pass a job again under its name with another priority (aging): the round
    # must see that manifest, not the one cached for the same name
    s = _state()
    a = s.pending()[0]
    first = s.instance([a])
    aged = a.model_copy(update={"spec": a.spec.model_copy(update={"priority": a.priority + 7})})
    again = s.instance([aged])
    assert again is not first and again.jobs[0].priority == a.priority + 7
    assert s.instance([aged]) is again  # the same objects: cached


def test_the_default_clock_is_time_time_as_it_is_at_the_call(monkeypatch):
    """Review R21: RoundState's and PlacementSession's default clock is ``time.time`` looked
    up when a call needs the time, not bound at import (as 0820052 for Budget): a patched
    time.time reaches a session made before the patch."""
    import time

    from hyperplace.instances.generator import generate
    from hyperplace.solvers.workflows.session import PlacementSession

    session = PlacementSession(generate(64, 8, ["H100-80"], 0.5, 1), solver="greedy",
                               half_life_s=3600)
    monkeypatch.setattr(time, "time", lambda: 1234.0)
    assert session.clock() == 1234.0 and session.state.now() == 1234.0
    session.accrue()
    assert session.usage.time_s == 1234.0
