"""``hyperplace why JOB``: would this job be admitted now, and if not, what would admit it.

A thin shell over :func:`hyperplace.solvers.workflows.why.why_job`: the round is solved as
``hyperplace solve`` would, then a few what-ifs (fewer GPUs, a looser hop limit, another GPU
type, preempting, a higher priority), each a checked solve of the same round.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from hyperplace.commands.common import (
    CLUSTER_HELP,
    JOBS_HELP,
    Format,
    check_budget,
    round_request,
    interruptible,
    one_line_errors,
)


def render_answer(answer, out) -> None:  # noqa: ANN001 - JobAnswer, Console
    from hyperplace.commands import render as r

    r.print_line(out, f"hyperplace why: {answer.job} ({answer.instance}): {answer.state}")
    if answer.state != "pending":
        r.print_line(out, f"  {answer.summary}")
        return
    r.print_line(out, f"  asks for {r.plural(answer.gpus, 'GPU')} at priority "
                      f"{answer.priority}; plan {answer.plan_status} ({answer.solver})")
    for reason in answer.reasons or ["the plan gives no reason"]:
        r.print_line(out, f"  why: {reason}")
    admit = [c for c in answer.changes if c.admits]
    other = [c for c in answer.changes if not c.admits]
    if admit:
        r.print_line(out, "would admit it now (each checked by a solve of this round), "
                          "smallest change first:")
        for i, c in enumerate(admit, 1):
            side = ("; " + "; ".join(c.effects)) if c.effects else ""
            r.print_line(out, f"  {i}. {c.change}{side}")
    elif answer.changes:
        r.print_line(out, "none of the changes tried admits it this round")
    if other:
        r.print_line(out, "tried, would not admit it: " + "; ".join(c.change for c in other))
    if answer.untried:
        r.print_line(out, "not tried, the budget ran out (a larger --budget tries them): "
                          + "; ".join(answer.untried))
    r.print_line(out, "waiting: " + (answer.forecast or "no forecast; a later round may "
                                     "admit it as GPUs free up"))


@one_line_errors
def why_command(
    job: Annotated[str, typer.Argument(metavar="JOB", help="a pending (or running) job's name")],
    instance: Annotated[str | None, typer.Option(
        "--instance", "-i", help="bundled instance name or Instance file (default: the "
        "bundled mixed-a100-h100)")] = None,
    cluster: Annotated[Path | None, typer.Option(help=CLUSTER_HELP)] = None,
    jobs: Annotated[Path | None, typer.Option(help=JOBS_HELP)] = None,
    queues: Annotated[list[Path] | None, typer.Option(
        "--queues", help="queue documents, as for solve --queues (repeatable)")] = None,
    budget: Annotated[float, typer.Option(
        help="seconds for all the solves together (the round and its what-ifs)")] = 10.0,
    solver: Annotated[str, typer.Option(help="auto, cpsat, milp or greedy (as solve)")] = "auto",
    fmt: Annotated[Format, typer.Option(
        "--format", "-f", help="table, json or yaml (a JobAnswer document)")] = Format.table,
) -> None:
    """Why a job is pending, and the smallest change that would admit it."""
    from hyperplace.commands.render import console
    from hyperplace.commands.solve import resolve_instance, with_queue_files
    from hyperplace.io import dump
    from hyperplace.solvers.workflows.why import why_job

    check_budget(budget)
    round_request(solver=solver, budget_s=budget)  # the library's limits, named by flag
    inst = with_queue_files(resolve_instance(instance, cluster, jobs), queues or [])
    with interruptible():
        from hyperplace.sim.forecast import forecast_plan

        def forecaster(instance, plan):  # the wall clock: "about 14:20 UTC", as solve says
            return forecast_plan(instance, plan, clock=time.time())

        answer = why_job(inst, job, budget_s=budget, solver=solver, forecaster=forecaster)
    if fmt == Format.table:
        render_answer(answer, console())
    else:
        sys.stdout.write(dump(answer, fmt.value))


def register(app: typer.Typer) -> None:
    app.command("why")(why_command)
