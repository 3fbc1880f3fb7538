"""Exact dynamic programme for the layer split (PipeDream / Alpa / AMP family).

Because a stage's load depends only on its own layer range ``[a, b)`` (see
``formulations/layer_split.py``), the best bottleneck of the first k stages ending at cut b is

    f[k][b] = min_a max(f[k-1][a], load_k(a, b))

which is O(P·L²). Each step is one numpy broadcast over an ``(L+1) x (L+1)`` matrix, so
200 layers x 16 stages takes a few milliseconds. Among the bottleneck-optimal splits it then
picks the shortest step (Σ load plus the largest DP sync and optimizer update): the same
recurrence with ``+`` instead of ``max``, restricted to ranges with ``load <= bottleneck``
and ``sync <= cap``, inside the cap loop of ``tiebreak.best_step_split``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from hyperplace.formulations.layer_split import SplitData, SplitSolution
from hyperplace.models.result import SolveStatus

INF = np.inf


def _backtrack(args: list[np.ndarray], end: int) -> list[int]:
    cuts = [end]
    b = end
    for arg in reversed(args):
        b = int(arg[b])
        cuts.append(b)
    cuts.reverse()
    return cuts


def _best_path(mats: list[np.ndarray], combine: np.ufunc) -> tuple[float, list[int] | None]:
    """Min over contiguous splits of ``combine`` over k of mats[k][a, b]; (value, cuts)."""
    n = mats[0].shape[0]
    f = np.full(n, INF)
    f[0] = 0.0
    args: list[np.ndarray] = []
    for mat in mats:
        cand = combine(f[:, None], mat)
        arg = np.argmin(cand, axis=0)
        f = cand[arg, np.arange(n)]
        args.append(arg)
    value = float(f[n - 1])
    if not np.isfinite(value):
        return value, None
    return value, _backtrack(args, n - 1)


def minmax_path(mats: list[np.ndarray]) -> tuple[float, list[int] | None]:
    """Min over contiguous splits of max_k mats[k][a, b] (the bottleneck); returns (value, cuts)."""
    return _best_path(mats, np.maximum)


def minsum_path(mats: list[np.ndarray]) -> tuple[float, list[int] | None]:
    """Min over contiguous splits of Σ_k mats[k][a, b]; returns (value, cuts)."""
    return _best_path(mats, np.add)


def solve_dp(data: SplitData, time_limit: float | None = None,
             hint_cuts: list[int] | None = None) -> SplitSolution:
    """Exact optimum (bottleneck, then Σ load). ``time_limit``/``hint_cuts`` are unused:
    the DP is exact and takes milliseconds; they are accepted so every backend has one
    signature."""
    start = time.perf_counter()
    mats = [data.load_matrix(k) for k in range(data.num_stages)]
    best, cuts = minmax_path(mats)
    if cuts is None:
        return SplitSolution(solver="dp", status=SolveStatus.INFEASIBLE,
                             runtime_s=time.perf_counter() - start,
                             message="no split fits every stage's memory")
    syncs = [data.sync_matrix(k) for k in range(data.num_stages)]

    def min_sum_under(threshold: float, cap: float) -> list[int] | None:
        restricted = [np.where((mat <= threshold) & (sync <= cap), mat, INF)
                      for mat, sync in zip(mats, syncs)]
        return minsum_path(restricted)[1]

    from hyperplace.solvers.split.tiebreak import best_step_split

    chosen, exact = best_step_split(data, best, min_sum_under, start=cuts)
    return SplitSolution(solver="dp", status=SolveStatus.OPTIMAL, cuts=chosen or cuts,
                         bound=best, runtime_s=time.perf_counter() - start,
                         message="" if exact else "step-time tie-break stopped early")


def memory_diagnosis(data: SplitData) -> str:
    """Why nothing fits: the split that minimises the worst memory overflow, and by how much.

    Exact (the same DP over overflow instead of time), so "stage X is N GB short" is the
    least shortfall any split can reach, not an artefact of one bad split.
    """
    mats = [data.memory_matrix(k) - data.mem_cap[k] for k in range(data.num_stages)]
    worst, cuts = minmax_path(mats)
    if cuts is None:
        return "no split exists"
    over = [(float(mats[k][cuts[k], cuts[k + 1]]), k) for k in range(data.num_stages)]
    amount, k = max(over)
    s = data.stages[k]
    used = data.memory_matrix(k)[cuts[k], cuts[k + 1]]
    return (f"stage {s.name} (position {k} of {data.num_stages}, layers "
            f"{cuts[k]}-{cuts[k + 1] - 1}, {int(data.inflight[k])} micro-batches in flight) needs "
            f"{used / 1e9:.1f} GB per GPU but has {data.mem_cap[k] / 1e9:.0f} GB: "
            f"{amount / 1e9:.1f} GB over, in the split that minimises the worst overflow "
            f"(cuts {cuts}); try ZeRO sharding, recomputation, more stages or fewer "
            "micro-batches")


Backend = Callable[..., SplitSolution]
