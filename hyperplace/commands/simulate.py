"""``hyperplace simulate``: replay a trace under several policies, side by side."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hyperplace.commands.common import output_dir
from hyperplace.errors import InputError


def parse_load(text: str) -> float | str:
    """``--load``: a positive number (offered load relative to capacity) or ``trace``."""
    if text.strip().lower() == "trace":
        return "trace"
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"must be a positive number or 'trace', got {text!r}",
                         path="--load") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"must be a positive finite number or 'trace', got {text!r}",
                         path="--load")
    return value


def parse_window(text: str | None) -> tuple[float | None, float | None]:
    """``--window START:END`` in seconds from the trace's first job (either side optional)."""
    if not text:
        return None, None
    try:
        a, b = text.split(":", 1)
        lo = float(a) if a.strip() else None
        hi = float(b) if b.strip() else None
    except ValueError:
        raise InputError(f"expected START:END in seconds, got {text!r}", path="--window") from None
    for v in (lo, hi):
        if v is not None and (not math.isfinite(v) or v < 0):
            raise InputError(f"bounds must be finite and >= 0, got {text!r}", path="--window")
    if lo is not None and hi is not None and hi <= lo:
        raise InputError(f"END must be after START, got {text!r}", path="--window")
    return lo, hi


def _finite(name: str, value: float, lo: float = 0.0) -> None:
    if not math.isfinite(value) or value < lo:
        raise InputError(f"must be a finite number >= {lo:g}, got {value}", path=name)


def _fmt(v: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if v is None else f"{v / scale:,.{digits}f}"


def _pct(v: float | None) -> str:
    """A share as ``79.3%``; ``-`` when there is none (no arrival window), not ``-%``."""
    return "-" if v is None else f"{v * 100:,.1f}%"


def headline(summary: dict) -> str:
    """What was replayed, in one sentence: jobs, their shape, window, load, GPUs."""
    from hyperplace.commands.render import count, plural

    w = summary["workload"]
    shape = (summary.get("request") or {}).get("workload", "trace")
    jobs = (f"{plural(w['jobs'], 'foundation-model-shaped job')} on {w['trace']}'s arrival "
            "times" if shape == "fm" else f"{plural(w['jobs'], 'job')} of {w['trace']}")
    if math.isfinite(w["offered_load"]):
        load = (f"offered load {w['offered_load']:.2f} (trace's own "
                f"{w['trace_offered_load']:.2f})")
    else:  # every job arrives at one instant: no window to offer the work over
        load = "offered load - (all arrive at once: no arrival window)"
    span = w["arrival_window_s"]  # minutes below a tenth of an hour ("over 0.0 h" said little)
    over = f"{span / 3600:.1f} h" if span >= 360 else f"{span / 60:.1f} min"
    return (f"{summary['instance']}: {jobs} over {over}, {load}, "
            f"{count(w['instance_gpus'])} GPUs")


def forecast_lines(summary: dict) -> list[str]:
    """How good each policy's forecasts were (the engine's: its planned start of each job,
    from the round after its submission, against the actual start), one line a policy that
    made any: the table had no word of it, only summary.json."""
    from hyperplace.solvers.schedule import duration_words

    out = []
    for row in summary["policies"]:
        f = row.get("forecast")
        if not f or not f.get("jobs"):
            continue
        err = ", ".join(f"{k} {duration_words(f[key])}" for k, key in (
            ("median", "median_abs_error_s"), ("p90", "p90_abs_error_s"))
            if f.get(key) is not None)
        line = (f"{row['policy']} forecasts of {f['jobs']:,} jobs, scored on the "
                f"{f.get('forecast_scored', 'first forecast')}: |planned - actual start| "
                f"{err}")
        if f.get("long_wait_jobs") and f.get("long_wait_median_error_over_wait") is not None:
            line += (f"; the {f['long_wait_jobs']:,} that waited 10 min or more: median error "
                     f"{f['long_wait_median_error_over_wait']:.2f} of their wait")
        out.append(line + " (planned starts assume running jobs end as predicted and no "
                   "later arrival goes first)")
    return out


#: a trace whose median job runs longer than this (work at reference speed) is probably not
#: in seconds: the longest Philly jobs run weeks, their median minutes
UNITS_MEDIAN_S = 30 * 86400.0


def units_note(runs: list) -> str:
    """A line when the replayed jobs' median run time (the trace's ``duration_s``) is over
    :data:`UNITS_MEDIAN_S`: a trace in milliseconds replays as jobs of months, and nothing
    said so (200 jobs of 10 min to 10 h read as 'over 12,369.5 h', mean JCT 4,438 h)."""
    import statistics

    work = [r.job.work_s for r in runs[0].records] if runs and runs[0].records else []
    if not work or statistics.median(work) <= UNITS_MEDIAN_S:
        return ""
    med = statistics.median(work)
    return (f"duration_s: the median job runs {med / 3600:,.0f} h ({med / 86400:,.0f} days), "
            "read as seconds; if the trace is in milliseconds, divide its duration_s and "
            "submit_time_s by 1,000")


def workload_notes(summary: dict) -> list[str]:
    """What the mapping left out of the replay (jobs that cannot fit, dropped GPU-type
    constraints), one line each, with the first case."""
    from hyperplace.commands.render import plural

    w = summary["workload"]
    out = []
    if w.get("dropped_too_large"):
        out.append(f"--drop-unfit: {plural(w['dropped_too_large'], 'job')} left out, more GPUs "
                   f"than the instance has of an accepted type (first: "
                   f"{w.get('dropped_example') or '-'})")
    if w.get("dropped_type_constraints"):
        out.append(f"GPU-type constraint of {plural(w['dropped_type_constraints'], 'job')} "
                   "names no type of the instance: dropped, they run on any type (first: "
                   f"{w.get('dropped_type_example') or '-'})")
    return out


def failure_note(summary: dict) -> str | None:
    """With ``--failures`` above 0 and no failure in any run, say so and what to expect."""
    from hyperplace.sim.failures import PER_GPU_SECOND

    rate = (summary.get("config") or {}).get("failures") or 0.0
    rows = summary["policies"]
    if rate <= 0 or any(r.get("failures", 0) for r in rows):
        return None
    span = max((r.get("makespan_s") or 0.0 for r in rows), default=0.0)
    gpus = summary["workload"]["instance_gpus"]
    expected = rate * PER_GPU_SECOND * gpus * span
    return (f"--failures {rate:g}: no failure happened in this run (about {expected:.2g} "
            f"expected at that rate on {gpus:,} GPUs over {span / 3600:.1f} h); a higher "
            "--failures, a longer --window or a larger instance shows some")


def print_summary(summary: dict, console: Console) -> None:
    from hyperplace.commands import render as r
    from hyperplace.commands.render import Column
    from hyperplace.sim.metrics import rule_break_line

    r.print_line(console, headline(summary))
    cols = [Column("policy"), Column("done", justify="right"),
            Column("JCT mean", justify="right"), Column("wait mean", justify="right"),
            Column("util (window)", justify="right"),
            Column("waiting jobs", "optional", "right"),
            Column("JCT p99", "optional", "right"), Column("wait p99", "optional", "right"),
            Column("slowdown", "optional", "right"), Column("makespan", "optional", "right"),
            Column("JCT p50", "optional", "right"),
            Column("lost GPU-h", "optional", "right"),
            Column("idle while waiting", "optional", "right"),
            Column("solve p50/p99/max s", "optional", "right"),
            Column("fallbacks", "optional", "right")]
    rows = []
    for row in summary["policies"]:
        rows.append([row["policy"], f"{row['finished']:,}/{row['jobs']:,}",
                     _fmt(row["jct_mean_s"], 3600), _fmt(row["wait_mean_s"], 3600),
                     _pct(row["utilisation_in_window"]),
                     _fmt(row.get("waiting_jobs_mean"), 1, 1),
                     _fmt(row["jct_p99_s"], 3600), _fmt(row["wait_p99_s"], 3600),
                     _fmt(row["bounded_slowdown_mean"]), _fmt(row["makespan_s"], 3600),
                     _fmt(row["jct_median_s"], 3600),
                     _fmt(row["gpu_hours_lost_to_failures"], 1, 1),
                     _fmt(row["free_unusable_gpus_mean"], 1, 1),
                     f"{_fmt(row['solve_p50_s'], 1, 3)}/{_fmt(row['solve_p99_s'], 1, 3)}/"
                     f"{_fmt(row['solve_max_s'], 1, 3)}", r.count(row["fallback_rounds"])])
    r.print_table(console, cols, rows, "policies (times in hours)",
                  hint="-o DIR writes every metric to summary.json and CSVs")
    r.print_line(console, "reached within the arrival window: " + "; ".join(
        f"{row['policy']} utilisation {_pct(row['utilisation_in_window'])}, "
        f"{_fmt(row.get('waiting_jobs_mean'), 1, 1)} jobs waiting on average"
        for row in summary["policies"]))
    breaks = rule_break_line(summary["policies"])
    if breaks:
        r.print_line(console, breaks)
    for lines in (summary.get("notes") or {}).values():
        for line in lines:
            r.print_line(console, line)
    for line in workload_notes(summary):
        r.print_line(console, line)
    for line in forecast_lines(summary):
        r.print_line(console, line)
    if summary["workload"].get("load_note"):
        r.print_line(console, "--load: " + summary["workload"]["load_note"])
    note = failure_note(summary)
    if note:
        r.print_line(console, note)
    for name, entry in summary["ratios"].items():
        parts = [f"{k.removesuffix('_s')} x{v['ratio']:.3f}" + (f" (vs {v['best_peer']})"
                 if "best_peer" in v else "") for k, v in entry.items()]
        r.print_line(console, f"{name} vs best peer: " + ", ".join(parts))


def simulate_command(
    trace: Annotated[str, typer.Option(help="philly | alibaba-2023 | a CSV file (submit_time_s, duration_s, num_gpus[, gpu_type, name, queue, model]; columns in any order)")] = "philly",
    instance: Annotated[str, typer.Option("--instance", "-i", help="bundled instance name or Instance file")] = "mixed-a100-h100",
    policy: Annotated[list[str] | None, typer.Option("--policy", "-p", help="engine, engine-rounds, engine-wait, fifo (first fit), kueue (BestEffortFIFO), kueue-strict (StrictFIFO), volcano, volcano-proportion, slurm (backfill as a site configures it), slurm-default (backfill as shipped: a weaker variant); on a federation (2+ member clusters): engine-federated (the planning engine's schedule of one global queue over every member; a job it leaves waiting is split across clusters when that finishes it sooner), engine-federated-rounds (the round federation engine it replaced, a baseline), karmada-aggregated, karmada-dynamic, karmada-static (Karmada's division into per-cluster queues, Kueue in each member), each also as NAME-whole (splits off); also spelled fifo-firstfit, kueue-style, kueue-besteffort, kueue-strictfifo, volcano-style, proportion, slurm-style, slurm-backfill; repeat for several (default: all but engine-wait and volcano-proportion)")] = None,
    round_s: Annotated[float, typer.Option("--round", help="seconds between the engine's scheduling rounds (0: a round at every event: an arrival, an end, a failure); the peers decide at their upstream cadence unless --peer-cadence uniform")] = 60.0,
    peer_cadence: Annotated[str, typer.Option("--peer-cadence", help="upstream (the default: Kueue at every event, Volcano every 1 s, Slurm's backfill every 30 s and its main scheduler at every submission and end, as each ships) or uniform (every policy every --round seconds)")] = "upstream",
    budget: Annotated[float, typer.Option(help="engine time budget per round, seconds")] = 1.0,
    load: Annotated[str, typer.Option(help="offered work over the instance's capacity at each GPU type's speed for that work (1.0 saturates any instance), or 'trace' for the trace's own rate")] = "1.0",
    prediction_error: Annotated[float, typer.Option("--prediction-error", help="sigma of the lognormal error of the run-time predictions every policy sees (predicted = work x exp(N(0, sigma))); 0 = exact")] = 0.5,
    failures: Annotated[float, typer.Option(help="failure rate as a multiple of Meta's Llama 3 rate (419 per 54 days on 16,384 GPUs); 0 = none")] = 0.0,
    seed: Annotated[int, typer.Option(min=0, max=2**31 - 1, help="seed for failures, the fm "
                                      "workload and the solver (0..2,147,483,647)")] = 0,
    window: Annotated[str | None, typer.Option(help="START:END seconds of the trace to replay (from its first job)")] = None,
    jobs: Annotated[int | None, typer.Option("--jobs", help="replay at most this many jobs of the window")] = None,
    repeat: Annotated[int, typer.Option("--repeat", help="replay the kept jobs this many times back to back (1-100; a copy's submit times shift by the window's span plus one mean gap, its jobs are named NAME~c): a short sample then loads a large instance over a longer window, so the ramp-up from an empty cluster weighs less")] = 1,
    drop_unfit: Annotated[bool, typer.Option("--drop-unfit/--no-drop-unfit", help="a trace job that cannot fit the empty instance (more GPUs than it has of an accepted type): refused (the default: exit 2 naming its line) or left out of the replay and counted")] = False,
    workload: Annotated[str, typer.Option(help="trace (the trace's own jobs) or fm (foundation-model-shaped sizes on the trace's timing)")] = "trace",
    network: Annotated[bool, typer.Option("--network-model/--no-network-model", help="slow down jobs spread over more switch tiers")] = True,
    solver: Annotated[str, typer.Option(help="engine solver: auto, cpsat, milp, greedy")] = "auto",
    out: Annotated[Path | None, typer.Option("--output", "-o", help="write summary.json, CSVs and PNG charts here")] = None,
    charts: Annotated[bool, typer.Option("--charts/--no-charts", help="PNG charts (needs matplotlib: the 'plots' extra)")] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show a progress bar on stderr")] = True,
    queues: Annotated[list[Path] | None, typer.Option("--queues", help="Kueue ClusterQueue/LocalQueue/ResourceFlavor/Cohort or Volcano Queue documents (as solve --queues); a trace's queue column names them")] = None,
    half_life: Annotated[float, typer.Option("--half-life", help="fair-share history: hours for a queue's past GPU-hours to count half (Slurm's PriorityDecayHalfLife); 0 = per-round fair share only")] = 0.0,
    preemption: Annotated[str, typer.Option("--preemption", help="engine (not engine-federated, whose schedule models no reclaim): never, or reclaim-within-cohort (stop jobs of queues borrowing beyond their nominal quota so a queue under its own gets it back; victims lose the work since their checkpoint; engine is then the round engine, which never makes room: see --make-room). never is about reclaim only: the planning engine still stops jobs for short ones unless --no-make-room")] = "never",
    make_room: Annotated[bool | None, typer.Option("--make-room/--no-make-room", help="engine: a waiting job whose run is short against its planned wait (20x, at most 1 h, after 30 min) may stop running jobs of no higher priority to start now, each at most twice; the victims lose the work since their checkpoint and queue again (hyperplace.sim.planning.MAKE_ROOM). Default: on for engine, off for engine-federated (measured worse there); --make-room or --no-make-room sets both. Only the planning engine makes room: with declared queues, --preemption reclaim-within-cohort or --defrag, engine is the round engine, which never does (--make-room is then ignored, with a warning)")] = None,
    defrag: Annotated[bool, typer.Option("--defrag/--no-defrag", help="engine (not engine-federated, whose schedule models no migrations; engine is then the round engine: no --make-room): running jobs may migrate (checkpoint, restart elsewhere), decided in the round's one solve: only when that admits more pending demand, least lost work first; migrated jobs lose the work since their checkpoint")] = False,
    horizon: Annotated[float, typer.Option("--horizon", help="engine and engine-federated: hours the over-time schedule plans ahead each round (5-minute steps over a day by default: horizon / 288)")] = 24.0,
    schedule_window: Annotated[int, typer.Option("--schedule-window", help="engine and engine-federated: pending jobs in each round's CP-SAT schedule model (priority, then reservation, then submit order); the rest are list scheduled around them")] = 200,
    schedule_objective: Annotated[str, typer.Option("--schedule-objective", help="engine and engine-federated: slowdown (sum of bounded slowdowns, the default: measured better on mean JCT, wait and slowdown on three of four bench cells, hyperplace.sim.planning.OBJECTIVE) or completion (sum of completion times) within each priority class")] = "slowdown",
    federation_split: Annotated[bool, typer.Option("--federation-split/--no-federation-split", help="federation policies: jobs may be split across member clusters (off: every job runs whole in one cluster; the policy names end in -whole)")] = True,
    engine_clock: Annotated[str, typer.Option("--engine-clock", help="engine and engine-federated: work (the default: its schedule search is limited by CP-SAT's deterministic time, so a replay gives the same decisions at any machine load as long as the wall-clock ceiling of 4 budgets cuts no round; the run's notes count the rounds it cut, whose decisions depend on the load; a work round's wall time is not bounded by --budget) or wall (every limit on the wall clock, as the service; replays then vary with the load)")] = "work",
    fair_share_levels: Annotated[int, typer.Option("--fair-share-levels", help="with --half-life: engine priority levels added per queue, round(N x Slurm's fair-share factor), as Slurm's PriorityWeightFairshare (one level = one aging step)")] = 4,
) -> None:
    """Replay a trace on an instance under several policies; metrics side by side."""
    from hyperplace.commands.solve import with_queue_files
    from hyperplace.fedsim import POLICIES as FEDERATION_POLICIES
    from hyperplace.instances import load_instance
    from hyperplace.sim.metrics import write_outputs
    from hyperplace.sim.policies import canonical_policy, engine_plans_ahead
    from hyperplace.sim.run import SimRequest, run_simulation
    from hyperplace.sim.options import engine_config
    from hyperplace.sim.simulator import CADENCES, SimConfig

    _finite("--round", round_s)
    _finite("--budget", budget, 0.01)
    _finite("--failures", failures)
    _finite("--prediction-error", prediction_error)
    engine = engine_config({"--horizon": horizon, "--schedule-window": schedule_window,
                            "--schedule-objective": schedule_objective,
                            "--engine-clock": engine_clock, "--preemption": preemption,
                            "--defrag": defrag, "--half-life": half_life,
                            "--fair-share-levels": fair_share_levels,
                            **({"--make-room": make_room} if make_room is not None else {})})
    if peer_cadence not in CADENCES:
        raise InputError(f"use {' or '.join(CADENCES)}, got {peer_cadence!r}",
                         path="--peer-cadence")
    if solver not in ("auto", "cpsat", "milp", "greedy"):
        raise InputError(f"unknown solver {solver!r}; use auto, cpsat, milp or greedy",
                         path="--solver")
    names = policy or ["engine", "fifo", "kueue", "kueue-strict", "volcano", "slurm"]
    for p in names:
        if p in FEDERATION_POLICIES:
            continue
        try:
            canonical_policy(p)
        except ValueError as exc:
            raise InputError(f"{exc}; on a federation also "
                             f"{', '.join(FEDERATION_POLICIES)}", path="--policy") from None
    lo, hi = parse_window(window)
    if jobs is not None and jobs < 1:
        raise InputError(f"must be >= 1, got {jobs}", path="--jobs")
    inst = with_queue_files(load_instance(instance), queues or [])
    if make_room and not engine_plans_ahead(inst, preemption, defrag) and any(
            canonical_policy(p) == "engine" for p in names if p not in FEDERATION_POLICIES):
        print("warning: --make-room: with declared queues, --preemption or --defrag engine "
              "is the round engine, which never stops jobs for short ones: ignored for "
              "engine", file=sys.stderr)
    federated = [p for p in names if p in FEDERATION_POLICIES]
    if federated and len(inst.clusters) < 2:  # named by the file given, not its metadata
        raise InputError(f"a federation policy needs at least 2 member clusters (--policy "
                         f"{federated[0]}); this instance has {len(inst.clusters)} (use a "
                         "single-cluster policy, or an instance such as seed-beijing-shanghai)",
                         source=instance, path="spec.clusters")
    req = SimRequest(trace=trace, start_s=lo, end_s=hi, limit=jobs, repeat=repeat,
                     workload=workload,
                     load=parse_load(load), policies=names, prediction_error=prediction_error,
                     drop_unfit=drop_unfit)
    config = SimConfig(round_s=round_s, cadence=peer_cadence, budget_s=budget,
                       failures=failures, seed=seed,
                       prediction_sigma=prediction_error,
                       network=network, solver=solver,
                       federation_split=federation_split, **engine)
    if out is not None:
        output_dir(out)
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=not progress,
                  transient=True) as bar:
        tasks: dict[str, int] = {}

        def tick(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = bar.add_task(f"{name:>12}", total=total)
            bar.update(tasks[name], completed=done)

        summary, runs = run_simulation(inst, req, config, progress=tick,
                                       extra=FEDERATION_POLICIES)
    from hyperplace.commands.render import console as out_console

    print_summary(summary, out_console())
    note = units_note(runs)
    if note:
        print(f"warning: {note}", file=sys.stderr)
    if out is not None:
        written = write_outputs(out, summary, runs, charts=charts)
        console.print(f"wrote {len(written)} files to {out}")


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_command)
