"""Phase two of every backend: among bottleneck-optimal splits, the shortest step.

With the bottleneck ``θ`` fixed, the step time ``(m−1)·θ + Σ_k load_k + max_k sync_k``
(``sync_k``: stage k's DP all-reduce plus optimizer update, see
``SplitData.sync_matrix``) is minimised by minimising ``Σ load + max sync``. The ``max``
term is not additive, so each backend answers the additive question "least Σ load with
every load ≤ θ and every sync ≤ cap" and this loop lowers the cap: after a split with
largest sync ``s``, only splits with every sync strictly below ``s`` can do better, and once
``Σ load`` of the best such split plus the least achievable ``max sync`` reaches the best
step found, none can. The loop is exact when it ends that way; it stops after
``MAX_CAP_ROUNDS`` caps (or the backend's time limit) and then says so.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from hyperplace.formulations.layer_split import TIE_RTOL, SplitData, evaluate_split

MAX_CAP_ROUNDS = 64
INF = np.inf

# (threshold on every load, cap on every sync) -> cuts, None (no such split) or "timeout"
MinSumUnder = Callable[[float, float], "list[int] | None | str"]


def least_max_sync(data: SplitData, threshold: float) -> float:
    """The least ``max_k sync_k`` over splits with every load ≤ threshold (exact DP)."""
    from hyperplace.solvers.split.dp import minmax_path

    mats = [np.where(data.load_matrix(k) <= threshold, data.sync_matrix(k), INF)
            for k in range(data.num_stages)]
    value, _ = minmax_path(mats)
    return value


def step_key(data: SplitData, cuts: list[int]) -> tuple[float, float]:
    ev = evaluate_split(data, cuts)
    return ev.sum_s + max(x + y for x, y in zip(ev.dp_sync_s, ev.optimizer_s)), ev.bottleneck_s


def best_step_split(data: SplitData, bottleneck: float, min_sum_under: MinSumUnder,
                    start: list[int] | None = None) -> tuple[list[int] | None, bool]:
    """(cuts with the least step time among bottleneck-optimal splits, proven?)."""
    threshold = bottleneck * (1 + TIE_RTOL) + 1e-15
    floor = least_max_sync(data, threshold)
    best: list[int] | None = start
    best_value = step_key(data, start)[0] if start is not None else INF
    cap = INF
    for _ in range(MAX_CAP_ROUNDS):
        found = min_sum_under(threshold, cap)
        if found == "timeout":
            return best, False
        if found is None:
            return best, True
        assert not isinstance(found, str)
        ev = evaluate_split(data, found)
        sync = max(x + y for x, y in zip(ev.dp_sync_s, ev.optimizer_s))
        value = ev.sum_s + sync
        if value < best_value * (1 - TIE_RTOL):
            best, best_value = found, value
        if not np.isfinite(floor) or ev.sum_s + floor >= best_value * (1 - TIE_RTOL):
            return best, True
        cap = sync * (1 - 1e-12) - 1e-18
    return best, False
