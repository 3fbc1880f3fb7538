"""Small federations and jobs built in code, for tests, examples and the benchmark.

``member(name, gpu_type, nodes, busy=...)`` makes a cluster of 8-GPU NVSwitch nodes on a
two-tier fat-tree (``nodes_per_leaf`` per leaf), some nodes fully or partly held by running
jobs; ``federation_instance`` joins members with WAN links; ``pipeline_job`` makes a
FoundationModelTrainingJob of ``stages`` model-parallel groups of ``gpus_per_stage`` GPUs
and ``replicas`` data-parallel copies; ``random_federation`` draws a seeded federation of
mixed GPU generations and WAN links for the benchmark.
"""

from __future__ import annotations

import random

from hyperplace.models.cluster import (
    Cluster,
    FabricGenerator,
    FabricSpec,
    InterClusterLink,
)
from hyperplace.models.instance import Instance, InstanceSpec
from hyperplace.models.job import (
    GPURequirements,
    GroupType,
    InterNodeConnectivity,
    ObjectMeta,
    ResourceGroup,
    Toleration,
    TrainingJob,
    TrainingJobSpec,
)
from hyperplace.models.node import Node

GENERATIONS = ("A100-80", "H100-80", "H200-141", "B200")
NVLINK_FLOOR = {"A100-80": 600.0, "H100-80": 900.0, "H200-141": 900.0, "B200": 1800.0}


def member(name: str, gpu_type: str, nodes: int, *, busy: dict[int, int] | None = None,
           nodes_per_leaf: int = 4, prefix: str | None = None) -> Cluster:
    """``nodes`` 8-GPU nodes; ``busy`` maps node index -> GPUs held by a running job
    (the lowest indices)."""
    busy = busy or {}
    prefix = prefix or name
    out = []
    for i in range(nodes):
        held = busy.get(i, 0)
        out.append(Node(name=f"{prefix}-{i:03d}", gpu_type=gpu_type, gpu_count=8,
                        allocated={g: f"{name}-running-{i}" for g in range(held)}))
    return Cluster(name=name, nodes=out, fabric=FabricSpec(generator=FabricGenerator(
        type="fat-tree-2", nodes_per_leaf=nodes_per_leaf, spines=2)))


def federation_instance(name: str, clusters: list[Cluster],
                        links: list[tuple[str, str, float, float]]) -> Instance:
    """Members and WAN links ``(a, b, gbps, latency_ms)``."""
    return Instance(metadata=ObjectMeta(name=name), spec=InstanceSpec(
        clusters=clusters,
        inter_cluster_links=[InterClusterLink(a=a, b=b, gbps=g, latency_ms=lat)
                             for a, b, g, lat in links]))


def pipeline_job(name: str, model: str, *, stages: int, replicas: int = 1,
                 gpus_per_stage: int = 8, priority: str | int = "normal",
                 types: str | None = None, nvlink_gbps: float = 0.0,
                 annotations: dict[str, str] | None = None) -> TrainingJob:
    """A job of ``stages`` model-parallel groups (the first TensorParallel, the rest
    PipelineParallel) of ``gpus_per_stage`` GPUs, ``replicas`` DP copies."""
    req = GPURequirements(min_nvlink_bandwidth_gbps_per_pair=nvlink_gbps)
    groups = [ResourceGroup(name="tensor-parallel-group" if k == 0 else f"pipeline-stage-{k}",
                            type=GroupType.TENSOR_PARALLEL if k == 0 else
                            GroupType.PIPELINE_PARALLEL,
                            gpus_per_group=gpus_per_stage, gpu_requirements=req)
              for k in range(stages)]
    groups.append(ResourceGroup(name="data-parallel", type=GroupType.DATA_PARALLEL,
                                gpus_per_group=1,
                                inter_node_connectivity=InterNodeConnectivity()))
    tol = [Toleration(key="gpu-type", value=types)] if types else []
    return TrainingJob(metadata=ObjectMeta(name=name, annotations=annotations or {}),
                       spec=TrainingJobSpec(model=model, replica_count=replicas,
                                            resource_groups=groups, priority=priority,
                                            tolerations=tol))


def random_federation(clusters: int, seed: int, *, nodes: tuple[int, int] = (2, 8),
                      wan_gbps: tuple[float, ...] = (10, 25, 100, 200, 400),
                      busy_fraction: float = 0.5) -> Instance:
    """A seeded federation: mixed generations, a WAN mesh of 10-400 Gb/s, 5-40 ms, part of
    each cluster busy (whole nodes, so free capacity comes in node-sized pieces)."""
    rng = random.Random(seed)
    members = []
    for c in range(clusters):
        gpu_type = GENERATIONS[rng.randrange(len(GENERATIONS))]
        n = rng.randint(*nodes)
        busy = {i: 8 for i in range(n) if rng.random() < busy_fraction}
        members.append(member(f"c{c:02d}", gpu_type, n, busy=busy))
    links = []
    for a in range(clusters):
        for b in range(a + 1, clusters):
            links.append((f"c{a:02d}", f"c{b:02d}", float(rng.choice(wan_gbps)),
                          float(rng.randint(5, 40))))
    return federation_instance(f"random-{clusters}c-s{seed}", members, links)
