"""``hyperplace federate``: split training jobs across member clusters, as placed.

Examples::

    hyperplace federate                                   # the seed scenario
    hyperplace federate --instance seed-beijing-shanghai --format yaml
    hyperplace federate --cluster fed.yaml --jobs queue/ --jobs policies.yaml \\
        --policy cost --budget 5 --output manifests/

``-o/--output DIR`` writes the plan (``plan.yaml``) and, per admitted job, the Volcano Jobs,
Karmada PropagationPolicies, the HyperJob with the split filled in and the launch
configuration (see :mod:`hyperplace.federation.manifests`). Exit codes: 0 a plan (pending
jobs say why in the plan), 2 bad input (one line on stderr).
"""

from __future__ import annotations

import math
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hyperplace.commands.common import Format
from hyperplace.errors import InputError
from hyperplace.io import dump
from hyperplace.models.federation import FederationPlan


class Policy(StrEnum):
    throughput = "throughput"
    cost = "cost"
    binpack = "binpack"


class Solver(StrEnum):
    auto = "auto"
    cpsat = "cpsat"
    greedy = "greedy"


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1e3 * x:,.1f}"


def render_table(plan: FederationPlan, console: Console) -> None:
    head = Table(title=f"hyperplace federate: {plan.metadata.instance}", show_header=False)
    head.add_row("status", f"{plan.status.value} ({plan.solver})")
    head.add_row("policy", plan.policy)
    head.add_row("objective (priority-weighted GPUs)",
                 f"{plan.objective:g} (bound {plan.bound:g})" if plan.objective is not None
                 and plan.bound is not None else "-")
    head.add_row("time", f"{plan.runtime_s:.2f} s of {plan.budget_s:g} s budget")
    head.add_row("admitted / pending", f"{len(plan.jobs)} / {len(plan.pending)}")
    if plan.message:
        head.add_row("note", escape(plan.message))
    console.print(head)
    for jp in plan.jobs:
        t = Table(title=f"{jp.job}: {jp.shape} over {', '.join(jp.clusters)} "
                        f"({jp.gpus} GPUs, {jp.pipeline_stages} stages x {jp.replicas} replicas)")
        for col in ("sub-job", "cluster", "GPUs", "nodes", "stages: layers", "DP ranks"):
            t.add_column(col, overflow="fold")
        for s in jp.sub_jobs:
            t.add_row(s.name, s.cluster, f"{len(s.gpus)}x {s.gpu_type}",
                      ", ".join(s.nodes[:4]) + (" ..." if len(s.nodes) > 4 else ""),
                      ", ".join(f"{st.position}: {st.first_layer}-{st.last_layer}"
                                for st in s.stages),
                      ",".join(map(str, s.dp_ranks[:8])) + (" ..." if len(s.dp_ranks) > 8 else ""))
        console.print(t)
        p = jp.predicted
        console.print(
            f"  predicted step {_ms(p.step_time_s)} ms, {p.tokens_per_s:,.0f} tokens/s, layers "
            f"{'/'.join(map(str, p.layers_per_stage))}; pipeline {_ms(p.parts.pipeline_s)} ms, "
            f"WAN transfers {_ms(p.parts.wan_transfer_s)} ms, DP sync "
            f"{_ms(p.parts.dp_sync_intra_s)} + {_ms(p.parts.dp_sync_inter_s)} (WAN) ms")
        if p.penalty_vs_best_monolithic is not None:
            console.print(f"  penalty vs best single cluster: "
                          f"{p.penalty_vs_best_monolithic:.2f}x ({_ms(jp.best_monolithic.step_time_s)}"
                          f" ms on {', '.join(jp.best_monolithic.division) or '-'})")
        for alt in (jp.even_split, jp.karmada_aggregated):
            if alt.feasible and alt.step_time_s:
                extra = "" if alt.placeable_as_placed in (None, True) else \
                    " [red]not placeable as placed[/]"
                console.print(f"  {alt.name}: {_ms(alt.step_time_s)} ms "
                              f"({alt.ratio_to_engine:.2f}x the engine's), division "
                              f"{dict(alt.division)}{extra}")
            else:
                console.print(f"  {alt.name}: n/a ({escape(alt.note)})")
        for w in jp.wan:
            console.print(f"  WAN {w.a}-{w.b}: {w.gbps_needed:.1f} of {w.gbps_capacity:g} Gb/s")
        console.print(f"  verified as placed: {jp.verification.placement_status}, checker "
                      f"violations {jp.verification.checker_violations}")
    if plan.pending:
        t = Table(title="pending jobs")
        t.add_column("job", overflow="fold")
        t.add_column("why")
        for pj in plan.pending:
            t.add_row(pj.job, escape("\n".join(pj.reasons)))
        console.print(t)


def federate_command(
    instance: Annotated[str | None, typer.Option(
        "--instance", "-i", help="bundled instance or Instance file (default: the seed scenario)")] = None,
    cluster: Annotated[Path | None, typer.Option(
        "--cluster", help="federation file: Instance, or Cluster documents + Federation links")] = None,
    jobs: Annotated[list[Path] | None, typer.Option(
        "--jobs", help="job / HyperJob / PropagationPolicy file or directory (repeatable)")] = None,
    policy: Annotated[Policy, typer.Option(help="what decides after throughput")] = Policy.throughput,
    budget: Annotated[float, typer.Option(help="time budget in seconds")] = 10.0,
    solver: Annotated[Solver, typer.Option(help="auto = greedy, then CP-SAT hinted with it")] = Solver.auto,
    max_slowdown: Annotated[float, typer.Option(
        help="refuse splits slower than this x the best single-cluster step")] = 3.0,
    out: Annotated[Path | None, typer.Option("--output", "-o", help="write plan + manifests here")] = None,
    fmt: Annotated[Format, typer.Option("--format", "-f", help="table, json or yaml")] = Format.table,
) -> None:
    """Split jobs across member clusters (pipeline stages / DP replicas), verified as placed."""
    from hyperplace.federation import federate, load_problem
    from hyperplace.federation.manifests import write_atomic, write_manifests

    if not math.isfinite(budget) or budget <= 0:
        raise InputError(f"must be a positive, finite number of seconds, got {budget}",
                         path="--budget")
    if not math.isfinite(max_slowdown) or max_slowdown < 1:
        raise InputError(f"must be a finite number >= 1, got {max_slowdown}",
                         path="--max-slowdown")
    problem = load_problem(instance=instance, cluster=cluster, jobs=list(jobs or []),
                           policy=policy.value, max_slowdown=max_slowdown)
    plan = federate(problem, budget_s=budget, solver=solver.value)
    if out is not None:
        paths = write_manifests(problem, plan, out)
        write_atomic(out / "plan.yaml", dump(plan, "yaml"))
        print(f"wrote {len(paths) + 1} files under {out}: {plan.status.value}, "
              f"{len(plan.jobs)} admitted, {len(plan.pending)} pending", file=sys.stderr)
    if fmt == Format.table:
        render_table(plan, Console(width=None if sys.stdout.isatty() else 160))
    else:
        sys.stdout.write(dump(plan, fmt.value))


def register(app: typer.Typer) -> None:
    app.command("federate")(federate_command)
