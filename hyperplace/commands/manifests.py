"""``hyperplace manifests PLAN --to kubernetes|slurm``: a plan as what the cluster enforces.

Thin: reads the plan and the instance it was solved on (as ``hyperplace check`` does), checks
the plan with the independent checker first (a plan that breaks a rule is not written), and
writes :mod:`hyperplace.instances.writers`' documents, one file per job (or prints them).
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from hyperplace.commands.common import one_line_errors
from hyperplace.errors import InputError
from hyperplace.io import dump_yaml, load_documents, parse, write_atomic
from hyperplace.models.plan import PlacementPlan


class Target(StrEnum):
    kubernetes = "kubernetes"
    slurm = "slurm"


class DraDriver(StrEnum):
    v25_3 = "25.3"
    v25_8 = "25.8"
    v25_12 = "25.12"


class KueueApi(StrEnum):
    v1beta1 = "v1beta1"
    v1beta2 = "v1beta2"


@one_line_errors
def manifests_command(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="PlacementPlan YAML/JSON")],
    to: Annotated[Target, typer.Option("--to", help="kubernetes (DRA ResourceClaims + Volcano "
                                       "Jobs + Kueue TopologyAssignment) or slurm (sbatch)")],
    instance: Annotated[str | None, typer.Option(
        "--instance", "-i", help="bundled name or Instance file the plan was solved on "
        "(default: the bundled instance the plan names)")] = None,
    cluster: Annotated[Path | None, typer.Option(
        help="Cluster, Instance or Kubernetes node file the plan was solved on")] = None,
    jobs: Annotated[Path | None, typer.Option(help="the jobs it was solved with")] = None,
    topology: Annotated[Path | None, typer.Option(
        "--topology", help="a file holding the Kueue Topology whose levels the "
        "TopologyAssignment uses (e.g. the --queues file)")] = None,
    namespace: Annotated[str | None, typer.Option(help="namespace of the objects")] = None,
    dra_driver: Annotated[DraDriver, typer.Option(
        "--dra-driver", help="release of the NVIDIA DRA driver the cluster runs: which device "
        "attribute the ResourceClaims select by (25.3: index, exact without ResourceSlices; "
        "25.8/25.12: uuid or PCI bus id when imported)")] = DraDriver.v25_12,
    kueue_api: Annotated[KueueApi | None, typer.Option(
        "--kueue-api", help="Kueue API version of the TopologyAssignment (default: the "
        "--topology document's, else v1beta2)")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="directory: one file per job (default: stdout)")] = None,
) -> None:
    """Write a plan as Kubernetes objects or sbatch scripts that hold its jobs to its GPUs."""
    from hyperplace.check import check, format_violations
    from hyperplace.commands.solve import instance_named_by, resolve_instance
    from hyperplace.instances.writers import DEFAULT_IMAGE, PLACEHOLDER_COMMAND, \
        is_placeholder, kubernetes_manifests, sbatch_script, split_tasks

    plan = parse(PlacementPlan, load_documents(plan_file)[0], source=str(plan_file))
    if instance is None and cluster is None and jobs is None:
        instance = instance_named_by(plan, plan_file)  # a bundled instance, as check does
    inst = resolve_instance(instance, cluster, jobs)
    violations = check(plan, inst)
    if violations:
        raise InputError(f"the plan breaks {len(violations)} rule(s) on this instance, first: "
                         f"{format_violations(violations[:1])}", source=str(plan_file))
    topo = None
    if topology is not None:
        topo = next((d for d in load_documents(topology) if d.get("kind") == "Topology"), None)
        if topo is None:
            raise InputError("holds no Kueue Topology", source=str(topology))
    files: dict[str, str] = {}
    if to == Target.kubernetes:
        try:
            docs = kubernetes_manifests(inst, plan, topology=topo, namespace=namespace,
                                        dra_driver=dra_driver.value,
                                        kueue_api=kueue_api.value if kueue_api else None)
        except ValueError as exc:
            raise InputError(str(exc), source=str(topology or plan_file)) from None
        for job, ds in docs.items():
            files[f"{job}.yaml"] = "---\n".join(dump_yaml(d) for d in ds)
        for task, written in split_tasks([d for ds in docs.values() for d in ds]).items():
            typer.echo(f"note: {task}: its {len(written)} pods are written as tasks of one "
                       f"pinned pod each ({', '.join(written[:3])}{', ...' if len(written) > 3 else ''}): "
                       "Volcano's svc plugin names host files (/etc/volcano/<task>.host) per task",
                       err=True)
    else:
        for summary in plan.jobs:
            files[f"{summary.job}.sbatch"] = sbatch_script(inst, plan, summary.job)
    placeholders = [s.job for s in plan.jobs if is_placeholder(inst, s.job)]
    if placeholders:
        what = ("a placeholder container 'trainer' (image " + DEFAULT_IMAGE + ", no command; "
                "annotated hyperplace.io/placeholder-container)" if to == Target.kubernetes
                else f"a placeholder command {PLACEHOLDER_COMMAND!r} (marked PLACEHOLDER)")
        typer.echo(f"note: {len(placeholders)} job(s) have no pod template (not read from a "
                   f"Kubernetes workload: {', '.join(placeholders[:5])}"
                   f"{', ...' if len(placeholders) > 5 else ''}): written with {what}; "
                   "replace it with the job's own", err=True)
    if output is None:
        for name, text in files.items():
            typer.echo(f"# {name}\n{text}")
        return
    output.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_atomic(output / name, text)
    typer.echo(f"wrote {len(files)} file(s) to {output}")


def register(app: typer.Typer) -> None:
    app.command("manifests")(manifests_command)
