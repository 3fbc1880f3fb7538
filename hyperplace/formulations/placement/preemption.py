"""Preemption inside the placement formulation: which running jobs may be stopped, and for
whom (``solve --preemption``).

Who may stop whom is :class:`hyperplace.models.preemption_policy.StopRule` (the policies
``never``, ``lower-priority``, ``reclaim-within-cohort`` as Kueue names them, with the
source they follow); the checker asks the same rule. Under ``reclaim-within-cohort`` a
reclaim restores the nominal quota and no more: while a victim that some jobs may stop only
by reclaiming is stopped, their queues end the round within their nominal quota (the
model's ``reclaim`` rows, :meth:`PlacementModelBuilder._reclaim_within_nominal
<hyperplace.formulations.placement.model.PlacementModelBuilder._reclaim_within_nominal>`,
which say when they are stricter than the rule).

A running job that at least one pending job may use is a
:class:`~hyperplace.formulations.placement.stoppable.PreemptionCandidate`: the
model gives it a keep/stop boolean (:meth:`PlacementModelBuilder._preemption
<hyperplace.formulations.placement.model.PlacementModelBuilder._preemption>`). Its GPUs
become *reachable* on its nodes (:attr:`NodeView.stoppable
<hyperplace.formulations.placement.views.NodeView.stoppable>`): usable by the jobs allowed
to stop it, and only when it is stopped. Gang is automatic: one boolean frees all its GPUs.

Who may use whose GPUs is not nested (each queue stops only its own lower-priority jobs;
under ``reclaim-within-cohort`` a reclaiming job need not outrank the borrower, and a job
that outranks a victim of another queue may stop it only by reclaiming), so on a node the
model bounds
every *union of signatures* (:func:`signature_unions`), which is Hall's condition for
jobs that each may use the free GPUs plus the GPUs of the stopped victims of their
signature: the rows are exact, and the mapping back finds the matching by a flow.

**Objective 1 with preemption.** Every running job counts as admitted demand in a level
of its own just above its priority (priority + 0.5, :func:`running_levels`): above every
pending job of its priority or lower, below every pending job that outranks it. Stopping
one loses its GPUs there, so it pays only when the GPUs (or quota) it frees admit demand
of a job that outranks it (one of its queue, allowed to stop it; the model's ``stopper``
rows ask for such a job admitted), and a chain (stop a low job so that a high one moves onto its GPUs and
another low job takes the high one's place) never does. Under
``reclaim-within-cohort`` a running job of a queue that uses more than its nominal quota
within a cohort (it runs on borrowed GPUs) counts in a level below every other one, so
that a queue reclaiming its guarantee gains by stopping it whatever the priorities; the
model lets only the jobs allowed to stop it use its GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyperplace.formulations.linear import Objective
from hyperplace.formulations.placement.extensions import RoundExtension
from hyperplace.models.instance import Instance
from hyperplace.models.preemption_policy import (  # re-exported: the rule's one home
    POLICIES,
    RECLAIM,
    StopRule,
    borrowing_queues,
    check_policy,
    nominal_total,
    queue_use,
    running_levels,
)
from hyperplace.formulations.placement.stoppable import PreemptionCandidate
from hyperplace.models.sharing import running_gpus

if TYPE_CHECKING:
    from hyperplace.formulations.mapping import Assignment
    from hyperplace.formulations.placement.model import PlacementModelBuilder
    from hyperplace.formulations.placement.problem import PlacementProblem

#: Most distinct unions of signatures bounded on one node; a node with more keeps its
#: victims running (never reached on the shapes we know: a node hosts few running jobs).
MAX_UNIONS_PER_NODE = 64


@dataclass(frozen=True)
class PendingRef:
    """What the victim rule needs of a pending job."""

    index: int
    priority: int
    queue: str
    gpus: int


def preemption_candidates(instance: Instance, jobs: Sequence[PendingRef], policy: str
                          ) -> list[PreemptionCandidate]:
    """Running jobs some pending job may stop under ``policy`` (none for ``never``),
    least lost work first: a job may stop one when :meth:`StopRule.why
    <hyperplace.models.preemption_policy.StopRule.why>` says so, a reclaim only when the
    job's queue could stay within its nominal quota with it (:meth:`StopRule.may_reclaim
    <hyperplace.models.preemption_policy.StopRule.may_reclaim>`).

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
    rule = StopRule.of(instance, policy)
    may_reclaim = {j.index: rule.may_reclaim(j.queue, j.gpus) for j in jobs}
    out: list[PreemptionCandidate] = []
    for name in sorted(held, key=lambda n: (len(held[n]) * info[n].checkpoint_age_s, n)):
        r = info[name]
        v = PreemptionCandidate(index=len(out), name=name, priority=r.priority, queue=r.queue,
                   gpus=tuple(held[name]), lost=len(held[name]) * r.checkpoint_age_s,
                   level=levels[name][0])
        for j in jobs:
            why = rule.why(j.queue, j.priority, r.queue, r.priority)
            if why == RECLAIM and not may_reclaim[j.index]:
                continue
            if why is not None:
                v.allowed.add(j.index)
            if why == RECLAIM:
                v.reclaim_only.add(j.index)
        if v.allowed:
            out.append(v)
    return out


class Preemption(RoundExtension):
    """The round may preempt running jobs (``solve --preemption``; see the module
    docstring): its candidates' share of objective 1, the stopper rows, its objectives
    after objective 1, the plan's terms and which stops the decoded plan keeps."""

    name = "preemption"

    def __init__(self, p: PlacementProblem):
        self.p = p

    @classmethod
    def of(cls, p: PlacementProblem) -> Preemption | None:
        """The extension when the round's policy may stop running jobs."""
        return cls(p) if p.preempting else None

    def stop_rows(self, b: PlacementModelBuilder) -> None:
        """Objective 1 counts every running job as admitted demand of its own priority
        level, so stopping candidate ``v`` costs its GPUs there: ``-GPUs(v) x stop[v]`` at
        ``v``'s level; and each stop counts once in ``preempted_jobs``."""
        for victim in self.p.candidates:
            s = b.stop[victim.index]
            b.obj_demand_by_level[victim.level].append((s, -len(victim.gpus)))
            b.obj_victims.append((s, 1))

    def after_stop_rows(self, b: PlacementModelBuilder) -> None:
        """A running job is stopped only in a plan that admits a job allowed to stop it:
        ``stop[v] <= sum of run`` over the bundles of ``allowed``. The capacity rows
        already keep its GPUs for such jobs; without this row a stop could still free
        quota (its queue's, its cohort's) for a job of another queue that may not stop it
        (``lower-priority`` stays within a queue; the checker's ``preempt-stopper``)."""
        leader = {j: lead for lead, members in b.bundles.items() for j in members}
        for victim in self.p.candidates:
            runs = sorted({b.run[leader[j]] for j in victim.allowed
                           if leader.get(j) in b.run})
            b.lm.add([(b.stop[victim.index], 1)] + [(r, -1) for r in runs], hi=0,
                     name=f"stopper[{victim.name}]")

    def objectives(self, b: PlacementModelBuilder) -> list[Objective]:
        """After objective 1: lost work (GPU-seconds since each victim's checkpoint), then
        the number of victims."""
        if not b.stop:
            return []
        return [Objective(b.obj_lost, "preempted_lost_gpu_seconds", "min"),
                Objective(b.obj_victims, "preempted_jobs", "min")]

    def settle_stopped(self, a: Assignment, stopped: set[int]) -> set[int] | None:
        """The stops the assignment needs (:func:`~hyperplace.formulations.mapping.
        needed_victims`); every other victim keeps running."""
        from hyperplace.formulations.mapping import needed_victims

        return needed_victims(self.p, a, stopped)

    def terms(self, a: Assignment) -> dict[str, float]:
        """The exact lost work (the model counts whole GPU-seconds) and the stops."""
        p = self.p
        return {"preempted_lost_gpu_seconds": float(sum(p.stoppable[v].lost for v in a.stopped)),
                "preempted_jobs": float(len(a.stopped))}


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


__all__ = ["MAX_UNIONS_PER_NODE", "POLICIES", "PendingRef", "Preemption", "borrowing_queues",
           "check_policy", "nominal_total", "preemption_candidates", "queue_use",
           "running_levels",
           "signature_unions"]
