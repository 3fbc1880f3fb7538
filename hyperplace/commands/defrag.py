"""``hyperplace defrag``: migrations of running jobs that let a large pending job fit (#14)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from hyperplace.commands.common import check_budget, console, one_line_errors
from hyperplace.errors import InputError


@one_line_errors
def defrag_command(
    instance: Annotated[str, typer.Option(
        "--instance", "-i", help="bundled instance name or Instance file (running jobs in "
        "node.allocated and spec.runningJobs, the large job in spec.jobs)")],
    for_job: Annotated[str, typer.Option(
        "--for", help="the pending job to make room for")],
    running: Annotated[Path, typer.Option(
        "--running", help="manifests of the running jobs that may move (multi-document "
        "YAML or a directory); a running job without one stays")],
    max_moves: Annotated[int, typer.Option(
        "--max-moves", min=1, max=24, help="most running jobs to migrate")] = 4,
    budget: Annotated[float, typer.Option(
        "--budget", min=0.05, help="seconds for the search")] = 10.0,
) -> None:
    """Propose migrations (checkpoint, restart elsewhere) of running jobs, least lost work
    first, only when the large job then fits."""
    from hyperplace.commands.solve import resolve_instance
    from hyperplace.instances.registry import read_jobs
    from hyperplace.solvers.defrag import defrag

    check_budget(budget)
    inst = resolve_instance(instance, None, None)
    if for_job not in {j.name for j in inst.jobs}:
        raise InputError(f"{for_job!r} is not a pending job of the instance (jobs: "
                         f"{', '.join(j.name for j in inst.jobs[:8]) or 'none'})", path="--for")
    specs = [j for j, _, _ in read_jobs(running)]
    result = defrag(inst, specs, for_job, max_moves=max_moves, budget_s=budget)
    out = console()
    out.print(escape(result.message))
    if result.migrations:
        table = Table(title="migrations", title_justify="left")
        for col in ("job", "GPUs", "lost GPU-s", "from", "to"):
            table.add_column(col)
        for m in result.migrations:
            table.add_row(escape(m.job), str(m.gpus), f"{m.lost_gpu_seconds:g}",
                          escape(" ".join(m.from_nodes)), escape(" ".join(m.to_nodes)))
        out.print(table)


def register(app: typer.Typer) -> None:
    app.command("defrag")(defrag_command)
