"""Failure repair (``repair``, ``MigrationPolicy(why="repair")``): a round extension
(:mod:`.extensions`) over the round's broken jobs
(:class:`~hyperplace.formulations.placement.stoppable.BrokenJob`: running jobs a failure
broke, each a mover whose copy is its whole manifest, and, when a repair in part is
possible, a second job of its failed units alone near its kept GPUs).

It owns, per broken job, what the round maximises first and what it then minimises:
objective 1 counts a broken job repaired (whole or in part, never both: ``repair[job]``),
priority-weighted like any admitted demand, and the moves' cost is the GPUs placed
(``repair_gpus_placed``), replacing the lost work and migration count of a plain migration
(a repair loses the same work whichever way it goes). The plan's score and terms carry the
repaired demand (:meth:`FailureRepair.plan_value`, ``repaired_priority_demand``). Its
broken jobs are found by the family (:meth:`FailureRepair.add_stoppable`; a round with
pending jobs is refused there), and it speaks for them in place of migration
(:attr:`~.extensions.RoundExtension.explains_movers`): its own words for the budget's mover
limit.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING

from hyperplace.formulations.linear import Objective
from hyperplace.formulations.placement.decoded import Assignment, PlacedUnit
from hyperplace.formulations.placement.extensions import RoundExtension
from hyperplace.formulations.placement.migration import (
    Movable,
    add_movers,
    settle_movers,
)
from hyperplace.formulations.placement.stoppable import BrokenJob, Mover
from hyperplace.formulations.placement.views import JobView

if TYPE_CHECKING:
    from hyperplace.formulations.placement.model import PlacementModelBuilder
    from hyperplace.formulations.placement.problem import PlacementProblem

OBJECTIVE = "repair_gpus_placed"
TERM = "repaired_priority_demand"


class FailureRepair(RoundExtension):
    """The round repairs its broken jobs (see the module docstring)."""

    name = "failure repair"
    replaces_moves_cost = True
    objective_names = (OBJECTIVE,)
    plan_objective = TERM
    explains_movers = True

    def __init__(self, p: PlacementProblem):
        self.p = p

    @classmethod
    def of(cls, p: PlacementProblem) -> FailureRepair | None:
        """The extension when the round repairs (its movers are broken jobs)."""
        return cls(p) if p.repairing else None

    @classmethod
    def add_stoppable(cls, p: PlacementProblem) -> None:
        """The round's broken jobs, when it repairs: movers
        (:func:`~hyperplace.formulations.placement.migration.add_movers`) repaired whole by
        their copy, or in part (:func:`_broken_job`).

        A repair round has no pending jobs (refused with ``ValueError``): the plan's objective
        1 is that of pending jobs, with weights over their demand and the free GPUs alone,
        while the model's objective 1 weighs the repairs beside them, and greedy and the
        plan's score place the pending jobs before the repairs; ``repair`` solves the broken
        jobs in a round of their own."""
        if p.migration is None or not p.migration.repairing:
            return
        if p.pending:
            names = ", ".join(jv.name for jv in p.pending[:3])
            more = f" and {len(p.pending) - 3} more" if len(p.pending) > 3 else ""
            raise ValueError(
                f"migration.why: 'repair' solves the broken jobs in a round of their own, "
                f"but jobs has {len(p.pending)} pending job(s) ({names}{more}): solve them "
                "in another round (hyperplace repair passes the instance with no jobs)")
        add_movers(p, p.migration, _broken_job)

    def weighted_demands(self) -> list[tuple[float, int]]:
        """Objective 1 counts each broken job repaired, at its priority: its manifest's GPUs."""
        return [(v.priority, self.p.repair_gpus(v)) for v in self.p.movers]

    def counted_gpus(self) -> int:
        """A repaired job may use the healthy GPUs it held."""
        return sum(len(v.gpus) for v in self.p.stoppable)

    def mover_rows(self, b: PlacementModelBuilder, mover: Mover, stop: int) -> bool:
        """A broken job: repaired whole (its copy, ``stop``) or in part, not both;
        objective 1 counts it repaired, then the GPUs each way moves."""
        if not isinstance(mover, BrokenJob):
            return False
        gpus = self.p.repair_gpus(mover)
        b.obj_demand_by_level[mover.priority].append((stop, gpus))
        b.obj_moves.append((stop, gpus))
        if mover.partial is not None:
            part = b.run[mover.partial]
            b.lm.add([(part, 1), (stop, 1)], hi=1, name=f"repair[{mover.name}]")
            b.obj_demand_by_level[mover.priority].append((part, gpus))
            b.obj_moves.append((part, self.p.jobs[mover.partial].gpus))
        return True

    def objectives(self, b: PlacementModelBuilder) -> list[Objective]:
        """The GPUs placed by the repairs, minimised (in place of the moves' cost)."""
        return [Objective(b.obj_moves, OBJECTIVE, "min")] if b.stop else []

    def settle_stopped(self, a: Assignment, stopped: set[int]) -> set[int] | None:
        """The repairs of ``stopped`` (broken jobs moved whole) the assignment keeps: each
        whose copy is placed (a broken job must move), each other one undone with the jobs
        on its old GPUs (:func:`~.migration.settle_movers`; it decides before migration)."""
        return settle_movers(self.p, a, stopped, must_move=True)

    def plan_value(self, a: Assignment, stopped: set[int] | None = None) -> int:
        """What a repair round maximises first (its model's objective 1; the plan's
        objective 1 counts pending jobs, and a repair round has none): priority-weighted
        GPUs of the broken jobs repaired, whole or in part."""
        p = self.p
        return sum(p.weights[v.priority] * p.repair_gpus(v) for v in p.movers
                   if v.copy in a.units or p.partial_of(v.index) in a.units)

    def gpus_placed(self, a: Assignment) -> int:
        """Objective :data:`OBJECTIVE` on ``a`` (what :meth:`objectives` minimises, for a
        plan without a model): each broken job repaired whole, its manifest's GPUs; in
        part, its failed units' GPUs; any other mover moved, 1 (migration's count)."""
        p = self.p
        total = 0
        for v in p.movers:
            if not isinstance(v, BrokenJob):
                total += v.copy in a.units
                continue
            total += p.repair_gpus(v) if v.copy in a.units else 0
            if v.partial is not None and v.partial in a.units:
                total += p.jobs[v.partial].gpus
        return total

    def terms(self, a: Assignment) -> dict[str, float]:
        out = {TERM: float(self.plan_value(a))}
        if self.p.stoppable:  # the model has the objective only then
            out[OBJECTIVE] = float(self.gpus_placed(a))
        return out

    def written_as(self, j: int, units: list[PlacedUnit]
                   ) -> tuple[JobView, list[PlacedUnit]] | None:
        """A repair in part (job ``j``: a broken job's failed units alone) as the broken
        job's whole placement: its manifest's view, its kept units where they are and the
        new ones under the failed units' names; None for any other job."""
        p = self.p
        broken = p.jobs[j].migrant
        if broken is None or p.partial_of(broken) != j:
            return None
        mover = p.mover(broken)
        assert p.migration is not None
        part = p.migration.partial[mover.name]
        kept = [PlacedUnit(-1, name, _by_node(gpus)) for name, gpus in part.kept.items()]
        moved = [PlacedUnit(u.uclass, name, u.pieces) for name, u in zip(part.bad, units)]
        return p.jobs[mover.copy], kept + moved

    def moves_in_part(self, a: Assignment) -> dict[int, list[PlacedUnit]]:
        """The broken jobs ``a`` repairs in part, with their kept and new units
        (:meth:`written_as`)."""
        p = self.p
        out: dict[int, list[PlacedUnit]] = {}
        for v in p.movers:
            if isinstance(v, BrokenJob) and v.partial is not None and v.partial in a.units:
                found = self.written_as(v.partial, a.units[v.partial])
                assert found is not None
                out[v.index] = found[1]
        return out

    def restrictions(self) -> list[str]:
        """The broken jobs the budget's mover limit left out of the round."""
        p = self.p
        if not p.movers_left_out:
            return []
        return [f"only the {len(p.movers)} broken jobs losing least work may be repaired "
                f"({p.movers_left_out} more stay broken: the budget's mover limit)"]


def _broken_job(p: PlacementProblem, m: Movable, index: int, copy: JobView) -> BrokenJob:
    """A broken job repaired whole (its copy) or, when the policy has a repair in part for
    it, by its failed units alone near its kept ones (a second job of the round, limited
    to the part's nodes)."""
    v = BrokenJob(index=index, name=m.name, priority=m.priority, queue=m.queue, gpus=m.gpus,
                  lost=m.lost, level=m.priority + 0.5, copy=copy.index)
    assert p.migration is not None
    part = p.migration.partial.get(m.name)
    if part is not None:
        part_view = p.add_copy(part.job, index, m.queue)
        part_view.allowed_nodes = part.nodes
        v.partial = part_view.index
    return v


def _by_node(gpus: tuple[tuple[str, int], ...]) -> list[tuple[str, tuple[int, ...]]]:
    nodes: dict[str, list[int]] = defaultdict(list)
    for node, g in gpus:
        nodes[node].append(g)
    return [(node, tuple(gs)) for node, gs in nodes.items()]


__all__ = ["OBJECTIVE", "TERM", "FailureRepair"]
