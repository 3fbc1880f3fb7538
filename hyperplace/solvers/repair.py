"""Repair after failures: re-place only what must move (#14).

Input: the round (running jobs in ``node.allocated``, their ``spec.runningJobs`` entries),
the manifests of the running jobs to repair (what their units and hop limits are), and the
GPUs that failed (``(node, GPU)``, or ``(node, None)`` for a whole node).

A running job's GPUs are read as its gang units in order (``units()`` order, GPUs sorted
by node and index, one unit after another), which is how the placement engine writes them.

``minimal`` (default)
    Units holding a failed GPU move; the job's healthy units stay where they are when its
    replacement units can be placed on nodes within the job's between-replica hop limit of
    every kept node (bandwidth and NVLink rules come from the same placement formulation,
    which places the replacement units as a job of their own). Only jobs with one unit per
    replica (a model-parallel group, plus the DataParallel group) are repaired in part;
    otherwise, or when no replacement fits, the whole job moves.
``replace-all``
    The comparison: every repaired job is placed anew, as a whole.

GPUs moved counts, per job, the GPUs it holds afterwards that it did not hold before. Work
lost is the same for both: a synchronous job restarts from its checkpoint when any GPU
fails (GPUs x ``checkpointAgeS``). The result's ``plan`` holds every repaired job's full
placement (kept units included), valid for :func:`repair_instance` (checked in the tests).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.baselines.common import JobOutcome, build_plan
from hyperplace.models.plan import GPURef, PlacementPlan
from hyperplace.models.sharing import released, running_gpus
from hyperplace.solvers.driver import solve_placement

STRATEGIES = ("minimal", "replace-all")


@dataclass
class RepairedJob:
    job: str
    moved_units: list[str]
    kept_units: list[str]
    gpus_moved: int
    lost_gpu_seconds: float
    placed: bool


@dataclass
class RepairResult:
    plan: PlacementPlan
    jobs: list[RepairedJob] = field(default_factory=list)

    @property
    def gpus_moved(self) -> int:
        return sum(j.gpus_moved for j in self.jobs)


def _failed_set(instance: Instance, failed: list[tuple[str, int | None]]) -> set[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for name, gpu in failed:
        if name not in instance.node_index:
            raise ValueError(f"failed: unknown node {name!r}")
        node = instance.node_index[name][1]
        if gpu is None:
            out |= {(name, g) for g in range(node.gpu_count)}
        elif not 0 <= gpu < node.gpu_count:
            raise ValueError(f"failed: node {name!r} has no GPU {gpu}")
        else:
            out.add((name, gpu))
    return out


def repair_instance(instance: Instance, specs: list[TrainingJob],
                    failed: list[tuple[str, int | None]]) -> Instance:
    """The instance a repair plan is valid on: the repaired jobs' GPUs released, failed GPUs
    faulty, the repaired jobs pending."""
    dead = _failed_set(instance, failed)
    held = running_gpus(instance)
    hit = [s for s in specs if set(held.get(s.name, ())) & dead]
    out = released(instance, [s.name for s in hit], reserve=dead)
    return out.with_jobs(hit)


def _units_of(spec: TrainingJob, gpus: list[tuple[str, int]]) -> dict[str, list[tuple[str, int]]]:
    out, i = {}, 0
    for u in spec.units():
        out[u.name] = gpus[i:i + u.gpus]
        i += u.gpus
    return out


def repair(instance: Instance, specs: list[TrainingJob], failed: list[tuple[str, int | None]],
           *, strategy: str = "minimal", solver: str = "auto", budget_s: float = 10.0
           ) -> RepairResult:
    """Repair the running jobs that hold failed GPUs (see the module docstring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown repair strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    start = time.perf_counter()
    dead = _failed_set(instance, failed)
    held = running_gpus(instance)
    info = instance.running_job_info
    base = repair_instance(instance, specs, failed)
    # jobs not yet repaired keep their healthy GPUs until their turn
    waiting = {g: j.name for j in base.jobs for g in held[j.name] if g not in dead}
    state = released(base.with_jobs([]), [], hold=waiting)
    outcomes: dict[str, JobOutcome] = {}
    done: list[RepairedJob] = []
    for spec in base.jobs:
        state = released(state, [spec.name])
        old = held[spec.name]
        units = _units_of(spec, old)
        lost = len(old) * info[spec.name].checkpoint_age_s
        bad = [u for u, g in units.items() if set(g) & dead]
        new: dict[str, list[tuple[str, int]]] | None = None
        if strategy == "minimal" and len(bad) < len(units):
            new = _partial(state, spec, units, bad, solver, budget_s)
        if new is None:
            plan = solve_placement(state.with_jobs([spec]), solver=solver, budget_s=budget_s)
            if spec.name in plan.admitted:
                new = {p.unit: [(g.node, g.gpu) for g in p.gpus] for p in plan.placements}
        if new is None:
            done.append(RepairedJob(spec.name, list(units), [], 0, lost, False))
            outcomes[spec.name] = JobOutcome(reasons=["no healthy GPUs where it fits"])
            continue
        kept = [u for u in units if new[u] == units[u]]
        moved = sum(len(set(g) - set(old)) for g in new.values())
        done.append(RepairedJob(spec.name, [u for u in units if u not in kept], kept, moved,
                                lost, True))
        hold = {g: spec.name for gs in new.values() for g in gs}
        outcomes[spec.name] = JobOutcome(units={u: [GPURef(node=n, gpu=g) for n, g in gs]
                                                for u, gs in new.items()})
        state = released(state, [], hold=hold)
    plan = build_plan(base, solver, outcomes, time.perf_counter() - start)
    plan = plan.model_copy(update={
        "message": f"repair ({strategy}): {sum(j.gpus_moved for j in done)} GPUs moved, "
                   f"{sum(j.lost_gpu_seconds for j in done):g} GPU-seconds of work lost"})
    return RepairResult(plan, done)


def _partial(state: Instance, spec: TrainingJob, units: dict[str, list[tuple[str, int]]],
             bad: list[str], solver: str, budget_s: float) -> dict[str, list[tuple[str, int]]] | None:
    """Keep the healthy units; place the failed ones as a job of their own on nodes within
    the job's between-replica hop limit of every kept node."""
    per_replica = [u for u in spec.units() if u.replica == 0]
    if len(per_replica) != 1 or len(spec.units()) != spec.spec.replica_count:
        return None
    kept_gpus = [g for u, gs in units.items() if u not in bad for g in gs]
    kept_nodes = {n for n, _ in kept_gpus}
    dp = next((g for g in spec.spec.resource_groups if g.type.value == "DataParallel"), None)
    hop = dp.inter_node_connectivity.max_hop_count if dp is not None else None
    far: set[tuple[str, int]] = set()
    for c in state.clusters:
        names = {n.name for n in c.nodes}
        for n in c.nodes:
            if not kept_nodes & names:
                far |= {(n.name, g) for g in range(n.gpu_count)}  # another cluster
            elif hop is not None and any(n.name != k and (c.network.hop_count(n.name, k) or hop + 1) > hop
                                         for k in kept_nodes):
                far |= {(n.name, g) for g in range(n.gpu_count)}
    hold = {g: f"{spec.name}.kept" for g in kept_gpus}
    sub_spec = spec.spec.model_copy(update={"replica_count": len(bad)})
    sub = spec.model_copy(update={"spec": sub_spec})
    free_far = {g for g in far if g not in hold}
    trial = released(state.with_jobs([]), [], hold=hold, reserve=free_far).with_jobs([sub])
    plan = solve_placement(trial, solver=solver, budget_s=budget_s)
    if sub.name not in plan.admitted:
        return None
    by_unit = {p.unit: [(g.node, g.gpu) for g in p.gpus] for p in plan.placements}
    sub_units = [u.name for u in sub.units()]
    out = {u: gs for u, gs in units.items() if u not in bad}
    for name, su in zip(bad, sub_units):
        out[name] = by_unit[su]
    return out
