"""Small hand-built instances for placement tests (optima computed by hand in each test)."""

from __future__ import annotations

from hyperplace.models import (
    Cluster,
    FabricGenerator,
    FabricSpec,
    Instance,
    InstanceSpec,
    Node,
    TrainingJob,
)
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
