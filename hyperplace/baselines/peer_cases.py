"""Named instances that reproduce failures users report against Volcano and Kueue.

Each instance is small enough to solve by hand, and built so that deciding the whole pending
window at once admits strictly more (usefully: without breaking a job's NVLink or hop
rules) than any of the three one-job-at-a-time baselines. The YAML files in
``hyperplace/data/peer-*.yaml`` are written by this module
(``python -m hyperplace.baselines.peer_cases``); edit the builders, not the files.

* ``peer-volcano-3373-deadlock`` (volcano-sh/volcano#3373, two large gangs each take part
  of the nodes and block each other). The one-at-a-time model binds a gang atomically, so
  the partial-bind deadlock itself cannot happen here; what remains is the conflict behind
  it: the first gang (4 x TP4, no hop limit) could live in the half-used nodes of leaf A,
  but binpack scores the small empty leaf B as fullest-after-placement, Kueue's BestFit and
  Slurm's tightest-switch pick B too, and the second gang (2 x TP8 on one leaf) finds no
  two whole nodes on any leaf. Optimum: gang 1 on leaf A's halves, gang 2 on leaf B (32
  GPUs against 16).
* ``peer-volcano-5751-nvlink-islands`` (volcano-sh/volcano#5751, free GPUs split across
  NVLink islands cannot serve a same-domain request). DGX-1 V100 nodes: ``dgx-a`` has 4
  free GPUs, two in each NVLink island ({2,3} and {4,5}, no NVLink between the halves);
  ``dgx-b`` has 5 free including the island {0,1,2,3}. The 4-GPU NVLink job goes to
  ``dgx-a`` under all three rules (binpack prefers the fuller node; BestFit and Slurm's
  node order pick it first), which gives it PCIe pairs. Optimum: the NVLink job on
  ``dgx-b``'s island, the data-parallel job on ``dgx-a`` (8 useful GPUs against 4).
* ``peer-kueue-1476-split-7-7-8`` (kubernetes-sigs/kueue#1476, quota admitted a 2x8-GPU
  job while free GPUs were split 7/7/8). Free GPUs are 7 and 7 on leaf A and 8 on leaf B.
  The 2x8 TP job cannot run anywhere (one node has 8 free) and must stay pending with a
  reason instead of holding quota. The smaller 8-rank data-parallel job, asked to stay on
  one leaf, is put on leaf B by every rule (best fit / tightest switch / binpack of the
  small leaf), which leaves no node for the 8-GPU TP job behind it. Optimum: the 8 ranks
  on leaf A's 7 + 1, TP8 on leaf B, TP4 and TP2 in the rest (22 GPUs against 14).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from hyperplace.io import dump_yaml, load_documents, parse
from hyperplace.models import Cluster, Instance, Node, TrainingJob
from hyperplace.models.cluster import FabricGenerator, FabricSpec
from hyperplace.models.fabric import Link, Switch
from hyperplace.models.instance import InstanceSpec
from hyperplace.models.job import ObjectMeta

DESCRIPTION_KEY = "hyperplace.io/description"
SOURCE_KEY = "hyperplace.io/source"


def _job(name: str, model: str, priority: str, replicas: int, groups: list[dict[str, Any]]
         ) -> TrainingJob:
    return TrainingJob.model_validate({
        "metadata": {"name": name},
        "spec": {"model": model, "replicaCount": replicas, "priority": priority,
                 "resourceGroups": groups},
    })


def _tp(size: int, accelerator: str, nvlink: float, memory: float) -> dict[str, Any]:
    return {"name": "tp", "type": "TensorParallel", "gpusPerGroup": size,
            "gpuRequirements": {"minMemoryGB": memory, "minNVLinkBandwidthGbpsPerPair": nvlink,
                                "acceleratorType": accelerator}}


def _dp(max_hops: int | None = None, ib: float | None = None, size: int = 1,
        accelerator: str | None = None) -> dict[str, Any]:
    conn: dict[str, Any] = {}
    if max_hops is not None:
        conn["maxHopCount"] = max_hops
    if ib is not None:
        conn["minInfiniBandBandwidthGbps"] = ib
    group: dict[str, Any] = {"name": "dp", "type": "DataParallel", "gpusPerGroup": size,
                             "interNodeConnectivity": conn}
    if accelerator:
        group["gpuRequirements"] = {"acceleratorType": accelerator}
    return group


def _node(name: str, gpu_type: str, busy: dict[int, str], **extra: Any) -> Node:
    return Node.model_validate({"name": name, "gpuType": gpu_type, "gpuCount": 8,
                                "allocated": busy, **extra})


def _instance(name: str, description: str, source: str, cluster: Cluster,
              jobs: list[TrainingJob]) -> Instance:
    meta = ObjectMeta(name=name, annotations={DESCRIPTION_KEY: description, SOURCE_KEY: source})
    return Instance(metadata=meta, spec=InstanceSpec(clusters=[cluster], jobs=jobs))


def volcano_3373_deadlock() -> Instance:
    """Two leaves: five half-used H100 nodes on A, two empty ones on B; two gangs."""
    a_nodes = [_node(f"a{i}", "H100-80", {k: f"resident-{i}" for k in range(4)}) for i in range(5)]
    b_nodes = [_node(f"b{i}", "H100-80", {}) for i in range(2)]
    switches = [Switch(name="leaf-a", tier=1), Switch(name="leaf-b", tier=1),
                Switch(name="spine-0", tier=2)]
    links = [Link(a=n.name, b="leaf-a", gbps=400, count=8) for n in a_nodes]
    links += [Link(a=n.name, b="leaf-b", gbps=400, count=8) for n in b_nodes]
    links += [Link(a="leaf-a", b="spine-0", gbps=400, count=40),
              Link(a="leaf-b", b="spine-0", gbps=400, count=16)]
    cluster = Cluster(name="gpu-pod", region="on-prem", nodes=[*a_nodes, *b_nodes],
                      fabric=FabricSpec(switches=switches, links=links))
    jobs = [
        _job("moe-pretrain-4xtp4", "mixtral-8x7b", "high", 4,
             [_tp(4, "H100", 900, 80), _dp(ib=200)]),
        _job("dense-pretrain-2xtp8", "llama3-70b", "high", 2,
             [_tp(8, "H100", 900, 80), _dp(max_hops=1, ib=400)]),
    ]
    return _instance(
        "peer-volcano-3373-deadlock",
        "two gangs: 4xTP4 (any leaf) then 2xTP8 (one leaf); one-at-a-time rules put the first "
        "on the small empty leaf the second needs",
        "after volcano-sh/volcano#3373 (two large gangs block each other); hand-built",
        cluster, jobs)


def volcano_5751_nvlink_islands() -> Instance:
    """Two DGX-1 V100 nodes; the fuller one has its free GPUs split across NVLink islands."""
    mesh = {"nvlink": "hybrid_cube_mesh"}
    nodes = [
        _node("dgx-a", "V100-32", {0: "bert-large", 1: "bert-large", 6: "gnmt", 7: "gnmt"}, **mesh),
        _node("dgx-b", "V100-32", {5: "resnet50", 6: "resnet50", 7: "resnet50"}, **mesh),
        _node("dgx-c", "V100-32", {i: "transformer-xl" for i in range(8)}, **mesh),
    ]
    cluster = Cluster(name="dgx1-lab", region="on-prem", nodes=nodes,
                      fabric=FabricSpec(generator=FabricGenerator(
                          type="fat-tree-2", nodes_per_leaf=4, spines=1, node_gbps=100,
                          uplink_gbps=100)))
    jobs = [
        _job("gpt2-xl-tp4", "gpt2-xl", "high", 1, [_tp(4, "V100", 50, 32), _dp()]),
        _job("resnet152-dp4", "resnet152", "normal", 4, [_dp(max_hops=1, accelerator="V100")]),
    ]
    return _instance(
        "peer-volcano-5751-nvlink-islands",
        "DGX-1 V100: the fullest node's 4 free GPUs straddle both NVLink islands; a 4-GPU "
        "NVLink job and a 4-rank DP job",
        "after volcano-sh/volcano#5751 (free GPUs split across NVLink islands); DGX-1 NVLink "
        "matrix from microsoft/msccl-tools; hand-built",
        cluster, jobs)


def kueue_1476_split_7_7_8() -> Instance:
    """Free GPUs 7 and 7 on leaf A, 8 on leaf B; a 2x8 job and smaller ones queued."""
    nodes = [
        _node("n1", "H100-80", {0: "vllm-serve-1"}),
        _node("n2", "H100-80", {0: "vllm-serve-2"}),
        _node("n3", "H100-80", {}),
        _node("n4", "H100-80", {i: "nemotron-sft" for i in range(8)}),
    ]
    cluster = Cluster(name="h100-east", region="us-east", nodes=nodes,
                      fabric=FabricSpec(generator=FabricGenerator(
                          type="fat-tree-2", nodes_per_leaf=2, spines=2)))
    jobs = [
        _job("pretrain-2xtp8", "llama3-70b", "high", 2,
             [_tp(8, "H100", 900, 80), _dp(ib=400)]),
        _job("finetune-dp8", "llama3-8b", "normal", 8, [_dp(max_hops=1, accelerator="H100")]),
        _job("sft-tp8", "llama3-70b", "normal", 1, [_tp(8, "H100", 900, 80), _dp()]),
        _job("eval-tp4", "llama3-8b", "normal", 1, [_tp(4, "H100", 900, 80), _dp()]),
        _job("eval-tp2", "llama3-8b", "normal", 1, [_tp(2, "H100", 900, 80), _dp()]),
    ]
    return _instance(
        "peer-kueue-1476-split-7-7-8",
        "free GPUs split 7/7/8 over two leaves; a 2xTP8 job that cannot run, an 8-rank DP job "
        "on one leaf, then TP8, TP4 and TP2 jobs",
        "after kubernetes-sigs/kueue#1476 (2x8-GPU job admitted while free GPUs were split "
        "7/7/8); hand-built",
        cluster, jobs)


PEER_CASES: dict[str, Callable[[], Instance]] = {
    "peer-volcano-3373-deadlock": volcano_3373_deadlock,
    "peer-volcano-5751-nvlink-islands": volcano_5751_nvlink_islands,
    "peer-kueue-1476-split-7-7-8": kueue_1476_split_7_7_8,
}


def render(instance: Instance) -> str:
    """The instance as YAML that loads back equal (jobs keep apiVersion/kind)."""
    doc = {"apiVersion": instance.api_version, "kind": instance.kind, **instance.to_doc()}
    doc["spec"]["jobs"] = [{"apiVersion": j.api_version, "kind": j.kind, **j.to_doc()}
                           for j in instance.jobs]
    for cluster in doc["spec"]["clusters"]:
        for node in cluster.get("nodes", []):
            if "allocated" in node:
                node["allocated"] = {int(k): v for k, v in node["allocated"].items()}
    header = ("# Generated by `python -m hyperplace.baselines.peer_cases` "
              "(hyperplace/baselines/peer_cases.py); edit the builder, not this file.\n")
    return header + dump_yaml(doc)


def data_path(name: str) -> Path:
    return Path(str(resources.files("hyperplace.data") / f"{name}.yaml"))


@cache
def load_peer_case(name: str) -> Instance:
    """A named peer-failure instance, read from its bundled YAML file."""
    path = data_path(name)
    docs = load_documents(path)
    return parse(Instance, docs[0], source=str(path))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the peer-failure instances as YAML.")
    parser.add_argument("--out", type=Path, default=None, help="directory (default: bundled data)")
    args = parser.parse_args(argv)
    for name, build in PEER_CASES.items():
        path = (args.out / f"{name}.yaml") if args.out else data_path(name)
        path.write_text(render(build()), encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
