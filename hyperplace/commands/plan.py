"""``hyperplace plan``: the best parallel configurations of a model on an allocation.

Examples::

    hyperplace plan --model-name llama3-405b --gpus H100x16384
    hyperplace plan --model my-model.yaml --gpus A100-80x64,H100x64 --format json

Searches TP / CP / PP (with virtual stages) / DP, micro-batch, recomputation and sharding
within memory (:mod:`hyperplace.costmodel.plan`), every candidate priced by the same cost
model as ``predict``. Exit codes: 0 an answer, 1 nothing fits in memory (one line on stderr:
the least any configuration needs and by how much it is over, as ``split``), 2 bad input
(one line on stderr).
"""

from __future__ import annotations

import json
from enum import Enum

import typer
from rich.console import Console
from rich.table import Table

from hyperplace.costmodel.calibration import load_calibration
from hyperplace.costmodel.plan import PlanResult, parse_gpus, plan
from hyperplace.errors import InputError
from hyperplace.models.profiles import resolve_model


class Format(str, Enum):
    table = "table"
    json = "json"


def render(res: PlanResult, console: Console) -> None:
    console.print(f"{res.model} on {res.describe_gpus()}, global batch {res.global_batch}: "
                  f"{res.priced} configurations priced, {res.pruned} pruned, "
                  f"{res.seconds:.2f} s")
    table = Table(title="best configurations")
    for col in ("#", "configuration", "step s", "tokens/s", "MFU", "memory GB"):
        table.add_column(col, justify="left" if col == "configuration" else "right")
    for i, b in enumerate(res.best, start=1):
        p = b.prediction
        table.add_row(str(i), b.candidate.label(), f"{p.step_time_s:.3f}",
                      f"{p.tokens_per_s:,.0f}", f"{100 * p.mfu:.1f}%",
                      f"{p.memory_per_gpu_gb:.1f}")
    if res.best:
        console.print(table)
    for loser in res.losers:
        console.print(f"why others lose: {loser['reason']} (e.g. {loser['example']}; "
                      f"{_figures(loser)})")
    for note in res.notes:
        console.print(f"note: {note}")


#: A loser's figures in words, by key (the JSON keys name their unit by suffix: Gb, Pct, S).
_FIGURES = {"neededGb": "needs {:,.1f} GB per GPU", "overByGb": "{:,.1f} GB over",
            "slowerByPct": "step {:,.1f}% slower", "boundS": "compute alone {:,.3f} s",
            "bestS": "best {:,.3f} s", "candidates": "{:,} configurations"}


def _figures(loser: dict) -> str:
    """``needs 84.5 GB per GPU, 4.5 GB over`` / ``step 26.0% slower, bubble +1.593 s``."""
    out = []
    for key, value in loser.items():
        if key in ("reason", "example"):
            continue
        if key == "extraS" and isinstance(value, (int, float)):
            part = str(loser.get("reason", "")).removeprefix("slower: more ")
            out.append(f"{part} +{value:,.3f} s")
        elif key in _FIGURES and isinstance(value, (int, float)):
            out.append(_FIGURES[key].format(value))
        else:
            out.append(f"{key} {value}")
    return ", ".join(out)


def plan_command(
    model: str | None = typer.Option(None, "--model", help="ModelSpec YAML/JSON file"),
    model_name: str | None = typer.Option(None, "--model-name", help="preset, e.g. llama3-70b"),
    gpus: str = typer.Option(..., "--gpus", help="allocation, TYPExN[,TYPExN]"),
    global_batch: int | None = typer.Option(None, "--global-batch",
                                            help="sequences per step (default ~4M tokens)"),
    top: int = typer.Option(5, "--top", help="configurations to show"),
    calibration: str | None = typer.Option(None, "--calibration",
                                           help="calibration file (hyperplace calibrate)"),
    output_format: Format = typer.Option(Format.table, "--format", help="table or json"),
) -> None:
    """Search the parallel configurations of a model on GPUs: best step time within memory."""
    try:
        if top <= 0:
            raise InputError(f"must be a positive integer, got {top}", path="--top")
        spec = resolve_model(path=model, preset=model_name)
        fitted = load_calibration(calibration) if calibration else None
        res = plan(spec, parse_gpus(gpus), global_batch=global_batch, top=top,
                   calibration=fitted)
    except InputError as exc:
        typer.echo(f"error: {exc.one_line()}", err=True)
        raise typer.Exit(2) from None
    if output_format == Format.json:
        typer.echo(json.dumps(res.to_doc(), indent=2))
    else:
        from hyperplace.commands.render import console

        render(res, console())
    if not res.best:
        typer.echo(f"error: {res.nothing_fits()}", err=True)
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("plan")(plan_command)
