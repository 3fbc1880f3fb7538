"""Kueue ClusterQueues and small queued rounds shared by the fair-share tests of the simulator,
the round session and the service."""

from __future__ import annotations

from hyperplace.instances.generator import small_job
from hyperplace.models import Cluster, FabricGenerator, FabricSpec, Instance, InstanceSpec, Node
from hyperplace.models.instance import in_queue
from hyperplace.models.job import ObjectMeta, TrainingJob


def cluster_queue(name: str, nominal: int = 64, weight: float = 1) -> dict:
    return {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
                {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": nominal}]}]}],
                "fairSharing": {"weight": weight}}}


def one_node(queues: list[dict]) -> Instance:
    node = Node(name="n0", gpu_type="H100-80", gpu_count=8)
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2)
    cluster = Cluster(name="c", nodes=[node], fabric=FabricSpec(generator=gen))
    return Instance(metadata=ObjectMeta(name="one"),
                    spec=InstanceSpec(clusters=[cluster])).with_queues(queues)


def queued(inst: Instance, name: str, gpus: int, queue: str) -> TrainingJob:
    return in_queue(small_job(name, "m", gpus), queue, inst)[0]
