"""Priority phases: priority levels grouped into lexicographic phases that stay exact
(called phases, not phases: a phase is a fabric's switch level).

:func:`~hyperplace.models.priority.priority_weights` makes one admitted GPU of a level
outweigh every GPU of all lower levels. With many levels on a large cluster those weights
pass what integer solvers and floats represent exactly, so levels are grouped, highest
first, into *phases* whose weighted objective stays below :data:`MAX_PHASE_OBJECTIVE`; each
phase is one lexicographic phase of the model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from hyperplace.models.priority import priority_weights

#: Largest weighted objective one phase may reach: well inside CP-SAT's 64-bit integers and
#: a double's exact integers (2**53), with room for the solvers' own arithmetic.
MAX_PHASE_OBJECTIVE = 2**40


def demand_by_level(jobs: Iterable[tuple[float, int]]) -> dict[float, int]:
    """GPUs pending per priority level, from (priority, GPUs) per job."""
    demand: dict[float, int] = defaultdict(int)
    for level, gpus in jobs:
        demand[level] += gpus
    return dict(demand)


def priority_phases(demand: dict[float, int], free_gpus: int) -> list[list[float]]:
    """Priority levels grouped, highest first, into phases (one lexicographic phase each).

    Parameters
    ----------
    demand : dict
        Pending GPUs per priority level.
    free_gpus : int
        Free GPUs of the round (caps what a level can be admitted).

    Returns
    -------
    list of list of int
        Levels per phase, highest phase first. Three or four levels are usually one phase.
    """
    phases: list[list[float]] = []
    for lvl in sorted(demand, reverse=True):
        if phases:
            trial = [*phases[-1], lvl]
            w = priority_weights(((q, demand[q]) for q in trial), free_gpus)
            if sum(w[q] * min(demand[q], free_gpus) for q in trial) < MAX_PHASE_OBJECTIVE:
                phases[-1] = trial
                continue
        phases.append([lvl])
    return phases


def phase_weights(demand: dict[float, int], phases: list[list[float]], free_gpus: int) -> dict[float, int]:
    """Weight of one GPU of each level inside its phase (lexicographic within the phase)."""
    out: dict[float, int] = {}
    for phase in phases:
        out.update(priority_weights(((q, demand[q]) for q in phase), free_gpus))
    return out
