"""Who may stop whom: the one home of the preemption policies (``solve --preemption``).

The solvers (:func:`hyperplace.formulations.placement.preemption.preemption_candidates`, greedy,
the explanations) and the independent checker (:mod:`hyperplace.check.preemption`, the
priority-inversion check) all ask :class:`StopRule` which running job a pending job may
stop, and why. The policies, as Kueue names them (``ClusterQueue.spec.preemption``), each a
combination of Kueue's three fields:

``never``
    Running jobs are never stopped (``withinClusterQueue: Never``,
    ``reclaimWithinCohort: Never``).
``lower-priority``
    ``withinClusterQueue: LowerPriority``, ``reclaimWithinCohort: Never``: a pending job may
    stop running jobs **of its own queue** with strictly lower priority. Without declared
    queues every job is in the one ``default`` queue, so any lower-priority running job.
``reclaim-within-cohort``
    ``withinClusterQueue: LowerPriority``, ``reclaimWithinCohort: Any``,
    ``borrowWithinCohort: Never``: as ``lower-priority``, and a pending job may also stop
    running jobs of any priority in **other** queues of its cohort (same root cohort) that
    use more than their nominal quota (they run on borrowed GPUs), provided its own queue
    then stays within its nominal quota (reclaim restores a guarantee, it does not borrow:
    the model's ``reclaim`` rows, greedy's quota check and the checker's
    ``preempt-reclaim`` rule; :meth:`StopRule.may_reclaim` is the per-job pre-test), and
    the queue reclaimed from keeps its own guarantee (:func:`reclaim_keeps_guarantee`).
    Either way a stop needs an admitted job allowed to make it (the model's ``stopper``
    rows, the checker's ``preempt-stopper``).

From the source (kubernetes-sigs/kueue at commit ff69552, August 2026):

* ``pkg/scheduler/preemption/classical/hierarchical_preemption.go``
  ``classifyPreemptionVariant`` (L81-113): a candidate of the preemptor's own ClusterQueue is
  judged by ``withinClusterQueue`` (L87-88), one of another ClusterQueue by
  ``reclaimWithinCohort`` (L89-90); with ``borrowWithinCohort`` unset or ``Never`` a
  cross-queue candidate is ``ReclaimWithoutBorrowing`` (L103-105): the preemptor must then
  fit without borrowing (``preemption.go`` ``workloadFits`` L669-676, tried with
  ``allowBorrowing=false``).
* ``collectCandidatesInSubtree`` (L179-206) takes cross-queue candidates only from
  ClusterQueues that are not within their nominal quota (L202), anywhere under the root
  cohort (``collectCandidatesForHierarchicalReclaim`` L149-175 walks to the root);
  ``collectSameQueueCandidates`` (L125-130) takes the own queue's.
* ``pkg/scheduler/preemption/common/preemption_policy.go`` ``SatisfiesPreemptionPolicy``
  (L27-42): ``LowerPriority`` is strictly lower priority, ``Any`` is any priority.
* ``apis/kueue/v1beta2/clusterqueue_types.go`` ``ClusterQueuePreemption`` (L517-561):
  ``reclaimWithinCohort`` preempts in the cohort only workloads of queues "using more than
  their nominal quota", ``withinClusterQueue`` only workloads "in the ClusterQueue".

* ``classical/candidate_generator.go`` ``candidateIsValid`` (L136-157): a cross-queue
  candidate is skipped once its ClusterQueue is back within its nominal quota, so reclaim
  never takes a queue below its guarantee except by the last workload it stops:
  :func:`reclaim_keeps_guarantee`.

Simplifications: a queue is *borrowing* when its running jobs hold more GPUs than its
nominal quota summed over its quota keys, and :func:`reclaim_keeps_guarantee` counts GPUs
over all keys too (Kueue looks per flavor-resource needing preemption, ``cqIsBorrowing``,
``preemption.go`` L654-664).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hyperplace.models.instance import Instance
from hyperplace.models.sharing import running_gpus

POLICIES = ("never", "lower-priority", "reclaim-within-cohort")
LOWER_PRIORITY = "lower-priority"
RECLAIM = "reclaim-within-cohort"


def check_policy(policy: str) -> None:
    """Raise ValueError for a policy that is not one of :data:`POLICIES`."""
    if policy not in POLICIES:
        raise ValueError(f"unknown preemption policy {policy!r}; use one of {', '.join(POLICIES)}")


def nominal_total(instance: Instance, queue: str) -> float:
    """A queue's nominal quota over all its keys (infinite for an undeclared queue)."""
    qs = instance.queue_set
    if qs is None or queue not in qs.queues:
        return math.inf
    return sum(q.nominal for q in qs.queues[queue].quotas.values())


def queue_use(instance: Instance) -> dict[str, int]:
    """GPUs held by running jobs per queue."""
    info = instance.running_job_info
    use: dict[str, int] = {}
    for name, gpus in running_gpus(instance).items():
        q = info[name].queue if name in info else "default"
        use[q] = use.get(q, 0) + len(gpus)
    return use


def borrowing_queues(instance: Instance) -> set[str]:
    """Declared queues in a cohort whose running jobs hold more than their nominal quota."""
    qs = instance.queue_set
    if qs is None:
        return set()
    use = queue_use(instance)
    return {q.name for q in qs.queues.values()
            if q.cohort is not None and use.get(q.name, 0) > nominal_total(instance, q.name)}


def running_levels(instance: Instance, policy: str, pending_priorities: Iterable[int]
                   ) -> dict[str, tuple[float, int]]:
    """Running job -> (the level objective 1 counts it in, GPUs it holds).

    The level is the job's priority + 0.5; under ``reclaim-within-cohort`` a job of a
    :func:`borrowing_queues` queue counts one below the lowest priority of the round
    (pending and running jobs alike). Empty for ``never``.
    """
    if policy == "never":
        return {}
    info = instance.running_job_info
    held = running_gpus(instance)
    levels: dict[str, float] = {name: info[name].priority + 0.5 for name in held}
    if policy == RECLAIM:
        borrowed = borrowing_queues(instance)
        floor = min([*(info[n].priority for n in held), *pending_priorities], default=0) - 1
        levels = {name: floor if info[name].queue in borrowed else lvl
                  for name, lvl in levels.items()}
    return {name: (levels[name], len(held[name])) for name in held}


def reclaim_keeps_guarantee(running: float, stopped: Sequence[int], admitted: float,
                            nominal: float) -> bool:
    """Whether reclaim left a borrowing queue its guarantee: Kueue takes a queue's workloads
    only while it is above its nominal quota, so of the jobs stopped in it all but the last
    (the largest, in the most lenient order) leave it above nominal.

    Parameters
    ----------
    running : float
        GPUs its running jobs held at the start of the round.
    stopped : sequence of int
        GPUs of each of its running jobs stopped in the round (for whatever reason).
    admitted : float
        GPUs of its jobs admitted in the round.
    nominal : float
        Its nominal quota (over all keys).

    Returns
    -------
    bool
        True when nothing is stopped, else ``running - sum(stopped) + admitted +
        max(stopped) > nominal``.
    """
    if not stopped:
        return True
    return running - sum(stopped) + admitted + max(stopped) > nominal + 1e-9


@dataclass(frozen=True)
class StopRule:
    """Which running job a pending job may stop under one policy, in one round.

    Build it with :meth:`of`; ``root`` maps each declared queue in a cohort to its root
    cohort, ``borrowing`` holds the queues whose running jobs use borrowed GPUs at the start
    of the round, ``use`` and ``nominal`` their GPUs held and nominal quota.
    """

    policy: str
    root: Mapping[str, str]
    borrowing: frozenset[str]
    use: Mapping[str, int]
    nominal: Mapping[str, float]

    @classmethod
    def of(cls, instance: Instance, policy: str) -> StopRule:
        """The rule for ``instance``'s round under ``policy`` (one of :data:`POLICIES`)."""
        check_policy(policy)
        qs = instance.queue_set
        root: dict[str, str] = {}
        nominal: dict[str, float] = {}
        if qs is not None:
            for q in qs.queues.values():
                nominal[q.name] = nominal_total(instance, q.name)
                if q.cohort is not None:
                    root[q.name] = qs.root_cohort(q.cohort)
        borrowing = frozenset(borrowing_queues(instance)) if policy == RECLAIM else frozenset()
        return cls(policy, root, borrowing, queue_use(instance), nominal)

    def why(self, job_queue: str, job_priority: int, victim_queue: str,
            victim_priority: int) -> str | None:
        """Why a pending job may stop a running one, or None when it may not.

        ``lower-priority``: the victim is in the job's own queue and has strictly lower
        priority. ``reclaim-within-cohort`` (that policy only): the victim's queue is
        another queue of the job's cohort that is borrowing; the job's queue must then end
        the round within its nominal quota, which this test does not see (see the module
        docstring).
        """
        if self.policy == "never":
            return None
        if job_queue == victim_queue:
            return LOWER_PRIORITY if job_priority > victim_priority else None
        if self.policy == RECLAIM and victim_queue in self.borrowing:
            mine = self.root.get(job_queue)
            if mine is not None and mine == self.root.get(victim_queue):
                return RECLAIM
        return None

    def may_reclaim(self, job_queue: str, gpus: int) -> bool:
        """Whether a job of ``gpus`` GPUs could reclaim at all: its queue, with the job
        admitted, holds no more than its nominal quota (summed over keys)."""
        return self.use.get(job_queue, 0) + gpus <= self.nominal.get(job_queue, math.inf)


__all__ = ["LOWER_PRIORITY", "POLICIES", "RECLAIM", "StopRule", "borrowing_queues",
           "check_policy", "nominal_total", "queue_use", "reclaim_keeps_guarantee",
           "running_levels"]
