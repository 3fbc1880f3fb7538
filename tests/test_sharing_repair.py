"""Repair after failures (#14): keep healthy units in place when the hop rules allow, else
move the whole job; every repair plan through the checker, every backend."""

from __future__ import annotations

import pytest

from hyperplace.check import check
from hyperplace.models.instance import RunningJob
from hyperplace.solvers.repair import repair, repair_instance
from placement_helpers import instance, job, node


def _setup(spare_in_leaf: bool):
    # leaves of three nodes; "train" (2 x 8 GPUs, replicas within one leaf) on n0 and n1
    held = {g: "train" for g in range(8)}
    nodes = [node("n0", allocated=held), node("n1", allocated=held),
             node("n2", allocated={} if spare_in_leaf else {g: "other" for g in range(8)}),
             node("n3"), node("n4"), node("n5")]
    inst = instance(nodes, [], nodes_per_leaf=3)
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name="train", checkpoint_age_s=60), RunningJob(name="other")]})
    return inst.model_copy(update={"spec": spec}), job("train", replicas=2, dp_hop=2)


def _checked(inst, spec, failed, result):
    rinst = repair_instance(inst, [spec], failed)
    assert check(result.plan, rinst) == []


def test_repair_keeps_the_healthy_unit_in_place(solver):
    inst, spec = _setup(spare_in_leaf=True)
    failed = [("n1", 3)]
    result = repair(inst, [spec], failed, solver=solver)
    _checked(inst, spec, failed, result)
    (r,) = result.jobs
    assert r.placed and r.kept_units == ["tp/0"] and r.gpus_moved == 8
    assert r.lost_gpu_seconds == 16 * 60
    assert {g.node for p in result.plan.placements if p.unit == "tp/1" for g in p.gpus} == {"n2"}


def test_repair_moves_the_whole_job_when_no_replacement_is_near(solver):
    inst, spec = _setup(spare_in_leaf=False)
    failed = [("n1", None)]
    result = repair(inst, [spec], failed, solver=solver)
    _checked(inst, spec, failed, result)
    (r,) = result.jobs
    assert r.placed and r.kept_units == [] and r.gpus_moved == 16
    nodes = {g.node for p in result.plan.placements for g in p.gpus}
    assert nodes <= {"n3", "n4", "n5"}


def test_replace_all_moves_at_least_as_much():
    inst, spec = _setup(spare_in_leaf=True)
    minimal = repair(inst, [spec], [("n1", 3)], solver="cpsat")
    everything = repair(inst, [spec], [("n1", 3)], solver="cpsat", strategy="replace-all")
    _checked(inst, spec, [("n1", 3)], everything)
    assert minimal.gpus_moved <= everything.gpus_moved


def test_repair_refuses_bad_input():
    inst, spec = _setup(spare_in_leaf=True)
    with pytest.raises(ValueError, match="unknown node"):
        repair(inst, [spec], [("nx", 0)])
    with pytest.raises(ValueError, match="no GPU 9"):
        repair(inst, [spec], [("n1", 9)])
    with pytest.raises(ValueError, match="unknown repair strategy"):
        repair(inst, [spec], [("n1", 1)], strategy="pray")
