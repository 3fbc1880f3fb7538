"""``hyperplace defrag``: migrations of running jobs that let a large pending job fit
(``--for JOB``), or that make the largest free domain per GPU type larger (#14)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hyperplace.commands.common import (
    BUDGET_HELP,
    FORMAT_HELP,
    Format,
    check_budget,
    console,
    file_format,
    interruptible,
    one_line_errors,
    round_request,
    write_output,
)
from hyperplace.errors import InputError
from hyperplace.models.plan import PlacementPlan


def print_migrations(plan: PlacementPlan, out: Console) -> None:
    """The plan's ``migrations[]`` as a table (nothing when there are none)."""
    from hyperplace.commands import render as r
    from hyperplace.commands.render import Column

    if not plan.migrations:
        return
    rows = [[m.job, m.why, m.for_job or "-", r.count(m.gpus), r.count(m.gpus_moved),
             r.num(m.lost_gpu_seconds, 0), " ".join(m.from_nodes) or "-",
             " ".join(m.to_nodes) or "-"] for m in plan.migrations]
    r.print_table(out, [Column("job"), Column("why"), Column("for"),
                        Column("GPUs", justify="right"), Column("moved", justify="right"),
                        Column("lost GPU-s", justify="right"), Column("from", "text", min_width=8),
                        Column("to", "text", min_width=8)],
                  rows, "migrations (checkpoint, restart elsewhere)")


def with_running_files(inst, running: Path | None):
    """The instance with the manifests of ``--running`` added to ``spec.runningJobs``."""
    if running is None:
        return inst
    from hyperplace.instances.registry import read_jobs

    specs = [j for j, _, _ in read_jobs(running)]
    try:
        return inst.with_running_manifests(specs)
    except ValueError as exc:
        raise InputError(str(exc), source=str(running)) from None


@one_line_errors
def defrag_command(
    instance: Annotated[str, typer.Option(
        "--instance", "-i", help="bundled instance name or Instance file (running jobs in "
        "node.allocated and spec.runningJobs, with their manifests in spec.runningJobs[].job "
        "when they may move)")],
    for_job: Annotated[str | None, typer.Option(
        "--for", help="the pending job to make room for (default: make the largest free "
        "domain per GPU type larger)")] = None,
    running: Annotated[Path | None, typer.Option(
        "--running", help="manifests of running jobs that may move (multi-document YAML or a "
        "directory), added to spec.runningJobs[].job; a running job without one stays")] = None,
    max_moves: Annotated[int, typer.Option(
        "--max-moves", help="most running jobs to migrate (0..100,000, as a round's "
        "maxMoves)")] = 4,
    budget: Annotated[float, typer.Option(
        "--budget", help=BUDGET_HELP)] = 10.0,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="write the plan (with migrations[]) here (.yaml or .json)")] = None,
    fmt: Annotated[Format | None, typer.Option(
        "--format", "-f", help=FORMAT_HELP)] = None,
) -> None:
    """Propose migrations (checkpoint, restart elsewhere) of running jobs, least lost work
    first: so that one pending job fits (--for), or so that the largest free domain (whole
    free nodes of one GPU type in one leaf) grows."""
    from hyperplace.commands.solve import resolve_instance
    from hyperplace.io import dump
    from hyperplace.solvers.workflows.defrag import defrag, defrag_cluster

    check_budget(budget)
    # the round request's move limit (models.request.MaxMoves), named by flag
    round_request(running_moveable=True, max_moves=max_moves, budget_s=budget)
    file_fmt = file_format(fmt.value if fmt is not None else None, output) if output else None
    inst = with_running_files(resolve_instance(instance, None, None), running)
    if for_job is not None and for_job not in {j.name for j in inst.jobs}:
        raise InputError(f"{for_job!r} is not a pending job of the instance (jobs: "
                         f"{', '.join(j.name for j in inst.jobs[:8]) or 'none'})", path="--for")
    with interruptible():
        if for_job is not None:
            result = defrag(inst, for_job, max_moves=max_moves, budget_s=budget)
        else:
            result = defrag_cluster(inst, max_moves=max_moves, budget_s=budget)
        plan = result.plan.model_copy(update={"metadata": result.plan.metadata.model_copy(
            update={"instance": instance})})
    if output is not None and file_fmt:
        write_output(output, dump(plan, file_fmt),
                     f"{len(plan.migrations)} migration(s), {len(plan.jobs)} placed")
    if output is not None:  # -o FILE: the file and its one-line summary, nothing else
        return
    shown = fmt or Format.table
    if shown == Format.table:
        from hyperplace.commands.render import print_line

        out = console()
        print_line(out, result.message)
        print_migrations(plan, out)
    else:
        sys.stdout.write(dump(plan, shown.value))


def register(app: typer.Typer) -> None:
    app.command("defrag")(defrag_command)
