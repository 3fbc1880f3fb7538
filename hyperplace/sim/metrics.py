"""Metrics of a replay, per policy, and their JSON / CSV / PNG output.

* JCT (completion time - submit time): mean, median, p99; queueing delay (all time spent
  waiting, re-queues included): mean, median, p99.
* Bounded slowdown: ``max(1, JCT / max(reference run time, 10 s))`` (Feitelson's bounded
  slowdown, threshold 10 s; the reference run time is the job's work at speed 1.0), mean
  and p99: mean JCT alone is dominated by the few jobs that run for weeks.
* Makespan: last completion - first submission.
* Utilisation within the arrival window: busy GPU-seconds between the first and the last
  submission over (GPUs x that window). Utilisation until the last job ends is mostly the
  long tail, so it is not the headline.
* Bubbles: GPU-hours free (not running, not failed) while a job that fits by count waits
  (free GPUs >= the smallest waiting job's), within the arrival window: the seed's
  "resource bubbles", capacity idle although some waiting job asks for no more of it (its
  type, topology or a reservation may still keep it out).
* Mean waiting jobs: the number of jobs in the queue, time-averaged over the arrival window
  (beside the utilisation: together they say whether the offered load made contention).
* Free-but-unusable GPUs: GPUs idle (not running, not failed) while jobs wait, time-averaged
  over the arrival window: capacity the policy could not turn into work (fragmentation,
  type or topology mismatch, or a policy that chose to wait).
* GPU-hours lost to failures (work since the last checkpoint) and GPU-hours down.
* Per-round solve time p50 / p99 / max, rounds, and rounds that fell back to greedy.
* Rule breaks: jobs a start of which broke one of the job's own placement rules
  (``rule_break_jobs``; ``rule_breaks`` per checker code): a peer whose upstream cannot
  express a hop limit (Slurm's ``--switches`` after ``max_switch_wait``, no spine limit;
  Kueue for a job whose pods are of several templates) starts such jobs earlier and runs
  them at their spread's speed; the engine never does.

Per queue (``queues``, when jobs name queues; :func:`queue_metrics`): jobs, finished, GPU-hours
held (in all, and within the arrival window, while every queue's jobs were still coming),
the longest wait (a job still waiting when the replay ends counts its wait so far), mean
JCT, and GPU-hours lost to failures, to preemption and to migration (work since the last
checkpoint; only the engine with ``preemption="reclaim-within-cohort"`` preempts and with
``defrag=True`` migrates). **Jain's fairness index** across queues relative to their weights:
``J = (sum x)^2 / (n * sum x^2)`` with ``x_q`` = GPU-hours of queue ``q`` within the arrival
window / its weight, over the ``n`` queues that submitted jobs; 1 when every queue got GPU-hours
in proportion to its weight, ``1/n`` when one queue got everything. It is meaningful while
every queue has work waiting (the bench's flood); a queue that asks for less than its weighted
share lowers it without anything being unfair.
"""

from __future__ import annotations

import csv
from collections import Counter
import io
import json
import math
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

from hyperplace.io import write_atomic
from hyperplace.sim.simulator import PolicyRun

SLOWDOWN_FLOOR_S = 10.0


def percentile(values: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``values`` (linear between order statistics); None if empty."""
    if not values:
        return None
    s = sorted(values)
    k = (len(s) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def mean_or_none(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _integral(run: PolicyRun, attr: str, t0: float, t1: float, *, when_queued: bool = False
              ) -> float:
    total = 0.0
    samples = run.samples
    for a, b in zip(samples, [*samples[1:], None]):
        start = max(a.time_s, t0)
        end = min(b.time_s if b is not None else t1, t1)
        if end <= start:
            continue
        value = getattr(a, attr)
        if when_queued and a.queued == 0:
            value = 0
        total += value * (end - start)
    return total


def bubble_gpu_s(run: PolicyRun, t0: float, t1: float) -> float:
    """GPU-seconds free while a job that fits by count waits, within [t0, t1]."""
    total = 0.0
    samples = run.samples
    for a, b in zip(samples, [*samples[1:], None]):
        start, end = max(a.time_s, t0), min(b.time_s if b is not None else t1, t1)
        if end > start and a.smallest_waiting and a.free >= a.smallest_waiting:
            total += a.free * (end - start)
    return total


def bubble_series(run: PolicyRun, bins: int = 60) -> list[tuple[float, float]]:
    """(bin start hour, mean bubble GPUs in the bin) over the arrival window: the chart's
    'bubbles over time'."""
    t0 = min((r.job.submit_s for r in run.records), default=0.0)
    t1 = run.arrival_end_s
    if t1 <= t0:
        return []
    step = (t1 - t0) / bins
    return [(((t0 + i * step) / 3600), bubble_gpu_s(run, t0 + i * step, t0 + (i + 1) * step)
             / step) for i in range(bins)]


def summarize(run: PolicyRun) -> dict[str, Any]:
    """The metrics of the module docstring for one policy's replay."""
    done = [r for r in run.records if r.end_s is not None]
    jct = [r.jct_s for r in done]
    wait = [r.queued_s for r in done]
    slow = [max(1.0, r.jct_s / max(r.job.work_s, SLOWDOWN_FLOOR_S)) for r in done]
    t0 = min((r.job.submit_s for r in run.records), default=0.0)
    t1 = run.arrival_end_s
    window = max(t1 - t0, 1e-9)
    busy = _integral(run, "busy", t0, t1)
    idle = _integral(run, "free", t0, t1, when_queued=True)
    waiting = _integral(run, "queued", t0, t1)
    bubbles = bubble_gpu_s(run, t0, t1)
    end = max((r.end_s for r in done), default=t0)
    down = _integral(run, "down", t0, max(end, t1))
    solve = [r.solve_s for r in run.rounds]
    return {
        "policy": run.policy,
        "cadence_s": run.cadence_s, "fills_at_events": run.between,
        "jobs": len(run.records),
        "finished": len(done),
        "unfinished": run.unfinished,
        "jct_mean_s": mean_or_none(jct), "jct_median_s": percentile(jct, 0.5), "jct_p99_s": percentile(jct, 0.99),
        "wait_mean_s": mean_or_none(wait), "wait_median_s": percentile(wait, 0.5),
        "wait_p99_s": percentile(wait, 0.99),
        "bounded_slowdown_mean": mean_or_none(slow), "bounded_slowdown_p99": percentile(slow, 0.99),
        "makespan_s": end - t0 if done else None,
        "utilisation_in_window": busy / (run.total_gpus * window) if t1 > t0 else None,
        "free_unusable_gpus_mean": idle / window if t1 > t0 else None,
        "waiting_jobs_mean": waiting / window if t1 > t0 else None,
        "bubble_gpu_hours": bubbles / 3600,
        "gpu_hours_lost_to_failures": sum(r.lost_gpu_s for r in run.records) / 3600,
        "gpu_hours_lost_to_preemption": sum(r.lost_preempted_gpu_s for r in run.records) / 3600,
        "preemptions": sum(r.preemptions for r in run.records),
        "gpu_hours_lost_to_migration": sum(r.lost_migrated_gpu_s for r in run.records) / 3600,
        "migrations": sum(r.migrations for r in run.records),
        "gpu_hours_down": down / 3600,
        "failures": len(run.failures),
        "jobs_hit_by_failures": sum(len(h) for _, h in run.failures),
        "restarts": sum(r.restarts for r in run.records),
        "rounds": len(run.rounds),
        "solve_p50_s": percentile(solve, 0.5), "solve_p99_s": percentile(solve, 0.99),
        "solve_max_s": max(solve, default=None),
        "fallback_rounds": sum(1 for r in run.rounds if r.fallback),
        "held_decisions": sum(r.held for r in run.rounds),
        "mean_speed": mean_or_none([r.pieces[-1][2] for r in done if r.pieces]),
        "rule_break_jobs": sum(1 for r in run.records if r.rule_breaks),
        "rule_breaks": dict(sorted(Counter(c for r in run.records for c in r.rule_breaks).items())),
        "forecast": forecast_metrics(run),
        **queue_metrics(run),
    }


def rule_break_line(rows: list[dict[str, Any]]) -> str | None:
    """One line naming the policies that started jobs breaking the jobs' own placement
    rules (summaries' ``rule_break_jobs``), or None when none did."""
    hits = [f"{r['policy']} {r['rule_break_jobs']} ("
            + ", ".join(f"{c} {n}" for c, n in r.get("rule_breaks", {}).items()) + ")"
            for r in rows if r.get("rule_break_jobs")]
    if not hits:
        return None
    return ("jobs started breaking their own placement rules, which the peer's upstream "
            "cannot express (Slurm's tree rule, slurm and fifo: --switches gives way after "
            "max_switch_wait, no spine limit; Kueue: pods of different templates are "
            "PodSets each in its own domain); such a job runs at its spread's speed: "
            + "; ".join(hits))


# The forecast metric (hyperplace.sim.forecast_score, which holds the size classes and
# long-wait threshold the forecast correction uses too) is imported only where a run has
# forecasts: a peer's replay (no forecasts) then never imports it nor the over-time
# schedule's modules (``sim/forecast.py``, ``formulations/schedule.py``,
# ``solvers/schedule``), so bench/bench_simulate.py's cached
# peer rows survive a change to the engine (its cache keys each row on the files it imported).


def forecast_metrics(run: PolicyRun) -> dict[str, Any] | None:
    """How good the policy's start forecasts were (:mod:`hyperplace.sim.forecast_score`:
    the first forecast's error over the wait for jobs that waited 10 min or more, the
    issue's goal, and the time-averaged, per lead time, window and by size figures). None
    for policies without forecasts; that module is imported only for a run with forecasts,
    so that the peers' replays do not import it (nor the schedule's modules)."""
    if not any(r.forecast_at_s is not None for r in run.records):
        return None
    from hyperplace.sim.forecast_score import forecast_metrics as score

    return score(run)


def jain_index(values: list[float]) -> float | None:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)`` (None without values; 1 when all
    are zero)."""
    if not values:
        return None
    square = sum(x * x for x in values)
    return 1.0 if square == 0 else sum(values) ** 2 / (len(values) * square)


def queue_metrics(run: PolicyRun) -> dict[str, Any]:
    """Per-queue figures and Jain's index across queues (module docstring); empty when every
    job is in one queue."""
    queues = sorted({r.job.queue for r in run.records})
    if len(queues) < 2:
        return {}
    last = max([s.time_s for s in run.samples] + [r.end_s or 0.0 for r in run.records],
               default=0.0)
    per: dict[str, dict[str, Any]] = {}
    for q in queues:
        recs = [r for r in run.records if r.job.queue == q]
        done = [r for r in recs if r.end_s is not None]
        waits = [r.queued_s + (last - r.queued_since if r.queued_since is not None else 0.0)
                 for r in recs]
        per[q] = {
            "weight": run.queue_weights.get(q, 1.0),
            "jobs": len(recs), "finished": len(done),
            "gpu_hours": run.queue_gpu_s.get(q, 0.0) / 3600,
            "gpu_hours_in_window": run.queue_gpu_s_in_window.get(q, 0.0) / 3600,
            "wait_max_s": max(waits, default=None),
            "jct_mean_s": mean_or_none([r.jct_s for r in done]),
            "gpu_hours_lost_to_failures": sum(r.lost_gpu_s for r in recs) / 3600,
            "gpu_hours_lost_to_preemption": sum(r.lost_preempted_gpu_s for r in recs) / 3600,
            "preemptions": sum(r.preemptions for r in recs),
            "gpu_hours_lost_to_migration": sum(r.lost_migrated_gpu_s for r in recs) / 3600,
            "migrations": sum(r.migrations for r in recs),
        }
    jain = jain_index([per[q]["gpu_hours_in_window"] / max(per[q]["weight"], 1e-9)
                       for q in queues])
    return {"queues": per, "jain_index": jain}


# ---- output ------------------------------------------------------------------------------

def to_csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    return buf.getvalue()


def job_rows(run: PolicyRun) -> list[dict[str, Any]]:
    return [{"policy": run.policy, "job": r.job.name, "gpus": r.job.gpus,
             "submit_s": round(r.job.submit_s, 3), "work_s": round(r.job.work_s, 3),
             "first_start_s": None if r.first_start_s is None else round(r.first_start_s, 3),
             "end_s": None if r.end_s is None else round(r.end_s, 3),
             "jct_s": None if r.jct_s is None else round(r.jct_s, 3),
             "queued_s": round(r.queued_s, 3), "restarts": r.restarts,
             "lost_gpu_s": round(r.lost_gpu_s, 3), "queue": r.job.queue,
             "speed": round(r.pieces[-1][2], 4) if r.pieces else None}
            for r in run.records]


def finite(value: Any) -> Any:
    """``value`` with every non-finite float as None (null): summary.json is strict JSON
    (RFC 8259 has no Infinity or NaN; a trace whose jobs all arrive at once offers an
    infinite load)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def write_outputs(out: Path, summary: dict[str, Any], runs: list[PolicyRun],
                  charts: bool = True) -> list[Path]:
    """summary.json, policies.csv, jobs.csv, timeline.csv, rounds.csv, with queues
    queues.csv (+ PNG charts)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    files = {
        "summary.json": json.dumps(finite(summary), indent=2, default=str,
                                   allow_nan=False) + "\n",
        "policies.csv": to_csv([{k: v for k, v in row.items() if k != "queues"}
                              for row in summary["policies"]]),
        "jobs.csv": to_csv([row for run in runs for row in job_rows(run)]),
        "timeline.csv": to_csv([{"policy": run.policy, "time_s": s.time_s, "busy": s.busy,
                               "free": s.free, "down": s.down, "queued": s.queued}
                              for run in runs for s in run.samples]),
        "rounds.csv": to_csv([{"policy": run.policy, "time_s": r.time_s,
                             "solve_s": round(r.solve_s, 5), "started": r.started,
                             "queued": r.queued, "fallback": r.fallback, "status": r.status,
                             "held": r.held} for run in runs for r in run.rounds]),
    }
    queue_rows = [{"policy": row["policy"], "queue": q, **fig}
                  for row in summary["policies"] for q, fig in row.get("queues", {}).items()]
    if queue_rows:
        files["queues.csv"] = to_csv(queue_rows)
    for name, text in files.items():
        write_atomic(out / name, text)
        written.append(out / name)
    if charts:
        written += draw_charts(out, runs)
    return written


def draw_charts(out: Path, runs: list[PolicyRun]) -> list[Path]:
    """JCT CDF, utilisation and queue length over time (needs the ``plots`` extra)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for run in runs:
        jct = sorted(r.jct_s / 3600 for r in run.records if r.jct_s is not None)
        if jct:
            ax.plot(jct, [(i + 1) / len(jct) for i in range(len(jct))], label=run.policy)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.legend(fontsize=7)
    written.append(save_figure(fig, out / "jct_cdf.png"))
    for attr, label, fname in (("busy", "busy GPUs (fraction)", "utilisation.png"),
                               ("queued", "jobs waiting", "queue_length.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for run in runs:
            xs = [s.time_s / 3600 for s in run.samples]
            ys = [getattr(s, attr) / (run.total_gpus if attr == "busy" else 1)
                  for s in run.samples]
            ax.step(xs, ys, where="post", label=run.policy, linewidth=0.8)
        ax.set_xlabel("time (h)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
        written.append(save_figure(fig, out / fname))
    plt.close("all")
    return written


def save_figure(fig: Any, path: Path, dpi: int = 110) -> Path:
    """Write a matplotlib figure as PNG whole or not at all (a temporary file renamed)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".png")
    os.close(fd)
    fig.tight_layout()
    fig.savefig(tmp, dpi=dpi)
    os.replace(tmp, path)
    return path
