"""The greedy side of the round extensions (#20 item 4, solvers/heuristics/families.py): each
family with a greedy step is registered by its extension type, a repair round runs the
repair step in place of migration's, and a round that stops no running job runs none."""

from __future__ import annotations

from placement_helpers import fragmented

from hyperplace.formulations.mapping import Assignment
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.formulations.placement.migration import Migration
from hyperplace.formulations.placement.repair import FailureRepair
from hyperplace.models.migration import MigrationPolicy
from hyperplace.solvers.heuristics.families import FAMILIES, improve, of_round
from hyperplace.solvers.heuristics.greedy import solve_greedy
from hyperplace.solvers.heuristics.greedy_migrate import greedy_migrate
from hyperplace.solvers.heuristics.greedy_repair import greedy_repair
from hyperplace.solvers.params import GreedyParams


def _same(a: Assignment, b: Assignment) -> bool:
    return a.units == b.units and a.stopped == b.stopped


def test_each_round_runs_the_steps_of_its_families():
    inst = fragmented()
    assert of_round(PlacementProblem(inst)) == []
    moving = PlacementProblem(inst, migration=MigrationPolicy())
    assert of_round(moving) == [FAMILIES[Migration]]
    # a repair round has both families; its movers are broken jobs, repaired, not migrated
    repair = PlacementProblem(inst.with_jobs([]), migration=MigrationPolicy(why="repair"))
    assert [type(e) for e in repair.extensions] == [FailureRepair, Migration]
    assert of_round(repair) == [FAMILIES[FailureRepair]]


def test_improve_is_the_familys_step():
    gp = GreedyParams()
    inst = fragmented()
    moving = PlacementProblem(inst, migration=MigrationPolicy())
    a = solve_greedy(moving)
    assert moving.movers and _same(improve(moving, a, gp), greedy_migrate(moving, a, gp))
    repair = PlacementProblem(inst.with_jobs([]), migration=MigrationPolicy(why="repair"))
    a = solve_greedy(repair)
    assert repair.movers and a.units == {}  # nothing placed before the repair step
    assert _same(improve(repair, a, gp), greedy_repair(repair, a, gp))
    # nothing to stop: the plan comes back as it was
    plain = PlacementProblem(inst)
    a = solve_greedy(plain)
    assert improve(plain, a, gp) is a
