"""Round extensions: families a round may add to the placement model, each one object that
owns its data, its rows and objectives, its decode settlement and its share of the plan's
score and objective terms (PyJobShop's per-family constraint methods are the template: one
method per family on its model builder; here one object per family, so that a family is
read, changed and switched off in one place instead of as flags threaded through the
problem, the model builder, the mapping back and the driver).

The hooks are called in the round's order (:attr:`PlacementProblem.extensions
<hyperplace.formulations.placement.problem.PlacementProblem.extensions>`: only the families
the round asks for) by the model builder (:meth:`RoundExtension.rows`, then
:meth:`RoundExtension.objectives` when it orders the objectives), by the mapping back
(:meth:`RoundExtension.settle`, after the units are decoded) and by the driver
(:meth:`RoundExtension.plan_value` in the plan score, :meth:`RoundExtension.terms` in the
plan's objective terms). Every hook's default does nothing.

Families that are extensions: hot spares (:class:`~.spares.HotSpares`), failure repair
(:class:`~.repair.FailureRepair`), free-domain growth
(:class:`~.free_domain.FreeDomainGrowth`), migration (:class:`~.migration.Migration`) and
preemption (:class:`~.preemption.Preemption`). They share the stop booleans and the capacity
rows of nodes hosting stoppable jobs (:mod:`.stoppable`, the builder's ``_preemption``);
preemption's reclaim rows are still part of the builder's quota rows (``_quotas``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from hyperplace.formulations.linear import Objective
    from hyperplace.formulations.mapping import Assignment
    from hyperplace.formulations.placement.model import PlacementModelBuilder
    from hyperplace.formulations.placement.stoppable import Mover


class RoundExtension:
    """One family of a round (see the module docstring); subclasses override the hooks
    they need."""

    #: the family's name (as the round names it in plans and notes)
    name: ClassVar[str] = ""
    #: its objectives stand in place of the moves' cost (lost work, then migrations)
    replaces_moves_cost: ClassVar[bool] = False

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

    def plan_value(self, a: Assignment, stopped: set[int] | None = None) -> int:
        """The family's value in the plan score (after objective 1 and the repaired
        demand, before lost work), higher is better; ``stopped`` (default ``a.stopped``)
        the migrations done."""
        return 0

    def terms(self, a: Assignment) -> dict[str, float]:
        """The family's objective terms as the plan reports them."""
        return {}


__all__ = ["RoundExtension"]
