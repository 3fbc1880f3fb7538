"""``hyperplace estimate``: Karmada's estimator question per member cluster, as placed.

Examples::

    hyperplace estimate --instance seed-beijing-shanghai --job seed-8layer-pipeline
    hyperplace estimate --instance fed.yaml --job jobs/llm.yaml --format json

``--job`` is the name of a job in the instance's queue, or a file holding one
FoundationModelTrainingJob or HyperJob (``splitPolicy.mode: auto``). Exit 2 on bad input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hyperplace.commands.common import Format
from hyperplace.errors import InputError
from hyperplace.io import dump


def _instance(name: str):
    from hyperplace.federation.io import SEED_INSTANCE, load_federation_file, seed_instance
    from hyperplace.instances import load_instance

    if name == f"{SEED_INSTANCE}-bubbles":
        return seed_instance()
    path = Path(name)
    if path.exists() and path.is_file():
        return load_federation_file(path)
    return load_instance(name)


def estimate_command(
    instance: Annotated[str, typer.Option(
        "--instance", "-i", help="bundled instance, Instance/federation file, or "
                                 "seed-beijing-shanghai-bubbles")],
    job: Annotated[str, typer.Option("--job", "-j", help="job name in the queue, or a job file")],
    fmt: Annotated[Format, typer.Option("--format", "-f", help="table, json or yaml")] = Format.table,
) -> None:
    """How many complete replicas of a job fit in each cluster now: totals vs as placed."""
    from hyperplace.federation.estimate import estimate
    from hyperplace.federation.io import load_jobs
    from hyperplace.federation.problem import from_training_job

    inst = _instance(instance)
    if Path(job).exists():
        jobs = load_jobs([job])
        if len(jobs) != 1:
            raise InputError(f"holds {len(jobs)} jobs; give one", source=job, path="--job")
        fjob = jobs[0]
    else:
        match = [j for j in inst.jobs if j.name == job]
        if not match:
            names = ", ".join(j.name for j in inst.jobs) or "none"
            raise InputError(f"no job {job!r} in {inst.name}'s queue (jobs: {names}) and no "
                             "such file", path="--job")
        fjob = from_training_job(match[0])
    report = estimate(inst, fjob)
    if fmt != Format.table:
        sys.stdout.write(dump(report, fmt.value))
        return
    t = Table(title=f"estimate: {report.job} ({report.replicas_wanted} replicas of "
                    f"{report.replica_gpus} GPUs) on {report.instance}")
    for col in ("cluster", "types", "free GPUs", "replicas by totals", "replicas as placed",
                "units per template (totals/placed)", "why they differ"):
        t.add_column(col, overflow="fold")
    for c in report.clusters:
        t.add_row(c.cluster, ",".join(c.gpu_types) or "-", str(c.free_gpus),
                  str(c.totals_replicas), str(c.placed_replicas),
                  "; ".join(f"{x.template}: {x.totals_units}/{x.placed_units}"
                            for x in c.templates), escape(c.reason) or "-")
    Console(width=None if sys.stdout.isatty() else 160).print(t)


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_command)
