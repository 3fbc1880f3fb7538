"""``hyperplace solve`` (one scheduling round) and ``hyperplace check`` (verify a plan)."""

from __future__ import annotations

import math
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from hyperplace.errors import InputError
from hyperplace.io import dump, load_documents, parse
from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan


class Solver(StrEnum):
    auto = "auto"
    cpsat = "cpsat"
    milp = "milp"
    greedy = "greedy"


class Policy(StrEnum):
    performance = "performance"
    cost = "cost"


class Format(StrEnum):
    table = "table"
    json = "json"
    yaml = "yaml"


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


def _print_table(plan: PlacementPlan, instance: Instance, console: Console) -> None:
    head = Table(title=f"hyperplace solve: {instance.name}", show_header=False)
    head.add_row("status", str(plan.status.value))
    head.add_row("solver", plan.solver)
    head.add_row("objective (priority-weighted GPUs)", f"{plan.objective:g}" if plan.objective is not None else "-")
    head.add_row("bound", f"{plan.bound:g}" if plan.bound is not None else "-")
    head.add_row("gap", f"{plan.gap:.2%}" if plan.gap is not None else "-")
    head.add_row("time", f"{plan.runtime_s:.2f} s of {plan.budget_s:g} s budget" if plan.budget_s else f"{plan.runtime_s:.2f} s")
    for k, v in plan.objective_terms.items():
        if k != "admitted_priority_demand":
            head.add_row(f"  {k}", f"{v:g}")
    used: dict[str, int] = {}
    for j in plan.jobs:
        for t, c in j.gpu_types.items():
            used[t] = used.get(t, 0) + c
    head.add_row("GPUs used by type", ", ".join(f"{t}: {c}" for t, c in sorted(used.items())) or "-")
    head.add_row("admitted / pending", f"{len(plan.jobs)} / {len(plan.pending)}")
    if plan.message:
        head.add_row("note", plan.message)
    console.print(head)
    if plan.jobs:
        t = Table(title="admitted jobs")
        for col in ("job", "priority", "GPUs", "types", "nodes", "domains"):
            t.add_column(col, overflow="fold")
        for j in plan.jobs:
            leaves = sorted({d.values[2] for d in j.topology_assignment.domains}) if j.topology_assignment else []
            nodes = ", ".join(j.node_names[:4]) + (f" +{len(j.node_names) - 4}" if len(j.node_names) > 4 else "")
            t.add_row(j.job, str(j.priority), str(j.gpus),
                      ", ".join(f"{k}x{v}" for k, v in j.gpu_types.items()), nodes,
                      ", ".join(leaves[:3]) + (" ..." if len(leaves) > 3 else ""))
        console.print(t)
    if plan.pending:
        t = Table(title="pending jobs")
        t.add_column("job", overflow="fold")
        t.add_column("why")
        for pj in plan.pending:
            t.add_row(pj.job, "\n".join(pj.reasons))
        console.print(t)


def solve_command(
    instance: Annotated[str | None, typer.Option("--instance", "-i", help="bundled instance name or Instance file (default: the bundled default)")] = None,
    cluster: Annotated[Path | None, typer.Option(help="Cluster or Instance file")] = None,
    jobs: Annotated[Path | None, typer.Option(help="jobs file (multi-document YAML) or directory")] = None,
    budget: Annotated[float, typer.Option(min=0.05, help="time budget in seconds")] = 10.0,
    solver: Annotated[Solver, typer.Option(help="auto = greedy, then CP-SAT hinted with it")] = Solver.auto,
    policy: Annotated[Policy, typer.Option(help="prefer the fastest or the cheapest qualifying GPU")] = Policy.performance,
    seed: Annotated[int, typer.Option(help="solver random seed")] = 0,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="write the plan here")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f")] = Format.table,
) -> None:
    """Solve one scheduling round: which pending jobs run, on exactly which GPUs."""
    from hyperplace.deadline import command_deadline, write_reserve_s
    from hyperplace.solvers.driver import solve_placement

    began = time.perf_counter()

    if not math.isfinite(budget):
        raise InputError(f"must be a finite number of seconds, got {budget}", path="--budget")
    inst = resolve_instance(instance, cluster, jobs)
    # the budget runs from process start: reading the files counts, and writing keeps a share
    deadline = command_deadline(budget, write_reserve_s(inst), since=began)
    plan = solve_placement(inst, solver=solver.value, budget_s=budget, policy=policy.value,
                           seed=seed, deadline=deadline)
    # which instance a later `hyperplace check PLAN` should use without options: a bundled
    # name or an Instance file, never a cluster/jobs pair it could not find again
    source = None if cluster is not None else (instance or plan.metadata.instance)
    if source and Path(source).exists():
        source = str(Path(source).resolve())
    plan = plan.model_copy(update={"metadata": plan.metadata.model_copy(update={"instance": source})})
    if output is not None:
        out_fmt = "json" if output.suffix == ".json" else "yaml"
        try:
            output.write_text(dump(plan, out_fmt))
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror or exc}", source=str(output)) from None
        print(f"wrote {output}: {plan.status.value}, {len(plan.jobs)} admitted, "
              f"{len(plan.pending)} pending", file=sys.stderr)
    if fmt == Format.table:
        _print_table(plan, inst, Console())
    elif output is None:
        sys.stdout.write(dump(plan, fmt.value))


def check_command(
    plan_file: Annotated[Path, typer.Argument(metavar="PLAN", help="PlacementPlan YAML/JSON")],
    instance: Annotated[str | None, typer.Option(
        "--instance", "-i", help="bundled name or Instance file (default: the one the plan names)")] = None,
    cluster: Annotated[Path | None, typer.Option(help="Cluster or Instance file the plan was solved on")] = None,
    jobs: Annotated[Path | None, typer.Option(help="the jobs file or directory it was solved with")] = None,
) -> None:
    """Check a plan against an instance with the independent checker (exit 1 on violations)."""
    from hyperplace.check import check, format_violations

    docs = load_documents(plan_file)
    plan = parse(PlacementPlan, docs[0], source=str(plan_file))
    name = instance
    if name is None and cluster is None and jobs is None:
        name = plan.metadata.instance
        if not name:
            raise InputError("the plan does not name its instance (it was solved from "
                             "--cluster/--jobs); pass the same --cluster and --jobs, or --instance",
                             source=str(plan_file), path="metadata.instance")
    inst = resolve_instance(name, cluster, jobs)
    violations = check(plan, inst)
    if violations:
        print(format_violations(violations))
        raise typer.Exit(1)
    print(f"{plan_file}: ok against {inst.name} ({len(plan.placements)} units of "
          f"{len(plan.jobs)} jobs placed, {len(plan.pending)} pending; no violations)")


def register(app: typer.Typer) -> None:
    app.command("solve")(solve_command)
    app.command("check")(check_command)
