"""How fast a job runs on the placement it got, in the simulator's units.

A job's run time is ``work / speed(placement)``; speed 1.0 is the reference (an A100-80 GPU
type, every node of the job on one leaf switch). The speed itself is THE speed model,
:func:`hyperplace.costmodel.speed.job_speed` (GPU type(s) through the cost model's per-layer
times for the job's model, or the documented default rule for a job naming no model;
network factors from the predicted communication shares). This module only reads the
placement off the instance: which GPU types, how many GPUs, how many switch tiers the
job's nodes cross beyond one leaf, the leaf's oversubscription (downlink / uplink
capacity), whether pipeline stages or a tensor-parallel group are cut over nodes.
``network=False`` turns the network factor off.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from hyperplace.costmodel.speed import REFERENCE_TYPE, Spread, job_speed, rank_speed, relative_speed
from hyperplace.models import Cluster, GPUType, Instance, TrainingJob
from hyperplace.models.job import GroupType


@dataclass
class SpeedModel:
    """Predicted speed of a placement (see the module docstring); ``network`` is the switch."""

    instance: Instance
    network: bool = True
    reference: str = REFERENCE_TYPE

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

    @cached_property
    def _types(self) -> dict[str, GPUType]:
        return {t.name: t for _, t in self._node.values()}

    @cached_property
    def _job_facts(self) -> dict[str, tuple[str, int, str | None, bool]]:
        return {}

    def _facts(self, job: TrainingJob) -> tuple[str, int, str | None, bool]:
        """(model, GPUs, type selector, has pipeline stages) of a job (memoised)."""
        hit = self._job_facts.get(job.name)
        if hit is None:
            units = job.units()
            sel = units[0].gpu_types if units else None
            pp = any(g.type == GroupType.PIPELINE_PARALLEL for g in job.spec.resource_groups)
            hit = self._job_facts[job.name] = (job.spec.model, job.total_gpus, sel, pp)
        return hit

    def _relative(self, model: str, gpu_type: str, gpus: int, par: object = None) -> float:
        return relative_speed(model, self.instance.catalog.get(gpu_type), gpus,
                              catalog=self.instance.catalog, reference=self.reference,
                              parallelism=par)

    def gpu_speed(self, gpu_type: str, job: TrainingJob | None = None) -> float:
        """The type's speed for ``job`` (network aside), or its ranking speed without one."""
        if job is None:
            return rank_speed(self.instance.catalog.get(gpu_type), self.instance.catalog)
        model, gpus, _, _ = self._facts(job)
        return self._relative(model, gpu_type, gpus, job.spec.parallelism)

    def _speeds(self, job: TrainingJob) -> tuple[float, float]:
        """(slowest, fastest) type speed the job's type selector allows."""
        model, gpus, sel, _ = self._facts(job)
        speeds = [self._relative(model, t.name, gpus, job.spec.parallelism)
                  for t in self._types.values() if sel is None or t.matches(sel)] or [1.0]
        return min(speeds), max(speeds)

    def best_speed(self, job: TrainingJob) -> float:
        """The fastest type speed the job could get (its type selector allowing)."""
        return self._speeds(job)[1]

    def slowest_speed(self, job: TrainingJob) -> float:
        return self._speeds(job)[0]

    def capacity(self, job: TrainingJob) -> float:
        """The instance's GPUs at ``job``'s speed on each of their types: reference
        GPU-seconds of ``job``'s work the whole instance does per second (what
        ``simulate --load`` divides by, :mod:`hyperplace.sim.workload`; every node counts,
        also those of types the job does not accept)."""
        return sum(k * self.gpu_speed(t, job) for t, k in self.type_counts.items())

    @cached_property
    def type_counts(self) -> dict[str, int]:
        """GPU type (catalog name) -> GPUs of that type in the instance."""
        out: dict[str, int] = {}
        for c in self.instance.clusters:
            for n in c.nodes:
                name = self.instance.catalog.get(n.gpu_type).name
                out[name] = out.get(name, 0) + n.gpu_count
        return out

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

    def spread(self, job: TrainingJob, unit_nodes: dict[str, list[str]]) -> Spread | None:
        """The placement's network facts (None with the network off)."""
        if not self.network:
            return None
        all_nodes = [n for nodes in unit_nodes.values() for n in nodes]
        cluster = self._node[all_nodes[0]][0].name if all_nodes else ""
        cut = None
        for nodes in unit_nodes.values():
            if len(set(nodes)) > 1:
                cut = self.crossings(nodes)
                break
        return Spread(tiers=self.crossings(all_nodes),
                      oversubscription=self._oversub.get(cluster, 1.0),
                      pipeline=self._facts(job)[3], tp_cut_tiers=cut)

    def speed(self, job: TrainingJob, gpus_by_unit: dict[str, list[tuple[str, int]]]) -> float:
        """Relative speed of ``job`` on this placement (unit -> [(node, gpu)])."""
        model, gpus, _, _ = self._facts(job)
        types = sorted({self._node[n][1].name for g in gpus_by_unit.values() for n, _ in g})
        unit_nodes = {u: [n for n, _ in g] for u, g in gpus_by_unit.items()}
        catalog = self.instance.catalog
        return job_speed(model, [catalog.get(t) for t in types], gpus,
                         self.spread(job, unit_nodes), catalog=catalog,
                         reference=self.reference, parallelism=job.spec.parallelism).relative

    def planned_speed(self, job: TrainingJob, gpu_type: str | None, tiers: int,
                      cluster: str | None = None) -> float:
        """Speed of ``job`` on a placement not yet made: ``gpu_type`` (None: the slowest type
        it accepts, as on mixed types) with its nodes crossing ``tiers`` switch tiers beyond
        one leaf in ``cluster``; the same speed model as :meth:`speed` (a placement on one
        leaf of that type gets exactly this speed, TP groups cut over nodes aside). Used by
        the over-time schedule (:mod:`hyperplace.sim.planning`)."""
        model, gpus, sel, pp = self._facts(job)
        catalog = self.instance.catalog
        if gpu_type is None:
            types = [t for t in self._types.values() if sel is None or t.matches(sel)]
            if not types:
                return 1e-9
            gpu = min(types, key=lambda t: self._relative(model, t.name, gpus,
                                                          job.spec.parallelism))
        else:
            gpu = catalog.get(gpu_type)
        spread = None
        if self.network:
            name = cluster or self.instance.clusters[0].name
            spread = Spread(tiers=tiers, oversubscription=self._oversub.get(name, 1.0),
                            pipeline=pp, tp_cut_tiers=None)
        return job_speed(model, [gpu], gpus, spread, catalog=catalog,
                         reference=self.reference, parallelism=job.spec.parallelism).relative
