"""Domain models: validation rules, round-trips, the seed manifest, fabrics and tiers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hyperplace.errors import InputError
from hyperplace.instances.registry import instance_from_documents, render_instance
from hyperplace.io import load_documents, parse
from hyperplace.models import Cluster, FabricGenerator, FabricSpec, Instance, Node, TrainingJob
from hyperplace.models.fabric import (
    fat_tree_three_tier,
    fat_tree_two_tier,
    superpod_rail_optimized,
)
from hyperplace.models.gpu import GPUCatalog


def _seed(path: Path) -> TrainingJob:
    (doc,) = load_documents(path)
    return parse(TrainingJob, doc, source=str(path))


# ---- the seed manifest -----------------------------------------------------------------

def test_seed_manifest_is_parsed_verbatim(seed_job_path: Path) -> None:
    job = _seed(seed_job_path)
    assert job.name == "llama-3-120b-finetune"
    assert job.spec.model == "llama3-120b"
    assert job.spec.replica_count == 20
    assert job.spec.checkpoint_strategy == "s3-async"
    assert job.priority > TrainingJob.model_validate(
        {**job.to_doc(), "spec": {**job.spec.to_doc(), "priority": "normal"}}).priority
    tp, dp = job.spec.resource_groups
    assert (tp.type, tp.gpus_per_group) == ("TensorParallel", 8)
    assert tp.gpu_requirements.min_nvlink_bandwidth_gbps_per_pair == 900
    assert tp.inter_node_connectivity.max_hop_count == 1
    assert (dp.type, dp.gpus_per_group) == ("DataParallel", 1)
    assert dp.inter_node_connectivity.min_infiniband_bandwidth_gbps == 200
    assert job.spec.tolerations[0].value == "h100|a100"


def test_seed_expands_into_20_units_of_8_h100(seed_job_path: Path) -> None:
    units = _seed(seed_job_path).units()
    assert len(units) == 20
    assert {u.gpus for u in units} == {8}
    assert sum(u.gpus for u in units) == 160
    # acceleratorType and the toleration both hold: their intersection is H100
    (selector,) = {u.gpu_types for u in units}
    allowed = {t.family for t in GPUCatalog() if t.matches(selector)}
    assert allowed == {"H100"}
    assert {u.min_memory_gb for u in units} == {80}
    assert {u.min_nvlink_gbps for u in units} == {900}
    assert {u.max_hop_count for u in units} == {1}
    assert len({u.name for u in units}) == 20


# ---- validation rules ----------------------------------------------------------------------

def _job(**spec_changes: object) -> dict:
    spec = {"model": "m", "replicaCount": 2, "resourceGroups": [
        {"name": "tp", "type": "TensorParallel", "gpusPerGroup": 8},
        {"name": "dp", "type": "DataParallel", "gpusPerGroup": 1}]}
    spec.update(spec_changes)
    return {"apiVersion": "ai.example.com/v1alpha1", "kind": "FoundationModelTrainingJob",
            "metadata": {"name": "j"}, "spec": spec}


@pytest.mark.parametrize(("doc", "path", "problem"), [
    (_job(replicaCount=0), "spec.replicaCount", "greater than 0"),
    (_job(resourceGroups=[{"name": "tp", "type": "TensorParallel", "gpusPerGroup": -8}]),
     "spec.resourceGroups[0].gpusPerGroup", "greater than 0"),
    (_job(resourceGroups=[{"name": "tp", "type": "Tensor", "gpusPerGroup": 8}]),
     "spec.resourceGroups[0].type", "Input should be"),
    (_job(priority="urgent"), "spec.priority", "unknown priority"),
    (_job(replicas=3), "spec.replicas", "unknown field"),
    (_job(resourceGroups=[]), "spec.resourceGroups", "at least 1"),
])
def test_job_validation_names_the_field(doc: dict, path: str, problem: str) -> None:
    with pytest.raises(InputError) as err:
        parse(TrainingJob, doc, source="j.yaml")
    assert err.value.path == path
    assert problem in err.value.message


def test_data_parallel_beside_tensor_parallel_must_be_one() -> None:
    doc = _job(resourceGroups=[{"name": "tp", "type": "TensorParallel", "gpusPerGroup": 8},
                               {"name": "dp", "type": "DataParallel", "gpusPerGroup": 2}])
    with pytest.raises(InputError, match="must be 1"):
        parse(TrainingJob, doc)


@pytest.mark.parametrize(("node", "problem"), [
    ({"allocated": {9: "x"}}, "outside 0..7"),
    ({"faulty": [8]}, "outside 0..7"),
    ({"nvlink": "hybrid_cube_mesh", "gpuCount": 4}, "gpu_count 8"),
    ({"gpuCount": 0}, "greater than 0"),
])
def test_node_rules(node: dict, problem: str) -> None:
    with pytest.raises(InputError, match=problem):
        parse(Node, {"name": "n", "gpuType": "H100-80", "gpuCount": 8, **node})


def _instance_doc(**cluster: object) -> dict:
    base = {"name": "c", "nodes": [{"name": "n0", "gpuType": "H100-80", "gpuCount": 8}]}
    base.update(cluster)
    return {"apiVersion": "hyperplace/v1", "kind": "Instance", "metadata": {"name": "i"},
            "spec": {"clusters": [base]}}


@pytest.mark.parametrize(("doc", "line"), [
    (_instance_doc(nodes=[{"name": "n0", "gpuType": "X9000", "gpuCount": 8}]),
     "i.yaml: spec.clusters[0].nodes[0].gpuType: unknown GPU type 'X9000'"),
    (_instance_doc(fabric={"links": [{"a": "n0", "b": "leaf9", "gbps": 400}]}),
     "i.yaml: spec.clusters[0].fabric.links[0].b: 'leaf9' is neither a switch nor a node"),
    (_instance_doc(fabric={"switches": [{"name": "s"}],
                           "links": [{"a": "n0", "b": "s", "gbps": -400}]}),
     "i.yaml: spec.clusters[0].fabric.links[0].gbps: Input should be greater than 0"),
    ({**_instance_doc(), "spec": {**_instance_doc()["spec"], "interClusterLinks": [
        {"a": "c", "b": "elsewhere", "gbps": 100}]}},
     "i.yaml: spec.interClusterLinks[0].b: unknown cluster 'elsewhere'"),
])
def test_instance_errors_point_at_the_field(doc: dict, line: str) -> None:
    with pytest.raises(InputError) as err:
        instance_from_documents([doc], "i.yaml")
    assert err.value.one_line().startswith(line)


# ---- round trips -----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_instance_round_trips(tmp_path: Path, seed_job_path: Path, fmt: str) -> None:
    doc = _instance_doc(nodes=[
        {"name": "n0", "gpuType": "H100-80", "gpuCount": 8, "allocated": {0: "a", 5: "b"},
         "faulty": [7]},
        {"name": "n1", "gpuType": "V100-32", "gpuCount": 8, "nvlink": "hybrid_cube_mesh"}],
        fabric={"generator": {"type": "fat-tree-2", "nodesPerLeaf": 1, "spines": 2}})
    doc["spec"]["jobs"] = [_seed(seed_job_path).to_doc()]
    original = instance_from_documents([doc], "i.yaml")
    path = tmp_path / f"i.{fmt}"
    path.write_text(render_instance(original, fmt))
    again = instance_from_documents(load_documents(path), str(path))
    assert again == original
    assert again.clusters[0].nodes[0].allocated == {0: "a", 5: "b"}


# ---- fabrics: hop counts, bottlenecks and tiers ------------------------------------------------

def _names(n: int) -> list[str]:
    return [f"n{i:04d}" for i in range(n)]


@pytest.mark.parametrize("nodes", [16, 64])
def test_fat_tree_two_tier_hops(nodes: int) -> None:
    fabric = fat_tree_two_tier(_names(nodes), nodes_per_leaf=8, spines=4, node_gbps=400,
                               uplink_gbps=200)
    assert fabric.path("n0000", "n0007") == (1, 400)
    # leaf-spine-leaf: 3 switches; the bottleneck is an uplink (200 x 2 bonded)
    assert fabric.path("n0000", f"n{nodes - 1:04d}") == (3, 400)
    assert fabric.hop_count("n0003", "n0003") == 0
    assert fabric.radii == [1, 3]
    assert len(fabric.domains(1)) == nodes // 8
    assert all(len(members) == 8 for members in fabric.domains(1).values())
    assert len(fabric.domains(3)) == 1


def test_fat_tree_two_tier_bottleneck_is_the_narrowest_hop() -> None:
    fabric = fat_tree_two_tier(_names(16), nodes_per_leaf=8, spines=8, node_gbps=400,
                               uplink_gbps=100)
    assert fabric.path("n0000", "n0015") == (3, 100)


@pytest.mark.parametrize("nodes", [64, 128])
def test_fat_tree_three_tier_hops(nodes: int) -> None:
    fabric = fat_tree_three_tier(_names(nodes), nodes_per_leaf=8, leaves_per_pod=4,
                                 spines_per_pod=4, cores=4)
    assert fabric.hop_count("n0000", "n0001") == 1
    assert fabric.hop_count("n0000", "n0031") == 3  # same pod (4 leaves x 8 nodes)
    assert fabric.hop_count("n0000", "n0032") == 5  # next pod, through a core
    assert fabric.radii == [1, 3, 5]
    assert len(fabric.domains(1)) == nodes // 8
    assert len(fabric.domains(3)) == nodes // 32
    assert len(fabric.domains(5)) == 1


@pytest.mark.parametrize(("nodes", "radii", "tier_counts"), [
    (64, [1, 3], [2, 1]),
    (512, [1, 3, 5], [16, 2, 1]),
])
def test_superpod_rail_hops_and_tiers(nodes: int, radii: list[int],
                                      tier_counts: list[int]) -> None:
    fabric = superpod_rail_optimized(_names(nodes), nodes_per_su=32, nic_gbps=400)
    assert fabric.path("n0000", "n0031") == (1, 400)  # same scalable unit, one rail leaf
    assert fabric.path("n0000", "n0032") == (3, 400)  # next SU, via the rail spine
    if nodes > 256:
        assert fabric.path("n0000", "n0256") == (5, 400)  # next spine group, via a core
    assert fabric.radii == radii
    assert [len(fabric.domains(r)) for r in radii] == tier_counts
    assert all(len(m) == 32 for m in fabric.domains(1).values())


def test_cluster_fabric_generator_applies_to_its_nodes() -> None:
    nodes = [Node(name=n, gpu_type="H100-80", gpu_count=8) for n in _names(40)]
    cluster = Cluster(name="c", nodes=nodes,
                      fabric=FabricSpec(generator=FabricGenerator(type="fat-tree-2",
                                                                  nodes_per_leaf=8)))
    assert cluster.network.kind == "fat-tree-2"
    assert cluster.network.node_domain("n0039", 1) == cluster.network.node_domain("n0032", 1)
    assert cluster.network.node_domain("n0039", 1) != cluster.network.node_domain("n0031", 1)


def test_instance_rejects_duplicate_jobs(seed_job_path: Path) -> None:
    doc = _instance_doc()
    job = _seed(seed_job_path).to_doc()
    doc["spec"]["jobs"] = [job, job]
    with pytest.raises(InputError, match="duplicate job name"):
        instance_from_documents([doc], "i.yaml")
    assert isinstance(instance_from_documents([_instance_doc()], "i.yaml"), Instance)


# ---- units in key names: GB/s keys say gigabytes (the old "gbps" read like Gb/s) ---------

_TYPE = {"name": "X1", "family": "X1", "bf16Tflops": 1, "hbmGb": 80, "hbmTbS": 2,
         "nicGbps": 400}


@pytest.mark.parametrize("model, doc, old, new, attr", [
    ("GPUPair", {"a": 0, "b": 1}, "gbps", "gigabytesPerSecond", "gigabytes_per_second"),
    ("Node", {"name": "n", "gpuType": "H100-80", "gpuCount": 8}, "nvlinkGbps",
     "nvlinkGigabytesPerSecond", "nvlink_gbps"),
    ("GPUType", _TYPE, "nvlinkGbps", "nvlinkGigabytesPerSecond", "nvlink_gbps"),
    ("NVLinkDomain", {"name": "d", "nodes": ["t0"]}, "gbpsPerGpu", "gigabytesPerSecondPerGpu",
     "gbps_per_gpu"),
])
def test_gigabyte_keys_say_so_and_the_old_key_is_still_read(model, doc, old, new,
                                                            attr) -> None:
    """The models read both spellings (a service body too) and write the new one; the file
    readers warn about the old one (tests/commands/test_hardening.py)."""
    import hyperplace.models as models
    from hyperplace.models.nvlink import NVLinkDomain

    cls = NVLinkDomain if model == "NVLinkDomain" else getattr(models, model)
    current = cls.model_validate({**doc, new: 900.0})
    assert getattr(current, attr) == 900.0
    assert new in current.model_dump(by_alias=True) and old not in current.to_doc()
    assert cls.model_validate({**doc, old: 900.0}) == current
    assert cls.model_validate_json(json.dumps({**doc, old: 900.0}), strict=True) == current
