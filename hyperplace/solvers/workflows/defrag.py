"""Defragmentation and moveable running jobs: migrations (checkpoint, restart elsewhere) of
running jobs, in the plan's ``migrations[]`` (#14).

A running job may move only when ``spec.runningJobs[].job`` holds its manifest (what its
units and hop limits are). Moving it costs its lost work, GPUs x ``checkpointAgeS``.

``solve_with_migration(instance)`` (``hyperplace solve --running-moveable``) and
``defrag(instance, for_job)`` (``hyperplace defrag --for JOB``)
    One solve of the placement model with the migrations as its decisions
    (:mod:`hyperplace.formulations.placement.migration`): every running job with a manifest
    may move (at most ``max_moves``), a migrated job runs again whole, objective 1 is the
    pending jobs' priority-weighted GPUs, then the lost work, then the number of
    migrations. So migrations are proposed only when they admit more, the set that loses
    least work is chosen, and ``optimal`` is proven like any round's. ``defrag --for``
    is that round with the one pending job and the pending jobs that outrank it (placed
    first: the job may not take room one of them fits in): nothing moves unless it, or
    a job that outranks it, then fits.
``defrag_cluster(instance)`` (``hyperplace defrag`` without ``--for``)
    Maximise the largest free domain per GPU type
    (:func:`hyperplace.models.sharing.largest_free_domains`, summed over types) within
    ``max_moves`` migrations, least lost work second: the same model with
    ``largest_free_domain_gpus`` as its first objective
    (:meth:`FreeDomainGrowth.rows
    <hyperplace.formulations.placement.free_domain.FreeDomainGrowth.rows>`).
    ``search_cluster`` is greedy's heuristic for it (``--solver greedy``, and a second
    opinion within a fifth of the budget whose plan is returned only when it beats an
    unproven model plan): per leaf domain and GPU type, sets of the movable jobs on its
    nodes are enumerated in order of lost work; a set that empties nodes (every job in it
    needed for that) is a candidate; candidates are tried best gain first, cheapest first,
    by placing their jobs with the target nodes kept free; the first that places them all
    is taken, and the search repeats on the new state until nothing gains or the moves are
    used up.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from hyperplace.models.migration import MigrationPolicy
from hyperplace.models.priority import priority_weights
from hyperplace.models.cluster import Cluster
from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.models.node import Node
from hyperplace.models.plan import Migration, PendingJob, PlacementPlan, PlanMeta
from hyperplace.models.plan_builder import PlanBuilder
from hyperplace.models.result import SolveStatus, relative_gap
from hyperplace.models.sharing import largest_free_domains, released, running_gpus
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.heuristics.stop_sets import sets_by_lost_work

MAX_SETS_PER_LEAF = 2000
GPU = tuple[str, int]


@dataclass
class DefragResult:
    """A plan valid on the instance (``migrations[]`` included), and what it says."""

    plan: PlacementPlan
    message: str = ""

    @property
    def migrations(self) -> list[Migration]:
        return list(self.plan.migrations)


def _prepared(instance: Instance, specs: list[TrainingJob] | None) -> Instance:
    return instance.with_running_manifests(specs) if specs else instance


def _check_moves(max_moves: int) -> None:
    from hyperplace.models.request import MAX_MOVES

    if not 0 <= max_moves <= MAX_MOVES:
        raise ValueError(f"max_moves: must be within 0..{MAX_MOVES:,}, got {max_moves}")


def migration(instance: Instance, name: str, new: set[GPU], why: str,
              for_job: str = "") -> Migration:
    """The ``migrations[]`` entry of running job ``name`` moved onto ``new`` GPUs."""
    old = running_gpus(instance).get(name, [])
    size = instance.running_manifests[name].total_gpus
    age = instance.running_job_info[name].checkpoint_age_s
    return Migration(job=name, why=why, for_job=for_job, gpus=size,
                     gpus_moved=len(new - set(old)), lost_gpu_seconds=size * age,
                     from_nodes=sorted({n for n, _ in old}), to_nodes=sorted({n for n, _ in new}))


def _placed_gpus(plan: PlacementPlan, job: str) -> set[GPU]:
    return {(g.node, g.gpu) for u in plan.placements if u.job == job for g in u.gpus}


def compose_plan(b: PlanBuilder, migrations: list[Migration], reasons: dict[str, list[str]],
                 *, kind: str, solver: str, start: float, budget_s: float, message: str,
                 status: SolveStatus = SolveStatus.FEASIBLE) -> PlacementPlan:
    """One plan (``<instance>-<kind>``) from the jobs placed in ``b`` so far: every other
    pending job of the instance listed with its reasons; objective 1 and the admitted count
    over the pending jobs (weights over the GPUs free before any migration, as the checker
    computes them). Used by defragmentation and by repair."""
    instance = b.instance
    placed = b.placed
    for j in instance.jobs:
        if j.name not in placed:
            b.wait(j.name, reasons.get(j.name) or ["not placed"])
    admitted = [j for j in instance.jobs if j.name in placed]
    free = sum(n.free_count for c in instance.clusters for n in c.nodes)
    weights = priority_weights(((j.priority, j.total_gpus) for j in instance.jobs), free)
    demand = sum(weights[j.priority] * j.total_gpus for j in admitted)
    terms = {"admitted_priority_demand": demand,
             "admitted_jobs": len(admitted),
             "migrated_lost_gpu_seconds": sum(m.lost_gpu_seconds for m in migrations),
             "migrated_gpus": sum(m.gpus_moved for m in migrations)}
    return b.build(kind, status=status, solver=solver, runtime_s=time.perf_counter() - start, budget_s=budget_s,
                   message=message, objective_terms=terms, migrations=migrations)


# ---- whole-cluster defragmentation -------------------------------------------------------

@dataclass
class _Target:
    gain: int
    lost: float
    gpus: int
    cluster: str
    leaf: str
    gpu_type: str
    nodes: list[str]  # nodes of the type in the leaf kept whole free
    jobs: tuple[str, ...]


def _targets(state: Instance, exclude: set[str], moves_left: int,
             any_gain: bool = False) -> list[_Target]:
    """Candidate (leaf, GPU type, jobs to move) with their gain in the summed largest free
    domain, best gain first, then least lost work and GPUs. Per leaf and type, sets of the
    movable jobs on its occupied nodes are enumerated in order of lost work
    (:func:`~hyperplace.solvers.heuristics.stop_sets.sets_by_lost_work`, at most ``MAX_SETS_PER_LEAF``);
    a set counts when every job in it helps empty a node (and, unless ``any_gain``, when
    the largest free domain grows)."""
    best = largest_free_domains(state)
    held = running_gpus(state)
    movable = set(state.running_manifests) - exclude
    out: list[_Target] = []
    for c in state.clusters:
        for leaf, t, nodes in _leaf_types(c):
            out += _leaf_targets(state, held, c.name, leaf, t, nodes, movable, moves_left,
                                 best.get(t, 0), any_gain)
    return sorted(out, key=lambda x: (-x.gain, x.lost, x.gpus, x.leaf, x.gpu_type))


def _leaf_types(c: Cluster) -> Iterator[tuple[str, str, list[Node]]]:
    """(leaf, GPU type, its healthy nodes of that type) of a cluster, in order."""
    by_name = {n.name: n for n in c.nodes}
    for leaf, members in sorted(c.network.domains(2).items()):
        per_type: dict[str, list[Node]] = defaultdict(list)
        for name in members:
            n = by_name.get(name)
            if n is not None and not n.faulty:
                per_type[n.gpu_type].append(n)
        for t, nodes in sorted(per_type.items()):
            yield leaf, t, nodes


@dataclass(frozen=True)
class _Movable:
    """A running job defragmentation may move: its GPUs and its lost work if moved
    (GPU-seconds since its last checkpoint)."""

    name: str
    gpus: tuple[tuple[str, int], ...]
    lost: float


def _candidates(state: Instance, held: dict[str, list[tuple[str, int]]], busy: list[Node]
                ) -> list[_Movable]:
    """The jobs on ``busy`` nodes as candidates to move, least lost work first."""
    info = state.running_job_info
    names = sorted({j for n in busy for j in n.allocated.values()})
    return sorted((_Movable(j, tuple(held[j]), len(held[j]) * info[j].checkpoint_age_s)
                   for j in names), key=lambda x: (x.lost, len(x.gpus), x.name))


def _leaf_targets(state: Instance, held: dict[str, list[tuple[str, int]]], cluster: str,
                  leaf: str, t: str, nodes: list[Node], movable: set[str], moves_left: int,
                  best: int, any_gain: bool) -> list[_Target]:
    """The targets of one leaf and GPU type: sets of the movable jobs on its occupied nodes
    (``held``: their GPUs), in order of lost work, each of whose jobs helps empty a node."""
    free_gpus = sum(n.gpu_count for n in nodes if not n.allocated)
    busy = [n for n in nodes if n.allocated and set(n.allocated.values()) <= movable]
    cands = _candidates(state, held, busy)
    out = []
    for k, combo in enumerate(sets_by_lost_work(cands)):
        if k >= MAX_SETS_PER_LEAF:
            break
        if len(combo) > moves_left:
            continue
        chosen = {x.name for x in combo}
        cleared = [n for n in busy if set(n.allocated.values()) <= chosen]
        if {j for n in cleared for j in n.allocated.values()} != chosen:
            continue  # a job in the set empties no node: not needed
        gain = free_gpus + sum(n.gpu_count for n in cleared) - best
        if gain > 0 or any_gain:
            out.append(_Target(
                gain, sum(x.lost for x in combo), sum(len(x.gpus) for x in combo),
                cluster, leaf, t,
                [n.name for n in nodes if not n.allocated] + [n.name for n in cleared],
                tuple(sorted(chosen))))
    return out


def defrag_cluster(instance: Instance, specs: list[TrainingJob] | None = None, *,
                   max_moves: int = 4, solver: str = "auto", budget_s: float = 10.0
                   ) -> DefragResult:
    """Maximise the largest free domain per GPU type within ``max_moves`` migrations, least
    lost work second (see the module docstring): one solve of the placement model with
    the migrations as decisions and ``largest_free_domain_gpus`` as its first objective
    (:meth:`FreeDomainGrowth.rows
    <hyperplace.formulations.placement.free_domain.FreeDomainGrowth.rows>`); with
    ``solver="greedy"`` the search around the model (:func:`search_cluster`).

    Returns
    -------
    DefragResult
        A plan valid on the instance: the moved jobs' new placements and ``migrations[]``
        (``why: defrag``); pending jobs are left pending (``solve`` places them).
    """
    start = time.perf_counter()
    instance = _prepared(instance, specs)
    _check_moves(max_moves)
    if solver == "greedy":
        return search_cluster(instance, max_moves=max_moves, budget_s=budget_s)
    # the search first (cheap; a fifth of the budget at most), then the model: the better
    # plan is returned, the search's only when the model's was not proven
    searched = search_cluster(instance, max_moves=max_moves, budget_s=0.2 * budget_s)
    before = largest_free_domains(instance)
    plan = solve_with_migration(
        instance.with_jobs([]), solver=solver, max_moves=max_moves, why="defrag",
        grow_free_domain=True, budget_s=max(0.05, budget_s - (time.perf_counter() - start)))
    left = budget_s - (time.perf_counter() - start)
    if plan.status == SolveStatus.FALLBACK and left > 0.1:
        # the model did not fit the budget: the search gets the rest of it
        searched = search_cluster(instance, max_moves=max_moves, budget_s=left - 0.05)
    moved = {m.job: {(g.node, g.gpu) for u in plan.placements if u.job == m.job for g in u.gpus}
             for m in plan.migrations}
    busy = {gpu for gpus in moved.values() for gpu in gpus}
    freed = {gpu for name in moved for gpu in running_gpus(instance).get(name, [])}
    after = largest_free_domains(instance, busy, freed)
    msg = _defrag_message(plan.migrations, before, after, [])
    reasons = [PendingJob(job=j.name, reasons=["defrag places no pending job (solve does)"])
               for j in instance.jobs]
    terms = dict(plan.objective_terms)
    terms["largest_free_domain_gpus"] = float(sum(after.values()))
    plan = plan.model_copy(update={
        "pending": reasons, "objective_terms": terms, "runtime_s": time.perf_counter() - start,
        "budget_s": budget_s, "message": "; ".join(filter(None, [msg, plan.message])),
        "metadata": PlanMeta(name=f"{instance.name}-defrag", instance=instance.name)})
    if plan.status != SolveStatus.OPTIMAL and _defrag_key(searched.plan) > _defrag_key(plan):
        better = searched.plan.model_copy(update={
            "runtime_s": time.perf_counter() - start, "budget_s": budget_s,
            "message": f"{searched.message}; the search's plan beats the model's "
                       f"({plan.status.value}: {msg})"})
        return DefragResult(better, searched.message)
    return DefragResult(plan, msg)


def _in_its_queue(instance: Instance, manifest: TrainingJob, name: str) -> TrainingJob:
    """A running job's manifest as a job of the queue its GPUs count against (a moved job
    obeys its queue's quota wherever it lands, as in the model and the checker)."""
    queue = instance.running_job_info[name].queue
    if instance.queue_set is None or instance.queue_of(manifest) == queue:
        return manifest
    from hyperplace.models.instance import in_queue

    return in_queue(manifest, queue, instance)[0]


def _defrag_key(plan: PlacementPlan) -> tuple[float, float, int]:
    """Largest free domain, then less lost work, then fewer moves."""
    terms = plan.objective_terms
    return (terms.get("largest_free_domain_gpus", 0.0),
            -sum(m.lost_gpu_seconds for m in plan.migrations), -len(plan.migrations))


def _defrag_message(migrations: list[Migration], before: dict[str, int],
                    after: dict[str, int], notes: list[str]) -> str:
    gains = ", ".join(f"{t}: {before.get(t, 0)} -> {after[t]} GPUs" for t in sorted(after)
                      if after[t] != before.get(t, 0))
    msg = (f"{len(migrations)} migration(s), "
           f"{sum(m.lost_gpu_seconds for m in migrations):,.0f} GPU-seconds of work lost; "
           f"largest free domain {gains}" if migrations else
           "no migration within the move limit makes a free domain larger")
    return msg + ("; " + "; ".join(notes) if notes else "")


def search_cluster(instance: Instance, *, max_moves: int = 4, budget_s: float = 10.0
                   ) -> DefragResult:
    """Greedy's heuristic for :func:`defrag_cluster`: a search around the placement model
    (see the module docstring), every trial placed by greedy's rule."""
    start = time.perf_counter()
    deadline = start + budget_s
    solver = "greedy"
    manifests = instance.running_manifests
    before = largest_free_domains(instance)
    state = instance
    kept_free: set[GPU] = set()
    moved: dict[str, set[GPU]] = {}
    parts: list[PlacementPlan] = []
    notes: list[str] = []
    while len(moved) < max_moves:
        improved = False
        for target in _targets(state, set(moved), max_moves - len(moved)):
            left = deadline - time.perf_counter()
            if left < 0.1:
                notes.append("search stopped: budget")
                break
            names = list(target.jobs)
            keep = {(n, g) for n in target.nodes
                    for g in range(state.node_index[n][1].gpu_count)}
            trial = released(state.with_jobs([]), names, reserve=kept_free | keep).with_jobs(
                [_in_its_queue(state, manifests[n], n) for n in names])
            plan = solve_placement(trial, solver=solver, budget_s=max(0.05, min(5.0, left)))
            if set(plan.admitted) != set(names):
                continue
            placed = {n: _placed_gpus(plan, n) for n in names}
            after_move = released(state, names, hold={g: n for n, gpus in placed.items()
                                                      for g in gpus})
            if sum(largest_free_domains(after_move).values()) <= \
                    sum(largest_free_domains(state).values()):
                continue  # they land in another type's largest free domain: nothing gained
            moved.update(placed)
            parts.append(plan)
            kept_free |= keep
            state = after_move
            improved = True
            break
        if not improved:
            break
    after = largest_free_domains(state)
    migrations = [migration(instance, n, gpus, "defrag") for n, gpus in moved.items()]
    msg = _defrag_message(migrations, before, after, notes)
    reasons = {j.name: ["defrag places no pending job (solve does)"] for j in instance.jobs}
    b = PlanBuilder(instance)
    for part in parts:
        b.keep(part)
    plan = compose_plan(b, migrations, reasons, kind="defrag",
                        solver=parts[0].solver if parts else solver, start=start,
                        budget_s=budget_s, message=msg)
    terms = dict(plan.objective_terms)
    terms["largest_free_domain_gpus"] = sum(after.values())
    return DefragResult(plan.model_copy(update={"objective_terms": terms}), msg)


# ---- migrations as decisions of the model ----------------------------------------------

def solve_with_migration(instance: Instance, *, solver: str = "auto", budget_s: float = 10.0,
                         max_moves: int | None = None, why: str = "admit",
                         grow_free_domain: bool = False, **kwargs) -> PlacementPlan:
    """A round in which running jobs with manifests may move so that more pending demand is
    placed: one solve of the placement model with the migrations as its decisions (see the
    module docstring).

    Parameters
    ----------
    instance : Instance
        The round; movable running jobs have manifests in ``spec.runningJobs[].job``.
    solver, budget_s, kwargs
        As for :func:`hyperplace.solvers.driver.solve_placement`.
    max_moves : int, optional
        At most this many migrations (None: no limit).
    why : str
        ``migrations[].why`` (``admit``).
    grow_free_domain : bool
        Make the largest free domain larger first (``defrag`` without ``--for``).

    Returns
    -------
    PlacementPlan
        With ``migrations[]`` when they raise objective 1. Valid on ``instance``
        (:func:`hyperplace.check.check`); the budget's floor is greedy's plan, which moves
        nothing.
    """
    policy = MigrationPolicy(max_moves=max_moves, why=why, grow_free_domain=grow_free_domain)
    return solve_placement(instance, solver=solver, budget_s=budget_s, migration=policy,
                           **kwargs)


def defrag(instance: Instance, for_job: str, specs: list[TrainingJob] | None = None, *,
           max_moves: int = 4, solver: str = "auto", budget_s: float = 10.0) -> DefragResult:
    """Migrations that let pending job ``for_job`` fit: the round with that job and the
    pending jobs that outrank it, the migrations as decisions (see the module docstring).
    The jobs that outrank it come first: placing it where one of them fits would be a
    priority inversion, so it gets only room they cannot use.

    Parameters
    ----------
    instance : Instance
        The round; movable running jobs have manifests in ``spec.runningJobs[].job``.
    for_job : str
        The pending job to make room for.
    specs : list of TrainingJob, optional
        Manifests of running jobs that may move, added to the instance's.
    max_moves, solver, budget_s
        At most this many migrations; the backend; seconds for the whole solve.

    Returns
    -------
    DefragResult
        A plan valid on the instance (with ``specs`` added): ``for_job`` placed with its
        ``migrations[]``, or pending with the reason; the pending jobs that outrank it
        placed where they fit; the others pending. Objective and bound are those of the
        instance's whole queue (its priority weights), the status that of the round.
    """
    start = time.perf_counter()
    instance = _prepared(instance, specs)
    big = next((j for j in instance.jobs if j.name == for_job), None)
    if big is None:
        raise ValueError(f"for_job: {for_job!r} is not a pending job of the instance")
    _check_moves(max_moves)
    ahead = [j for j in instance.jobs if j.priority > big.priority]
    plan = solve_with_migration(instance.with_jobs([*ahead, big]), solver=solver,
                                budget_s=budget_s, max_moves=max_moves)
    placed = big.name in plan.admitted
    first = (f" after the {len(ahead)} pending job(s) that outrank it"
             if ahead else "")
    if placed:
        msg = (f"{len(plan.migrations)} migration(s) so that {for_job} fits{first}"
               if plan.migrations else f"{for_job} fits without moving anything{first}")
    else:
        proven = plan.status == SolveStatus.OPTIMAL
        msg = (f"no set of at most {max_moves} migrations lets {for_job} fit{first}"
               + (" (proven)" if proven else
                  f" in the plan found within {budget_s:g} s ({plan.status.value}, not proven)"))
    in_round = {j.name for j in ahead} | {big.name}
    left_out = (f"not considered: this round only makes room for {for_job} and the pending "
                "jobs that outrank it")
    others = [PendingJob(job=j.name, reasons=[left_out])
              for j in instance.jobs if j.name not in in_round]
    pending = [p.model_copy(update={"reasons": [msg, *p.reasons]}) if p.job == big.name else p
               for p in plan.pending]
    # objective 1 over the instance's whole queue (its weights), which the plan is checked
    # on; both weightings rank levels lexicographically, so the round's optimum stays one
    objective, bound = _whole_queue_objective(instance, plan, [*ahead, big])
    terms = dict(plan.objective_terms)
    terms["admitted_priority_demand"] = objective
    gaps = dict(plan.objective_gaps or {})
    gaps["admitted_priority_demand"] = relative_gap(objective, bound)
    plan = plan.model_copy(update={
        "objective": objective, "bound": bound, "gap": relative_gap(objective, bound),
        "objective_terms": terms, "objective_gaps": gaps,
        "pending": [*pending, *others], "runtime_s": time.perf_counter() - start,
        "message": "; ".join(filter(None, [msg, plan.message])),
        "metadata": PlanMeta(name=f"{instance.name}-defrag", instance=instance.name)})
    return DefragResult(plan, msg)


def _whole_queue_objective(instance: Instance, plan: PlacementPlan,
                           round_jobs: list[TrainingJob]) -> tuple[float, float]:
    """Objective 1 of ``plan`` weighted over the instance's whole pending queue, and a bound
    for the round of ``round_jobs``: the objective itself when the round was proven optimal,
    else its jobs filled best weight first into the free GPUs (a mover takes no fewer GPUs
    than it frees)."""
    free = sum(n.free_count for c in instance.clusters for n in c.nodes)
    weights = priority_weights(((j.priority, j.total_gpus) for j in instance.jobs), free)
    admitted = set(plan.admitted)
    objective = float(sum(weights[j.priority] * j.total_gpus for j in round_jobs
                          if j.name in admitted))
    if plan.status == SolveStatus.OPTIMAL:
        return objective, objective
    left = free
    bound = 0.0
    for j in sorted(round_jobs, key=lambda j: -weights[j.priority]):
        take = min(left, j.total_gpus)
        bound += weights[j.priority] * take
        left -= take
    return objective, max(bound, objective)
