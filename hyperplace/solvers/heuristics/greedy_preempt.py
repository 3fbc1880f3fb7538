"""Greedy's preemption heuristic: after greedy's plan, stop victims for the jobs it left out.

The pending jobs greedy left out are taken highest priority first. For each, the victims it
may stop (:attr:`PlacementProblem.candidates <hyperplace.formulations.placement.problem.
PlacementProblem.candidates>`, at most :data:`MAX_CANDIDATES`, least lost work first) are tried
as sets, those of lower priority first, then in order of (lost work, number of victims)
(:func:`~hyperplace.solvers.heuristics.stop_sets.victim_sets`): the set's GPUs are given to greedy's
state and the job is placed by greedy's own rule; the first set with which it is placed
whole is taken, less the victims whose GPUs it did not use (they keep running); at the end,
victims the whole plan turned out not to need (GPUs unused, quotas holding without their
stop) keep running too (:func:`_keep_unneeded`). GPUs freed
but unused stay idle for the rest of the round (only the preemptor may use them), so the
plan keeps the model's rule that freed GPUs serve only jobs allowed to stop their owner.

A job that no victim set places while greedy's lower-priority admitted jobs hold their GPUs
and quota is tried again with those jobs released (:func:`_over_lower`, as greedy's
:func:`~hyperplace.solvers.heuristics.greedy.fix_inversions` does without victims); the
released jobs go back where they fit, or try victims in their turn. Without it a job could
stay pending behind a lower-priority one (a priority inversion the checker refuses).

A heuristic: the sets are tried in order of lost work but placed by greedy's best fit, so
a set that would fit with a cleverer placement may be passed over. When the ordered sets run
out (:data:`MAX_SETS`), node-by-node sets are tried: per domain of the job's hop limit, the
cheapest victims on each node until a piece fits, the cheapest nodes for all pieces. It is the budget's floor
with ``--preemption`` (``--solver greedy``, or a fallback) and the exact backends' hint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from hyperplace.formulations.mapping import Assignment
from hyperplace.formulations.placement import JobView, PlacementProblem
from hyperplace.formulations.placement import PreemptionCandidate
from hyperplace.solvers.heuristics.greedy import QuotaLedger, State, state_with_plan, try_place_job
from hyperplace.solvers.heuristics.stop_sets import StopIndex, node_sets, sets_by_lost_work
from hyperplace.solvers.params import GreedyParams

#: PreemptionCandidates tried per pending job (least lost work first), and victim sets tried per job.
MAX_CANDIDATES = 24
MAX_SETS = 256



def _sets(cands: list[PreemptionCandidate]) -> Iterator[tuple[PreemptionCandidate, ...]]:
    """Victim sets, those of lower-level victims first (objective 1 counts a running job
    in its own level), within a level bound in order of (lost work, count)."""
    for level in sorted({v.level for v in cands}):
        for combo in sets_by_lost_work([v for v in cands if v.level <= level]):
            if max(v.level for v in combo) == level:
                yield combo


def greedy_preempt(p: PlacementProblem, a: Assignment, params: GreedyParams | None = None,
                   deadline: float | None = None) -> Assignment:
    """Greedy's plan ``a`` with victims stopped for the jobs it left out, where that places
    them whole (see the module docstring).

    Parameters
    ----------
    p : PlacementProblem
        The round (with its candidate victims).
    a : Assignment
        Greedy's plan without preemption.
    params : GreedyParams, optional
        Domains tried per job.
    deadline : float, optional
        A ``time.perf_counter()`` value to stop trying at (the plan stays valid).
    """
    params = params or GreedyParams()
    if not p.candidates:
        return a
    out = Assignment(units=dict(a.units), notes=dict(a.notes), stopped=set(a.stopped))
    state, quota = state_with_plan(p, out)
    index = StopIndex(p, p.candidates)
    pending = sorted((jv for jv in p.jobs if jv.index not in out.units and not jv.impossible),
                     key=_order)
    version = 0  # the plan's changes so far
    failed: dict[tuple[object, ...], int] = {}  # (shape, priority) -> version when it failed
    while pending:
        jv = pending.pop(0)
        if _late(deadline):
            break
        if jv.index in out.units:
            continue
        if _preempt_for(p, jv, state, quota, out, params, index, deadline):
            version += 1
            continue
        key = (p.job_shape(jv), jv.priority)
        if failed.get(key) == version:  # the same job and plan failed before
            continue
        back = _over_lower(p, jv, state, quota, out, params, index, deadline)
        if back is None:
            failed[key] = version
            continue
        version += 1
        pending = sorted(pending + back, key=_order)
    _keep_unneeded(p, out, quota)
    return out


def _order(jv: JobView) -> tuple[int, int, int]:
    """Highest priority first, then largest."""
    return (-jv.priority, -jv.gpus, jv.index)


def _late(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() > deadline


def _preempt_for(p: PlacementProblem, jv: JobView, state: State, quota: QuotaLedger,
                 out: Assignment, params: GreedyParams, index: StopIndex[PreemptionCandidate],
                 deadline: float | None) -> bool:
    """Victim sets for one pending job in order of lost work (at most ``MAX_SETS``, of its
    ``MAX_CANDIDATES`` cheapest candidates), then, when those ran out, node after node per
    domain; the first that places it whole is taken. Whether it was placed."""
    cands = [v for v in p.candidates if jv.index in v.allowed and v.index not in out.stopped]
    cands = sorted(cands, key=lambda v: (v.lost, v.name))[:MAX_CANDIDATES]
    reach = sum(len(f) for f in state.free.values())
    for tried, combo in enumerate(_sets(cands)):
        if tried >= MAX_SETS or _late(deadline):
            break
        if reach + sum(len(v.gpus) for v in combo) < jv.gpus:
            continue
        if _attempt(p, jv, combo, state, quota, out, params):
            return True
    # the ordered sets ran out (or their limit): clear node after node, per domain
    for combo in node_sets(jv, state, index, lambda v: jv.index in v.allowed
                           and v.index not in out.stopped):
        if _late(deadline):
            break
        if _attempt(p, jv, combo, state, quota, out, params):
            return True
    return False


def _over_lower(p: PlacementProblem, jv: JobView, state: State, quota: QuotaLedger,
                out: Assignment, params: GreedyParams, index: StopIndex[PreemptionCandidate],
                deadline: float | None) -> list[JobView] | None:
    """No priority inversion: ``jv`` found no victim set with the plan's lower-priority
    admitted jobs in place, so release them, place ``jv`` (on the free GPUs, else with
    victims) and put the released jobs back where they fit, highest priority first; or,
    when ``jv`` does not fit even so, put everything back as it was. The released jobs that
    did not get back in (they try victims in their turn), or None when ``jv`` stays out.

    Objective 1 gains: one GPU of a higher class outweighs every GPU of the lower ones.
    Jobs on GPUs of a stopped victim (only a job allowed to stop it may use them) and movers'
    copies are never released."""
    lower = [j for j, units in out.units.items()
             if p.jobs[j].priority < jv.priority and not p.is_copy(j)
             and not any(set(gpus) & set(p.node_by_name[node].stoppable)
                         for u in units for node, gpus in u.pieces)]
    if not lower:
        return None
    released = {j: out.units.pop(j) for j in lower}
    for j, units in released.items():
        quota.add(p.jobs[j].queue, units, -1)
        for u in units:
            for node, gpus in u.pieces:
                state.give(node, gpus)
    if not (_attempt(p, jv, (), state, quota, out, params)
            or _preempt_for(p, jv, state, quota, out, params, index, deadline)):
        for j, units in released.items():  # no better: everything back as it was
            out.units[j] = units
            quota.add(p.jobs[j].queue, units, +1)
            for u in units:
                for node, gpus in u.pieces:
                    state.take(node, gpus)
        return None
    again = sorted((p.jobs[j] for j in released), key=_order)
    return [w for w in again if not _attempt(p, w, (), state, quota, out, params)]


def _keep_unneeded(p: PlacementProblem, out: Assignment, quota: QuotaLedger) -> None:
    """PreemptionCandidates the finished plan does not need keep running: one whose GPUs no placement
    uses and without whose stop every quota still holds (a victim stopped for one job's
    quota may no longer be needed once a later stop frees that quota, e.g. a reclaim
    that stops the borrower whose overdraft had blocked the first job). Costliest first."""
    used = {(node, g) for units in out.units.values() for u in units
            for node, gpus in u.pieces for g in gpus}
    for index in sorted(out.stopped, key=lambda i: (-p.stoppable[i].level, -p.stoppable[i].lost,
                                                    p.stoppable[i].name)):
        v = p.candidate(index)
        if used & set(v.gpus):
            continue
        quota.stop(v, -1)
        if quota.ok():
            out.stopped.discard(index)
        else:
            quota.stop(v, +1)


def _attempt(p: PlacementProblem, jv: JobView, combo: tuple[PreemptionCandidate, ...], state: State,
             quota: QuotaLedger, out: Assignment, params: GreedyParams) -> bool:
    """Stop ``combo`` and place ``jv`` by greedy's rule; on success record it (victims whose
    GPUs and quota it does not need keep running), else change nothing."""
    freed = [(node, g) for v in combo for node, g in v.gpus]
    for node, g in freed:
        state.give(node, (g,))
    for v in combo:
        quota.stop(v, +1)
    placed = try_place_job(p, jv, state, params.max_domain_trials)
    if placed is not None:
        quota.add(jv.queue, placed, +1)
        if not quota.ok():
            quota.add(jv.queue, placed, -1)
            for u in placed:
                for node, gpus in u.pieces:
                    state.give(node, gpus)
            placed = None
    if placed is None:
        for node, g in freed:
            state.take(node, (g,))
        for v in combo:
            quota.stop(v, -1)
        return False
    used = {(node, g) for u in placed for node, gpus in u.pieces for g in gpus}
    # every freed GPU the job did not take stays idle (kept from the rest)
    for node, g in freed:
        if (node, g) not in used:
            state.take(node, (g,))
    out.units[jv.index] = placed
    for v in sorted(combo, key=lambda v: (-v.level, -v.lost)):
        if used & set(v.gpus):
            out.stopped.add(v.index)
            continue
        quota.stop(v, -1)  # keeps running, unless its quota is needed
        if not quota.ok():
            quota.stop(v, +1)
            out.stopped.add(v.index)
    return True
