"""Every manifest ``federate --output`` writes validates against the upstream CRD schemas
(copied to tests/data/schemas with their provenance), and the launch files agree with the
plan."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from hyperplace.federation import federate, load_problem
from hyperplace.federation.generator import federation_instance, member, pipeline_job
from hyperplace.federation.manifests import write_manifests
from hyperplace.federation.problem import FederationProblem, from_hyperjob, from_training_job
from hyperplace.instances.importers.nccl_xml import import_nccl_topology
from hyperplace.models.hyperjob import HyperJob

SCHEMAS = Path(__file__).parents[1] / "data" / "schemas"
CRDS = {
    ("batch.volcano.sh/v1alpha1", "Job"): "batch.volcano.sh_jobs.yaml",
    ("policy.karmada.io/v1alpha1", "PropagationPolicy"): "policy.karmada.io_propagationpolicies.yaml",
    ("training.volcano.sh/v1alpha1", "HyperJob"): "training.volcano.sh_hyperjobs.yaml",
}


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRDs are large


@functools.lru_cache(maxsize=None)
def _validator(api_version: str, kind: str) -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(_schema(api_version, kind))


def _schema(api_version: str, kind: str) -> dict:
    crd = yaml.load((SCHEMAS / CRDS[(api_version, kind)]).read_text(), Loader=_LOADER)
    version = api_version.split("/")[1]
    (v,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    return v["schema"]["openAPIV3Schema"]


def validate_tree(root: Path) -> dict[str, int]:
    """Validate every YAML manifest under ``root``; returns counts per kind."""
    counts: dict[str, int] = {}
    for path in sorted(root.rglob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        if doc.get("apiVersion") == "hyperplace/v1":
            continue  # the plan itself
        _validator(doc["apiVersion"], doc["kind"]).validate(doc)
        counts[doc["kind"]] = counts.get(doc["kind"], 0) + 1
    return counts


def test_seed_manifests_validate_against_the_crds(tmp_path):
    problem = load_problem()
    plan = federate(problem, budget_s=10)
    write_manifests(problem, plan, tmp_path)
    counts = validate_tree(tmp_path)
    assert counts == {"Job": 2, "PropagationPolicy": 2, "HyperJob": 1}
    job_dir = tmp_path / "seed-8layer-pipeline"
    hj = yaml.safe_load((job_dir / "hyperjob.yaml").read_text())
    HyperJob.model_validate(hj)  # and our own model reads it back
    assert {r["clusterNames"][0] for r in hj["spec"]["replicatedJobs"]} == {"beijing", "shanghai"}
    pp = yaml.safe_load((job_dir / "propagation-policy-shanghai.yaml").read_text())
    assert pp["spec"]["placement"]["clusterAffinity"]["clusterNames"] == ["shanghai"]
    vj = yaml.safe_load((job_dir / "volcano-job-shanghai.yaml").read_text())
    assert pp["spec"]["resourceSelectors"][0]["name"] == vj["metadata"]["name"]
    # the child name the HyperJob controller would give: {hyperjob}-{replicatedJob}-{i}
    children = HyperJob.model_validate(hj).child_job_names()
    assert vj["metadata"]["name"] in children
    launch = json.loads((job_dir / "launch" / "launch.json").read_text())
    assert launch["worldSize"] == 16 and launch["pipelineLayers"] == [6, 2]
    assert sorted(r["rank"] for r in launch["ranks"]) == list(range(16))
    assert {r["pipelineRank"] for r in launch["ranks"] if r["cluster"] == "shanghai"} == {1}
    assert "--decoder-first-pipeline-num-layers" in launch["megatronArgs"]
    hostfile = (job_dir / "launch" / "hostfile").read_text().splitlines()
    assert sorted(hostfile) == ["bj-dgx-b200-03 slots=8", "sh-dgx-h100-03 slots=8"]
    # the NCCL topology file reads back through hyperplace's own NCCL XML importer
    node = import_nccl_topology(job_dir / "launch" / "nccl-topo-sh-dgx-h100-03.xml")
    assert node.gpu_count == 8 and node.gpu_type.startswith("H100")


def _hyperjob_doc(accelerators: int = 32, stages: int = 2) -> dict:
    return {
        "apiVersion": "training.volcano.sh/v1alpha1", "kind": "HyperJob",
        "metadata": {"name": "llm", "namespace": "team-a",
                     "annotations": {"hyperplace.io/model": "seed-8layer",
                                     "hyperplace.io/pipeline-stages": str(stages)}},
        "spec": {"replicatedJobs": [
            {"name": "trainer", "splitPolicy": {"mode": "auto", "accelerators": accelerators,
                                                "acceleratorType": "nvidia.com/gpu"},
             "templateSpec": {"tasks": [{"name": "worker", "replicas": 1, "template": {
                 "spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                          "containers": [{"name": "main", "image": "example/train:1",
                                          "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}]}},
            {"name": "evaluator", "replicas": 1, "clusterNames": ["x"],
             "splitPolicy": {"mode": "static"},
             "templateSpec": {"tasks": [{"name": "eval", "replicas": 1}]}},
        ]},
    }


def test_hyperjob_auto_split_filled_in_and_valid(tmp_path):
    clusters = [member("x", "H100-80", 2), member("y", "H100-80", 2),
                member("z", "H100-80", 1)]
    inst = federation_instance("hj", clusters, [("x", "y", 400.0, 5.0), ("y", "z", 400.0, 5.0),
                                                ("x", "z", 400.0, 5.0)])
    jobs = from_hyperjob(HyperJob.model_validate(_hyperjob_doc(accelerators=32, stages=2)))
    problem = FederationProblem(inst, jobs, max_slowdown=10)
    plan = federate(problem, budget_s=10)
    assert [j.job for j in plan.jobs] == ["llm-trainer"]
    write_manifests(problem, plan, tmp_path)
    counts = validate_tree(tmp_path)
    assert counts["HyperJob"] == 1 and counts["Job"] == counts["PropagationPolicy"] >= 2
    hj = yaml.safe_load((tmp_path / "llm-trainer" / "hyperjob.yaml").read_text())
    names = [r["name"] for r in hj["spec"]["replicatedJobs"]]
    assert "evaluator" in names  # static replicated jobs are kept as written
    split = [r for r in hj["spec"]["replicatedJobs"] if r["name"].startswith("trainer-")]
    assert sum(r["splitPolicy"]["accelerators"] for r in split) == 32
    assert all(r["splitPolicy"]["mode"] == "static" for r in split)
    # Volcano Global: acceleratorType is the resource name; the model is the nodeSelector
    assert all(r["splitPolicy"]["acceleratorType"] == "nvidia.com/gpu" for r in split)
    pod = split[0]["templateSpec"]["tasks"][0]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert jobs[0].job.spec.resource_groups[0].gpu_requirements.accelerator_type == "H100-80"
    image = split[0]["templateSpec"]["tasks"][0]["template"]["spec"]["containers"][0]["image"]
    assert image == "example/train:1"
    for f in (tmp_path / "llm-trainer").glob("volcano-job-*.yaml"):
        vj = yaml.safe_load(f.read_text())
        assert vj["metadata"]["namespace"] == "team-a"
        assert vj["spec"]["minAvailable"] == sum(t["replicas"] for t in vj["spec"]["tasks"])


@pytest.mark.parametrize("gbps", [400.0])
def test_data_parallel_manifests_validate(tmp_path, gbps):
    clusters = [member("east", "H100-80", 2), member("west", "H100-80", 2)]
    inst = federation_instance("dp", clusters, [("east", "west", gbps, 5.0)])
    problem = FederationProblem(inst, [from_training_job(
        pipeline_job("dp-job", "llama3-8b", stages=1, replicas=4))])
    plan = federate(problem, budget_s=10)
    write_manifests(problem, plan, tmp_path)
    assert validate_tree(tmp_path) == {"Job": 2, "PropagationPolicy": 2, "HyperJob": 1}
    launch = json.loads((tmp_path / "dp-job" / "launch" / "launch.json").read_text())
    assert launch["dataParallel"] == 4 and launch["worldSize"] == 32
    assert sorted({r["dataParallelRank"] for r in launch["ranks"]}) == [0, 1, 2, 3]


def test_the_schema_check_can_fail():
    """The validator is not vacuous: a wrong type in a PropagationPolicy is caught."""
    bad = {"apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
           "metadata": {"name": "x"},
           "spec": {"resourceSelectors": [{"apiVersion": "v1", "kind": "Job"}],
                    "placement": {"spreadConstraints": [{"maxGroups": "one"}]}}}
    with pytest.raises(jsonschema.ValidationError):
        _validator(bad["apiVersion"], bad["kind"]).validate(bad)
    with pytest.raises(jsonschema.ValidationError):  # resourceSelectors need apiVersion+kind
        _validator(bad["apiVersion"], bad["kind"]).validate(
            {**bad, "spec": {"resourceSelectors": [{"name": "x"}]}})
