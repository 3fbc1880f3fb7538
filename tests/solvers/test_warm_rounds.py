"""Rounds are not cold starts: a warm round reuses the previous round's problem and plan.

A warm round must give what a cold solve of the same state gives (objective 1, status), its
reused views must equal freshly built ones, and placements carried over from the previous
round must be valid now (checker on every plan).
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from hyperplace.check import check
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.instances.generator import generate
from hyperplace.models import TrainingJob
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.workflows.session import PlacementSession, RoundDelta
from hyperplace.solvers.heuristics.warm import WarmStart, carried_placements

TYPES = ["H100-80", "A100-80"]


def _renamed(jobs: list[TrainingJob], prefix: str) -> list[TrainingJob]:
    return [j.model_copy(update={"metadata": j.metadata.model_copy(
        update={"name": f"{prefix}-{j.name}"})}) for j in jobs]


def _small_changes(session: PlacementSession, seed: int) -> RoundDelta:
    """A few arrivals, completions and failures, as the scale bench's warm round."""
    rng = random.Random(seed)
    arrivals = _renamed(rng.sample(generate(64, 12, TYPES, 0.0, seed + 100).jobs, 3), "new")
    nodes = [n.name for c in session.instance.clusters for n in c.nodes]
    running = sorted(session.running)
    return RoundDelta(arrivals=arrivals, completions=rng.sample(running, min(3, len(running))),
                      failures=[(rng.choice(nodes), 0), rng.choice(nodes)])


@pytest.mark.parametrize("seed", [1, 2])
def test_warm_round_equals_a_cold_solve(exact_solver, seed):
    session = PlacementSession(generate(256, 30, TYPES, 0.8, seed, size_scale=2),
                               solver=exact_solver)
    first = session.solve(budget_s=20)
    assert check(first, session.instance) == []
    session.commit(first)
    session.apply(_small_changes(session, seed))
    warm = session.solve(budget_s=20)
    cold = solve_placement(session.instance, solver=exact_solver, budget_s=20)
    assert check(warm, session.instance) == []
    assert check(cold, session.instance) == []
    assert cold.status.value == warm.status.value == "optimal"
    assert warm.objective == cold.objective
    assert session.warm.problem is not None and session.warm.problem.reused_nodes


def _node_facts(p: PlacementProblem) -> list[tuple]:
    return [(n.index, n.name, n.free, n.pair_gbps, n.uniform_gbps, n.attach_gbps, n.leaf,
             n.node.faulty, dict(n.node.allocated)) for n in p.nodes]


def _job_facts(p: PlacementProblem) -> list[tuple]:
    return [(jv.index, jv.name, jv.priority, jv.gpus, jv.hop_limit, jv.min_ib_gbps, jv.queue,
             [r.code for r in jv.impossible],
             [(uc.index, uc.job, uc.group, uc.size, uc.pieces, uc.hop_limit, uc.gpu_types,
               uc.min_memory_gb, uc.min_nvlink_gbps, uc.parts, len(uc.units))
              for uc in jv.classes]) for jv in p.jobs]


def test_reused_views_equal_fresh_ones():
    session = PlacementSession(generate(256, 30, TYPES, 0.8, 3, size_scale=2), solver="greedy")
    session.commit(session.solve(budget_s=5))
    session.apply(_small_changes(session, 3))
    session.solve(budget_s=5)
    warm = session.warm.problem
    fresh = PlacementProblem(session.instance)
    assert warm is not None
    assert len(warm.reused_nodes) == len(warm.nodes)  # same hardware: every view reused
    assert warm.reused_jobs  # jobs still pending from round 1
    assert not any(j.startswith("new-") for j in warm.reused_jobs)  # arrivals are new
    assert _node_facts(warm) == _node_facts(fresh)
    assert _job_facts(warm) == _job_facts(fresh)
    assert [[n.name for n in nc.nodes] for nc in warm.node_classes] == \
        [[n.name for n in nc.nodes] for nc in fresh.node_classes]
    assert warm.weights == fresh.weights
    assert warm.bundles == fresh.bundles


def test_a_changed_manifest_is_built_again():
    inst = generate(128, 10, TYPES, 0.5, 4)
    first = PlacementProblem(inst)
    bumped = [j.model_copy(update={"spec": j.spec.model_copy(update={"priority": 7})})
              if k == 0 else j for k, j in enumerate(inst.jobs)]
    again = PlacementProblem(inst.model_copy(update={"spec": inst.spec.model_copy(
        update={"jobs": bumped})}), previous=first)
    assert bumped[0].name not in again.reused_jobs
    assert again.jobs[0].priority == 7
    assert {j.name for j in bumped[1:]} <= again.reused_jobs


@pytest.mark.parametrize("solver", ["greedy", "cpsat", "milp"])
def test_a_round_solved_again_starts_from_the_previous_plan(solver):
    """No commit between rounds (a controller re-planning): the previous placements that
    still hold are carried over; a failure under one of them drops just that one."""
    session = PlacementSession(generate(256, 30, TYPES, 0.8, 5, size_scale=2), solver=solver)
    first = session.solve(budget_s=20)
    placed = {p.job: {g.node for g in p.gpus} for p in first.placements}
    assert placed
    # a job that is not running and not admitted cannot be hit; fail a node under an
    # admitted job instead (GPUs the plan wanted are now faulty)
    victim_job = sorted(placed)[0]
    victim_node = sorted(placed[victim_job])[0]
    session.apply(RoundDelta(failures=[victim_node]))
    second = session.solve(budget_s=20)
    assert check(second, session.instance) == []
    assert session.warm.carried > 0
    for p in second.placements:
        assert all(g.node != victim_node for g in p.gpus)
    cold = solve_placement(session.instance, solver=solver, budget_s=20)
    if solver != "greedy":
        assert second.objective == cold.objective
    else:  # the carried plan is taken only when it admits at least as much as greedy's
        assert (second.objective, len(second.jobs)) >= (cold.objective, len(cold.jobs))


def test_carried_placements_keep_only_what_still_holds():
    session = PlacementSession(generate(256, 30, TYPES, 0.8, 6, size_scale=2), solver="greedy")
    session.solve(budget_s=5)
    prev, before = session.warm.problem, session.warm.assignment
    assert prev is not None and before is not None and before.units
    # every GPU of the first admitted job's first node fails
    j = min(before.units)
    node = before.units[j][0].pieces[0][0]
    session.apply(RoundDelta(failures=[node]))
    now = WarmStart().build(session.instance, "performance", prev.params)
    assert not now.reused_nodes  # no previous problem given: nothing reused
    now = PlacementProblem(session.instance, previous=prev)
    kept = carried_placements(now, prev, before)
    names = {now.jobs[k].name for k in kept.units}
    hit = {prev.jobs[k].name for k, units in before.units.items()
           if any(n == node for u in units for n, _ in u.pieces)}
    assert names == {prev.jobs[k].name for k in before.units} - hit
    for k, units in kept.units.items():
        for u in units:
            assert now.classes[u.uclass].job == k
            for n, gpus in u.pieces:
                assert set(gpus) <= set(now.node_by_name[n].free)


def test_a_reparsed_instance_reuses_the_fabric_and_the_views():
    """The service parses a stored cluster afresh for every version: the fabric built for the
    previous round is carried over when nothing it is built from changed, so node and job
    views are reused; a different cluster under the same name gets nothing."""
    from hyperplace.instances.registry import instance_document
    from hyperplace.models import Instance
    from hyperplace.solvers.heuristics.warm import carry_fabric

    doc = instance_document(generate(256, 30, TYPES, 0.8, 7, size_scale=2))
    warm = WarmStart()
    first = Instance.model_validate(doc)
    plan = solve_placement(first, solver="cpsat", budget_s=20, warm=warm)
    again = Instance.model_validate(doc)
    assert carry_fabric(first, again) == 1
    assert again.clusters[0].network is first.clusters[0].network
    second = solve_placement(again, solver="cpsat", budget_s=20, warm=warm)
    assert warm.problem is not None
    assert len(warm.problem.reused_nodes) == len(warm.problem.nodes)
    assert len(warm.problem.reused_jobs) == len(warm.problem.jobs)
    assert check(second, again) == []
    assert second.objective == plan.objective and warm.carried == len(plan.jobs)
    other = Instance.model_validate(instance_document(generate(256, 30, TYPES, 0.8, 8)))
    assert carry_fabric(again, other) == 0 or \
        [n.name for n in other.clusters[0].nodes] == [n.name for n in again.clusters[0].nodes]
    third = solve_placement(other, solver="cpsat", budget_s=20, warm=warm)
    assert check(third, other) == []


def test_the_simulators_engine_rounds_are_warm():
    """The engine policy's rounds reuse the previous round's views (nodes whose GPU state did
    not change are the same objects from round to round); every round's plan is checked."""
    from hyperplace.instances.generator import small_job
    from hyperplace.models import Cluster, FabricGenerator, FabricSpec, Instance, InstanceSpec, Node
    from hyperplace.models.job import ObjectMeta
    from hyperplace.sim.jobs import SimJob
    from hyperplace.sim.loop import RoundLoop
    from hyperplace.sim.policies import make_policy

    nodes = [Node(name=f"h{i}", gpu_type="H100-80", gpu_count=8) for i in range(4)]
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2)
    inst = Instance(metadata=ObjectMeta(name="w"), spec=InstanceSpec(clusters=[
        Cluster(name="w", nodes=nodes, fabric=FabricSpec(generator=gen))]))
    policy = make_policy("engine-rounds", inst, budget_s=2)
    loop = RoundLoop(inst, policy, check=True)

    def submit(name: str, gpus: int, at: float) -> None:
        m = small_job(name, "m", gpus)
        loop.submit(SimJob(name=name, submit_s=at, work_s=1000, gpus=m.total_gpus, manifest=m,
                           checkpoint_s=100), at)

    for k in range(3):
        submit(f"a{k}", 4, 0.0)
    loop.run_round(0.0)
    submit("b", 8, 10.0)
    loop.run_round(10.0)
    warm = policy._warm
    assert warm.problem is not None
    assert len(warm.problem.reused_nodes) == len(warm.problem.nodes)
    untouched = [n for n in loop.state.nodes if not loop.state.owner[n]]
    first = loop.state.instance([]).clusters[0].node_by_name
    second = loop.state.instance([small_job("x", "m", 1)]).clusters[0].node_by_name
    assert all(first[n] is second[n] for n in untouched)


def test_a_warm_round_looks_again_only_at_the_nodes_that_changed(monkeypatch):
    """A round's instance copies afresh only the nodes whose GPU state changed since the
    last one (RoundState's touched nodes); the others are the last round's objects, not
    compared again. The warm round still equals a cold solve of the same state."""
    from hyperplace.solvers.workflows import session as session_mod

    session = PlacementSession(generate(256, 30, TYPES, 0.8, 3, size_scale=2), solver="milp")
    first = session.solve(budget_s=20)
    session.commit(first)
    before = {n.name: n for c in session.instance.clusters for n in c.nodes}  # after it
    looked: list[str] = []
    real = session_mod.RoundState._round_node

    def spy(self, base):
        looked.append(base.name)
        return real(self, base)

    monkeypatch.setattr(session_mod.RoundState, "_round_node", spy)
    job_name = sorted(session.running)[0]
    held = {node for node in session.running[job_name]}
    other = next(n for n in sorted(before) if n not in held)
    session.apply(RoundDelta(completions=[job_name], failures=[(other, 1)]))
    after = {n.name: n for c in session.instance.clusters for n in c.nodes}
    assert sorted(looked) == sorted(held | {other})
    assert all(after[n] is before[n] for n in before if n not in held | {other})
    assert all(after[n] is not before[n] for n in held | {other})
    assert 1 in after[other].faulty and not any(
        j == job_name for n in held for j in after[n].allocated.values())
    warm = session.solve(budget_s=20)
    cold = solve_placement(session.instance, solver="milp", budget_s=20)
    assert check(warm, session.instance) == [] and check(cold, session.instance) == []
    assert warm.objective == cold.objective and warm.status.value == "optimal"


def test_a_session_round_runs_with_the_cyclic_collector_paused(monkeypatch):
    """A session's round does not pay for Python's cyclic collector passing over the fleet's
    heap (about 1.2 s of CPU at 131,072 GPUs): it is paused inside the round and back on
    after it, also when the round fails."""
    import gc

    from hyperplace.solvers import driver

    seen: list[bool] = []
    real = driver.solve_placement

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(driver, "solve_placement", spy)
    session = PlacementSession(generate(64, 8, TYPES, 0.5, 1), solver="greedy")
    assert gc.isenabled()
    plan = session.solve(budget_s=5)
    assert seen == [False] and gc.isenabled()
    assert check(plan, session.instance) == []

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(driver, "solve_placement", boom)
    with pytest.raises(RuntimeError):
        session.solve(budget_s=5)
    assert gc.isenabled()


def test_a_state_without_usage_history_does_not_count_the_running_jobs(monkeypatch):
    """Without usage history, a delta that frees GPUs moves the history's time only: the
    GPUs each queue holds (a scan of every running job) are not counted."""
    from hyperplace.solvers.workflows import session as session_mod

    session = PlacementSession(generate(64, 8, TYPES, 0.5, 1), solver="greedy")
    session.commit(session.solve(budget_s=5))

    def scan(self):
        raise AssertionError("held_by_queue scanned the running jobs")

    monkeypatch.setattr(session_mod.RoundState, "held_by_queue", scan)
    done = sorted(session.running)[0]
    session.apply(RoundDelta(completions=[done]), now_s=100.0)
    assert done not in session.running and session.usage.time_s == 100.0
    with_history = PlacementSession(generate(64, 8, TYPES, 0.5, 1), solver="greedy",
                                    half_life_s=3600)
    with pytest.raises(AssertionError, match="scanned"):
        with_history.apply(RoundDelta(completions=[sorted(with_history.running)[0]]),
                           now_s=100.0)


def _greedy_tables(state) -> tuple:
    """Greedy's free-GPU index without its empty entries (a state that took and gave back
    keeps zero bit sets; what best fit reads is the same)."""
    index = {leaf: {t: {k: m for k, m in by.items() if m} for t, by in types.items()}
             for leaf, types in state.index.items()}
    index = {leaf: {t: by for t, by in types.items() if by} for leaf, types in index.items()}
    return ({leaf: types for leaf, types in index.items() if types},
            {k: dict(v) for k, v in state.leaves_with.items() if v},
            {k: m for k, m in state.masks.items() if m},
            {leaf: {t: c for t, c in v.items() if c} for leaf, v in state.leaf_free.items()
             if any(v.values())},
            state.free, state.slot, state.rank, state.rack_gpus)


def test_a_warm_round_indexes_again_only_the_nodes_that_changed(monkeypatch):
    """A warm round on the same nodes keeps the views of the nodes nothing touched (the very
    objects) and builds greedy's free-GPU index from the previous round's, over the nodes
    that changed: the same index, and the same greedy plan, as a cold build."""
    from hyperplace.solvers.heuristics import greedy

    session = PlacementSession(generate(512, 60, TYPES, 0.6, 8, size_scale=2), solver="greedy")
    session.commit(session.solve(budget_s=5))
    for seed in (8, 9):
        prev = session.warm.problem
        delta = _small_changes(session, seed)
        session.apply(dataclasses.replace(delta, arrivals=_renamed(delta.arrivals, f"r{seed}")))
        built: list[object] = []
        real_build = greedy.State._build
        monkeypatch.setattr(greedy.State, "_build",
                            lambda self, p: (built.append(p), real_build(self, p))[1])
        session.solve(budget_s=5)
        monkeypatch.undo()
        warm = session.warm.problem
        assert warm is not None and prev is not None
        carried = warm.carried_layout()
        assert carried is not None and carried[0] is prev
        moved = {new.name for _, new in carried[1]}
        # the nodes the round's state changed (the others are the previous round's objects)
        assert moved == {n.name for n in warm.nodes if n.node is not prev.node_by_name[n.name].node}
        assert 0 < len(moved) < len(warm.nodes)
        for old, new in zip(prev.nodes, warm.nodes):
            assert (new is old) == (new.name not in moved)
        assert warm not in built  # no index built from every view
        fresh = PlacementProblem(session.instance)
        assert _greedy_tables(greedy.State(warm)) == _greedy_tables(greedy.State(fresh))
        assert warm.free_gpus == fresh.free_gpus
        assert {k: v.name for k, v in warm.node_by_name.items()} == \
            {k: v.name for k, v in fresh.node_by_name.items()}
        assert [[n.name for n in ns] for ns in warm.nodes_by_leaf.values()] == \
            [[n.name for n in ns] for ns in fresh.nodes_by_leaf.values()]
        assert all(warm.node_by_name[n.name] is n for n in warm.nodes)
        assert _node_facts(warm) == _node_facts(fresh)
        ours, theirs = greedy.solve_greedy(warm), greedy.solve_greedy(fresh)
        assert ours.units == theirs.units and ours.units
        session.commit(session.last_plan)


def test_a_warm_round_on_other_nodes_builds_its_index_whole():
    """A node removed: the views do not keep their places, so nothing is carried."""
    inst = generate(256, 30, TYPES, 0.6, 4, size_scale=2)
    first = PlacementProblem(inst)
    cluster = inst.clusters[0]
    fewer = cluster.model_copy(update={"nodes": cluster.nodes[1:]})
    fewer.__dict__["network"] = cluster.network
    fewer.__dict__.pop("node_by_name", None)
    again = PlacementProblem(inst.model_copy(update={"spec": inst.spec.model_copy(
        update={"clusters": [fewer, *inst.clusters[1:]]})}), previous=first)
    assert again.carried_layout() is None
    assert not any(a is b for a, b in zip(first.nodes, again.nodes))
