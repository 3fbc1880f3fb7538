"""The aggregated model's bound on objective 1 (leaves folded, jobs by shape): valid against
the proven optimum on generated and bundled rounds, far tighter than the demand bound on a
fragmented cluster, not used where objective 1 counts running jobs, and run only when the
budget affords it (its documented rule)."""

from __future__ import annotations

import time

import pytest

from hyperplace.check import check
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.instances.generator import generate
from hyperplace.instances.registry import load_instance
from hyperplace.solvers.backends.aggregate import aggregate_bound
from hyperplace.solvers.budget import Budget
from hyperplace.solvers.driver import demand_bound, solve_placement
from hyperplace.solvers.params import BudgetParams, SolveParams

TYPES = ["H100-80", "A100-80"]
GENERATED = [(256, 30, 0.8, seed, 2) for seed in (1, 2, 3)] + [(512, 60, 0.9, 11, 2),
                                                                (128, 20, 0.6, 5, 1)]
FABRICS = [(256, 40, 0.7, 21, "fat-tree-3", 0), (192, 30, 0.5, 22, "fat-tree-2", 9),
           (1024, 60, 0.85, 23, "superpod-rail", 0)]
BUNDLED = ["mixed-a100-h100", "superpod-h100-4su", "dgx1-v100", "gb200-nvl72"]


def _proven(inst):
    plan = solve_placement(inst, solver="milp", budget_s=60)
    assert plan.status.value == "optimal"
    assert check(plan, inst) == []
    return plan


@pytest.mark.parametrize("gpus,jobs,frag,seed,scale", GENERATED)
def test_the_bound_is_valid_on_generated_rounds(gpus, jobs, frag, seed, scale):
    inst = generate(gpus, jobs, TYPES, frag, seed, size_scale=scale)
    exact = _proven(inst)
    p = PlacementProblem(inst)
    found = aggregate_bound(p)
    assert found.bound is not None and found.status == "kOptimal"
    assert found.bound >= exact.objective  # valid
    assert found.node_classes <= len(p.node_classes)
    assert found.shapes <= len(p.pending)


@pytest.mark.parametrize("gpus,jobs,frag,seed,fabric,faulty", FABRICS)
def test_the_bound_is_valid_on_other_fabrics(gpus, jobs, frag, seed, fabric, faulty):
    inst = generate(gpus, jobs, TYPES, frag, seed, fabric=fabric, faulty_gpus=faulty,
                    size_scale=2)
    exact = _proven(inst)
    found = aggregate_bound(PlacementProblem(inst))
    assert found.bound is not None and found.bound >= exact.objective


@pytest.mark.parametrize("seed", [31, 32])
def test_the_bound_is_valid_across_clusters(seed):
    from hyperplace.instances.generator import generate_federation

    inst = generate_federation(3, 96, 30, TYPES, 0.6, seed, size_scale=2)
    exact = _proven(inst)
    found = aggregate_bound(PlacementProblem(inst), assign=True)
    assert found.bound is not None and found.bound >= exact.objective
    assert found.assignment is not None and set(found.assignment.values()) <= \
        {c.name for c in inst.clusters}


@pytest.mark.parametrize("name", BUNDLED)
def test_the_bound_is_valid_on_bundled_rounds(name):
    inst = load_instance(name)
    exact = _proven(inst)
    found = aggregate_bound(PlacementProblem(inst))
    assert found.bound is not None
    assert found.bound >= exact.objective


def test_it_knows_where_the_free_gpus_are():
    """A fragmented cluster: the demand bound counts GPUs no job can use, the aggregated
    bound does not (within 1 % of the optimum here, where the demand bound is 50 % off)."""
    inst = generate(512, 60, TYPES, 0.9, 11, size_scale=2)
    exact = _proven(inst)
    p = PlacementProblem(inst)
    assert demand_bound(p) > 1.5 * exact.objective
    found = aggregate_bound(p)
    assert found.bound is not None
    assert exact.objective <= found.bound <= 1.01 * exact.objective


def test_a_plan_without_a_proof_reports_it(monkeypatch):
    """The exact backend judged too large and the LP relaxation given no time: greedy's plan,
    bounded by the aggregated model, its gap honest (against the proven optimum)."""
    inst = generate(512, 60, TYPES, 0.9, 11, size_scale=2)
    exact = _proven(inst)
    tiny = SolveParams(budget=BudgetParams(cpsat_vars_per_second=1, milp_vars_per_second=1))
    from hyperplace.solvers.backends import relax

    monkeypatch.setattr(relax, "SECONDS_PER_VAR", 1e6)  # the model's relaxation never fits
    plan = solve_placement(inst, solver="auto", budget_s=10, params=tiny)
    assert check(plan, inst) == []
    assert plan.status.value == "fallback"
    assert "aggregated model's LP relaxation" in plan.message
    assert plan.bound is not None and plan.bound >= exact.objective
    assert plan.gap is not None and plan.gap <= 0.01


def test_its_second_chance_before_the_relaxation(monkeypatch):
    """Phase 0 finds too little left (``aggregate_share`` 0: it never fits there), the exact
    backend and the model's relaxation do not fit: the aggregated bound runs in phase 3, once,
    and bounds greedy's plan validly (against the proven optimum)."""
    inst = generate(512, 60, TYPES, 0.9, 11, size_scale=2)
    exact = _proven(inst)
    from hyperplace.solvers.backends import aggregate, relax

    calls = []
    real = aggregate.aggregate_bound
    monkeypatch.setattr(aggregate, "aggregate_bound",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(relax, "SECONDS_PER_VAR", 1e6)  # the model's relaxation never fits
    params = SolveParams(budget=BudgetParams(cpsat_vars_per_second=1, milp_vars_per_second=1,
                                             aggregate_share=0.0))
    plan = solve_placement(inst, solver="auto", budget_s=10, params=params)
    assert check(plan, inst) == []
    assert calls == [1]
    assert "aggregated model's LP relaxation" in plan.message
    assert plan.bound is not None and plan.bound >= exact.objective
    assert plan.gap is not None and plan.gap <= 0.01
    # and without time for it either: the demand bound, no aggregated figure
    calls.clear()
    slow = SolveParams(budget=BudgetParams(cpsat_vars_per_second=1, milp_vars_per_second=1,
                                           aggregate_share=0.0, aggregate_s_per_job=1.0))
    plan = solve_placement(inst, solver="auto", budget_s=10, params=slow)
    assert check(plan, inst) == [] and calls == []
    assert plan.bound == demand_bound(PlacementProblem(inst))


def test_the_late_rule_is_the_explanations_deadline():
    """The second chance's rule: the estimate (aggregate_s_per_job x jobs + 5 ms) fits whole
    before the explanations' deadline (explain_tail_s_per_item x (jobs + free GPUs) before
    the end)."""
    params = BudgetParams(aggregate_s_per_job=1e-3, explain_tail_s_per_item=1e-3)
    now = [0.0]
    b = Budget(10.0, params, clock=lambda: now[0], cpu_clock=lambda: now[0])  # not slowed
    # 100 jobs, 100 free GPUs: deadline 10 - 0.2 = 9.8; estimate 0.105
    now[0] = 9.69
    assert b.aggregate_fits_late(100, 100)
    now[0] = 9.7
    assert not b.aggregate_fits_late(100, 100)
    assert not b.aggregate_fits(100)  # phase 0's rule (a tenth of what is left) is stricter
    # a machine 3x slower (a CPU second per 3 s of wall): both figures are CPU time, so
    # the deadline is 10 - 3 x 0.2 = 9.4 and the estimate 3 x 0.1 + 0.005 = 0.305
    now[0] = 0.0
    slowed = Budget(10.0, params, clock=lambda: now[0], cpu_clock=lambda: now[0] / 3)
    now[0] = 9.09
    assert slowed.aggregate_fits_late(100, 100)
    now[0] = 9.1
    assert not slowed.aggregate_fits_late(100, 100)


def test_not_for_rounds_that_stop_running_jobs():
    inst = load_instance("mixed-a100-h100")
    p = PlacementProblem(inst, preemption="lower-priority")
    assert p.stoppable  # running jobs it may stop
    assert aggregate_bound(p).bound is None


def test_no_time_no_bound():
    p = PlacementProblem(generate(256, 30, TYPES, 0.8, 1, size_scale=2))
    assert aggregate_bound(p, deadline=time.perf_counter() - 1).bound is None


def test_it_runs_only_when_the_budget_affords_it():
    """The rule: its estimated cost (aggregate_s_per_job x jobs + 5 ms) at most
    aggregate_share of what is left."""
    params = BudgetParams(aggregate_s_per_job=1e-3, aggregate_share=0.1)
    now = [0.0]
    b = Budget(10.0, params, clock=lambda: now[0], cpu_clock=lambda: now[0])  # not slowed
    assert b.aggregate_fits(995)  # 0.995 + 0.005 = 1.0 <= 0.1 x 10
    assert not b.aggregate_fits(996)
    now[0] = 5.0
    assert b.aggregate_fits(495) and not b.aggregate_fits(496)
    with pytest.raises(ValueError, match="aggregate_share"):
        BudgetParams(aggregate_share=1.5)
