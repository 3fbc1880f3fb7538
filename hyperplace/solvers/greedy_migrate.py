"""Greedy's migration heuristic: after greedy's plan, move running jobs for the jobs it left out.

The pending jobs greedy left out are taken highest priority first; a job needs no more GPUs
than are free in all (a migrated job takes as many as it frees), else it is skipped. For each,
sets of the movers (running jobs the round may migrate,
:mod:`hyperplace.formulations.placement.migration`), at most :data:`MAX_CANDIDATES`, are
tried in order of (lost work, count) (:func:`~hyperplace.solvers.preemption.victim_sets`),
then node by node (as :mod:`.greedy_preempt` does): the set's GPUs are released, the job is
placed by greedy's own rule, the movers whose old GPUs it does not use stay, and the others
are placed again (their manifests, by the same rule, anywhere but where the job now is); the
first set with which all of that succeeds (and quotas hold) is taken. At most
``max_moves`` migrations in the round.

The budget's floor and the exact backends' hint with ``--running-moveable``; the exact
model decides the same question over all sets at once.
"""

from __future__ import annotations

import time

from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.formulations.placement import JobView, PlacementProblem
from hyperplace.formulations.placement.preemption import Victim
from hyperplace.solvers.greedy import State, try_place_job
from hyperplace.solvers.greedy_preempt import MAX_CANDIDATES, MAX_SETS, _node_sets, _Quota
from hyperplace.solvers.params import GreedyParams


def greedy_migrate(p: PlacementProblem, a: Assignment, params: GreedyParams | None = None,
                   deadline: float | None = None) -> Assignment:
    """Greedy's plan ``a`` with migrations for the jobs it left out, where that places them
    whole and every moved job again (see the module docstring).

    Parameters
    ----------
    p : PlacementProblem
        A migrating round (its victims are movers).
    a : Assignment
        Greedy's plan without migrations.
    params : GreedyParams, optional
        Domains tried per job.
    deadline : float, optional
        A ``time.perf_counter()`` value to stop trying at (the plan stays valid).
    """
    from hyperplace.solvers.preemption import victim_sets

    params = params or GreedyParams()
    if not p.migrating or not p.victims:
        return a
    limit = p.migration.max_moves if p.migration is not None else None
    out = Assignment(units=dict(a.units), notes=dict(a.notes), stopped=set(a.stopped),
                     untried=set(a.untried))
    state = State(p)
    quota = _Quota(p)
    for j, units in out.units.items():
        quota.add(p.jobs[j].queue, units, +1)
        for u in units:
            for node, gpus in u.pieces:
                state.take(node, gpus)
    pending = sorted((jv for jv in p.pending if jv.index not in out.units and not jv.impossible),
                     key=lambda j: (-j.priority, -j.gpus, j.index))
    for jv in pending:
        if deadline is not None and time.perf_counter() > deadline:
            break
        if limit is not None and len(out.stopped) >= limit:
            break
        if sum(len(f) for f in state.free.values()) < jv.gpus:
            continue  # moving jobs frees no GPU in all
        every = sorted((v for v in p.victims if v.index not in out.stopped),
                       key=lambda v: (v.lost, v.name))
        movers = every[:MAX_CANDIDATES]
        room = None if limit is None else limit - len(out.stopped)
        tried = 0
        done = False
        for combo in victim_sets(movers):
            tried += 1
            if tried > MAX_SETS or (deadline is not None and time.perf_counter() > deadline):
                break
            if room is not None and len(combo) > room:
                continue
            if _attempt(p, jv, combo, state, quota, out, params):
                done = True
                break
        if done:
            continue
        for combo in _node_sets(p, jv, state, every):
            if deadline is not None and time.perf_counter() > deadline:
                break
            if (room is None or len(combo) <= room) and \
                    _attempt(p, jv, combo, state, quota, out, params):
                break
    return out


def _attempt(p: PlacementProblem, jv: JobView, combo: tuple[Victim, ...], state: State,
             quota: _Quota, out: Assignment, params: GreedyParams) -> bool:
    """Release ``combo``, place ``jv``, keep the movers it does not need, place the others
    again; on success record it all, else change nothing."""
    trials = params.max_domain_trials
    for v in combo:
        for node, g in v.gpus:
            state.give(node, (g,))
    placed = try_place_job(p, jv, state, trials)
    if placed is None:
        _retake(state, combo)
        return False
    used = {(node, g) for u in placed for node, gpus in u.pieces for g in gpus}
    needed = [v for v in combo if used & set(v.gpus)]
    _retake(state, [v for v in combo if v not in needed])
    moved: dict[int, list[PlacedUnit]] = {}
    for v in needed:
        assert v.copy is not None
        again = try_place_job(p, p.jobs[v.copy], state, trials)
        if again is None:
            break
        moved[v.index] = again
    ok = len(moved) == len(needed)
    if ok:
        quota.add(jv.queue, placed, +1)
        for v in needed:
            quota.stop(v, +1)
            quota.add(v.queue, moved[v.index], +1)
        if not quota.ok():
            quota.add(jv.queue, placed, -1)
            for v in needed:
                quota.stop(v, -1)
                if v.index in moved:
                    quota.add(v.queue, moved[v.index], -1)
            ok = False
    if not ok:  # put everything back as it was
        for units in [placed, *moved.values()]:
            for u in units:
                for node, gpus in u.pieces:
                    state.give(node, gpus)
        _retake(state, needed)
        return False
    out.units[jv.index] = placed
    for v in needed:
        assert v.copy is not None
        out.units[v.copy] = moved[v.index]
        out.stopped.add(v.index)
    return True


def _retake(state: State, movers) -> None:
    """The movers' old GPUs are theirs again."""
    for v in movers:
        for node, g in v.gpus:
            state.take(node, (g,))
