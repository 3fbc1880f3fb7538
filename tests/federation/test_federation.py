"""Federation rounds: shapes, as-placed verification, affinities, maxDomains, priorities.

Every admitted plan is re-checked here, independently of the driver: each cluster's
sub-jobs are rebuilt as a PlacementPlan from the GPUs the FederationPlan lists and passed
to the placement checker against that cluster's state; layer ranges must tile the model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hyperplace.check import check
from hyperplace.errors import InputError
from hyperplace.federation import federate, load_problem
from hyperplace.federation.asplaced import Part, cluster_instance, sub_job
from hyperplace.federation.generator import federation_instance, member, pipeline_job
from hyperplace.federation.problem import (
    AffinityGroup,
    FederationProblem,
    from_training_job,
)
from hyperplace.models.federation import FederationPlan
from hyperplace.models.plan import PlacementPlan, UnitPlacement

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def assert_valid(problem: FederationProblem, plan: FederationPlan) -> None:
    """Independent re-check of every admitted job of ``plan``."""
    jobs = {j.name: j for j in problem.jobs}
    per_cluster: dict[str, tuple[list, list]] = {}
    for jp in plan.jobs:
        job = jobs[jp.job]
        assert jp.verification.checker_violations == 0
        assert sum(len(s.gpus) for s in jp.sub_jobs) == job.gpus
        # tensor parallelism never crosses a cluster: every unit's GPUs are in one sub-job
        positions = sorted({st.position for s in jp.sub_jobs for st in s.stages})
        assert positions == list(range(job.stages))
        if jp.shape == "data-parallel":
            # every replica holds the same layers at the same position (one split for all)
            per_pos = {}
            for s in jp.sub_jobs:
                for st in s.stages:
                    per_pos.setdefault(st.position, set()).add((st.first_layer, st.last_layer))
            assert all(len(v) == 1 for v in per_pos.values())
        else:
            ranges = sorted((st.first_layer, st.last_layer) for s in jp.sub_jobs
                            for st in s.stages)
            assert ranges[0][0] == 0 and ranges[-1][1] == job.model.num_layers - 1
            assert all(a[1] + 1 == b[0] for a, b in zip(ranges, ranges[1:]))
        for s in jp.sub_jobs:
            first = min(s.dp_ranks)
            part = Part(next(loc for loc in _locs(problem, s.cluster, s.gpu_type)),
                        tuple(st.position for st in s.stages), len(s.dp_ranks), first)
            tj = sub_job(job, part)
            placements = []
            cursor = 0
            for unit in s.units:
                group, _, rep = unit.partition("/")
                pos = next(k for k, g in enumerate(job.stage_groups) if g.name == group)
                n = job.unit_gpus(pos)
                placements.append(UnitPlacement(job=tj.name, unit=f"{group}/{int(rep) - first}",
                                                gpus=s.gpus[cursor:cursor + n]))
                cursor += n
            jobs_c, pl_c = per_cluster.setdefault(s.cluster, ([], []))
            jobs_c.append(tj)
            pl_c.extend(placements)
    for cl, (tjobs, placements) in per_cluster.items():
        inst = cluster_instance(problem.instance, cl, tjobs)
        pp = PlacementPlan(status="feasible", solver="federation", placements=placements)
        violations = [v for v in check(pp, inst)
                      if not v.code.startswith(("summary-", "pending-"))]
        assert violations == [], f"{cl}: {violations}"


def _locs(problem, cluster, gpu_type):
    from hyperplace.federation.asplaced import Location
    yield Location(cluster, gpu_type)


def _problem(inst, jobs, **kw) -> FederationProblem:
    return FederationProblem(inst, [from_training_job(j) if not hasattr(j, "stage_groups")
                                    else j for j in jobs], **kw)


# ---------------------------------------------------------------- the seed scenario


def test_seed_scenario_splits_6_2_across_beijing_b200_and_shanghai_h100():
    problem = load_problem()
    plan = federate(problem, budget_s=10)
    assert plan.pending == []
    (jp,) = plan.jobs
    assert jp.shape == "pipeline"
    assert set(jp.clusters) == {"beijing", "shanghai"}
    by_cluster = {s.cluster: s for s in jp.sub_jobs}
    assert by_cluster["beijing"].gpu_type == "B200"
    assert by_cluster["shanghai"].gpu_type == "H100-80"
    layers = {s.cluster: sum(st.last_layer - st.first_layer + 1 for st in s.stages)
              for s in jp.sub_jobs}
    assert layers == {"beijing": 6, "shanghai": 2}
    assert jp.predicted.layers_per_stage == [6, 2]
    # the exact split beats the even split on the same GPUs, and Karmada's even division
    assert jp.even_split.step_time_s > jp.predicted.step_time_s
    assert jp.karmada_aggregated.step_time_s >= jp.predicted.step_time_s
    assert jp.predicted.penalty_vs_best_monolithic > 1.0  # the WAN costs; best is idle Beijing
    assert jp.wan and jp.wan[0].gbps_needed < jp.wan[0].gbps_capacity
    assert_valid(problem, plan)


def test_the_example_federation_file_reads_its_link_and_splits_the_pipeline():
    """examples/federation.yaml, the federation file format the README documents: Cluster
    documents, then a Federation document whose link is in Gb/s with a one-way latency."""
    from hyperplace.federation.io import load_federation_file

    fed, job = (EXAMPLES / "federation.yaml", EXAMPLES / "pipeline-job.yaml")
    inst = load_federation_file(fed)
    assert [c.name for c in inst.clusters] == ["west", "east"]
    (link,) = inst.spec.inter_cluster_links
    assert (link.a, link.b, link.gbps, link.latency_ms) == ("west", "east", 100.0, 30.0)
    problem = load_problem(cluster=fed, jobs=[job])
    plan = federate(problem, budget_s=10)
    (jp,) = plan.jobs
    assert jp.shape == "pipeline" and set(jp.clusters) == {"west", "east"}
    assert jp.predicted.layers_per_stage == [6, 2]  # more layers on the faster B200 stage
    (wan,) = jp.wan
    assert wan.gbps_capacity == 100.0 and 0 < wan.gbps_needed < 100.0
    assert_valid(problem, plan)


def test_idle_seed_instance_stays_monolithic():
    """Monolithic is the default: with both clusters idle the job stays in Beijing."""
    problem = load_problem(instance="seed-beijing-shanghai")
    plan = federate(problem, budget_s=10)
    (jp,) = plan.jobs
    assert jp.shape == "monolithic" and jp.clusters == ["beijing"]
    assert jp.predicted.penalty_vs_best_monolithic == pytest.approx(1.0)
    assert_valid(problem, plan)


# ---------------------------------------------------------------- shapes


def _three_small_clusters(gbps: float = 100.0):
    clusters = [member(n, "H100-80", 2) for n in ("x", "y", "z")]
    links = [("x", "y", gbps, 5.0), ("y", "z", gbps, 5.0), ("x", "z", gbps, 5.0)]
    return federation_instance("three", clusters, links)


def test_job_larger_than_any_cluster_is_split_across_several():
    inst = _three_small_clusters(400.0)
    job = pipeline_job("big", "seed-8layer", stages=4)  # 32 GPUs; each cluster has 16
    problem = _problem(inst, [job], max_slowdown=10)
    plan = federate(problem, budget_s=10)
    (jp,) = plan.jobs
    assert jp.shape == "pipeline" and len(jp.clusters) >= 2
    assert jp.best_monolithic.note.startswith("no member cluster")
    assert_valid(problem, plan)


def _dp_setup(gbps: float):
    clusters = [member("east", "H100-80", 2), member("west", "H100-80", 2)]
    inst = federation_instance("dp", clusters, [("east", "west", gbps, 5.0)])
    job = pipeline_job("dp-job", "llama3-8b", stages=1, replicas=4)  # 4 x 8 GPUs
    return _problem(inst, [job])


def test_hierarchical_dp_across_clusters_on_a_fast_wan():
    problem = _dp_setup(400.0)
    plan = federate(problem, budget_s=10)
    (jp,) = plan.jobs
    assert jp.shape == "data-parallel"
    assert sorted(len(s.dp_ranks) for s in jp.sub_jobs) == [2, 2]
    assert jp.predicted.parts.dp_sync_inter_s > 0
    assert jp.predicted.penalty_vs_best_monolithic <= problem.max_slowdown
    assert_valid(problem, plan)


def test_dp_across_generations_shares_one_layer_split():
    clusters = [member("old", "A100-80", 2), member("new", "H100-80", 2)]
    inst = federation_instance("gen", clusters, [("old", "new", 400.0, 5.0)])
    job = from_training_job(pipeline_job("dp2", "llama3-8b", stages=2, replicas=2))
    job.max_domains = 2
    problem = FederationProblem(inst, [job], max_slowdown=10)
    plan = federate(problem, budget_s=10)
    (jp,) = plan.jobs
    assert jp.shape in ("data-parallel", "pipeline")
    assert_valid(problem, plan)  # checks the common split for data-parallel shapes


def test_hierarchical_dp_refused_on_a_slow_wan():
    plan = federate(_dp_setup(10.0), budget_s=10)
    assert plan.jobs == []
    (pending,) = plan.pending
    text = " ".join(pending.reasons)
    assert "data-parallel" in text and "all-reduce" in text and "refused" in text


def test_fallback_affinity_group_used_when_the_first_is_full():
    clusters = [member("primary", "H100-80", 2, busy={0: 8, 1: 8}),
                member("backup", "H100-80", 2)]
    inst = federation_instance("aff", clusters, [("primary", "backup", 100.0, 5.0)])
    job = from_training_job(pipeline_job("j", "seed-8layer", stages=2))
    job.affinities = [AffinityGroup("prefer", ("primary",)), AffinityGroup("spill", ("backup",))]
    problem = FederationProblem(inst, [job])
    plan = federate(problem, budget_s=10)
    (jp,) = plan.jobs
    assert jp.affinity_group == "spill" and jp.clusters == ["backup"]
    assert_valid(problem, plan)


def test_first_affinity_group_wins_when_it_can_hold_the_job():
    clusters = [member("primary", "A100-80", 2), member("backup", "B200", 2)]
    inst = federation_instance("aff2", clusters, [("primary", "backup", 100.0, 5.0)])
    job = from_training_job(pipeline_job("j", "seed-8layer", stages=2))
    job.affinities = [AffinityGroup("prefer", ("primary",)), AffinityGroup("spill", ("backup",))]
    plan = federate(FederationProblem(inst, [job]), budget_s=10)
    assert plan.jobs[0].affinity_group == "prefer"  # even though B200 would be faster


def _fragmented():
    """16 free H100s by totals, but 2 per node: no node holds an 8-GPU NVLink unit."""
    frag = member("frag", "H100-80", 8, busy={i: 6 for i in range(8)})
    small = member("small", "H100-80", 1)
    return federation_instance("frag", [frag, small], [("frag", "small", 100.0, 5.0)])


def test_cluster_whose_totals_fit_but_domains_do_not_is_rejected():
    inst = _fragmented()
    job = pipeline_job("j", "seed-8layer", stages=2, nvlink_gbps=900)
    plan = federate(_problem(inst, [job]), budget_s=10)
    assert plan.jobs == []
    text = " ".join(plan.pending[0].reasons)
    assert "monolithic on H100-80@frag" in text and "by totals" in text


def test_max_domains_bounds_the_clusters_of_a_split():
    inst = _three_small_clusters(400.0)
    job = from_training_job(pipeline_job("big", "seed-8layer", stages=4))
    job.max_domains = 1
    plan = federate(FederationProblem(inst, [job], max_slowdown=10), budget_s=10)
    assert plan.jobs == []
    assert any("maxDomains 1" in r for r in plan.pending[0].reasons)
    job.max_domains = 2
    problem = FederationProblem(inst, [job], max_slowdown=10)
    plan = federate(problem, budget_s=10)
    assert len(plan.jobs[0].clusters) == 2
    assert_valid(problem, plan)


def test_several_jobs_in_one_round_higher_priority_first():
    clusters = [member("a", "H100-80", 2), member("b", "H100-80", 1)]
    inst = federation_instance("prio", clusters, [("a", "b", 100.0, 5.0)])
    low = pipeline_job("low", "seed-8layer", stages=2, priority="low")
    high = pipeline_job("high", "seed-8layer", stages=2, priority="high")
    small = pipeline_job("small", "seed-8layer", stages=1, priority="normal")
    problem = _problem(inst, [low, high, small])
    plan = federate(problem, budget_s=10)
    admitted = {j.job for j in plan.jobs}
    assert "high" in admitted and "small" in admitted
    assert [p.job for p in plan.pending] == ["low"]
    assert "fits beside the jobs admitted" in plan.pending[0].reasons[0]
    assert_valid(problem, plan)


@pytest.mark.parametrize("solver", ["greedy", "cpsat"])
def test_every_solver_returns_a_verified_plan(solver):
    problem = load_problem()
    plan = federate(problem, budget_s=10, solver=solver)
    assert len(plan.jobs) == 1
    assert_valid(problem, plan)


# ---------------------------------------------------------------- bad input


def test_unknown_cluster_in_affinity_is_an_input_error():
    job = from_training_job(pipeline_job("j", "seed-8layer", stages=2))
    job.affinities = [AffinityGroup("g", ("mars",))]
    with pytest.raises(InputError, match="unknown cluster 'mars'"):
        FederationProblem(_three_small_clusters(), [job])


def test_max_domains_zero_is_an_input_error():
    job = from_training_job(pipeline_job("j", "seed-8layer", stages=2))
    job.max_domains = 0
    with pytest.raises(InputError, match="maxDomains must be at least 1"):
        FederationProblem(_three_small_clusters(), [job])


def test_job_no_combination_can_hold_is_pending_with_a_reason():
    inst = _three_small_clusters()
    job = pipeline_job("huge", "seed-8layer", stages=8, replicas=2)  # 128 GPUs of 48
    plan = federate(_problem(inst, [job], max_slowdown=100), budget_s=10)
    assert plan.jobs == [] and plan.pending[0].reasons


# ---------------------------------------------------------------- policies and budget


def _two_equal_clusters():
    clusters = [member("a", "B200", 2), member("b", "B200", 2)]
    return federation_instance("eq", clusters, [("a", "b", 100.0, 5.0)])


def test_binpack_packs_jobs_into_fewer_clusters():
    jobs = [pipeline_job(f"j{k}", "seed-8layer", stages=1) for k in range(2)]
    problem = _problem(_two_equal_clusters(), jobs, policy="binpack")
    plan = federate(problem, budget_s=10)
    assert len(plan.jobs) == 2
    assert len({c for j in plan.jobs for c in j.clusters}) == 1  # one cluster stays whole
    assert_valid(problem, plan)


def test_cost_policy_picks_the_cheapest_per_token_shape():
    clusters = [member("cheap", "A100-80", 2), member("fast", "B200", 2)]
    inst = federation_instance("cost", clusters, [("cheap", "fast", 100.0, 5.0)])
    problem = _problem(inst, [pipeline_job("j", "seed-8layer", stages=2)], policy="cost")
    plan = federate(problem, budget_s=10)
    (jp,) = plan.jobs
    catalog = inst.catalog

    def cost(shape_cluster: str, gpu_type: str, step: float) -> float:
        return 16 * catalog.get(gpu_type).cost_per_hour * step

    from hyperplace.federation.asplaced import Location
    from hyperplace.federation.pricing import Pricer
    pricer = Pricer(inst.federation, catalog)
    job = problem.jobs[0]
    options = {loc.cluster: cost(loc.cluster, loc.gpu_type,
                                 pricer.pipeline(job, [(loc, 2)]).step_time_s)
               for loc in (Location("cheap", "A100-80"), Location("fast", "B200"))}
    assert jp.clusters == [min(options, key=options.get)]


def test_a_tiny_budget_still_returns_a_verified_plan_and_says_which():
    problem = load_problem()
    plan = federate(problem, budget_s=0.01)
    assert plan.status.value in ("optimal", "feasible", "fallback")
    assert plan.jobs and plan.solver
    assert_valid(problem, plan)


def test_wan_capacity_is_shared_by_the_jobs_of_a_round():
    """Each candidate's average WAN use (Mb/s) counts against the link for the whole round,
    in the greedy's check and in the CP-SAT model alike."""
    from types import SimpleNamespace

    from hyperplace.federation.asplaced import Location
    from hyperplace.federation.formulation import FederationData, fits_totals, solve_cpsat

    loc_a, loc_b = Location("a", "H100-80"), Location("b", "H100-80")
    jobs = [SimpleNamespace(name=f"j{k}", priority=2, gpus=8) for k in range(2)]
    cands = [SimpleNamespace(index=k, job=jobs[k], gpus={loc_a: 4, loc_b: 4},
                             wan_mbps={("a", "b"): 60_000}, clusters=("a", "b"), slowdown=1000,
                             cost=1, shape=SimpleNamespace(affinity_index=0))
             for k in range(2)]
    data = FederationData(candidates=cands, by_job={"j0": [0], "j1": [1]},
                          free={loc_a: 16, loc_b: 16}, wan_capacity={("a", "b"): 100_000},
                          cluster_free={"a": 16, "b": 16}, weights={2: 1}, policy="throughput")
    assert fits_totals(data, [], 0) and not fits_totals(data, [0], 1)
    chosen, status, _, _ = solve_cpsat(data, 5.0)
    assert status == "optimal" and len(chosen) == 1
    data.wan_capacity[("a", "b")] = 120_000
    chosen, _, _, _ = solve_cpsat(data, 5.0)
    assert len(chosen) == 2


def test_karmada_divisions_are_placed_together_not_just_booked():
    """Totals say two 8-GPU units fit (8 + 6 + 2 free); either fits alone, not both."""
    from hyperplace.federation.asplaced import Prober
    from hyperplace.federation.pricing import Pricer
    from hyperplace.federation.solve import karmada_round

    inst = federation_instance("k", [member("c", "H100-80", 3, busy={1: 2, 2: 6})], [])
    jobs = [pipeline_job(f"j{k}", "seed-8layer", stages=1, nvlink_gbps=900) for k in range(2)]
    problem = _problem(inst, jobs)
    alts = karmada_round(problem, Prober(inst), Pricer(inst.federation, inst.catalog))
    assert all(a.feasible and a.division == {"c": 1} for a in alts.values())
    assert sorted(a.placeable_as_placed for a in alts.values()) == [False, True]
    plan = federate(problem, budget_s=10)
    assert len(plan.jobs) == 1 and len(plan.pending) == 1  # the engine admits what fits


def test_a_single_stage_job_naming_no_parallelism_is_priced_with_the_planner():
    """One cluster holds the whole job: its price is the planner's best configuration for
    its GPUs at the job's own tokens per step (and the plan says which), not the fixed
    TP-per-unit shape; a job declaring its parallelism keeps its own shape."""
    from hyperplace.costmodel.plan import plan as plan_job
    from hyperplace.models.job import Parallelism
    from hyperplace.models.presets import model_preset

    clusters = [member("east", "H100-80", 4)]
    inst = federation_instance("one", clusters, [])
    job = pipeline_job("mono", "llama3-8b", stages=1, replicas=2)  # 2 x 8 GPUs
    problem = _problem(inst, [job])
    fplan = federate(problem, budget_s=10)
    (jp,) = fplan.jobs
    assert jp.shape == "monolithic"
    fjob = problem.jobs[0]
    batch = fjob.microbatches * fjob.model.micro_batch_size * fjob.replicas
    best = plan_job(model_preset("llama3-8b"), [("H100-80", 16)], global_batch=batch,
                    top=1, space="pricing").best[0]
    assert jp.predicted.configuration == best.candidate.label()
    assert jp.predicted.step_time_s == pytest.approx(best.prediction.step_time_s)
    assert_valid(problem, fplan)
    declared = job.model_copy(update={"spec": job.spec.model_copy(
        update={"parallelism": Parallelism(tp=8)})})
    own = federate(_problem(inst, [declared]), budget_s=10).jobs[0]
    assert own.predicted.configuration is None
    assert own.predicted.step_time_s >= jp.predicted.step_time_s * (1 - 1e-9)


def _hub_and_spokes(spokes: int) -> FederationProblem:
    """A hub with 16 free H100s by totals but one node of 8 free (two of 4), spokes of one
    8-GPU node linked to the hub only, and two 2-stage jobs of 8-GPU units: each fits split
    between the hub and any spoke, both together never (one hub node holds an 8-GPU unit)."""
    hub = member("hub", "H100-80", 3, busy={1: 4, 2: 4})
    others = [member(f"s{i}", "H100-80", 1) for i in range(spokes)]
    inst = federation_instance("spokes", [hub, *others],
                               [("hub", f"s{i}", 400.0, 1.0) for i in range(spokes)])
    jobs = [from_training_job(pipeline_job(n, "seed-8layer", stages=2, nvlink_gbps=900))
            for n in ("a", "b")]
    return FederationProblem(inst, jobs, max_slowdown=10)


def test_a_failed_cluster_cuts_every_combination_asking_it_the_same(monkeypatch):
    """Review R12: the verification cut excluded only the failing candidates, so a job split
    between the hub and any of 4 spokes came back with the next spoke each round and CP-SAT
    fell back to greedy after MAX_VERIFY_ROUNDS (8). The cut of every candidate asking the
    hub the same proves the optimum in fewer rounds; the weak cut, forced here, falls back."""
    from hyperplace.federation import solve

    problem = _hub_and_spokes(4)
    plan = federate(problem, budget_s=20, solver="cpsat")
    assert plan.solver == "cpsat" and plan.status.value == "optimal", plan.message
    strong = int(plan.message.split(" combination")[0])
    assert strong < solve.MAX_VERIFY_ROUNDS and len(plan.jobs) == 1
    assert plan.objective == plan.bound
    assert_valid(problem, plan)
    monkeypatch.setattr(solve, "no_good", lambda data, cluster, failed: failed)
    weak = federate(_hub_and_spokes(4), budget_s=20, solver="cpsat")
    assert weak.status.value == "fallback" and "kept failing verification" in weak.message
    assert weak.objective == plan.objective
