"""Preemption: stop running jobs so that a higher-priority job, or a queue reclaiming its
guaranteed share, is placed whole (``solve --preemption``).

The decisions are variables of the one placement model: every running job some pending job
may stop under the policy gets a keep/stop boolean, and objective 1 counts the running jobs
kept in their own priority levels, then lost work and the number of victims are minimised
(:mod:`hyperplace.formulations.placement.preemption`, :meth:`PlacementModelBuilder._stops
<hyperplace.formulations.placement.model.PlacementModelBuilder._stops>`). So the victims
are exact and the status ``optimal`` is proven like any other round's; a victim set with which
the preemptor's gang would still not fit is never chosen (the gang is all or nothing in the
same model). Greedy's heuristic (:mod:`hyperplace.solvers.heuristics.greedy_preempt`) is the budget's
floor and the exact backends' hint.

This module keeps the entry point; the victim-set enumeration that greedy's heuristic and
defragmentation share is :mod:`hyperplace.solvers.heuristics.stop_sets`.
"""

from __future__ import annotations

from hyperplace.formulations.placement.preemption import POLICIES, check_policy
from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.solvers.driver import solve_placement

__all__ = ["POLICIES", "solve_with_preemption"]


def solve_with_preemption(instance: Instance, *, preemption: str = "never",
                          solver: str = "auto", budget_s: float = 10.0,
                          **kwargs) -> PlacementPlan:
    """Solve a round in which running jobs may be preempted under ``preemption``.

    Parameters
    ----------
    instance : Instance
        The round; running jobs' priority, queue and ``checkpointAgeS`` come from
        ``spec.runningJobs``.
    preemption : str
        ``never``, ``lower-priority`` or ``reclaim-within-cohort``.
    solver, budget_s, kwargs
        As for :func:`hyperplace.solvers.driver.solve_placement`.

    Returns
    -------
    PlacementPlan
        With ``preemptions[]`` (job, why, preemptor, GPUs, lost GPU-seconds) and
        ``preemptionPolicy``; :func:`hyperplace.check.check` verifies it against the
        instance as it was.
    """
    check_policy(preemption)
    return solve_placement(instance, solver=solver, budget_s=budget_s, preemption=preemption,
                           **kwargs)
