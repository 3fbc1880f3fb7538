"""Property tests: on random small rounds every backend's plan passes the independent checker,
gangs are all-or-nothing, the bound is never on the wrong side, exact backends agree."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from placement_helpers import rounds

from hyperplace.check import check
from hyperplace.formulations.placement import ModelParams
from hyperplace.instances import list_instances, load_instance
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.params import SolveParams

# (GPU type, NVLink topology, GPUs): NVSwitch nodes of two sizes, DGX-1 and PCIe nodes
def _assert_sound(plan, inst):
    assert check(plan, inst) == [], plan.status
    placed = {p.job for p in plan.placements}
    for j in inst.jobs:  # gang: all units or none
        units = {p.unit for p in plan.placements if p.job == j.name}
        assert units in (set(), {u.name for u in j.units()})
    assert placed == {j.job for j in plan.jobs}
    assert plan.objective is not None and plan.bound is not None
    assert plan.objective <= plan.bound + 1e-6  # maximisation: the bound is above


@settings(max_examples=int(os.environ.get("HP_EXAMPLES", "15")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(inst=rounds())
def test_every_backend_gives_a_checked_plan(solver, inst):
    plan = solve_placement(inst, solver=solver, budget_s=10)
    _assert_sound(plan, inst)
    greedy = solve_placement(inst, solver="greedy")
    assert plan.objective >= greedy.objective  # started from greedy, never worse


@settings(max_examples=int(os.environ.get("HP_EXAMPLES", "10")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(inst=rounds())
def test_pooled_cut_patterns_give_checked_plans(solver, inst):
    # every unit that may span nodes pooled (cut patterns shared by its class's units)
    # instead of flexible: plans stay valid, and no worse than greedy's
    params = SolveParams(model=ModelParams(flexible_max_units=0))
    plan = solve_placement(inst, solver=solver, budget_s=10, params=params)
    _assert_sound(plan, inst)
    greedy = solve_placement(inst, solver="greedy", params=params)
    assert plan.objective >= greedy.objective


@settings(max_examples=int(os.environ.get("HP_EXAMPLES", "10")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(inst=rounds())
def test_exact_backends_agree_when_both_prove_optimality(inst):
    # a generous budget: both must prove optimality on these rounds, so they are compared on
    # every example whatever the machine's load
    cp = solve_placement(inst, solver="cpsat", budget_s=30, seed=0)
    mi = solve_placement(inst, solver="milp", budget_s=30, seed=0)
    assert cp.status == SolveStatus.OPTIMAL, cp.message
    assert mi.status == SolveStatus.OPTIMAL, mi.message
    assert cp.objective_terms == mi.objective_terms


def test_bundled_instances_solve_to_checked_plans():
    for info in list_instances():
        inst = load_instance(info.name)
        if sum(c.gpu_count for c in inst.clusters) > 2000:
            continue  # alibaba-2023: exercised in the bench
        plan = solve_placement(inst, solver="auto", budget_s=5)
        assert plan.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE, SolveStatus.FALLBACK)
        _assert_sound(plan, inst)
