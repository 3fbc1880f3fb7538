"""Warm rounds: a PlacementSession carries one cluster across rounds; every plan passes the
checker against the session's current instance, and the session's state follows the plan and
the changes applied to it."""

from __future__ import annotations

import pytest
from placement_helpers import instance, job, node

from hyperplace.check import check
from hyperplace.errors import InputError
from hyperplace.solvers.workflows.session import PlacementSession, RoundDelta


def _session(solver: str) -> PlacementSession:
    nodes = [node(f"n{i}") for i in range(4)]
    jobs = [job("a", tp=8, replicas=2), job("b", tp=8), job("c", tp=8, priority="low"),
            job("d", tp=8, priority="low")]
    return PlacementSession(instance(nodes, jobs, nodes_per_leaf=2), solver=solver)


@pytest.mark.parametrize("solver", ["greedy", "cpsat", "milp", "auto"])
def test_rounds_follow_commits_and_changes(solver):
    s = _session(solver)
    fabric = s.instance.clusters[0].network
    plan = s.solve(budget_s=10)
    assert check(plan, s.instance) == []
    assert {j.job for j in plan.jobs} == {"a", "b", "c"}  # 4 nodes: a (2), b, then one low
    s.commit(plan)
    assert {j.name for j in s.pending} == {"d"}
    assert set(s.running) == {"a", "b", "c"}
    free = sum(n.free_count for n in s.instance.clusters[0].nodes)
    assert free == 0
    # b finishes, a GPU under a fails, e arrives
    a_node = sorted(s.running["a"])[0]
    interrupted = s.apply(RoundDelta(completions=["b"], failures=[(a_node, 0)],
                                     arrivals=[job("e", tp=4, priority="high")]))
    assert interrupted == ["a"]
    assert {j.name for j in s.pending} == {"d", "a", "e"}  # a is queued again, at the end
    assert set(s.running) == {"c"}
    assert s.instance.clusters[0].network is fabric  # the fabric is built once
    assert 0 in s.instance.clusters[0].node_by_name[a_node].faulty
    plan = s.solve(budget_s=10)
    assert check(plan, s.instance) == []
    assert "e" in {j.job for j in plan.jobs}
    for p in plan.placements:
        assert all((g.node, g.gpu) != (a_node, 0) for g in p.gpus)
    s.commit(plan)
    s.apply(RoundDelta(recoveries=[a_node]))
    assert s.instance.clusters[0].node_by_name[a_node].faulty == []


def test_bad_changes_are_refused_with_a_path():
    s = _session("greedy")
    with pytest.raises(InputError, match="not running"):
        s.apply(RoundDelta(completions=["nope"]))
    with pytest.raises(InputError, match="unknown node"):
        s.apply(RoundDelta(failures=["nope"]))
    with pytest.raises(InputError, match="no GPU 9"):
        s.apply(RoundDelta(failures=[("n0", 9)]))
    with pytest.raises(InputError, match="already pending"):
        s.apply(RoundDelta(arrivals=[job("a")]))
    with pytest.raises(InputError, match="not pending"):
        s.apply(RoundDelta(withdrawals=["zz"]))
    plan = s.solve(budget_s=5)
    s.commit(plan)
    with pytest.raises(InputError, match="not in the pending queue"):
        s.commit(plan)  # the same plan twice


def test_withdrawn_jobs_leave_the_queue():
    s = _session("greedy")
    s.apply(RoundDelta(withdrawals=["d", "c"]))
    assert [j.name for j in s.pending] == ["a", "b"]
    plan = s.solve(budget_s=5)
    assert check(plan, s.instance) == []


def test_a_session_rounds_budget_covers_building_its_instance(monkeypatch):
    """The round's budget runs from the call: the instance the state builds for it (0.9 s at
    131,072 GPUs) is inside the budget, so solve_placement gets the call's deadline (a round
    at 131k ended 2.3 s past a 10 s budget before), and an earlier deadline given still wins."""
    import time

    import hyperplace.solvers.driver as driver

    s = _session("greedy")
    seen = []
    real = driver.solve_placement

    def spy(instance, **kw):
        seen.append((kw["deadline"], kw["budget_s"]))
        return real(instance, **kw)

    monkeypatch.setattr(driver, "solve_placement", spy)
    t0 = time.perf_counter()
    plan = s.solve(budget_s=10)
    t1 = time.perf_counter()
    assert check(plan, s.instance) == []
    deadline, budget = seen[-1]  # the call's time + 10 s
    assert deadline is not None and t0 + 10 <= deadline <= t1 + 10 and budget == 10
    soon = time.perf_counter() + 2
    s.solve(budget_s=10, deadline=soon)
    deadline, budget = seen[-1]
    assert deadline == soon and budget <= 2
