"""Migration rounds that scale (#14): greedy's migration heuristic when greedy has already
filled the free GPUs with lower-priority jobs, the bench's moveable instances, and the
mover cap (a restricted round is never ``optimal``). Tiny rounds; every plan checked.

Scale itself is measured in ``bench/bench_scale.py --moveable``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from placement_helpers import instance, job, node

from hyperplace.check import check
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.models.migration import MigrationPolicy
from hyperplace.models.instance import RunningJob
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.workflows.defrag import solve_with_migration
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.heuristics.greedy import solve_greedy
from hyperplace.solvers.heuristics.greedy_migrate import greedy_migrate

ROOT = Path(__file__).resolve().parents[2]


def _filled_round():
    """leaf 0: n0 (a: 4), n1 (c: 4); leaf 1: n2 (b: 4), n3 free. ``big`` (high, 2 x 8 in a
    leaf) fits only when b moves and n3 is free; greedy puts the low-priority 8-GPU
    ``filler`` on n3 first (the only whole free node), after which 12 GPUs are free in all."""
    nodes = [node("n0", allocated={g: "a" for g in range(4)}),
             node("n1", allocated={g: "c" for g in range(4)}),
             node("n2", allocated={g: "b" for g in range(4)}), node("n3")]
    inst = instance(nodes, [job("big", replicas=2, dp_hop=2, priority="high"),
                            job("filler", tp=8, priority="low")])
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name=n, checkpoint_age_s=age, job=job(n, tp=4))
        for n, age in (("a", 600), ("b", 10), ("c", 600))]})
    return inst.model_copy(update={"spec": spec})


def test_greedy_migrates_for_a_job_whose_room_lower_priority_work_took():
    inst = _filled_round()
    p = PlacementProblem(inst, migration=MigrationPolicy())
    first = solve_greedy(p)
    assert {p.jobs[j].name for j in first.units} == {"filler"}  # what greedy alone does
    plan = solve_with_migration(inst, solver="greedy", budget_s=10)
    assert check(plan, inst) == []
    assert "big" in plan.admitted and "filler" not in plan.admitted
    assert [(m.job, m.for_job) for m in plan.migrations] == [("b", "big")]


def test_the_exact_backend_agrees_with_greedy_on_the_filled_round(exact_solver):
    inst = _filled_round()
    greedy = solve_with_migration(inst, solver="greedy", budget_s=10)
    exact = solve_with_migration(inst, solver=exact_solver, budget_s=10)
    assert check(exact, inst) == []
    assert exact.status == SolveStatus.OPTIMAL
    assert exact.objective == greedy.objective
    assert [m.job for m in exact.migrations] == ["b"]


def test_a_lifted_job_goes_back_where_it_was_when_nothing_else_fits():
    # big cannot fit even with every move (it needs 2 x 8 H100 and there are A100 nodes
    # only beside n3): filler keeps n3, nothing moves
    nodes = [node("n0", allocated={g: "a" for g in range(4)}, gpu_type="A100-80"),
             node("n1", gpu_type="A100-80"), node("n2", allocated={g: "b" for g in range(4)},
                                                  gpu_type="A100-80"), node("n3")]
    inst = _filled_round()
    inst = inst.model_copy(update={"spec": inst.spec.model_copy(update={
        "clusters": [inst.spec.clusters[0].model_copy(update={"nodes": nodes})],
        "running_jobs": [r for r in inst.spec.running_jobs if r.name != "c"]})})
    p = PlacementProblem(inst, migration=MigrationPolicy())
    before = solve_greedy(p)
    after = greedy_migrate(p, before)
    assert after.units == before.units and not after.stopped
    plan = solve_placement(inst, solver="greedy", budget_s=5, migration=MigrationPolicy())
    assert check(plan, inst) == [] and plan.admitted == ["filler"] and not plan.migrations
    reasons = next(x.reasons for x in plan.pending if x.job == "big")
    assert any(r.startswith("migration: moving some of the 2 running job(s) that may move "
                            "placed it in no plan found within the budget") for r in reasons)
    # an exact solve proves it (n3 is the only H100 node)
    exact = solve_placement(inst, solver="cpsat", budget_s=10, migration=MigrationPolicy())
    assert check(exact, inst) == [] and exact.status == SolveStatus.OPTIMAL
    reasons = next(x.reasons for x in exact.pending if x.job == "big")
    assert any(r.startswith("migration: no plan that moves some of the 2 running job(s)")
               for r in reasons)


def test_the_bench_moveable_instances_are_valid_rounds():
    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "bench_scale.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    from hyperplace.instances.generator import generate

    inst = bench.with_movers(generate(256, 20, bench.TYPES, 0.8, 3), 3)
    held = inst.running_jobs()
    assert set(inst.running_manifests) == set(held) and held
    assert sum(1 for j in inst.jobs if j.name.startswith("big-")) == 2
    plan = solve_placement(inst, solver="greedy", budget_s=5, migration=MigrationPolicy())
    assert check(plan, inst) == []


def test_a_mover_limit_keeps_the_cheapest_and_is_never_called_optimal(exact_solver):
    # movers a and c lose 600 s x 4 GPUs each, b 10 s x 4: a limit of one keeps b alone,
    # which suffices, but the round is a restriction: feasible, never optimal
    inst = _filled_round().with_jobs([job("big", replicas=2, dp_hop=2, priority="high")])
    p = PlacementProblem(inst, migration=MigrationPolicy(max_movers=1))
    assert [v.name for v in p.stoppable] == ["b"] and p.movers_left_out == 2
    assert "only the 1 running jobs losing least work may move" in p.restrictions()[0]
    plan = solve_placement(inst, solver=exact_solver, budget_s=10,
                           migration=MigrationPolicy(max_movers=1))
    assert check(plan, inst) == []
    assert plan.status == SolveStatus.FEASIBLE and "restricted model" in plan.message
    assert [m.job for m in plan.migrations] == ["b"]
    # the driver's own limit (at least MIN_MOVERS) leaves a small round whole
    whole = solve_placement(inst, solver=exact_solver, budget_s=10, migration=MigrationPolicy())
    assert check(whole, inst) == [] and whole.status == SolveStatus.OPTIMAL
    assert "restricted" not in whole.message


def _node_sets_from_scratch(p, jv, state, cands):
    """The node-by-node stop sets by their definition, built from scratch for one job:
    per domain of its hop limit, on each eligible node the cheapest candidates (level, lost
    work, name) until a piece of its largest size fits, then its cheapest nodes (highest
    level, GPUs, lost work, then name) for all its pieces; each set once, cheapest first."""
    from collections import defaultdict

    def cost(vs):
        return (max((v.level for v in vs), default=-float("inf")),
                sum(len(v.gpus) for v in vs), sum(v.lost for v in vs))

    size = max(max(uc.pieces) for uc in jv.classes)
    count = sum(len(uc.pieces) * uc.count for uc in jv.classes)
    on_node = defaultdict(list)
    for v in cands:
        for name in dict.fromkeys(n for n, _ in v.gpus):
            on_node[name].append(v)
    options = {}
    for leaves in p.leaves_by_domain(jv.hop_limit, True).values():
        costs = []
        for leaf in leaves:
            for n in p.nodes_by_leaf.get(leaf, []):
                if not p.node_eligible(jv, jv.classes[0], n) or n.node.gpu_count < size:
                    continue
                room, chosen = len(state.free[n.name]), []
                for v in sorted(on_node.get(n.name, []), key=lambda v: (v.level, v.lost, v.name)):
                    if room >= size:
                        break
                    chosen.append(v)
                    room += sum(1 for name, _ in v.gpus if name == n.name)
                if room >= size:
                    costs.append((cost(chosen), n.name, chosen))
        if len(costs) < count:
            continue
        costs.sort(key=lambda t: (t[0], t[1]))
        picked = {v.index: v for _, _, chosen in costs[:count] for v in chosen}
        if picked:
            options[frozenset(picked)] = (cost(list(picked.values())), tuple(picked.values()))
    return [combo for _, combo in sorted(options.values(), key=lambda o: o[0])]


@pytest.mark.parametrize("role", ["movers", "preemption candidates"])
def test_the_one_node_set_builder_is_its_definition(role):
    # greedy's preemption and migration build their node-by-node stop sets with one
    # builder (stop_sets.node_sets) from per-node lists made once per round: they must be
    # the sets the definition gives from scratch, for each job and the candidates it may use
    from hyperplace.instances.generator import generate
    from hyperplace.solvers.heuristics.greedy import state_with_plan
    from hyperplace.solvers.heuristics.stop_sets import StopIndex, node_sets

    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "bench_scale.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    inst = bench.with_movers(generate(512, 80, bench.TYPES, 0.85, 5), 5)
    if role == "movers":
        p = PlacementProblem(inst, migration=MigrationPolicy())
        cands = p.movers
    else:
        p = PlacementProblem(inst, preemption="lower-priority")
        cands = p.candidates
    assert cands
    a = solve_greedy(p)
    state, _ = state_with_plan(p, a)
    index = StopIndex(p, cands)
    stopped = {v.index for v in cands[::7]}  # some already stopped or moved
    compared = 0
    for jv in p.pending:
        if jv.impossible:
            continue
        usable = [v for v in cands if jv.index in v.allowed and v.index not in stopped]
        ours = node_sets(jv, state, index,
                         lambda v, j=jv.index: j in v.allowed and v.index not in stopped)
        theirs = _node_sets_from_scratch(p, jv, state, usable)
        assert [sorted(v.index for v in c) for c in ours] == \
            [sorted(v.index for v in c) for c in theirs], jv.name
        compared += bool(ours)
    assert compared >= 3
