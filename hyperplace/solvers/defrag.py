"""Defragmentation and moveable running jobs: migrations (checkpoint, restart elsewhere) of
running jobs, in the plan's ``migrations[]`` (#14).

A running job may move only when ``spec.runningJobs[].job`` holds its manifest (what its
units and hop limits are). Moving it costs its lost work, GPUs x ``checkpointAgeS``.

Three uses, one search. A *migration set* is tried by releasing its jobs' GPUs and
placing a target and the moved jobs with the same placement formulation and backend as a
round; a set is accepted only when every moved job is placed whole again (a migrated job
must run) and the target is met:

``defrag(instance, for_job)`` (``hyperplace defrag --for JOB``)
    Sets of at most ``max_moves`` movable jobs: first those that empty whole nodes of one
    leaf (as below, any gain), least lost work first, then all sets in order of (lost work,
    count) (:func:`hyperplace.solvers.preemption.victim_sets`); after a cheap capacity test
    each is tried by placing the pending job alone with the set released, then the moved jobs
    on what is left. The first set with which both succeed is proposed; none is proposed
    unless the large job then fits.
``defrag_cluster(instance)`` (``hyperplace defrag`` without ``--for``)
    Maximise the largest free domain per GPU type
    (:func:`hyperplace.models.sharing.largest_free_domains`, summed over types) within
    ``max_moves`` migrations, least lost work second. Per leaf domain and GPU type, sets of
    the movable jobs on its nodes are enumerated in order of lost work; a set that empties
    nodes (every job in it needed for that) is a candidate; candidates are tried best gain
    first, cheapest first, by placing their jobs with the target nodes kept free; the first
    that places them all is taken, and the search repeats on the new state until nothing
    gains or the moves are used up (so gains are taken greedily, one leaf at a time).
``solve_with_migration(instance)`` (``hyperplace solve --running-moveable``)
    The plain round first; then each pending job it leaves out, in priority order, gets
    the ``--for`` search on the state so far; the rest of the round is solved on what is
    left, and the result replaces the plain plan only when it is higher on objective 1.

Not one model: the placement formulation aggregates identical nodes into classes, so a
"stays where it is" option per running job (its exact GPUs) does not fit it; migrations
are chosen by this search around it and every candidate is verified by it. Status is at
best ``feasible``; the search is exact within its limits (``max_moves``,
``MAX_CANDIDATES``, ``max_trials``, the budget), not a proven optimum.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass

from hyperplace.formulations.priority import priority_weights
from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.models.plan import Migration, PendingJob, PlacementPlan, PlanMeta
from hyperplace.models.result import SolveStatus
from hyperplace.models.sharing import largest_free_domains, released, running_gpus
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.preemption import Candidate, _could_fit, _neighbourhoods, victim_sets

MAX_CANDIDATES = 24
MAX_SETS_PER_LEAF = 2000
MAX_SETS = 200_000
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
    if max_moves < 0:
        raise ValueError(f"--max-moves: must be >= 0, got {max_moves}")


def migration(instance: Instance, name: str, new: set[GPU], why: str,
              for_job: str = "") -> Migration:
    """The ``migrations[]`` entry of running job ``name`` moved onto ``new`` GPUs."""
    old = running_gpus(instance).get(name, [])
    size = instance.running_manifests[name].total_gpus
    age = instance.running_job_info[name].checkpoint_age_s
    return Migration(job=name, why=why, for_job=for_job, gpus=size,
                     gpus_moved=len(new - set(old)), lost_gpu_seconds=size * age,
                     from_nodes=sorted({n for n, _ in old}), to_nodes=sorted({n for n, _ in new}))


def _candidates(instance: Instance, exclude: set[str]) -> list[Candidate]:
    held, info = running_gpus(instance), instance.running_job_info
    out = [Candidate(n, info[n].priority, info[n].queue, tuple(held[n]),
                     len(held[n]) * info[n].checkpoint_age_s, "defrag")
           for n in instance.running_manifests if n in held and n not in exclude]
    return sorted(out, key=lambda c: (c.lost, len(c.gpus), c.name))[:MAX_CANDIDATES]


def _placed_gpus(plan: PlacementPlan, job: str) -> set[GPU]:
    return {(g.node, g.gpu) for u in plan.placements if u.job == job for g in u.gpus}


@dataclass
class _Moves:
    names: list[str]
    plans: list[PlacementPlan]  # the target's plan (if any), then the moved jobs'


def _search_for(state: Instance, big: TrainingJob, exclude: set[str], *, max_moves: int,
                solver: str, deadline: float, max_trials: int) -> _Moves | None:
    """The cheapest set of at most ``max_moves`` movable jobs with which ``big`` and then
    every moved job is placed (see the module docstring). Sets that empty whole nodes of
    one leaf come first (node-sized units need them), least lost work first; then every
    set in order of (lost work, count), at most ``MAX_SETS`` of them."""
    held = running_gpus(state)
    info = state.running_job_info
    near = _neighbourhoods(state, big)
    trials = 0
    tried: set[frozenset[str]] = set()

    def cand(name: str) -> Candidate:
        return Candidate(name, info[name].priority, info[name].queue, tuple(held[name]),
                         len(held[name]) * info[name].checkpoint_age_s, "defrag")

    by_leaf = sorted(_targets(state, exclude, max_moves, any_gain=True),
                     key=lambda t: (t.lost, t.gpus, t.leaf))
    sets = ((cand(n) for n in t.jobs) for t in by_leaf)
    for seen, combo in enumerate(_chain(map(tuple, sets), victim_sets(_candidates(state, exclude)))):
        if trials >= max_trials or seen >= MAX_SETS or time.perf_counter() > deadline - 0.1:
            return None
        key = frozenset(c.name for c in combo)
        if len(combo) > max_moves or key in tried:
            continue
        tried.add(key)
        if not _could_fit(state, big, combo, near):
            continue
        trials += 1
        found = _try(state, big, [c.name for c in combo], solver, deadline)
        if found is not None:
            return found
    return None


def _chain(*iterables):
    for it in iterables:
        yield from it


def _try(state: Instance, big: TrainingJob, names: list[str], solver: str,
         deadline: float) -> _Moves | None:
    """Place ``big`` with ``names`` released, then the moved jobs on what is left."""
    manifests = state.running_manifests
    first = solve_placement(released(state, names).with_jobs([big]), solver=solver,
                            budget_s=max(0.05, min(5.0, deadline - time.perf_counter())))
    if big.name not in first.admitted:
        return None
    hold = {(g.node, g.gpu): big.name for u in first.placements for g in u.gpus}
    rest = released(state.with_jobs([]), names, hold=hold).with_jobs(
        [manifests[n] for n in names])
    second = solve_placement(rest, solver=solver,
                             budget_s=max(0.05, min(5.0, deadline - time.perf_counter())))
    if set(second.admitted) == set(names):
        return _Moves(names, [first, second])
    return None


def _demand(instance: Instance, moved: list[str], placed: set[str]) -> int:
    """Objective 1 of the placed pending jobs, weights from the GPUs free once the moved
    jobs are released (as the checker computes it)."""
    seen = released(instance, moved)
    free = sum(n.free_count for c in seen.clusters for n in c.nodes)
    weights = priority_weights(((j.priority, j.total_gpus) for j in instance.jobs), free)
    return sum(weights[j.priority] * j.total_gpus for j in instance.jobs if j.name in placed)


def _compose(instance: Instance, parts: list[PlacementPlan], migrations: list[Migration],
             reasons: dict[str, list[str]], *, solver: str, start: float, budget_s: float,
             message: str, status: SolveStatus = SolveStatus.FEASIBLE) -> PlacementPlan:
    """One plan from the parts' placements: every pending job of the instance placed or
    listed with its reasons; objective 1 and the admitted count over the pending jobs, on
    the instance with the migrated jobs released (as the checker sees it)."""
    placements = [u for p in parts for u in p.placements]
    summaries = [s for p in parts for s in p.jobs]
    placed = {u.job for u in placements}
    pending = [PendingJob(job=j.name, reasons=reasons.get(j.name) or ["not placed"])
               for j in instance.jobs if j.name not in placed]
    admitted = [j for j in instance.jobs if j.name in placed]
    terms = {"admitted_priority_demand": _demand(instance, [m.job for m in migrations], placed),
             "admitted_jobs": len(admitted),
             "migrated_lost_gpu_seconds": sum(m.lost_gpu_seconds for m in migrations),
             "migrated_gpus": sum(m.gpus_moved for m in migrations)}
    meta = PlanMeta(name=f"{instance.name}-defrag", instance=instance.name)
    return PlacementPlan(status=status, solver=parts[0].solver if parts else solver,
                         runtime_s=time.perf_counter() - start, budget_s=budget_s,
                         message=message, placements=placements, jobs=summaries,
                         pending=pending, objective_terms=terms, migrations=migrations,
                         metadata=meta)


def defrag(instance: Instance, for_job: str, specs: list[TrainingJob] | None = None, *,
           max_moves: int = 4, solver: str = "auto", budget_s: float = 10.0,
           max_trials: int = 64) -> DefragResult:
    """Migrations that let pending job ``for_job`` fit (see the module docstring).

    Parameters
    ----------
    instance : Instance
        The round; movable running jobs have manifests in ``spec.runningJobs[].job``.
    for_job : str
        The pending job to make room for.
    specs : list of TrainingJob, optional
        Manifests of running jobs that may move, added to the instance's.
    max_moves, solver, budget_s, max_trials
        At most this many migrations; the backend; seconds for the whole search; solves.

    Returns
    -------
    DefragResult
        A plan valid on the instance (with ``specs`` added): ``for_job`` placed with its
        ``migrations[]``, or pending with the reason; the other pending jobs pending.
    """
    start = time.perf_counter()
    deadline = start + budget_s
    instance = _prepared(instance, specs)
    big = next((j for j in instance.jobs if j.name == for_job), None)
    if big is None:
        raise ValueError(f"--for: {for_job!r} is not a pending job of the instance")
    _check_moves(max_moves)
    others = {j.name: [f"not considered: defrag --for {for_job}"] for j in instance.jobs}
    plain = solve_placement(instance.with_jobs([big]), solver=solver, budget_s=budget_s / 4)
    if big.name in plain.admitted:
        msg = f"{for_job} fits without moving anything"
        return DefragResult(_compose(instance, [plain], [], others, solver=solver, start=start,
                                     budget_s=budget_s, message=msg), msg)
    found = _search_for(instance, big, set(), max_moves=max_moves, solver=solver,
                        deadline=deadline, max_trials=max_trials)
    if found is None:
        msg = f"no set of at most {max_moves} migrations lets {for_job} fit (searched " \
              f"within {max_trials} solves and {budget_s:g} s)"
        others[for_job] = [msg]
        return DefragResult(_compose(instance, [], [], others, solver=solver, start=start,
                                     budget_s=budget_s, message=msg), msg)
    migrations = [migration(instance, n, _placed_gpus(found.plans[1], n), "admit", for_job)
                  for n in found.names]
    msg = f"{len(migrations)} migration(s) so that {for_job} fits"
    return DefragResult(_compose(instance, found.plans, migrations, others, solver=solver,
                                 start=start, budget_s=budget_s, message=msg), msg)


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
    (:func:`~hyperplace.solvers.preemption.victim_sets`, at most ``MAX_SETS_PER_LEAF``);
    a set counts when every job in it helps empty a node (and, unless ``any_gain``, when
    the largest free domain grows)."""
    best = largest_free_domains(state)
    info = state.running_job_info
    held = running_gpus(state)
    movable = set(state.running_manifests) - exclude
    out: list[_Target] = []
    for c in state.clusters:
        by_name = {n.name: n for n in c.nodes}
        for leaf, members in sorted(c.network.domains(2).items()):
            per_type: dict[str, list] = defaultdict(list)
            for name in members:
                n = by_name.get(name)
                if n is not None and not n.faulty:
                    per_type[n.gpu_type].append(n)
            for t, nodes in sorted(per_type.items()):
                free_gpus = sum(n.gpu_count for n in nodes if not n.allocated)
                busy = [n for n in nodes if n.allocated and set(n.allocated.values()) <= movable]
                names = sorted({j for n in busy for j in n.allocated.values()})
                cands = sorted((Candidate(j, info[j].priority, info[j].queue, tuple(held[j]),
                                          len(held[j]) * info[j].checkpoint_age_s, "defrag")
                                for j in names), key=lambda x: (x.lost, len(x.gpus), x.name))
                for k, combo in enumerate(victim_sets(cands)):
                    if k >= MAX_SETS_PER_LEAF:
                        break
                    if len(combo) > moves_left:
                        continue
                    chosen = {x.name for x in combo}
                    cleared = [n for n in busy if set(n.allocated.values()) <= chosen]
                    if {j for n in cleared for j in n.allocated.values()} != chosen:
                        continue  # a job in the set empties no node: not needed
                    gain = free_gpus + sum(n.gpu_count for n in cleared) - best.get(t, 0)
                    if gain > 0 or any_gain:
                        out.append(_Target(
                            gain, sum(x.lost for x in combo), sum(len(x.gpus) for x in combo),
                            c.name, leaf, t,
                            [n.name for n in nodes if not n.allocated] + [n.name for n in cleared],
                            tuple(sorted(chosen))))
    return sorted(out, key=lambda x: (-x.gain, x.lost, x.gpus, x.leaf, x.gpu_type))


def defrag_cluster(instance: Instance, specs: list[TrainingJob] | None = None, *,
                   max_moves: int = 4, solver: str = "auto", budget_s: float = 10.0
                   ) -> DefragResult:
    """Maximise the largest free domain per GPU type within ``max_moves`` migrations, least
    lost work second (see the module docstring).

    Returns
    -------
    DefragResult
        A plan valid on the instance: the moved jobs' new placements and ``migrations[]``
        (``why: defrag``); pending jobs are left pending (``solve`` places them).
    """
    start = time.perf_counter()
    deadline = start + budget_s
    instance = _prepared(instance, specs)
    _check_moves(max_moves)
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
            trial = released(state.with_jobs([]), names,
                             reserve=kept_free | keep).with_jobs([manifests[n] for n in names])
            plan = solve_placement(trial, solver=solver, budget_s=max(0.05, min(5.0, left)))
            if set(plan.admitted) != set(names):
                continue
            hold = {}
            for n in names:
                moved[n] = _placed_gpus(plan, n)
                hold.update({g: n for g in moved[n]})
            parts.append(plan)
            kept_free |= keep
            state = released(state, names, hold=hold)
            improved = True
            break
        if not improved:
            break
    after = largest_free_domains(state)
    migrations = [migration(instance, n, gpus, "defrag") for n, gpus in moved.items()]
    gains = ", ".join(f"{t}: {before.get(t, 0)} -> {after[t]} GPUs" for t in sorted(after)
                      if after[t] != before.get(t, 0))
    msg = (f"{len(migrations)} migration(s), "
           f"{sum(m.lost_gpu_seconds for m in migrations):g} GPU-seconds of work lost; "
           f"largest free domain {gains}" if migrations else
           "no migration within the move limit makes a free domain larger")
    if notes:
        msg += "; " + "; ".join(notes)
    reasons = {j.name: ["defrag places no pending job (solve does)"] for j in instance.jobs}
    plan = _compose(instance, parts, migrations, reasons, solver=solver, start=start,
                    budget_s=budget_s, message=msg)
    terms = dict(plan.objective_terms)
    terms["largest_free_domain_gpus"] = sum(after.values())
    return DefragResult(plan.model_copy(update={"objective_terms": terms}), msg)


# ---- a round with moveable running jobs -------------------------------------------------

def solve_with_migration(instance: Instance, *, solver: str = "auto", budget_s: float = 10.0,
                         max_moves: int = 4, max_trials: int = 32, **kwargs) -> PlacementPlan:
    """A round in which running jobs with manifests may move so that pending jobs the plain
    round leaves out are placed (see the module docstring).

    Parameters
    ----------
    instance : Instance
        The round.
    solver, budget_s, kwargs
        As for :func:`hyperplace.solvers.driver.solve_placement` (the plain round gets half
        of ``budget_s``, the search and the final round the rest).
    max_moves, max_trials
        Migrations per pending job; solves per pending job.

    Returns
    -------
    PlacementPlan
        With ``migrations[]`` (``why: admit``) when they raise objective 1; otherwise the
        plain round. Valid on ``instance`` (:func:`hyperplace.check.check`).
    """
    start = time.perf_counter()
    deadline = start + budget_s
    _check_moves(max_moves)
    base = solve_placement(instance, solver=solver, budget_s=budget_s / 2, **kwargs)
    base = base.model_copy(update={"budget_s": budget_s})
    if not base.pending or not instance.running_manifests or max_moves == 0:
        return base
    by_name = {j.name: j for j in instance.jobs}
    order = sorted((by_name[p.job] for p in base.pending if p.job in by_name),
                   key=lambda j: (-j.priority, instance.jobs.index(j)))
    state = instance
    hold: dict[GPU, str] = {}
    moved: dict[str, tuple[str, set[GPU]]] = {}
    early: list[PlacementPlan] = []
    for job in order:
        if deadline - time.perf_counter() < 0.3 * budget_s:
            break
        found = _search_for(state, job, set(moved), max_moves=max_moves, solver=solver,
                            deadline=start + budget_s * 0.8, max_trials=max_trials)
        if found is None:
            continue
        for p in found.plans:
            hold.update({(g.node, g.gpu): u.job for u in p.placements for g in u.gpus})
        for n in found.names:
            moved[n] = (job.name, _placed_gpus(found.plans[1], n))
        early += found.plans
        placed = {u.job for p in early for u in p.placements}
        state = released(instance.with_jobs([j for j in instance.jobs if j.name not in placed]),
                         moved, hold=hold)
    if not moved:
        return base
    placed = {u.job for p in early for u in p.placements}
    rest = state.with_jobs([j for j in instance.jobs if j.name not in placed])
    final = solve_placement(rest, solver=solver,
                            budget_s=max(0.05, deadline - time.perf_counter()), **kwargs)
    migrations = [migration(instance, n, gpus, "admit", for_job)
                  for n, (for_job, gpus) in moved.items()]
    reasons = {p.job: p.reasons for p in final.pending}
    lost = sum(m.lost_gpu_seconds for m in migrations)
    msg = f"migrated {len(migrations)} running job(s), {lost:g} GPU-seconds of work lost"
    if final.message:
        msg += "; " + final.message
    plan = _compose(instance, [*early, final], migrations, reasons, solver=solver,
                    start=start, budget_s=budget_s, message=msg)
    plain = _demand(instance, list(moved), set(base.admitted))
    if plan.objective_terms["admitted_priority_demand"] <= plain:
        return base.model_copy(update={
            "message": "; ".join(filter(None, [base.message, "no migration raises objective 1"])),
            "runtime_s": time.perf_counter() - start})
    return plan.model_copy(update={"metadata": base.metadata})
