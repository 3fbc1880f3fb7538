"""``hyperplace solve`` (one scheduling round) and ``hyperplace check`` (verify a plan)."""

from __future__ import annotations

import gc
import os
import re
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hyperplace.commands.common import (
    check_budget,
    round_request,
    console,
    file_format,
    interruptible,
    write_output,
    Format,
    ALL_HELP,
    BUDGET_HELP,
    CLUSTER_HELP,
    FORMAT_HELP,
    JOBS_HELP,
    TOP_HELP,
)
from hyperplace.deadline import is_command
from hyperplace.errors import InputError
from hyperplace.io import dump, load_documents, parse
from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.request import MAX_SEED


class Solver(StrEnum):
    auto = "auto"
    cpsat = "cpsat"
    milp = "milp"
    greedy = "greedy"


class Policy(StrEnum):
    performance = "performance"
    cost = "cost"


class Preemption(StrEnum):
    never = "never"
    lower_priority = "lower-priority"
    reclaim_within_cohort = "reclaim-within-cohort"


def pause_collector() -> None:
    """Turn Python's cyclic garbage collector off for the rest of a command's own process.

    Reading and solving a round allocate millions of long-lived objects (nodes, fabric
    links, views) and almost no reference cycles; the collector re-walking them was a third
    of the CPU time of a 131,072-GPU solve (7.1 s -> 4.7 s without it). Reference counting
    still frees everything else, and the process ends with the command. In-process callers
    (tests, the service's workers) keep their collector.
    """
    if is_command():
        gc.disable()


def end_process() -> None:
    """End a command's own process now, exit code 0, once its output is written and flushed.

    Tearing down the objects of a large round one by one took longer than writing its plan
    (131,072 GPUs: 0.4 s of CPU, 1.8 s of wall on a loaded machine), and the budget promise
    counts until the process ends. Files are already written whole (``write_atomic``);
    in-process callers (tests, the service) simply return.
    """
    if not is_command():
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe: what Python's own exit would report
        os._exit(120)
    os._exit(0)


def resolve_instance(instance: str | None, cluster: Path | None, jobs: Path | None) -> Instance:
    """The instance a command works on: a bundled name or file, or a cluster plus jobs."""
    from hyperplace import instances as inst

    if cluster is not None or jobs is not None:
        if instance is not None:
            raise InputError("give either --instance or --cluster/--jobs, not both")
        if cluster is None or jobs is None:
            raise InputError("--cluster and --jobs go together")
        return inst.load_cluster_and_jobs(str(cluster), str(jobs))
    return inst.load_instance(instance or inst.DEFAULT_INSTANCE)


#: the least budget ``solve`` takes (seconds): less leaves no time for greedy's own pass
MIN_BUDGET_S = 0.05

# What each objective term counts (README "Placement"), shown under the solve table.
TERM_LEGEND = {
    "admitted_priority_demand": "priority-weighted admitted GPUs (objective 1, maximised)",
    "fair_share": "GPUs admitted within each queue's weighted max-min fair share (with "
                  "--queues; after priority, maximised)",
    "admitted_jobs": "admitted jobs (tie-break of objective 1, maximised)",
    "communication": "leaf and spine domains each job spans, weighted by traffic "
                     "(multi-node TP 100, PP 10, DP 1); lower is better",
    "fragmentation": "whole free nodes and leaf domains the plan breaks into; lower is better",
    "policy": "--policy performance: slower GPUs used; cost: price of the GPUs used; "
              "lower is better",
}


def with_queue_files(inst: Instance, paths: list[Path]) -> Instance:
    """The instance with the queue documents of ``paths`` (errors name file and field)."""
    if not paths:
        return inst
    from hyperplace.models.queue import QueueError

    docs: list[tuple[str, dict]] = []
    for path in paths:
        for i, doc in enumerate(load_documents(path)):
            if not isinstance(doc, dict):
                raise InputError("expected a mapping (a queue document)", source=str(path),
                                 path=f"document {i + 1}")
            docs.append((f"{path}: document {i + 1}", doc))
    try:
        out = inst.with_queue_documents(docs)
    except (QueueError, ValueError) as exc:
        # "queues.yaml: document 2.spec.cohort" reads better as "document 2: spec.cohort"
        raise InputError(re.sub(r"(document \d+)\.", r"\1: ", str(exc))) from None
    from hyperplace.instances.foreign import unmatched_queue_files

    for warning in unmatched_queue_files(out, docs):
        print(f"warning: {warning}", file=sys.stderr)
    return out


def _ranges(indices: list[int]) -> str:
    """``[0, 1, 2, 3, 6]`` -> ``0-3,6``."""
    out: list[str] = []
    start = prev = None
    for i in sorted(indices):
        if start is None:
            start = prev = i
        elif i == prev + 1:  # type: ignore[operator]
            prev = i
        else:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
            start = prev = i
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)


def gpus_by_node(plan: PlacementPlan) -> dict[str, dict[str, list[int]]]:
    """job -> node -> GPU indices, in placement order."""
    out: dict[str, dict[str, list[int]]] = {}
    for p in plan.placements:
        per_node = out.setdefault(p.job, {})
        for g in p.gpus:
            per_node.setdefault(g.node, []).append(g.gpu)
    return out


#: Time the process ran before hyperplace was loaded that is worth a word: more than an
#: interpreter's start-up (a shell's earlier commands: `pip install ... && hyperplace solve`
#: execs hyperplace in the shell's own process, whose start the budget counts from).
_EARLY_S = 0.5


def _time_words(runtime_s: float, budget_s: float | None) -> str:
    """The solve's time; in a command's own process, also the time since the process
    started (what the budget counts from) when start-up and reading took a fifth of the
    budget or more ("0.05 s of 2 s" alone would hide where the budget went), and how much of
    it passed before hyperplace was loaded when that is more than a start-up."""
    import time

    from hyperplace import deadline
    from hyperplace.commands import render as r

    if deadline.is_command() and budget_s:
        start = deadline.process_start()
        total = time.perf_counter() - start
        if total - runtime_s >= 0.2 * budget_s:
            early = deadline.loaded_at() - start
            note = "" if early <= _EARLY_S else (
                f" ({r.seconds(early)} before hyperplace loaded"
                + (": the most counted)" if early >= deadline.MAX_STARTUP_S - 0.01 else ")"))
            return (f"{r.seconds(runtime_s)} solving, {r.seconds(total)} since the process "
                    f"started{note},")
    return r.seconds(runtime_s)


def over_budget(budget_s: float, began: float) -> str | None:
    """None while the command is within its budget; else one sentence saying by how much it
    is past it and how much of that was start-up (the floor: in a command's own process the
    budget counts from process start, and importing hyperplace and its solvers takes about
    0.5 s of CPU, 1.5-2 s of wall on a loaded 2-core machine), for the plan's message and a
    ``warning:`` line: a budget below the floor is reported, never overrun silently."""
    import time

    from hyperplace import deadline

    start = deadline.process_start() if deadline.is_command() else began
    elapsed = time.perf_counter() - start
    if elapsed <= budget_s:
        return None
    startup = max(began - start, 0.0)
    early = deadline.loaded_at() - start if deadline.is_command() else 0.0
    shell = (f"; {early:.2f} s of it before hyperplace loaded, the shell's own work before "
             "it ran hyperplace" if early > _EARLY_S else "")
    where = (f"start-up alone took {startup:.2f} s (at this machine's load{shell}), a floor "
             "no smaller budget can keep" if startup >= budget_s else
             f"start-up took {startup:.2f} s of it{shell}, reading, solving and writing the "
             "rest (at this machine's load)")
    return (f"over budget: the plan was ready {elapsed:.2f} s after the "
            f"{'process' if deadline.is_command() else 'command'} started, "
            f"{elapsed - budget_s:.2f} s past the {budget_s:g} s budget; {where}")


def plan_summary(plan: PlacementPlan, title: str, explain: bool = False
                 ) -> list[tuple[str, str]]:
    """The lines a reader needs before any table: outcome, objective, time, counts."""
    from hyperplace.commands import render as r

    rows: list[tuple[str, str]] = [("status", plan.status.value), ("solver", plan.solver)]
    rows.append(("objective", f"{r.num(plan.objective)} priority-weighted GPUs"
                 if plan.objective is not None else "-"))
    rows.append(("bound / gap", f"{r.num(plan.bound)} / {r.pct(plan.gap, 2)}"))
    rows.append(("time", f"{_time_words(plan.runtime_s, plan.budget_s)} of "
                 f"{r.seconds(plan.budget_s)} budget" if plan.budget_s
                 else r.seconds(plan.runtime_s)))
    terms = {k: v for k, v in plan.objective_terms.items() if k != "admitted_priority_demand"}
    if terms:
        rows.append(("terms", r.pairs(terms) + ("" if explain else " (--explain says what each "
                                                 "counts)")))
    used: dict[str, int] = {}
    for j in plan.jobs:
        for t, c in j.gpu_types.items():
            used[t] = used.get(t, 0) + c
    rows.append(("GPUs used", r.pairs(dict(sorted(used.items()))) if used else "-"))
    moved = {m.job for m in plan.migrations}
    repaired = {m.job for m in plan.migrations if m.why == "repair"}
    admitted = [j for j in plan.jobs if j.job not in moved]
    if repaired and not admitted:
        rows.append(("repaired", f"{r.plural(len(repaired), 'running job')} "
                     f"({r.count(sum(j.gpus for j in plan.jobs if j.job in repaired))} GPUs)"))
    else:
        rows.append(("admitted", f"{r.plural(len(admitted), 'job')} "
                     f"({r.plural(sum(j.gpus for j in admitted), 'GPU')})"))
        rows.append(("pending", r.plural(len(plan.pending), "job")
                     + pending_breakdown(plan)))
    if plan.skipped:
        rows.append(("skipped", r.plural(len(plan.skipped), "job") + ", not placed: " + "; ".join(
            f"{s.job} ({s.reason})" for s in plan.skipped[:5])
            + (f"; +{len(plan.skipped) - 5} more" if len(plan.skipped) > 5 else "")))
    if moved - repaired:
        rows.append(("migrated", f"{r.plural(len(moved - repaired), 'running job')} "
                     "(in the admitted jobs' table, marked migrated)"))
    if plan.preemptions:
        rows.append(("preempted", r.plural(len(plan.preemptions), "running job")))
    if plan.message:
        rows.append(("note", plan.message))
    return rows


#: The first words of a pending reason -> what kind of reason it is (hyperplace.formulations
#: .explain writes them); the summary counts pending jobs per kind.
REASON_KINDS = (("not tried", "not tried (time budget)"), ("not admitted", "budget spent"),
                ("outranked", "outranked"), ("fragmented", "fragmented"),
                ("held back", "held back by a rule"), ("queue", "queue quota"),
                ("gang of", "no domain large enough"), ("group", "cannot fit as asked"))


def pending_breakdown(plan: PlacementPlan) -> str:
    """``: 1,500 outranked, 162 not tried (time budget)``: pending jobs per kind of reason,
    most first (empty with fewer than two pending jobs)."""
    from hyperplace.commands.render import count

    if len(plan.pending) < 2:
        return ""
    kinds: dict[str, int] = {}
    for pj in plan.pending:
        first = (pj.reasons[0] if pj.reasons else "").lstrip()
        kind = next((label for prefix, label in REASON_KINDS if first.startswith(prefix)),
                    "other")
        kinds[kind] = kinds.get(kind, 0) + 1
    return ": " + ", ".join(f"{count(n)} {k}" for k, n in
                            sorted(kinds.items(), key=lambda kv: -kv[1]))


def _forecast_cell(f) -> str:
    """A forecast in a few words for the table ("in ~1h05m, 16 H100-80 leaf000"); the
    plan's ``forecasts[].text`` has the whole sentence."""
    from hyperplace.solvers.schedule import duration_words

    if f.earliest_s is None:
        return "not planned"
    when = "now" if f.starts_now else f"in {duration_words(f.earliest_s)}"
    if not f.starts_now and f.latest_s is not None and f.latest_s > f.earliest_s:
        when += f"-{duration_words(f.latest_s)}"  # the window, as forecasts[].text gives it
    at = re.match(r"about (\d\d:\d\d UTC)", f.text)  # the wall clock, when solve gave it
    if at and not f.starts_now:
        when = f"~{at.group(1)} ({when})"
    where = f"{f.gpus} {f.gpu_type or 'mixed'}"
    if f.domain:
        where += " " + f.domain.split(":")[-1]
    return f"{when}, {where}"


def forecast_basis(instance: Instance, plan: PlacementPlan) -> str:
    """What the table's forecasts rest on, in one line (each job's ``forecasts[].text`` says
    it too; the table's cells have no room): run times assumed for the queue's jobs
    (admitted ones hold their GPUs that long) without a ``hyperplace.io/duration`` annotation, ends assumed for running jobs without
    ``spec.runningJobs[].remainingS``, and that no later arrival goes first."""
    from hyperplace.commands.render import count
    from hyperplace.sim.forecast import DEFAULT_RUN_S, DURATION_ANNOTATION, forecast_inputs

    hours = f"{DEFAULT_RUN_S / 3600:g} h"
    # what the forecast itself read (one reading: the line cannot drift from the forecast);
    # the queue's jobs, admitted ones too: a job started now holds its GPUs for its run time
    inputs = forecast_inputs(instance)
    unsized, untold, running = len(inputs.assumed), inputs.run_assumed, inputs.running
    parts = []
    if unsized:
        parts.append(f"{count(unsized)} of {count(len(instance.jobs))} queued jobs run "
                     f"{hours} (no {DURATION_ANNOTATION} annotation)")
    if untold:
        parts.append(f"{count(untold)} of {count(len(running))} running jobs end in {hours} "
                     "(no spec.runningJobs[].remainingS)")
    parts.append("running jobs end as predicted and no later arrival goes first")
    return "forecasts assume: " + "; ".join(parts)


def _print_table(plan: PlacementPlan, instance: Instance, console: Console,
                 explain: bool = False, top: int | None = None, show_all: bool = False) -> None:
    from hyperplace.commands import render as r
    from hyperplace.commands.render import Column

    top = r.DEFAULT_TOP if top is None else top
    r.print_summary(console, f"hyperplace solve: {instance.name}",
                    plan_summary(plan, instance.name, explain))
    if explain:
        console.print("objective terms, in order of precedence:")
        for key, text in TERM_LEGEND.items():
            if key in plan.objective_terms:
                r.print_line(console, f"  {key}: {text}")
    moved = {m.job for m in plan.migrations}
    if plan.jobs:
        where = gpus_by_node(plan)
        rows = []
        shown, hidden = r.cap(plan.jobs, top, show_all)
        for j in shown:
            nodes = [f"{n}[{_ranges(g)}]" for n, g in where.get(j.job, {}).items()]
            text = " ".join(nodes[:6]) + (f" +{len(nodes) - 6} nodes" if len(nodes) > 6 else "")
            types = " ".join(f"{r.count(v)} {k}" for k, v in j.gpu_types.items())
            rows.append([j.job + (" (migrated)" if j.job in moved else ""), str(j.priority),
                         types or r.count(j.gpus), text])
        r.print_table(console, [Column("job"), Column("pri", justify="right"), Column("GPUs"),
                                Column("where (node[GPU indices])", "text")],
                      rows, "admitted jobs")
        if hidden:
            r.print_line(console, r.more_line(hidden, "admitted job"))
    if plan.preemptions:
        rows = [[pe.job, pe.why, pe.preemptor, r.count(pe.gpus), r.num(pe.lost_gpu_seconds, 0)]
                for pe in plan.preemptions]
        r.print_table(console, [Column("job"), Column("why", "text", min_width=10),
                                Column("for"), Column("GPUs", justify="right"),
                                Column("lost GPU-s", justify="right")],
                      rows, "preempted running jobs")
    if plan.migrations:
        from hyperplace.commands.defrag import print_migrations

        print_migrations(plan, console)
    if plan.pending:
        shown, hidden = r.cap(plan.pending, top, show_all)
        fc = {f.job: _forecast_cell(f) for f in plan.forecasts}
        if fc:
            r.print_table(console, [Column("job"), Column("why", "text", min_width=30),
                                    Column("forecast", "text", min_width=14)],
                          [[pj.job, "\n".join(pj.reasons), fc.get(pj.job, "")]
                           for pj in shown], "pending jobs")
            r.print_line(console, forecast_basis(instance, plan))
        else:
            r.print_table(console, [Column("job"), Column("why", "text", min_width=30)],
                          [[pj.job, "\n".join(pj.reasons)] for pj in shown], "pending jobs")
        if hidden:
            r.print_line(console, r.more_line(hidden, "pending job"))


def solve_command(
    instance: Annotated[str | None, typer.Option(
        "--instance", "-i", help="bundled instance name or Instance file (default: "
        "the bundled mixed-a100-h100)")] = None,
    cluster: Annotated[Path | None, typer.Option(help=CLUSTER_HELP)] = None,
    jobs: Annotated[Path | None, typer.Option(help=JOBS_HELP)] = None,
    budget: Annotated[float, typer.Option(help=BUDGET_HELP)] = 10.0,
    solver: Annotated[Solver, typer.Option(
        help="auto = greedy, then an exact backend started from it (CP-SAT for small or "
        "NVLink-clique models, HiGHS for large all-NVSwitch ones)")] = Solver.auto,
    policy: Annotated[Policy, typer.Option(
        help="prefer the fastest or the cheapest qualifying GPU")] = Policy.performance,
    seed: Annotated[int, typer.Option(
        min=0, max=MAX_SEED, help=f"solver random seed, 0..{MAX_SEED}")] = 0,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="write the plan here (.yaml or .json)")] = None,
    fmt: Annotated[Format | None, typer.Option(
        "--format", "-f", help=FORMAT_HELP)] = None,
    draw: Annotated[Path | None, typer.Option(
        "--draw", help="also draw the plan as an SVG picture (leaves, nodes, GPUs by job)")]
    = None,
    explain: Annotated[bool, typer.Option(
        "--explain", help="explain the objective terms under the table")] = False,
    calibration: Annotated[Path | None, typer.Option(
        "--calibration", help="cost-model calibration (hyperplace calibrate): --policy "
        "performance ranks GPU types by its predicted speed")] = None,
    queues: Annotated[list[Path] | None, typer.Option(
        "--queues", help="Kueue ClusterQueue/LocalQueue/ResourceFlavor/Cohort or Volcano "
        "Queue documents: quotas as hard limits, fair share after priority (repeatable)")] = None,
    preemption: Annotated[Preemption, typer.Option(
        "--preemption", help="may running jobs (spec.runningJobs: priority, queue, "
        "checkpointAgeS) be stopped: never, for a higher-priority job, or also for a queue "
        "reclaiming its nominal quota from borrowers in its cohort; decided in the same "
        "model: lower-priority victims first, then least lost work, then fewest victims, "
        "only when the preemptor is then placed whole")] = Preemption.never,
    running_moveable: Annotated[bool, typer.Option(
        "--running-moveable", help="running jobs with a manifest in spec.runningJobs[].job may "
        "migrate (checkpoint, restart elsewhere), decided in the same model: only when that "
        "admits more pending demand, then least lost work (GPUs x checkpointAgeS), then "
        "fewest moves; a moved job runs again whole; shown as migrations")] = False,
    decompose: Annotated[bool, typer.Option(
        "--decompose", help="a round of several clusters solved cluster by cluster: each job "
        "to one cluster by an aggregated LP, each cluster's part under its share of the "
        "budget (split by measured need), merged into one plan of the whole round")] = False,
    hot_spares: Annotated[int, typer.Option(
        "--hot-spares", help="whole free nodes to leave free in every leaf domain for repairs "
        "(the solver chooses which; hyperplace repair may use them)")] = 0,
    top: Annotated[int, typer.Option("--top", min=0, help=TOP_HELP)] = 20,
    show_all: Annotated[bool, typer.Option("--all", help=ALL_HELP)] = False,
) -> None:
    """Solve one scheduling round: which pending jobs run, on exactly which GPUs."""
    from hyperplace.deadline import command_deadline, write_reserve_s
    from hyperplace.solvers.driver import solve_placement

    began = time.perf_counter()
    pause_collector()
    check_budget(budget, minimum=MIN_BUDGET_S)
    request = round_request(solver=solver.value, policy=policy.value, budget_s=budget,
                            seed=seed, preemption=preemption.value,
                            running_moveable=running_moveable, hot_spares=hot_spares)
    file_fmt = file_format(fmt.value if fmt is not None else None, output) if output else None
    if draw is not None and draw.suffix.lower() != ".svg":
        raise InputError(f"pictures are SVG: give a .svg file name, got {str(draw)!r}",
                         path="--draw")
    inst = with_queue_files(resolve_instance(instance, cluster, jobs), queues or [])
    from hyperplace.sim.forecast import run_times

    run_times(inst)  # a bad duration annotation is refused whatever the budget leaves
    fitted = None
    if calibration is not None:
        from hyperplace.costmodel.calibration import load_calibration

        fitted = load_calibration(calibration)
    # the budget runs from process start: reading the files counts, and writing keeps a share
    written = file_fmt if output is not None else (fmt.value if fmt is not None else "table")
    write_s = write_reserve_s(inst, written or "yaml")
    deadline = command_deadline(budget, write_s, since=began)
    as_given = inst  # drawn and tabled as it is
    if decompose and (running_moveable or preemption != Preemption.never or hot_spares):
        raise InputError("--decompose solves rounds without preemption, migration or hot "
                         "spares", path="--decompose")
    with interruptible():
        # with --preemption the victims, with --running-moveable the migrations, are
        # variables of the same model (one solve)
        from hyperplace.costmodel.speed import use_calibration

        with use_calibration(fitted):  # --policy performance ranks by THE speed model
            if decompose:
                from hyperplace.solvers.decompose import solve_decomposed

                plan = solve_decomposed(inst, solver=request.solver, budget_s=request.budget_s,
                                        policy=request.policy, seed=request.seed,
                                        deadline=deadline)
            else:
                plan = solve_placement(inst, **request.solve_kwargs(), deadline=deadline,
                                       write_s=write_s)
        # every job's forecast: admitted now, pending ones from the over-time schedule
        # (the list schedule, hyperplace.sim.forecast), when it fits in what the budget
        # has left: it runs after the solve, so it is not in the solve's own deadline
        from hyperplace.sim import forecast

        need = forecast.forecast_cost_s(inst, plan)
        if need <= deadline - time.perf_counter():
            # the plan's now is the wall clock: each text also says "about 14:20 UTC"
            plan = plan.model_copy(update={"forecasts": forecast.forecast_plan(
                inst, plan, clock=time.time())})
        else:
            plan = plan.model_copy(update={"message": "; ".join(filter(None, [
                plan.message, f"no forecasts: the budget had no time left for them (about "
                f"{need:.2g} s for {len(inst.jobs):,} jobs; a larger --budget, "
                "or `hyperplace why JOB` for one job)"]))})
        # which instance a later `hyperplace check PLAN` may use without options: a bundled
        # name only; a file is named for the record, and check reads it only when asked
        source = None if cluster is not None else (instance or plan.metadata.instance)
        if source and Path(source).exists():
            source = str(Path(source).resolve())
        plan = plan.model_copy(
            update={"metadata": plan.metadata.model_copy(update={"instance": source}),
                    "hot_spares": hot_spares,
                    "message": "; ".join(filter(None, [plan.message, f"{hot_spares} whole free "
                                                       "node(s) per leaf kept as hot spares"
                                                       if hot_spares else ""]))})
        late = over_budget(budget, began)
        if late is not None:  # said in the plan and on stderr, whatever the output
            plan = plan.model_copy(update={"message": "; ".join(filter(None, [plan.message,
                                                                              late]))})
            print(f"warning: --budget {budget:g}: {late}", file=sys.stderr)
        text = dump(plan, file_fmt) if output is not None and file_fmt else None
        picture = None
        if draw is not None:
            from hyperplace.draw import draw_svg
            picture = draw_svg(as_given, plan)
    if output is not None and text is not None:
        write_output(output, text, f"{plan.status.value}, {len(plan.jobs)} admitted, "
                     f"{len(plan.pending)} pending"
                     + (f", {len(plan.skipped)} skipped (not GPU jobs)" if plan.skipped else ""))
    if draw is not None and picture is not None:
        write_output(draw, picture, "picture of the plan")
    if output is None:  # -o FILE: the file and its one-line summary, nothing else
        shown = fmt or Format.table
        if shown == Format.table:
            _print_table(plan, as_given, console(), explain, top, show_all)
        else:
            sys.stdout.write(dump(plan, shown.value))
    written_late = over_budget(budget, began) if late is None else None
    if written_late is not None:  # writing took it past: the plan cannot say so, stderr does
        sys.stdout.flush()
        print(f"warning: --budget {budget:g}: writing the plan took it {written_late}",
              file=sys.stderr)
    end_process()


def instance_named_by(plan: PlacementPlan, plan_file: Path) -> str:
    """The bundled instance a plan names (``metadata.instance``), for commands given a plan
    and no instance; a plan naming none, or a file, is refused with what to pass instead."""
    from hyperplace.instances.registry import bundled_names

    name = plan.metadata.instance
    if not name:
        raise InputError("the plan does not name its instance (it was solved from "
                         "--cluster/--jobs); pass the same --cluster and --jobs, or --instance",
                         source=str(plan_file), path="metadata.instance")
    if name not in bundled_names():
        # a plan is data: it may name a bundled instance, but never make a command open a
        # local path on its own (a tampered plan could name any file)
        raise InputError(f"names {name!r}, which is not a bundled instance; to use a file, "
                         f"pass it: --instance FILE (or --cluster and --jobs)",
                         source=str(plan_file), path="metadata.instance")
    return name


def check_command(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="PlacementPlan YAML/JSON")],
    instance: Annotated[str | None, typer.Option(
        "--instance", "-i", help="bundled name or Instance file (default: the bundled "
        "instance the plan names)")] = None,
    cluster: Annotated[Path | None, typer.Option(
        help="Cluster or Instance file the plan was solved on")] = None,
    jobs: Annotated[Path | None, typer.Option(
        help="the jobs file or directory it was solved with")] = None,
    queues: Annotated[list[Path] | None, typer.Option(
        "--queues", help="the queue documents it was solved with (quotas are checked)")] = None,
    running: Annotated[Path | None, typer.Option(
        "--running", help="manifests of running jobs the plan migrates, if the instance does "
        "not hold them (as for hyperplace defrag --running)")] = None,
    failed: Annotated[str | None, typer.Option(
        "--failed", help="for a repair plan: the failed GPUs and nodes it repaired (as for "
        "hyperplace repair); the plan is checked on the state after the failure")] = None,
) -> None:
    """Check a plan against an instance with the independent checker (exit 1 on violations)."""
    from hyperplace.check import check, format_violations

    docs = load_documents(plan_file)
    plan = parse(PlacementPlan, docs[0], source=str(plan_file))
    name = instance
    if name is None and cluster is None and jobs is None:
        name = instance_named_by(plan, plan_file)
    inst = with_queue_files(resolve_instance(name, cluster, jobs), queues or [])
    if running is not None:
        from hyperplace.commands.defrag import with_running_files

        inst = with_running_files(inst, running)
    if failed is not None:
        from hyperplace.solvers.workflows.repair import read_failed, repair_instance

        try:
            inst = repair_instance(inst, read_failed(failed))
        except ValueError as exc:
            raise InputError(str(exc).removeprefix("failed: "), path="--failed") from None
    violations = check(plan, inst)
    if violations:
        print(format_violations(violations))
        raise typer.Exit(1)
    print(f"{plan_file}: ok against {inst.name} ({check_summary(plan)}; no violations)")


def check_summary(plan: PlacementPlan) -> str:
    """What a checked plan does, in words: a repair says what it repaired, a round what it
    admitted, migrated and left pending."""
    from hyperplace.commands.render import plural

    repaired = {m.job for m in plan.migrations if m.why == "repair"}
    moved = {m.job for m in plan.migrations} - repaired
    admitted = [j for j in plan.jobs if j.job not in repaired and j.job not in moved]
    units = plural(len(plan.placements), "unit")
    if repaired and not admitted:
        return f"a repair: {plural(len(repaired), 'running job')} re-placed, {units}"
    parts = [f"{plural(len(admitted), 'job')} admitted"]
    if moved:
        parts.append(f"{plural(len(moved), 'running job')} migrated")
    if repaired:
        parts.append(f"{plural(len(repaired), 'running job')} repaired")
    parts.append(f"{units} placed")
    parts.append(f"{plural(len(plan.pending), 'job')} pending")
    return ", ".join(parts)


def register(app: typer.Typer) -> None:
    app.command("solve")(solve_command)
    app.command("check")(check_command)
