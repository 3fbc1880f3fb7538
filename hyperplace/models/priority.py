"""Priority weights that make the objective lexicographic over priority classes.

The rule users can rely on: **a job is never left out so that lower-priority jobs can run in
its place.** It holds because a GPU admitted at priority ``p`` is worth more than every GPU
that could possibly be admitted at all lower priorities together:
``W[p] = 1 + sum_{q < p} W[q] * cap[q]`` with ``cap[q] = min(pending demand of class q,
free GPUs)``. Within a class, more admitted GPUs is better.
"""

from __future__ import annotations

from collections.abc import Iterable


def priority_weights(demands: Iterable[tuple[float, int]], free_gpus: int) -> dict[float, int]:
    """``demands``: (priority level, GPUs) of each pending job -> weight per level (a level
    may be fractional: with preemption a running job counts at its priority + 0.5)."""
    per_level: dict[float, int] = {}
    for level, gpus in demands:
        per_level[level] = per_level.get(level, 0) + gpus
    weights: dict[float, int] = {}
    below = 0
    for level in sorted(per_level):
        weights[level] = below + 1
        below += weights[level] * min(per_level[level], free_gpus)
    return weights


def weighted_demand(admitted: Iterable[tuple[int, int]], weights: dict[int, int]) -> int:
    """Priority-weighted admitted GPU demand: sum of W[level] * GPUs over admitted jobs."""
    return sum(weights.get(level, 1) * gpus for level, gpus in admitted)
