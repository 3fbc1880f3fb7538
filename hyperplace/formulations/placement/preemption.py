"""Preemption inside the placement formulation: which running jobs may be stopped, and for
whom (``solve --preemption``).

Policies, as Kueue names them (``ClusterQueue.spec.preemption``):

``never``
    Running jobs are never stopped (the plain round).
``lower-priority``
    A pending job may use the GPUs of running jobs of strictly lower priority
    (``spec.runningJobs[].priority``).
``reclaim-within-cohort``
    As ``lower-priority``, and a job whose queue stays within its nominal (guaranteed)
    quota when it is admitted may also use the GPUs of running jobs of any priority in
    other queues of its cohort that use more than their own nominal quota (they run on
    borrowed GPUs). Reclaim restores the nominal quota and no more: while such a victim is
    stopped, the reclaiming queues end the round within their nominal quota (the model's
    ``reclaim`` rows, :meth:`PlacementModelBuilder._reclaim_within_nominal
    <hyperplace.formulations.placement.model.PlacementModelBuilder._reclaim_within_nominal>`;
    the per-job test below only says who may reclaim at all).

A running job that at least one pending job may use is a :class:`Victim` candidate: the
model gives it a keep/stop boolean (:meth:`PlacementModelBuilder._preemption
<hyperplace.formulations.placement.model.PlacementModelBuilder._preemption>`). Its GPUs
become *reachable* on its nodes (:attr:`NodeView.stoppable
<hyperplace.formulations.placement.views.NodeView.stoppable>`): usable by the jobs allowed
to stop it, and only when it is stopped. Gang is automatic: one boolean frees all its GPUs.

Who may use whose GPUs is not nested under ``reclaim-within-cohort`` (a reclaiming job may
not outrank the borrower, an outranking job may not reclaim), so on a node the model bounds
every *union of signatures* (:func:`signature_unions`), which is Hall's condition for
jobs that each may use the free GPUs plus the GPUs of the stopped victims of their
signature: the rows are exact, and the mapping back finds the matching by a flow.

**Objective 1 with preemption.** Every running job counts as admitted demand in a level
of its own just above its priority (priority + 0.5, :func:`running_levels`): above every
pending job of its priority or lower, below every pending job that outranks it. Stopping
one loses its GPUs there, so it pays only when the GPUs it frees admit demand of a job
that outranks it, and a chain (stop a low job so that a high one moves onto its GPUs and
another low job takes the high one's place) never does. Under
``reclaim-within-cohort`` a running job of a queue that uses more than its nominal quota
within a cohort (it runs on borrowed GPUs) counts in a level below every other one, so
that a queue reclaiming its guarantee gains by stopping it whatever the priorities; the
model lets only the jobs allowed to stop it use its GPUs.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from hyperplace.models.instance import Instance
from hyperplace.models.sharing import running_gpus

POLICIES = ("never", "lower-priority", "reclaim-within-cohort")
#: Most distinct unions of signatures bounded on one node; a node with more keeps its
#: victims running (never reached on the shapes we know: a node hosts few running jobs).
MAX_UNIONS_PER_NODE = 64


def check_policy(policy: str) -> None:
    """Raise ValueError for a policy that is not one of :data:`POLICIES`."""
    if policy not in POLICIES:
        raise ValueError(f"unknown preemption policy {policy!r}; use one of {', '.join(POLICIES)}")


@dataclass
class Victim:
    """A running job that some pending jobs may stop (a candidate, not a decision).

    ``allowed``: pending job indices that may use its GPUs once it is stopped;
    ``reclaim_only``: those of them that do not outrank it (they reclaim within the cohort).
    ``lost`` is its work since the last checkpoint in GPU-seconds (GPUs x
    ``checkpointAgeS``), ``lost_units`` the same rounded to whole GPU-seconds (the model's
    integer objective).
    """

    index: int
    name: str
    priority: int
    queue: str
    gpus: tuple[tuple[str, int], ...]
    lost: float
    level: float = 0.0  # where objective 1 counts it (see running_levels)
    allowed: set[int] = field(default_factory=set)
    reclaim_only: set[int] = field(default_factory=set)

    @property
    def lost_units(self) -> int:
        """Lost work in whole GPU-seconds (the model's coefficient)."""
        return int(round(self.lost))

    def why(self, job: int) -> str:
        """``lower-priority`` or ``reclaim-within-cohort``: why ``job`` may stop it."""
        return "reclaim-within-cohort" if job in self.reclaim_only else "lower-priority"


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
    if policy == "reclaim-within-cohort":
        borrowed = borrowing_queues(instance)
        floor = min([*(info[n].priority for n in held), *pending_priorities], default=0) - 1
        levels = {name: floor if info[name].queue in borrowed else lvl
                  for name, lvl in levels.items()}
    return {name: (levels[name], len(held[name])) for name in held}


@dataclass(frozen=True)
class PendingRef:
    """What the victim rule needs of a pending job."""

    index: int
    priority: int
    queue: str
    gpus: int


def find_victims(instance: Instance, jobs: Sequence[PendingRef], policy: str) -> list[Victim]:
    """Running jobs some pending job may stop under ``policy`` (none for ``never``),
    least lost work first.

    Parameters
    ----------
    instance : Instance
        The round (running jobs from ``node.allocated`` and ``spec.runningJobs``).
    jobs : sequence of PendingRef
        The pending jobs that could run at all.
    policy : str
        One of :data:`POLICIES`.
    """
    check_policy(policy)
    if policy == "never" or not jobs:
        return []
    info = instance.running_job_info
    held = running_gpus(instance)
    levels = running_levels(instance, policy, (j.priority for j in jobs))
    qs = instance.queue_set
    reclaimers: dict[int, set[str]] = {}  # job -> queues whose borrowers it may reclaim from
    if policy == "reclaim-within-cohort" and qs is not None:
        use = queue_use(instance)
        borrowing = borrowing_queues(instance)
        for j in jobs:
            mine = qs.queues.get(j.queue)
            if mine is None or mine.cohort is None:
                continue
            if use.get(j.queue, 0) + j.gpus > nominal_total(instance, j.queue):
                continue
            peers = {q.name for q in qs.cohort_members(mine.cohort)} - {j.queue}
            reclaimers[j.index] = peers & borrowing
    out: list[Victim] = []
    for name in sorted(held, key=lambda n: (len(held[n]) * info[n].checkpoint_age_s, n)):
        r = info[name]
        v = Victim(index=len(out), name=name, priority=r.priority, queue=r.queue,
                   gpus=tuple(held[name]), lost=len(held[name]) * r.checkpoint_age_s,
                   level=levels[name][0])
        for j in jobs:
            if j.priority > r.priority:
                v.allowed.add(j.index)
            elif r.queue in reclaimers.get(j.index, ()):
                v.allowed.add(j.index)
                v.reclaim_only.add(j.index)
        if v.allowed:
            out.append(v)
    return out


def signature_unions(signatures: Iterable[frozenset[int]],
                     limit: int = MAX_UNIONS_PER_NODE) -> list[frozenset[int]] | None:
    """Every union of the given signatures (sets of victims), each once; None past ``limit``.

    For jobs on one node where a job of signature ``S`` may use the free GPUs and those of
    the stopped victims in ``S``, the GPUs used by the jobs whose signature lies within a
    union ``U`` can be at most the free GPUs plus those of the stopped victims of ``U``;
    over every union that is also sufficient (Hall's theorem).
    """
    found: set[frozenset[int]] = set()
    for s in set(signatures):
        new = {s} | {s | u for u in found}
        found |= new
        if len(found) > limit:
            return None
    return sorted(found, key=lambda u: (len(u), sorted(u)))
