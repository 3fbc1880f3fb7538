"""``hyperplace why JOB`` (#26): one job's answer, its reasons, and checked changes."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hyperplace.check import check
from hyperplace.cli import app
from hyperplace.errors import InputError
from hyperplace.instances import load_instance
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.workflows.why import why_job

runner = CliRunner()


@pytest.fixture(scope="module")
def mixed():
    return load_instance("mixed-a100-h100")


def test_pending_job_gets_the_plans_reasons_and_a_change_that_admits(mixed) -> None:
    answer = why_job(mixed, "tp16-single-node", budget_s=10)
    assert answer.state == "pending"
    assert any("maxHopCount 0" in r for r in answer.reasons), answer.reasons
    admitting = [c for c in answer.changes if c.admits]
    kinds = {c.kind for c in admitting}
    assert kinds & {"hop-limit", "fewer-gpus"}, answer.changes
    assert answer.changes[0].admits  # admitting changes come first
    assert "Smallest change that admits it" in answer.summary


def test_the_hop_limit_change_really_admits_it(mixed) -> None:
    """The claim, checked here independently: maxHopCount 1 lets tp16-single-node in."""
    answer = why_job(mixed, "tp16-single-node", budget_s=10)
    hop = next(c for c in answer.changes if c.kind == "hop-limit")
    assert hop.admits and "maxHopCount 1" in hop.change
    jobs = []
    for j in mixed.jobs:
        if j.name == "tp16-single-node":
            groups = [g.model_copy(update={"inter_node_connectivity":
                                           g.inter_node_connectivity.model_copy(
                                               update={"max_hop_count": 1})})
                      if g.inter_node_connectivity.max_hop_count is not None else g
                      for g in j.spec.resource_groups]
            j = j.model_copy(update={"spec": j.spec.model_copy(
                update={"resource_groups": groups})})
        jobs.append(j)
    changed = mixed.with_jobs(jobs)
    plan = solve_placement(changed, budget_s=10)
    assert check(plan, changed) == []
    assert "tp16-single-node" in {j.job for j in plan.jobs}


def test_missing_type_suggests_a_type_the_cluster_has_with_its_memory(mixed) -> None:
    answer = why_job(mixed, "mi300x-finetune", budget_s=10)
    assert answer.state == "pending"
    typed = [c for c in answer.changes if c.kind == "gpu-type" and c.admits]
    assert typed, answer.changes
    assert "memory floor of 80 GB instead of 192" in typed[0].change


def test_admitted_and_running_jobs_say_so(mixed) -> None:
    plan = solve_placement(mixed, budget_s=10)
    name = plan.jobs[0].job
    answer = why_job(mixed, name, budget_s=10)
    assert answer.state == "admitted" and answer.nodes and not answer.changes
    running = next(v for c in mixed.clusters for n in c.nodes for v in n.allocated.values())
    answer = why_job(mixed, running, budget_s=5)
    assert answer.state == "running" and answer.nodes


def test_unknown_job_names_the_argument_and_the_jobs(mixed) -> None:
    with pytest.raises(InputError, match="no job 'nope'.*pending jobs are") as err:
        why_job(mixed, "nope")
    assert err.value.one_line().startswith("JOB:")


def test_cli_why_prints_for_people_and_json_for_programs() -> None:
    result = runner.invoke(app, ["why", "tp16-single-node", "--budget", "10"],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("hyperplace why: tp16-single-node (mixed-a100-h100): pending")
    assert "would admit it now" in out and "waiting:" in out
    assert max(len(line) for line in out.splitlines()) <= 80
    result = runner.invoke(app, ["why", "tp16-single-node", "--budget", "10", "--format",
                                 "json"])
    doc = json.loads(result.stdout)
    assert doc["kind"] == "JobAnswer" and doc["state"] == "pending"
    assert any(c["admits"] for c in doc["changes"])
    bad = runner.invoke(app, ["why", "nope"])
    assert bad.exit_code == 2 and len(bad.stderr.strip().splitlines()) == 1


def test_service_answers_for_a_stored_cluster(tmp_path) -> None:
    """GET /v1/clusters/{name}/jobs/{job}: the same answer over HTTP; 404 for unknown names."""
    import httpx

    from hyperplace.instances.registry import instance_document
    from hyperplace.service.launch import LocalServer

    with LocalServer(db=tmp_path / "svc.sqlite", workers=1) as srv, \
            httpx.Client(base_url=srv.url, timeout=120) as http:
        put = http.put("/v1/clusters/lab", json=instance_document(load_instance("mixed-a100-h100")))
        assert put.status_code == 200, put.text
        r = http.get("/v1/clusters/lab/jobs/tp16-single-node", params={"budgetS": 10})
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["kind"] == "JobAnswer" and doc["state"] == "pending"
        assert doc["instance"] == "lab" and doc["reasons"]
        assert any(c["admits"] for c in doc["changes"])
        assert http.get("/v1/clusters/lab/jobs/nope").status_code == 404
        missing = http.get("/v1/clusters/nowhere/jobs/x")
        assert missing.status_code == 404 and missing.json()["problems"][0]["path"] == "name"
        assert http.get("/v1/clusters/lab/jobs/x", params={"budgetS": -1}).status_code == 422
        spec = http.get("/openapi.json").json()
        assert "/v1/clusters/{name}/jobs/{job}" in spec["paths"]


def test_forecast_of_the_plan_is_quoted_in_words() -> None:
    from hyperplace.models.plan import Forecast, PlacementPlan
    from hyperplace.solvers.workflows.why import _forecast

    plan = PlacementPlan(status="optimal", solver="cpsat", forecasts=[
        Forecast(job="a", earliest_s=600, latest_s=900, pool="16 H100-80 in leaf t1:leaf-3"),
        Forecast(job="b"), Forecast(job="c", text="starts when ft-x ends (about 2 h)")])
    assert _forecast(plan, "a") == ("planned to start in 10 min to 15 min on 16 H100-80 in "
                                    "leaf t1:leaf-3 by waiting")
    assert _forecast(plan, "b") == "no start within the schedule's reach"
    assert _forecast(plan, "c") == "starts when ft-x ends (about 2 h)"
    assert _forecast(plan, "d") is None


def test_what_ifs_follow_the_reason_and_say_what_the_budget_left_untried(mixed) -> None:
    from hyperplace.solvers.workflows.why import _relevance

    hop = ["group tp needs 16 GPUs with maxHopCount 0 (one node), but the largest ..."]
    assert _relevance("hop-limit", hop) == 0 and _relevance("priority", hop) > 0
    assert _relevance("priority", ["outranked by a (priority 3, 8 GPUs)"]) == 0
    answer = why_job(mixed, "tp16-single-node", budget_s=0.05)  # no time for any what-if
    assert answer.state == "pending" and answer.changes == []
    assert answer.untried and any("maxHopCount" in w for w in answer.untried)


def test_waiting_says_when_from_the_over_time_schedule(mixed) -> None:
    from hyperplace.sim.forecast import forecast_plan

    answer = why_job(mixed, "tp16-single-node", budget_s=2, what_ifs=False,
                     forecaster=forecast_plan)
    assert answer.state == "pending" and answer.forecast
    assert "assumed" in answer.forecast or "in " in answer.forecast
