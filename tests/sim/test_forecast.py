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


@pytest.mark.parametrize("text, seconds", [
    ("90", 90.0), ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0), ("2H", 7200.0),
    ("1h30m", 5400.0), ("1.5h", 5400.0), ("2h45m30.5s", 9930.5), ("1500ms", 1.5),
    ("1.5d", 129600.0), ("PT2H", 7200.0), ("P1DT2H30M", 95400.0), ("PT90S", 90.0),
    (" 90m ", 5400.0)])
def test_a_run_time_reads_go_and_iso_8601_durations(text, seconds):
    from hyperplace.sim.forecast import parse_duration

    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["1w", "90 min", "1h30", "PT", "P1Y", "-1h", "nan", "m30",
                                  "1h-30m", ""])
def test_a_run_time_that_is_no_duration_is_refused_with_the_forms(text):
    from hyperplace.sim.forecast import parse_duration

    with pytest.raises(ValueError, match="must be a duration such as 90m, 2h, 1h30m, got"):
        parse_duration(text)


@pytest.mark.parametrize("budget", [None, "MIN"])
def test_solve_names_the_job_field_of_a_duration_it_cannot_read(tmp_path, capsys, budget):
    """Whatever the budget: at the least budget solve takes the forecasts are left out
    (no time for them), and a bad annotation was accepted there (review of 4808926)."""
    import yaml

    from hyperplace.commands.solve import MIN_BUDGET_S

    from cli_run import run_main

    inst = load_instance("mixed-a100-h100")
    jobs = list(inst.spec.jobs)
    for i, text in ((0, "1h30m"), (1, "1w")):
        meta = jobs[i].metadata
        jobs[i] = jobs[i].model_copy(update={"metadata": meta.model_copy(update={
            "annotations": {**meta.annotations, "hyperplace.io/duration": text}})})
    doc = inst.model_copy(update={"spec": inst.spec.model_copy(update={"jobs": jobs})})
    path = tmp_path / "inst.yaml"
    path.write_text(yaml.safe_dump(doc.model_dump(mode="json", by_alias=True)))
    extra = [] if budget is None else ["--budget", str(MIN_BUDGET_S)]
    code = run_main(["solve", "-i", str(path), *extra])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0] == (f"error: spec.jobs[1].metadata.annotations.hyperplace.io/duration: must "
                      f"be a duration such as 90m, 2h, 1h30m, got '1w' (job {jobs[1].name})")


def test_solve_forecasts_with_the_engines_list_order_and_wait_weight():
    from hyperplace.sim import forecast, planning

    assert (forecast.ENGINE_ORDER, forecast.ENGINE_AGING_S, forecast.ENGINE_WAIT_WEIGHT) == \
        (planning.ORDER, planning.AGING_S, planning.WAIT_WEIGHT)


def test_room_promises_are_shown_while_mostly_kept():
    from hyperplace.sim.forecast import (
        ROOM_PROMISE_KEEP,
        ROOM_PROMISE_MIN,
        RoomPromises,
    )

    p = RoomPromises()
    assert p.shown()  # nothing resolved yet
    p.record(0.0, {}, {"a": 100.0, "b": 100.0})
    p.record(60.0, {"a": 90.0}, {"b": 500.0})  # a kept; b keeps its first window
    assert p.open == {"b": 100.0} and p.resolved == [True]
    p.record(120.0, {}, {})  # b's window passed with b waiting: broken
    assert p.resolved == [True, False] and not p.open
    p.record(180.0, {"c": 180.0}, {})  # a start with no forecast open resolves nothing
    assert p.resolved == [True, False]
    for k in range(ROOM_PROMISE_MIN):
        p.record(200.0 + k, {}, {f"x{k}": 150.0})  # opened, already past at the next round
    p.record(300.0, {}, {})
    assert p.resolved.count(False) == 1 + ROOM_PROMISE_MIN and not p.shown()
    for k in range(ROOM_PROMISE_KEEP):  # the old ones drop out of the rate
        p.record(400.0 + k, {f"y{k - 1}": 400.0 + k} if k else {}, {f"y{k}": 1e9})
    assert p.shown() and len(p.resolved) == ROOM_PROMISE_KEEP
