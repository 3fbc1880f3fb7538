"""Repair after failures: re-place only what must move (#14, ``hyperplace repair``).

Input: the round (running jobs in ``node.allocated``, their ``spec.runningJobs`` entries
with manifests in ``spec.runningJobs[].job``) and the GPUs that failed (``(node, GPU)``, or
``(node, None)`` for a whole node). The state after the failure is
:func:`hyperplace.models.sharing.with_failures`: failed GPUs faulty, a job that held one
*broken* (it keeps its healthy GPUs, fewer than its manifest asks for). The repair plan is
a plan for that state: each repaired job is a ``migrations[]`` entry (``why: repair``) whose
placements are its whole new placement (kept units included), checked by
:func:`hyperplace.check.check` like any migration.

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
    Every hit job is placed anew, as a whole (one at a time).
``replace-everything``
    The comparison the bench wants: every running job with a manifest, hit or not, is
    released and the whole set placed from scratch in one round by the same formulation;
    a job that lands on exactly its old GPUs is not a migration. Its plan may move healthy
    jobs for nothing (the checker then reports ``migrate-unneeded``): that is the cost this
    strategy is measured for.

Hot spares (``hot_spares=N``, the operator setting ``solve --hot-spares`` keeps): repairs
may use the spares (that is what they are for); the plan records the setting
(``hotSpares``) and the message says how many leaves still keep N whole free nodes
afterwards. Hit jobs are repaired largest first (the hardest to place get room first). A
hit job without a manifest, or one that fits nowhere, stays broken (listed with
``placed=False``; its healthy GPUs stay held).

GPUs moved counts, per job, the GPUs it holds afterwards that it did not hold before. Work
lost is the same for every strategy: a synchronous job restarts from its checkpoint when any
GPU fails (its GPUs x ``checkpointAgeS``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from hyperplace.baselines.common import JobOutcome, build_plan
from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.models.plan import GPURef, PlacementPlan
from hyperplace.models.sharing import released, running_gpus, whole_free_per_leaf, with_failures
from hyperplace.solvers.driver import solve_placement

STRATEGIES = ("minimal", "replace-all", "replace-everything")
GPU = tuple[str, int]


@dataclass
class RepairedJob:
    job: str
    moved_units: list[str]
    kept_units: list[str]
    gpus_moved: int
    lost_gpu_seconds: float
    placed: bool
    reason: str = ""


@dataclass
class RepairResult:
    """The repair plan (valid on :func:`repair_instance`) and what happened per job."""

    plan: PlacementPlan
    jobs: list[RepairedJob] = field(default_factory=list)

    @property
    def gpus_moved(self) -> int:
        return sum(j.gpus_moved for j in self.jobs)


def parse_failed(text: str) -> list[tuple[str, int | None]]:
    """``"n1:3, n2"`` (or one item per line, ``#`` comments) -> ``[("n1", 3), ("n2", None)]``:
    a GPU as ``node:index``, a whole node by its name."""
    out: list[tuple[str, int | None]] = []
    for line in text.splitlines():
        for item in line.split("#", 1)[0].replace(",", " ").split():
            name, sep, gpu = item.rpartition(":")
            if not sep:
                out.append((item, None))
                continue
            if not name or not gpu.isdigit():
                raise ValueError(f"failed: {item!r} is neither NODE nor NODE:GPU")
            out.append((name, int(gpu)))
    if not out:
        raise ValueError("failed: no GPU or node given")
    return out


def read_failed(value: str) -> list[tuple[str, int | None]]:
    """``--failed``: a list as in :func:`parse_failed`, or a file holding one."""
    path = Path(value)
    if path.is_file():
        if path.stat().st_size > 1 << 20:
            raise ValueError("failed: the file is larger than 1 MiB")
        return parse_failed(path.read_text(encoding="utf-8"))
    return parse_failed(value)


def _failed_set(instance: Instance, failed: list[tuple[str, int | None]]) -> set[GPU]:
    out: set[GPU] = set()
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


def _prepared(instance: Instance, specs: list[TrainingJob] | None) -> Instance:
    return instance.with_running_manifests(specs) if specs else instance


def repair_instance(instance: Instance, failed: list[tuple[str, int | None]],
                    specs: list[TrainingJob] | None = None) -> Instance:
    """The state a repair plan is valid on: the failed GPUs faulty and held by no one (the
    manifests of ``specs`` added to ``spec.runningJobs``)."""
    inst = _prepared(instance, specs)
    return with_failures(inst, _failed_set(inst, failed))


def _units_of(spec: TrainingJob, gpus: list[GPU]) -> dict[str, list[GPU]]:
    out, i = {}, 0
    for u in spec.units():
        out[u.name] = gpus[i:i + u.gpus]
        i += u.gpus
    return out


def repair(instance: Instance, failed: list[tuple[str, int | None]],
           specs: list[TrainingJob] | None = None, *, strategy: str = "minimal",
           solver: str = "auto", budget_s: float = 10.0, hot_spares: int = 0) -> RepairResult:
    """Repair the running jobs that hold failed GPUs (see the module docstring).

    Parameters
    ----------
    instance : Instance
        The round before the failure.
    failed : list of (node, GPU or None)
        Failed GPUs; ``None`` for a whole node.
    specs : list of TrainingJob, optional
        Manifests of running jobs, added to ``spec.runningJobs[].job``.
    strategy, solver, budget_s, hot_spares
        ``minimal``, ``replace-all`` or ``replace-everything``; the backend; seconds per
        solve; the hot-spare setting the round keeps (recorded in the plan; repairs may use
        the spares, so they are solved without it).

    Returns
    -------
    RepairResult
        Its plan (``migrations[]`` with ``why: repair``) is valid on
        :func:`repair_instance`.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown repair strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    if hot_spares < 0:
        raise ValueError(f"--hot-spares: must be >= 0, got {hot_spares}")
    start = time.perf_counter()
    inst = _prepared(instance, specs)
    dead = _failed_set(inst, failed)
    broken = with_failures(inst, dead)
    held = running_gpus(inst)
    manifests = inst.running_manifests
    hit = [name for name, gpus in held.items() if set(gpus) & dead]
    done: list[RepairedJob] = []
    for name in hit:
        if name not in manifests:
            done.append(RepairedJob(name, [], [], 0, 0.0, False,
                                    "no manifest in spec.runningJobs[].job: it cannot be moved"))
    if strategy == "replace-everything":
        new, done2 = _everything(broken, held, manifests, dead, solver, budget_s, hot_spares)
        done += done2
    else:
        order = sorted((h for h in hit if h in manifests), key=lambda h: -manifests[h].total_gpus)
        new, done2 = _one_by_one(broken, order, held, manifests,
                                 dead, strategy, solver, budget_s, hot_spares)
        done += done2
    from hyperplace.solvers.defrag import _compose, migration

    outcomes = {n: JobOutcome(units={u: [GPURef(node=a, gpu=b) for a, b in gs]
                                     for u, gs in units.items()}) for n, units in new.items()}
    sub = build_plan(broken.with_jobs([manifests[n] for n in new]), solver, outcomes, 0.0)
    migrations = [migration(broken, n, {g for gs in new[n].values() for g in gs}, "repair")
                  for n in new]
    reasons = {j.name: ["repair places no pending job (solve does)"] for j in broken.jobs}
    lost = sum(j.lost_gpu_seconds for j in done if j.placed)
    msg = (f"repair ({strategy}): {sum(j.gpus_moved for j in done)} GPUs moved, "
           f"{lost:g} GPU-seconds of work lost, {sum(j.placed for j in done)} of "
           f"{len(done)} jobs repaired")
    if hot_spares:
        busy = {g for units in new.values() for gs in units.values() for g in gs}
        left = whole_free_per_leaf(released(broken, list(new)), busy)
        keep = sum(1 for v in left.values() if v >= hot_spares)
        msg += f"; {keep} of {len(left)} leaves still keep {hot_spares} hot spare(s)"
    stuck = [j.job for j in done if not j.placed]
    if stuck:
        msg += f"; not repaired: {', '.join(stuck[:8])}"
    plan = _compose(broken, [sub] if new else [], migrations, reasons, solver=solver,
                    start=start, budget_s=budget_s, message=msg)
    return RepairResult(plan.model_copy(update={"hot_spares": hot_spares}), done)


def _record(name: str, units: dict[str, list[GPU]], new: dict[str, list[GPU]], lost: float
            ) -> RepairedJob:
    old = {g for gs in units.values() for g in gs}
    kept = [u for u in units if new.get(u) == units[u]]
    moved = sum(len(set(g) - old) for g in new.values())
    return RepairedJob(name, [u for u in units if u not in kept], kept, moved, lost, True)


def _one_by_one(state: Instance, hit: list[str], held: dict[str, list[GPU]],
                manifests: dict[str, TrainingJob], dead: set[GPU], strategy: str, solver: str,
                budget_s: float, hot_spares: int
                ) -> tuple[dict[str, dict[str, list[GPU]]], list[RepairedJob]]:
    info = state.running_job_info
    out: dict[str, dict[str, list[GPU]]] = {}
    done: list[RepairedJob] = []
    for name in hit:
        spec = manifests[name]
        healthy = [g for g in held[name] if g not in dead]
        state = released(state, [name])
        units = _units_of(spec, held[name])
        lost = spec.total_gpus * info[name].checkpoint_age_s
        bad = [u for u, g in units.items() if set(g) & dead]
        new: dict[str, list[GPU]] | None = None
        if strategy == "minimal" and len(bad) < len(units):
            new = _partial(state, spec, units, bad, solver, budget_s)
        if new is None:
            plan = solve_placement(state.with_jobs([spec]), solver=solver, budget_s=budget_s)
            if spec.name in plan.admitted:
                new = {p.unit: [(g.node, g.gpu) for g in p.gpus] for p in plan.placements}
        if new is None:  # stays broken: its healthy GPUs stay held
            done.append(RepairedJob(name, list(units), [], 0, lost, False,
                                    "no healthy GPUs where it fits"))
            state = released(state, [], hold={g: name for g in healthy})
            continue
        done.append(_record(name, units, new, lost))
        out[name] = new
        state = released(state, [], hold={g: name for gs in new.values() for g in gs})
    return out, done


def _everything(broken: Instance, held: dict[str, list[GPU]], manifests: dict[str, TrainingJob],
                dead: set[GPU], solver: str, budget_s: float, hot_spares: int
                ) -> tuple[dict[str, dict[str, list[GPU]]], list[RepairedJob]]:
    """Every running job with a manifest placed from scratch in one round."""
    info = broken.running_job_info
    names = [n for n in held if n in manifests]
    state = released(broken, names)
    plan = solve_placement(state.with_jobs([manifests[n] for n in names]), solver=solver,
                           budget_s=budget_s)
    placed: dict[str, dict[str, list[GPU]]] = {}
    for p in plan.placements:
        placed.setdefault(p.job, {})[p.unit] = [(g.node, g.gpu) for g in p.gpus]
    out: dict[str, dict[str, list[GPU]]] = {}
    done: list[RepairedJob] = []
    for n in names:
        units = _units_of(manifests[n], held[n])
        was_hit = bool(set(held[n]) & dead)
        lost = manifests[n].total_gpus * info[n].checkpoint_age_s
        if n not in placed:
            done.append(RepairedJob(n, list(units), [], 0, lost, False,
                                    "not placed by the from-scratch round"))
            continue
        new = {g for gs in placed[n].values() for g in gs}
        if new == set(held[n]) and not was_hit:
            continue  # landed where it was: not a migration
        out[n] = placed[n]
        done.append(_record(n, units, placed[n], lost))
    return out, done


def _partial(state: Instance, spec: TrainingJob, units: dict[str, list[GPU]],
             bad: list[str], solver: str, budget_s: float) -> dict[str, list[GPU]] | None:
    """Keep the healthy units; place the failed ones as a job of their own on nodes within
    the job's between-replica hop limit of every kept node (hot spares included)."""
    per_replica = [u for u in spec.units() if u.replica == 0]
    if len(per_replica) != 1 or len(spec.units()) != spec.spec.replica_count:
        return None
    kept_gpus = [g for u, gs in units.items() if u not in bad for g in gs]
    kept_nodes = {n for n, _ in kept_gpus}
    dp = next((g for g in spec.spec.resource_groups if g.type.value == "DataParallel"), None)
    hop = dp.inter_node_connectivity.max_hop_count if dp is not None else None
    far: set[GPU] = set()
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
