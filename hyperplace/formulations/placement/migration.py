"""Migration inside the placement formulation: which running jobs a round may move
(checkpoint, then restart elsewhere), ``solve --running-moveable`` and ``defrag --for``.

A running job may move when its manifest is known (``spec.runningJobs[].job``: what its
units, GPU types and hop limits are). Each such job is a *mover*: a
:class:`~hyperplace.formulations.placement.stoppable.Mover` whose ``stop`` boolean means
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
from hyperplace.models.migration import MigrationPolicy
from hyperplace.models.sharing import running_gpus

@dataclass(frozen=True)
class Movable:
    """A running job the migration policy lets the round move: its GPUs, its lost work if
    moved, its manifest's name (the copy's), its queue and priority (the round makes it a
    :class:`~hyperplace.formulations.placement.stoppable.Mover`, or a
    :class:`~hyperplace.formulations.placement.stoppable.BrokenJob` when it repairs)."""

    name: str
    priority: int
    queue: str
    gpus: tuple[tuple[str, int], ...]
    lost: float


def find_movers(instance: Instance, policy: MigrationPolicy) -> list[Movable]:
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
        out.append(Movable(name=name, priority=r.priority, queue=r.queue,
                         gpus=tuple(held.get(name, ())),
                         lost=manifest.total_gpus * r.checkpoint_age_s))
    return sorted(out, key=lambda m: (m.lost, len(m.gpus), m.name))
