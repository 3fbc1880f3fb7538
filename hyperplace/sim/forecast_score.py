"""How good a replay's start forecasts were (:func:`forecast_metrics`; policies with a
schedule: the planning engine).

Every figure scores the forecast the policy gave as its answer (``forecasts()``: what the
engine's plan says, corrected or not) against the job's actual first start, from the
history the simulator kept (:attr:`hyperplace.sim.jobs.JobRecord.forecasts`: every round's
forecast of a waiting job, the start window with it when the policy gives one):

* ``at submission`` (the headline, the issue's goal): the job's *first* forecast (the round
  after it arrived), for the jobs that waited :data:`LONG_WAIT_S` or more: median of
  ``|forecast - start| / wait`` (``long_wait_median_error_over_wait``); the same by job
  size (:data:`FORECAST_SIZES`, GPUs) and the absolute errors of every job;
* ``time_averaged_error_over_wait``: per job, the forecast in force at each moment of its
  wait (piecewise constant between rounds), ``|forecast - start|`` averaged over the wait,
  over the wait; median over the same jobs (what a user who looks at any time sees);
* ``by_lead``: for each lead time L of :data:`LEADS_S`, the forecast in force L before the
  job's start (jobs that had a forecast then): median ``|forecast - start|`` and its median
  over L (how far ahead the forecast is good);
* ``window``: how often the actual start fell inside the forecast's start window (first
  forecast; long-wait jobs and all jobs) and the window's median width over the wait;
* ``planned_long``: the at-submission ratio for the jobs whose *first forecast* said 10 min
  or more (selected on the forecast, not on the outcome: the headline's selection on the
  actual wait favours forecasts biased late, this one does not).

Kept out of :mod:`hyperplace.sim.metrics`' imports (it imports this module only for a run
with forecasts), so a change here does not touch what the peers' replays import.
"""

from __future__ import annotations

from typing import Any

from hyperplace.sim.metrics import mean_or_none, percentile

#: The metric's job-size classes (GPUs) and long-wait threshold (the issue's: 10 minutes);
#: the forecast correction learns on the same (hyperplace.sim.forecast imports these).
FORECAST_SIZES = ((1, 1), (2, 8), (9, 64), (65, 10 ** 9))
LONG_WAIT_S = 600.0
#: Lead times (seconds before the actual start) at which :func:`forecast_metrics` scores
#: the forecast then in force.
LEADS_S = (600.0, 1800.0, 3600.0, 3 * 3600.0, 12 * 3600.0)


def _size_name(lo: int, hi: int) -> str:
    return f"{lo}-{hi}" if hi < 10 ** 9 else f"{lo}+"


def in_force(history: list, at: float):
    """The entry of ``history`` (``(made_at, start, lo, hi)``, oldest first) in force at
    ``at``: the last made at or before it (None: none yet)."""
    got = None
    for h in history:
        if h[0] > at:
            break
        got = h
    return got


def time_averaged_error(history: list, start: float) -> float | None:
    """``|forecast - start|`` averaged over ``[first forecast, start]``, each forecast held
    until the next (an unplanned one, start None, counts as ``start - made_at``: no answer
    is as bad as "now")."""
    pts = [h for h in history if h[0] <= start]
    if not pts or start <= pts[0][0]:
        return None
    acc = 0.0
    for a, b in zip(pts, [*pts[1:], (start, None, None, None)]):
        f = a[1] if a[1] is not None else a[0]
        acc += abs(f - start) * (b[0] - a[0])
    return acc / (start - pts[0][0])


def forecast_metrics(run) -> dict[str, Any] | None:
    """The module docstring's figures for ``run``'s records (None: no forecasts)."""
    if not any(r.forecast_at_s is not None for r in run.records):
        return None
    rows = [r for r in run.records if r.forecast_start_s is not None
            and r.first_start_s is not None]

    def stats(rs: list) -> dict[str, Any]:
        err = [abs(r.first_start_s - r.forecast_start_s) for r in rs]
        return {"jobs": len(rs), "median_abs_error_s": percentile(err, 0.5),
                "mean_abs_error_s": mean_or_none(err), "p90_abs_error_s": percentile(err, 0.9)}

    def wait(r) -> float:
        return r.first_start_s - r.job.submit_s

    def ratio(r) -> float:
        return abs(r.first_start_s - r.forecast_start_s) / wait(r)

    out = stats(rows)
    long = [r for r in rows if wait(r) >= LONG_WAIT_S]
    out["by_size"] = {_size_name(lo, hi): {
        **stats([r for r in rows if lo <= r.job.gpus <= hi]),
        "long_wait_jobs": sum(1 for r in long if lo <= r.job.gpus <= hi),
        "long_wait_median_error_over_wait": percentile(
            [ratio(r) for r in long if lo <= r.job.gpus <= hi], 0.5)}
        for lo, hi in FORECAST_SIZES}
    out["long_wait_jobs"] = len(long)
    out["long_wait_median_error_over_wait"] = percentile([ratio(r) for r in long], 0.5)
    out["forecast_scored"] = "first forecast (the round after submission)"
    out["unplanned"] = sum(1 for r in run.records if r.forecast_at_s is not None
                           and r.forecast_start_s is None)
    tavg = [e / wait(r) for r in long
            if (e := time_averaged_error(r.forecasts, r.first_start_s)) is not None]
    out["time_averaged_error_over_wait"] = percentile(tavg, 0.5)
    out["by_lead"] = lead_errors(rows)
    out["window"] = window_stats(rows, long)
    planned = [r for r in rows if r.forecast_at_s is not None
               and r.forecast_start_s - r.forecast_at_s >= LONG_WAIT_S]
    out["planned_long"] = {"jobs": len(planned), "median_error_over_wait": percentile(
        [abs(r.first_start_s - r.forecast_start_s) / max(wait(r), 60.0) for r in planned],
        0.5)}
    raw = [r for r in rows if r.raw_forecast_start_s is not None]
    if raw:  # the policy corrected its planned starts: the same figures before the correction
        out["raw"] = {
            "jobs": len(raw),
            "median_abs_error_s": percentile([abs(r.first_start_s - r.raw_forecast_start_s)
                                        for r in raw], 0.5),
            "long_wait_median_error_over_wait": percentile(
                [abs(r.first_start_s - r.raw_forecast_start_s) / wait(r)
                 for r in raw if wait(r) >= LONG_WAIT_S], 0.5)}
    return out


def lead_errors(rows: list) -> dict[str, Any]:
    """Per lead time of :data:`LEADS_S`: the forecast in force that long before each job's
    start (jobs that had one: they waited at least that long after their first forecast)."""
    out: dict[str, Any] = {}
    for lead in LEADS_S:
        err, rel = [], []
        for r in rows:
            h = in_force(r.forecasts, r.first_start_s - lead)
            if h is None or h[1] is None:
                continue
            e = abs(h[1] - r.first_start_s)
            err.append(e)
            rel.append(e / lead)
        key = f"{lead / 3600:g}h" if lead >= 3600 else f"{lead / 60:g}m"
        out[key] = {"jobs": len(err), "median_abs_error_s": percentile(err, 0.5),
                    "median_error_over_lead": percentile(rel, 0.5)}
    return out


def window_stats(rows: list, long: list) -> dict[str, Any] | None:
    """How often the first forecast's start window held the actual start.

    ``coverage`` counts only windows of starts planned later: a job started in the round it
    was first seen has the zero-width window ``[t, t]`` (the simulator's record), inside by
    construction, so counting it (``coverage_with_now``, kept beside) made the figure read
    as the calibrated windows' promise kept (review R24). ``now_jobs``: how many those are."""
    def first(r):
        return r.forecasts[0] if r.forecasts else None

    with_w = [r for r in rows if (f := first(r)) is not None and f[2] is not None
              and f[3] is not None]
    if not with_w:
        return None

    def inside(r) -> bool:
        f = first(r)
        return f[2] - 1e-6 <= r.first_start_s <= f[3] + 1e-6

    later = [r for r in with_w if first(r)[3] > first(r)[2]]
    ids = {id(r) for r in with_w}
    lw = [r for r in long if id(r) in ids]
    return {"jobs": len(with_w), "now_jobs": len(with_w) - len(later),
            "coverage": sum(map(inside, later)) / len(later) if later else None,
            "coverage_with_now": sum(map(inside, with_w)) / len(with_w),
            "long_wait_jobs": len(lw),
            "long_wait_coverage": sum(map(inside, lw)) / len(lw) if lw else None,
            "long_wait_median_width_over_wait": percentile(
                [(first(r)[3] - first(r)[2]) / (r.first_start_s - r.job.submit_s)
                 for r in lw], 0.5)}
