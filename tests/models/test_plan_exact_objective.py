"""Objective 1 is an integer and the plan keeps it exact (review R18): with many priority
levels it passes 2**53, where a double has no exact integers left."""

from __future__ import annotations

import json

import yaml

from hyperplace.check import check
from hyperplace.instances.registry import load_instance
from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.priority import priority_weights
from hyperplace.solvers.driver import solve_placement

LEVELS = 60  # one 1-GPU job per level: weights 1, 2, 4, ... so objective 1 is 2**60 - 1


def _many_levels() -> Instance:
    d = load_instance("mixed-a100-h100").model_dump(by_alias=True, mode="json")
    template = d["spec"]["jobs"][0]
    jobs = []
    for i in range(LEVELS):
        job = json.loads(json.dumps(template))
        job["metadata"] = {"name": f"level-{i}"}
        job["spec"]["priority"] = i + 1
        job["spec"]["replicaCount"] = 1
        job["spec"]["resourceGroups"] = [{"name": "w", "type": "DataParallel",
                                          "gpusPerGroup": 1}]
        jobs.append(job)
    d["spec"]["jobs"] = jobs
    return Instance.model_validate(d)


def test_objective_past_two_to_the_53_is_exact_in_json_and_yaml():
    inst = _many_levels()
    plan = solve_placement(inst, budget_s=10)
    assert check(plan, inst) == []
    free = sum(n.free_count for c in inst.clusters for n in c.nodes)
    weights = priority_weights([(j.priority, j.total_gpus) for j in inst.jobs], free)
    admitted = {j.job for j in plan.jobs}
    exact = sum(weights[j.priority] * j.total_gpus for j in inst.jobs if j.name in admitted)
    assert len(admitted) == LEVELS and exact == 2**LEVELS - 1 > 2**53
    assert float(exact) != exact  # a double would not hold it
    wire = json.loads(plan.model_dump_json(by_alias=True))
    assert wire["objective"] == exact
    assert wire["objectiveTerms"]["admitted_priority_demand"] == exact
    assert wire["bound"] >= exact  # proven: the bound is the objective itself
    assert yaml.safe_load(yaml.safe_dump(plan.model_dump(by_alias=True, mode="json")))[
        "objective"] == exact
    back = PlacementPlan.model_validate(wire)  # read back (check, the service) exactly
    assert back.objective == exact and check(back, inst) == []
