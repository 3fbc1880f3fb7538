"""Greedy's migration heuristic: after greedy's plan, move running jobs for the jobs it left out.

The pending jobs greedy left out are taken highest priority first; a job needs no more GPUs
than are free in all (a migrated job takes as many as it frees), else it is skipped. For each,
sets of the movers (running jobs the round may migrate,
:mod:`hyperplace.formulations.placement.migration`) that hold GPUs of a type the job may use,
the :data:`MAX_CANDIDATES` losing least work, are tried in order of (lost work, count)
(:func:`~hyperplace.solvers.heuristics.stop_sets.sets_by_lost_work`; a set is skipped without a try when no
node it frees GPUs on would then hold the job's smallest piece), then node by node (as
:mod:`.greedy_preempt` does): the set's GPUs are released, the job is placed by greedy's own
rule, the movers whose old GPUs it does not use stay, and the others are placed again (their
manifests, by the same rule, anywhere but where the job now is); the first set with which all
of that succeeds (and quotas hold) is taken. At most ``max_moves`` migrations in the round.

Greedy fills the free GPUs with lower-priority jobs before this runs; so the jobs of a level
still left out are tried once more with the admitted pending jobs of lower priority lifted
(objective 1 weighs one GPU of a level above all GPUs of the levels below): those go back
where they were when that is still free, else wherever greedy's rule finds room (and are
tried again with migrations at their own level), else they wait. Every try stops at the
deadline, leaving a valid plan.

The budget's floor and the exact backends' hint with ``--running-moveable``; the exact
model decides the same question over all sets at once.
"""

from __future__ import annotations

import time

from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.formulations.placement import JobView, PlacementProblem
from hyperplace.formulations.placement import Mover
from hyperplace.solvers.heuristics.greedy import (
    QuotaLedger,
    State,
    give_back,
    state_with_plan,
    try_place_job,
)
from hyperplace.solvers.heuristics.greedy_preempt import MAX_CANDIDATES, MAX_SETS
from hyperplace.solvers.heuristics.stop_sets import StopIndex, node_sets, sets_by_lost_work
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
    params = params or GreedyParams()
    if not p.movers:
        return a
    limit = p.migration.max_moves if p.migration is not None else None
    out = Assignment(units=dict(a.units), notes=dict(a.notes), stopped=set(a.stopped),
                     untried=set(a.untried))
    state, quota = state_with_plan(p, out)
    memo = _Memo(p)
    pending = sorted((jv for jv in p.pending if not jv.impossible),
                     key=lambda j: (-j.priority, -j.gpus, j.index))
    levels = sorted({jv.priority for jv in pending if jv.index not in out.units}, reverse=True)
    for level in levels:  # a job displaced below (admitted at first) is tried at its level
        here = [jv for jv in pending if jv.priority == level and jv.index not in out.units]
        left = [jv for jv in here
                if not _migrate_for(p, jv, state, quota, out, params, memo, limit, deadline)]
        if not left or _late(deadline) or (limit is not None and len(out.stopped) >= limit):
            continue
        _displace_lower(p, level, left, state, quota, out, params, memo, limit, deadline)
    return out


def _displace_lower(p: PlacementProblem, level: int, left: list[JobView], state: State,
                    quota: QuotaLedger, out: Assignment, params: GreedyParams, memo: _Memo,
                    limit: int | None, deadline: float | None) -> None:
    """The jobs of ``level`` still out may take the GPUs of admitted pending jobs of lower
    priority (objective 1 weighs one GPU of a level above all GPUs below it); those go back
    where they were when that is still free, else elsewhere, else wait."""
    lower = sorted((j for j in out.units if not p.is_copy(j) and p.jobs[j].priority < level),
                   key=lambda j: (-p.jobs[j].priority, -p.jobs[j].gpus, j))
    if not lower:
        return
    released = {j: out.units.pop(j) for j in lower}
    memo.failed.clear()  # the state changes: what failed may fit now
    for j, units in released.items():
        quota.add(p.jobs[j].queue, units, -1)
        give_back(state, units)
    for jv in left:
        _migrate_for(p, jv, state, quota, out, params, memo, limit, deadline)
    memo.failed.clear()
    for j, units in released.items():
        _readmit(p, p.jobs[j], units, state, quota, out, params)


def _readmit(p: PlacementProblem, jv: JobView, units: list[PlacedUnit], state: State,
             quota: QuotaLedger, out: Assignment, params: GreedyParams) -> None:
    """A released job back where it was when that is still free, else elsewhere, when its
    queue's quota allows; else it waits."""
    if all(set(gpus) <= set(state.free[node]) for u in units for node, gpus in u.pieces):
        again: list[PlacedUnit] | None = units
        for u in units:
            for node, gpus in u.pieces:
                state.take(node, gpus)
    else:
        again = try_place_job(p, jv, state, params.max_domain_trials)
    if again is None:
        return
    quota.add(jv.queue, again, +1)
    if quota.ok():
        out.units[jv.index] = again
        return
    quota.add(jv.queue, again, -1)
    give_back(state, again)


def _late(deadline: float | None) -> bool:
    return deadline is not None and time.perf_counter() > deadline


class _Memo:
    """What greedy's migration tries reuse across jobs: the movers per set of GPU types a
    job may use (least lost work first), the movers per node and nodes per job shape of the
    node-by-node sets (:class:`~hyperplace.solvers.heuristics.stop_sets.StopIndex`), and the
    job shapes (:meth:`~hyperplace.formulations.placement.problem.PlacementProblem.job_shape`)
    for which every try failed on the current state (a job of such a shape fails the same
    tries; cleared whenever the state changes). At 16,384 GPUs and 10,000 movers, filtering
    the movers per job and the node-by-node sets of jobs of a failed shape were most of
    the heuristic's time."""

    def __init__(self, p: PlacementProblem):
        self.p = p
        self.by_lost = sorted(p.movers, key=lambda v: (v.lost, v.name))
        self._by_types: dict[frozenset[str], list[Mover]] = {}
        self.failed: set[tuple[object, ...]] = set()
        self.index = StopIndex(p, p.movers)

    def movers(self, types: frozenset[str]) -> list[Mover]:
        """Movers holding a GPU of one of ``types``, least lost work first."""
        found = self._by_types.get(types)
        if found is None:
            by_name = self.p.node_by_name
            found = [v for v in self.by_lost
                     if any(by_name[node].gpu_type.name in types for node, _ in v.gpus)]
            self._by_types[types] = found
        return found


def _migrate_for(p: PlacementProblem, jv: JobView, state: State, quota: QuotaLedger,
                 out: Assignment, params: GreedyParams, memo: _Memo,
                 limit: int | None, deadline: float | None) -> bool:
    """Try to place ``jv`` by migrating movers (sets in order of lost work, then node by
    node); True when it is placed. Only movers holding GPUs of a type the job may use are
    tried, and only the sets that leave, on some node they free GPUs on, room for the job's
    smallest piece (a set that does not cannot be used by the job: no try for it)."""
    if _late(deadline) or (limit is not None and len(out.stopped) >= limit):
        return False
    if sum(map(len, state.free.values())) < jv.gpus:
        return False  # moving jobs frees no GPU in all
    shape = p.job_shape(jv)
    if shape in memo.failed:
        return False
    types = p.types_for(jv.classes)
    every = [v for v in memo.movers(types) if v.index not in out.stopped]
    if not every:
        return False
    smallest = min(min((*uc.pieces, *uc.piece_sizes)) for uc in jv.classes)
    room = None if limit is None else limit - len(out.stopped)
    for tried, combo in enumerate(sets_by_lost_work(every[:MAX_CANDIDATES])):
        if tried >= MAX_SETS or _late(deadline):
            break
        if room is not None and len(combo) > room:
            continue
        if not _frees_a_piece(p, combo, state, types, smallest):
            continue
        if _attempt(p, jv, combo, state, quota, out, params):
            memo.failed.clear()
            return True
    for combo in node_sets(jv, state, memo.index, lambda v: v.index not in out.stopped):
        if _late(deadline):
            return False
        if (room is None or len(combo) <= room) and \
                _attempt(p, jv, combo, state, quota, out, params):
            memo.failed.clear()
            return True
    if not _late(deadline):
        memo.failed.add(shape)  # every try ran and failed: so would a job of its shape
    return False


def _frees_a_piece(p: PlacementProblem, combo: tuple[Mover, ...], state: State,
                   types: frozenset[str], smallest: int) -> bool:
    """Some node of an eligible type that ``combo`` frees GPUs on then has ``smallest``
    GPUs free."""
    freed: dict[str, int] = {}
    for v in combo:
        for node, _ in v.gpus:
            freed[node] = freed.get(node, 0) + 1
    return any(p.node_by_name[node].gpu_type.name in types and
               n + len(state.free[node]) >= smallest for node, n in freed.items())


def _attempt(p: PlacementProblem, jv: JobView, combo: tuple[Mover, ...], state: State,
             quota: QuotaLedger, out: Assignment, params: GreedyParams) -> bool:
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
        out.units[v.copy] = moved[v.index]
        out.stopped.add(v.index)
    return True


def _retake(state: State, movers) -> None:
    """The movers' old GPUs are theirs again."""
    for v in movers:
        for node, g in v.gpus:
            state.take(node, (g,))
