"""MILP encoding of the layer split (HiGHS through highspy): an interval-arc flow model,
solved by bisection on the bottleneck.

Variables: ``y[k, a, b] ∈ {0, 1}``, stage k runs layers ``a .. b-1``. Only ranges that fit
the stage's memory and sit where stage k can be (``k <= a``, ``b <= L - (P-1-k)``) get an
arc, and only ranges no slower than a known split (the proportional one, or a caller's
hint) — every range of an optimal split is at least that fast. The arcs form a layered DAG
(node ``(k, j)`` = "stage k starts at cut j") and a split is a unit flow from ``(0, 0)`` to
``(P, L)``::

    Σ_out y - Σ_in y = 1 at the source, -1 at the sink, 0 elsewhere

Why arcs and bisection rather than one "min t, t >= load_k" model over cut variables: a
bottleneck objective makes those relaxations weak (the LP spreads layers fractionally and
branch-and-bound has to close the gap layer by layer). Measured on 200 layers x 16 stages,
one-hot cut binaries did not prove the optimum in 10 s and the cumulative "cut_k >= j"
form took ~6 s, most of it presolve. With a fixed threshold θ, "is there a split with every
load <= θ" is this flow model with the arcs above θ switched off (column upper bound 0). Its
constraint matrix is a network matrix, so the LP relaxation's vertices are integral: one
warm-started dual simplex solve answers each question, and an infeasible LP relaxation
proves the MILP infeasible. The optimum is one of the arcs' loads, so bisection over the
sorted distinct loads needs ``log2(#arcs)`` solves (~7 on 200 x 16: each feasible answer
also lowers the upper end to the found split's own bottleneck).

Phase two is the same model at ``θ* (1 + 1e-9)`` with cost = load and the arcs whose DP
sync exceeds a cap switched off, inside the cap loop of ``tiebreak.best_step_split``: the
shortest step (Σ load + the largest sync) among bottleneck-optimal splits. Every solve minimises Σ load, so the
solutions found on the way are good splits, not arbitrary ones. A solution that is not
integral (a numerical accident; the theory says it cannot happen) is re-solved as a MIP.
"""

from __future__ import annotations

import os
import sys
import time

import highspy
import numpy as np

from hyperplace.formulations.layer_split import (
    TIE_RTOL,
    SplitData,
    SplitSolution,
    evaluate_split,
)
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.split.baselines import proportional_cuts
from hyperplace.solvers.split.tiebreak import best_step_split

NAME = "milp-highs"
MS = 1e3  # costs in milliseconds keep the LP well scaled
INTEGRAL_TOL = 1e-6

_BANNER_DONE = False


def _silence_highs_banner() -> None:
    """highspy prints a copyright banner on stdout the first time a Highs() is made, which
    would corrupt ``--format json``; make that first instance with fd 1 pointed at devnull."""
    global _BANNER_DONE
    if _BANNER_DONE:
        return
    _BANNER_DONE = True
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def known_upper_bound(data: SplitData, hint_cuts: list[int] | None) -> tuple[float, list[int] | None]:
    """Bottleneck of the best memory-feasible split we already hold (hint, proportional).

    Used only to prune arcs and as the first incumbent; never as a proof of optimality.
    """
    best: tuple[float, list[int] | None] = (np.inf, None)
    for cuts in (hint_cuts, proportional_cuts(data)):
        if cuts is None:
            continue
        try:
            ev = evaluate_split(data, cuts)
        except ValueError:
            continue
        if ev.feasible and ev.bottleneck_s < best[0]:
            best = (ev.bottleneck_s, list(cuts))
    return best


class ArcFlowModel:
    """The flow model of one stage order, built once; thresholds only change column bounds."""

    def __init__(self, data: SplitData, cap_s: float) -> None:
        P, L = data.num_stages, data.num_layers
        self.data = data
        stage, start, end, load, sync = [], [], [], [], []
        for k in range(P):
            mat = data.load_matrix(k)  # inf where memory overflows or the range is empty
            sync_mat = data.sync_matrix(k)
            a_lo, a_hi = (0, 0) if k == 0 else (k, L - (P - k))
            b_lo, b_hi = (L, L) if k == P - 1 else (k + 1, L - (P - 1 - k))
            sub = mat[a_lo:a_hi + 1, b_lo:b_hi + 1]
            a, b = np.nonzero(np.isfinite(sub) & (sub <= cap_s * (1 + TIE_RTOL)))
            stage.append(np.full(len(a), k))
            start.append(a + a_lo)
            end.append(b + b_lo)
            load.append(sub[a, b])
            sync.append(sync_mat[a_lo:a_hi + 1, b_lo:b_hi + 1][a, b])
        self.sync = np.concatenate(sync)
        self.stage = np.concatenate(stage)
        self.start = np.concatenate(start)
        self.end = np.concatenate(end)
        self.load = np.concatenate(load)
        self.num_arcs = len(self.load)
        # node (k, j): stage k starts at cut j; (P, L) is the sink
        node_ids: dict[tuple[int, int], int] = {}
        tail = np.array([node_ids.setdefault((int(k), int(a)), len(node_ids))
                         for k, a in zip(self.stage, self.start)], dtype=np.int32)
        head = np.array([node_ids.setdefault((int(k) + 1, int(b)), len(node_ids))
                         for k, b in zip(self.stage, self.end)], dtype=np.int32)
        self.connected = (0, 0) in node_ids and (P, L) in node_ids
        self.highs: highspy.Highs | None = None
        if not self.connected:
            return
        supply = np.zeros(len(node_ids))
        supply[node_ids[(0, 0)]] = 1.0
        supply[node_ids[(P, L)]] = -1.0
        n = self.num_arcs
        index = np.empty(2 * n, dtype=np.int32)
        value = np.empty(2 * n)
        index[0::2], index[1::2] = tail, head
        value[0::2], value[1::2] = 1.0, -1.0
        lp = highspy.HighsLp()
        lp.num_col_, lp.num_row_ = n, len(node_ids)
        lp.col_cost_ = self.load * MS
        lp.col_lower_ = np.zeros(n)
        lp.col_upper_ = np.ones(n)
        lp.row_lower_ = supply
        lp.row_upper_ = supply
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = np.arange(0, 2 * n + 1, 2, dtype=np.int32)
        lp.a_matrix_.index_ = index
        lp.a_matrix_.value_ = value
        _silence_highs_banner()
        self.highs = highspy.Highs()
        self.highs.setOptionValue("output_flag", False)
        self.highs.passModel(lp)
        self._all = np.arange(n, dtype=np.int32)
        self._mip = False

    def split_within(self, threshold_s: float, time_limit: float | None,
                     sync_cap_s: float = np.inf) -> tuple[list[int], float] | None | str:
        """(cuts, bottleneck) of the least-Σ-load split with every stage load <= threshold
        (and every stage's sync <= ``sync_cap_s``); None when there is none (proven),
        ``"timeout"`` when HiGHS stopped first."""
        if self.highs is None:
            return None
        n = self.num_arcs
        allowed = (self.load <= threshold_s) & (self.sync <= sync_cap_s)
        self.highs.changeColsBounds(n, self._all, np.zeros(n), allowed.astype(float))
        if time_limit is not None:
            self.highs.setOptionValue("time_limit", max(0.01, float(time_limit)))
        self.highs.run()
        status = self.highs.getModelStatus()
        if status in (highspy.HighsModelStatus.kInfeasible,
                      highspy.HighsModelStatus.kUnboundedOrInfeasible):
            return None
        if status != highspy.HighsModelStatus.kOptimal:
            return "timeout"
        flow = np.asarray(self.highs.getSolution().col_value)
        cuts = self._path(flow)
        if cuts is None and not self._mip:
            # Not a 0/1 path: solve the same question as a MIP from now on.
            self._mip = True
            self.highs.changeColsIntegrality(n, self._all,
                                             np.full(n, highspy.HighsVarType.kInteger))
            return self.split_within(threshold_s, time_limit, sync_cap_s)
        return cuts if cuts is not None else "timeout"

    def _path(self, flow: np.ndarray) -> tuple[list[int], float] | None:
        if np.any(np.abs(flow - np.round(flow)) > INTEGRAL_TOL):
            return None
        chosen = np.nonzero(flow > 0.5)[0]
        P, L = self.data.num_stages, self.data.num_layers
        order = chosen[np.argsort(self.stage[chosen])]
        if len(order) != P or list(self.stage[order]) != list(range(P)):
            return None
        cuts = [0] + [int(self.end[i]) for i in order]
        if cuts[-1] != L or any(int(self.start[i]) != cuts[j] for j, i in enumerate(order)):
            return None
        return cuts, float(self.load[order].max())


def solve_milp(data: SplitData, time_limit: float | None = 10.0,
               hint_cuts: list[int] | None = None) -> SplitSolution:
    """Optimal split by bisection over arc-flow MILPs; ``feasible`` when the time limit stops
    it with an incumbent. ``hint_cuts`` (or the proportional split) only prunes arcs slower
    than a split we already hold; the optimum is proven by HiGHS's solves alone."""
    start = time.perf_counter()
    deadline = None if time_limit is None else start + time_limit

    def remaining() -> float | None:
        return None if deadline is None else deadline - time.perf_counter()

    def done(status: SolveStatus, cuts: list[int] | None, bound: float | None,
             message: str = "") -> SplitSolution:
        return SplitSolution(solver=NAME, status=status, cuts=cuts, bound=bound,
                             runtime_s=time.perf_counter() - start, message=message)

    upper, incumbent = known_upper_bound(data, hint_cuts)
    model = ArcFlowModel(data, upper)
    if not model.connected:
        return done(SolveStatus.INFEASIBLE, None, None,
                    "MILP: no split fits every stage's memory")
    thresholds = np.unique(model.load)
    lo = 0  # invariant: no split has a bottleneck below thresholds[lo]
    hi = len(thresholds) - 1  # invariant: thresholds[hi] is reachable once `incumbent` is set
    while lo < hi:
        mid = (lo + hi) // 2
        left = remaining()
        if left is not None and left <= 0:
            break
        found = model.split_within(float(thresholds[mid]), left)
        if found == "timeout":
            break
        if found is None:
            lo = mid + 1
        elif isinstance(found, tuple):
            incumbent, bottleneck = found
            hi = int(np.searchsorted(thresholds, bottleneck))
    if lo < hi:
        bound = float(thresholds[lo])
        if incumbent is None:
            return done(SolveStatus.NO_SOLUTION, None, bound, "MILP: time limit, no split yet")
        return done(SolveStatus.FEASIBLE, incumbent, bound,
                    "MILP: time limit reached with an incumbent")
    best = float(thresholds[lo])
    # Phase two at the optimum: the shortest step among splits whose loads tie with it.

    def min_sum_under(threshold: float, cap: float) -> list[int] | None | str:
        left = remaining()
        found = model.split_within(threshold, None if left is None else max(1.0, left), cap)
        return found[0] if isinstance(found, tuple) else found

    proven_best = incumbent is not None and (
        evaluate_split(data, incumbent).bottleneck_s <= best * (1 + TIE_RTOL) + 1e-15)
    chosen, exact = best_step_split(data, best, min_sum_under,
                                    start=incumbent if proven_best else None)
    if chosen is None:
        if incumbent is None:
            if exact:  # even the least threshold admits no split: proven
                return done(SolveStatus.INFEASIBLE, None, None,
                            "MILP: no split fits every stage's memory")
            return done(SolveStatus.NO_SOLUTION, None, best, "MILP: time limit, no split yet")
        return done(SolveStatus.FEASIBLE, incumbent, best,
                    "MILP: stopped before the step-time phase")
    if not exact:
        return done(SolveStatus.FEASIBLE, chosen, best,
                    "MILP: bottleneck proven; the step-time tie-break stopped at the time limit")
    return done(SolveStatus.OPTIMAL, chosen, best)
