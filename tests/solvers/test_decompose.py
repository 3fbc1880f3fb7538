"""A round of several clusters solved cluster by cluster (hyperplace.solvers.decompose): its
plan passes the checker and equals the monolithic optimum on objective 1 where both can be
solved, its budget is split by measured need, and its labels stay honest. Also the two
budget rules around a plan (#25): explanations stop at their deadline, so they never push a
plan past its budget, and the reserve for writing follows its documented rule."""

from __future__ import annotations

import pytest

from hyperplace.check import check
from hyperplace.deadline import command_deadline, write_reserve_s
from hyperplace.formulations.explain import explain
from hyperplace.formulations.mapping import Assignment
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.instances.generator import generate, generate_federation
from hyperplace.solvers.decompose import JOB_S, NODE_S, Part, might_fit, solve_decomposed
from hyperplace.solvers.driver import solve_placement


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_decomposed_plan_is_valid_and_equals_the_monolithic_optimum(seed):
    inst = generate_federation(3, 128, 40, None, 0.6, seed, size_scale=2)
    mono = solve_placement(inst, solver="milp", budget_s=60)
    assert mono.status.value == "optimal" and check(mono, inst) == []
    parts: list[Part] = []
    dec = solve_decomposed(inst, budget_s=20, parts_out=parts, always=True)
    assert check(dec, inst) == []
    assert dec.objective == mono.objective
    assert len(parts) >= 2 and dec.solver.startswith("decomposed")
    # the whole round's bound: valid against the optimum; never optimal on a part's proof
    assert dec.bound is not None and dec.bound >= mono.objective
    assert dec.status.value in ("feasible", "fallback")
    assert dec.objective_terms["admitted_jobs"] == len(dec.jobs)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_merged_bound_is_the_aggregated_one_when_every_cluster_is_built(seed):
    """Every cluster built: the whole round's aggregated bound from the parts' node views,
    valid (never below the proven optimum), never above the routing LP's; on seed 4 the
    routing LP's bound is 88 % above the optimum and the aggregated one within 0.01 %."""
    from hyperplace.solvers.decompose import route

    from hyperplace.solvers import decompose

    inst = generate_federation(3, 128, 40, None, 0.6, seed, size_scale=2)
    mono = solve_placement(inst, solver="milp", budget_s=60)
    assert mono.status.value == "optimal"
    # the aggregated bound as computed, before the merge clamps the plan's bound up to its
    # objective (a bound below the optimum would be hidden there)
    seen: list[float | None] = []
    real = decompose._Run.aggregated_bound

    def spy(self, *args, **kwargs):
        out = real(self, *args, **kwargs)
        seen.append(out[0])
        return out

    with pytest.MonkeyPatch.context() as m:
        m.setattr(decompose._Run, "aggregated_bound", spy)
        dec = solve_decomposed(inst, budget_s=20, always=True)
    assert check(dec, inst) == []
    routing = route(inst).bound
    assert routing is not None and dec.bound is not None
    assert len(seen) == 1 and seen[0] is not None
    assert mono.objective <= seen[0] <= routing
    assert mono.objective <= dec.bound <= routing
    assert "aggregated model's LP relaxation over every cluster" in dec.message
    if seed == 4:
        assert routing > 1.5 * mono.objective and dec.bound <= 1.0001 * mono.objective
        assert "objective 1 is bounded by the aggregated model's" in dec.message


def test_a_cluster_without_a_part_is_built_for_the_bound_and_without_time_the_routing_lps(
        monkeypatch):
    """Clusters with free GPUs and no built part (the budget served one part) are built for
    the aggregated bound when it fits (valid against the proven optimum); its estimate not
    fitting: the routing LP's bound, and the plan says why."""
    from hyperplace.solvers import decompose

    inst = generate_federation(3, 128, 60, None, 0.5, 2)
    real = decompose._Run.solve_parts
    with monkeypatch.context() as m:  # the first part only
        m.setattr(decompose._Run, "solve_parts",
                  lambda self, todo, budget, tail: real(self, todo[:1], budget, tail))
        parts: list[Part] = []
        plan = decompose.solve_decomposed(inst, budget_s=10, always=True, parts_out=parts)
    assert check(plan, inst) == [] and any(part.status == "unbuilt" for part in parts)
    mono = solve_placement(inst, solver="milp", budget_s=60)
    assert mono.status.value == "optimal"
    assert plan.bound is not None and plan.bound >= mono.objective
    assert "aggregated model's LP relaxation over every cluster" in plan.message
    monkeypatch.setattr(decompose, "AGG_S_PER_COLUMN_SET", 1.0)  # 32 kinds x 3 clusters
    plan = decompose.solve_decomposed(inst, budget_s=10, always=True)
    assert check(plan, inst) == []
    assert "no aggregated bound: its estimated" in plan.message
    assert "routing LP" in plan.message and plan.bound >= mono.objective


def test_each_job_goes_to_one_cluster_and_unplaced_jobs_are_explained():
    inst = generate_federation(2, 64, 60, None, 0.8, 7, size_scale=2)
    parts: list[Part] = []
    dec = solve_decomposed(inst, budget_s=10, parts_out=parts, always=True)
    assert check(dec, inst) == []
    sent = [j for part in parts for j in part.jobs]
    assert len(sent) == len(set(sent))  # one cluster per job
    assert {pj.job for pj in dec.pending} | set(dec.admitted) == {j.name for j in inst.jobs}
    assert all(pj.reasons for pj in dec.pending)
    for job in dec.jobs:  # every admitted job sits in one cluster
        assert len({n.split("-")[0] for n in job.node_names}) == 1


def test_the_budget_is_split_by_measured_need():
    """Parts are served in order of routed weighted demand per second of need; when their
    needs fit in what is left, each part gets what is left in proportion to its need among
    the parts not yet served (estimated from what the parts before it measurably took)."""
    inst = generate_federation(3, 256, 90, None, 0.5, 3, size_scale=2)
    parts: list[Part] = []
    budget = 6.0
    plan = solve_decomposed(inst, budget_s=budget, parts_out=parts, always=True)
    assert check(plan, inst) == []
    assert len(parts) == 3 and all(part.status != "unbuilt" for part in parts)
    assert all(part.est_s > 0 and part.need_s > 0 and part.build_s > 0 for part in parts)
    order = [part.value / (NODE_S * part.nodes + JOB_S * len(part.jobs)) for part in parts]
    assert order == sorted(order, reverse=True)
    for part in parts:
        assert part.rest_s <= part.left_s <= budget
        assert part.budget_s == pytest.approx(part.left_s * part.est_s / part.rest_s)
    # each job is routed to one cluster, and the plan covers every job
    routed = [j for part in parts for j in part.jobs]
    assert sorted(routed) == list(range(len(inst.jobs)))


def test_one_cluster_is_the_driver_round():
    inst = generate(256, 30, None, 0.6, 1, size_scale=2)
    whole = solve_placement(inst, budget_s=10)
    dec = solve_decomposed(inst, budget_s=10, always=True)
    assert check(dec, inst) == []
    assert dec.objective == whole.objective and not dec.solver.startswith("decomposed")


def test_explanations_stop_at_their_deadline(monkeypatch):
    """Explanations run in what is left of the budget; past their deadline they stop, and
    the jobs not reached get a generic reason (analysis: skipped), so the plan is built in
    time. A clock the test moves: every per-job probe takes 20 ms, the deadline is 0.1 s
    away, so at most one probe ends past it."""
    import hyperplace.formulations.explain as explain_module

    inst = generate(512, 200, None, 0.3, 5)
    p = PlacementProblem(inst)
    now = [0.0]
    probes = []

    def slow_probe(jv):
        probes.append(jv.name)
        now[0] += 0.02
        return True

    monkeypatch.setattr(explain_module.time, "perf_counter", lambda: now[0])
    skipped: set[int] = set()
    reasons = explain(p, Assignment(), deadline=0.1, fits_alone=slow_probe, skipped=skipped)
    monkeypatch.undo()
    assert now[0] <= 0.1 + 0.02  # the deadline and one probe
    assert skipped and len(probes) < len(reasons)
    assert all(reasons[j] for j in skipped)


def test_the_write_reserve_follows_its_documented_rule():
    """deadline.write_reserve_s: 0.05 s plus 5 us per pending job and per free GPU (JSON); the
    solve's deadline is the command's start plus the budget minus that reserve."""
    inst = generate(1024, 300, None, 0.4, 2)
    free = sum(n.free_count for c in inst.clusters for n in c.nodes)
    assert write_reserve_s(inst) == pytest.approx(0.05 + 5e-6 * (free + len(inst.jobs)))
    assert command_deadline(10.0, write_reserve_s(inst), since=100.0) == \
        pytest.approx(100.0 + 10.0 - write_reserve_s(inst))
    bigger = generate(2048, 600, None, 0.4, 2)
    assert write_reserve_s(bigger) > write_reserve_s(inst)
    # YAML's Python representer: 1.2e-4 s an item (a 131,072-GPU plan took 4.9 s of CPU)
    assert write_reserve_s(inst, "yaml") == pytest.approx(0.05 + 1.2e-4 * (free + len(inst.jobs)))
    assert write_reserve_s(inst, "table") == write_reserve_s(inst, "json")


def test_without_the_lp_jobs_go_by_free_room(monkeypatch):
    """When the routing LP does not solve (here: HiGHS reports a time limit), each job goes,
    highest priority first, to the first cluster with as many free GPUs of its types left:
    the plan is still the whole round's, valid and explained, and bounded by the demand
    bound; the high-priority jobs sit in the first cluster while it has room."""
    import hyperplace.solvers.decompose as decompose

    monkeypatch.setattr(decompose.SparseLp, "maximise",
                        lambda self, limit: (None, "kTimeLimit", None))
    inst = generate_federation(2, 128, 30, None, 0.5, 2, size_scale=2)
    plan = solve_decomposed(inst, budget_s=10, always=True)
    assert check(plan, inst) == []
    assert "by free room" in plan.message and plan.jobs
    assert plan.bound is not None and plan.bound >= plan.objective
    from hyperplace.solvers.decompose import route

    found = route(inst)
    top = max(j.priority for j in inst.jobs)
    first = inst.clusters[0].name
    high = [j for j, job in enumerate(inst.jobs) if job.priority == top]
    assert high and all(found.assignment[j] == first for j in high)


def test_the_cli_solves_a_federation_round_decomposed(tmp_path, capsys):
    from cli_run import run_main

    from hyperplace.instances.registry import render_instance
    from hyperplace.io import load_documents, parse
    from hyperplace.models.plan import PlacementPlan

    from hyperplace.solvers.decompose import WHOLE_FRACTION, whole_round_s

    # large enough that its whole problem takes more than half of a 1 s budget
    inst = generate_federation(8, 1024, 1000, None, 0.5, 4, size_scale=2)
    assert whole_round_s(inst) > WHOLE_FRACTION * 1.0
    path = tmp_path / "fed.json"
    path.write_text(render_instance(inst, "json"))
    out = tmp_path / "plan.json"
    assert run_main(["solve", "-i", str(path), "--decompose", "--budget", "1",
                     "--format", "json", "-o", str(out)]) == 0
    plan = parse(PlacementPlan, load_documents(str(out))[0])
    assert plan.solver.startswith("decomposed") and check(plan, inst) == []
    capsys.readouterr()
    assert run_main(["solve", "-i", str(path), "--decompose", "--preemption",
                     "lower-priority"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--decompose" in err[0]


def test_a_round_not_decomposed_says_so():
    """--decompose on one cluster is the driver's round, and the plan says why."""
    inst = generate(256, 12, None, 0.6, 1, size_scale=2)
    plan = solve_decomposed(inst, budget_s=5, always=True)
    assert check(plan, inst) == []
    assert "not decomposed (one cluster): solved as one round" in plan.message


def test_a_round_out_of_time_while_routing_is_still_a_valid_plan():
    """Budget gone while the jobs are routed (every 1,000 jobs the routing looks at the
    clock): the jobs not reached are pending with a reason, no part is built, and the plan
    is the whole round's, valid, with no bound (the jobs not read are not known)."""
    inst = generate_federation(2, 64, 1200, None, 0.5, 3)
    plan = solve_decomposed(inst, budget_s=0.0, always=True)
    assert check(plan, inst) == []
    assert not plan.jobs and len(plan.pending) == len(inst.jobs)
    assert any("while jobs were routed" in r for pj in plan.pending for r in pj.reasons)
    assert plan.status.value == "fallback" and plan.bound is None and plan.gap is None


def test_greedy_does_not_search_again_for_a_shape_that_just_failed(monkeypatch):
    """In one pass, once a job's search failed, a job of the same shape and priority meets
    the same free GPUs until something is placed: it is not searched again (the plan is the
    same; a full cluster's queue costs one search per shape, not per job)."""
    import hyperplace.solvers.heuristics.greedy as greedy

    inst = generate(256, 60, None, 0.95, 4, size_scale=2)
    p = PlacementProblem(inst)
    calls: list[str] = []
    real = greedy.try_place_job

    def counting(problem, jv, state, trials):
        calls.append(jv.name)
        return real(problem, jv, state, trials)

    monkeypatch.setattr(greedy, "try_place_job", counting)
    order = sorted(p.pending, key=lambda j: (-j.priority, j.index))
    params = greedy.GreedyParams()
    a = greedy._one_pass(p, order, params)
    shapes = {(p.job_shape(jv), jv.priority) for jv in p.pending}
    assert len(calls) < len(order) and len(shapes) < len(order)
    # what a search per job finds: the same placements
    monkeypatch.setattr(greedy, "try_place_job", real)
    state, ledger = greedy.State(p), greedy.QuotaLedger(p)
    every = {jv.index: greedy._place_within_quota(p, jv, state, ledger,
                                                         params.max_domain_trials)
             for jv in order}
    assert {j for j, u in every.items() if u is not None} == set(a.units)


def test_a_round_whose_whole_problem_is_cheap_is_solved_whole_and_says_so():
    """The reviewer's case (4 x 1,024 GPUs, 400 jobs, budget 1 s): decomposed, each part got a
    share of the budget and paid its own start-up, and the plan admitted none of the jobs the
    whole round's solve admits. A round whose whole problem takes at most half the budget is
    solved whole; a larger one is still decomposed."""
    from hyperplace.solvers.decompose import WHOLE_FRACTION, whole_round_s

    inst = generate_federation(4, 1024, 400, None, 0.6, 2, size_scale=2)
    assert whole_round_s(inst) <= WHOLE_FRACTION * 1.0
    plan = solve_decomposed(inst, solver="greedy", budget_s=1.0)
    mono = solve_placement(inst, solver="greedy", budget_s=1.0)
    assert "not decomposed (the whole round's problem takes about" in plan.message
    assert not plan.solver.startswith("decomposed") and check(plan, inst) == []
    assert [j.job for j in plan.jobs] == [j.job for j in mono.jobs]
    # the same round with a budget below twice its whole cost is decomposed
    small = 0.9 * whole_round_s(inst) / WHOLE_FRACTION
    assert solve_decomposed(inst, solver="greedy", budget_s=small).solver.startswith(
        "decomposed")


def test_the_slot_screen_is_a_necessary_condition():
    """might_fit: GPUs enough in all, and u-GPU units need nodes with u free GPUs each (a
    node of k free holds k // u of them); a unit larger than a node is judged by GPUs only."""
    three_each = [{3: 10}]  # 10 nodes with 3 free GPUs: 30 GPUs, no 4-GPU slot
    assert might_fit((1, 1), 2, three_each, 8)
    assert might_fit((2,) * 10, 20, three_each, 8)
    assert not might_fit((2,) * 11, 22, three_each, 8)  # 11 two-GPU units, 10 slots
    assert not might_fit((4,), 4, three_each, 8)
    assert not might_fit((8,), 8, [{7: 100}, {3: 50}], 8)  # no whole free node of either type
    assert might_fit((8, 4, 4), 16, [{8: 1}, {4: 2}], 8)
    assert not might_fit((8, 8), 16, [{8: 1}, {4: 2}], 8)
    assert might_fit((16,), 16, three_each, 8)  # spans nodes: 30 GPUs may hold it
    assert might_fit((), 16, three_each, 8)  # units that may span nodes: GPUs only
    assert not might_fit((), 31, three_each, 8)


def test_routing_sends_high_priority_to_the_first_clusters_and_keeps_the_lps_amounts():
    """_by_priority exchanges jobs of the same units between the clusters the LP chose:
    the per-cluster counts of every unit shape stay, and within each shape no cluster holds
    a job of lower priority than a later cluster does."""
    from hyperplace.solvers.decompose import _by_priority

    info = {j: (prio, 1, frozenset({"H100-80"})) for j, prio in
            enumerate([1, 3, 2, 3, 1, 2, 3, 1])}
    ukey = ((1, "", 80.0),)
    other = ((2, "", 80.0),)
    info[8] = (1, 2, frozenset({"H100-80"}))
    assignment = {0: "a", 1: "c", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c", 7: "b", 8: "c"}
    before = dict(assignment)
    _by_priority(assignment, {ukey: list(range(8)), other: [8]}, info, ["a", "b", "c"])
    count = {c: sum(1 for j in range(8) if assignment[j] == c) for c in "abc"}
    assert count == {c: sum(1 for j in range(8) if before[j] == c) for c in "abc"}
    assert assignment[8] == "c"  # alone in its shape: where the LP put it
    held = {c: [info[j][0] for j in range(8) if assignment[j] == c] for c in "abc"}
    assert min(held["a"]) >= max(held["b"]) and min(held["b"]) >= max(held["c"])
    assert {assignment[j] for j in (1, 3)} == {"a"}  # two seats in a, both priority 3


def test_a_plan_admitting_nothing_says_so_instead_of_a_gap_of_its_bound(monkeypatch):
    """Nothing admitted (no part solved): objective 0, the routing's bound kept, no gap
    (bound / 1 would be the bound itself, 7e13 at 1M GPUs), the message says both."""
    from hyperplace.solvers import decompose

    monkeypatch.setattr(decompose._Run, "solve_parts", lambda self, todo, budget, tail: None)
    inst = generate_federation(2, 64, 40, None, 0.5, 3)
    plan = decompose.solve_decomposed(inst, budget_s=10, always=True)
    assert check(plan, inst) == []
    assert not plan.jobs and plan.objective == 0 and plan.bound and plan.bound > 0
    assert plan.gap is None and plan.objective_gaps["admitted_priority_demand"] is None
    assert f"no gap: nothing admitted (objective 0 against a bound of {plan.bound:,.0f})" \
        in plan.message


def test_a_part_that_does_not_fit_whole_is_cut_not_skipped(monkeypatch):
    """When the parts' needs exceed what is left, the first part (most weighted demand per
    second of need) still gets built with greedy's first pass alone, cut where its plan can
    be written; its plan is a fallback that says why, and the merged plan passes the checker
    with what it placed."""
    from hyperplace.solvers import decompose

    monkeypatch.setattr(decompose._Run, "estimate", lambda self, part: 1000.0)
    inst = generate_federation(3, 128, 60, None, 0.5, 2)
    decompose.route(inst)  # the LP backend imported: the routing's time is the machine's
    parts: list[Part] = []
    plan = decompose.solve_decomposed(inst, budget_s=10, always=True, parts_out=parts)
    assert check(plan, inst) == []
    first = parts[0]
    assert first.status == "fallback" and first.budget_s < 10
    assert first.solver == "greedy (one pass: the budget went to the other clusters)"
    assert first.admitted > 0 and plan.jobs


def test_a_routing_cut_short_still_solves_the_priorities_it_read(monkeypatch):
    """Jobs are read highest priority first; when the routing's share of the budget ends
    before the last job, the parts still place what was read, and no admitted job is of
    lower priority than a job not read (those might fit anywhere): valid, no bound."""
    from hyperplace.solvers import decompose

    monkeypatch.setattr(decompose, "ROUTE_SHARE", 0.0)  # stop at the first clock check
    inst = generate_federation(2, 256, 3000, None, 0.5, 4)
    plan = decompose.solve_decomposed(inst, budget_s=20, always=True)
    assert check(plan, inst) == []
    prio = {j.name: j.priority for j in inst.jobs}
    unread = [pj.job for pj in plan.pending
              if any("while jobs were routed" in r for r in pj.reasons)]
    assert len(unread) == 3000 - 999 and plan.bound is None and plan.gap is None
    assert plan.jobs and min(prio[j.job] for j in plan.jobs) >= max(prio[j] for j in unread)
    read = sorted(inst.jobs, key=lambda j: -j.priority)[:999]
    assert {j.job for j in plan.jobs} <= {j.name for j in read}


def test_spec_gpus_is_total_gpus():
    """The routing's GPU count of a job not read (for the whole round's weights) equals
    what its units add up to, on generated jobs of every shape and on the bundled ones."""
    from hyperplace.instances.registry import list_instances, load_instance
    from hyperplace.solvers.decompose import spec_gpus

    jobs = list(generate_federation(2, 1024, 600, None, 0.5, 5).jobs)
    for info in list_instances():
        jobs += list(load_instance(info.name).jobs)
    assert len({(len(j.spec.resource_groups), j.spec.replica_count) for j in jobs}) > 3
    assert all(spec_gpus(j) == j.total_gpus for j in jobs)


def test_the_slowdown_follows_the_rounds_share_of_the_cpu():
    """A round whose process got a fifth of a core since it started (10 s of wall, 2 s of
    CPU) judges what is left at 5x the idle figures, whatever its builds read earlier: the
    round's budget's slowdown (one definition, Budget.slowdown); its first
    slowdown_after_s says nothing."""
    from hyperplace.solvers import decompose
    from hyperplace.solvers.budget import Budget
    from hyperplace.solvers.params import SolveParams

    now = {"wall": 100.0, "cpu": 50.0}
    params = SolveParams()
    budget = Budget(30.0, params.budget, clock=lambda: now["wall"],
                    cpu_clock=lambda: now["cpu"])
    inst = generate_federation(2, 64, 20, None, 0.5, 3)
    run = decompose._Run(inst, decompose.route(inst), params, "auto", "performance",
                         0, 2, budget)
    run.slow = 1.5
    now["wall"] += 0.1
    run.refresh_slowdown()
    assert run.slow == 1.5  # 0.1 s of wall, no CPU: too short to say
    now["wall"], now["cpu"] = 110.0, 52.0
    run.refresh_slowdown()
    assert run.slow == pytest.approx(5.0)
    run.slow = 7.0
    run.refresh_slowdown()
    assert run.slow == 7.0  # never lowered


def test_the_merged_plans_runtime_covers_building_it(monkeypatch):
    """A decomposed plan's runtimeS is stamped once the whole round's plan is built (review
    R15: it was stamped before, up to 0.9 s short at 1M GPUs): a clock that jumps 100 s while
    each plan is built shows in it, the merged plan's last."""
    import time

    from hyperplace.models.plan_builder import PlanBuilder
    from hyperplace.solvers import decompose
    from hyperplace.solvers.budget import Budget

    offset = [0.0]

    class Clocked(Budget):  # the round's budget, on a clock the test moves
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("clock", lambda: time.perf_counter() + offset[0])
            super().__init__(*args, **kwargs)

    real_build = PlanBuilder.build

    def slow_build(self, name, **kwargs):  # every plan built (the parts' and the merge's)
        plan = real_build(self, name, **kwargs)
        offset[0] += 100.0
        return plan

    monkeypatch.setattr(decompose, "Budget", Clocked)
    monkeypatch.setattr(PlanBuilder, "build", slow_build)
    inst = generate_federation(2, 64, 40, None, 0.5, 3)
    plan = solve_decomposed(inst, budget_s=1000, always=True)
    assert check(plan, inst) == []
    assert offset[0] >= 100.0 and plan.runtime_s >= offset[0]  # the last build counted


def test_the_routing_is_the_same_under_every_hash_seed():
    """The routing LP's columns follow the GPU types in sorted order, not a frozenset's
    (which changes with the process's hash seed): 4 clusters x 1,024 GPUs, 500 jobs, one
    answer under 4 seeds (two before)."""
    import os
    import subprocess
    import sys

    code = ("import hashlib, json\n"
            "from hyperplace.instances.generator import generate_federation\n"
            "from hyperplace.solvers.decompose import route\n"
            "r = route(generate_federation(4, 1024, 500, ['H100-80', 'A100-80'], 0.6, seed=1))\n"
            "print(hashlib.sha1(json.dumps([sorted(r.assignment.items()), r.bound])"
            ".encode()).hexdigest())\n")
    answers = set()
    for seed in range(4):
        env = {**os.environ, "PYTHONHASHSEED": str(seed)}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True)
        answers.add(out.stdout.strip())
    assert len(answers) == 1


def test_the_routing_reads_each_jobs_priority_once(monkeypatch):
    """Routing 100,000 jobs read each one's priority property three times (0.3 s of CPU):
    now once per distinct spec value, with the same routing and bound."""
    from hyperplace.models.job import TrainingJob
    from hyperplace.solvers.decompose import route

    inst = generate_federation(3, 1024, 400, ["H100-80", "A100-80"], 0.6, seed=2)
    expected = route(inst)
    reads = []
    real = TrainingJob.priority

    monkeypatch.setattr(TrainingJob, "priority",
                        property(lambda self: reads.append(1) or real.fget(self)))
    got = route(inst)
    assert len(reads) <= len({j.spec.priority for j in inst.jobs})
    assert got.assignment == expected.assignment and got.bound == expected.bound


def test_the_routing_reads_no_more_jobs_than_the_parts_can_place(monkeypatch):
    """With what the jobs read will cost the parts (a Fill), the routing stops reading,
    highest priority first, where the parts could not place more by the round's end at the
    measured slowdown (1M GPUs under load read 88,000 jobs in 4 s and built no part), and
    says so; a slower machine reads fewer. Without it, every job is read."""
    import time

    from hyperplace.solvers import decompose

    # the slowdown is the Fill's alone (the routing's own reading of the node count: 1x)
    monkeypatch.setattr(decompose, "ROUTE_S_PER_NODE", 1.0)
    inst = generate_federation(2, 256, 3000, None, 0.5, 4)
    assert not decompose.route(inst).unrouted

    def fill(slow: float) -> decompose.Fill:
        # 1,000 s to the end, 0.67 s a job: 999 jobs fit, 1,999 do not (at 1x)
        return decompose.Fill(end=time.perf_counter() + 1000.0, merge_s=0.0, fixed_s=0.0,
                              per_job_s=0.67, slowdown=lambda: slow)

    found = decompose.route(inst, fill=fill(1.0))
    assert len(found.unrouted) == 3000 - 1999
    assert "what the parts can place in the budget at the measured slowdown (1.0x)" in \
        found.status and found.bound is None
    prio = [j.priority for j in inst.jobs]
    assert min(prio[j] for j in found.assignment) >= max(prio[j] for j in found.unrouted)
    assert len(found.assignment) == 1999
    slower = decompose.route(inst, fill=fill(2.0))
    assert len(slower.assignment) == 999 and "(2.0x)" in slower.status


def test_the_routing_weights_read_jobs_not_routed_only_up_to_the_free_gpus(monkeypatch):
    """The whole round's weights (the checker's) from a routing cut short equal those of
    every job, while the jobs not read are counted only until their level's demand reaches
    the free GPUs (its weight reads no more): not every one of them again."""
    from hyperplace.models.priority import priority_weights
    from hyperplace.solvers import decompose

    inst = generate_federation(2, 64, 3000, None, 0.5, 3)
    monkeypatch.setattr(decompose, "ROUTE_SHARE", 0.0)
    calls = []
    real = decompose.spec_gpus
    monkeypatch.setattr(decompose, "spec_gpus", lambda job: (calls.append(job), real(job))[1])
    import time

    found = decompose.route(inst, deadline=time.perf_counter())
    assert len(found.unrouted) == 3000 - 999
    free = sum(found.free.values())
    assert found.weights == priority_weights(
        [(j.priority, j.total_gpus) for j in inst.jobs], free)
    assert len(found.weights) >= 2
    assert len(calls) < len(found.unrouted) // 2
