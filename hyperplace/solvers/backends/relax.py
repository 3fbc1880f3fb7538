"""A valid bound on objective 1 from the model's LP relaxation (HiGHS), without a MIP solve.

When a round cannot afford the exact backend (or the backend stopped before proving), the
plan's bound was the demand bound: every free GPU filled by the best-weighted jobs. That
bound ignores where the free GPUs are, so on a fragmented cluster it overstates the optimum
by 10-13 % (bench/results/scale.md, 16k-131k GPUs at 90 % allocation), although greedy's plan
was optimal there. The LP relaxation of the same model (the one formulation) knows that a
3-GPU fragment cannot host an 8-GPU piece; HiGHS solves it in 0.02 s at 16,384 GPUs and
0.13 s at 65,536, and it equalled the optimum on every bench size.

Objective 1 is written on the model's own variables: ``sum(weight[priority] * gpus *
run[bundle])`` (jobs of a bundle share priority and size), so the bound holds whatever the
number of priority phases. The relaxation is a maximisation, so its optimum bounds every
integer solution from above. HiGHS's optimum itself is not used: it is exact only up to
HiGHS's tolerances, and objective 1 reaches ~3e11 at 131,072 GPUs. The bound is the dual
bound of HiGHS's row duals (:func:`.safebound.dual_bound`: valid for any multipliers, its
float arithmetic bounded), rounded down to an integer (objective 1 and admitted jobs are
integers): a proof, whatever the LP's size.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from hyperplace.formulations.linear import LinearModel
from hyperplace.formulations.placement import PlacementModel
from hyperplace.solvers.backends.safebound import highs_max, integer_bound

__all__ = ["admitted_jobs_bound", "objective1_terms", "relaxation_bound", "tighten_bound"]


def objective1_terms(pm: PlacementModel) -> list[tuple[int, int]]:
    """Objective 1 (priority-weighted admitted GPUs) on the model's ``run`` variables."""
    p = pm.problem
    terms: list[tuple[int, int]] = []
    for leader, var in pm.run.items():
        jv = p.jobs[leader]
        if jv.migrant is not None:  # a mover's copy: running demand, not objective 1
            continue
        terms.append((var, int(p.weights[jv.priority]) * jv.gpus))
    return terms


def lp_max(lm: LinearModel, terms: list[tuple[int, int]], time_limit_s: float,
           at_least: tuple[list[tuple[int, int]], float] | None = None) -> float | None:
    """A proven upper bound on ``max sum(terms)`` over the LP relaxation of ``lm``, by
    :func:`.safebound.highs_max` (its one rule: None unless HiGHS solved the LP to
    optimality or when the bound is infinite; zero multipliers when HiGHS gives no duals).

    Parameters
    ----------
    lm : LinearModel
        The integer model; integrality is dropped, bounds and rows kept.
    terms : list of (variable, coefficient)
        The objective to maximise.
    time_limit_s : float
        HiGHS's time limit.
    at_least : (terms, value), optional
        One more row, ``sum(terms) >= value``.
    """
    from hyperplace.solvers.backends.milp import highs_rows

    n = lm.num_vars
    cost = np.zeros(n)
    for i, a in terms:
        cost[i] += a
    rows = [(c.terms, c.lo, c.hi) for c in lm.constraints]
    if at_least is not None:
        rows.append((at_least[0], at_least[1], math.inf))
    arrays = highs_rows(rows)
    _, lower, upper, _, starts, index, value = arrays if arrays is not None else (
        0, np.zeros(0), np.zeros(0), 0, np.zeros(0, dtype=np.int32),
        np.zeros(0, dtype=np.int32), np.zeros(0))
    bound, _, _ = highs_max(cost, lm.lbs, lm.ubs, lower, upper, starts, index, value,
                            time_limit_s)
    return bound


def relaxation_bound(pm: PlacementModel, deadline: float) -> float | None:
    """A valid upper bound on objective 1 from the LP relaxation, or None when there is no
    time left before ``deadline`` (a ``time.perf_counter()`` value) or HiGHS did not finish.
    """
    left = deadline - time.perf_counter()
    if left <= 0.01:
        return None
    value = lp_max(pm.lm, objective1_terms(pm), left)
    if value is None:
        return None
    return integer_bound(value)


#: Seconds of building the model and solving its relaxation per estimated piece variable
#: (``driver.estimate_vars``): measured 0.9-1.7e-5 s of CPU from 16,384 to 65,536 GPUs
#: (2026-11-30, 2 CPUs, Intel Xeon; the build is 75-85 % of it), set with some margin.
SECONDS_PER_VAR = 2e-5
#: The same for the relaxation alone, when the exact backend already built the model.
SECONDS_PER_VAR_BUILT = 5e-6


def tighten_bound(pm: PlacementModel | None, build: Callable[[], PlacementModel],
                  est_vars: int, deadline: float) -> tuple[PlacementModel | None, float | None]:
    """The LP relaxation bound on objective 1 if it fits before ``deadline``.

    Parameters
    ----------
    pm : PlacementModel or None
        The round's model when the exact backend built one (reused), else None.
    build : callable
        Builds the model (called only when ``pm`` is None and the time allows).
    est_vars : int
        The driver's size estimate, to judge whether building and solving fits.
    deadline : float
        ``time.perf_counter()`` value the bound must be ready by.

    Returns
    -------
    (PlacementModel or None, float or None)
        The model (built or given) and the bound (None when it did not fit or HiGHS did not
        finish).
    """
    need = (SECONDS_PER_VAR_BUILT if pm is not None else SECONDS_PER_VAR) * est_vars
    if deadline - time.perf_counter() < need + 0.02:
        return pm, None
    if pm is None:
        pm = build()
    return pm, relaxation_bound(pm, deadline)


def admitted_jobs_bound(pm: PlacementModel, objective1: float, deadline: float) -> float | None:
    """A valid bound on objective 2 (admitted jobs) once objective 1 is proven optimal at
    ``objective1``: the LP relaxation's most jobs among solutions with objective 1 at least
    that (a lexicographic optimum is one of them). None when another objective ranks between
    the two (fair share, preemption: the bound would not be conditional on it), when the time
    is short or HiGHS did not finish.
    """
    names = [o.name for o in pm.lm.objectives]
    phases = len(pm.problem.priority_phases)
    if "admitted_jobs" not in names or names.index("admitted_jobs") != phases:
        return None
    if deadline - time.perf_counter() < SECONDS_PER_VAR_BUILT * pm.lm.num_vars * 3 + 0.02:
        return None
    jobs = pm.lm.objectives[phases].terms
    # the row is relaxed by 0.5 (objective 1 is an integer): every plan at objective 1 at
    # least ``objective1`` satisfies it, whatever HiGHS's tolerances
    value = lp_max(pm.lm, jobs, deadline - time.perf_counter(),
                   at_least=(objective1_terms(pm), objective1 - 0.5))
    if value is None:
        return None
    return integer_bound(value)
