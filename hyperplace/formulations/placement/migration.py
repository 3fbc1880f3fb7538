"""Migration inside the placement formulation: which running jobs a round may move
(checkpoint, then restart elsewhere), ``solve --running-moveable`` and ``defrag --for``.

A running job may move when its manifest is known (``spec.runningJobs[].job``: what its
units, GPU types and hop limits are). Each such job is a *mover*: a
:class:`~hyperplace.formulations.placement.preemption.Victim` whose ``stop`` boolean means
"migrated", plus a *copy*: its manifest as one more job of the round
(:attr:`~hyperplace.formulations.placement.views.JobView.migrant`). The model ties them:
``run[copy] = stop[mover]`` (a migrated job must run again, whole; the gang rule of its
copy is the gang rule of any job). Its old GPUs are then usable by every job of the round,
its own copy included (a job may move within a node or a leaf).

Objectives. A migrated job keeps running, so objective 1 (priority-weighted admitted GPUs
of pending jobs) neither gains nor loses by it: a migration pays only when the GPUs it frees
admit pending demand. Right after objective 1 come the work lost (GPUs x
``checkpointAgeS`` of each migrated job), then the number of migrations; the lower
objectives (fair share, jobs, communication, fragmentation, policy) choose only among
plans that lose the same work. So a migration is proposed only when it admits more, and the
set proposed is the one losing least work, then the fewest, and ``optimal`` means that is
proven. A migrated job's GPUs count against its queue's quota wherever it runs.

Not together with preemption in one round (a stopped job is then either gone or moved, and
who may use its GPUs depends on which: a pair of decisions this formulation does not make).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.models.sharing import running_gpus

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
        (:meth:`PlacementModelBuilder._free_domain
        <hyperplace.formulations.placement.model.PlacementModelBuilder._free_domain>`).
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
    move (a whole move counts all of its GPUs, a repair in part its failed units').
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
            raise ValueError(f"--max-moves: must be >= 0, got {self.max_moves}")
        if self.max_movers is not None and self.max_movers < 0:
            raise ValueError(f"max_movers: must be >= 0, got {self.max_movers}")
        if self.why not in REASONS:
            raise ValueError(f"unknown migration reason {self.why!r}; use one of {', '.join(REASONS)}")


@dataclass(frozen=True)
class Mover:
    """A running job the round may migrate: its GPUs, its lost work if moved, its manifest's
    name (the copy's), its queue and priority."""

    name: str
    priority: int
    queue: str
    gpus: tuple[tuple[str, int], ...]
    lost: float


def find_movers(instance: Instance, policy: MigrationPolicy) -> list[Mover]:
    """Running jobs that hold GPUs and have a manifest, allowed by ``policy``, least lost
    work first (a job whose manifest asks for more GPUs than it holds after a failure is a
    repair, not a migration: it moves too, and its lost work is its manifest's GPUs x its
    checkpoint age)."""
    if policy.max_moves == 0:
        return []
    held = running_gpus(instance)
    info = instance.running_job_info
    out = []
    for name, manifest in instance.running_manifests.items():
        if policy.only is not None and name not in policy.only:
            continue
        if name not in held and not policy.repairing:  # a repair may find it holding none
            continue
        r = info[name]
        out.append(Mover(name=name, priority=r.priority, queue=r.queue,
                         gpus=tuple(held.get(name, ())),
                         lost=manifest.total_gpus * r.checkpoint_age_s))
    return sorted(out, key=lambda m: (m.lost, len(m.gpus), m.name))
