"""The forecast metric (hyperplace.sim.forecast_score): which forecast it scores, the
time-averaged, per-lead-time and window figures on records whose answers are worked out by
hand, and that the peers' replays do not import the schedule's modules through it."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from hyperplace.sim.forecast_score import forecast_metrics, in_force, time_averaged_error
from hyperplace.sim.jobs import JobRecord, SimJob
from tests.solvers.test_schedule import instance, manifest


def record(name: str, submit: float, start: float, history: list, gpus: int = 8
           ) -> JobRecord:
    m = manifest(name, gpus)
    rec = JobRecord(job=SimJob(name=name, submit_s=submit, work_s=100.0, gpus=gpus,
                               manifest=m), first_start_s=start)
    rec.forecasts = list(history)
    rec.forecast_at_s, rec.forecast_start_s = history[0][0], history[0][1]
    return rec


def test_time_averaged_error_holds_each_forecast_until_the_next():
    # start 3,600; forecast 1,800 from 0 to 1,200 (error 1,800), then 3,000 (error 600)
    h = [(0.0, 1800.0, None, None), (1200.0, 3000.0, None, None)]
    assert time_averaged_error(h, 3600.0) == pytest.approx((1800 * 1200 + 600 * 2400) / 3600)
    assert in_force(h, 1199.0)[1] == 1800.0 and in_force(h, 1200.0)[1] == 3000.0
    assert in_force(h, -1.0) is None
    # an unplanned forecast counts as "now" (its error: the time left)
    assert time_averaged_error([(0.0, None, None, None)], 600.0) == pytest.approx(600.0)


def test_the_metric_scores_the_first_forecast_and_the_later_ones_by_lead():
    a = record("a", 0.0, 3600.0, [(0.0, 1800.0, 1200.0, 4000.0), (1200.0, 3000.0, None, None),
                                  (3100.0, 3600.0, None, None)])
    b = record("b", 0.0, 7200.0, [(0.0, 7200.0, 7000.0, 7100.0)])
    c = record("c", 0.0, 60.0, [(0.0, 0.0, 0.0, 120.0)], gpus=1)  # waited < 10 min
    f = forecast_metrics(SimpleNamespace(records=[a, b, c]))
    assert f["forecast_scored"].startswith("first forecast")
    assert f["long_wait_jobs"] == 2
    # first forecasts: a off by 1,800 of a 3,600 s wait (0.5), b exact (0)
    assert f["long_wait_median_error_over_wait"] == pytest.approx(0.25)
    assert f["by_size"]["2-8"]["long_wait_median_error_over_wait"] == pytest.approx(0.25)
    assert f["by_size"]["1-1"]["long_wait_jobs"] == 0
    # 10 min before their starts: a's forecast then was 3,000 (600 off), b's exact
    lead = f["by_lead"]["10m"]
    assert lead["jobs"] == 3 - 1 and lead["median_abs_error_s"] == pytest.approx(300.0)
    assert lead["median_error_over_lead"] == pytest.approx(0.5)
    assert f["by_lead"]["1h"]["jobs"] == 2  # a's first forecast was made 1 h before
    # windows of the first forecasts: a inside [1,200, 4,000], b outside, c inside
    w = f["window"]
    assert w["jobs"] == 3 and w["coverage"] == pytest.approx(2 / 3) and w["now_jobs"] == 0
    assert w["long_wait_coverage"] == pytest.approx(0.5)
    # a job started at once has the zero-width window [t, t]: inside by construction, so it
    # is not counted in the coverage of planned windows (review R24), only beside it
    d = record("d", 0.0, 0.0, [(0.0, 0.0, 0.0, 0.0)], gpus=1)
    w = forecast_metrics(SimpleNamespace(records=[a, b, c, d]))["window"]
    assert w["now_jobs"] == 1 and w["coverage"] == pytest.approx(2 / 3)
    assert w["coverage_with_now"] == pytest.approx(3 / 4)
    # selected on the forecast (first forecast 10 min or more ahead): a and b
    assert f["planned_long"]["jobs"] == 2
    ta = f["time_averaged_error_over_wait"]
    assert ta == pytest.approx(((1800 * 1200 + 600 * 1900) / 3600 / 3600 + 0.0) / 2)


def test_a_run_without_forecasts_has_no_forecast_figures():
    from hyperplace.sim.metrics import forecast_metrics as via_metrics

    r = JobRecord(job=SimJob(name="x", submit_s=0.0, work_s=1.0, gpus=1,
                             manifest=manifest("x", 1)), first_start_s=5.0)
    assert via_metrics(SimpleNamespace(records=[r])) is None


def test_the_metrics_module_does_not_import_the_schedule():
    # the peers' replays import hyperplace.sim.metrics: the schedule's modules (the engine's)
    # stay out of them, so a change there does not re-run the peers' rows (bench_simulate)
    code = ("import sys, hyperplace.sim.metrics, hyperplace.sim.simulator; "
            "print(sorted(m for m in sys.modules if m in ('hyperplace.sim.forecast', "
            "'hyperplace.sim.forecast_score', 'hyperplace.solvers.schedule', "
            "'hyperplace.formulations.schedule', 'hyperplace.sim.planning')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_the_simulator_keeps_every_changed_forecast_of_a_waiting_job():
    from hyperplace.sim.simulator import SimConfig, simulate
    from tests.solvers.test_schedule import sim_job

    inst = instance(h_leaves=1, a_leaves=1)
    jobs = [sim_job(f"j{i}", 8 if i % 2 else 16, 30.0 * i, 1200.0) for i in range(10)]
    run = simulate(inst, jobs, "engine", SimConfig(round_s=60))
    for r in run.records:
        assert r.forecasts and r.forecasts[0][:2] == (r.forecast_at_s, r.forecast_start_s)
        times = [h[0] for h in r.forecasts]
        assert times == sorted(times)
        # a new entry only when the answer changed
        assert all(x[1:] != y[1:] for x, y in zip(r.forecasts, r.forecasts[1:]))
    assert any(len(r.forecasts) > 1 for r in run.records)


# ---- the calibrated forecast (hyperplace.sim.forecast.StartCalibration) ---------------------

def test_the_calibration_learns_a_start_only_at_the_round_after_it(monkeypatch):
    from hyperplace.sim import forecast
    from hyperplace.sim.forecast import StartCalibration

    monkeypatch.setattr(forecast, "CALIBRATION_MIN", 2)
    c = StartCalibration()
    c.record(0.0, {"a": 600.0, "b": 600.0, "c": None}, [])
    c.record(60.0, {"a": 600.0, "b": 600.0}, [])
    assert c.window(540.0) is None  # nothing started yet
    # a starts at 1,200 (planned 600 from 0 and 540 from 60): learnt at the next round only
    c.record(1200.0, {"b": 1500.0}, ["a"])
    assert c.samples == 0 and c.window(540.0) is None
    c.record(1260.0, {"b": 1500.0}, [])
    assert c.samples == 2
    # ratios (1,200 + 60) / (600 + 60) and (1,140 + 60) / (540 + 60), both in the 300-900 bin
    r = sorted([1260 / 660, 1200 / 600])
    lo, mid, hi = c.window(600.0)
    assert mid == pytest.approx(660 * (r[0] + r[1]) / 2 - 60)
    assert lo == pytest.approx(660 * (r[0] + 0.1 * (r[1] - r[0])) - 60)
    assert hi == pytest.approx(660 * (r[0] + 0.9 * (r[1] - r[0])) - 60)
    assert c.window(60.0) is None  # another bin: no observations
    # a job that leaves the queue without a start is forgotten, never learnt
    c.record(1320.0, {}, [])
    c.record(1380.0, {}, ["b"])
    c.record(1440.0, {}, [])
    assert c.samples == 2


def test_the_engine_shows_the_calibrated_forecast_it_is_scored_on_and_decides_the_same(
        monkeypatch):
    import copy
    import random

    from hyperplace.sim import forecast
    from hyperplace.sim.policies import make_policy
    from hyperplace.sim.simulator import SimConfig, simulate
    from tests.solvers.test_schedule import sim_job

    monkeypatch.setattr(forecast, "CALIBRATION_MIN", 3)
    inst = instance(h_leaves=1, a_leaves=1)
    rng = random.Random(3)
    jobs = [sim_job(f"j{i}", rng.choice([4, 8, 16]), 150.0 * i, rng.uniform(900, 4000))
            for i in range(18)]
    shown_rounds = []

    def replay(calibrate: bool):
        pol = make_policy("engine", inst, budget_s=1.0, schedule={
            "forecast_calibration": calibrate, "work_units": 0.004})
        if calibrate:
            decide = pol._decide

            def spy(view, between=False):
                d = decide(view, between)
                if between:  # a fill between rounds: forecasts stay the round's
                    return d
                fc, win = pol.forecasts(), pol.forecast_windows()
                plan = {f.job: f for f in d.plan.forecasts}
                for n, (s, _) in fc.items():  # the plan says what forecasts() gives
                    f = plan[n]
                    if s is None:
                        assert f.earliest_s is None
                        continue
                    lo, hi = win[n]
                    assert (lo, hi) == (view.now + f.earliest_s, view.now + f.latest_s)
                    assert lo - 1e-6 <= s <= hi + 1e-6
                    if "of such starts" in f.text:
                        shown_rounds.append(view.now)
                return d
            pol._decide = spy
        run = simulate(inst, copy.deepcopy(jobs), pol, SimConfig(round_s=60, check=True))
        assert run.unfinished == 0
        return run

    on, off = replay(True), replay(False)
    # decisions never read the forecasts: the same starts either way
    assert [(r.job.name, r.first_start_s) for r in on.records] == \
        [(r.job.name, r.first_start_s) for r in off.records]
    assert shown_rounds  # the calibration was used
    # the point shown is the schedule's planned start (CALIBRATION_POINT off), the window
    # the calibration's: wider than the schedule's 5-minute step somewhere
    assert all(r.forecast_start_s == r.raw_forecast_start_s for r in on.records)
    assert any(h[3] - h[2] > 300.0 for r in on.records for h in r.forecasts
               if h[2] is not None)
    from hyperplace.sim.metrics import summarize

    f = summarize(on)["forecast"]
    assert "raw" in f and f["window"]["jobs"] > 0
    assert "raw" not in summarize(off)["forecast"]


def test_the_forecast_is_a_list_schedule_of_the_round_that_the_checker_passes_and_decides_the_same():
    """FORECAST_LIST: the engine's forecast is a plain list schedule of the round's problem
    (no kept reservations), the round's starts fixed now; decisions are the same with it
    off, the forecast differs from the engine's schedule somewhere, and every round's
    forecast schedule passes the independent schedule checker."""
    import copy
    import random

    from hyperplace.check.schedule import check_schedule
    from hyperplace.sim.policies import make_policy
    from hyperplace.sim.simulator import SimConfig, simulate
    from hyperplace.solvers.schedule import slots
    from tests.solvers.test_schedule import sim_job

    inst = instance(h_leaves=1, a_leaves=1)
    rng = random.Random(5)
    jobs = [sim_job(f"j{i}", rng.choice([4, 8, 16]), 120.0 * i, rng.uniform(900, 6000))
            for i in range(24)]
    differs, checked = [], []

    def replay(listed: bool):
        pol = make_policy("engine", inst, budget_s=1.0, schedule={
            "forecast_list": listed, "work_units": 0.004})
        decide = pol._decide

        def spy(view, between=False):
            d = decide(view, between)
            if between:  # a fill between rounds: the forecast stays the round's
                return d
            fres = pol.last_forecast
            assert fres.problem is pol.last.problem  # the same round's problem
            started = set(d.starts)
            for n in started:  # the round's starts are fixed now in the forecast
                assert fres.entries[n].start_step == 0
            if listed:
                bad = check_schedule(pol.last_instance, list(pol.last_instance.jobs),
                                     slots(fres), pol.last_running, view.now)
                assert bad == []
                checked.append(view.now)
                raw = pol.raw_forecasts()
                if any(raw[n][0] != pol.last.start_s(n) for n in raw if n not in started):
                    differs.append(view.now)
            return d
        pol._decide = spy
        run = simulate(inst, copy.deepcopy(jobs), pol, SimConfig(round_s=60, check=True))
        assert run.unfinished == 0
        return run

    on, off = replay(True), replay(False)
    assert [(r.job.name, r.first_start_s) for r in on.records] == \
        [(r.job.name, r.first_start_s) for r in off.records]
    assert checked and differs
