"""Kubernetes and Kueue/Volcano documents read as they are (fixtures in tests/data/k8s, each
with its provenance: Kueue's TAS samples and kind cluster, Volcano's MindSpore GPU example;
the Node List is kubectl's output shape for Kueue's kind cluster with GFD's labels, see
tests/data/k8s/PROVENANCE.md)."""

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hyperplace.check import check
from hyperplace.cli import app
from hyperplace.errors import InputError
from hyperplace.instances.importers.jobs import job_document
from hyperplace.instances.importers.kubernetes import import_kubernetes_nodes
from hyperplace.instances.importing import import_cluster
from hyperplace.instances.registry import load_cluster_and_jobs, validate_file
from hyperplace.io import load_documents
from hyperplace.models.plan import PlacementPlan

K8S = Path(__file__).parents[1] / "data" / "k8s"
NODES = K8S / "nodes-kueue-tas-h100.json"
PODS = K8S / "pods-running.json"


def _cluster(tmp_path, *extra):
    text, _ = import_cluster("kubernetes", [str(NODES), *map(str, extra)])
    out = tmp_path / "cluster.yaml"
    out.write_text(text)
    return out


def test_node_list_types_counts_and_levels():
    docs = load_documents(NODES)
    kc = import_kubernetes_nodes([(docs[0], "")], str(NODES))
    c = kc.cluster
    assert [n.name for n in c.nodes] == [f"kind-worker{'' if i == 1 else i}" for i in range(1, 9)]
    assert {n.gpu_type for n in c.nodes} == {"H100-80"}  # GFD NVIDIA-H100-80GB-HBM3
    assert c.gpu_count == 64
    assert c.nodes[7].faulty == [7]  # allocatable 7 of capacity 8
    assert kc.notes == ["1 node(s) without GPUs left out"]  # the control plane
    # Kueue's kind cluster: rack r1 of block b1 is not rack r1 of block b2
    tiers = {s.name: s.tier for s in c.fabric.switches}
    assert tiers["b1/r1"] == 1 and tiers["b2/r1"] == 1 and tiers["b1"] == 2
    hops = c.network.hop_count
    assert hops("kind-worker", "kind-worker2") == 1      # same rack
    assert hops("kind-worker", "kind-worker3") == 3      # same block
    assert hops("kind-worker", "kind-worker5") == 5      # across blocks
    assert hops("kind-worker", "kind-worker5") > hops("kind-worker", "kind-worker3")


def test_pods_fill_allocated(tmp_path):
    docs = load_documents(NODES)
    kc = import_kubernetes_nodes([(docs[0], "")], str(NODES),
                                 pod_docs=[(load_documents(PODS)[0], "")])
    by = {n.name: n for n in kc.cluster.nodes}
    assert by["kind-worker"].allocated == {g: "llama-train" for g in range(8)}
    assert by["kind-worker3"].allocated == {0: "vllm-7f9c", 1: "vllm-7f9c"}  # Succeeded: freed
    assert by["kind-worker2"].allocated == {}


def test_kueue_topology_sets_the_levels(tmp_path):
    """A Topology whose levels are block then rack: the same tiers as the default map."""
    text, summary = import_cluster("kubernetes", [str(NODES), str(K8S / "kueue-sample-gpu-queues.yaml")])
    assert "8 nodes, 64 GPUs (H100-80)" in summary


def test_gpu_product_memory_and_unknown_product(tmp_path):
    doc = json.loads(NODES.read_text())
    node = doc["items"][1]
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H200"
    node["metadata"]["labels"]["nvidia.com/gpu.memory"] = "143771"
    kc = import_kubernetes_nodes([(node, "")], "n.json")
    assert kc.cluster.nodes[0].gpu_type == "H200-141"
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-A100-SXM4-80GB"
    node["metadata"]["labels"]["nvidia.com/gpu.memory"] = "40960"  # the 40 GB part
    assert import_kubernetes_nodes([(node, "")], "n.json").cluster.nodes[0].gpu_type == "A100-40"
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-RTX-PRO-6000"
    with pytest.raises(InputError) as e:
        import_kubernetes_nodes([(node, "items[1].")], "n.json")
    assert e.value.path == "items[1].metadata.labels.nvidia.com/gpu.product"
    assert "NVIDIA-RTX-PRO-6000" in e.value.message


def test_volcano_job_and_kueue_queues_solve(tmp_path):
    cluster = _cluster(tmp_path, PODS)
    inst = load_cluster_and_jobs(cluster, K8S / "volcano-mindspore-gpu.yaml")
    (job,) = inst.jobs
    assert job.name == "mindspore-gpu" and job.total_gpus == 2  # 2 workers x 1 GPU
    assert [u.max_hop_count for u in job.units()] == [0, 0]     # a pod is on one node
    from hyperplace.solvers.driver import solve_placement
    inst = inst.with_queue_documents(
        [(f"q: document {i + 1}", d) for i, d in
         enumerate(load_documents(K8S / "kueue-sample-gpu-queues.yaml"))])
    plan = solve_placement(inst, budget_s=10)
    assert [j.job for j in plan.jobs] == ["mindspore-gpu"] and check(plan, inst) == []


def test_kueue_required_topology_is_a_hop_limit():
    (doc,) = [d for d in load_documents(K8S / "kueue-sample-job-required.yaml")]
    # Kueue's sample asks for CPUs only: left out with a note
    job, notes = job_document(doc, "s.yaml")
    assert job is None and "no pod asks for a GPU" in notes[0]
    pod = doc["spec"]["template"]["spec"]
    pod["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": 8}
    job, _ = job_document(doc, "s.yaml")
    groups = {g["name"]: g for g in job["spec"]["resourceGroups"]}
    assert job["spec"]["replicaCount"] == 10                       # parallelism
    assert groups["pods"]["interNodeConnectivity"]["maxHopCount"] == 1  # one rack: tier 1
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "tas-user-queue"


def test_validate_reads_foreign_kinds():
    assert "queue document" in validate_file(K8S / "kueue-sample-gpu-queues.yaml")
    assert "Topology default, 2 switch level(s)" in validate_file(K8S / "kueue-sample-gpu-queues.yaml")
    assert "ResourceFlavor" in validate_file(K8S / "kueue-single-clusterqueue-setup.yaml")
    assert "Cluster nodes-kueue-tas-h100, 8 nodes, 64 GPUs" in validate_file(NODES)
    out = validate_file(K8S / "volcano-mindspore-gpu.yaml")
    assert "1 FoundationModelTrainingJob, 2 GPUs requested" in out and "mpimaster" in out
    assert "no pod asks for a GPU" in validate_file(K8S / "kueue-sample-pytorchjob.yaml")


def test_cli_stdin_and_one_line_errors(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["instances", "import", "--from", "kubernetes", "-"],
                      input=NODES.read_text())
    assert r.exit_code == 0, r.output
    assert "kind: Cluster" in r.output
    bad = json.loads(NODES.read_text())
    bad["items"][2]["status"]["capacity"]["nvidia.com/gpu"] = "eight"
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    r = runner.invoke(app, ["instances", "import", "--from", "kubernetes", str(p)])
    assert r.exit_code == 2
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "items[2].status.capacity.nvidia.com/gpu" in lines[0], r.output


def test_gfd_clique_makes_nvlink_domains():
    """GB200 trays (4 GPUs each) labelled with GFD's nvidia.com/gpu.clique: one NVLink
    domain per clique, trays of one clique 0 hops apart."""
    doc = json.loads(NODES.read_text())
    trays = []
    for i, item in enumerate(doc["items"][1:5]):
        labels = item["metadata"]["labels"]
        labels.update({"nvidia.com/gpu.product": "NVIDIA-GB200", "nvidia.com/gpu.count": "4",
                       "nvidia.com/gpu.memory": "189471",
                       "nvidia.com/gpu.clique": f"5b1f0f3c-0d1a-4d6e-9a43-7d1e0c2b9f10.{i // 2}"})
        item["status"]["capacity"]["nvidia.com/gpu"] = "4"
        item["status"]["allocatable"]["nvidia.com/gpu"] = "4"
        trays.append(item)
    kc = import_kubernetes_nodes([({"kind": "List", "items": trays}, "")], "gb200.json")
    c = kc.cluster
    assert {n.gpu_type for n in c.nodes} == {"GB200"} and c.gpu_count == 16
    doms = c.fabric.nvlink_domains
    assert [d.nodes for d in doms] == [["kind-worker", "kind-worker2"],
                                       ["kind-worker3", "kind-worker4"]]
    assert all(d.gbps_per_gpu in (None, 1800) for d in doms)  # None: the type's 1800
    assert c.network.hop_count("kind-worker", "kind-worker2") == 0
    assert c.network.hop_count("kind-worker2", "kind-worker3") > 0


def test_volcano_hierarchy_annotations_make_nested_cohorts():
    from hyperplace.models.queue import QueueError, parse_queues

    def q(name, path, weights):
        return (name, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                       "metadata": {"name": name, "annotations": {
                           "volcano.sh/hierarchy": path, "volcano.sh/hierarchy-weights": weights}},
                       "spec": {"weight": 1}})
    qs = parse_queues([q("prod", "root/eng/prod", "1/2/8"), q("dev", "root/eng/dev", "1/2/2"),
                       q("sci", "root/sci", "1/4")])
    assert {n: (x.cohort, x.weight) for n, x in qs.queues.items()} == {
        "prod": ("volcano/root/eng", 8.0), "dev": ("volcano/root/eng", 2.0),
        "sci": ("volcano/root", 4.0)}
    assert qs.cohort_parents == {"volcano/root/eng": "volcano/root"}
    with pytest.raises(QueueError) as e:
        parse_queues([q("prod", "root/eng/other", "1/2/8")])
    assert e.value.path.endswith("annotations.volcano.sh/hierarchy")


def test_queue_file_matching_no_job_warns(capsys):
    from cli_run import run_main

    code = run_main(["solve", "--cluster", str(NODES), "--jobs",
                     str(K8S / "volcano-mindspore-gpu.yaml"), "--queues",
                     str(K8S / "kueue-sample-gpu-queues.yaml"), "--budget", "2"])
    assert code == 0
    err = capsys.readouterr().err
    assert "no pending job names any of its queues (tas-cluster-queue, tas-user-queue)" in err


def test_cpu_only_workload_is_reported_skipped_in_plan_and_table(tmp_path, capsys):
    """A new user's finding: Kueue's CPU-only JobSet sample vanished from `solve` (no job
    admitted, none pending). It is now skipped with its reason, in the plan and the table,
    while a GPU job beside it is placed as before."""
    from cli_run import run_main

    gpu_job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "gpu-train"},
               "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
                   "containers": [{"name": "c", "image": "x",
                                   "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text((K8S / "kueue-sample-jobset-tas-required.yaml").read_text()
                    + "\n---\n" + yaml.safe_dump(gpu_job))
    inst = load_cluster_and_jobs(NODES, jobs)
    assert [j.name for j in inst.jobs] == ["gpu-train"]
    assert [s.job for s in inst.spec.skipped] == ["jobset-tas-required"]
    out = tmp_path / "plan.yaml"
    args = ["solve", "--cluster", str(NODES), "--jobs", str(jobs), "--budget", "3"]
    assert run_main(args) == 0
    table = " ".join(capsys.readouterr().out.split())
    assert run_main([*args, "-o", str(out)]) == 0
    assert "skipped 1 job, not placed: jobset-tas-required (no pod asks for a GPU" in table
    plan = yaml.safe_load(out.read_text())
    assert plan["skipped"] == [{"job": "jobset-tas-required", "reason": inst.spec.skipped[0].reason}]
    assert [j["job"] for j in plan["jobs"]] == ["gpu-train"] and plan.get("pending", []) == []
    parsed = PlacementPlan.model_validate(plan)
    assert check(parsed, inst) == []
    assert "1 admitted, 0 pending, 1 skipped" in capsys.readouterr().err
    # `why` on it says why it is not placed (one line, exit 2), not "no job"
    assert run_main(["why", "jobset-tas-required", "--cluster", str(NODES), "--jobs",
                     str(jobs)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "is not placed by hyperplace: no pod asks" in err


VGPU_NODES = K8S / "nodes-rke2-vgpu-a16.json"  # a captured `kubectl get nodes -o json` (GFD)


def test_captured_gfd_node_dump_is_read_as_it_is(tmp_path, capsys):
    """A real `kubectl get nodes --output=json` of an RKE2 node with the GPU Operator
    v24.9.2 (GFD, device plugin v0.17.0) in a VM given an NVIDIA A16 vGPU (PROVENANCE.md):
    its one GPU is the 4 GB `NVIDIA-A16-4Q` profile, a time-shared slice of an A16 board that
    the catalog does not have: refused in one line naming the label; placed as one GPU when
    the user says which type to plan it as. Everything else as the dump says it."""
    from cli_run import run_main

    (doc,) = load_documents(VGPU_NODES)
    with pytest.raises(InputError) as err:
        import_kubernetes_nodes([(doc, "")], str(VGPU_NODES))
    assert err.value.path == "items[0].metadata.labels.nvidia.com/gpu.product"
    assert "vGPU profile 'NVIDIA-A16-4Q' (4 GB) of an A16 board" in err.value.message
    assert run_main(["instances", "import", "--from", "kubernetes", str(VGPU_NODES)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "nvidia.com/gpu.product" in lines[0] and "vGPU" in lines[0]

    kc = import_kubernetes_nodes([(doc, "")], str(VGPU_NODES), gpu_type="T4")
    (node,) = kc.cluster.nodes
    assert node.name == "nori" and node.gpu_count == 1 and node.faulty == []  # 1 of 1 allocatable
    assert node.labels["nvidia.com/gpu.memory"] == "4096"           # MiB, kept for selectors
    assert node.labels["node-role.kubernetes.io/control-plane"] == "true"  # kept: it has a GPU
    assert "nvidia.com/gpu.clique" not in node.labels and not kc.cluster.fabric.nvlink_domains
    # no topology label: the default fat-tree, said so; a 1-GPU PCIe node (T4: no NVLink)
    assert node.labels["hyperplace.io/assumed"] == "fabric" and node.nvlink == "pcie"
    assert kc.cluster.fabric.generator.type == "fat-tree-2" and kc.notes == []


def test_vgpu_profiles_whole_board_or_slice():
    """The same captured node with its product and memory set to other GFD vGPU profiles
    (GRID-A100-40C and -8C, as VMware VKS clusters label them): a whole-board profile is the
    GPU, a smaller one is refused as a slice."""
    import copy

    (doc,) = load_documents(VGPU_NODES)
    for product, mib, want in (("GRID-A100-40C", "40960", "A100-40"), ("GRID-A100-8C", "8192", None)):
        d = copy.deepcopy(doc)
        d["items"][0]["metadata"]["labels"].update({"nvidia.com/gpu.product": product,
                                                    "nvidia.com/gpu.memory": mib})
        if want:
            kc = import_kubernetes_nodes([(d, "")], "x")
            assert kc.cluster.nodes[0].gpu_type == want
        else:
            with pytest.raises(InputError, match="8 GB of an A100-40's 40 GB, a time-shared slice"):
                import_kubernetes_nodes([(d, "")], "x")


@pytest.mark.parametrize("quantity", ["100000", "4Gi"])
def test_a_container_asking_for_too_many_gpus_is_named_at_its_own_field(tmp_path, quantity):
    """The new user's Volcano Job: the error named the job model's internal field
    (spec.resourceGroups[0].gpusPerGroup); it names the container's resource instead."""
    text = (K8S / "volcano-mindspore-gpu.yaml").read_text().replace(
        'nvidia.com/gpu: "1"', f'nvidia.com/gpu: "{quantity}"')
    path = tmp_path / "big.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        validate_file(path)
    line = err.value.one_line()
    assert "containers[0].resources" in line and "nvidia.com/gpu" in line
    assert "at most 4,096" in line and "gpusPerGroup" not in line and str(path) in line


def test_time_sliced_and_mig_nodes_are_left_out_not_counted_as_gpus():
    """GFD labels a time-sliced node nvidia.com/gpu.replicas (its capacity is replicas x the
    GPUs, the product '-SHARED') and a MIG-single node with a '-MIG-<profile>' product (its
    capacity counts slices): they were read as 32 H100-80 and 56 A100-40 whole GPUs (new
    user). They are left out with a note; only such nodes is an error."""
    doc = json.loads(NODES.read_text())
    whole = doc["items"][1]
    shared = json.loads(json.dumps(whole))
    shared["metadata"]["name"] = "sliced"
    shared["metadata"]["labels"].update({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED",
                                         "nvidia.com/gpu.replicas": "4",
                                         "nvidia.com/gpu.count": "8"})
    shared["status"]["capacity"]["nvidia.com/gpu"] = "32"
    shared["status"]["allocatable"]["nvidia.com/gpu"] = "32"
    mig = json.loads(json.dumps(whole))
    mig["metadata"]["name"] = "mig"
    mig["metadata"]["labels"].update({"nvidia.com/gpu.product":
                                      "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
                                      "nvidia.com/mig.strategy": "single"})
    mig["status"]["capacity"]["nvidia.com/gpu"] = "56"
    mig["status"]["allocatable"]["nvidia.com/gpu"] = "56"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p-0", "namespace": "d"},
           "spec": {"nodeName": "sliced", "containers": [
               {"name": "c", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
           "status": {"phase": "Running"}}
    kc = import_kubernetes_nodes([(whole, ""), (shared, ""), (mig, "")], "n.json",
                                 pod_docs=[(pod, "")])
    assert [n.name for n in kc.cluster.nodes] == [whole["metadata"]["name"]]
    assert any("on 'sliced': a node left out (its GPUs shared or sliced), ignored" in n
               for n in kc.notes), kc.notes
    note = next(n for n in kc.notes if "left out, their GPUs shared or sliced" in n)
    assert note.startswith("2 node(s) left out") and "'sliced' time-slices its GPUs" in note
    assert "its 32 nvidia.com/gpu are shares of 8 GPUs" in note
    for alone, words in ((shared, "time-slices its GPUs"), (mig, "offers MIG slices")):
        with pytest.raises(InputError) as e:
            import_kubernetes_nodes([(alone, "")], "n.json")
        assert e.value.message.startswith("no node has whole GPUs: node ") and words in \
            e.value.message


def test_validate_names_a_cluster_queue_that_covers_no_gpu(tmp_path):
    """Kueue's TAS samples cover cpu and memory only; such a ClusterQueue never admits a GPU
    job, which validate said nothing of (solve's reason did)."""
    q = tmp_path / "q.yaml"
    q.write_text(yaml.safe_dump_all([
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ResourceFlavor",
         "metadata": {"name": "f"}, "spec": {}},
        {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
         "metadata": {"name": "cpu-only"}, "spec": {"resourceGroups": [
             {"coveredResources": ["cpu"], "flavors": [
                 {"name": "f", "resources": [{"name": "cpu", "nominalQuota": 9}]}]}]}}]))
    line = validate_file(q)
    assert line.endswith("queue(s) covering no GPU (no nvidia.com/gpu in their "
                         "resourceGroups), so a GPU job in them is never admitted: cpu-only")


def test_an_mps_node_is_said_to_share_its_gpus_by_mps():
    """GFD's labels of an MPS node as NVIDIA's GPU Operator documents them (one A100, four
    MPS clients: nvidia.com/gpu.sharing-strategy mps, product -SHARED, capacity 4): left out
    as shared by MPS, not called time-sliced."""
    doc = json.loads(NODES.read_text())
    whole = doc["items"][1]
    mps = json.loads(json.dumps(whole))
    mps["metadata"]["name"] = "mps"
    mps["metadata"]["labels"].update({"nvidia.com/gpu.count": "1",
                                      "nvidia.com/gpu.replicas": "4",
                                      "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-SHARED",
                                      "nvidia.com/gpu.sharing-strategy": "mps"})
    for key in ("capacity", "allocatable"):
        mps["status"][key]["nvidia.com/gpu"] = "4"
    kc = import_kubernetes_nodes([(whole, ""), (mps, "")], "n.json")
    assert [n.name for n in kc.cluster.nodes] == [whole["metadata"]["name"]]
    note = next(n for n in kc.notes if "left out, their GPUs shared or sliced" in n)
    assert "'mps' shares its GPUs by MPS" in note and "are shares of 1 GPUs" in note

