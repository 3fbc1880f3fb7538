"""Pricing a layer split: per-stage times, memory and synchronisation of a pipeline, and the
price of one split (:func:`evaluate_split`). The cost model's own arithmetic, used by
``hyperplace predict`` and (re-exported) by the layer-split formulation in
:mod:`hyperplace.formulations.layer_split`, whose docstring states the cost model.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hyperplace.costmodel.calibration import Calibration, default_calibration
from hyperplace.costmodel.layers import (
    GPUS_PER_NODE,
    GRAD_BYTES,
    dp_allreduce_time,
    optimizer_fixed,
    optimizer_times,
    stage_layer_times,
)
from hyperplace.errors import InputError, known_words
from hyperplace.models.gpu import GPUCatalog, GPUType, default_catalog
from hyperplace.models.model_spec import Layer
from hyperplace.models.split import SplitProblem, Stage, StageLink

GB = 1e9
# PyTorch's caching allocator reserves more than it has allocated (block rounding, freed
# blocks of other sizes): a few per cent on a steady training loop; assumed 5 %.
FRAGMENTATION_RESERVE = 0.05
GRAD_BUCKET_BYTES = 40e6  # Megatron-LM's default gradient bucket (40 M elements) order
INF = math.inf

@dataclass(frozen=True)
class LinkInfo:
    gbps: float
    latency_s: float
    kind: str
    crosses_clusters: bool


@dataclass
class SplitData:
    """Backend-independent arrays for one stage order. Times in seconds, memory in bytes."""

    problem: SplitProblem
    stages: list[Stage]
    layers: list[Layer]
    gpus: list[GPUType]
    time: np.ndarray  # (P, L) compute seconds of layer l on stage k
    prefix_time: np.ndarray  # (P, L+1)
    xfer: np.ndarray  # (P-1, L+1) boundary seconds at cut j between k and k+1 (inf at 0, L)
    mem_layer: np.ndarray  # (P, L) bytes per GPU of layer l on stage k at its position
    prefix_mem: np.ndarray  # (P, L+1)
    mem_const: np.ndarray  # (P,) bytes per GPU regardless of layers
    mem_cap: np.ndarray  # (P,) bytes per GPU
    inflight: np.ndarray  # (P,) micro-batches in flight at each position
    dp_sync_layer: np.ndarray  # (P, L) seconds of the stage's gradient all-reduce per layer
    dp_sync_const: np.ndarray  # (P,) latency part of it
    links: list[LinkInfo]  # P-1 links between neighbours
    time_sources: list[str] = field(default_factory=list)  # per stage: measured/scaled/fitted
    tp_comm: np.ndarray | None = None  # (P, L) part of ``time`` that is TP communication
    ep_comm: np.ndarray | None = None  # (P, L) part of ``time`` that is EP all-to-all
    fwd: np.ndarray | None = None  # (P, L) forward part of ``time``
    optimizer_layer: np.ndarray | None = None  # (P, L) optimizer update seconds per layer
    optimizer_const: np.ndarray | None = None  # (P,) fixed part of it
    cost_notes: list[str] = field(default_factory=list)

    def sync_matrix(self, k: int) -> np.ndarray:
        """``(L+1, L+1)`` end-of-step time of stage k (DP all-reduce + optimizer) for every
        (a, b); inf where a >= b. The step time adds the largest over stages."""
        L = self.num_layers
        per_layer = self.dp_sync_layer[k] + (self.optimizer_layer[k]
                                             if self.optimizer_layer is not None else 0.0)
        prefix = np.concatenate([[0.0], np.cumsum(per_layer)])
        const = self.dp_sync_const[k] + (self.optimizer_const[k]
                                         if self.optimizer_const is not None else 0.0)
        mat = prefix[None, :] - prefix[:, None] + const
        a_idx = np.arange(L + 1)
        return np.where(a_idx[:, None] >= a_idx[None, :], INF, mat)

    @property
    def num_stages(self) -> int:
        return len(self.stages)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def load_matrix(self, k: int) -> np.ndarray:
        """``(L+1, L+1)`` load of stage k for every (a, b); inf where a >= b or memory overflows."""
        P, L = self.num_stages, self.num_layers
        pt = self.prefix_time[k]
        load = pt[None, :] - pt[:, None]
        if k > 0:
            load = load + self.xfer[k - 1][:, None]
        if k < P - 1:
            load = load + self.xfer[k][None, :]
        pm = self.prefix_mem[k]
        mem = pm[None, :] - pm[:, None] + self.mem_const[k]
        a_idx = np.arange(L + 1)
        bad = (a_idx[:, None] >= a_idx[None, :]) | (mem > self.mem_cap[k] * (1 + 1e-12))
        return np.where(bad, INF, load)

    def memory_matrix(self, k: int) -> np.ndarray:
        """``(L+1, L+1)`` memory per GPU of stage k for every (a, b); inf where a >= b."""
        L = self.num_layers
        pm = self.prefix_mem[k]
        mem = pm[None, :] - pm[:, None] + self.mem_const[k]
        a_idx = np.arange(L + 1)
        return np.where(a_idx[:, None] >= a_idx[None, :], INF, mem)


@dataclass
class SplitEvaluation:
    """A split priced by the cost model."""

    cuts: list[int]
    compute_s: list[float]
    transfer_s: list[float]
    load_s: list[float]
    memory_bytes: list[float]
    capacity_bytes: list[float]
    dp_sync_s: list[float]
    optimizer_s: list[float]
    overflow: list[tuple[int, float]]  # (stage index, bytes over capacity)
    bottleneck_s: float
    sum_s: float
    pipeline_time_s: float
    step_time_s: float

    @property
    def feasible(self) -> bool:
        return not self.overflow


# ------------------------------------------------------------------------------ building


def _gpu(catalog: GPUCatalog, stage: Stage) -> GPUType:
    g = catalog.find(stage.gpu_type)
    if g is None:
        raise InputError(
            f"unknown GPU type {stage.gpu_type!r} ({known_words(stage.gpu_type, catalog.names())})",
            path=f"stage {stage.name}",
        )
    return g


def find_link(problem: SplitProblem, a: Stage, b: Stage) -> LinkInfo:
    """The link between two stages: by stage names, then cluster names, then the defaults."""
    def match(link: StageLink, x: str, y: str) -> bool:
        return {link.a, link.b} == {x, y} or (x == y and link.a == link.b == x)

    crosses = a.cluster != b.cluster
    for x, y in ((a.name, b.name), (a.cluster, b.cluster)):
        for link in problem.links:
            if match(link, x, y):
                return LinkInfo(link.gbps, link.latency_ms / 1e3, link.kind, crosses)
    if crosses:
        return LinkInfo(problem.inter_cluster_gbps, problem.inter_cluster_latency_ms / 1e3,
                        "wan", True)
    return LinkInfo(problem.intra_cluster_gbps, problem.intra_cluster_latency_ms / 1e3,
                    "ib", False)


def _sync_cost(gpu: GPUType, stage: Stage, problem: SplitProblem,
               catalog: GPUCatalog) -> tuple[float, float]:
    """(seconds per gradient byte, latency seconds) of the stage's DP all-reduce.

    Gradients go in buckets (``GRAD_BUCKET_BYTES``, as Megatron and DDP do), so the
    bandwidth is the one a bucket-sized message gets; the time is then linear in the bytes,
    which keeps a stage's sync a prefix-sum like its compute.
    """
    t, d = stage.tensor_parallel, stage.data_parallel
    if d <= 1:
        return 0.0, 0.0
    latency = problem.intra_cluster_latency_ms / 1e3
    tiny = dp_allreduce_time(1.0, gpu, t, d, latency, catalog)
    full = dp_allreduce_time(GRAD_BUCKET_BYTES, gpu, t, d, latency, catalog)
    return max(0.0, full - tiny) / GRAD_BUCKET_BYTES, tiny


@dataclass
class StageRows:
    """Per-layer figures of one stage that do not depend on its pipeline position."""

    gpu: GPUType
    time: np.ndarray
    fwd: np.ndarray  # forward part of ``time``
    tp_comm: np.ndarray  # part of ``time`` that is tensor-parallel communication
    ep_comm: np.ndarray  # part of ``time`` that is expert-parallel all-to-all
    state_mem: np.ndarray  # weights, grads, optimizer state per GPU
    act_mem: np.ndarray  # activations per in-flight micro-batch per GPU
    dp_sync: np.ndarray
    dp_const: float
    optimizer: np.ndarray  # optimizer update seconds per layer
    optimizer_const: float
    mem_const: float
    cap: float
    source: str
    note: str = ""


def memory_terms(problem: SplitProblem, stage: Stage, layers: list[Layer]
                 ) -> dict[str, Any]:
    """Bytes per GPU of one stage, term by term as the frameworks report them (PyTorch's
    allocator, Megatron's memory report): per layer (arrays) weights, gradients, optimizer
    state (mixed-precision Adam: 2 + 2 + 12 bytes per parameter, sharded by ZeRO / the
    distributed optimizer over the stage's DP x CP ranks), the LM head's FP32 logits and
    their gradient (a transient peak on the stage holding the head), activations per
    micro-batch in flight (:func:`hyperplace.models.transformer.activation_per_token`;
    full recomputation keeps only each layer's input); per stage (floats) the runtime
    (CUDA context, NCCL, framework: ``runtime_overhead_gb``), communication buffers (two
    gradient buckets; ZeRO-3's prefetched layer) and full recomputation's working set (one
    layer's activations rebuilt). The fragmentation reserve (:data:`FRAGMENTATION_RESERVE`
    of all of it) is added by the caller."""
    t, d = stage.tensor_parallel, stage.data_parallel
    model = problem.model
    params = np.array([layer.params for layer in layers])
    zero = problem.zero
    weights = params * (2.0 / d if zero >= 3 else 2.0) / t
    grads = params * (2.0 / d if zero >= 2 else 2.0) / t
    opt = params * (12.0 / d if zero >= 1 else 12.0) / t
    if zero == 0 and problem.fp32_grad_accum:
        grads = grads * 2.0
    ep = problem.expert_parallel
    if ep > 1:
        # routed experts sharded over EP ranks: what is not already sharded over all d
        # DP ranks shrinks by ep (ZeRO's shards of them span the d/ep expert-DP ranks of
        # each of the ep shards: d in all, as for the dense parameters)
        experts = expert_params(model, layers)
        keep = 1.0 - 1.0 / ep
        if zero < 3:
            weights = weights - experts * 2.0 / t * keep
        if zero < 2:
            grads = grads - experts * (4.0 if zero == 0 and problem.fp32_grad_accum
                                       else 2.0) / t * keep
        if zero < 1:
            opt = opt - experts * 12.0 / t * keep
    sp = model.has_dimensions and model.sequence_parallel
    if problem.recompute:
        act = np.array([layer.recompute_bytes / (t if sp else 1) for layer in layers]) / d
    else:
        act = np.array([layer.activation_bytes(t) for layer in layers]) / d
    logits = np.zeros(len(layers))
    if model.has_dimensions and model.vocab_size:
        tokens = model.micro_batch_size * model.seq_length / d
        logits[-1] = 2 * 4.0 * tokens * model.vocab_size / t
    buffers = 2 * GRAD_BUCKET_BYTES if d > 1 else 0.0
    if zero >= 3 and d > 1:
        buffers += 2 * 2.0 * float(params.max()) / t  # the next layer's gathered weights
    working = (max(layer.activation_bytes(t) for layer in layers) / d
               if problem.recompute else 0.0)
    return {"weights": weights, "gradients": grads, "optimizer": opt, "logits": logits,
            "activations": act, "runtime": problem.runtime_overhead_gb * GB,
            "buffers": buffers, "recomputeWorkingSet": working}


# GPUs per NVLink domain (the all-to-all's fast part): an 8-GPU board, or an NVL72 rack.
NVLINK_DOMAIN_GPUS = {"GB200": 72, "GB300": 72}


def expert_params(model: Any, layers: list[Layer]) -> np.ndarray:
    """Routed-expert parameters of every layer (what expert parallelism shards): ``E``
    experts of :func:`~hyperplace.models.transformer.mlp_params` each on an MoE layer, zero
    on dense layers, shared experts and the router (replicated on every EP rank)."""
    from hyperplace.models.transformer import is_moe_layer, mlp_params

    if not model.has_dimensions or model.num_experts <= 1 or model.layer_params is not None:
        return np.zeros(len(layers))
    per = model.num_experts * mlp_params(model, model.moe_ffn)
    return np.array([per if is_moe_layer(model, i) else 0.0 for i in range(len(layers))])


def local_params(problem: SplitProblem, layers: list[Layer]) -> np.ndarray:
    """Parameters per layer one TP x EP shard holds before ZeRO (its gradients are what the
    DP sync reduces, its weights what ZeRO-3 gathers): the routed experts over ``ep``."""
    params = np.array([layer.params for layer in layers])
    if problem.expert_parallel <= 1:
        return params
    return params - expert_params(problem.model, layers) * (1.0 - 1.0 / problem.expert_parallel)


def expert_alltoall_seconds(problem: SplitProblem, stage: Stage, layers: list[Layer],
                            catalog: GPUCatalog) -> tuple[np.ndarray, np.ndarray]:
    """(forward, backward) seconds per layer and micro-batch of expert parallelism's
    all-to-alls: per MoE layer a dispatch and a combine forward and the same two backward
    (:func:`hyperplace.costmodel.collectives.expert_alltoall`), each of the tokens a TP rank
    holds (``b·s/cp``, over TP with sequence parallelism) x top-k x hidden BF16 values.
    The EP group is ``ep`` consecutive data-parallel ranks (Megatron-Core's order TP, CP,
    EP, DP), so ``domain / (TP·CP)`` of them share an NVLink domain (8 GPUs, 72 on NVL72);
    the rest go over the fabric at the NIC's bandwidth. Not overlapped with compute."""
    from hyperplace.costmodel.collectives import expert_alltoall, moe_dispatch_bytes
    from hyperplace.costmodel.features import NVSWITCH_BUS_EFFICIENCY

    ep = problem.expert_parallel
    zeros = np.zeros(len(layers))
    experts = expert_params(problem.model, layers)
    if ep <= 1 or not experts.any():
        return zeros, zeros
    model = problem.model
    g = _gpu(catalog, stage)
    t, d = stage.tensor_parallel, stage.data_parallel  # d counts CP ranks
    tokens = model.micro_batch_size * model.seq_length / d
    if model.sequence_parallel:
        tokens /= t
    nbytes = moe_dispatch_bytes(tokens, model.hidden_size, model.experts_per_token)
    domain = NVLINK_DOMAIN_GPUS.get(g.family, GPUS_PER_NODE)
    per_domain = max(1, min(ep, domain // max(1, t * problem.context_parallel)))
    fabric = max(g.nic_gbps, 1.0) / 8 * 1e9
    nvlink = NVSWITCH_BUS_EFFICIENCY * g.nvlink_gbps / 2 * 1e9
    if nvlink <= 0:  # no NVLink (PCIe boards): every rank's share goes the slow way
        per_domain, nvlink = 1, fabric
    one = expert_alltoall(nbytes, ep, per_domain, nvlink, fabric)
    per_layer = np.where(experts > 0, 2 * one, 0.0)
    return per_layer, per_layer.copy()


def zero3_gather_seconds(problem: SplitProblem, stage: Stage, layers: list[Layer],
                         catalog: GPUCatalog, calibration: Calibration | None = None
                         ) -> np.ndarray:
    """Per layer and micro-batch: ZeRO-3 / FSDP all-gathers a layer's weights for the
    forward and again for the backward (an all-gather moves half an all-reduce's bytes),
    the prefetch hiding all but the exposed share the fit found for communication; zero
    without ZeRO-3 or data parallelism."""
    t, d = stage.tensor_parallel, stage.data_parallel
    if problem.zero < 3 or d <= 1:
        return np.zeros(len(layers))
    g = _gpu(catalog, stage)
    per_byte, _ = _sync_cost(g, stage, problem, catalog)
    exposure = (calibration or default_calibration()).comm_exposure(g, catalog)
    params = local_params(problem, layers)
    return 2 * 0.5 * per_byte * GRAD_BYTES * params / t * exposure


def stage_rows(problem: SplitProblem, stage: Stage, layers: list[Layer],
               catalog: GPUCatalog, calibration: Calibration | None = None) -> StageRows:
    """Times (from :func:`hyperplace.costmodel.stage_layer_times`, the one cost model),
    memory and synchronisation of every layer on one stage."""
    g = _gpu(catalog, stage)
    t, d = stage.tensor_parallel, stage.data_parallel
    times = stage_layer_times(problem.model, layers, g, t, d, recompute=problem.recompute,
                              precision=stage.precision or problem.precision,
                              calibration=calibration, catalog=catalog)
    terms = memory_terms(problem, stage, layers)
    state = terms["weights"] + terms["gradients"] + terms["optimizer"] + terms["logits"]
    act = terms["activations"]
    per_byte, latency = _sync_cost(g, stage, problem, catalog)
    dp = per_byte * GRAD_BYTES * local_params(problem, layers) / t
    gather = zero3_gather_seconds(problem, stage, layers, catalog, calibration)
    ep_fwd, ep_bwd = expert_alltoall_seconds(problem, stage, layers, catalog)
    time_s = times.total + gather + ep_fwd + ep_bwd
    fwd_s = times.fwd + gather / 2 + ep_fwd
    optimizer = optimizer_times(layers, g, t, d, problem.zero, calibration, catalog)
    const = float(terms["runtime"] + terms["buffers"] + terms["recomputeWorkingSet"])
    reserve = 1.0 + FRAGMENTATION_RESERVE
    return StageRows(gpu=g, time=time_s, fwd=fwd_s, tp_comm=times.tp_comm,
                     ep_comm=ep_fwd + ep_bwd,
                     state_mem=state * reserve, act_mem=act * reserve, dp_sync=dp,
                     dp_const=latency, optimizer=optimizer,
                     optimizer_const=optimizer_fixed(g, calibration, catalog),
                     mem_const=const * reserve, cap=g.hbm_gb * GB,
                     source="+".join(sorted(set(times.sources))), note=times.note)


def build_split_data(
    problem: SplitProblem,
    order: list[Stage] | None = None,
    catalog: GPUCatalog | None = None,
    *,
    layers: list[Layer] | None = None,
    cache: dict[str, StageRows] | None = None,
    calibration: Calibration | None = None,
) -> SplitData:
    """Arrays for the given stage order (default: as listed). Raises InputError on bad input.

    ``layers`` and ``cache`` let the order search price each stage once for all orders.
    """
    catalog = catalog or default_catalog()
    stages = list(order if order is not None else problem.stages)
    layers = layers if layers is not None else problem.model.build_layers()
    L, P = len(layers), len(stages)
    if L == 0:
        raise InputError("model has zero layers", path="model")
    if P > L:
        raise InputError(f"{P} stages but only {L} layers: every stage needs a layer",
                         path="stages")
    cache = cache if cache is not None else {}
    rows = []
    for s in stages:
        if s.name not in cache:
            cache[s.name] = stage_rows(problem, s, layers, catalog, calibration)
        rows.append(cache[s.name])
    m = problem.microbatches
    v = problem.virtual_stages
    inflight = np.array([min(P - k, m) for k in range(P)], dtype=float)
    inflight *= interleaved_memory_factor(P, v)
    time = np.vstack([r.time for r in rows])
    mem = np.vstack([r.state_mem + inflight[k] * r.act_mem for k, r in enumerate(rows)])
    links = [find_link(problem, stages[k], stages[k + 1]) for k in range(P - 1)]
    xfer = np.full((max(P - 1, 0), L + 1), INF)
    out_bytes = np.array([layer.output_bytes for layer in layers])
    for k, link in enumerate(links):
        bps = link.gbps * 1e9 / 8
        # interleaving: each rank sends its v chunks' boundaries every micro-batch
        xfer[k, 1:L] = 2 * v * (out_bytes[: L - 1] / bps + link.latency_s)
    zero = np.zeros((P, 1))
    return SplitData(
        problem=problem, stages=stages, layers=layers, gpus=[r.gpu for r in rows], time=time,
        prefix_time=np.hstack([zero, np.cumsum(time, axis=1)]), xfer=xfer, mem_layer=mem,
        prefix_mem=np.hstack([zero, np.cumsum(mem, axis=1)]),
        mem_const=np.array([r.mem_const for r in rows]), mem_cap=np.array([r.cap for r in rows]),
        inflight=inflight, dp_sync_layer=np.vstack([r.dp_sync for r in rows]),
        dp_sync_const=np.array([r.dp_const for r in rows]), links=links,
        time_sources=[r.source for r in rows], tp_comm=np.vstack([r.tp_comm for r in rows]),
        ep_comm=np.vstack([r.ep_comm for r in rows]),
        fwd=np.vstack([r.fwd for r in rows]),
        optimizer_layer=np.vstack([r.optimizer for r in rows]),
        optimizer_const=np.array([r.optimizer_const for r in rows]),
        cost_notes=sorted({r.note for r in rows if r.note}),
    )


# ------------------------------------------------------------------------------ evaluating


def pipeline_time(m: int, bottleneck: float, total: float, v: int = 1) -> float:
    """1F1B time of ``m`` micro-batches: ``m·max + (Σ − max)/v``. With equal stages of time
    ``t`` this is ``m·t + (p − 1)·t/v``: the interleaved schedule's bubble fraction
    ``(p − 1)/(v·m)`` (Narayanan et al., SC'21, section 2.2); ``v = 1`` is plain 1F1B,
    ``(m − 1)·max + Σ``."""
    return m * bottleneck + (total - bottleneck) / v


def interleaved_memory_factor(p: int, v: int) -> float:
    """Activation memory of the first stage under interleaving relative to plain 1F1B:
    ``1 + (p − 1)/(p·v)`` (Korthikanti et al. 2022, section 4.2.3), 1 for ``v = 1``."""
    return 1.0 if v <= 1 else 1.0 + (p - 1) / (p * v)


def validate_cuts(data: SplitData, cuts: list[int]) -> None:
    P, L = data.num_stages, data.num_layers
    if len(cuts) != P + 1 or cuts[0] != 0 or cuts[-1] != L:
        raise ValueError(f"cuts must be [0, ..., {L}] with {P + 1} entries, got {cuts}")
    if any(cuts[k] >= cuts[k + 1] for k in range(P)):
        raise ValueError(f"every stage needs at least one layer, got cuts {cuts}")


def evaluate_split(data: SplitData, cuts: list[int]) -> SplitEvaluation:
    """Price a split: per-stage compute, transfer, memory; bottleneck and step time."""
    validate_cuts(data, cuts)
    P = data.num_stages
    compute, transfer, load, memory, dp_sync, optimizer = [], [], [], [], [], []
    overflow: list[tuple[int, float]] = []
    for k in range(P):
        a, b = cuts[k], cuts[k + 1]
        c = float(data.prefix_time[k, b] - data.prefix_time[k, a])
        x = 0.0
        if k > 0:
            x += float(data.xfer[k - 1, a])
        if k < P - 1:
            x += float(data.xfer[k, b])
        mem = float(data.prefix_mem[k, b] - data.prefix_mem[k, a] + data.mem_const[k])
        compute.append(c)
        transfer.append(x)
        load.append(c + x)
        memory.append(mem)
        dp = float(data.dp_sync_layer[k, a:b].sum() + data.dp_sync_const[k])
        if data.problem.overlap_grad_reduce and data.fwd is not None:
            # buckets reduce while the last micro-batch's backward runs: only the rest shows
            window = float((data.time[k, a:b] - data.fwd[k, a:b]).sum())
            if data.problem.overlap_param_gather and data.problem.zero >= 1:
                # distributed optimizer: the reduce-scatter half under that backward, the
                # parameter all-gather half under the next step's first forward
                ahead = float(data.fwd[k, a:b].sum())
                dp = max(0.0, dp / 2 - window) + max(0.0, dp / 2 - ahead)
            else:
                dp = max(0.0, dp - window)
        dp_sync.append(dp)
        opt = 0.0
        if data.optimizer_layer is not None and data.optimizer_const is not None:
            opt = float(data.optimizer_layer[k, a:b].sum() + data.optimizer_const[k])
        optimizer.append(opt)
        if mem > data.mem_cap[k] * (1 + 1e-12):
            overflow.append((k, mem - float(data.mem_cap[k])))
    bottleneck = max(load)
    total = sum(load)
    m = data.problem.microbatches
    pipeline = pipeline_time(m, bottleneck, total, data.problem.virtual_stages)
    return SplitEvaluation(
        cuts=list(cuts), compute_s=compute, transfer_s=transfer, load_s=load,
        memory_bytes=memory, capacity_bytes=[float(c) for c in data.mem_cap], dp_sync_s=dp_sync,
        optimizer_s=optimizer, overflow=overflow, bottleneck_s=bottleneck, sum_s=total,
        pipeline_time_s=pipeline,
        step_time_s=pipeline + max(x + y for x, y in zip(dp_sync, optimizer)),
    )


def counts_to_cuts(counts: list[int]) -> list[int]:
    return [0, *itertools.accumulate(counts)]
