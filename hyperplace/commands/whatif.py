"""``hyperplace whatif``: a grid of scenario changes, each result kept in SQLite as it ends."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from hyperplace.commands.common import output_dir


class Backend(StrEnum):
    local = "local"
    ray = "ray"


def whatif_command(
    sweep_file: Annotated[Path, typer.Argument(metavar="SWEEP.yaml", help="base scenario and grid of changes")],
    out: Annotated[Path | None, typer.Option("--output", "-o", help="directory for sweep.sqlite and the report (default: SWEEP-whatif/)")] = None,
    backend: Annotated[Backend, typer.Option(help="local process pool, or ray")] = Backend.local,
    workers: Annotated[int, typer.Option(min=1, max=256, help="scenarios run at once")] = 2,
    ray_address: Annotated[str | None, typer.Option(help="an existing Ray cluster (default: start a local one)")] = None,
    charts: Annotated[bool, typer.Option("--charts/--no-charts", help="PNG charts (needs matplotlib: the 'plots' extra)")] = True,
    progress: Annotated[bool, typer.Option("--progress/--no-progress", help="show a progress bar on stderr")] = True,
) -> None:
    """Run a what-if sweep; a killed sweep started again skips finished scenarios."""
    from hyperplace.fedsim import POLICIES as FEDERATION_POLICIES
    from hyperplace.sim.whatif import load_sweep, report, run_sweep

    sweep = load_sweep(sweep_file, extra=FEDERATION_POLICIES)
    target = output_dir(out or sweep_file.with_name(f"{sweep_file.stem}-whatif"))
    console = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, disable=not progress) as bar:
        task = bar.add_task("scenarios", total=len(sweep.scenarios))

        def tick(done: int, total: int, last: str) -> None:
            bar.update(task, completed=done, description=f"scenarios {last[:40]}")

        rows = run_sweep(sweep, target, backend=backend.value, workers=workers,
                         ray_address=ray_address, progress=tick)
    written = report(rows, target, charts=charts)
    failed = [r for r in rows if r["status"] != "done"]
    print_report((target / "report.md").read_text())
    for line in dropped_lines(rows):
        console.print(line, highlight=False, markup=False)
    console.print(f"{len(rows)} scenarios in {target / 'sweep.sqlite'} ({len(failed)} failed); "
                  f"report: {', '.join(str(p) for p in written)}")


def dropped_lines(rows: list[dict]) -> list[str]:
    """One line per scenario that replayed without some trace jobs (a job no node set of
    the scenario's instance can hold, or whose GPU-type constraint names no type of it):
    a sweep drops them where ``simulate`` refuses them, and said so only in sweep.sqlite."""
    out = []
    for row in rows:
        w = (row.get("result") or {}).get("workload") or {}
        big, typed = w.get("dropped_too_large") or 0, w.get("dropped_type_constraints") or 0
        if big:
            out.append(f"{row['id']}: {big:,} of {w.get('trace_jobs', 0):,} trace jobs left "
                       f"out: they cannot fit the instance (first: {w.get('dropped_example')})")
        if typed:
            out.append(f"{row['id']}: {typed:,} jobs' GPU-type constraint names no type of "
                       f"the instance: dropped, they run on any type (first: "
                       f"{w.get('dropped_type_example')})")
    return out


def print_report(markdown: str) -> None:
    """The report's table fitted to the width (scenario and status kept; metrics dropped from
    the right with a note when narrow); report.md keeps the markdown as written."""
    from hyperplace.commands import render as r
    from hyperplace.commands.render import Column

    out = r.console()
    header: list[str] | None = None
    rows: list[list[str]] = []
    for line in markdown.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if all(set(c) <= set("-: ") for c in cells):
                continue
            if header is None:
                header = cells
            else:
                rows.append(cells)
        elif line.strip() and header is None:
            r.print_line(out, line.lstrip("# "))
    if header is None:
        return
    columns = [Column(h.replace("_", " ").removesuffix(" s") + (" (s)" if h.endswith("_s")
                                                                   else ""),
                      "required" if i < 2 else "optional", "left" if i < 2 else "right")
               for i, h in enumerate(header)]
    r.print_table(out, columns, rows, hint="report.md and report.csv have every column")


def register(app: typer.Typer) -> None:
    app.command("whatif")(whatif_command)
