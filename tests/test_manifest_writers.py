"""Writers (#23): a plan as DRA ResourceClaims + Volcano Jobs + Kueue TopologyAssignment, and
as sbatch scripts; every written object validates against its upstream schema (shipped in
tests/data/schemas), and the round trip holds: read a cluster from Kubernetes objects, solve,
write the manifests, read them back: the same placements."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import jsonschema
import yaml

from cli_run import run_main
from hyperplace.check import check
from hyperplace.instances.registry import instance_from_documents
from hyperplace.instances.writers import kubernetes_manifests, placements_from_manifests, \
    sbatch_script
from hyperplace.io import load_documents
from hyperplace.solvers.driver import solve_placement

DATA = Path(__file__).parent / "data"
K8S = DATA / "k8s"
SCHEMAS = DATA / "schemas"
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=None)
def _crd(file: str, version: str) -> dict:
    crd = yaml.load((SCHEMAS / file).read_text(), Loader=_LOADER)
    return next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"][
        "openAPIV3Schema"]


def validate(doc: dict) -> None:
    if doc["kind"] == "ResourceClaim":
        schema = json.loads((SCHEMAS / "resource.k8s.io_v1_resourceclaim.json").read_text())
        jsonschema.Draft202012Validator(schema).validate(doc)
    elif doc["kind"] == "Job":
        jsonschema.Draft7Validator(_crd("batch.volcano.sh_jobs.yaml", "v1alpha1")).validate(doc)
        ta = json.loads(doc["metadata"]["annotations"]["kueue.x-k8s.io/topology-assignment"])
        wl = _crd("kueue.x-k8s.io_workloads.yaml", "v1beta1")
        sub = wl["properties"]["status"]["properties"]["admission"]["properties"][
            "podSetAssignments"]["items"]["properties"]["topologyAssignment"]
        jsonschema.Draft7Validator(sub).validate(ta)
    else:
        raise AssertionError(doc["kind"])


def _vks_cluster_docs() -> list[dict]:
    """The two nodes the VKS ResourceSlices describe, as Node objects, + the slices."""
    slices = load_documents(K8S / "resourceslices-vks-a100.yaml")
    nodes = []
    for i, sl in enumerate(slices[0]["items"]):
        name = sl["spec"]["nodeName"]
        nodes.append({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "cloud.provider.com/topology-block": "b1",
            "cloud.provider.com/topology-rack": f"r{i}",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}},
            "status": {"capacity": {"nvidia.com/gpu": "1"}}})
    return [{"apiVersion": "v1", "kind": "List", "items": nodes}, *slices]


def _gpu_job(parallelism: int, gpus: int, name: str = "tas-sample-required") -> dict:
    (doc,) = load_documents(K8S / "kueue-sample-job-required.yaml")
    doc = copy.deepcopy(doc)
    doc["metadata"]["name"] = name
    doc["spec"]["parallelism"] = doc["spec"]["completions"] = parallelism
    doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] = {
        "nvidia.com/gpu": gpus}
    del doc["spec"]["template"]["metadata"]["annotations"]  # one rack each: no rack limit
    return doc


def _round_trip(docs: list[dict]) -> tuple:
    inst = instance_from_documents(docs, "round-trip")
    plan = solve_placement(inst, budget_s=10)
    assert plan.jobs and check(plan, inst) == []
    written = kubernetes_manifests(inst, plan)
    flat = [d for ds in written.values() for d in ds]
    for d in flat:
        validate(d)
    # write, read back from YAML text, and compare with the plan
    text = "---\n".join(yaml.safe_dump(d) for d in flat)
    back = placements_from_manifests(list(yaml.safe_load_all(text)), inst)
    want: dict[str, dict[str, list[int]]] = {}
    for up in plan.placements:
        for g in up.gpus:
            want.setdefault(up.job, {}).setdefault(g.node, []).append(g.gpu)
    assert back == {j: {n: sorted(v) for n, v in d.items()} for j, d in want.items()}
    return inst, plan, flat


def test_round_trip_with_device_uuids_from_resourceslices():
    inst, plan, flat = _round_trip([*_vks_cluster_docs(), _gpu_job(2, 1)])
    claims = [d for d in flat if d["kind"] == "ResourceClaim"]
    assert len(claims) == 2
    exprs = sorted(c["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
                   ["expression"] for c in claims)
    # the NVIDIA DRA driver's uuid attribute, the UUIDs its ResourceSlices published
    assert exprs == ["device.attributes['gpu.nvidia.com'].uuid in "
                     "['GPU-0b580e61-4daa-462a-95e3-84dd00000000']",
                     "device.attributes['gpu.nvidia.com'].uuid in "
                     "['GPU-44d2411e-1604-478f-aa96-5a3c00000000']"]
    assert all(c["metadata"]["annotations"]["hyperplace.io/exact"] == "true" for c in claims)
    (job,) = [d for d in flat if d["kind"] == "Job"]
    assert job["spec"]["minAvailable"] == 2
    assert job["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}
    ta = json.loads(job["metadata"]["annotations"]["kueue.x-k8s.io/topology-assignment"])
    assert ta["levels"] == ["cloud.provider.com/topology-block",
                            "cloud.provider.com/topology-rack", "kubernetes.io/hostname"]
    assert sum(d["count"] for d in ta["domains"]) == 2
    # the plan's own topologyAssignment uses the same levels (GPU counts)
    assert plan.jobs[0].topology_assignment.levels == ta["levels"]


def test_round_trip_on_kueue_kind_cluster_with_running_pods():
    docs = [*load_documents(K8S / "nodes-kueue-tas-h100.json"),
            *load_documents(K8S / "pods-running.json"),
            *load_documents(K8S / "volcano-mindspore-gpu.yaml"), _gpu_job(3, 8)]
    inst, plan, flat = _round_trip(docs)
    assert {j.job for j in plan.jobs} == {"mindspore-gpu", "tas-sample-required"}
    # no ResourceSlices: the node is pinned, the claim counts GPUs and says it is not exact
    claim = next(d for d in flat if d["kind"] == "ResourceClaim")
    assert claim["metadata"]["annotations"]["hyperplace.io/exact"] == "false"


def test_kueue_topology_levels_are_the_users():
    topo = load_documents(K8S / "kueue-sample-gpu-queues.yaml")[0]
    docs = [*load_documents(K8S / "nodes-kueue-tas-h100.json"), _gpu_job(2, 8)]
    inst = instance_from_documents(docs, "x")
    plan = solve_placement(inst, budget_s=5)
    (job,) = [d for ds in kubernetes_manifests(inst, plan, topology=topo).values() for d in ds
              if d["kind"] == "Job"]
    ta = json.loads(job["metadata"]["annotations"]["kueue.x-k8s.io/topology-assignment"])
    assert ta["levels"] == [lv["nodeLabel"] for lv in topo["spec"]["levels"]]
    nodes = {d["values"][2] for d in ta["domains"]}
    assert nodes == {n for up in plan.placements for n in {g.node for g in up.gpus}}


def test_sbatch_names_nodes_gpus_and_switches():
    docs = [*load_documents(K8S / "nodes-kueue-tas-h100.json"), _gpu_job(2, 4)]
    inst = instance_from_documents(docs, "x")
    plan = solve_placement(inst, budget_s=5)
    text = sbatch_script(inst, plan, "tas-sample-required")
    nodes = sorted({g.node for up in plan.placements for g in up.gpus})
    assert f"#SBATCH --nodelist={','.join(nodes)}" in text
    assert "#SBATCH --switches=1" in text  # both pods under one rack or on one node
    for up in plan.placements:
        gpus = ",".join(str(g.gpu) for g in sorted(up.gpus, key=lambda g: g.gpu))
        assert f"CUDA_VISIBLE_DEVICES={gpus}" in text


def test_cli_manifests(tmp_path, capsys):
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump(_gpu_job(2, 8)))
    plan = tmp_path / "plan.yaml"
    assert run_main(["solve", "--cluster", str(K8S / "nodes-kueue-tas-h100.json"), "--jobs",
                     str(jobs), "--budget", "5", "-o", str(plan)]) == 0
    out = tmp_path / "k8s"
    assert run_main(["manifests", str(plan), "--to", "kubernetes", "--cluster",
                     str(K8S / "nodes-kueue-tas-h100.json"), "--jobs", str(jobs),
                     "--topology", str(K8S / "kueue-sample-gpu-queues.yaml"), "-o", str(out)]) == 0
    (f,) = out.iterdir()
    for d in yaml.safe_load_all(f.read_text()):
        validate(d)
    assert run_main(["manifests", str(plan), "--to", "slurm", "--cluster",
                     str(K8S / "nodes-kueue-tas-h100.json"), "--jobs", str(jobs)]) == 0
    assert "#SBATCH --nodelist=" in capsys.readouterr().out


def test_manifests_finds_the_bundled_instance_a_plan_names(tmp_path, capsys):
    """A new user's finding: `hyperplace manifests PLAN` on a plan solved on a bundled
    instance asked for --instance although the plan names it (check found it)."""
    plan = tmp_path / "plan.yaml"
    assert run_main(["solve", "-i", "dgx1-v100", "--budget", "3", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert run_main(["manifests", str(plan), "--to", "slurm"]) == 0
    out = capsys.readouterr().out
    placed = yaml.safe_load(plan.read_text())["jobs"]
    assert placed and out.count("#SBATCH --nodelist=") == len(placed)
    # a plan naming a file (or nothing) is refused in one line naming the field
    doc = yaml.safe_load(plan.read_text())
    doc["metadata"]["instance"] = "/etc/passwd"
    plan.write_text(yaml.safe_dump(doc))
    assert run_main(["manifests", str(plan), "--to", "slurm"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "metadata.instance" in err and "not a bundled" in err
