"""Preemption: stop running jobs so that a higher-priority job, or a queue reclaiming its
guaranteed share, is placed whole (``solve --preemption``).

Policies, as Kueue names them (``ClusterQueue.spec.preemption``):

``never``
    Running jobs are never stopped (the plain round).
``lower-priority``
    A pending job may stop running jobs of strictly lower priority.
``reclaim-within-cohort``
    As ``lower-priority``, and a job whose queue is within its nominal (guaranteed) quota
    may also stop jobs of any priority in other queues of its cohort that use more than their
    own nominal quota (they run on borrowed GPUs).

How victims are chosen. The pending jobs the plain round leaves out are taken in priority
order. For each, the candidates (at most ``MAX_CANDIDATES``, least lost work first) are
searched lazily as victim sets in order of (lost work, number of victims): lost work is a victim's
GPUs x seconds since its last checkpoint (``spec.runningJobs[].checkpointAgeS``). Each set
that passes a cheap capacity test (enough GPUs, node-sized units fit node by node)
is tried by solving the preemptor alone on the instance with the set released, with the
same placement formulation and backend as the round; the first set with which it is placed
*whole*, using GPUs of every victim, is taken. So a victim set is minimal in lost work, then
in count, among the sets searched; a job that outranks nobody has no candidates; a set with
which the gang still does not fit (freed GPUs in the wrong NVLink or hop domain) is never
taken. GPUs freed but not used by the preemptor are kept from the rest of the round, which
is then solved as usual. Status is at best ``feasible``: the victim search is exact within
its limits, the combined round is not one proven optimum.

When the search stops early (``MAX_CANDIDATES``, ``MAX_TRIALS`` solves, ``MAX_SETS`` sets or the budget) the plan says so
in its message.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from hyperplace.formulations.priority import priority_weights
from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.models.plan import PlacementPlan, Preemption
from hyperplace.models.result import SolveStatus
from hyperplace.models.sharing import released, running_gpus
from hyperplace.solvers.driver import solve_placement

POLICIES = ("never", "lower-priority", "reclaim-within-cohort")
MAX_CANDIDATES = 24
MAX_TRIALS = 64
MAX_SETS = 200_000


@dataclass(frozen=True)
class Candidate:
    """A running job that a given preemptor may stop."""

    name: str
    priority: int
    queue: str
    gpus: tuple[tuple[str, int], ...]
    lost: float  # GPU-seconds since its last checkpoint
    why: str


def _nominal_total(instance: Instance, queue: str) -> float:
    qs = instance.queue_set
    if qs is None or queue not in qs.queues:
        return math.inf
    return sum(q.nominal for q in qs.queues[queue].quotas.values())


def _queue_use(instance: Instance) -> dict[str, int]:
    info = instance.running_job_info
    use: dict[str, int] = {}
    for name, gpus in running_gpus(instance).items():
        q = info[name].queue if name in info else "default"
        use[q] = use.get(q, 0) + len(gpus)
    return use


def candidates(instance: Instance, job: TrainingJob, policy: str) -> list[Candidate]:
    """Running jobs ``job`` may stop under ``policy`` (empty for ``never``).

    Parameters
    ----------
    instance : Instance
        The round (running jobs from ``node.allocated`` and ``spec.runningJobs``).
    job : TrainingJob
        The pending job that would preempt.
    policy : str
        One of :data:`POLICIES`.
    """
    if policy not in POLICIES:
        raise ValueError(f"unknown preemption policy {policy!r}; use one of {', '.join(POLICIES)}")
    if policy == "never":
        return []
    info = instance.running_job_info
    held = running_gpus(instance)
    out: dict[str, Candidate] = {}
    for name, gpus in held.items():
        r = info[name]
        if r.priority < job.priority:
            out[name] = Candidate(name, r.priority, r.queue, tuple(gpus),
                                  len(gpus) * r.checkpoint_age_s, "lower-priority")
    qs = instance.queue_set
    if policy == "reclaim-within-cohort" and qs is not None:
        mine = instance.queue_of(job)
        cohort = qs.queues[mine].cohort if mine in qs.queues else None
        use = _queue_use(instance)
        if cohort is not None and use.get(mine, 0) + job.total_gpus <= _nominal_total(instance, mine):
            peers = {q.name for q in qs.cohort_members(cohort)} - {mine}
            for name, gpus in held.items():
                r = info[name]
                if name in out or r.queue not in peers:
                    continue
                if use.get(r.queue, 0) > _nominal_total(instance, r.queue):
                    out[name] = Candidate(name, r.priority, r.queue, tuple(gpus),
                                          len(gpus) * r.checkpoint_age_s, "reclaim-within-cohort")
    return sorted(out.values(), key=lambda c: (c.lost, c.priority, c.name))


def victim_sets(cands: list[Candidate]) -> Iterator[tuple[Candidate, ...]]:
    """Non-empty subsets of ``cands`` (sorted by lost work) lazily, in order of (lost work,
    count): a heap of subsets whose successors are "add the next candidate" and "swap the
    last for the next", both of which never lower the key."""
    if not cands:
        return
    heap: list[tuple[float, int, tuple[int, ...]]] = [(cands[0].lost, 1, (0,))]
    while heap:
        lost, size, idx = heapq.heappop(heap)
        yield tuple(cands[i] for i in idx)
        last = idx[-1]
        if last + 1 < len(cands):
            nxt = cands[last + 1].lost
            heapq.heappush(heap, (lost + nxt, size + 1, (*idx, last + 1)))
            heapq.heappush(heap, (lost - cands[last].lost + nxt, size, (*idx[:-1], last + 1)))


def _neighbourhoods(state: Instance, job: TrainingJob) -> list[list[str]] | None:
    """For a job whose replicas must lie within ``maxHopCount`` of each other: per node, the
    nodes within that many hops of it (itself included). None when it has no such limit."""
    dp = next((g for g in job.spec.resource_groups if g.type.value == "DataParallel"), None)
    hop = dp.inter_node_connectivity.max_hop_count if dp and dp.inter_node_connectivity else None
    if hop is None:
        return None
    out = []
    for c in state.clusters:
        net = c.network
        names = [n.name for n in c.nodes]
        for a in names:
            out.append([b for b in names if b == a or (net.hop_count(a, b) or hop + 1) <= hop])
    return out


def _could_fit(state: Instance, job: TrainingJob, combo: tuple[Candidate, ...],
               near: list[list[str]] | None = None) -> bool:
    """A cheap necessary condition before a solve: enough GPUs in total, and for node-sized
    units enough room for them node by node (within the replicas' hop limit of one node
    when there is one), once the set is released."""
    free = {n.name: n.free_count for c in state.clusters for n in c.nodes}
    for c in combo:
        for name, _ in c.gpus:
            free[name] += 1
    units = job.units()
    if sum(free.values()) < sum(u.gpus for u in units):
        return False
    largest = max((n.gpu_count for c in state.clusters for n in c.nodes), default=0)
    small = [u.gpus for u in units if u.gpus <= largest]
    if small:
        size = min(small)
        if sum(f // size for f in free.values()) < len(small):
            return False
        if near is not None and len(small) > 1 and not any(
                sum(free[b] // size for b in group) >= len(small) for group in near):
            return False
    return True


@dataclass
class _Found:
    victims: tuple[Candidate, ...]
    plan: PlacementPlan


def _search(state: Instance, job: TrainingJob, cands: list[Candidate], *, solver: str,
            deadline: float, notes: list[str]) -> _Found | None:
    if len(cands) > MAX_CANDIDATES:
        notes.append(f"{job.name}: {len(cands)} candidates, searched the {MAX_CANDIDATES} "
                     f"with least lost work")
        cands = cands[:MAX_CANDIDATES]
    trials = 0
    near = _neighbourhoods(state, job)
    for seen, combo in enumerate(victim_sets(cands)):
        left = deadline - time.perf_counter()
        if trials >= MAX_TRIALS or seen >= MAX_SETS or left < 0.05:
            why = "trial limit" if trials >= MAX_TRIALS else "set limit" if seen >= MAX_SETS \
                else "budget"
            notes.append(f"{job.name}: victim search in order of lost work stopped after "
                         f"{trials} solves ({why}); tried a node-by-node set instead")
            return _node_by_node(state, job, cands, solver=solver, deadline=deadline, near=near)
        if not _could_fit(state, job, combo, near):
            continue
        trials += 1
        trial = released(state, [c.name for c in combo]).with_jobs([job])
        plan = solve_placement(trial, solver=solver, budget_s=max(0.05, min(left, 5.0)))
        if job.name not in plan.admitted:
            continue
        used = {(g.node, g.gpu) for u in plan.placements for g in u.gpus}
        if all(used & set(c.gpus) for c in combo):
            return _Found(combo, plan)
    return None


def _node_by_node(state: Instance, job: TrainingJob, cands: list[Candidate], *, solver: str,
                  deadline: float, near: list[list[str]] | None) -> _Found | None:
    """Fallback when the ordered search stops early: per group of nodes (within the
    replicas' hop limit of one node, or all), free node after node the cheapest way (least
    lost work first on each node) until the node-sized units fit, cheapest nodes first;
    the set with the least lost work that then places the job is taken (verified by a
    solve, not proven minimal)."""
    units = job.units()
    size = min(u.gpus for u in units)
    free = {n.name: n.free_count for c in state.clusters for n in c.nodes}
    on_node: dict[str, list[Candidate]] = {}
    for c in cands:
        for name in {n for n, _ in c.gpus}:
            on_node.setdefault(name, []).append(c)
    groups = near or [list(free)]
    options: list[tuple[float, tuple[Candidate, ...]]] = []
    for group in groups:
        costs = []
        for name in group:
            chosen: list[Candidate] = []
            room = free[name]
            for c in sorted(on_node.get(name, []), key=lambda c: (c.lost, c.name)):
                if room >= size:
                    break
                chosen.append(c)
                room += sum(1 for n, _ in c.gpus if n == name)
            if room >= size:
                costs.append((sum(c.lost for c in chosen), name, chosen))
        costs.sort(key=lambda t: (t[0], t[1]))
        if len(costs) < len(units):
            continue
        picked: dict[str, Candidate] = {}
        for _, _, chosen in costs[:len(units)]:
            picked.update({c.name: c for c in chosen})
        combo = tuple(picked.values())
        if combo:
            options.append((sum(c.lost for c in combo), combo))
    for _, combo in sorted(options, key=lambda o: (o[0], len(o[1]))):
        left = deadline - time.perf_counter()
        if left < 0.05:
            return None
        trial = released(state, [c.name for c in combo]).with_jobs([job])
        plan = solve_placement(trial, solver=solver, budget_s=max(0.05, min(left, 5.0)))
        if job.name in plan.admitted:
            used = {(g.node, g.gpu) for u in plan.placements for g in u.gpus}
            kept = tuple(c for c in combo if used & set(c.gpus))
            if len(kept) == len(combo):
                return _Found(combo, plan)
    return None


def solve_with_preemption(instance: Instance, *, preemption: str = "never",
                          solver: str = "auto", budget_s: float = 10.0,
                          **kwargs) -> PlacementPlan:
    """Solve a round in which running jobs may be preempted under ``preemption``.

    Parameters
    ----------
    instance : Instance
        The round.
    preemption : str
        ``never``, ``lower-priority`` or ``reclaim-within-cohort``.
    solver, budget_s, kwargs
        As for :func:`hyperplace.solvers.driver.solve_placement` (the whole call keeps
        ``budget_s``: the plain round gets half, the victim search and the final round
        the rest).

    Returns
    -------
    PlacementPlan
        With ``preemptions[]``; it is a plan for the instance with the victims released, and
        :func:`hyperplace.check.check` verifies it against the original instance.
    """
    if preemption not in POLICIES:
        raise ValueError(f"unknown preemption policy {preemption!r}; use one of {', '.join(POLICIES)}")
    start = time.perf_counter()
    deadline = start + budget_s
    base = solve_placement(instance, solver=solver, budget_s=budget_s / (1 if preemption == "never" else 2),
                           **kwargs)
    if preemption == "never" or not base.pending:
        return base.model_copy(update={"budget_s": budget_s})
    by_name = {j.name: j for j in instance.jobs}
    order = sorted((by_name[p.job] for p in base.pending if p.job in by_name),
                   key=lambda j: (-j.priority, instance.jobs.index(j)))
    state = instance
    hold: dict[tuple[str, int], str] = {}
    reserve: set[tuple[str, int]] = set()
    victims: set[str] = set()
    preemptions: list[Preemption] = []
    early: list[PlacementPlan] = []
    notes: list[str] = []
    for job in order:
        if deadline - time.perf_counter() < 0.1 * budget_s:
            notes.append("preemption search stopped: budget")
            break
        cands = [c for c in candidates(state, job, preemption) if c.name not in victims]
        if not cands:
            continue
        found = _search(state, job, cands, solver=solver,
                        deadline=start + budget_s * 0.8, notes=notes)
        if found is None:
            continue
        used = {(g.node, g.gpu) for u in found.plan.placements for g in u.gpus}
        for c in found.victims:
            victims.add(c.name)
            reserve |= set(c.gpus) - used
            preemptions.append(Preemption(job=c.name, why=c.why, preemptor=job.name,
                                          gpus=len(c.gpus), lost_gpu_seconds=c.lost))
        hold.update({gpu: job.name for gpu in used})
        early.append(found.plan)
        placed = set(hold.values())
        state = released(instance.with_jobs([j for j in instance.jobs if j.name not in placed]),
                         victims, hold=hold)
    if not preemptions:
        # optimal only when the victim search was complete (no preemption could do better)
        status = SolveStatus.FEASIBLE if notes and base.status == SolveStatus.OPTIMAL else base.status
        return base.model_copy(update={"budget_s": budget_s, "runtime_s": time.perf_counter() - start,
                                       "status": status, "gap": None if notes else base.gap,
                                       "message": "; ".join([base.message, *notes]).strip("; ")})
    placed_early = {j for p in early for j in p.admitted}
    rest = [j for j in instance.jobs if j.name not in placed_early]
    final_inst = released(instance.with_jobs(rest), victims, hold=hold, reserve=reserve - set(hold))
    left = max(0.05, deadline - time.perf_counter())
    final = solve_placement(final_inst, solver=solver, budget_s=left, **kwargs)
    lost = sum(p.lost_gpu_seconds for p in preemptions)
    msg = (f"preempted {len(preemptions)} running job(s) ({preemption}), "
           f"{lost:g} GPU-seconds of work lost")
    if notes:
        msg += "; " + "; ".join(notes)
    if final.message:
        msg += "; " + final.message
    terms = dict(final.objective_terms)
    # objective 1 and the admitted count over the whole round, on the released instance
    # (victims' GPUs free except those kept from the rest of the round), as the checker sees it
    admitted = {j for p in early for j in p.admitted} | set(final.admitted)
    seen = released(instance, victims, reserve=reserve - set(hold))
    weights = priority_weights(((j.priority, j.total_gpus) for j in instance.jobs),
                               sum(n.free_count for c in seen.clusters for n in c.nodes))
    terms["admitted_priority_demand"] = sum(weights[j.priority] * j.total_gpus
                                            for j in instance.jobs if j.name in admitted)
    terms["admitted_jobs"] = len(admitted)
    terms["preempted_lost_gpu_seconds"] = lost
    status = final.status
    if status == SolveStatus.OPTIMAL:
        status = SolveStatus.FEASIBLE
    return final.model_copy(update={
        "status": status, "bound": None, "gap": None, "objective": None,
        "runtime_s": time.perf_counter() - start, "budget_s": budget_s,
        "placements": [u for p in early for u in p.placements] + list(final.placements),
        "jobs": [j for p in early for j in p.jobs] + list(final.jobs),
        "preemptions": preemptions, "message": msg, "objective_terms": terms,
        "metadata": base.metadata})
