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
    from hyperplace.commands import render as r
    from hyperplace.commands.render import Column

    rows = [[c.cluster, ", ".join(c.gpu_types) or "-", r.count(c.free_gpus),
             r.count(c.totals_replicas), r.count(c.placed_replicas),
             "; ".join(f"{x.template}: {x.totals_units}/{x.placed_units}" for x in c.templates),
             c.reason or "-"] for c in report.clusters]
    r.print_table(r.console(), [Column("cluster"), Column("types", "text", min_width=7),
                                Column("free GPUs", justify="right"),
                                Column("by totals", justify="right"),
                                Column("as placed", justify="right"),
                                Column("units per template (totals/placed)", "text",
                                       min_width=14),
                                Column("why they differ", "text", min_width=10)],
                  rows, f"estimate: {report.job} ({r.plural(report.replicas_wanted, 'replica')} "
                        f"of {r.count(report.replica_gpus)} GPUs) on {report.instance}: "
                        "replicas that fit now, by totals and as placed")


def register(app: typer.Typer) -> None:
    app.command("estimate")(estimate_command)
