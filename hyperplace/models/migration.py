"""Which running jobs a round may migrate (:class:`MigrationPolicy`) and a broken job's repair
in part (:class:`PartialRepair`): the request side of migration, defragmentation and repair.
How the placement model decides them: :mod:`hyperplace.formulations.placement.migration`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hyperplace.models.job import TrainingJob


#: Why a migration is proposed (``migrations[].why``).
REASONS = ("admit", "defrag", "repair")


@dataclass(frozen=True)
class PartialRepair:
    """A broken job's repair in part: its healthy units stay (``kept``: unit -> GPUs), the
    failed ones (``bad``, unit names in order) are placed as ``job`` (a manifest of as many
    replicas) on ``nodes`` only (those within the job's between-replica hop limit of every
    kept node)."""

    job: TrainingJob
    bad: tuple[str, ...]
    kept: Mapping[str, tuple[tuple[str, int], ...]]
    nodes: frozenset[str]


@dataclass(frozen=True)
class MigrationPolicy:
    """Which running jobs a round may migrate.

    Parameters
    ----------
    max_moves : int, optional
        At most this many migrations in the round (None: no limit).
    only : frozenset of str, optional
        Running jobs that may move (None: every running job with a manifest).
    why : str
        What the plan says of each migration (``admit``; ``defrag`` for ``defrag``).
    grow_free_domain : bool
        ``defrag`` without ``--for``: objective ``largest_free_domain_gpus`` (the largest
        free domain per GPU type, summed over types) comes first, before the work lost
        (:meth:`FreeDomainGrowth.rows
        <hyperplace.formulations.placement.free_domain.FreeDomainGrowth.rows>`).
    max_movers : int, optional
        At most this many running jobs are movers, those losing least work (None: all); a
        round that leaves some out is a restriction
        (:meth:`~hyperplace.formulations.placement.problem.PlacementProblem.restrictions`).
        The driver sets it from the budget when it is None
        (:attr:`~hyperplace.solvers.params.BudgetParams.movers_per_second`).
    partial : mapping of str to PartialRepair
        With ``why="repair"``: movers that may instead be repaired in part.

    With ``why="repair"`` the movers are the broken jobs (``only``): objective 1 counts the
    jobs repaired (priority-weighted GPUs of their manifests, at their running priority),
    whole (the copy) or in part (``partial``, at most one of the two), then the GPUs they
    move (a whole move counts all of its GPUs, a repair in part its failed units'). Such a
    round takes no pending jobs: one with them is refused (``ValueError`` naming
    ``migration.why``, :meth:`FailureRepair.add_stoppable
    <hyperplace.formulations.placement.repair.FailureRepair.add_stoppable>`).
    """

    max_moves: int | None = None
    only: frozenset[str] | None = None
    why: str = "admit"
    grow_free_domain: bool = False
    max_movers: int | None = None
    partial: Mapping[str, PartialRepair] = field(default_factory=dict)

    @property
    def repairing(self) -> bool:
        """The movers are broken jobs to repair."""
        return self.why == "repair"

    def __post_init__(self) -> None:
        if self.max_moves is not None and self.max_moves < 0:
            raise ValueError(f"max_moves: must be >= 0, got {self.max_moves}")
        if self.max_movers is not None and self.max_movers < 0:
            raise ValueError(f"max_movers: must be >= 0, got {self.max_movers}")
        if self.why not in REASONS:
            raise ValueError(f"unknown migration reason {self.why!r}; use one of {', '.join(REASONS)}")
