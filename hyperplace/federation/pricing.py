"""Predicted step time of a job in a given shape, from the layer-split cost model.

Only the cost model's public entry points are used (``solve_split`` for the best split and
its symmetric baseline, ``evaluate_split`` through them), so a recalibrated cost model
flows into every federation figure unchanged.

Conventions. A stage that holds ``d`` data-parallel replicas of a ``u``-GPU unit is a split
``Stage`` of ``u·d`` GPUs with tensor parallelism ``min(u, 8)``, and the model's micro-batch
is ``b·d`` sequences (the cost model divides a micro-batch over a stage's replicas, so each
replica sees the job's own ``b``). A step is ``m`` micro-batches per replica, so tokens per
step are ``m·b·s·D`` whatever the shape, and shapes compare by step time alone.

Data-parallel replicas in several clusters synchronise hierarchically (reduce inside each
cluster, as the cost model's per-stage DP sync prices it, then a ring across the clusters
over the WAN, then broadcast inside): the cross-cluster part moves ``2·(k-1)/k`` of the bf16
gradients, ``2·(k-1)/k · 2·N`` bytes, over the slowest WAN link of the ring, plus
``2·(k-1)`` latencies (cost-model.md, Communication: "Hierarchical ... cuts WAN bytes by the
intra-cluster group size").
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from hyperplace.costmodel.speed import active_calibration, planned_config
from hyperplace.federation.asplaced import Location
from hyperplace.federation.problem import FederatedJob
from hyperplace.formulations.layer_split import build_split_data, evaluate_split
from hyperplace.models.cluster import Federation
from hyperplace.models.gpu import GPUCatalog
from hyperplace.models.split import SplitPlan, SplitProblem, Stage, StageLink
from hyperplace.solvers.split import solve_split

BF16_BYTES = 2.0
SPLIT_TIME_LIMIT_S = 2.0


@dataclass
class StagePlace:
    """Pipeline position -> location and layers, as the split decided."""

    position: int
    location: Location
    first_layer: int
    last_layer: int
    compute_s: float = 0.0  # per micro-batch, from the split plan
    transfer_s: float = 0.0
    load_s: float = 0.0


@dataclass
class Price:
    """A priced shape: step time and its parts, per-stage layers, WAN use (Gb/s per link)."""

    feasible: bool
    step_time_s: float = math.inf
    tokens_per_step: float = 0.0
    pipeline_s: float = 0.0
    bottleneck_s: float = 0.0
    wan_transfer_s: float = 0.0
    dp_sync_intra_s: float = 0.0
    dp_sync_inter_s: float = 0.0
    stages: list[StagePlace] = field(default_factory=list)
    layers_per_stage: list[int] = field(default_factory=list)
    wan_gbps: dict[tuple[str, str], float] = field(default_factory=dict)
    even_step_time_s: float | None = None
    reason: str = ""
    configuration: str | None = None  # the planner's, when it priced the shape

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s if self.step_time_s > 0 else 0.0


def link_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a <= b else (b, a)


class Pricer:
    """Prices shapes of jobs on a federation, memoising the layer splits it asks for."""

    def __init__(self, federation: Federation, catalog: GPUCatalog):
        self.federation = federation
        self.catalog = catalog
        self.links = [StageLink(a=link.a, b=link.b, gbps=link.gbps, latency_ms=link.latency_ms,
                                kind="wan") for link in federation.links]
        self._cache: dict[tuple, SplitPlan] = {}
        self._mono: dict[tuple, Price] = {}
        self.splits = 0

    def _stage(self, job: FederatedJob, position: int, loc: Location, replicas: int) -> Stage:
        u = job.unit_gpus(position)
        tp = math.gcd(u, 8) if u > 8 else u
        return Stage(name=f"s{position}@{loc.cluster}:{loc.gpu_type}", cluster=loc.cluster,
                     gpu_type=loc.gpu_type, gpu_count=u * replicas, tp=tp)

    def problem(self, job: FederatedJob, stages: list[Stage], replicas: int,
                fixed_order: bool) -> SplitProblem:
        model = job.model.model_copy(
            update={"micro_batch_size": job.model.micro_batch_size * replicas})
        clusters = {st.cluster for st in stages}
        links = [link for link in self.links if link.a in clusters and link.b in clusters]
        return SplitProblem(model=model, stages=stages, links=links,
                            microbatches=job.microbatches, zero=job.zero,
                            recompute=job.recompute, fixed_order=fixed_order)

    def split(self, job: FederatedJob, stages: list[Stage], replicas: int,
              fixed_order: bool) -> SplitPlan:
        key = (job.model.name, job.model.micro_batch_size, job.microbatches, job.zero,
               job.recompute, replicas,
               fixed_order, tuple((s.name, s.cluster, s.gpu_type, s.gpu_count, s.tp)
                                  for s in stages))
        if key not in self._cache:
            self.splits += 1
            self._cache[key] = solve_split(self.problem(job, stages, replicas, fixed_order),
                                           time_limit=SPLIT_TIME_LIMIT_S, catalog=self.catalog)
        return self._cache[key]

    def evaluate(self, job: FederatedJob, stages: list[Stage], replicas: int,
                 cuts: list[int]):
        """The cost model's figures for a given split (``evaluate_split``)."""
        problem = self.problem(job, stages, replicas, fixed_order=True)
        return evaluate_split(build_split_data(problem, catalog=self.catalog), cuts)

    def planned(self, job: FederatedJob, loc: Location) -> Price | None:
        """The whole job at one location priced with the planner's best configuration
        (:func:`hyperplace.costmodel.speed.planned_config`: TP, PP, virtual stages, CP,
        micro-batch, recomputation and sharding searched for its GPUs, memoised per model,
        type, GPUs and batch), when the job is one stage (no pipeline groups of its own) and
        names no parallelism or ``auto``; at the job's own tokens per step, so it compares
        with every other shape by step time. None when the planner has nothing that fits or
        divides the batch (the job's own shape prices it then)."""
        par = job.job.spec.parallelism
        if job.stages != 1 or not (par is None or par == "auto") \
                or not job.model.has_dimensions:
            return None
        gpu = self.catalog.get(loc.gpu_type)
        batch = job.microbatches * job.model.micro_batch_size * job.replicas
        hit = planned_config(job.model, gpu, job.gpus, active_calibration(), self.catalog,
                             global_batch=batch)
        if hit is None:
            return None
        cfg, pred = hit
        parts = pred.parts
        pipeline = (parts["compute"] + parts["tpComm"] + parts.get("epComm", 0.0) + parts["p2p"]
                    + parts["bubble"])
        layers = job.model.num_layers
        return Price(
            True, step_time_s=pred.step_time_s, tokens_per_step=self.tokens_per_step(job),
            pipeline_s=pipeline, bottleneck_s=pipeline / max(pred.microbatches, 1),
            dp_sync_intra_s=parts["dpSync"],
            stages=[StagePlace(0, loc, 0, layers - 1, parts["compute"], parts["p2p"],
                               pipeline)],
            layers_per_stage=[layers], configuration=cfg.label)

    def monolithic(self, job: FederatedJob, loc: Location) -> Price:
        """The whole job at one location (the planner's best configuration for a
        single-stage job naming no parallelism: :meth:`planned`). Its price depends on the
        GPU type only (no link between clusters is involved), so it is computed once per
        type and form of the job (its model, stages and replicas: a caller may price a job
        as another model or in another form of the same GPUs,
        :func:`hyperplace.fedsim.common.priced_job` and ``pipeline_form``)."""
        key = (job.name, job.model.name, job.stages, job.replicas, loc.gpu_type)
        cached = self._mono.get(key)
        if cached is None:
            cached = self.planned(job, loc) or self.pipeline(job, [(loc, job.stages)])
            self._mono[key] = cached
        return dataclasses.replace(cached, stages=[
            dataclasses.replace(sp, location=loc) for sp in cached.stages])

    def missing_link(self, clusters: list[str]) -> tuple[str, str] | None:
        """A pair of consecutive clusters (in the given order) with no WAN link."""
        for a, b in zip(clusters, clusters[1:]):
            if a != b and self.federation.link(a, b) is None:
                return (a, b)
        return None

    def pipeline(self, job: FederatedJob, parts: list[tuple[Location, int]]) -> Price:
        """All ``D`` replicas of ``n`` consecutive stages at each location; the split picks
        the cluster order (fewest WAN crossings) and the exact layer ranges."""
        stages: list[Stage] = []
        position = 0
        for loc, n in parts:
            for _ in range(n):
                stages.append(self._stage(job, position, loc, job.replicas))
                position += 1
        identical = len({(g.gpus_per_group, g.gpu_requirements) for g in job.stage_groups}) == 1
        plan = self.split(job, stages, job.replicas, fixed_order=not identical)
        if not plan.feasible:
            return Price(False, reason=plan.infeasible_reason or "no split fits in memory")
        by_name = {s.name: s for s in stages}
        ordered = [by_name[n] for n in plan.order]
        missing = self.missing_link([s.cluster for s in ordered])
        if missing:
            return Price(False, reason=f"no WAN link between {missing[0]} and {missing[1]}")
        rows = {r.name: r for r in plan.stages}
        places = [StagePlace(k, Location(s.cluster, s.gpu_type), rows[s.name].first_layer or 0,
                             rows[s.name].last_layer or 0, rows[s.name].compute_s,
                             rows[s.name].transfer_s, rows[s.name].load_s)
                  for k, s in enumerate(ordered)]
        layers = job.model.model_copy(
            update={"micro_batch_size": job.model.micro_batch_size * job.replicas}).build_layers()
        wan_s = 0.0
        wan: dict[tuple[str, str], float] = {}
        step = plan.step_time_s or math.inf
        for a, b in zip(places, places[1:]):
            if a.location.cluster == b.location.cluster:
                continue
            link = self.federation.link(a.location.cluster, b.location.cluster)
            assert link is not None
            out_bytes = layers[a.last_layer].output_bytes
            per_mb = 2 * (out_bytes * 8 / (link.gbps * 1e9) + link.latency_ms / 1e3)
            wan_s += job.microbatches * per_mb
            key = link_key(a.location.cluster, b.location.cluster)
            wan[key] = wan.get(key, 0.0) + job.microbatches * 2 * out_bytes * 8 / step / 1e9
        sym = plan.symmetric
        return Price(
            True, step_time_s=step, tokens_per_step=self.tokens_per_step(job),
            pipeline_s=plan.pipeline_time_s or 0.0, bottleneck_s=plan.bottleneck_s or 0.0,
            wan_transfer_s=wan_s, dp_sync_intra_s=plan.dp_sync_s or 0.0, stages=places,
            layers_per_stage=[p.last_layer - p.first_layer + 1 for p in places], wan_gbps=wan,
            even_step_time_s=sym.step_time_s if sym and sym.feasible else None,
        )

    def tokens_per_step(self, job: FederatedJob) -> float:
        return float(job.microbatches * job.model.tokens_per_microbatch * job.replicas)

    def data_parallel(self, job: FederatedJob, parts: list[tuple[Location, int]]) -> Price:
        """``d`` whole replicas at each location, hierarchical all-reduce across clusters.

        Every replica must hold the same layers at the same pipeline position (a stage's
        gradients are all-reduced across replicas), so one split serves all clusters: the
        exact split of the slowest cluster, evaluated on every other one with
        ``evaluate_split``; the step is the slowest cluster's, plus the WAN all-reduce.
        """
        clusters = [loc.cluster for loc, _ in parts]
        k = len(set(clusters))
        per: list[tuple[Location, int, list[Stage], SplitPlan]] = []
        for loc, d in parts:
            stages = [self._stage(job, p, loc, d) for p in range(job.stages)]
            plan = self.split(job, stages, d, fixed_order=True)
            if not plan.feasible:
                return Price(False, reason=f"{loc}: {plan.infeasible_reason}")
            per.append((loc, d, stages, plan))
        slow = max(per, key=lambda x: x[3].step_time_s or math.inf)
        cuts = slow[3].cuts
        worst_step, worst_loc, worst_ev = 0.0, slow[0], None
        intra = 0.0
        for loc, d, stages, plan in per:
            ev = self.evaluate(job, stages, d, cuts)
            if not ev.feasible:
                return Price(False, reason=f"{loc}: the common layer split {cuts} does not fit "
                                           "in memory there")
            intra = max(intra, max(ev.dp_sync_s))
            if ev.step_time_s >= worst_step:
                worst_step, worst_loc, worst_ev = ev.step_time_s, loc, ev
        assert worst_ev is not None
        places = [StagePlace(p, worst_loc, cuts[p], cuts[p + 1] - 1, worst_ev.compute_s[p],
                             worst_ev.transfer_s[p], worst_ev.load_s[p])
                  for p in range(job.stages)]
        layers = [cuts[p + 1] - cuts[p] for p in range(job.stages)]
        even = None
        sym = slow[3].symmetric
        if job.stages == 1:
            even = worst_step
        elif sym and sym.feasible:
            sym_cuts = [0]
            for n in sym.layers_per_stage:
                sym_cuts.append(sym_cuts[-1] + n)
            evs = [self.evaluate(job, stages, d, sym_cuts) for _, d, stages, _ in per]
            if all(e.feasible for e in evs):
                even = max(e.step_time_s for e in evs)
        ring = list(dict.fromkeys(clusters))
        inter, wan, reason = self.cross_cluster_allreduce(job, ring)
        if reason:
            return Price(False, reason=reason)
        step = worst_step + inter
        return Price(
            True, step_time_s=step, tokens_per_step=self.tokens_per_step(job),
            pipeline_s=worst_ev.pipeline_time_s, bottleneck_s=worst_ev.bottleneck_s,
            dp_sync_intra_s=intra, dp_sync_inter_s=inter, stages=places,
            layers_per_stage=layers,
            wan_gbps={key: bytes_ * 8 / step / 1e9 for key, bytes_ in wan.items()} if k > 1
            else {},
            even_step_time_s=(even + inter) if even else None,
        )

    def cross_cluster_allreduce(self, job: FederatedJob, ring: list[str]
                                ) -> tuple[float, dict[tuple[str, str], float], str]:
        """Seconds of the WAN ring all-reduce among ``ring``'s clusters, bytes per link per
        step, or a reason it cannot run (a ring hop without a link)."""
        k = len(ring)
        if k < 2:
            return 0.0, {}, ""
        hops = list(zip(ring, ring[1:])) + ([(ring[-1], ring[0])] if k > 2 else [])
        grads = BF16_BYTES * job.model.total_params()
        slowest = math.inf
        latency = 0.0
        for a, b in hops:
            link = self.federation.link(a, b)
            if link is None:
                return 0.0, {}, f"no WAN link between {a} and {b} for the all-reduce ring"
            slowest = min(slowest, link.gbps)
            latency = max(latency, link.latency_ms / 1e3)
        volume = 2 * (k - 1) / k * grads
        seconds = volume * 8 / (slowest * 1e9) + 2 * (k - 1) * latency
        return seconds, {link_key(a, b): volume for a, b in hops}, ""
