"""Greedy's preemption heuristic: after greedy's plan, stop victims for the jobs it left out.

The pending jobs greedy left out are taken highest priority first. For each, the victims it
may stop (:attr:`PlacementProblem.victims <hyperplace.formulations.placement.problem.
PlacementProblem.victims>`, at most :data:`MAX_CANDIDATES`, least lost work first) are tried
as sets, those of lower priority first, then in order of (lost work, number of victims)
(:func:`~hyperplace.solvers.preemption.victim_sets`): the set's GPUs are given to greedy's
state and the job is placed by greedy's own rule; the first set with which it is placed
whole is taken, less the victims whose GPUs it did not use (they keep running). GPUs freed
but unused stay idle for the rest of the round (only the preemptor may use them), so the
plan keeps the model's rule that freed GPUs serve only jobs allowed to stop their owner.

A heuristic: the sets are tried in order of lost work but placed by greedy's best fit, so
a set that would fit with a cleverer placement may be passed over. It is the budget's floor
with ``--preemption`` (``--solver greedy``, or a fallback) and the exact backends' hint.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from hyperplace.formulations.mapping import Assignment
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.formulations.placement.preemption import Victim
from hyperplace.solvers.greedy import QuotaLedger, State, try_place_job
from hyperplace.solvers.params import GreedyParams

#: Victims tried per pending job (least lost work first), and victim sets tried per job.
MAX_CANDIDATES = 24
MAX_SETS = 256


def _sets(cands: list[Victim]) -> Iterator[tuple[Victim, ...]]:
    """Victim sets, those of lower-level victims first (objective 1 counts a running job
    in its own level), within a level bound in order of (lost work, count)."""
    from hyperplace.solvers.preemption import victim_sets

    for level in sorted({v.level for v in cands}):
        for combo in victim_sets([v for v in cands if v.level <= level]):
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
    if not p.victims:
        return a
    out = Assignment(units=dict(a.units), notes=dict(a.notes), stopped=set(a.stopped))
    state = State(p)
    ledger = QuotaLedger(p)
    for j, units in out.units.items():
        ledger.admit(p.jobs[j], units)
        for u in units:
            for node, gpus in u.pieces:
                state.take(node, gpus)
    pending = sorted((jv for jv in p.jobs if jv.index not in out.units and not jv.impossible),
                     key=lambda j: (-j.priority, -j.gpus, j.index))
    for jv in pending:
        if deadline is not None and time.perf_counter() > deadline:
            break
        cands = [v for v in p.victims if jv.index in v.allowed and v.index not in out.stopped]
        cands = sorted(cands, key=lambda v: (v.lost, v.name))[:MAX_CANDIDATES]
        reach = sum(len(f) for f in state.free.values())
        for tried, combo in enumerate(_sets(cands)):
            if tried >= MAX_SETS or (deadline is not None and time.perf_counter() > deadline):
                break
            if reach + sum(len(v.gpus) for v in combo) < jv.gpus:
                continue
            freed = [(node, g) for v in combo for node, g in v.gpus]
            for node, g in freed:
                state.give(node, (g,))
            _credit(p, ledger, combo, -1)  # stopped victims no longer count against quotas
            placed = try_place_job(p, jv, state, params.max_domain_trials)
            if placed is not None and not ledger.admit(jv, placed):
                for u in placed:
                    for node, gpus in u.pieces:
                        state.give(node, gpus)
                placed = None
            if placed is None:
                for node, g in freed:
                    state.take(node, (g,))
                _credit(p, ledger, combo, +1)
                continue
            used = {(node, g) for u in placed for node, gpus in u.pieces for g in gpus}
            _credit(p, ledger, [v for v in combo if not used & set(v.gpus)], +1)
            # every freed GPU the job did not take stays idle (kept from the rest)
            for node, g in freed:
                if (node, g) not in used:
                    state.take(node, (g,))
            out.units[jv.index] = placed
            out.stopped |= {v.index for v in combo if used & set(v.gpus)}
            break
    return out


def _credit(p: PlacementProblem, ledger: QuotaLedger, victims: list[Victim] | tuple[Victim, ...],
            sign: int) -> None:
    """Count the victims' GPUs in their queues' usage again (+1) or no longer (-1)."""
    if not p.quotas.active:
        return
    for v in victims:
        for node, _ in v.gpus:
            gpu_type = p.node_by_name[node].gpu_type.name
            for key, n in p.quotas.usage(v.queue, gpu_type, 1).items():
                ledger.used[key] += sign * n
