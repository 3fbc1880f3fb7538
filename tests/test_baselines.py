"""Peer-style baselines: documented failures on the named instances, plans checked.

The baselines are NVLink-blind and bandwidth-blind on purpose, so the only checker
violations allowed in their plans are those blind spots predict.
"""

from __future__ import annotations

import importlib.util

import pytest

from hyperplace.baselines import BASELINES
from hyperplace.baselines.peer_cases import PEER_CASES, load_peer_case, render
from hyperplace.check import check, format_violations
from hyperplace.metrics import plan_metrics
from hyperplace.models import Instance

# What NVLink blindness (lowest-index GPUs, no clique search) and link-speed blindness
# (tiers are ranks) can break; everything else (gang, type, GPUs free, hops) they respect.
BLIND_SPOTS = {"nvlink-bandwidth", "ib-bandwidth", "replica-ib-bandwidth"}


def units_on(plan, job: str) -> set[str]:
    return {g.node for p in plan.placements if p.job == job for g in p.gpus}


@pytest.mark.parametrize("name", list(PEER_CASES))
def test_peer_instance_file_matches_builder_and_validates(name):
    inst = load_peer_case(name)
    assert isinstance(inst, Instance) and inst.name == name
    assert inst == PEER_CASES[name](), "regenerate: python -m hyperplace.baselines.peer_cases"
    assert inst.jobs and all(j.units() for j in inst.jobs)
    assert render(inst) == render(PEER_CASES[name]())


@pytest.mark.parametrize("solver", list(BASELINES))
@pytest.mark.parametrize("name", list(PEER_CASES))
def test_every_baseline_plan_is_produced_and_checked(name, solver):
    inst = load_peer_case(name)
    plan = BASELINES[solver](inst)
    assert plan.solver == solver and plan.status == "feasible"
    violations = check(plan, inst)
    assert {v.code for v in violations} <= BLIND_SPOTS, format_violations(violations)
    assert {p.job for p in plan.pending} | set(plan.admitted) == {j.name for j in inst.jobs}


def test_baselines_respect_gpu_type_and_gang_on_a_mixed_cluster():
    generator = pytest.importorskip("hyperplace.instances.generator")
    inst = generator.generate(256, 40, ["H100-80", "A100-80"], 0.5, 7)
    for solver, run in BASELINES.items():
        plan = run(inst)
        violations = check(plan, inst)
        assert {v.code for v in violations} <= BLIND_SPOTS | {"priority-inversion"}, (
            solver, format_violations(violations))
        assert plan_metrics(plan, inst, violations).admitted_jobs > 0


ENGINE = importlib.util.find_spec("hyperplace.solvers.driver") is not None


@pytest.mark.skipif(not ENGINE, reason="the placement engine (hyperplace.solvers.driver) is not there yet")
@pytest.mark.parametrize("name", list(PEER_CASES))
def test_engine_admits_at_least_every_baseline(name):
    from hyperplace.solvers.driver import solve_placement

    inst = load_peer_case(name)
    plan = solve_placement(inst, solver="auto", budget_s=10.0, seed=0)
    violations = check(plan, inst)
    assert violations == [], format_violations(violations)
    engine = plan_metrics(plan, inst, violations).useful_weighted_demand
    best = max(plan_metrics(run(inst, seed=seed), inst).useful_weighted_demand
               for run in BASELINES.values() for seed in range(3))
    assert engine >= best
