"""Writers (#23): a plan as DRA ResourceClaims + Volcano Jobs + Kueue TopologyAssignment, and
as sbatch scripts; every written object validates against its upstream schema (shipped in
tests/data/schemas), and the round trip holds: read a cluster from Kubernetes objects, solve,
write the manifests, read them back: the same placements."""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path

import jsonschema
import yaml

from cli_run import run_main
from hyperplace.check import check
from hyperplace.instances.registry import instance_from_documents
from hyperplace.instances.writers import kubernetes_manifests, placements_from_manifests, \
    sbatch_script, v1beta2_domains
from hyperplace.io import load_documents
from hyperplace.solvers.driver import solve_placement

DATA = Path(__file__).parents[1] / "data"
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
        validate_topology_assignment(ta)
    else:
        raise AssertionError(doc["kind"])


def validate_topology_assignment(ta: dict) -> str:
    """Validate against the Kueue Workload CRD version of its shape (v1beta2: slices;
    v1beta1: domains), with the CRD's CEL rules on slices checked here (jsonschema does not
    run x-kubernetes-validations); returns the version."""
    version = "v1beta2" if "slices" in ta else "v1beta1"
    wl = _crd("kueue.x-k8s.io_workloads.yaml", version)
    sub = wl["properties"]["status"]["properties"]["admission"]["properties"][
        "podSetAssignments"]["items"]["properties"]["topologyAssignment"]
    jsonschema.Draft7Validator(sub).validate(ta)
    if version == "v1beta2":
        for sl in ta["slices"]:
            assert len(sl["valuesPerLevel"]) == len(ta["levels"])
            for lv in sl["valuesPerLevel"]:
                assert ("universal" in lv) != ("individual" in lv)
                if "individual" in lv:
                    assert len(lv["individual"]["roots"]) == sl["domainCount"]
            pc = sl["podCounts"]
            assert ("universal" in pc) != ("individual" in pc)
            assert "universal" in pc or len(pc["individual"]) == sl["domainCount"]
    return version


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


def _round_trip(docs: list[dict], **options) -> tuple:
    inst = instance_from_documents(docs, "round-trip")
    plan = solve_placement(inst, budget_s=10)
    assert plan.jobs and check(plan, inst) == []
    written = kubernetes_manifests(inst, plan, **options)
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
    assert sum(c for _, c in v1beta2_domains(ta)) == 2  # Kueue v1beta2 slices by default
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
    nodes = {values[2] for values, _ in v1beta2_domains(ta)}
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


def test_dra_index_on_driver_25_3_is_exact_without_resourceslices():
    """No ResourceSlices imported: the NVIDIA DRA driver v25.3 publishes ``index`` (the NVML
    index, hyperplace's GPU index), so each claim selects exactly the planned GPUs and says
    by which attribute; the default release (25.12) has no such attribute: count only."""
    docs = [*load_documents(K8S / "nodes-kueue-tas-h100.json"), _gpu_job(3, 4)]
    inst, plan, flat = _round_trip(docs, dra_driver="25.3")
    claims = [d for d in flat if d["kind"] == "ResourceClaim"]
    assert len(claims) == 3
    for c in claims:
        ann = c["metadata"]["annotations"]
        node, gpus = ann["hyperplace.io/gpus"].split(":")
        expr = c["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]
        assert expr == f"device.attributes['gpu.nvidia.com'].index in [{gpus.replace(',', ', ')}]"
        assert ann["hyperplace.io/exact"] == "true"
        assert ann["hyperplace.io/selected-by"] == "gpu.nvidia.com/index"
        assert ann["hyperplace.io/dra-driver"] == "v25.3"
    default = [d for ds in kubernetes_manifests(inst, plan).values() for d in ds
               if d["kind"] == "ResourceClaim"]
    assert all(c["metadata"]["annotations"]["hyperplace.io/selected-by"] == "count" and
               "selectors" not in c["spec"]["devices"]["requests"][0]["exactly"] for c in default)


def test_dra_pci_bus_ids_from_an_nccl_topology_file(tmp_path):
    """Nodes read from NCCL topology files know each GPU's PCI address: claims select the
    planned GPUs by the driver's bus-id attribute (v25.12: resource.kubernetes.io/pciBusID,
    v25.8: gpu.nvidia.com/pcieBusID), and read back to the same GPUs."""
    from hyperplace.instances.importing import import_cluster

    ndv5 = Path(__file__).parents[2] / "hyperplace" / "data" / "topology" / "azure_ndv5-topo.xml"
    text, _ = import_cluster("nccl-xml", [str(ndv5)], count=2, gpu_type="H100-80")
    cluster = yaml.safe_load(text)
    bus = cluster["spec"]["nodes"][0]["labels"]["hyperplace.io/gpu-pci-bus-ids"].split(",")
    assert len(bus) == 8 and all(re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", b)
                                 for b in bus)
    for driver, attr in (("25.12", "device.attributes['resource.kubernetes.io'].pciBusID"),
                         ("25.8", "device.attributes['gpu.nvidia.com'].pcieBusID")):
        inst, plan, flat = _round_trip([cluster, _gpu_job(2, 4)], dra_driver=driver)
        for c in (d for d in flat if d["kind"] == "ResourceClaim"):
            node, gpus = c["metadata"]["annotations"]["hyperplace.io/gpus"].split(":")
            want = ", ".join(f"'{bus[int(g)]}'" for g in gpus.split(","))
            sel = c["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]
            assert sel["expression"] == f"{attr} in [{want}]"


def test_kueue_topology_assignment_v1beta2_and_v1beta1():
    """The TopologyAssignment is written in the user's Kueue API: v1beta2 slices by default
    and for a v1beta2 Topology, v1beta1 domains when asked; both validate against Kueue's
    Workload CRD and name the same domains and pod counts."""
    topo = load_documents(K8S / "kueue-sample-gpu-queues.yaml")[0]
    assert topo["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    docs = [*load_documents(K8S / "nodes-kueue-tas-h100.json"), _gpu_job(3, 8)]
    inst = instance_from_documents(docs, "x")
    plan = solve_placement(inst, budget_s=5)

    def ta_of(**kw) -> dict:
        (job,) = [d for ds in kubernetes_manifests(inst, plan, **kw).values() for d in ds
                  if d["kind"] == "Job"]
        return json.loads(job["metadata"]["annotations"]["kueue.x-k8s.io/topology-assignment"])
    b2, b2_topo, b1 = ta_of(), ta_of(topology=topo), ta_of(topology=topo, kueue_api="v1beta1")
    assert validate_topology_assignment(b2) == validate_topology_assignment(b2_topo) == "v1beta2"
    assert validate_topology_assignment(b1) == "v1beta1"
    assert b2_topo["levels"] == b1["levels"] == [lv["nodeLabel"] for lv in topo["spec"]["levels"]]
    assert sorted(v1beta2_domains(b2_topo)) == sorted((tuple(d["values"]), d["count"])
                                                       for d in b1["domains"])
    assert sum(c for _, c in v1beta2_domains(b2_topo)) == 3
    for version in ("v1beta1", "v1alpha1"):  # Kueue v0.14-0.15 and before v0.14
        old = dict(topo, apiVersion=f"kueue.x-k8s.io/{version}")
        assert validate_topology_assignment(ta_of(topology=old)) == "v1beta1"


def _tasks(doc: dict) -> dict[str, dict]:
    return {t["name"]: t for t in doc["spec"]["tasks"]}


def test_the_users_pod_templates_are_kept(tmp_path, capsys):
    """A new user's finding: `manifests` on the real Volcano MindSpore Job replaced its image
    and its mpimaster/mpiworker commands and ports with a placeholder container (Kubernetes)
    and `python train.py` (Slurm), silently. Every task keeps its containers; the plan only
    adds the node pin, the GPU product selector and the DRA claim in place of the GPU limit."""
    (source,) = load_documents(K8S / "volcano-mindspore-gpu.yaml")
    inst, plan, flat = _round_trip([*load_documents(K8S / "nodes-kueue-tas-h100.json"), source])
    (job,) = [d for d in flat if d["kind"] == "Job"]  # validated against the Volcano CRD
    want = {t["name"]: t["template"]["spec"]["containers"] for t in source["spec"]["tasks"]}
    tasks = _tasks(job)
    (w0, w1) = sorted(t for t in tasks if t != "mpimaster")  # one task per pinned pod
    assert "mpimaster" in tasks and w0.startswith("mpiworker-0-") and w1.startswith("mpiworker-1-")
    by_source: dict[str, list[dict]] = {}
    for name, t in tasks.items():
        ann = (t["template"].get("metadata") or {}).get("annotations") or {}
        by_source.setdefault(ann.get("hyperplace.io/source-task", name), []).append(t)
    assert {k: len(v) for k, v in by_source.items()} == {"mpimaster": 1, "mpiworker": 2}
    for role, written in by_source.items():
        for t in written:
            (c,) = t["template"]["spec"]["containers"]
            (w,) = want[role]
            assert c["image"] == w["image"] == "lyd911/mindspore-gpu-example:0.2.0"
            assert c["command"] == w["command"] and c["ports"] == w["ports"]
            assert c["workingDir"] == w["workingDir"] and c["name"] == w["name"]
            assert "placeholder" not in json.dumps(t)
    for t in by_source["mpiworker"]:  # pinned, the GPU through the claim, no extended resource
        spec = t["template"]["spec"]
        (c,) = spec["containers"]
        assert c["resources"] == {"claims": [{"name": "gpus"}]}
        assert spec["resourceClaims"][0]["name"] == "gpus"
        host = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchExpressions"][0]
        assert host["key"] == "kubernetes.io/hostname" and host["values"]
    master = by_source["mpimaster"][0]  # no GPU: the user's pod as it was, not pinned
    assert master["template"] == source["spec"]["tasks"][0]["template"]
    assert job["spec"]["minAvailable"] == 3 and job["spec"]["plugins"] == source["spec"]["plugins"]
    assert "hyperplace.io/placeholder-container" not in job["metadata"]["annotations"]
    # Slurm: each GPU pod's srun runs the workload's command, the image named beside it
    text = sbatch_script(inst, plan, "mindspore-gpu")
    assert "python train.py" not in text and "PLACEHOLDER" not in text
    assert text.count("srun ") == 2 and text.count("/usr/sbin/sshd -D") == 2
    assert "lyd911/mindspore-gpu-example:0.2.0" in text and "mpimaster (1)" in text
    # the CLI says the worker task was split into pinned tasks, and nothing about placeholders
    jobs = K8S / "volcano-mindspore-gpu.yaml"
    cluster = K8S / "nodes-kueue-tas-h100.json"
    out = tmp_path / "plan.yaml"
    assert run_main(["solve", "--cluster", str(cluster), "--jobs", str(jobs), "--budget", "5",
                     "-o", str(out)]) == 0
    capsys.readouterr()
    assert run_main(["manifests", str(out), "--to", "kubernetes", "--cluster", str(cluster),
                     "--jobs", str(jobs), "-o", str(tmp_path / "k8s")]) == 0
    err = capsys.readouterr().err
    assert "mindspore-gpu/mpiworker: its 2 pods are written as tasks" in err
    assert "placeholder" not in err


def test_jobs_without_a_pod_template_say_their_container_is_a_placeholder(tmp_path, capsys):
    plan = tmp_path / "plan.yaml"
    assert run_main(["solve", "-i", "dgx1-v100", "--budget", "3", "-o", str(plan)]) == 0
    capsys.readouterr()
    assert run_main(["manifests", str(plan), "--to", "kubernetes", "-o", str(tmp_path / "k")]) == 0
    err = capsys.readouterr().err
    assert "no pod template" in err and "placeholder container 'trainer'" in err
    for f in (tmp_path / "k").iterdir():
        for d in yaml.safe_load_all(f.read_text()):
            if d["kind"] == "Job":
                assert d["metadata"]["annotations"]["hyperplace.io/placeholder-container"] == "true"
                for t in d["spec"]["tasks"]:
                    assert t["template"]["metadata"]["annotations"][
                        "hyperplace.io/placeholder-container"] == "true"
                    assert t["template"]["spec"]["containers"][0]["name"] == "trainer"
                jsonschema.Draft7Validator(_crd("batch.volcano.sh_jobs.yaml", "v1alpha1")
                                           ).validate(d)
    assert run_main(["manifests", str(plan), "--to", "slurm"]) == 0
    io = capsys.readouterr()
    assert "placeholder command 'python train.py'" in io.err
    runs = [ln for ln in io.out.splitlines() if ln.startswith("srun ")]
    marks = [ln for ln in io.out.splitlines() if ln.startswith("# hyperplace: PLACEHOLDER")]
    assert runs and len(marks) == len(runs)
