"""How fast a job runs on the placement it got: GPU type and network.

A job's run time is ``work / speed(placement)``; speed 1.0 is the reference (an A100-80 GPU
type, every node of the job on one leaf switch). The model, in two factors:

**GPU type.** A type's throughput is its dense BF16 peak times the model-FLOPs utilisation
the engine plans with (``GPUType.bf16_tflops * GPUType.mfu``: vendor datasheets via
``gpu_specs.csv``), the compute term of the layer-split cost model (FLOPs / (peak x MFU)).
Synchronous training runs at its slowest GPU, so a job spread over several types gets the
slowest one's speed. (The Gavel throughputs measured on K80/P100/V100 in the shared
profiles cover none of the A100/H100 types the instances have, so they are not used.)

**Network.** A step is a compute share and a communication share ``s`` (default 0.2 for
data-parallel all-reduce between nodes, :data:`COMM_SHARE`); the communication share runs
at the bandwidth the placement gets. Published figures (ByteDance Arnold, arXiv 2509.15940):
groups spread across pods lose up to 17 % of collective bandwidth and 70 % of point-to-point
bandwidth. We apply them at every switch tier a job crosses beyond one leaf: collective
(DP all-reduce) bandwidth x 0.83, point-to-point (pipeline stages, a tensor-parallel group
cut over nodes) x 0.30, compounded once more per further tier (spine -> core). An
oversubscribed leaf (downlink capacity / uplink capacity = r > 1) divides the bandwidth of
traffic leaving it by r as well. Time factor = ``(1 - s) + s / bandwidth_factor``. Jobs on
one node, or on nodes of one leaf, pay nothing. ``network=False`` turns the factor off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from hyperplace.models import Cluster, GPUType, Instance, TrainingJob
from hyperplace.models.job import GroupType

REFERENCE_TYPE = "A100-80"
COMM_SHARE = {"collective": 0.2, "p2p": 0.1, "tp": 0.4}
CROSS_POD_COLLECTIVE_BW = 0.83   # Arnold: up to 17 % collective bandwidth lost across pods
CROSS_POD_P2P_BW = 0.30          # Arnold: up to 70 % point-to-point bandwidth lost


def type_speed(t: GPUType, reference: GPUType) -> float:
    """Throughput of ``t`` relative to ``reference`` (peak x planning MFU)."""
    return (t.bf16_tflops * t.mfu) / (reference.bf16_tflops * reference.mfu)


@dataclass
class SpeedModel:
    """Predicted speed of a placement (see the module docstring); ``network`` is the switch."""

    instance: Instance
    network: bool = True
    reference: str = REFERENCE_TYPE
    comm_share: dict[str, float] = field(default_factory=lambda: dict(COMM_SHARE))

    @cached_property
    def _ref(self) -> GPUType:
        return self.instance.catalog.get(self.reference)

    @cached_property
    def _node(self) -> dict[str, tuple[Cluster, GPUType]]:
        return {n.name: (c, self.instance.catalog.get(n.gpu_type))
                for c in self.instance.clusters for n in c.nodes}

    @cached_property
    def _tiers(self) -> dict[str, list[int]]:
        return {c.name: [r for r in c.network.radii] for c in self.instance.clusters}

    @cached_property
    def _oversub(self) -> dict[str, float]:
        out = {}
        for c in self.instance.clusters:
            g = c.fabric.generator
            r = 1.0
            if g is not None and g.type in ("fat-tree-2", "fat-tree-3"):
                down = g.nodes_per_leaf * g.node_gbps
                up = (g.spines if g.type == "fat-tree-2" else g.spines_per_pod) * g.uplink_gbps
                r = max(1.0, down / up)
            out[c.name] = r
        return out

    def gpu_speed(self, gpu_type: str) -> float:
        return type_speed(self.instance.catalog.get(gpu_type), self._ref)

    @cached_property
    def _selector_speeds(self) -> dict[str | None, tuple[float, float]]:
        return {}

    def _speeds(self, job: TrainingJob) -> tuple[float, float]:
        """(slowest, fastest) type speed the job's type selector allows (memoised)."""
        units = job.units() if job.name not in self._units else self._units[job.name]
        self._units[job.name] = units
        sel = units[0].gpu_types if units else None
        hit = self._selector_speeds.get(sel)
        if hit is None:
            types = {t.name: t for _, t in self._node.values()
                     if sel is None or t.matches(sel)}
            speeds = [type_speed(t, self._ref) for t in types.values()] or [1.0]
            hit = self._selector_speeds[sel] = (min(speeds), max(speeds))
        return hit

    @cached_property
    def _units(self) -> dict[str, list]:
        return {}

    def best_speed(self, job: TrainingJob) -> float:
        """The fastest type speed the job could get (its type selector allowing)."""
        return self._speeds(job)[1]

    def slowest_speed(self, job: TrainingJob) -> float:
        return self._speeds(job)[0]

    def crossings(self, nodes: list[str]) -> int:
        """Switch tiers the node set crosses beyond one leaf (0: one node or one leaf)."""
        if len(set(nodes)) <= 1:
            return 0
        cluster = self._node[nodes[0]][0]
        net = cluster.network
        tiers = 0
        for radius in self._tiers[cluster.name]:
            if len({net.node_domain(n, radius) or n for n in nodes}) > 1:
                tiers += 1
        return tiers

    def network_factor(self, job: TrainingJob, unit_nodes: dict[str, list[str]]) -> float:
        """Time multiplier (>= 1) from the placement's spread; 1.0 with the network off."""
        if not self.network:
            return 1.0
        all_nodes = [n for nodes in unit_nodes.values() for n in nodes]
        cross = self.crossings(all_nodes)
        cluster = self._node[all_nodes[0]][0].name if all_nodes else ""
        oversub = self._oversub.get(cluster, 1.0)
        time = 1.0
        # data-parallel all-reduce between replicas
        if cross > 0:
            bw = CROSS_POD_COLLECTIVE_BW ** cross / oversub
            s = self.comm_share["collective"]
            time *= (1 - s) + s / bw
        # pipeline stages and tensor-parallel groups cut over nodes: point-to-point
        groups = {g.name: g.type for g in job.spec.resource_groups}
        has_pp = any(t == GroupType.PIPELINE_PARALLEL for t in groups.values())
        if has_pp and cross > 0:
            bw = CROSS_POD_P2P_BW ** cross / oversub
            s = self.comm_share["p2p"]
            time *= (1 - s) + s / bw
        for nodes in unit_nodes.values():
            if len(set(nodes)) > 1:
                c = self.crossings(nodes)
                bw = (CROSS_POD_P2P_BW ** c / oversub) if c else 1.0
                s = self.comm_share["tp"]
                # a TP group over the node boundary leaves NVLink: InfiniBand is ~1/9 of
                # NVLink on DGX H100 (400 Gb/s = 50 GB/s per GPU vs 450 GB/s each way)
                time *= (1 - s) + s / (bw / 9.0)
                break
        return time

    def speed(self, job: TrainingJob, gpus_by_unit: dict[str, list[tuple[str, int]]]) -> float:
        """Relative speed of ``job`` on this placement (unit -> [(node, gpu)])."""
        types = {self._node[n][1].name for gpus in gpus_by_unit.values() for n, _ in gpus}
        slowest = min(type_speed(self.instance.catalog.get(t), self._ref) for t in types)
        unit_nodes = {u: [n for n, _ in gpus] for u, gpus in gpus_by_unit.items()}
        return slowest / self.network_factor(job, unit_nodes)
