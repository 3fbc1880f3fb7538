"""Baselines and fast fallback for the layer split.

* ``symmetric``: equal layer counts per stage (the first ``L mod P`` stages take one more),
  what people configure by hand today; it ignores speed, memory and links.
* ``proportional`` (Metis-style): layer counts in proportion to each stage's compute speed
  (inverse of its time for the whole model), rounded by largest remainder with at least one
  layer each, then layers shifted off any stage that runs out of memory onto the neighbour
  with the most room. Linear time; no optimality claim, which is why the driver only uses it
  as a baseline and a fallback.
"""

from __future__ import annotations

import time

import numpy as np

from hyperplace.formulations.layer_split import (
    SplitData,
    SplitSolution,
    counts_to_cuts,
    evaluate_split,
)
from hyperplace.models.result import SolveStatus


def symmetric_cuts(data: SplitData) -> list[int]:
    P, L = data.num_stages, data.num_layers
    q, r = divmod(L, P)
    return counts_to_cuts([q + (1 if k < r else 0) for k in range(P)])


def _proportional_counts(data: SplitData) -> list[int]:
    P, L = data.num_stages, data.num_layers
    totals = data.time.sum(axis=1)
    speed = np.where(totals > 0, 1.0 / np.maximum(totals, 1e-300), 1.0)
    ideal = L * speed / speed.sum()
    counts = np.maximum(1, np.floor(ideal)).astype(int)
    while counts.sum() < L:
        k = int(np.argmax(ideal - counts))
        counts[k] += 1
    while counts.sum() > L:
        over = np.where(counts > 1, counts - ideal, -np.inf)
        counts[int(np.argmax(over))] -= 1
    return [int(c) for c in counts]


def proportional_cuts(data: SplitData) -> list[int] | None:
    """Speed-proportional split repaired for memory; None when the repair gets stuck."""
    P, L = data.num_stages, data.num_layers
    counts = _proportional_counts(data)
    for _ in range(L * P + 1):
        ev = evaluate_split(data, counts_to_cuts(counts))
        if ev.feasible:
            return ev.cuts
        k, _ = max(ev.overflow, key=lambda x: x[1])
        if counts[k] <= 1:
            return None
        cuts = counts_to_cuts(counts)
        best: tuple[float, int] | None = None
        for nb in (k - 1, k + 1):
            if not 0 <= nb < P:
                continue
            # The layer that moves is the one on the shared boundary.
            layer = cuts[k] if nb == k - 1 else cuts[k + 1] - 1
            slack = (data.mem_cap[nb] - ev.memory_bytes[nb] - data.mem_layer[nb, layer])
            if slack >= 0 and (best is None or slack > best[0]):
                best = (float(slack), nb)
        if best is None:
            return None
        counts[k] -= 1
        counts[best[1]] += 1
    return None


def solve_proportional(data: SplitData, time_limit: float | None = None,
                       hint_cuts: list[int] | None = None) -> SplitSolution:
    start = time.perf_counter()
    cuts = proportional_cuts(data)
    if cuts is None:
        return SplitSolution(solver="proportional", status=SolveStatus.NO_SOLUTION,
                             runtime_s=time.perf_counter() - start,
                             message="proportional split could not be repaired to fit memory")
    return SplitSolution(solver="proportional", status=SolveStatus.FEASIBLE, cuts=cuts,
                         runtime_s=time.perf_counter() - start)
