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

from dataclasses import dataclass

from hyperplace.models.instance import Instance
from hyperplace.models.sharing import running_gpus

#: Why a migration is proposed (``migrations[].why``).
REASONS = ("admit", "defrag", "repair")


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
    """

    max_moves: int | None = None
    only: frozenset[str] | None = None
    why: str = "admit"
    grow_free_domain: bool = False
    max_movers: int | None = None

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
        if name not in held or (policy.only is not None and name not in policy.only):
            continue
        r = info[name]
        out.append(Mover(name=name, priority=r.priority, queue=r.queue, gpus=tuple(held[name]),
                         lost=manifest.total_gpus * r.checkpoint_age_s))
    return sorted(out, key=lambda m: (m.lost, len(m.gpus), m.name))
