"""Priority tiers: priority levels grouped into lexicographic phases that stay exact.

:func:`~hyperplace.models.priority.priority_weights` makes one admitted GPU of a level
outweigh every GPU of all lower levels. With many levels on a large cluster those weights
pass what integer solvers and floats represent exactly, so levels are grouped, highest
first, into *tiers* whose weighted objective stays below :data:`MAX_TIER_OBJECTIVE`; each
tier is one lexicographic phase of the model.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from hyperplace.models.priority import priority_weights

#: Largest weighted objective one tier may reach: well inside CP-SAT's 64-bit integers and
#: a double's exact integers (2**53), with room for the solvers' own arithmetic.
MAX_TIER_OBJECTIVE = 2**40


def demand_by_level(jobs: Iterable[tuple[float, int]]) -> dict[float, int]:
    """GPUs pending per priority level, from (priority, GPUs) per job."""
    demand: dict[float, int] = defaultdict(int)
    for level, gpus in jobs:
        demand[level] += gpus
    return dict(demand)


def priority_tiers(demand: dict[float, int], free_gpus: int) -> list[list[float]]:
    """Priority levels grouped, highest first, into tiers (one lexicographic phase each).

    Parameters
    ----------
    demand : dict
        Pending GPUs per priority level.
    free_gpus : int
        Free GPUs of the round (caps what a level can be admitted).

    Returns
    -------
    list of list of int
        Levels per tier, highest tier first. Three or four levels are usually one tier.
    """
    tiers: list[list[float]] = []
    for lvl in sorted(demand, reverse=True):
        if tiers:
            trial = [*tiers[-1], lvl]
            w = priority_weights(((q, demand[q]) for q in trial), free_gpus)
            if sum(w[q] * min(demand[q], free_gpus) for q in trial) < MAX_TIER_OBJECTIVE:
                tiers[-1] = trial
                continue
        tiers.append([lvl])
    return tiers


def tier_weights(demand: dict[float, int], tiers: list[list[float]], free_gpus: int) -> dict[float, int]:
    """Weight of one GPU of each level inside its tier (lexicographic within the tier)."""
    out: dict[float, int] = {}
    for tier in tiers:
        out.update(priority_weights(((q, demand[q]) for q in tier), free_gpus))
    return out
