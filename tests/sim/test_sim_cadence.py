"""Peers decide at their upstream cadence (review R32): Kueue at every event, Volcano every
second, Slurm's backfill every 30 s with its main scheduler at every submission and end;
``cadence="uniform"`` puts every policy on the replay's ``round_s`` (the earlier replays)."""

from __future__ import annotations

import pytest

from hyperplace.sim.policies import (KUEUE_CADENCE_S, SLURM_BACKFILL_S, VOLCANO_CADENCE_S,
                                     make_policy)
from hyperplace.sim.simulator import SimConfig, simulate

from tests.sim.test_sim_peers import fat_tree, sim_job


def records(policy: str, jobs, **config) -> dict:
    run = simulate(fat_tree(), jobs, policy, SimConfig(check=True, **config))
    assert run.unfinished == 0
    return {r.job.name: r for r in run.records}


def starts(policy: str, jobs, **config) -> dict[str, float]:
    return {n: r.first_start_s for n, r in records(policy, jobs, **config).items()}


def test_upstream_cadences_are_the_cited_defaults():
    inst = fat_tree()
    assert make_policy("kueue", inst).cadence_s == KUEUE_CADENCE_S == 0.0
    assert make_policy("kueue-strict", inst).cadence_s == 0.0
    assert make_policy("volcano", inst).cadence_s == VOLCANO_CADENCE_S == 1.0
    assert make_policy("volcano-proportion", inst).cadence_s == 1.0
    slurm = make_policy("slurm", inst)
    assert slurm.cadence_s == SLURM_BACKFILL_S == 30.0 and slurm.fills_between_rounds
    assert make_policy("engine", inst).cadence_s is None  # the replay's round_s


@pytest.mark.parametrize("policy,expected", [("kueue", 7.3), ("kueue-strict", 7.3),
                                             ("fifo", 7.3), ("volcano", 8.0),
                                             ("slurm", 7.3)])
def test_a_job_on_a_free_cluster_starts_at_the_peers_cadence(policy, expected):
    got = starts(policy, [sim_job("a", 8, 7.3, 600.0)])
    assert got["a"] == pytest.approx(expected)
    # uniform: every policy at round_s, as the replays before
    assert starts(policy, [sim_job("a", 8, 7.3, 600.0)], cadence="uniform")["a"] == 60.0


def test_slurm_main_scheduler_stops_at_the_first_job_that_cannot_start_backfill_goes_on():
    # 32 GPUs: a blocker holds 24; the head asks 32 (waits for the blocker), a short 8-GPU
    # job behind it fits beside the blocker and ends before the blocker does
    jobs = [sim_job("blocker", 24, 0.0, 1000.0), sim_job("head", 32, 5.0, 600.0),
            sim_job("short", 8, 6.0, 100.0)]
    rec = records("slurm", jobs)
    assert rec["blocker"].first_start_s == 0.0  # the main scheduler at its submission
    # the main scheduler stops at the head: the short job waits for the backfill cycle
    assert rec["short"].first_start_s == SLURM_BACKFILL_S
    assert rec["head"].first_start_s == pytest.approx(rec["blocker"].end_s)  # at the end
    # Kueue BestEffortFIFO admits the short job at its own arrival (no head-of-line block)
    assert starts("kueue", [sim_job("blocker", 24, 0.0, 1000.0), sim_job("head", 32, 5.0, 600.0),
                            sim_job("short", 8, 6.0, 100.0)])["short"] == 6.0


def test_slurm_main_scheduler_starts_the_head_at_a_job_end():
    # the head waits for the blocker's end and starts then, not at the next cycle
    def jobs():
        return [sim_job("blocker", 32, 0.0, 500.0), sim_job("head", 32, 5.0, 600.0)]
    rec = records("slurm", jobs())
    end = rec["blocker"].end_s
    assert end % SLURM_BACKFILL_S != 0  # not on a cycle: the event started it
    assert rec["head"].first_start_s == pytest.approx(end)
    rec = records("slurm", jobs(), cadence="uniform")  # the next 60 s round
    assert rec["head"].first_start_s == 60.0 * -(-rec["blocker"].end_s // 60.0)


def test_a_row_says_its_cadence_and_the_config_is_checked():
    from hyperplace.sim.metrics import summarize

    run = simulate(fat_tree(), [sim_job("a", 8, 0.0, 60.0)], "volcano", SimConfig())
    row = summarize(run)
    assert row["cadence_s"] == 1.0 and row["fills_at_events"] is False
    row = summarize(simulate(fat_tree(), [sim_job("a", 8, 0.0, 60.0)], "slurm", SimConfig()))
    assert row["cadence_s"] == 30.0 and row["fills_at_events"] is True
    with pytest.raises(ValueError, match="cadence: use upstream or uniform"):
        simulate(fat_tree(), [sim_job("a", 8, 0.0, 60.0)], "kueue", SimConfig(cadence="1s"))


def test_simulate_refuses_an_unknown_peer_cadence_in_one_line(capsys):
    from cli_run import run_main

    code = run_main(["simulate", "--jobs", "3", "--no-progress", "--peer-cadence", "1s"])
    err = capsys.readouterr().err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and "--peer-cadence" in lines[0], err
    assert "upstream or uniform" in lines[0]


def test_karmada_divisions_decide_at_every_event_as_their_members_kueue():
    from hyperplace.fedsim.karmada import KarmadaDivision
    from hyperplace.instances import load_instance

    fed = load_instance("seed-beijing-shanghai")
    assert KarmadaDivision(fed, "aggregated").cadence_s == KUEUE_CADENCE_S
    run = simulate(fed, [], KarmadaDivision(fed, "dynamic"), SimConfig())
    assert run.cadence_s == 0.0
    assert simulate(fed, [], KarmadaDivision(fed, "dynamic"),
                    SimConfig(cadence="uniform")).cadence_s == 60.0


def test_engine_fill_keeps_reaches_the_planning_engine():
    with pytest.raises(ValueError, match="^engine_fill_keeps: use plan, gangs or reservations"):
        simulate(fat_tree(), [sim_job("a", 8, 0.0, 60.0)], "engine",
                 SimConfig(engine_fill_keeps="everything"))
    run = simulate(fat_tree(), [sim_job("a", 8, 0.0, 60.0)], "engine",
                   SimConfig(engine_fill_keeps="reservations", check=True))
    assert run.unfinished == 0


def test_slurm_runs_a_switches_job_across_leaves_at_the_cycle_after_max_switch_wait():
    # review: with nothing else happening no round came, and the replay ended with the job
    # unfinished; Slurm's backfill cycle (every 30 s) starts it once max_switch_wait (300 s)
    # has run out: submitted at 10 s, due at 310 s, started at the 330 s cycle
    from hyperplace.baselines.slurm import MAX_SWITCH_WAIT_S
    from hyperplace.instances.generator import model_parallel_job
    from hyperplace.sim.jobs import SimJob

    m = model_parallel_job("big", "llama3-70b", replicas=3, memory_gb=None, dp_ib_gbps=None,
                           dp_max_hops=1)  # 24 GPUs on one leaf of 16: only across leaves
    job = SimJob(name="big", submit_s=10.0, work_s=600.0, gpus=24, manifest=m)
    run = simulate(fat_tree(), [job], "slurm", SimConfig(check=False))
    assert run.unfinished == 0
    start = run.records[0].first_start_s
    assert start == SLURM_BACKFILL_S * -(-(10.0 + MAX_SWITCH_WAIT_S) // SLURM_BACKFILL_S) == 330


@pytest.mark.parametrize("rule", ["kueue", "slurm", "volcano"])
def test_a_job_skipped_by_count_is_one_the_rule_cannot_place(rule):
    # QueuePolicy and Slurm's main scheduler skip place() for a job with fewer free GPUs of
    # its accepted types than it asks (Kueue at every event: 44 -> 7 s of a replay); a skip
    # must be a job the rule would refuse, and Volcano (random tie-breaks) is never skipped
    import random

    from hyperplace.sim.peers import PeerPlacer

    inst = fat_tree(nodes_per_leaf=2, leaves=2)
    rnd = random.Random(7)
    skipped = 0
    for trial in range(60):
        placer = PeerPlacer(inst, rule, seed=trial)
        fs = placer.state(inst)
        for n in fs.free:  # a random share of each node's GPUs taken
            fs.free[n] = sorted(rnd.sample(fs.free[n], rnd.randint(0, len(fs.free[n]))))
        gpus = rnd.choice([1, 2, 4, 8, 16, 24, 32])
        job = sim_job(f"j{trial}", gpus, 0.0, 60.0)
        skip = placer.cannot_fit(job.name, job.manifest, fs, job.gpus)
        free = sum(len(v) for v in fs.free.values())
        assert skip == (rule != "volcano" and free < gpus)
        if skip:
            skipped += 1
            assert placer.place(job.manifest, fs.copy()) is None
    assert rule == "volcano" or skipped > 5


def test_the_schedule_objective_has_one_default():
    """The planning engine's measured objective (sim.planning.OBJECTIVE) is the default of
    SimConfig and of simulate --schedule-objective, not three literals that can drift."""
    import inspect

    from hyperplace.commands import simulate as cmd
    from hyperplace.sim import planning

    assert SimConfig().schedule_objective == planning.OBJECTIVE
    assert SimConfig().engine_stretch_horizon == planning.STRETCH_HORIZON  # and this one
    assert inspect.signature(planning.PlanningEngine).parameters["stretch_horizon"].default \
        == planning.STRETCH_HORIZON
    assert inspect.signature(planning.PlanningEngine).parameters["objective"].default == \
        planning.OBJECTIVE
    fn = next(f for name, f in vars(cmd).items() if callable(f) and
              "schedule_objective" in getattr(inspect.signature(f), "parameters", {})
              if inspect.isfunction(f))
    assert inspect.signature(fn).parameters["schedule_objective"].default == planning.OBJECTIVE
