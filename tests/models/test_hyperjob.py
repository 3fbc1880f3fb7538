"""HyperJob (training.volcano.sh/v1alpha1): parsed in the CRD's shape, checked, named."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError
from typer.testing import CliRunner

from hyperplace.cli import app
from hyperplace.models import HyperJob

DATA = Path(__file__).parents[1] / "data"
SCHEMA = Path(__file__).parents[1] / "data" / "schemas" / "training.volcano.sh_hyperjobs.yaml"


def _load() -> dict:
    return yaml.safe_load((DATA / "hyperjob_llama.yaml").read_text())


def test_hyperjob_parses_and_names_its_children():
    hj = HyperJob.model_validate(_load())
    assert [r.name for r in hj.spec.replicated_jobs] == ["beijing", "elastic"]
    assert hj.child_job_names() == ["llama-3-120b-beijing-0", "llama-3-120b-beijing-1",
                                    "llama-3-120b-elastic-0"]
    assert [r.name for r in hj.auto_split] == ["elastic"]
    assert hj.spec.replicated_jobs[1].split_policy.accelerators == 16
    assert HyperJob.model_validate(hj.to_doc()) == hj  # round trip, camelCase on the wire


def test_hyperjob_fields_match_the_upstream_crd():
    crd = yaml.safe_load(SCHEMA.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    rj = spec["properties"]["replicatedJobs"]["items"]
    ours = HyperJob.model_json_schema(by_alias=True)["$defs"]
    assert set(ours["HyperJobSpec"]["properties"]) == set(spec["properties"])
    assert set(ours["ReplicatedJob"]["properties"]) == set(rj["properties"])
    assert set(ours["SplitPolicy"]["properties"]) == set(rj["properties"]["splitPolicy"]["properties"])
    assert set(rj["required"]) <= set(ours["ReplicatedJob"]["required"])


@pytest.mark.parametrize("change, path", [
    (lambda d: d["spec"]["replicatedJobs"][0].update(replicas=-1), "replicas"),
    (lambda d: d["spec"]["replicatedJobs"][1]["splitPolicy"].update(mode="magic"), "mode"),
    (lambda d: d["spec"]["replicatedJobs"][0].pop("templateSpec"), "templateSpec"),
    (lambda d: d["spec"].update(replicatedJobs=[]), "replicatedJobs"),
])
def test_bad_hyperjobs_are_rejected(change, path):
    doc = _load()
    change(doc)
    with pytest.raises(ValidationError, match=path):
        HyperJob.model_validate(doc)


def test_validate_command_knows_hyperjobs(tmp_path: Path):
    ok = CliRunner().invoke(app, ["validate", str(DATA / "hyperjob_llama.yaml")])
    assert ok.exit_code == 0, ok.output
    assert "3 child Volcano Jobs" in ok.output and "splitPolicy auto" in ok.output
    doc = _load()
    doc["spec"]["replicatedJobs"][1]["name"] = "beijing"
    bad = tmp_path / "dup.yaml"
    bad.write_text(yaml.safe_dump(doc))
    res = CliRunner().invoke(app, ["validate", str(bad)])
    assert res.exit_code != 0
