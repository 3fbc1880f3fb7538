"""``hyperplace repair``: re-place only what failed GPUs or nodes force to move (#14)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from hyperplace.commands.common import (
    FORMAT_HELP,
    Format,
    check_budget,
    round_request,
    console,
    file_format,
    interruptible,
    one_line_errors,
    write_output,
)
from hyperplace.errors import InputError


@one_line_errors
def repair_command(
    instance: Annotated[str, typer.Option(
        "--instance", "-i", help="bundled instance name or Instance file before the failure "
        "(running jobs in node.allocated, their manifests in spec.runningJobs[].job)")],
    failed: Annotated[str, typer.Option(
        "--failed", help="failed GPUs and nodes: 'n1:3,n2' (NODE:GPU or a whole NODE), or a "
        "file with one per line (# comments)")],
    running: Annotated[Path | None, typer.Option(
        "--running", help="manifests of running jobs (multi-document YAML or a directory), "
        "added to spec.runningJobs[].job")] = None,
    strategy: Annotated[str, typer.Option(
        "--strategy", help="minimal (keep healthy units when a replacement fits within the "
        "hop limit), replace-all (move every hit job whole) or replace-everything (every "
        "running job placed from scratch: the comparison)")] = "minimal",
    hot_spares: Annotated[int, typer.Option(
        "--hot-spares", help="the hot-spare setting (solve --hot-spares): repairs may use the "
        "spares; the plan records it and says how many leaves still keep that many")] = 0,
    budget: Annotated[float, typer.Option("--budget", help="seconds per solve")] = 10.0,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="write the repair plan (migrations[], why: repair) here; check "
        "it against the instance with the failures applied")] = None,
    fmt: Annotated[Format | None, typer.Option(
        "--format", "-f", help=FORMAT_HELP)] = None,
) -> None:
    """Repair the running jobs that hold failed GPUs: keep their healthy units in place when
    the job's rules allow, else move the whole job; report GPUs moved and work lost."""
    from hyperplace.commands.defrag import print_migrations, with_running_files
    from hyperplace.commands.solve import resolve_instance
    from hyperplace.io import dump
    from hyperplace.solvers.workflows.repair import STRATEGIES, read_failed, repair

    check_budget(budget)
    round_request(hot_spares=hot_spares, budget_s=budget)  # the library's limits, by flag
    if strategy not in STRATEGIES:
        raise InputError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}",
                         path="--strategy")
    file_fmt = file_format(fmt.value if fmt is not None else None, output) if output else None
    inst = with_running_files(resolve_instance(instance, None, None), running)
    try:
        dead = read_failed(failed)
        with interruptible():
            result = repair(inst, dead, strategy=strategy, budget_s=budget,
                            hot_spares=hot_spares)
    except UnicodeDecodeError:
        raise InputError("the file is not UTF-8 text", path="--failed") from None
    except ValueError as exc:
        if isinstance(exc, InputError):
            raise
        msg = str(exc).removeprefix("failed: ")
        raise InputError(msg, path="--failed") from None
    plan = result.plan.model_copy(update={"metadata": result.plan.metadata.model_copy(
        update={"instance": instance})})
    if output is not None and file_fmt:
        write_output(output, dump(plan, file_fmt),
                     f"{len(plan.migrations)} job(s) repaired, {result.gpus_moved} GPUs moved")
    if output is not None:  # -o FILE: the file and its one-line summary, nothing else
        return
    shown = fmt or Format.table
    if shown != Format.table:
        sys.stdout.write(dump(plan, shown.value))
        return
    from hyperplace.commands import render as r
    from hyperplace.commands.render import Column

    out = console()
    r.print_line(out, plan.message)
    rows = [[j.job, "yes" if j.placed else "no", " ".join(j.kept_units) or "-",
             " ".join(j.moved_units) or "-", r.count(j.gpus_moved), r.num(j.lost_gpu_seconds, 0),
             j.reason or "-"] for j in result.jobs]
    r.print_table(out, [Column("job"), Column("repaired"), Column("units kept", "text", min_width=8),
                        Column("units moved", "text", min_width=8),
                        Column("GPUs moved", justify="right"),
                        Column("lost GPU-s", justify="right"), Column("note", "text")],
                  rows, "jobs hit by the failure")
    print_migrations(plan, out)


def register(app: typer.Typer) -> None:
    app.command("repair")(repair_command)
