"""A proven upper bound on an LP's maximum from any row multipliers (HiGHS's duals), in
floating point, whatever the LP solver's tolerances: the bound behind every LP relaxation's
claim on objective 1 or 2 (:mod:`.relax`, :mod:`.aggregate`, the routing LP of
:mod:`hyperplace.solvers.decompose`).

Why: HiGHS's optimum is exact only up to its tolerances (1e-7 on feasibility and on reduced
costs, relative to the data's scale), so its objective value is not a bound. Rounding it half
up (``floor(v + 0.5)``) stays valid only while that error is below 0.5; at 131,072 GPUs
objective 1 is ~3e11, where it need not be. Inflating it by a relative 1e-6 is safe in
practice but can never prove a tight LP (the gap shown is 1e-6 where the plan is optimal)
and is still no proof. The dual bound of Neumaier & Shcherbina (2004, "Safe bounds in linear
and mixed-integer linear programming", Math. Programming 99, 283-296) is both.

The argument (:func:`dual_bound`). For ``max c'x`` over ``l <= Ax <= u``, ``lb <= x <= ub``
and ANY vector ``y`` (one number per row), write ``d = c - A'y``. Then for every feasible x,
``c'x = y'(Ax) + d'x``, and termwise ``y_i (Ax)_i <= y_i u_i`` when ``y_i > 0``, ``<= y_i l_i``
when ``y_i < 0``, ``d_j x_j <= max(d_j lb_j, d_j ub_j)``. So

    c'x <= sum_i (y_i > 0 ? y_i u_i : y_i l_i) + sum_j max(d_j lb_j, d_j ub_j)

for every feasible x, integer or not, whatever y is: the duals' quality only decides how
tight it is (at an optimal basis with exact arithmetic it is the LP optimum). A multiplier
whose row side is infinite (``y_i > 0`` with ``u_i = inf``) is set to 0, which is another
choice of y, so the row sum is always finite; a column with an infinite bound where ``d_j``
may have the wrong sign makes the bound infinite (None: no bound). Every model here has finite
column bounds.

The float arithmetic of that sum is bounded, not trusted: ``d`` is computed as ``c - A'y``
(one sparse product), and each ``d_j`` is known to within ``delta_j = 2 (k_j + 2) eps/2
(|c_j| + sum_i |a_ij y_i|)`` (Higham's bound for a sum of ``k_j + 1`` rounded products, ``k_j``
the column's nonzeros, doubled for the rounding of the ``|.|`` sum itself); a column's term
is widened by ``delta_j max(|lb_j|, |ub_j|)``. The terms are added with ``math.fsum``
(correctly rounded) and the result is raised by ``16 eps/2`` times the sum of the terms'
magnitudes (a row term's side and product rounded, a column term's product, the widening's
own arithmetic, the fsum and the last additions: at most about 8 such errors), then to the
next float up. The LP data are the caller's exact numbers (integers here) as float64: exact
below 2**53; above (objective 1's weights with many priority levels), a cost or coefficient
rounded once more adds one relative ``eps/2`` to a product, inside the factor 2 of
``delta_j`` and the margin. A bound of the LP relaxation bounds every integer solution, so
an integer objective is at most ``floor`` of it (:func:`integer_bound`).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["dual_bound", "highs_max", "integer_bound"]

#: Half the float64 machine epsilon: the relative error of one rounding.
UNIT = float(np.finfo(np.float64).eps) / 2
#: Bounds at or beyond this magnitude are infinite (HiGHS's own infinity is 1e20 by default
#: in some interfaces and ``inf`` in highspy; either way a side this large is not used).
INFINITE = 1e20


def dual_bound(cost: ArrayLike, lb: ArrayLike, ub: ArrayLike, row_lo: ArrayLike,
               row_hi: ArrayLike, starts: ArrayLike, index: ArrayLike, value: ArrayLike,
               y: ArrayLike) -> float | None:
    """A proven upper bound on ``max cost'x`` s.t. ``row_lo <= Ax <= row_hi``,
    ``lb <= x <= ub`` (see the module docstring for why it holds for any ``y``).

    Parameters
    ----------
    cost, lb, ub : array of float, one per column
        The objective (maximised) and the column bounds.
    row_lo, row_hi : array of float, one per row
        The row sides (infinite or beyond :data:`INFINITE`: no side).
    starts, index, value : arrays
        ``A`` by rows, compressed (HiGHS's ``addRows`` form): row ``i``'s nonzeros are
        ``index[starts[i]:starts[i+1]]`` with coefficients ``value[...]``.
    y : array of float, one per row
        Any multipliers; a maximisation's duals (for HiGHS minimising ``-cost``: the negated
        ``row_dual``) make the bound tight.

    Returns
    -------
    float or None
        The bound, or None when it is infinite or not a number (a column with an infinite
        bound and a reduced cost of the wrong sign, or infinite data).
    """
    c = np.asarray(cost, dtype=np.float64)
    lo_x, hi_x = np.asarray(lb, dtype=np.float64), np.asarray(ub, dtype=np.float64)
    lo_r, hi_r = np.asarray(row_lo, dtype=np.float64), np.asarray(row_hi, dtype=np.float64)
    st = np.asarray(starts, dtype=np.int64)
    cols = np.asarray(index, dtype=np.int64)
    a = np.asarray(value, dtype=np.float64)
    mult = np.array(y, dtype=np.float64, copy=True)
    n, m = len(c), len(lo_r)
    if len(mult) != m or len(st) != m or len(hi_r) != m or len(lo_x) != n or len(hi_x) != n:
        raise ValueError("dual_bound: arrays of inconsistent lengths")
    if not (np.all(np.isfinite(c)) and np.all(np.isfinite(a))):
        return None
    mult[~np.isfinite(mult)] = 0.0
    lo_inf, hi_inf = ~(np.abs(lo_r) < INFINITE), ~(np.abs(hi_r) < INFINITE)
    mult[(mult > 0) & hi_inf] = 0.0  # a side the row does not have: another choice of y
    mult[(mult < 0) & lo_inf] = 0.0
    # y'Ax <= the row sides' sum
    side = np.where(mult > 0, np.where(hi_inf, 0.0, hi_r), np.where(lo_inf, 0.0, lo_r))
    row_terms = mult * side
    # d = c - A'y, and how far the computed d may be from the exact one
    rows = np.repeat(np.arange(m, dtype=np.int64), np.diff(np.append(st, len(cols))))
    prod = a * mult[rows]
    aty = np.bincount(cols, weights=prod, minlength=n)
    mag = np.bincount(cols, weights=np.abs(prod), minlength=n)
    nnz = np.bincount(cols, minlength=n)
    d = c - aty
    delta = 2.0 * (nnz + 2) * UNIT * (np.abs(c) + mag)
    lo_xinf, hi_xinf = ~(np.abs(lo_x) < INFINITE), ~(np.abs(hi_x) < INFINITE)
    if np.any(hi_xinf & (d + delta > 0)) or np.any(lo_xinf & (d - delta < 0)):
        return None  # the column's term is unbounded
    fin_lo, fin_hi = np.where(lo_xinf, 0.0, lo_x), np.where(hi_xinf, 0.0, hi_x)
    col_terms = np.where(hi_xinf, d * fin_lo,
                         np.where(lo_xinf, d * fin_hi, np.maximum(d * fin_lo, d * fin_hi)))
    widen = delta * np.maximum(np.abs(fin_lo), np.abs(fin_hi))
    terms = np.concatenate([row_terms, col_terms, widen])
    if not np.all(np.isfinite(terms)):
        return None
    total = math.fsum(terms.tolist())
    margin = 16.0 * UNIT * float(np.sum(np.abs(terms))) * (1.0 + 1e-9)
    bound = float(np.nextafter(total + margin, math.inf))
    return bound if math.isfinite(bound) else None


def highs_max(cost: ArrayLike, lb: ArrayLike, ub: ArrayLike, row_lo: ArrayLike,
              row_hi: ArrayLike, starts: ArrayLike, index: ArrayLike, value: ArrayLike,
              time_limit_s: float) -> tuple[float | None, str, list[float] | None]:
    """``max cost'x`` over ``row_lo <= Ax <= row_hi``, ``lb <= x <= ub`` (the arrays as
    :func:`dual_bound` takes them) with HiGHS, one thread, within ``time_limit_s``: (the
    proven bound, HiGHS's model status, its solution). The one LP-to-bound path of every LP
    bound (:func:`.relax.lp_max`, :meth:`.aggregate.SparseLp.maximise`).

    The one rule: a bound only from an LP HiGHS solved to optimality (else bound and
    solution are None); its multipliers are HiGHS's duals (negated: HiGHS minimises
    ``-cost``), or zero when HiGHS reports no valid duals, which is another choice of ``y``
    (the column bounds' bound: valid, looser); None when :func:`dual_bound` is infinite.
    No column: the bound is 0, status ``empty``."""
    import highspy

    from hyperplace.solvers.backends.backend import run_interruptibly
    from hyperplace.solvers.backends.milp import quiet_stdout

    c = np.asarray(cost, dtype=np.float64)
    lo_x, hi_x = np.asarray(lb, dtype=np.float64), np.asarray(ub, dtype=np.float64)
    lo_r, hi_r = np.asarray(row_lo, dtype=np.float64), np.asarray(row_hi, dtype=np.float64)
    st = np.asarray(starts, dtype=np.int32)
    cols, a = np.asarray(index, dtype=np.int32), np.asarray(value, dtype=np.float64)
    n, m = len(c), len(lo_r)
    if n == 0:
        return 0.0, "empty", []
    with quiet_stdout():
        h = highspy.Highs()  # type: ignore[no-untyped-call]
    h.setOptionValue("output_flag", False)
    h.setOptionValue("threads", 1)
    h.setOptionValue("time_limit", max(0.01, time_limit_s))
    h.addVars(n, lo_x, hi_x)
    h.changeColsCost(n, np.arange(n, dtype=np.int32), -c)
    if m:
        inf = highspy.kHighsInf
        h.addRows(m, np.where(np.isneginf(lo_r), -inf, lo_r),
                  np.where(np.isposinf(hi_r), inf, hi_r), len(cols), st, cols, a)
    run_interruptibly(h.run, h.cancelSolve)
    status = h.getModelStatus().name
    if status != "kOptimal":
        return None, status, None
    solution = h.getSolution()
    y = -np.asarray(solution.row_dual, dtype=np.float64) if solution.dual_valid \
        else np.zeros(m)
    return dual_bound(c, lo_x, hi_x, lo_r, hi_r, st, cols, a, y), status, \
        list(solution.col_value)


def integer_bound(bound: float) -> float:
    """An upper bound on an integer objective from a proven real one (:func:`dual_bound`):
    the objective's every value is an integer at most ``bound``, so at most its floor."""
    return float(math.floor(bound))
