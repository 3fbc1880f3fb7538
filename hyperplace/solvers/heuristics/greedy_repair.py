"""Greedy's failure-repair heuristic: the failure-repair family's greedy step
(:class:`~hyperplace.formulations.placement.repair.FailureRepair`; it stands in for the
migration heuristic in a repair round, :mod:`.families`).

Broken jobs largest first, each repaired in part (its failed units near its kept ones)
when that fits, else moved whole (its healthy GPUs released first), else left broken. The
budget's floor and the exact backends' hint of a repair round.
"""

from __future__ import annotations

import time

from hyperplace.formulations.mapping import Assignment
from hyperplace.formulations.placement import BrokenJob, PlacementProblem
from hyperplace.solvers.heuristics.greedy import give_back, state_with_plan, try_place_job
from hyperplace.solvers.params import GreedyParams


def greedy_repair(p: PlacementProblem, a: Assignment, params: GreedyParams | None = None,
                  deadline: float | None = None) -> Assignment:
    """Greedy's plan ``a`` with the round's broken jobs repaired where they fit (see the
    module docstring); ``deadline``: a ``time.perf_counter()`` value to stop trying at."""
    params = params or GreedyParams()
    out = Assignment(units=dict(a.units), notes=dict(a.notes), stopped=set(a.stopped),
                     untried=set(a.untried))
    state, quota = state_with_plan(p, out)
    trials = params.max_domain_trials
    for v in sorted(p.movers, key=lambda v: (-p.repair_gpus(v), v.name)):
        if deadline is not None and time.perf_counter() > deadline:
            break
        if isinstance(v, BrokenJob) and v.partial is not None and \
                not p.jobs[v.partial].impossible:
            placed = try_place_job(p, p.jobs[v.partial], state, trials)
            if placed is not None:
                quota.add(v.queue, placed, +1)
                if quota.ok():  # a repair's new GPUs count against its queue's quota
                    out.units[v.partial] = placed
                    continue
                quota.add(v.queue, placed, -1)
                give_back(state, placed)
        if p.jobs[v.copy].impossible:
            continue
        for node, g in v.gpus:
            state.give(node, (g,))
        placed = try_place_job(p, p.jobs[v.copy], state, trials)
        if placed is not None:
            quota.stop(v, +1)
            quota.add(v.queue, placed, +1)
            if not quota.ok():
                quota.stop(v, -1)
                quota.add(v.queue, placed, -1)
                give_back(state, placed)
                placed = None
        if placed is None:
            for node, g in v.gpus:  # its old GPUs are its own again
                state.take(node, (g,))
            continue
        out.units[v.copy] = placed
        out.stopped.add(v.index)
    return out
