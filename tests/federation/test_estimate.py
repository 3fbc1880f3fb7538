"""`hyperplace estimate`: Karmada's estimator question, totals vs as placed, with reasons."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from hyperplace.cli import app
from hyperplace.federation.estimate import estimate
from hyperplace.federation.generator import federation_instance, member, pipeline_job
from hyperplace.federation.problem import from_training_job
from hyperplace.io import dump_yaml

runner = CliRunner()


def _fragmented():
    frag = member("frag", "H100-80", 8, busy={i: 6 for i in range(8)})  # 2 free per node
    whole = member("whole", "H100-80", 2)
    return federation_instance("frag", [frag, whole], [("frag", "whole", 100.0, 5.0)])


def test_totals_fit_but_no_node_does_and_the_estimate_says_why():
    job = from_training_job(pipeline_job("j", "seed-8layer", stages=2, nvlink_gbps=900))
    report = estimate(_fragmented(), job)
    by = {c.cluster: c for c in report.clusters}
    assert by["frag"].free_gpus == 16
    assert by["frag"].totals_replicas == 1  # Karmada's general estimator: 16 // 16
    assert by["frag"].placed_replicas == 0
    assert "no node has that many free" in by["frag"].reason
    assert "8 nodes with 2 free" in by["frag"].reason
    assert by["whole"].totals_replicas == by["whole"].placed_replicas == 1
    assert by["whole"].reason == ""
    tmpl = {t.template: t for t in by["frag"].templates}
    assert tmpl["tensor-parallel-group"].totals_units == 2
    assert tmpl["tensor-parallel-group"].placed_units == 0


def test_per_template_units_differ_when_templates_differ():
    """Component sets of unequal templates (karmada issue 4049): a 4-GPU and an 8-GPU group."""
    inst = federation_instance("t", [member("c", "H100-80", 2, busy={0: 4, 1: 4})], [])
    tj = pipeline_job("mixed", "seed-8layer", stages=2)
    groups = list(tj.spec.resource_groups)
    groups[1] = groups[1].model_copy(update={"gpus_per_group": 4})
    tj = tj.model_copy(update={"spec": tj.spec.model_copy(update={"resource_groups": groups})})
    report = estimate(inst, from_training_job(tj))
    (c,) = report.clusters
    tmpl = {t.template: t for t in c.templates}
    assert tmpl["tensor-parallel-group"].placed_units == 0  # no node has 8 free
    assert tmpl["pipeline-stage-1"].placed_units == 2
    assert c.totals_replicas == 0 and c.placed_replicas == 0


def test_cli_estimate_json_and_a_job_file(tmp_path):
    fed = tmp_path / "fed.yaml"
    fed.write_text(dump_yaml(_fragmented().to_doc()))
    job = tmp_path / "job.yaml"
    job.write_text(dump_yaml(pipeline_job("j", "seed-8layer", stages=2,
                                          nvlink_gbps=900).to_doc()))
    result = runner.invoke(app, ["estimate", "--instance", str(fed), "--job", str(job),
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["kind"] == "EstimateReport"
    assert {c["cluster"]: c["placedReplicas"] for c in doc["clusters"]} == {"frag": 0, "whole": 1}


def test_cli_estimate_seed_table():
    result = runner.invoke(app, ["estimate", "-i", "seed-beijing-shanghai", "-j",
                                 "seed-8layer-pipeline"])
    assert result.exit_code == 0, result.output
    assert "beijing" in result.output and "shanghai" in result.output
