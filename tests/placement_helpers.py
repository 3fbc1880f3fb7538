"""Small hand-built instances for placement tests (optima computed by hand in each test)."""

from __future__ import annotations

from hypothesis import strategies as st

from hyperplace.models import (
    Cluster,
    FabricGenerator,
    FabricSpec,
    Instance,
    InstanceSpec,
    Node,
    TrainingJob,
)
from hyperplace.models.fabric import Link, Switch
from hyperplace.models.instance import RunningJob
from hyperplace.models.job import ObjectMeta


def node(name: str, gpu_type: str = "H100-80", gpus: int = 8, allocated: dict | None = None,
         faulty: list | None = None, nvlink: str = "nvswitch") -> Node:
    return Node(name=name, gpu_type=gpu_type, gpu_count=gpus, nvlink=nvlink,
                allocated=allocated or {}, faulty=faulty or [])


def job(name: str, tp: int = 8, replicas: int = 1, accel: str | None = "H100",
        priority: str | int = "normal", tp_hop: int | None = None, dp_hop: int | None = None,
        nvlink: float = 900, mem: float = 80, group_type: str = "TensorParallel") -> TrainingJob:
    groups = [{
        "name": "tp", "type": group_type, "gpusPerGroup": tp,
        "gpuRequirements": {"minMemoryGB": mem, "minNVLinkBandwidthGbpsPerPair": nvlink,
                            **({"acceleratorType": accel} if accel else {})},
        "interNodeConnectivity": {"minInfiniBandBandwidthGbps": 0,
                                  **({"maxHopCount": tp_hop} if tp_hop is not None else {})},
    }]
    if group_type != "DataParallel":
        groups.append({"name": "dp", "type": "DataParallel", "gpusPerGroup": 1,
                       "interNodeConnectivity": {"minInfiniBandBandwidthGbps": 0,
                                                 **({"maxHopCount": dp_hop} if dp_hop is not None else {})}})
    return TrainingJob.model_validate({
        "apiVersion": "ai.example.com/v1alpha1", "kind": "FoundationModelTrainingJob",
        "metadata": {"name": name},
        "spec": {"model": "m", "replicaCount": replicas, "resourceGroups": groups,
                 "priority": priority},
    })


def instance(nodes: list[Node], jobs: list[TrainingJob], nodes_per_leaf: int = 2,
             spines: int = 2, name: str = "t") -> Instance:
    cluster = Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=FabricGenerator(
        type="fat-tree-2", nodes_per_leaf=nodes_per_leaf, spines=spines)))
    return Instance(metadata=ObjectMeta(name=name), spec=InstanceSpec(clusters=[cluster], jobs=jobs))


NODE_KINDS = [("H100-80", "nvswitch", 8), ("A100-80", "nvswitch", 8), ("H100-80", "nvswitch", 4),
              ("V100-32", "hybrid_cube_mesh", 8), ("A100-40", "pcie", 4)]


@st.composite
def rounds(draw):
    """2-6 nodes of mixed sizes and kinds, partly busy or faulty; 1-6 jobs of every shape,
    units larger than a node and units cut across nodes (no floor, a hop limit) included."""
    n_nodes = draw(st.integers(2, 6))
    nodes = []
    for i in range(n_nodes):
        gpu_type, nvlink, gpus = draw(st.sampled_from(NODE_KINDS))
        busy = draw(st.sets(st.integers(0, gpus - 1), max_size=gpus - 1))
        faulty = draw(st.sets(st.integers(0, gpus - 1), max_size=1)) - busy
        nodes.append(node(f"n{i}", gpu_type, gpus=gpus, nvlink=nvlink,
                          allocated={g: "running" for g in busy}, faulty=sorted(faulty)))
    jobs = []
    for k in range(draw(st.integers(1, 6))):
        accel = draw(st.sampled_from([None, "H100", "A100", "V100", "H100|A100"]))
        nvlink = draw(st.sampled_from([0, 0, 50, 600, 900]))
        jobs.append(job(
            f"j{k}", tp=draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16])),
            replicas=draw(st.integers(1, 3)), accel=accel,
            priority=draw(st.sampled_from(["low", "normal", "high"])),
            tp_hop=draw(st.sampled_from([None, 0, 1, 3])),
            dp_hop=draw(st.sampled_from([None, 1, 3])), nvlink=nvlink, mem=32,
            group_type=draw(st.sampled_from(["TensorParallel", "TensorParallel", "DataParallel"]))))
    return instance(nodes, jobs, nodes_per_leaf=draw(st.integers(1, 3)))


def line_instance(jobs, dual_homed: bool):
    nodes = [node(f"n{i}") for i in range(1, 5)] + ([node("x")] if dual_homed else [])
    links = [Link(a=f"L{i}", b=f"L{i + 1}", gbps=400) for i in range(1, 4)]
    links += [Link(a=f"n{i}", b=f"L{i}", gbps=400) for i in range(1, 5)]
    if dual_homed:
        links += [Link(a="x", b="L1", gbps=400), Link(a="x", b="L2", gbps=400)]
    cluster = Cluster(name="c", nodes=nodes, fabric=FabricSpec(
        switches=[Switch(name=f"L{i}") for i in range(1, 5)], links=links))
    return Instance(metadata=ObjectMeta(name="line"),
                    spec=InstanceSpec(clusters=[cluster], jobs=jobs))


def fragmented(pending=None, manifests=("a", "b", "c")):
    # leaf 0: n0 (a: 4 GPUs), n1 (c: 4 GPUs); leaf 1: n2 (b: 4 GPUs), n3 free.
    # "big" needs 2 x 8 GPUs within one leaf: moving b (40 GPU-s lost) frees leaf 1, moving
    # a and c (4,800 GPU-s) would free leaf 0.
    nodes = [node("n0", allocated={g: "a" for g in range(4)}),
             node("n1", allocated={g: "c" for g in range(4)}),
             node("n2", allocated={g: "b" for g in range(4)}), node("n3")]
    inst = instance(nodes, [job("big", replicas=2, dp_hop=2)] if pending is None else pending)
    ages = {"a": 600, "b": 10, "c": 600}
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name=n, checkpoint_age_s=ages[n],
                   job=job(n, tp=4) if n in manifests else None) for n in ("a", "b", "c")]})
    return inst.model_copy(update={"spec": spec})
