"""Cluster state across rounds: which GPUs run which job, which are down, and why.

:class:`ClusterState` is the mutable state a round loop keeps between rounds (the domain
models are frozen). It starts from an instance's nodes, fabric and GPU types with every GPU
free (the instance's own running jobs and queue are not used) and turns into an
:class:`~hyperplace.models.Instance` for a round on demand: ``allocated`` holds the GPUs of
running jobs, ``faulty`` every GPU that cannot be used (a failed GPU, every GPU of a failed
node, every GPU of a node attached to a failed switch).
"""

from __future__ import annotations

from collections import defaultdict

from hyperplace.models import Instance, Node, TrainingJob
from hyperplace.models.instance import RunningJob

GPU = tuple[str, int]


def fresh_node(node: Node, allocated: dict[int, str], faulty: list[int]) -> Node:
    """A copy of ``node`` with new state (no stale cached properties carried over)."""
    data = {k: v for k, v in node.__dict__.items() if k in Node.model_fields}
    data["allocated"] = allocated
    data["faulty"] = faulty
    return Node.model_construct(**data)


class ClusterState:
    """GPU ownership and failures of one instance, updated in place between rounds."""

    def __init__(self, instance: Instance):
        clusters = []
        for c in instance.clusters:
            nodes = [fresh_node(n, {}, []) for n in c.nodes]
            clusters.append(c.model_copy(update={"nodes": nodes}))
            # the fabric depends only on node names: keep the cached one if present
            if "network" in c.__dict__:
                clusters[-1].__dict__["network"] = c.__dict__["network"]
            clusters[-1].__dict__.pop("node_by_name", None)
        self.base = instance.model_copy(update={"spec": instance.spec.model_copy(
            update={"clusters": clusters, "jobs": []})})
        for key in ("node_index", "federation"):
            self.base.__dict__.pop(key, None)
        self.nodes: dict[str, Node] = {n.name: n for c in self.base.clusters for n in c.nodes}
        self.cluster_of: dict[str, str] = {n.name: c.name for c in self.base.clusters
                                           for n in c.nodes}
        self.owner: dict[str, dict[int, str]] = {n: {} for n in self.nodes}
        self.failed_gpus: dict[str, set[int]] = defaultdict(set)
        self.failed_nodes: set[str] = set()
        self.failed_switches: set[str] = set()
        self.switches_of: dict[str, set[str]] = {}
        for c in self.base.clusters:
            for node, sw in c.network.attachments.items():
                self.switches_of[node] = set(sw)
        self.jobs: dict[str, list[GPU]] = {}
        # with declared queues: what each running job's round entry says (queue, priority),
        # and the queues' decayed usage history (spec.runningJobs, spec.queueUsage)
        self.running_info: dict[str, RunningJob] = {}
        self.queue_usage: dict[str, float] = {}
        self.version = 0
        self._cache: tuple[int, tuple[str, ...], Instance] | None = None
        self._nodes: dict[str, Node] = {}  # the last round's node objects

    # ---- queries ---------------------------------------------------------------
    @property
    def total_gpus(self) -> int:
        return sum(n.gpu_count for n in self.nodes.values())

    def node_down(self, node: str) -> bool:
        return node in self.failed_nodes or bool(self.switches_of.get(node, set())
                                                 & self.failed_switches)

    def unusable(self, node: str) -> set[int]:
        if self.node_down(node):
            return set(range(self.nodes[node].gpu_count))
        return set(self.failed_gpus.get(node, ()))

    def free_gpus(self, node: str) -> list[int]:
        bad = self.unusable(node)
        own = self.owner[node]
        return [i for i in range(self.nodes[node].gpu_count) if i not in bad and i not in own]

    def free_count(self) -> int:
        return sum(len(self.free_gpus(n)) for n in self.nodes)

    def busy_count(self) -> int:
        return sum(len(o) for o in self.owner.values())

    def down_count(self) -> int:
        return sum(len(self.unusable(n)) for n in self.nodes)

    def switch_nodes(self, switch: str) -> list[str]:
        return [n for n, sws in self.switches_of.items() if switch in sws]

    def switches(self) -> set[str]:
        return {s for sws in self.switches_of.values() for s in sws}

    # ---- updates ---------------------------------------------------------------
    def allocate(self, job: str, gpus: list[GPU]) -> None:
        for node, i in gpus:
            if i in self.owner[node] or i in self.unusable(node):
                raise ValueError(f"GPU {node}:{i} is not free for {job}")
        for node, i in gpus:
            self.owner[node][i] = job
        self.jobs[job] = list(gpus)
        self.version += 1

    def set_running_info(self, info: RunningJob) -> None:
        """Queue and priority of a running job, for the rounds' quotas and fair share."""
        self.running_info[info.name] = info
        self.version += 1

    def set_queue_usage(self, usage: dict[str, float]) -> None:
        if usage != self.queue_usage:
            self.queue_usage = dict(usage)
            self.version += 1

    def release(self, job: str) -> list[GPU]:
        self.running_info.pop(job, None)
        gpus = self.jobs.pop(job, [])
        for node, i in gpus:
            if self.owner[node].get(i) == job:
                del self.owner[node][i]
        self.version += 1
        return gpus

    def jobs_on(self, gpus: list[GPU]) -> set[str]:
        return {self.owner[n][i] for n, i in gpus if i in self.owner.get(n, {})}

    def jobs_on_nodes(self, nodes: list[str]) -> set[str]:
        return {j for n in nodes for j in self.owner[n].values()}

    def fail_gpu(self, node: str, gpu: int) -> None:
        self.failed_gpus[node].add(gpu)
        self.version += 1

    def repair_gpu(self, node: str, gpu: int) -> None:
        self.failed_gpus[node].discard(gpu)
        self.version += 1

    def fail_node(self, node: str) -> None:
        self.failed_nodes.add(node)
        self.version += 1

    def repair_node(self, node: str) -> None:
        self.failed_nodes.discard(node)
        self.version += 1

    def fail_switch(self, switch: str) -> list[str]:
        self.failed_switches.add(switch)
        self.version += 1
        return self.switch_nodes(switch)

    def repair_switch(self, switch: str) -> None:
        self.failed_switches.discard(switch)
        self.version += 1

    # ---- the instance a round sees ---------------------------------------------
    def _round_node(self, base: Node) -> Node:
        """The node as a round sees it: the previous round's object when its GPU state did
        not change (so the next round's problem reuses its view), else a fresh copy."""
        owner, down = self.owner[base.name], sorted(self.unusable(base.name))
        last = self._nodes.get(base.name)
        if last is not None and last.allocated == owner and last.faulty == down:
            return last
        node = fresh_node(base, dict(owner), down)
        self._nodes[base.name] = node
        return node

    def instance(self, pending: list[TrainingJob]) -> Instance:
        """The current state with ``pending`` as the queue (cached while nothing changes)."""
        key = tuple(j.name for j in pending)
        if self._cache and self._cache[0] == self.version and self._cache[1] == key:
            return self._cache[2]
        clusters = []
        for c in self.base.clusters:
            nodes = [self._round_node(n) for n in c.nodes]
            copy = c.model_copy(update={"nodes": nodes})
            copy.__dict__["network"] = c.network
            copy.__dict__.pop("node_by_name", None)
            clusters.append(copy)
        update: dict = {"clusters": clusters, "jobs": list(pending)}
        if self.base.spec.queues or self.running_info:
            update["running_jobs"] = [self.running_info[j] for j in sorted(self.jobs)
                                      if j in self.running_info]
        if self.base.spec.queues:
            update["queue_usage"] = dict(self.queue_usage)
        inst = self.base.model_copy(update={"spec": self.base.spec.model_copy(update=update)})
        inst.__dict__["catalog"] = self.base.catalog
        for k in ("node_index", "federation", "running_job_info"):
            inst.__dict__.pop(k, None)
        self._cache = (self.version, key, inst)
        return inst


def reorder_nodes(instance: Instance, fast_first: bool) -> Instance:
    """The same clusters with nodes listed fastest GPU type first (or last).

    Peer rules walk nodes in list order, so the order decides which GPU type they fill
    first. The fabric is materialised (switches and links listed) so that reordering the
    nodes does not rewire it.
    """
    from hyperplace.costmodel.speed import rank_speed
    from hyperplace.models import FabricSpec

    clusters = []
    for c in instance.clusters:
        net = c.network
        speed = {n.name: rank_speed(instance.catalog.get(n.gpu_type), instance.catalog)
                 for n in c.nodes}
        nodes = sorted(c.nodes, key=lambda n: -speed[n.name] if fast_first else speed[n.name])
        fabric = FabricSpec(switches=list(net.switches), links=list(net.links))
        clusters.append(c.model_copy(update={"nodes": nodes, "fabric": fabric}))
        for k in ("network", "node_by_name"):
            clusters[-1].__dict__.pop(k, None)
    out = instance.model_copy(update={"spec": instance.spec.model_copy(
        update={"clusters": clusters})})
    for k in ("node_index", "federation"):
        out.__dict__.pop(k, None)
    return out
