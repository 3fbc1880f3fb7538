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

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hyperplace.formulations.linear import Objective
from hyperplace.formulations.placement.stoppable import Mover, StopsJobs
from hyperplace.formulations.placement.views import JobView
from hyperplace.models.instance import Instance
from hyperplace.models.migration import MigrationPolicy
from hyperplace.models.plan import Migration as MigrationEntry
from hyperplace.models.sharing import running_gpus

if TYPE_CHECKING:
    from hyperplace.formulations.placement.decoded import Assignment, PlacedUnit
    from hyperplace.formulations.placement.model import PlacementModelBuilder
    from hyperplace.formulations.placement.problem import PlacementProblem

Terms = list[tuple[int, int]]


class Migration(StopsJobs):
    """The round may migrate running jobs (see the module docstring): the movers' rows,
    the moves' cost, the plan's migration terms and its reasons; greedy's step is
    :mod:`hyperplace.solvers.heuristics.greedy_migrate` (registered in
    :mod:`hyperplace.solvers.heuristics.families`)."""

    name = "migration"
    objective_names = ("migrated_lost_gpu_seconds", "migrated_jobs")

    def __init__(self, p: PlacementProblem):
        self.p = p

    @classmethod
    def of(cls, p: PlacementProblem) -> Migration | None:
        """The extension when the round has a migration policy (defrag and repair too)."""
        return cls(p) if p.migration is not None else None

    @classmethod
    def add_stoppable(cls, p: PlacementProblem) -> None:
        """The round's movers (:func:`add_movers`), unless its movers are broken jobs
        (failure repair adds those, :meth:`FailureRepair.add_stoppable
        <hyperplace.formulations.placement.repair.FailureRepair.add_stoppable>`)."""
        if p.migration is not None and not p.migration.repairing:
            add_movers(p, p.migration, _mover)

    def restrictions(self) -> list[str]:
        """The movers the budget's mover limit left out (:func:`add_movers`), unless another
        family speaks for the round's movers (:attr:`RoundExtension.explains_movers`)."""
        p = self.p
        if not p.movers_left_out or _explained_elsewhere(p):
            return []
        return [f"only the {len(p.stoppable)} running jobs losing least work may move "
                f"({p.movers_left_out} more with manifests stay where they are: the budget's "
                "mover limit)"]

    def stop_rows(self, b: PlacementModelBuilder) -> None:
        """A migrated job runs again, whole: ``run[copy] = stop[mover]`` (the copy's gang,
        unit, hop and quota rows are any job's); at most ``max_moves`` migrations. Objective
        1 does not count movers (a migrated job keeps running); a family refining movers
        (failure repair, :meth:`RoundExtension.mover_rows`) adds its own terms."""
        p = self.p
        moves: Terms = []
        for mover in p.movers:
            s = b.stop[mover.index]
            b.lm.eq([(b.run[mover.copy], 1), (s, -1)], 0, f"migrate[{mover.name}]")
            moves.append((s, 1))
            if not any(ext.mover_rows(b, mover, s) for ext in p.extensions):
                b.obj_moves.append((s, 1))
        limit = p.migration.max_moves if p.migration is not None else None
        if limit is not None and len(moves) > limit:
            b.lm.add(moves, hi=limit, name="max-moves")

    def round_objectives(self) -> tuple[str, ...]:
        """None when another family's cost stands in the moves' (:meth:`objectives`)."""
        if any(ext.replaces_moves_cost for ext in self.p.extensions):
            return ()
        return self.objective_names

    def objectives(self, b: PlacementModelBuilder) -> list[Objective]:
        """The moves' cost, right after objective 1 (and a defrag's free domain): lost work
        (GPUs x checkpoint age of each migrated job), then the number of migrations; none
        when another family's cost stands in its place (failure repair)."""
        if not b.stop or any(ext.replaces_moves_cost for ext in self.p.extensions):
            return []
        lost, moves = self.objective_names
        return [Objective(b.obj_lost, lost, "min"), Objective(b.obj_moves, moves, "min")]

    def settle_stopped(self, a: Assignment, stopped: set[int]) -> set[int] | None:
        """The migrations of ``stopped`` (movers) the assignment keeps, its units made to
        agree (:func:`settle_movers`: a migration no other job needs is undone, unless a
        family says it stands)."""
        return settle_movers(self.p, a, stopped, must_move=False)

    def plan_sections(self, a: Assignment) -> dict[str, object]:
        """The plan's ``migrations[]`` (:meth:`migrations`)."""
        return {"migrations": self.migrations(a)}

    def migrations(self, a: Assignment) -> list[MigrationEntry]:
        """One entry per migrated mover: why (the round's migration policy), for whom (the
        highest-priority pending job on its old GPUs, then the one using most of them), its
        GPUs, how many of its new GPUs it did not hold, its lost work, old and new nodes. A
        move in part is a migration too (a repair in part,
        :meth:`RoundExtension.moves_in_part
        <hyperplace.formulations.placement.extensions.RoundExtension.moves_in_part>`): its
        new place is its kept units and the new ones."""
        p = self.p
        in_part: dict[int, list[PlacedUnit]] = {}
        for ext in p.extensions:
            in_part.update(ext.moves_in_part(a))
        if not (a.stopped or in_part):
            return []
        assert p.migration is not None
        for_job = _MoverUsers(p, a).for_job
        out = []
        for v in sorted(a.stopped | set(in_part), key=lambda v: p.stoppable[v].name):
            mover = p.mover(v)
            placed = a.units[mover.copy] if v in a.stopped else in_part[v]
            new = {(node, g) for u in placed for node, gpus in u.pieces for g in gpus}
            out.append(MigrationEntry(job=mover.name, why=p.migration.why, for_job=for_job(v),
                                      gpus=p.jobs[mover.copy].gpus,
                                      gpus_moved=len(new - set(mover.gpus)),
                                      lost_gpu_seconds=mover.lost,
                                      from_nodes=sorted({n for n, _ in mover.gpus}),
                                      to_nodes=sorted({n for n, _ in new})))
        return out

    def terms(self, a: Assignment) -> dict[str, float]:
        """The exact lost work and the GPUs moved (the model counts migrations)."""
        moved = self.migrations(a)
        return {"migrated_lost_gpu_seconds": float(sum(m.lost_gpu_seconds for m in moved)),
                "migrated_jobs": float(len(moved)),
                "migrated_gpus": float(sum(m.gpus_moved for m in moved))}

    def reasons(self, a: Assignment, reasons: dict[int, list[str]], proven: bool) -> None:
        """For a pending job left out of a round that may migrate running jobs
        (:func:`held_back`): that moving them did not place it (proven: any plan placing it
        would leave out work of its priority or higher; else within the budget, and with the
        movers the round had). A free-domain round says the same (its objective 1 comes
        before the free domain, and its movers move for pending jobs first); a repair round
        has no pending jobs (:meth:`FailureRepair.add_stoppable
        <hyperplace.formulations.placement.repair.FailureRepair.add_stoppable>`)."""
        p = self.p
        if not p.stoppable or _explained_elsewhere(p):
            return
        limit = p.migration.max_moves if p.migration is not None else None
        within = f" (at most {limit} moves)" if limit is not None else ""
        movers = f"{len(p.stoppable)} running job(s) that may move{within}"
        if p.movers_left_out:
            movers += f"; {p.movers_left_out} more stayed out of the round's movers"
        text = (f"migration: no plan that moves some of the {movers} places it without "
                "leaving out work of its priority or higher" if proven else
                f"migration: moving some of the {movers} placed it in no plan found within "
                "the budget")
        for jv in held_back(p, a):
            reasons.setdefault(jv.index, []).append(text)


def held_back(p: PlacementProblem, a: Assignment) -> list[JobView]:
    """The pending jobs ``a`` leaves out that its movers could matter for: tried, not
    impossible, and some node could take each of their unit classes (a job no node can take
    is not held back by movers)."""
    anywhere: dict[object, bool] = {}  # job shape -> some node could take every unit class
    out = []
    for jv in p.pending:
        if jv.index in a.units or jv.impossible or jv.index in a.untried:
            continue
        shape = p.job_shape(jv)
        if shape not in anywhere:
            anywhere[shape] = all(any(p.node_eligible(jv, uc, nc.rep)
                                      for nc in p.node_classes) for uc in jv.classes)
        if anywhere[shape]:
            out.append(jv)
    return out


def _explained_elsewhere(p: PlacementProblem) -> bool:
    """Another family of the round speaks for its movers (failure repair)."""
    return any(ext.explains_movers for ext in p.extensions)


def settle_movers(p: PlacementProblem, a: Assignment, stopped: set[int], must_move: bool
                  ) -> set[int]:
    """The migrations of ``stopped`` (movers) assignment ``a`` keeps, its units made to
    agree (migration's and failure repair's decode settlement).

    A migration stands when its copy is placed and some other job uses one of the mover's
    old GPUs, always when ``must_move`` (a broken job must move), or when a family of the
    round says it does (:meth:`RoundExtension.move_stands
    <hyperplace.formulations.placement.extensions.RoundExtension.move_stands>`: ``defrag``'s
    free-domain growth, when the largest free domain would be smaller without it). One whose
    copy did not map to GPUs is undone with every job on the mover's old GPUs (dropped with
    a note); one that is not needed is undone by dropping the copy (the job stays where it
    was). Repeated until nothing changes: undoing one may leave another unneeded."""
    stopped = set(stopped)
    while True:
        users: dict[int, set[int]] = defaultdict(set)  # mover -> jobs on its old GPUs
        for j, units in a.units.items():
            for u in units:
                for node, gpus in u.pieces:
                    held = p.node_by_name[node].stoppable
                    users_here = {held[g] for g in gpus if g in held}
                    for v in users_here:
                        users[v].add(j)
        changed = False
        for v in sorted(stopped):
            copy = p.mover(v).copy
            if copy not in a.units:
                for j in users.get(v, ()):
                    a.units.pop(j, None)
                    a.notes[j] = f"uses GPUs of {p.stoppable[v].name}, whose migration failed"
            elif users.get(v, set()) - {copy} or must_move:
                continue  # used by another job, or a broken job: it must move
            else:
                copy_units = a.units.pop(copy)
                if any(ext.move_stands(a, stopped, v, copy, copy_units)
                       for ext in p.extensions):
                    a.units[copy] = copy_units
                    continue
            stopped.discard(v)
            changed = True
        if not changed:
            return stopped


class _MoverUsers:
    """For whom each mover moved: the pending jobs on its old GPUs, and (a job moved for
    another mover's copy is moved for that mover's pending job) the movers whose copies
    use them."""

    def __init__(self, p: PlacementProblem, a: Assignment) -> None:
        self.p = p
        self.users: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for j, units in a.units.items():
            for u in units:
                for node, gpus in u.pieces:
                    held = p.node_by_name[node].stoppable
                    for g in gpus:
                        if g in held and not p.is_copy(j):
                            self.users[held[g]][j] += 1
        # mover -> movers whose copies use it
        self.copy_users: dict[int, set[int]] = defaultdict(set)
        for v in a.stopped:
            for u in a.units.get(p.mover(v).copy, []):
                for node, gpus in u.pieces:
                    held = p.node_by_name[node].stoppable
                    self.copy_users.update({held[g]: self.copy_users[held[g]] | {v}
                                            for g in gpus if g in held and held[g] != v})

    def for_job(self, v: int, seen: frozenset[int] = frozenset()) -> str:
        """The highest-priority pending job on mover ``v``'s old GPUs, then the one using
        most of them; else the one of a mover whose copy uses them; else ""."""
        p = self.p
        by = self.users.get(v, {})
        if by:
            user = min(by, key=lambda j: (-p.jobs[j].priority, -by[j], p.jobs[j].name))
            return p.jobs[user].name
        for w in sorted(self.copy_users.get(v, ()), key=lambda w: p.stoppable[w].name):
            if w not in seen:
                found = self.for_job(w, seen | {v})
                if found:
                    return found
        return ""


#: ``make(problem, movable, index, copy)``: the stoppable job of a movable running job whose
#: copy is job ``copy`` of the round (a :class:`Mover`, a
#: :class:`~hyperplace.formulations.placement.stoppable.BrokenJob`)
MakeMover = Callable[["PlacementProblem", "Movable", int, JobView], Mover]


def add_movers(p: PlacementProblem, policy: MigrationPolicy, make: MakeMover) -> None:
    """Each running job that may move (:func:`find_movers`, least lost work first, the
    first ``policy.max_movers``): a mover (``make``) whose stop means "migrated" (or
    "repaired whole"), and a copy of its manifest as a job of the round that runs exactly
    when it is migrated. Every job of the round (pending jobs and copies) may use a
    migrated job's GPUs."""
    manifests = p.instance.running_manifests
    movers = find_movers(p.instance, policy)  # least lost work first
    cap = policy.max_movers
    p.movers_left_out = 0 if cap is None else max(0, len(movers) - cap)
    if cap is not None:
        movers = movers[:cap]
    for m in movers:
        index = len(p.stoppable)
        copy_view = p.add_copy(manifests[m.name], index, m.queue)
        p.add_stoppable_job(make(p, m, index, copy_view))
    # one set shared by every mover (never changed after this): a set per mover costs
    # movers x jobs entries, 6 GB at 16,384 GPUs with 90 % held
    everyone = {jv.index for jv in p.jobs if not jv.impossible}
    for running in p.stoppable:
        running.allowed = everyone


def _mover(p: PlacementProblem, m: Movable, index: int, copy: JobView) -> Mover:
    """A plain mover: migrated when stopped."""
    return Mover(index=index, name=m.name, priority=m.priority, queue=m.queue, gpus=m.gpus,
                 lost=m.lost, level=m.priority + 0.5, copy=copy.index)


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
