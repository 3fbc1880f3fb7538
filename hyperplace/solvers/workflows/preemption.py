"""Preemption: stop running jobs so that a higher-priority job, or a queue reclaiming its
guaranteed share, is placed whole (``solve --preemption``).

The decisions are variables of the one placement model: every running job some pending job
may stop under the policy gets a keep/stop boolean, and objective 1 counts the running jobs
kept in their own priority levels, then lost work and the number of victims are minimised
(:mod:`hyperplace.formulations.placement.preemption`, :meth:`PlacementModelBuilder._preemption
<hyperplace.formulations.placement.model.PlacementModelBuilder._preemption>`). So the victims
are exact and the status ``optimal`` is proven like any other round's; a victim set with which
the preemptor's gang would still not fit is never chosen (the gang is all or nothing in the
same model). Greedy's heuristic (:mod:`hyperplace.solvers.heuristics.greedy_preempt`) is the budget's
floor and the exact backends' hint.

This module keeps the entry point; the victim-set enumeration that greedy's heuristic and
defragmentation share is :mod:`hyperplace.solvers.heuristics.victims`.
"""

from __future__ import annotations

from hyperplace.formulations.placement.preemption import POLICIES, check_policy
from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.models.plan import PlacementPlan
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.heuristics.victims import Candidate

__all__ = ["POLICIES", "solve_with_preemption"]


def _neighbourhoods(state: Instance, job: TrainingJob) -> list[list[str]] | None:
    """For a job whose replicas must lie within ``maxHopCount`` of each other: per node, the
    nodes within that many hops of it (itself included). None when it has no such limit."""
    dp = next((g for g in job.spec.resource_groups if g.type.value == "DataParallel"), None)
    hop = dp.inter_node_connectivity.max_hop_count if dp and dp.inter_node_connectivity else None
    if hop is None:
        return None
    out = []
    for c in state.clusters:
        net = c.network
        names = [n.name for n in c.nodes]
        for a in names:
            out.append([b for b in names if b == a or (net.hop_count(a, b) or hop + 1) <= hop])
    return out


def _could_fit(state: Instance, job: TrainingJob, combo: tuple[Candidate, ...],
               near: list[list[str]] | None = None) -> bool:
    """A cheap necessary condition before a solve: enough GPUs in total, and for node-sized
    units enough room for them node by node (within the replicas' hop limit of one node
    when there is one), once the set is released."""
    free = {n.name: n.free_count for c in state.clusters for n in c.nodes}
    for c in combo:
        for name, _ in c.gpus:
            free[name] += 1
    units = job.units()
    if sum(free.values()) < sum(u.gpus for u in units):
        return False
    largest = max((n.gpu_count for c in state.clusters for n in c.nodes), default=0)
    small = [u.gpus for u in units if u.gpus <= largest]
    if small:
        size = min(small)
        if sum(f // size for f in free.values()) < len(small):
            return False
        if near is not None and len(small) > 1 and not any(
                sum(free[b] // size for b in group) >= len(small) for group in near):
            return False
    return True


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
