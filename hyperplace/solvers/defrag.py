"""Defragmentation by migration (#14): move running jobs (checkpoint, restart elsewhere) so
that a large pending job fits.

``defrag(instance, specs, for_job)``: the running jobs with manifests in ``specs`` may
move. Sets of at most ``max_moves`` of them are searched in order of (lost work, GPUs
moved, count), lost work being GPUs x seconds since the job's checkpoint; each set that
passes a cheap capacity test is tried by placing the pending job alone with the set
released, then the moved jobs on what is left, with the same placement formulation. The
first set with which both succeed is proposed; none is proposed unless the large job then
fits. The result's plan places the large job and the moved jobs on
:func:`defrag_instance` (checked in the tests).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.sharing import released, running_gpus
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.preemption import Candidate, _could_fit, _neighbourhoods, victim_sets


@dataclass
class Migration:
    job: str
    gpus: int
    lost_gpu_seconds: float
    from_nodes: list[str]
    to_nodes: list[str]


@dataclass
class DefragResult:
    plan: PlacementPlan | None
    migrations: list[Migration] = field(default_factory=list)
    message: str = ""


def defrag_instance(instance: Instance, specs: list[TrainingJob], moved: list[str],
                    for_job: str) -> Instance:
    """The instance a defrag plan is valid on: the moved jobs released and pending with the
    large job."""
    big = [j for j in instance.jobs if j.name == for_job]
    return released(instance, moved).with_jobs(big + [s for s in specs if s.name in moved])


def defrag(instance: Instance, specs: list[TrainingJob], for_job: str, *, max_moves: int = 4,
           solver: str = "auto", budget_s: float = 10.0, max_trials: int = 64) -> DefragResult:
    """Migrations that let ``for_job`` fit (see the module docstring)."""
    start = time.perf_counter()
    deadline = start + budget_s
    big = next((j for j in instance.jobs if j.name == for_job), None)
    if big is None:
        raise ValueError(f"--for: {for_job!r} is not a pending job of the instance")
    if max_moves < 0:
        raise ValueError("--max-moves: must be >= 0")
    plain = solve_placement(instance.with_jobs([big]), solver=solver, budget_s=budget_s / 4)
    if big.name in plain.admitted:
        return DefragResult(plain, [], f"{for_job} fits without moving anything")
    held, info = running_gpus(instance), instance.running_job_info
    movable = {s.name: s for s in specs if s.name in held}
    cands = sorted((Candidate(n, info[n].priority, info[n].queue, tuple(held[n]),
                              len(held[n]) * info[n].checkpoint_age_s, "defrag")
                    for n in movable), key=lambda c: (c.lost, len(c.gpus), c.name))[:24]
    near = _neighbourhoods(instance, big)
    trials = 0
    for combo in victim_sets(cands):
        if len(combo) > max_moves:
            continue
        if trials >= max_trials or time.perf_counter() > deadline - 0.1:
            return DefragResult(None, [], f"no migration found within {trials} trials or the budget")
        if not _could_fit(instance, big, combo, near):
            continue
        trials += 1
        names = [c.name for c in combo]
        first = solve_placement(released(instance, names).with_jobs([big]), solver=solver,
                                budget_s=max(0.05, min(5.0, deadline - time.perf_counter())))
        if big.name not in first.admitted:
            continue
        hold = {(g.node, g.gpu): big.name for u in first.placements for g in u.gpus}
        rest = released(instance.with_jobs([]), names, hold=hold).with_jobs(
            [movable[n] for n in names])
        second = solve_placement(rest, solver=solver,
                                 budget_s=max(0.05, min(5.0, deadline - time.perf_counter())))
        if set(second.admitted) != set(names):
            continue
        migrations = []
        for c in combo:
            to = sorted({g.node for u in second.placements if u.job == c.name for g in u.gpus})
            migrations.append(Migration(c.name, len(c.gpus), c.lost,
                                        sorted({n for n, _ in c.gpus}), to))
        plan = second.model_copy(update={
            "placements": [*first.placements, *second.placements],
            "jobs": [*first.jobs, *second.jobs], "pending": [], "objective": None,
            "bound": None, "gap": None, "objective_terms": {},
            "status": "feasible", "runtime_s": time.perf_counter() - start, "budget_s": budget_s,
            "message": f"{len(combo)} migration(s) so that {for_job} fits"})
        return DefragResult(plan, migrations, plan.message)
    return DefragResult(None, [], f"no set of at most {max_moves} migrations lets {for_job} fit")
