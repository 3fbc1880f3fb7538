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
    from hyperplace.commands import render as r
    from hyperplace.commands.render import Column

    rows = [("status", f"{plan.status.value} ({plan.solver})"), ("policy", plan.policy),
            ("objective", f"{r.num(plan.objective)} priority-weighted GPUs (bound "
             f"{r.num(plan.bound)})" if plan.objective is not None
             and plan.bound is not None else "-"),
            ("time", f"{r.seconds(plan.runtime_s)} of {r.seconds(plan.budget_s)} budget"),
            ("admitted", r.plural(len(plan.jobs), "job")),
            ("pending", r.plural(len(plan.pending), "job"))]
    if plan.message:
        rows.append(("note", plan.message))
    r.print_summary(console, f"hyperplace federate: {plan.metadata.instance}", rows)
    for jp in plan.jobs:
        cols = [Column("sub-job"), Column("cluster"), Column("GPUs"),
                Column("nodes", "text", min_width=14),
                Column("stages: layers", "text", min_width=10),
                Column("DP ranks", "optional")]
        table = [[sj.name, sj.cluster, f"{len(sj.gpus):,}x {sj.gpu_type}",
                  ", ".join(sj.nodes[:4]) + (f" +{len(sj.nodes) - 4} more"
                                              if len(sj.nodes) > 4 else ""),
                  ", ".join(f"{st.position}: {st.first_layer}-{st.last_layer}"
                            for st in sj.stages),
                  ",".join(map(str, sj.dp_ranks[:8])) + (" ..." if len(sj.dp_ranks) > 8 else "")]
                 for sj in jp.sub_jobs]
        r.print_table(console, cols, table,
                      f"{jp.job}: {jp.shape} over {', '.join(jp.clusters)} "
                      f"({r.count(jp.gpus)} GPUs, {r.plural(jp.pipeline_stages, 'stage')} x "
                      f"{r.plural(jp.replicas, 'replica')})", hint="--format yaml has them")
        p = jp.predicted
        r.print_line(console,
                     f"  predicted step {_ms(p.step_time_s)} ms, {p.tokens_per_s:,.0f} tokens/s, "
                     f"layers {'/'.join(map(str, p.layers_per_stage))}; pipeline "
                     f"{_ms(p.parts.pipeline_s)} ms, WAN transfers {_ms(p.parts.wan_transfer_s)} "
                     f"ms, DP sync {_ms(p.parts.dp_sync_intra_s)} + "
                     f"{_ms(p.parts.dp_sync_inter_s)} (WAN) ms")
        if p.penalty_vs_best_monolithic is not None:
            r.print_line(console, f"  penalty vs best single cluster: "
                         f"{p.penalty_vs_best_monolithic:.2f}x "
                         f"({_ms(jp.best_monolithic.step_time_s)} ms on "
                         f"{', '.join(jp.best_monolithic.division) or '-'})")
        for alt in (jp.even_split, jp.karmada_aggregated):
            if alt.feasible and alt.step_time_s:
                extra = "" if alt.placeable_as_placed in (None, True) else \
                    ", not placeable as placed"
                r.print_line(console, f"  {alt.name}: {_ms(alt.step_time_s)} ms "
                             f"({alt.ratio_to_engine:.2f}x the engine's), replicas per cluster "
                             f"{r.pairs(dict(alt.division))}{extra}")
            else:
                r.print_line(console, f"  {alt.name}: n/a ({alt.note})")
        for w in jp.wan:
            r.print_line(console, f"  WAN {w.a}-{w.b}: {w.gbps_needed:,.1f} of "
                         f"{w.gbps_capacity:,g} Gb/s")
        status = jp.verification.placement_status
        r.print_line(console, "  verified as placed: " + (
            r.pairs(status) if isinstance(status, dict) else str(status))
            + f"; checker violations {jp.verification.checker_violations}")
    if plan.pending:
        r.print_table(console, [Column("job"), Column("why", "text", min_width=30)],
                      [[pj.job, "\n".join(pj.reasons)] for pj in plan.pending], "pending jobs")


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
    members = problem.instance.clusters
    if len(members) < 2:  # nothing to split across: the round is solve's
        raise InputError(f"a federation needs at least 2 member clusters; this one has "
                         f"{len(members)} ({', '.join(c.name for c in members) or 'none'}): "
                         "hyperplace solve places one cluster's queue",
                         source=str(cluster) if cluster is not None else problem.instance.name,
                         path="spec.clusters")
    plan = federate(problem, budget_s=budget, solver=solver.value)
    if out is not None:
        paths = write_manifests(problem, plan, out)
        write_atomic(out / "plan.yaml", dump(plan, "yaml"))
        print(f"wrote {len(paths) + 1} files under {out}: {plan.status.value}, "
              f"{len(plan.jobs)} admitted, {len(plan.pending)} pending", file=sys.stderr)
    if fmt == Format.table:
        from hyperplace.commands.render import console

        render_table(plan, console())
    else:
        sys.stdout.write(dump(plan, fmt.value))


def register(app: typer.Typer) -> None:
    app.command("federate")(federate_command)
