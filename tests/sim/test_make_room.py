"""The planning engine's ``make_room`` (sim.planning.MAKE_ROOM): a waiting job whose run is
short against the wait its schedule gives it stops running jobs to start now; the victims
lose only the work since their last checkpoint and run again. Every round is checked by
the independent checker (``check=True``: the preemptions' rule, lost work and need)."""

from __future__ import annotations

import dataclasses

import pytest

from hyperplace.sim.planning import (
    RESERVE_AFTER_S,
    ROOM_MAX_RUN_S,
    PlanningEngine,
)
from hyperplace.sim.simulator import SimConfig, simulate

from tests.sim.test_sim import job, tiny_instance

LONG = 40 * 3600.0  # work of the jobs holding the cluster: far past the 24 h horizon


def _replay(make_room: bool, whole_work: float):
    """Two 16-GPU jobs of 40 h hold the 32-GPU cluster; a whole-cluster job arrives once
    they have run longer than ROOM_EXEMPT_S."""
    jobs = [job("long0", 16, 0, LONG, ckpt=1800.0), job("long1", 16, 0, LONG, ckpt=1800.0),
            job("whole", 32, 4000, whole_work)]
    cfg = SimConfig(round_s=60, prediction_sigma=0.0, check=True,
                    engine_make_room=make_room)
    run = simulate(tiny_instance(), jobs, "engine", cfg)
    assert run.unfinished == 0
    return {r.job.name: r for r in run.records}


def test_a_short_whole_cluster_job_stops_the_long_ones_and_they_run_again():
    rec = _replay(True, 300.0)
    whole = rec["whole"]
    # it waited reserve_after_s (30 min), not the 40 h of the long jobs, and its first
    # forecast said so (not the list schedule's start behind them)
    assert whole.first_start_s - whole.job.submit_s <= RESERVE_AFTER_S + 2 * 60.0
    assert abs(whole.forecast_start_s - whole.first_start_s) <= 120.0
    for name in ("long0", "long1"):
        r = rec[name]
        assert r.preemptions == 1
        # the victims lost what they ran since their last checkpoint (30 min), no more
        assert 0 < r.lost_preempted_gpu_s <= 1800.0 * 16
        assert r.end_s > whole.end_s  # and finished after it
        # two pieces: to the stop, then from the restart to the end, each closed
        (s0, e0, _), (s1, e1, _) = r.pieces
        assert s0 == r.first_start_s and s0 < e0 <= s1 < e1 == r.end_s
        assert (e0 - s0) + (e1 - s1) == pytest.approx(r.run_s)
    assert [(s, e) for s, e, _ in whole.pieces] == [(whole.first_start_s, whole.end_s)]
    without = _replay(False, 300.0)
    assert without["whole"].first_start_s >= min(without[n].end_s for n in ("long0", "long1"))
    assert without["whole"].forecast_start_s > whole.first_start_s + 10 * 3600.0
    assert all(without[n].preemptions == 0 for n in ("long0", "long1"))


def test_a_long_job_does_not_stop_others():
    rec = _replay(True, 2 * ROOM_MAX_RUN_S)  # its run is too long to stop others for
    assert all(rec[n].preemptions == 0 for n in ("long0", "long1"))
    assert rec["whole"].first_start_s >= min(rec[n].end_s for n in ("long0", "long1"))


def test_a_job_is_not_stopped_before_it_has_run_room_exempt_s(monkeypatch):
    monkeypatch.setattr("hyperplace.sim.planning.ROOM_EXEMPT_S", 3600.0)
    jobs = [job("long0", 16, 0, LONG, ckpt=1800.0), job("long1", 16, 0, LONG, ckpt=1800.0),
            job("whole", 32, 60, 300.0)]
    cfg = SimConfig(round_s=60, prediction_sigma=0.0, check=True, engine_make_room=True)
    run = simulate(tiny_instance(), jobs, "engine", cfg)
    rec = {r.job.name: r for r in run.records}
    # it has waited RESERVE_AFTER_S by 1,860 s, but the long jobs are exempt (1 h) until 3,600 s:
    # it starts at the round then (the engine asks for one), not before
    assert 3600.0 <= rec["whole"].first_start_s <= 3600.0 + 120.0
    assert all(rec[n].preemptions == 1 for n in ("long0", "long1"))


def test_a_job_is_stopped_at_most_room_max_stops_times(monkeypatch):
    monkeypatch.setattr("hyperplace.sim.planning.ROOM_MAX_STOPS", 1)
    jobs = [job("long0", 16, 0, LONG, ckpt=1800.0), job("long1", 16, 0, LONG, ckpt=1800.0),
            job("whole", 32, 4000, 300.0), job("again", 32, 4000 + 3 * 3600.0, 300.0)]
    cfg = SimConfig(round_s=60, prediction_sigma=0.0, check=True, engine_make_room=True)
    run = simulate(tiny_instance(), jobs, "engine", cfg)
    rec = {r.job.name: r for r in run.records}
    assert all(rec[n].preemptions == 1 for n in ("long0", "long1"))
    assert rec["again"].first_start_s >= min(rec[n].end_s for n in ("long0", "long1"))
    # and its forecast never said it would stop them (it said "in 30 min" before)
    assert all(point >= rec["again"].first_start_s - 600.0
               for _, point, _, _ in rec["again"].forecasts)


def test_make_room_is_a_bool():
    with pytest.raises(ValueError, match="make_room"):
        PlanningEngine(make_room="yes")
    with pytest.raises(ValueError, match="room_promises"):
        PlanningEngine(room_promises="yes")


def _with_priority(j, priority):
    m = j.manifest
    return dataclasses.replace(j, manifest=m.model_copy(update={"spec": m.spec.model_copy(
        update={"priority": priority})}))


def _rooms(jobs):
    cfg = SimConfig(round_s=60, prediction_sigma=0.0, check=True, engine_make_room=True)
    run = simulate(tiny_instance(), jobs, "engine", cfg)  # the checker on every round
    assert run.unfinished == 0
    return {r.job.name: r for r in run.records}


def test_a_job_a_waiting_job_outranks_stops_no_one():
    # "big" (critical, 3 h: too long to stop others itself) waits for the cluster too: the
    # short job may not stop the long ones (big could take their GPUs: the checker's
    # priority order; it failed the round before)
    jobs = [job("long0", 16, 0, LONG, ckpt=1800.0), job("long1", 16, 0, LONG, ckpt=1800.0),
            _with_priority(job("big", 32, 3000, 3 * 3600.0), "critical"),
            job("whole", 32, 4000, 300.0)]
    rec = _rooms(jobs)
    assert all(rec[n].preemptions == 0 for n in ("long0", "long1"))


def test_a_critical_short_job_stops_lower_ones_while_an_equal_one_waits():
    # the job stops the normal jobs at its own priority (not one above the running jobs',
    # which "big" would outrank)
    jobs = [job("long0", 16, 0, LONG, ckpt=1800.0), job("long1", 16, 0, LONG, ckpt=1800.0),
            _with_priority(job("big", 32, 3000, 3 * 3600.0), "critical"),
            _with_priority(job("whole", 32, 4000, 300.0), "critical")]
    rec = _rooms(jobs)
    assert all(rec[n].preemptions == 1 for n in ("long0", "long1"))
    assert rec["whole"].first_start_s - rec["whole"].job.submit_s <= RESERVE_AFTER_S + 120.0


def test_a_running_job_of_a_higher_priority_is_not_stopped():
    # long0 (high) has the least work lost since its checkpoint, but outranks the job
    jobs = [_with_priority(job("long0", 16, 0, LONG, ckpt=60.0), "high"),
            job("long1", 16, 0, LONG, ckpt=1800.0), job("half", 16, 4000, 300.0)]
    rec = _rooms(jobs)
    assert rec["long0"].preemptions == 0
    assert rec["long1"].preemptions == 1


def test_a_refused_room_is_not_forecast():
    # no checkpoints: stopping the long jobs after 30 h loses more than the wait it saves
    jobs = [job("long0", 16, 0, LONG, ckpt=0.0), job("long1", 16, 0, LONG, ckpt=0.0),
            job("whole", 32, 30 * 3600.0, 300.0)]
    rec = _rooms(jobs)
    whole = rec["whole"]
    assert all(rec[n].preemptions == 0 for n in ("long0", "long1"))
    # it qualifies when it has waited RESERVE_AFTER_S, and is refused: from then on its
    # forecast is the list schedule's (it said "in 1 min" at every round before)
    after = [point for at, point, _, _ in whole.forecasts
             if at >= whole.job.submit_s + RESERVE_AFTER_S]
    assert after and all(point >= whole.first_start_s - 600.0 for point in after)


@pytest.mark.parametrize("clock", ["wall", "work"])
def test_the_room_solve_gets_what_is_left_of_the_round_budget(monkeypatch, clock):
    """With ``clock="wall"`` (the service's) the room's placement solve is inside the round's
    budget (what is left of it), as the pools' solves are; with ``"work"`` it gets the budget
    each of the round's placement solves gets: PLACE_CEILING_S, its search limited by work
    (PLACE_WORK)."""
    import hyperplace.sim.planning as planning

    seen = []
    real = planning.solve_placement

    def spy(inst, **kw):
        if kw.get("preemption") == "lower-priority":
            seen.append(kw["budget_s"])
        return real(inst, **kw)

    monkeypatch.setattr(planning, "solve_placement", spy)
    jobs = [job("long0", 16, 0, LONG, ckpt=1800.0), job("long1", 16, 0, LONG, ckpt=1800.0),
            job("whole", 32, 4000, 300.0)]
    cfg = SimConfig(round_s=60, prediction_sigma=0.0, check=True, engine_make_room=True,
                    engine_clock=clock, budget_s=2.0)
    run = simulate(tiny_instance(), jobs, "engine", cfg)
    assert {r.job.name: r.preemptions for r in run.records}["long0"] == 1
    assert seen
    if clock == "wall":
        assert all(b < 2.0 for b in seen)  # the schedule took part of the round before it
    else:  # work: PLACE_CEILING_S of wall (above the round's ceiling), CP-SAT's work limit
        assert all(b == planning.PLACE_CEILING_S > planning.CEILING_BUDGETS * 2.0
                   for b in seen)


@pytest.mark.parametrize("args,want", [([], None), (["--make-room"], True),
                                       (["--no-make-room"], False)])
def test_simulate_s_make_room_flag_reaches_the_replay(monkeypatch, args, want):
    """``simulate --no-make-room`` turns it off, ``--make-room`` on for every engine (the
    federated one too); without either the config leaves each engine its own default."""
    import hyperplace.sim.run as run
    from cli_run import run_main

    seen = {}

    def fake(instance, req, config, **kw):
        seen["config"] = config
        raise SystemExit(0)

    monkeypatch.setattr(run, "run_simulation", fake)
    assert run_main(["simulate", "--jobs", "3", "--no-progress", "--policy", "engine",
                     *args]) == 0
    assert seen["config"].engine_make_room is want


def test_the_federated_engine_keeps_make_room_off_unless_the_replay_sets_it():
    from hyperplace.fedsim.planned import FederatedEngine
    from hyperplace.instances import load_instance

    inst = load_instance("seed-beijing-shanghai")
    assert PlanningEngine().make_room is True
    assert FederatedEngine(inst).make_room is False
    assert FederatedEngine(inst, planning={"make_room": True}).make_room is True


@pytest.mark.parametrize("args,warned", [
    (["--make-room", "--preemption", "reclaim-within-cohort"], True),
    (["--make-room", "--defrag"], True),
    (["--no-make-room", "--defrag"], False),  # the round engine makes no room anyway
    (["--make-room"], False),
])
def test_simulate_warns_when_make_room_cannot_reach_the_round_engine(monkeypatch, capsys, args,
                                                                     warned):
    """With ``--preemption``, ``--defrag`` or declared queues ``engine`` is the round engine
    (make_policy), which never makes room: an explicit ``--make-room`` says it is ignored."""
    import hyperplace.sim.run as run
    from cli_run import run_main

    def fake(instance, req, config, **kw):
        raise SystemExit(0)

    monkeypatch.setattr(run, "run_simulation", fake)
    assert run_main(["simulate", "--jobs", "3", "--no-progress", "--policy", "engine",
                     *args]) == 0
    assert ("--make-room: with declared queues" in capsys.readouterr().err) is warned


@pytest.mark.parametrize("share,stops", [(0.05, 2), (1e-4, 1)])
def test_room_share_lets_a_job_be_stopped_again_while_its_stops_cost_it_little(
        monkeypatch, share, stops):
    """With ``room_share`` the count rule (here one stop) gives way to a cost rule: the long
    jobs, which ran again at once after their first stop and lost at most a checkpoint's
    30 min of 40 h, may be stopped for the second short gang at 5 % (2 stops); at 0.01 %
    their first stop's cost already protects them (1 stop), as the count rule would."""
    monkeypatch.setattr("hyperplace.sim.planning.ROOM_MAX_STOPS", 1)
    jobs = [job("long0", 16, 0, LONG, ckpt=1800.0), job("long1", 16, 0, LONG, ckpt=1800.0),
            job("whole", 32, 4000, 300.0), job("again", 32, 4000 + 3 * 3600.0, 300.0)]
    cfg = SimConfig(round_s=60, prediction_sigma=0.0, check=True, engine_make_room=True,
                    engine_room_share=share)
    run = simulate(tiny_instance(), jobs, "engine", cfg)
    rec = {r.job.name: r for r in run.records}
    assert run.unfinished == 0
    assert all(rec[n].preemptions == stops for n in ("long0", "long1"))
    started_again = rec["again"].first_start_s - rec["again"].job.submit_s
    if stops == 2:  # it stopped them too: it waited its 30 min, not their 40 h
        assert started_again <= RESERVE_AFTER_S + 2 * 60.0
    else:
        assert rec["again"].first_start_s >= min(rec[n].end_s for n in ("long0", "long1"))


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), True, "0.1"])
def test_room_share_must_be_a_positive_number(bad):
    with pytest.raises(ValueError, match="room_share"):
        PlanningEngine(room_share=bad)


def test_room_forecasts_stop_once_most_were_broken(monkeypatch):
    """``room_promises`` (off by default, ROOM_PROMISES). Every room refused (a gain no room reaches): the first job is forecast "in 30 min,
    stopping running jobs" (too few forecasts resolved to know better); each such forecast
    (a refused job waiting is forecast a room again at the next rounds) is broken when its
    window passes, and once ROOM_PROMISE_MIN are, a new job's first forecast is the list
    schedule's (behind the long jobs), which is about when it starts."""
    import hyperplace.sim.planning as planning
    from hyperplace.sim.forecast import ROOM_PROMISE_MIN

    monkeypatch.setattr(planning, "ROOM_GAIN", 1e12)
    hold = 8 * 3600.0
    jobs = [job("long0", 16, 0, hold), job("long1", 16, 0, hold)]
    jobs += [job(f"whole{k}", 32, 4000.0 + k * 2400.0, 300.0) for k in range(8)]
    cfg = SimConfig(round_s=60, prediction_sigma=0.0, check=True, engine_make_room=True,
                    engine_room_promises=True)
    run = simulate(tiny_instance(), jobs, "engine", cfg)
    assert run.unfinished == 0
    rec = {r.job.name: r for r in run.records}
    assert all(rec[n].preemptions == 0 for n in ("long0", "long1"))
    # off (the default): every one of them is forecast a room it never gets
    off = simulate(tiny_instance(), jobs, "engine", dataclasses.replace(
        cfg, engine_room_promises=None))
    assert all(r.forecast_start_s - r.job.submit_s <= RESERVE_AFTER_S + 600.0
               for r in off.records if r.job.name.startswith("whole"))
    first = rec["whole0"]  # promised a room, never given one
    assert first.forecast_start_s - first.job.submit_s <= RESERVE_AFTER_S + 600.0
    assert first.first_start_s >= hold
    for r in (rec[f"whole{k}"] for k in range(ROOM_PROMISE_MIN, 8)):
        assert r.first_start_s >= hold
        assert r.forecast_start_s >= hold - 600.0  # not "in 30 min"
        assert abs(r.forecast_start_s - r.first_start_s) <= 3600.0
