"""The running jobs a round may stop, one type per role.

A round's stoppable running jobs (:attr:`PlacementProblem.stoppable
<hyperplace.formulations.placement.problem.PlacementProblem.stoppable>`) each get one
keep/stop boolean in the model (``stop[index]``; gang: all their GPUs at once), and their
GPUs become reachable on their nodes (:attr:`NodeView.stoppable
<hyperplace.formulations.placement.views.NodeView.stoppable>`) for the jobs in ``allowed``.
What a stop means depends on the role, and a round has one role only (preemption and
migration are not combined in one round; every mover of a repair round is a broken job):

* :class:`PreemptionCandidate` (``solve --preemption``, :mod:`.preemption`): a stop ends the
  job; only the jobs the stop rule lets stop it may use its GPUs, some of them only by
  reclaiming within the cohort (``reclaim_only``).
* :class:`Mover` (migration, :mod:`.migration`): a stop is a migration; its manifest is one
  more job of the round, ``copy``, which runs exactly when it moves.
* :class:`BrokenJob` (failure repair, ``repair``): a running job a failure broke, repaired
  whole (its copy runs) or, when ``partial`` is given, its failed units alone near its
  kept GPUs; never both.

The families that stop jobs (migration, preemption) share :class:`StopsJobs`, a round
extension that owns what every stop means in the model: the stop's share of lost work, the
capacity rows of the nodes hosting stoppable jobs (Hall's condition,
:meth:`StopsJobs.shared_rows`) and the terms by which a stop frees its queue's quota
(:meth:`StopsJobs.quota_terms`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from hyperplace.formulations.placement.extensions import RoundExtension

if TYPE_CHECKING:
    from hyperplace.formulations.placement.model import PlacementModelBuilder
    from hyperplace.formulations.placement.problem import PlacementProblem

Terms = list[tuple[int, int]]

#: Most distinct unions of signatures bounded on one node; a node with more keeps its
#: stoppable jobs running (never reached on the shapes we know: a node hosts few running jobs).
MAX_UNIONS_PER_NODE = 64


@dataclass(kw_only=True)
class Stoppable:
    """A running job the round may stop (a candidate, not a decision).

    ``allowed``: job indices that may use its GPUs once it is stopped. ``lost`` is its work
    since the last checkpoint in GPU-seconds (GPUs x ``checkpointAgeS``), ``lost_units``
    the same rounded to whole GPU-seconds (the model's integer objective); ``level`` where
    objective 1 counts it (see :func:`~hyperplace.models.preemption_policy.running_levels`).
    """

    index: int
    name: str
    priority: int
    queue: str
    gpus: tuple[tuple[str, int], ...]
    lost: float
    level: float = 0.0
    allowed: set[int] = field(default_factory=set)

    @property
    def lost_units(self) -> int:
        """Lost work in whole GPU-seconds (the model's coefficient)."""
        return int(round(self.lost))


@dataclass(kw_only=True)
class PreemptionCandidate(Stoppable):
    """A running job some pending jobs may preempt; ``reclaim_only``: those of ``allowed``
    in other queues (they reclaim within the cohort)."""

    reclaim_only: set[int] = field(default_factory=set)

    def why(self, job: int) -> str:
        """``lower-priority`` or ``reclaim-within-cohort``: why ``job`` may stop it."""
        return "reclaim-within-cohort" if job in self.reclaim_only else "lower-priority"


@dataclass(kw_only=True)
class Mover(Stoppable):
    """A running job the round may migrate: ``copy`` is the job index of its manifest as a
    job of the round, which runs exactly when it is moved."""

    copy: int


@dataclass(kw_only=True)
class BrokenJob(Mover):
    """A running job a failure broke, which the round repairs: moved whole (its copy) or,
    with ``partial`` (the job index of its failed units' job), repaired in part."""

    partial: int | None = None


class StopsJobs(RoundExtension):
    """The shared base of the families whose round may stop running jobs (migration: a
    stop is a move; preemption: a stop ends the job). A round has at most one
    (:attr:`PlacementProblem.stops_jobs
    <hyperplace.formulations.placement.problem.PlacementProblem.stops_jobs>`); the builder
    asks it for the rows every stop shares, right after the families' own
    :meth:`~RoundExtension.stop_rows`."""

    #: a stop ends the job, so its GPUs leave its queue for good (preemption); a mover's
    #: copy counts its GPUs again wherever it runs
    leaves_for_good: ClassVar[bool] = False
    p: PlacementProblem

    def shared_rows(self, b: PlacementModelBuilder) -> None:
        """What every stop shares, once the families' stop rows are in.

        * Lost work (GPU-seconds since each stopped job's checkpoint) in ``obj_lost``,
          unless a family's cost stands in place of the moves' cost (a repair loses the
          same work whichever way it goes).
        * On a node hosting stoppable jobs (a class of its own) each piece may use only
          GPUs that are free or held by a stopped job it may use (``Stoppable.allowed``):
          for every union ``U`` of the jobs' signatures (the stoppable jobs on the node each
          job may use), GPUs of the pieces whose signature lies in ``U`` <= free + GPUs of
          ``U``'s jobs x ``stop``. That is Hall's condition, exact (the mapping back finds
          the GPUs by a flow). Under ``lower-priority`` it is what makes freed GPUs serve
          only jobs of the preempted job's queue that outrank it (without it, a stop could
          admit more GPUs of the preempted job's own level, which objective 1 alone would
          reward). On a non-uniform node every GPU set is explicit: a set holding a stoppable job's GPU
          exists only for jobs that may use it, and each such GPU is used at most
          ``stop[v]`` times.
        """
        p = self.p
        if not any(ext.replaces_moves_cost for ext in p.extensions):
            for running in p.stoppable:
                b.obj_lost.append((b.stop[running.index], running.lost_units))
        job_of = {pv.var: p.classes[pv.uclass].job for pv in b.pieces}
        for nci, terms in b.cap_terms.items():
            n = p.node_classes[nci].rep
            if not n.stoppable:
                continue
            held: dict[int, int] = defaultdict(int)  # stoppable job -> its GPUs on this node
            for v in n.stoppable.values():
                held[v] += 1
            by_sig: dict[frozenset[int], Terms] = defaultdict(list)
            for var, size in terms:
                j = job_of[var]
                by_sig[frozenset(v for v in held if j in p.stoppable[v].allowed)].append((var, size))
            unions = signature_unions(by_sig)
            if unions is None:  # too many: nobody uses this node's stoppable GPUs
                unions = [frozenset()]
                by_sig = {frozenset(): [t for ts in by_sig.values() for t in ts]}
            for u in unions:
                row = [t for sig, ts in by_sig.items() if sig <= u for t in ts]
                row += [(b.stop[v], -held[v]) for v in sorted(u)]
                b.lm.add(row, hi=len(n.free), name=f"cap[nc{nci},{'+'.join(map(str, sorted(u)))}]")
        for (nci, g), vs in b.gpu_terms.items():
            n = p.node_classes[nci].rep
            if g in n.stoppable:
                b.lm.add([(v, 1) for v in vs] + [(b.stop[n.stoppable[g]], -1)], hi=0,
                         name=f"gpu[nc{nci},{g}]")

    def quota_terms(self, b: PlacementModelBuilder) -> dict[tuple[str, str], Terms]:
        """Per (queue, quota key): ``-stop[v]`` per GPU of each stoppable job (a stopped job
        no longer counts against its queue)."""
        p = self.p
        book = p.quotas
        terms: dict[tuple[str, str], Terms] = defaultdict(list)
        for running in p.stoppable:
            for node, _ in running.gpus:
                gpu_type = p.node_by_name[node].gpu_type.name
                for key in book.keys_for(running.queue, gpu_type):
                    terms[(running.queue, key)].append((b.stop[running.index], -1))
        return terms


def signature_unions(signatures: Iterable[frozenset[int]],
                     limit: int = MAX_UNIONS_PER_NODE) -> list[frozenset[int]] | None:
    """Every union of the given signatures (sets of stoppable jobs), each once; None past
    ``limit``.

    For jobs on one node where a job of signature ``S`` may use the free GPUs and those of
    the stopped jobs in ``S``, the GPUs used by the jobs whose signature lies within a
    union ``U`` can be at most the free GPUs plus those of the stopped jobs of ``U``; over
    every union that is also sufficient (Hall's theorem).
    """
    found: set[frozenset[int]] = set()
    for s in set(signatures):
        new = {s} | {s | u for u in found}
        found |= new
        if len(found) > limit:
            return None
    return sorted(found, key=lambda u: (len(u), sorted(u)))


__all__ = ["MAX_UNIONS_PER_NODE", "BrokenJob", "Mover", "PreemptionCandidate", "Stoppable",
           "StopsJobs", "signature_unions"]
