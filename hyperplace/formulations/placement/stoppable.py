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
"""

from __future__ import annotations

from dataclasses import dataclass, field


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


__all__ = ["BrokenJob", "Mover", "PreemptionCandidate", "Stoppable"]
