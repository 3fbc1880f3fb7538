"""Queues over rounds (#14): decayed usage history (Slurm's fair-share factor) prevents a queue
from starving, queues reach every simulated round, and the decay math matches a hand
computation."""

from __future__ import annotations

import copy
import math

import pytest
from queue_helpers import cluster_queue, one_node

from hyperplace.models.usage import QueueUsage, decay_factor, fair_share_factors
from hyperplace.instances.generator import small_job
from hyperplace.models import (
    Cluster,
    FabricGenerator,
    FabricSpec,
    Instance,
    InstanceSpec,
    Node,
)
from hyperplace.models.job import ObjectMeta
from hyperplace.sim.jobs import SimJob
from hyperplace.sim.simulator import SimConfig, simulate
from hyperplace.models.instance import in_queue
from hyperplace.solvers.driver import solve_placement
from hyperplace.check import check


def sim_job(inst: Instance, name: str, gpus: int, queue: str, work: float = 30.0) -> SimJob:
    manifest, q = in_queue(small_job(name, "m", gpus), queue, inst)
    return SimJob(name=name, submit_s=0.0, work_s=work, gpus=gpus, manifest=manifest, queue=q)


# ---- the decay factor and Slurm's fair-share factor, by hand ---------------------------------

def test_decay_follows_slurms_order_with_the_exact_half_life():
    # U <- (U + G * dt) * 2^(-dt / h): 8 GPUs for one hour with a one-hour half-life from 10 GPU-h
    u = QueueUsage(half_life_s=3600.0)
    u.advance(0.0, {})
    u.gpu_hours["a"] = 10.0
    u.advance(3600.0, {"a": 8})
    assert u.gpu_hours["a"] == pytest.approx((10 + 8) * 0.5)
    u.advance(3600.0 + 1800.0, {})  # half an hour idle: x 2^-0.5
    assert u.gpu_hours["a"] == pytest.approx(9 / math.sqrt(2))
    assert decay_factor(7200, 3600) == pytest.approx(0.25)
    assert decay_factor(7200, None) == 1.0
    off = QueueUsage(half_life_s=None)
    off.advance(0, {})
    off.advance(100, {"a": 8})
    assert off.snapshot() == {}


def test_fair_share_factor_is_two_to_minus_usage_share_over_weight_share():
    # weights 3:1 -> S = 0.75 / 0.25; usage 1:1 -> U = 0.5 / 0.5
    f = fair_share_factors({"a": 5.0, "b": 5.0}, {"a": 3, "b": 1})
    assert f["a"] == pytest.approx(2 ** (-0.5 / 0.75))
    assert f["b"] == pytest.approx(2 ** (-0.5 / 0.25))
    # a queue that used exactly its share gets 1/2; no usage at all: 1 for everyone
    assert fair_share_factors({"a": 3.0, "b": 1.0}, {"a": 3, "b": 1}) == pytest.approx(
        {"a": 0.5, "b": 0.5})
    assert fair_share_factors({}, {"a": 1, "b": 2}) == {"a": 1.0, "b": 1.0}


# ---- the formulation: history decides between equal plans ----------------------------------

def test_usage_history_turns_the_fair_share_towards_the_queue_that_got_less(exact_solver):
    # 8 free GPUs; queue a offers two 4-GPU jobs, queue b one 8-GPU job: equal priority-weighted
    # demand. Per round, both queues are at their share (4 each), and a's plan admits more
    # jobs, so a wins. With a's past usage, b's fair share is larger and b wins.
    inst = one_node([cluster_queue("a"), cluster_queue("b")])
    jobs = [sim_job(inst, "a0", 4, "a").manifest, sim_job(inst, "a1", 4, "a").manifest,
            sim_job(inst, "b0", 8, "b").manifest]
    plain = inst.with_jobs(jobs)
    plan = solve_placement(plain, solver=exact_solver, budget_s=10)
    assert check(plan, plain) == [] and {j.job for j in plan.jobs} == {"a0", "a1"}
    doc = plain.to_doc()
    doc["spec"]["queueUsage"] = {"a": 8.0}
    hist = Instance.model_validate(doc)
    plan = solve_placement(hist, solver=exact_solver, budget_s=10)
    assert check(plan, hist) == [] and {j.job for j in plan.jobs} == {"b0"}
    assert plan.status.value == "optimal"


def test_queue_usage_naming_an_unknown_queue_or_negative_is_refused():
    doc = one_node([cluster_queue("a")]).to_doc()
    doc["spec"]["queueUsage"] = {"nope": 1.0}
    with pytest.raises(ValueError, match=r"spec.queueUsage.nope: unknown queue"):
        Instance.model_validate(doc)
    doc["spec"]["queueUsage"] = {"a": -1.0}
    with pytest.raises(ValueError, match=r"queueUsage"):
        Instance.model_validate(doc)


# ---- over rounds: starvation without history, served within K rounds with it ---------------

def _replay(half_life_s: float | None, *, aging_s: float = 0.0, levels: int = 0):
    inst = one_node([cluster_queue("a"), cluster_queue("b")])
    jobs = [sim_job(inst, f"a{i:02d}", 4, "a") for i in range(12)]
    jobs += [sim_job(inst, f"b{i}", 8, "b") for i in range(2)]
    for j in jobs[12:]:
        j.submit_s = 30.0  # b's jobs come half a round later: with aging, a's stay older
    # no aging by default: the fair-share objective alone decides
    config = SimConfig(round_s=60.0, budget_s=5.0, solver="cpsat", aging_s=aging_s, check=True,
                       half_life_s=half_life_s, fair_share_levels=levels)
    run = simulate(inst, jobs, "engine", config)
    starts = sorted({r.first_start_s for r in run.records})
    round_of = {r.job.name: starts.index(r.first_start_s) for r in run.records}
    return run, round_of


def test_a_queue_starved_per_round_is_served_within_two_rounds_with_decay():
    run, round_of = _replay(None)
    assert run.unfinished == 0
    # per round only: a's 12 jobs go two by two for 6 rounds before b's first job
    assert min(round_of[n] for n in ("b0", "b1")) == 6
    run, round_of = _replay(3600.0)
    assert run.unfinished == 0
    assert round_of["b0"] <= 1 or round_of["b1"] <= 1  # K = 2 rounds: the first with history
    # the history then alternates: b's second job does not wait for all of a's
    assert max(round_of["b0"], round_of["b1"]) <= 3
    assert set(run.queue_gpu_s) == {"a", "b"}


# ---- queues reach the simulator from a trace and a queue file --------------------------------

def test_simulate_reads_queues_from_the_trace_and_a_queue_file(tmp_path, capsys):
    from cli_run import run_main
    from hyperplace.sim.traces import load_trace
    from hyperplace.sim.workload import trace_jobs

    trace = tmp_path / "t.csv"
    trace.write_text("submit_time_s,duration_s,num_gpus,name,queue\n"
                     "0,600,8,x0,research\n0,600,8,y0,prod\n10,600,4,z0,\n")
    qfile = tmp_path / "q.yaml"
    qfile.write_text("\n---\n".join(yaml_doc(q) for q in (cluster_queue("research"),
                                                        cluster_queue("prod", weight=2))))
    inst = one_node([cluster_queue("research"), cluster_queue("prod", weight=2)])
    wl = trace_jobs(load_trace(str(trace)), inst)
    assert [j.queue for j in wl.jobs] == ["research", "prod", "default"]
    assert wl.jobs[0].manifest.metadata.labels["kueue.x-k8s.io/queue-name"] == "research"
    run = simulate(inst, wl.jobs, "engine", SimConfig(budget_s=2, check=True, half_life_s=3600))
    assert run.unfinished == 0 and set(run.queue_gpu_s) == {"research", "prod", "default"}
    out = tmp_path / "out"
    assert run_main(["simulate", "--trace", str(trace), "--instance", "mixed-a100-h100",
                     "--queues", str(qfile), "--half-life", "2", "--policy", "engine",
                     "--load", "trace", "--budget", "0.5", "--no-progress", "-o", str(out),
                     "--no-charts"]) == 0
    assert (out / "summary.json").exists()
    assert run_main(["simulate", "--trace", str(trace), "--instance", "mixed-a100-h100",
                     "--policy", "engine", "--no-progress"]) == 2
    assert "line 2: queue: names queue 'research'" in capsys.readouterr().err
    trace.write_text("submit_time_s,duration_s,num_gpus,queue\n0,600,8,nope\n")
    assert run_main(["simulate", "--trace", str(trace), "--instance", "mixed-a100-h100",
                     "--queues", str(qfile), "--policy", "engine", "--no-progress"]) == 2
    assert "line 2: queue: unknown queue 'nope'" in capsys.readouterr().err
    assert run_main(["simulate", "--trace", str(trace), "--instance", "mixed-a100-h100",
                     "--queues", str(qfile), "--preemption", "lower-priority",
                     "--no-progress"]) == 2
    assert "--preemption: use never or reclaim-within-cohort" in capsys.readouterr().err


def yaml_doc(doc: dict) -> str:
    import yaml

    return yaml.safe_dump(doc)


# ---- metrics per queue ---------------------------------------------------------------------

def test_per_queue_metrics_and_jain_index(tmp_path):
    from hyperplace.sim.metrics import jain_index, summarize, write_outputs

    assert jain_index([1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain_index([3.0, 0.0, 0.0]) == pytest.approx(1 / 3)
    assert jain_index([1.0, 3.0]) == pytest.approx(16 / 20)
    plain, _ = _replay(None)
    decayed, _ = _replay(3600.0)
    p, d = summarize(plain), summarize(decayed)
    assert set(p["queues"]) == {"a", "b"}
    # b's first job waited 6 rounds per round only, at most 2 with history
    assert d["queues"]["b"]["wait_max_s"] < p["queues"]["b"]["wait_max_s"]
    for row in (p, d):
        held = sum(q["gpu_hours"] for q in row["queues"].values())
        asked = sum(r.job.gpus * (r.end_s - r.first_start_s) for r in plain.records) / 3600
        assert held == pytest.approx(asked)  # every GPU-second held is one queue's
        assert 0 < row["jain_index"] <= 1
    written = write_outputs(tmp_path / "o", {"policies": [p]}, [plain], charts=False)
    assert (tmp_path / "o" / "queues.csv") in written
    assert "wait_max_s" in (tmp_path / "o" / "queues.csv").read_text()


def test_with_aging_the_history_needs_fair_share_priority_levels():
    # aging one level per round: a's older jobs outrank b's in every round, so the history in
    # the fair-share objective (after priority) alone cannot help b ...
    _, round_of = _replay(3600.0, aging_s=60.0, levels=0)
    assert min(round_of["b0"], round_of["b1"]) == 6
    # ... Slurm-style fair-share levels in the priority do: b is served in the second round
    _, round_of = _replay(3600.0, aging_s=60.0, levels=4)
    assert min(round_of["b0"], round_of["b1"]) <= 1


# ---- reclaiming nominal quota over rounds: preemption and the work it loses ----------------

def test_a_queue_reclaims_its_nominal_quota_from_a_borrower_over_rounds():
    from hyperplace.sim.metrics import summarize

    def cq(name: str) -> dict:
        doc = cluster_queue(name, nominal=8)
        doc["spec"]["cohort"] = "org"
        return doc

    nodes = [Node(name=f"n{i}", gpu_type="H100-80", gpu_count=8) for i in range(2)]
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2)
    inst = Instance(metadata=ObjectMeta(name="two"), spec=InstanceSpec(clusters=[
        Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=gen))])).with_queues(
        [cq("a"), cq("b")])
    jobs = [sim_job(inst, f"a{i}", 4, "a", work=20000.0) for i in range(4)]  # a borrows all 16
    late = sim_job(inst, "b0", 8, "b", work=600.0)
    late.submit_s = 30.0
    for j in jobs:
        j.checkpoint_s = 1e9  # no checkpoint: a victim loses everything since its start
    runs = {}
    for mode in ("never", "reclaim-within-cohort"):
        config = SimConfig(round_s=60.0, budget_s=5.0, solver="cpsat", check=True,
                           preemption=mode)
        run = simulate(inst, [copy.deepcopy(j) for j in [*jobs, late]], "engine", config)
        runs[mode] = {r.job.name: r for r in run.records}, summarize(run)
    recs, m = runs["never"]
    assert recs["b0"].first_start_s > 7000 and m["gpu_hours_lost_to_preemption"] == 0  # a ends
    recs, m = runs["reclaim-within-cohort"]
    assert recs["b0"].first_start_s == 60.0  # the first round after it arrived
    victims = [n for n, r in recs.items() if r.preemptions]
    assert len(victims) == 2 and all(recs[n].lost_preempted_gpu_s == 4 * 60.0 for n in victims)
    assert m["queues"]["a"]["gpu_hours_lost_to_preemption"] == pytest.approx(480 / 3600)
    assert m["unfinished"] == 0


def test_reclaim_round_from_the_flood_bench_passes_the_checker():
    """Reclaim restores a nominal quota, no more: flood (nominal 8, 4 running, 4 GPUs free)
    gets back to 8 on the free GPUs, so team-c's borrower c-0 keeps running (the model used
    to stop it and give its 16 GPUs to priority-6 flood jobs, over flood's nominal quota,
    while team-c's priority-7 c-1 stayed pending)."""
    from pathlib import Path

    import yaml

    doc = yaml.safe_load((Path(__file__).parents[1] / "data" / "reclaim-priority-inversion.yaml")
                         .read_text())
    inst = Instance.model_validate(doc)
    plan = solve_placement(inst, solver="cpsat", budget_s=10, preemption="reclaim-within-cohort")
    assert check(plan, inst) == []
    assert plan.preemptions == [] and "flood-28" in plan.admitted


# ---- defragmentation over rounds: a migration frees a node for a waiting job ----------------

def test_the_engine_migrates_a_running_job_so_a_whole_node_job_starts():
    from hyperplace.sim.loop import RoundLoop
    from hyperplace.sim.policies import Decision, Policy, make_policy

    class Fragment(Policy):  # round 1: one 4-GPU job on each node
        name = "fixed"

        def decide(self, view):
            where = {"x": "n0", "y": "n1"}
            starts = {j.name: {j.manifest.units()[0].name: [(where[j.name], g) for g in range(4)]}
                      for j in view.queue}
            return Decision(starts, None, None, 0.0)  # type: ignore[arg-type]

    nodes = [Node(name=f"n{i}", gpu_type="H100-80", gpu_count=8) for i in range(2)]
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2)
    inst = Instance(metadata=ObjectMeta(name="frag"), spec=InstanceSpec(clusters=[
        Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=gen))]))

    def long_job(name: str, gpus: int) -> SimJob:
        return SimJob(name=name, submit_s=0.0, work_s=1e5, gpus=gpus,
                      manifest=small_job(name, "m", gpus))

    for defrag in (False, True):
        loop = RoundLoop(inst, Fragment())
        loop.submit(long_job("x", 4), 0.0)
        loop.submit(long_job("y", 4), 0.0)
        loop.run_round(0.0)
        loop.policy = make_policy("engine", inst, budget_s=5, solver="cpsat", defrag=defrag)
        loop.check = True  # the migration plan goes through the checker
        loop.submit(long_job("z", 8), 10.0)
        result = loop.run_round(60.0)
        started = {s.job.name for s in result.started}
        if not defrag:
            assert started == set() and result.decision.migrated == []
            continue
        assert len(result.decision.migrated) == 1 and "z" in started
        moved = result.decision.migrated[0]
        assert moved in started and set(loop.running) == {"x", "y", "z"}
        rec = loop.records[moved]
        assert rec.migrations == 1 and rec.lost_migrated_gpu_s == pytest.approx(4 * 60.0)
        assert {n for n, _ in loop.running["z"].gpus} in ({"n0"}, {"n1"})


def test_the_queue_aware_peer_keeps_the_declared_quotas():
    # two nodes, queue a may hold 8 GPUs (no cohort): its three 8-GPU jobs run one at a time;
    # every round's plan is checked, quotas included
    nodes = [Node(name=f"n{i}", gpu_type="H100-80", gpu_count=8) for i in range(2)]
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2)
    inst = Instance(metadata=ObjectMeta(name="two"), spec=InstanceSpec(clusters=[
        Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=gen))])).with_queues(
        [cluster_queue("a", nominal=8), cluster_queue("b", nominal=8)])
    jobs = [sim_job(inst, f"a{i}", 8, "a", work=600.0) for i in range(3)]
    jobs.append(sim_job(inst, "b0", 8, "b", work=600.0))
    run = simulate(inst, jobs, "volcano-proportion", SimConfig(check=True))
    starts = {r.job.name: r.first_start_s for r in run.records}
    assert run.unfinished == 0
    assert len({starts[f"a{i}"] for i in range(3)}) == 3 and starts["b0"] == 0.0
