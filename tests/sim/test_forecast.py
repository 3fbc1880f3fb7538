"""A round's forecasts say the same whatever the process priced before (#20): the speed
model's and the planner's memos (per model, GPU type and count, calibration) and the
layers' memo only save work. Cold (memos cleared), warm (every answer a hit) and with no
memo at all give the same forecasts, on the default instance and on a generated one."""

from __future__ import annotations

import pytest

from hyperplace.check import check
from hyperplace.costmodel import predict, speed
from hyperplace.instances import load_instance
from hyperplace.instances.generator import generate
from hyperplace.sim.forecast import forecast_plan
from hyperplace.solvers.driver import solve_placement


class _Forgets(dict):
    """A memo that never keeps anything: every call computes its answer."""

    def __setitem__(self, key, value) -> None:
        pass


def _answers(inst, plan) -> tuple[list[str], list[float]]:
    """The forecasts, and the speeds they come from (a forecast's start is rounded to the
    schedule's steps: the speeds say more): every placed job on its placement, every
    pending job on every GPU type of the instance."""
    from hyperplace.sim.speed import SpeedModel

    model = SpeedModel(inst)
    by_name = {j.name: j for j in inst.jobs}
    units: dict[str, dict] = {}
    for p in plan.placements:
        units.setdefault(p.job, {})[p.unit] = [(g.node, g.gpu) for g in p.gpus]
    speeds = [model.speed(by_name[j], u) for j, u in units.items()]
    speeds += [model.planned_speed(by_name[j.job], t, 1) for j in plan.pending
               for t in model.type_counts]
    return [f.model_dump_json() for f in forecast_plan(inst, plan)], speeds


@pytest.mark.parametrize("make", [lambda: load_instance("mixed-a100-h100"),
                                  lambda: generate(128, 60, ["H100-80", "A100-80"],
                                                   fragmentation=0.9, seed=3)],
                         ids=["default", "generated"])
def test_forecasts_do_not_depend_on_the_memos(make, monkeypatch):
    inst = make()
    plan = solve_placement(inst, solver="greedy", budget_s=5.0)
    assert check(plan, inst) == []
    assert plan.pending, "a round with pending jobs: their forecasts price speeds"
    speed.clear_caches()
    cold = _answers(inst, plan)
    assert speed.planner_stats["plans"] > 0  # the planner priced shapes
    warm = _answers(inst, plan)
    for module, name in ((speed, "_cache"), (speed, "_fast"), (speed, "_job_cache"),
                         (speed, "_planned"), (predict, "_layers")):
        monkeypatch.setattr(module, name, _Forgets())
    none = _answers(inst, plan)
    assert cold == warm == none
    assert len(cold[0]) == len(plan.jobs) + len(plan.pending)


@pytest.mark.parametrize("make", [lambda: load_instance("mixed-a100-h100"),
                                  lambda: generate(128, 60, ["H100-80", "A100-80"],
                                                   fragmentation=0.9, seed=3)],
                         ids=["default", "generated"])
def test_the_forecast_cost_counts_every_shape_it_prices(make):
    """``solve`` makes forecasts only when :func:`forecast_cost_s` fits in what the budget
    left: on a small instance the planner's shapes, not the jobs, are the cost, so the
    estimate counts at least every shape a cold process prices."""
    from hyperplace.sim import forecast

    inst = make()
    plan = solve_placement(inst, solver="greedy", budget_s=5.0)
    speed.clear_caches()
    need = forecast.forecast_cost_s(inst, plan)
    forecast.forecast_plan(inst, plan)
    priced = speed.planner_stats["plans"]
    assert priced > 0
    assert need >= (forecast.FORECAST_S_PER_JOB * len(inst.jobs)
                    + forecast.FORECAST_S_PER_SHAPE * priced)
