"""Round extensions: families a round may add to the placement model, each one object that
owns its data, its rows and objectives, its decode settlement and its share of the plan's
score and objective terms (PyJobShop's per-family constraint methods are the template: one
method per family on its model builder; here one object per family, so that a family is
read, changed and switched off in one place instead of as flags threaded through the
problem, the model builder, the mapping back and the driver).

A family that stops running jobs finds them itself: :meth:`RoundExtension.add_stoppable`
(a class method, called by the problem once its pending jobs are in, before the family
objects exist) adds its preemption candidates, movers or broken jobs to the round
(:meth:`PlacementProblem.add_stoppable_job
<hyperplace.formulations.placement.problem.PlacementProblem.add_stoppable_job>`, and the
movers' copies as jobs of the round, :meth:`PlacementProblem.add_copy
<hyperplace.formulations.placement.problem.PlacementProblem.add_copy>`); the problem knows
only that some running jobs may be stopped.

The other hooks are called in the round's order (:attr:`PlacementProblem.extensions
<hyperplace.formulations.placement.problem.PlacementProblem.extensions>`: only the families
the round asks for) by the model builder (:meth:`RoundExtension.rows`, then
:meth:`RoundExtension.objectives` when it orders the objectives;
:meth:`RoundExtension.stop_rows` where it starts on the stop booleans,
``PlacementModelBuilder._stops``, and :meth:`RoundExtension.after_stop_rows` right after
them, in ``build``; :meth:`RoundExtension.quota_rows` after the queues' and cohorts' rows,
``_quotas``), by migration's stop rows (:meth:`RoundExtension.mover_rows`, as
``Migration.stop_rows`` ties each mover to its copy), by the mapping back
(:meth:`RoundExtension.settle`, after the units are decoded, then
:meth:`RoundExtension.settle_stopped`, the first family that decides winning, with
:meth:`RoundExtension.move_stands` asked by the movers' settlement;
:meth:`RoundExtension.written_as` and :meth:`RoundExtension.plan_sections` as the plan is
written, :meth:`RoundExtension.moves_in_part` by migration's ``migrations[]``), by the
driver (:meth:`RoundExtension.plan_value` in the plan score, :meth:`RoundExtension.terms` in
the plan's objective terms, :meth:`RoundExtension.kept_demand` in objective 1 and
:meth:`RoundExtension.bound_demands` in its demand bound,
:attr:`RoundExtension.relaxation_bounds` and :attr:`RoundExtension.plan_objective` for its
bounds, :meth:`RoundExtension.round_objectives` for the gaps of a plan without a model,
``_objective_gaps``, :meth:`RoundExtension.reasons` after the explanations) and by the problem
(:meth:`RoundExtension.restrictions`, where the model sees less than the rules allow;
:meth:`RoundExtension.weighted_demands` and :meth:`RoundExtension.counted_gpus` for the
priority weights, ``PlacementProblem._weighted_demands`` and ``weight_capacity``).
Greedy's free-GPU state asks :meth:`RoundExtension.opening_rule` (a rule it keeps as it
takes and gives GPUs) and its quota ledger :meth:`RoundExtension.quota_holds`
(``QuotaLedger.ok``). Every hook's default does nothing.

Greedy is in ``solvers/``, above this layer, so a family's greedy step (what greedy runs
after its plan: stop or move running jobs for the jobs it left out) and the probes its
explanations ask are registered by extension type in
:mod:`hyperplace.solvers.heuristics.families`; the data and rules those steps keep (the
hot spares' counter, the words of every reason) are the family's own, here.

Families that are extensions: hot spares (:class:`~.spares.HotSpares`), failure repair
(:class:`~.repair.FailureRepair`), free-domain growth
(:class:`~.free_domain.FreeDomainGrowth`), migration (:class:`~.migration.Migration`) and
preemption (:class:`~.preemption.Preemption`). The two that stop running jobs share the stop
booleans, the capacity rows of nodes hosting stoppable jobs and the stops' quota terms
(:class:`~.stoppable.StopsJobs`); preemption's reclaim and guarantee rows are its own
(:meth:`RoundExtension.quota_rows`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar, Protocol

Terms = list[tuple[int, int]]

if TYPE_CHECKING:
    from typing import Self

    from hyperplace.formulations.linear import Objective
    from hyperplace.formulations.placement.domains import DomainKey
    from hyperplace.formulations.placement.decoded import Assignment, PlacedUnit
    from hyperplace.formulations.placement.model import PlacementModelBuilder
    from hyperplace.formulations.placement.problem import PlacementProblem
    from hyperplace.formulations.placement.stoppable import Mover
    from hyperplace.formulations.placement.views import JobView


class OpeningRule(Protocol):
    """A rule greedy's free-GPU state keeps as it places pieces: which leaves may still
    have a whole free node opened (hot spares: :class:`~.spares.SpareCounter`)."""

    def may_open(self, leaf: DomainKey) -> bool:
        """A piece may open a whole free node of ``leaf``."""
        ...

    def moved(self, leaf: DomainKey, whole_now: bool) -> None:
        """A whole free node of ``leaf`` was opened (``whole_now`` False) or is whole free
        again (True)."""
        ...


class RoundExtension:
    """One family of a round (see the module docstring); subclasses override the hooks
    they need."""

    #: the family's name (as the round names it in plans and notes)
    name: ClassVar[str] = ""
    #: its objectives stand in place of the moves' cost (lost work, then migrations)
    replaces_moves_cost: ClassVar[bool] = False
    #: the objectives it may put after objective 1 (:meth:`objectives`), by name: what a
    #: plan reports gaps for when no model was built (greedy's plan)
    objective_names: ClassVar[tuple[str, ...]] = ()
    #: a term the plan reports beside objective 1 as what the round maximises first
    #: (failure repair's repaired demand)
    plan_objective: ClassVar[str | None] = None
    #: its reasons and restrictions speak for the round's movers in place of migration's
    #: (failure repair: its movers are broken jobs, repaired rather than moved for a job)
    explains_movers: ClassVar[bool] = False
    #: the LP relaxations (the model's, the aggregated model's) bound the round's objective
    #: 1 and admitted jobs (False: objective 1 counts what they do not write, preemption's
    #: running jobs kept), so the driver may tighten its bounds with them
    relaxation_bounds: ClassVar[bool] = True

    @classmethod
    def of(cls, p: PlacementProblem) -> Self | None:
        """The family's object when round ``p`` asks for it (None: it does not)."""
        raise NotImplementedError

    def round_objectives(self) -> tuple[str, ...]:
        """The names of the objectives :meth:`objectives` puts after objective 1 in this
        round, without a model (what a greedy plan reports gaps for): its
        :attr:`objective_names`, or none where another family's stand in their place."""
        return self.objective_names

    @classmethod
    def add_stoppable(cls, p: PlacementProblem) -> None:
        """Add the running jobs the family may stop to round ``p`` (preemption candidates,
        movers, broken jobs), when the round asks for the family. Called once, by the
        problem, after its pending jobs and before its priority weights; at most one
        family of a round stops running jobs (the problem checks it)."""

    def weighted_demands(self) -> list[tuple[float, int]]:
        """Demands objective 1 counts besides the pending jobs', as (priority level, GPUs):
        what the round's priority weights are made for."""
        return []

    def counted_gpus(self) -> int:
        """GPUs objective 1 can count besides the free ones (the priority weights'
        capacity)."""
        return 0

    def bound_demands(self) -> tuple[int, list[tuple[int, int]]]:
        """What the family adds to objective 1's solver-free demand bound: GPUs it may free
        for the round's jobs, and demands (weight, GPUs) that may fill them (preemption: its
        candidates' GPUs, and the candidates kept; movers keep running: no demand)."""
        return 0, []

    def kept_demand(self, stopped: Iterable[int]) -> int:
        """Objective 1's share of the running jobs the family counts that keep running,
        all but the ``stopped`` ones (preemption: every running job, in its own level)."""
        return 0

    def rows(self, b: PlacementModelBuilder) -> None:
        """Add the family's variables and rows to the model being built."""

    def stop_rows(self, b: PlacementModelBuilder) -> None:
        """Rows and objective terms over the stop booleans, made where the builder starts on
        them (before the capacity rows of nodes hosting stoppable jobs), so they keep their
        place in the model."""

    def after_stop_rows(self, b: PlacementModelBuilder) -> None:
        """Rows that need every stop row in place, made right after them (before quotas)."""

    def mover_rows(self, b: PlacementModelBuilder, mover: Mover, stop: int) -> bool:
        """Rows and objective terms of one mover the family refines (called as the
        builder ties each mover to its copy, so the rows keep their place in the model);
        True when the family took the mover's share of the moves' cost."""
        return False

    def quota_rows(self, b: PlacementModelBuilder, terms: dict[tuple[str, str], Terms],
                   freed: dict[tuple[str, str], Terms], big: int) -> None:
        """Rows of the family's quota rules, after the queues' and cohorts' rows (with
        quotas only): ``terms`` the GPUs admitted per (queue, quota key), ``freed`` what the
        stops give back there, ``big`` a bound on any queue's GPUs."""

    def quota_holds(self, used: dict[tuple[str, str], float],
                    gone: dict[tuple[str, str], float], stopped: dict[int, int],
                    admitted: dict[str, int]) -> bool:
        """Greedy's side of :meth:`quota_rows`: whether the family's quota rules hold with
        what greedy's quota ledger counts (``used`` and ``gone``: GPUs admitted and stopped
        per (queue, quota key); ``stopped``: stoppable job -> times stopped; ``admitted``:
        GPUs admitted per queue); asked after the queues' and cohorts' limits hold."""
        return True

    def objectives(self, b: PlacementModelBuilder) -> list[Objective]:
        """Objectives the family puts right after objective 1 (ahead of lost work and the
        lower objectives), most important first."""
        return []

    def settle(self, a: Assignment) -> None:
        """Make a decoded assignment agree with the family's rules (the mapping back's
        last step before the stopped jobs are settled); notes say what was dropped."""

    def settle_stopped(self, a: Assignment, stopped: set[int]) -> set[int] | None:
        """The stopped jobs of ``stopped`` the decoded assignment keeps (None: the family
        does not decide it); the first family that decides wins."""
        return None

    def move_stands(self, a: Assignment, stopped: set[int], v: int, copy: int,
                    units: list[PlacedUnit]) -> bool:
        """A migration of mover ``v`` that no other job needs stands for the family's sake
        (asked by the movers' settlement with its copy ``copy``, placed on ``units``, out of
        ``a``; ``a`` as found after)."""
        return False

    def plan_value(self, a: Assignment, stopped: set[int] | None = None) -> int:
        """The family's value in the plan score (after objective 1 and the repaired
        demand, before lost work), higher is better; ``stopped`` (default ``a.stopped``)
        the migrations done."""
        return 0

    def terms(self, a: Assignment) -> dict[str, float]:
        """The family's objective terms as the plan reports them."""
        return {}

    def plan_sections(self, a: Assignment) -> dict[str, object]:
        """The plan's sections the family writes, as :meth:`PlanBuilder.build
        <hyperplace.models.plan_builder.PlanBuilder.build>` keywords (preemption: its
        ``preemptions`` and ``preemption_policy``; migration: its ``migrations``)."""
        return {}

    def written_as(self, j: int, units: list[PlacedUnit]
                   ) -> tuple[JobView, list[PlacedUnit]] | None:
        """How the plan writes job ``j`` of the round placed on ``units`` when the family
        writes it as another job (failure repair: a repair in part as the broken job's
        whole placement); None: as itself (:func:`written_as`)."""
        return None

    def moves_in_part(self, a: Assignment) -> dict[int, list[PlacedUnit]]:
        """Movers ``a`` moves in part, not by their copy (failure repair: its repairs in
        part), with their units after the move as the plan writes them: migration's
        ``migrations[]`` lists them too."""
        return {}

    def reasons(self, a: Assignment, reasons: dict[int, list[str]], proven: bool) -> None:
        """Add the family's reasons for the pending jobs ``a`` leaves out (after the
        explanations'); ``proven``: the plan is proven optimal."""

    def restrictions(self) -> list[str]:
        """Where the family shows the model fewer choices than its rules allow, in words
        (:meth:`PlacementProblem.restrictions
        <hyperplace.formulations.placement.problem.PlacementProblem.restrictions>`)."""
        return []

    def opening_rule(self) -> OpeningRule | None:
        """A fresh rule for greedy's free-GPU state to keep (None: the family has none)."""
        return None


def written_as(p: PlacementProblem, j: int, units: list[PlacedUnit]
               ) -> tuple[JobView, list[PlacedUnit]]:
    """Job ``j`` of round ``p`` placed on ``units`` as the plan writes it: as the first family
    that writes it as another says (:meth:`RoundExtension.written_as`), else as itself."""
    for ext in p.extensions:
        found = ext.written_as(j, units)
        if found is not None:
            return found
    return p.jobs[j], units


__all__ = ["OpeningRule", "RoundExtension", "written_as"]
