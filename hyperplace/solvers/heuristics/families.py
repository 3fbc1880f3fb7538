"""The greedy side of the round extensions (:mod:`hyperplace.formulations.placement.extensions`).

Greedy lives here, above the formulations, so a family cannot name its greedy step on the
extension itself. Each family that has one is registered by its extension type
(:data:`FAMILIES`): the step greedy runs after its plan (:attr:`GreedyFamily.step`: stop or
move running jobs for the jobs it left out), the families whose step it stands in for, and
the probe the explanations ask (:attr:`GreedyFamily.probe`). The data and rules those
steps keep are the family's own, on the formulation side: the hot spares' counter
(:meth:`RoundExtension.opening_rule
<hyperplace.formulations.placement.extensions.RoundExtension.opening_rule>`, which greedy's
free-GPU state keeps) and the words of every reason (:meth:`RoundExtension.reasons
<hyperplace.formulations.placement.extensions.RoundExtension.reasons>`).

The driver asks :func:`improve` after greedy's plan and :func:`spare_probe` for the
explanations; neither names a family. The steps' modules are imported when a round runs
them (most rounds stop no running job).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hyperplace.formulations.explain import SpareProbe
from hyperplace.formulations.mapping import Assignment
from hyperplace.formulations.placement import DomainKey, JobView, PlacementProblem
from hyperplace.formulations.placement.extensions import RoundExtension
from hyperplace.formulations.placement.migration import Migration
from hyperplace.formulations.placement.preemption import Preemption
from hyperplace.formulations.placement.repair import FailureRepair
from hyperplace.formulations.placement.spares import HotSpares
from hyperplace.solvers.heuristics.greedy import State, give_back, try_place_job
from hyperplace.solvers.params import GreedyParams

#: ``step(problem, plan, params, deadline)``: greedy's plan improved by the family's rule
Step = Callable[[PlacementProblem, Assignment, GreedyParams, "float | None"], Assignment]
#: ``probe(problem, plan, params)``: the explanations' probe of a family that holds GPUs
#: back from the placements (which of its leaves keep a job out)
Probe = Callable[[PlacementProblem, Assignment, GreedyParams], SpareProbe]


@dataclass(frozen=True)
class GreedyFamily:
    """The greedy side of one round extension (see the module docstring)."""

    #: run after greedy's plan, in the round's hook order
    step: Step | None = None
    #: families whose step this one's replaces in a round that has both
    stands_in_for: tuple[type[RoundExtension], ...] = ()
    #: the explanations' probe of a family that holds GPUs back
    probe: Probe | None = None


def held_by_spares(p: PlacementProblem, a: Assignment, params: GreedyParams) -> SpareProbe:
    """``held_by_spares(job)`` for the explanations: the leaves whose hot spares the job
    would need, when greedy places it on what ``a`` leaves free with the opening rules
    ignored (empty when it does not fit even so, or fits without them). Leaves the state as
    found."""
    spares = p.hot_spare_rule
    assert spares is not None
    state: State | None = None
    used: set[str] = {node for units in a.units.values() for u in units for node, _ in u.pieces}

    def probe(jv: JobView) -> list[DomainKey]:
        nonlocal state
        if state is None:
            state = State(p, rules=False)
            for units in a.units.values():
                for u in units:
                    for node, gpus in u.pieces:
                        state.take(node, gpus)
        placed = try_place_job(p, jv, state, max_trials=params.probe_domain_trials)
        if placed is None:
            return []
        give_back(state, placed)
        mine = {node for u in placed for node, _ in u.pieces}
        return sorted(leaf for leaf, nodes in spares.opened_over(used | mine).items()
                      if nodes & mine)

    return probe


def _migrate(p: PlacementProblem, a: Assignment, params: GreedyParams,
             deadline: float | None) -> Assignment:
    from hyperplace.solvers.heuristics.greedy_migrate import greedy_migrate

    return greedy_migrate(p, a, params, deadline=deadline)


def _preempt(p: PlacementProblem, a: Assignment, params: GreedyParams,
             deadline: float | None) -> Assignment:
    from hyperplace.solvers.heuristics.greedy_preempt import greedy_preempt

    return greedy_preempt(p, a, params, deadline=deadline)


def _repair(p: PlacementProblem, a: Assignment, params: GreedyParams,
            deadline: float | None) -> Assignment:
    from hyperplace.solvers.heuristics.greedy_repair import greedy_repair

    return greedy_repair(p, a, params, deadline=deadline)


#: The families that have a greedy side, by extension type (free-domain growth has none:
#: greedy does not grow the free domain, the exact model does; its round's movers are
#: migration's).
FAMILIES: dict[type[RoundExtension], GreedyFamily] = {
    HotSpares: GreedyFamily(probe=held_by_spares),
    # a repair round's movers are broken jobs: repaired, not migrated for pending jobs
    FailureRepair: GreedyFamily(step=_repair, stands_in_for=(Migration,)),
    Migration: GreedyFamily(step=_migrate),
    Preemption: GreedyFamily(step=_preempt),
}


def of_round(p: PlacementProblem) -> list[GreedyFamily]:
    """The greedy sides of the round's families, in hook order, less those another one
    stands in for."""
    found = {type(ext): FAMILIES[type(ext)] for ext in p.extensions if type(ext) in FAMILIES}
    replaced = {t for fam in found.values() for t in fam.stands_in_for}
    return [fam for t, fam in found.items() if t not in replaced]


def improve(p: PlacementProblem, a: Assignment, params: GreedyParams,
            deadline: float | None = None) -> Assignment:
    """Greedy's plan ``a`` improved by each family's step, in hook order (every step stops
    or moves running jobs: none runs in a round without any)."""
    if not p.stoppable:
        return a
    for fam in of_round(p):
        if fam.step is not None:
            a = fam.step(p, a, params, deadline)
    return a


def spare_probe(p: PlacementProblem, a: Assignment, params: GreedyParams
                ) -> SpareProbe | None:
    """The explanations' probe of the round's family that holds GPUs back from the
    placements (hot spares), None without one."""
    for fam in of_round(p):
        if fam.probe is not None:
            return fam.probe(p, a, params)
    return None


__all__ = ["FAMILIES", "GreedyFamily", "held_by_spares", "improve", "of_round", "spare_probe"]
