"""Scheduling over time: the round loop, placement-dependent speed, failures, policies."""

from __future__ import annotations

import math

import pytest

from hyperplace.check import check
from hyperplace.instances.generator import model_parallel_job, small_job
from hyperplace.models import (
    Cluster,
    FabricGenerator,
    FabricSpec,
    Instance,
    InstanceSpec,
    Node,
)
from hyperplace.models.job import ObjectMeta
from hyperplace.sim.failures import CAUSES, PER_GPU_SECOND, FailureStream
from hyperplace.sim.jobs import SimJob
from hyperplace.sim.loop import RoundLoop
from hyperplace.sim.policies import POLICIES, make_policy
from hyperplace.sim.simulator import SimConfig, simulate
from hyperplace.costmodel.speed import MIN_COMM_SHARE, relative_speed, type_speed
from hyperplace.sim.speed import SpeedModel


def tiny_instance(oversub_uplink: float = 400.0) -> Instance:
    """4 nodes of 8 GPUs on 2 leaves: leaf 0 H100, leaf 1 A100."""
    nodes = [Node(name=f"h{i}", gpu_type="H100-80", gpu_count=8) for i in range(2)]
    nodes += [Node(name=f"a{i}", gpu_type="A100-80", gpu_count=8) for i in range(2)]
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2, uplink_gbps=oversub_uplink)
    cluster = Cluster(name="tiny", nodes=nodes, fabric=FabricSpec(generator=gen))
    return Instance(metadata=ObjectMeta(name="tiny"), spec=InstanceSpec(clusters=[cluster]))


def job(name: str, gpus: int, submit: float, work: float, tolerate: str | None = None,
        ckpt: float = 100.0) -> SimJob:
    if gpus <= 8:
        manifest = small_job(name, "m", gpus, tolerate=tolerate)
    else:
        manifest = model_parallel_job(name, "m", replicas=gpus // 8, tolerate=tolerate,
                                      memory_gb=None, dp_ib_gbps=None)
    return SimJob(name=name, submit_s=submit, work_s=work, gpus=manifest.total_gpus,
                  manifest=manifest, checkpoint_s=ckpt)


# ---- the round loop, step by step ---------------------------------------------------------

def test_round_loop_arrival_start_finish_failure_requeue_repair():
    inst = tiny_instance()
    loop = RoundLoop(inst, make_policy("engine", inst, budget_s=2), check=True)
    a = job("a", 8, 0, 1000, tolerate="h100")
    b = job("b", 4, 0, 500)
    loop.submit(a, 0.0)
    loop.submit(b, 0.0)
    result = loop.run_round(0.0)
    assert {s.job.name for s in result.started} == {"a", "b"}
    assert not loop.queue and set(loop.running) == {"a", "b"}
    assert loop.state.busy_count() == 12
    # running jobs keep their GPUs: a later round sees them allocated (checker on the state)
    c = job("c", 16, 10, 100)
    loop.submit(c, 10.0)
    r2 = loop.run_round(10.0)
    assert check(r2.decision.plan, r2.decision.instance) == []
    held = {g for name in ("a", "b") for g in loop.state.jobs.get(name, [])}
    for s in r2.started:
        assert not held & set(s.gpus)
    # a GPU of job a fails at t=250: work up to the checkpoint at 200 s survives
    gpu = loop.running["a"].gpus[0]
    speed_a = loop.running["a"].speed
    hit = loop.fail_gpus([gpu], 250.0)
    assert hit == ["a"] and "a" in loop.queue and "a" not in loop.running
    rec = loop.records["a"]
    assert rec.restarts == 1
    assert rec.done_work_s == pytest.approx(min(1000, 200 * speed_a))
    assert rec.lost_gpu_s == pytest.approx(50 * 8)
    assert gpu[1] in loop.state.unusable(gpu[0])
    r3 = loop.run_round(300.0)  # re-queued job placed again, never on the failed GPU
    for s in r3.started:
        assert gpu not in s.gpus
    loop.state.repair_gpu(*gpu)
    assert gpu[1] not in loop.state.unusable(gpu[0])
    if "b" in loop.running:
        loop.finish("b", 400.0)
        assert loop.records["b"].end_s == 400.0


def test_switch_failure_takes_down_its_nodes_and_jobs():
    inst = tiny_instance()
    loop = RoundLoop(inst, make_policy("fifo", inst), check=True)
    loop.submit(job("x", 8, 0, 100, tolerate="a100"), 0.0)
    loop.run_round(0.0)
    node = loop.running["x"].gpus[0][0]
    switch = sorted(loop.state.switches_of[node])[0]
    hit = loop.fail_switch(switch, 5.0)
    assert hit == ["x"]
    assert all(loop.state.node_down(n) for n in loop.state.switch_nodes(switch))
    r = loop.run_round(6.0)
    assert check(r.decision.plan, r.decision.instance) == []
    assert all(g[0] not in loop.state.switch_nodes(switch) for s in r.started for g in s.gpus)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_replays_with_failures_and_checked_rounds(policy):
    inst = tiny_instance()
    jobs = [job(f"j{i}", [1, 2, 4, 8, 16][i % 5], i * 30.0, 300 + 97 * (i % 7)) for i in range(16)]
    cfg = SimConfig(round_s=30, budget_s=0.5, failures=20_000, seed=3, check=True)
    run = simulate(inst, jobs, policy, cfg)
    assert run.unfinished == 0
    assert all(r.end_s is not None and r.end_s >= r.job.submit_s for r in run.records)
    assert run.failures, "the failure rate should produce failures"
    assert sum(r.restarts for r in run.records) == sum(len(h) for _, h in run.failures)
    # work done equals work asked for every job (lost work was redone)
    assert all(r.done_work_s == pytest.approx(r.job.work_s) for r in run.records)


@pytest.mark.parametrize("policy", ["fifo", "kueue", "slurm"])
def test_a_restarted_job_is_not_ended_by_its_earlier_attempts_finish(policy, monkeypatch):
    """A job interrupted and started again must end when its new attempt does. The
    simulator once told attempts apart by ``id()``: CPython reuses a freed object's address,
    so a new attempt could take the old one's id and the old attempt's FINISH event ended
    it early; how often depended on the process's allocation history (the what-if sweep's
    local and Ray rows differed after the test suite, by a few restarts and minutes of JCT).
    Here every object gets one id, as if every address were reused: the replay must not
    change."""
    from hyperplace.sim import simulator

    inst = tiny_instance()
    jobs = [job(f"j{i}", [1, 2, 4, 8, 16][i % 5], i * 30.0, 300 + 97 * (i % 7)) for i in range(16)]
    cfg = SimConfig(round_s=30, budget_s=0.5, failures=20_000, seed=3)

    def replay() -> list[tuple[str, float | None, int]]:
        run = simulate(inst, jobs, policy, cfg)
        return [(r.job.name, r.end_s, r.restarts) for r in run.records]

    honest = replay()
    assert sum(n for _, _, n in honest) > 0, "the replay should restart jobs"
    monkeypatch.setattr(simulator, "id", lambda obj: 0, raising=False)
    assert replay() == honest


def test_strict_fifo_blocks_and_best_effort_does_not():
    inst = tiny_instance()
    jobs = [job("big", 24, 0, 1000), job("big2", 32, 1, 1000), job("small", 1, 2, 10)]
    strict = simulate(inst, jobs, "kueue-strict", SimConfig(round_s=10))
    best = simulate(inst, jobs, "kueue", SimConfig(round_s=10))
    end = {r.job.name: r.end_s for r in strict.records}
    end_b = {r.job.name: r.end_s for r in best.records}
    assert end["small"] > end["big"]      # waited behind big2 (the head)
    assert end_b["small"] < end_b["big"]  # admitted past the blocked head


@pytest.mark.parametrize("policy", ["slurm", "engine"])
def test_backfill_respects_the_reservation(policy):
    inst = tiny_instance()
    # a running 24-GPU job, a 32-GPU head that must wait for it, a short and a long small job
    jobs = [job("run", 24, 0, 1000), job("head", 32, 1, 1000), job("short", 8, 2, 100),
            job("long", 8, 3, 100_000)]
    run = simulate(inst, jobs, policy, SimConfig(round_s=10, slurm_factor=1.0, check=True))
    rec = {r.job.name: r for r in run.records}
    assert rec["short"].first_start_s < rec["head"].first_start_s  # backfilled
    assert rec["long"].first_start_s >= rec["head"].first_start_s  # would delay the head


def test_engine_fills_between_rounds_around_the_reservations():
    from hyperplace.sim.planning import PlanningEngine

    inst = tiny_instance()
    # rounds every 600 s; a running 24-GPU job, a 32-GPU head that waits for it, a short
    # small job that fits now and a long one that would delay the head
    jobs = [job("run", 24, 0, 1000), job("head", 32, 1, 1000), job("short", 8, 2, 100),
            job("long", 8, 3, 100_000)]

    def replay(fill_events: bool):
        pol = PlanningEngine(round_s=600, fill_events=fill_events)
        run = simulate(inst, jobs, pol, SimConfig(round_s=600, check=True))
        return {r.job.name: r for r in run.records}, run

    rec, run = replay(True)
    assert rec["short"].first_start_s == 2  # at its arrival, not at the round at 600 s
    assert rec["head"].first_start_s == rec["run"].end_s  # when the capacity freed
    assert rec["long"].first_start_s >= rec["head"].first_start_s  # never ahead of it
    assert any(r.status == "fill" and r.started for r in run.rounds)
    assert any("fills between rounds" in n for n in run.notes)
    rounds, plain = replay(False)  # rounds only: both wait for a round
    assert rounds["short"].first_start_s == 600 and rounds["head"].first_start_s == 1200
    assert all(r.time_s % 600 == 0 for r in plain.rounds)
    # a peer is never asked between its rounds (on the replay's cadence; the peers' own
    # cadences: tests/sim/test_sim_cadence.py)
    peer = simulate(inst, jobs, "kueue", SimConfig(round_s=600, cadence="uniform"))
    assert all(r.time_s % 600 == 0 for r in peer.rounds)


# ---- placement-dependent speed ------------------------------------------------------------

def test_speed_depends_on_gpu_type_and_network():
    inst = tiny_instance()
    sm = SpeedModel(inst)
    j = job("s", 16, 0, 100).manifest
    on_h100 = {"tensor-parallel-group/0": [("h0", i) for i in range(8)],
               "tensor-parallel-group/1": [("h1", i) for i in range(8)]}
    spread = {"tensor-parallel-group/0": [("h0", i) for i in range(8)],
              "tensor-parallel-group/1": [("a0", i) for i in range(8)]}
    # the one speed model: the job's model ("m": no known model -> the default rule)
    expect = relative_speed("m", "H100-80", 16)
    assert expect > 1.5
    assert sm.speed(j, on_h100) == pytest.approx(expect)  # one leaf: no network penalty
    assert sm.crossings(["h0", "a0"]) == 1 and sm.crossings(["h0", "h1"]) == 0
    slow = sm.speed(j, spread)
    # slowest GPU (A100 = 1.0) and the cross-leaf all-reduce at 0.83 of the bandwidth
    shares = type_speed("m", "A100-80", 16).shares
    s = max(shares["collective"], MIN_COMM_SHARE["collective"])
    assert slow == pytest.approx(1.0 / ((1 - s) + s / 0.83))
    assert SpeedModel(inst, network=False).speed(j, spread) == pytest.approx(1.0)
    # an oversubscribed leaf (2 x 400 down, 2 x 100 up: 4:1) slows cross-leaf traffic more
    over = SpeedModel(tiny_instance(oversub_uplink=100.0)).speed(j, spread)
    assert over < slow


def test_run_time_follows_the_placement():
    inst = tiny_instance()
    on_h = simulate(inst, [job("h", 8, 0, 1000, tolerate="h100")], "fifo", SimConfig(round_s=0))
    on_a = simulate(inst, [job("a", 8, 0, 1000, tolerate="a100")], "fifo", SimConfig(round_s=0))
    ratio = on_a.records[0].jct_s / on_h.records[0].jct_s
    assert ratio == pytest.approx(relative_speed("m", "H100-80", 8))


def test_failure_stream_is_seeded_and_uses_llama3_causes():
    gpus = [(f"n{i}", g) for i in range(4) for g in range(8)]
    a = [FailureStream(gpus, 1e6, seed=5).next() for _ in range(1)]
    b = [FailureStream(gpus, 1e6, seed=5).next() for _ in range(1)]
    assert a == b
    assert sum(c for _, c in CAUSES.values()) == 419
    assert PER_GPU_SECOND * 54 * 86400 * 16384 == pytest.approx(419)
    s = FailureStream(gpus, 1.0)
    assert s.per_second == pytest.approx(32 * 419 / (54 * 86400 * 16384))
    assert FailureStream(gpus, 0.0).next() is None


def test_engine_wait_holds_for_faster_gpus_when_they_free_up_soon():
    inst = tiny_instance()
    # H100s busy for 100 s; a long job that accepts both types: waiting 100 s for H100 wins
    jobs = [job("busy", 16, 0, 100 * 2.77, tolerate="h100"), job("long", 8, 1, 100_000)]
    waited = simulate(inst, jobs, "engine-wait", SimConfig(round_s=10, check=True))
    now = simulate(inst, jobs, "engine-rounds", SimConfig(round_s=10, check=True))
    planned = simulate(inst, jobs, "engine", SimConfig(round_s=10, check=True))
    w = {r.job.name: r for r in waited.records}
    n = {r.job.name: r for r in now.records}
    p = {r.job.name: r for r in planned.records}
    assert n["long"].first_start_s < w["long"].first_start_s
    assert w["long"].end_s < n["long"].end_s
    assert math.isclose(max(w["long"].speeds), SpeedModel(inst).best_speed(jobs[1].manifest))
    # the planning engine makes the same choice as a decision of its schedule: wait for H100
    assert math.isclose(max(p["long"].speeds), SpeedModel(inst).best_speed(jobs[1].manifest))
    assert p["long"].end_s < n["long"].end_s


@pytest.mark.parametrize("stretch", [True, False])
def test_a_gang_the_horizon_cannot_hold_is_reserved_once_it_has_waited(stretch):
    """A whole-cluster gang arrives behind a job running past the 2 h horizon; half-cluster
    jobs of 8 h of work keep arriving. With the stretched horizon (sim.planning.
    STRETCH_HORIZON) the gang, forecast past the horizon once it has waited
    reserve_after_s, is planned and reserved: it starts as soon as the jobs that started
    before then have ended (later ones only backfill, ending before it). Without, it is
    never reserved: later long jobs keep taking the GPUs it needs. (With ``make_room``,
    on by default, the 10-minute gang would stop the long jobs instead: off here, the
    horizon's rule alone.)"""
    from hyperplace.sim.planning import RESERVE_AFTER_S

    inst = tiny_instance()
    work = 8 * 3600.0
    jobs = [job("first", 16, 0, work), job("whole", 32, 60, 600)]
    jobs += [job(f"next{i}", 16, 120 + i * 2400.0, work) for i in range(8)]
    cfg = SimConfig(round_s=60, horizon_s=2 * 3600.0, prediction_sigma=0.0, check=True,
                    engine_stretch_horizon=stretch, engine_make_room=False)
    run = simulate(inst, jobs, "engine", cfg)
    assert run.unfinished == 0
    rec = {r.job.name: r for r in run.records}
    whole = rec["whole"].first_start_s
    waited = jobs[1].submit_s + RESERVE_AFTER_S
    before = max(r.end_s for r in rec.values() if r.first_start_s < waited)
    assert before > jobs[1].submit_s + cfg.horizon_s  # the horizon cannot hold the gang
    if stretch:
        assert whole <= before + cfg.round_s, (whole, before)
    else:
        assert whole > before + 4 * 3600.0, (whole, before)


def test_every_engine_field_of_simconfig_reaches_the_planning_engine():
    """planning_settings' tables (hyperplace.sim.simulator): every ``engine_*`` field of
    SimConfig is mapped, each to a keyword PlanningEngine takes, and a field left None is
    not passed (the engine keeps its own default) while a set one is."""
    import dataclasses
    import inspect

    from hyperplace.sim import simulator
    from hyperplace.sim.planning import PlanningEngine
    from hyperplace.sim.simulator import SimConfig, planning_settings

    fields = {f.name for f in dataclasses.fields(SimConfig)}
    mapped = {**simulator._PLANNING_ALWAYS, **simulator._PLANNING_IF_SET}
    assert {f for f in fields if f.startswith("engine_")} <= set(mapped.values())
    assert set(mapped) <= set(inspect.signature(PlanningEngine).parameters)
    assert set(mapped.values()) <= fields
    base = planning_settings(SimConfig())
    assert not set(simulator._PLANNING_IF_SET) & set(base)
    assert planning_settings(SimConfig(engine_room_share=0.25))["room_share"] == 0.25
    assert base["clock"] == SimConfig().engine_clock
