"""Per-layer times of a model on one stage: the one implementation the layer split and
``hyperplace predict`` share.

A stage runs ``d = gpu_count / tp`` replicas; each gets ``b / d`` sequences of the stage's
micro-batch ``b`` (Metis and AMP divide a stage's micro-batch the same way). A layer's time
comes, in order of preference, from

1. a measurement on this GPU type and TP degree (``measured``);
2. a measurement of the same layer elsewhere, rescaled by the fitted model's ratio between
   the two configurations (``scaled-tp``, ``scaled-gpu``);
3. the fitted model alone (``fitted``; ``peak-scaled`` for a type with no measurement, where
   the efficiencies of the nearest measured type are used).

Then the observed-step scale of the calibration, if any (``hyperplace calibrate
--observations``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hyperplace.costmodel.calibration import Calibration, default_calibration
from hyperplace.costmodel.collectives import allreduce, hierarchical_allreduce
from hyperplace.costmodel.features import ADAM_BYTES_PER_PARAM, MS, LayerShape
from hyperplace.costmodel.hardware import intra_node_bandwidth
from hyperplace.models.gpu import GPUCatalog, GPUType, default_catalog
from hyperplace.models.model_spec import Layer, ModelSpec
from hyperplace.models.transformer import head_flops, is_moe_layer

GPUS_PER_NODE = 8
GRAD_BYTES = 2  # bf16 gradients all-reduced (Megatron --bf16 with grads reduced in bf16)


@dataclass
class LayerTimes:
    """Seconds per micro-batch of every layer on one stage (per replica, replicas in
    parallel), with the parts the reports break out."""

    fwd: np.ndarray
    bwd: np.ndarray  # includes the recomputed forward when recomputing
    tp_comm: np.ndarray  # part of fwd+bwd that is tensor-parallel communication
    sources: list[str]
    note: str = ""

    @property
    def total(self) -> np.ndarray:
        return self.fwd + self.bwd


def _shapes(spec: ModelSpec, layer: Layer, index: int, per_replica: float, tp: int,
            precision: str, cp: int = 1) -> list[LayerShape]:
    """The fitted kinds a split layer is made of: the embedding folded into the first
    transformer layer and the final norm and LM head into the last, as the split counts."""
    s, h, a, vocab = spec.seq_length, spec.hidden_size, spec.num_heads, spec.vocab_size
    scale = per_replica / spec.micro_batch_size  # layer FLOPs are per stage micro-batch
    flash = spec.flash_attention

    dims = spec.has_dimensions and spec.layer_params is None
    ffn = 0
    if dims:
        moe = is_moe_layer(spec, index)
        ffn = (spec.moe_ffn * (spec.experts_per_token + spec.shared_experts) if moe
               else spec.ffn)

    def shape(kind: str, flops: float) -> LayerShape:
        return LayerShape(kind=kind, flops=flops, micro_batch=per_replica, seq=s, hidden=h,
                          heads=a, vocab=vocab, params=layer.params, tp=tp,
                          precision=precision, flash=flash, kv_heads=spec.kv_heads,
                          ffn=ffn, gated=spec.gated_mlp, cp=cp,
                          sequence_parallel=spec.sequence_parallel,
                          selective_recompute=spec.selective_recompute)

    if not spec.has_dimensions:
        if layer.kind == "transformer":
            return [shape("transformer", layer.flops * scale)]
        return [shape(layer.kind, layer.flops * scale)]
    last = index == spec.num_layers - 1
    head = head_flops(spec, spec.micro_batch_size, s) if last else 0.0
    out = [shape("transformer", (layer.flops - head) * scale)]
    if index == 0 and vocab:
        out.append(shape("embedding", 0.0))
    if last and vocab:
        out.append(shape("norm", 0.0))
        out.append(shape("head", head * scale))
    return out


def fitted_layer_time(calibration: Calibration, spec: ModelSpec, layer: Layer, index: int,
                      gpu: GPUType, tp: int, per_replica: float, precision: str,
                      catalog: GPUCatalog) -> tuple[float, float, float]:
    """(fwd, bwd, tp part) of one layer by the fitted model alone."""
    fwd = bwd = tp_part = 0.0
    for shape in _shapes(spec, layer, index, per_replica, tp, precision):
        f, b, t = calibration.layer_time(shape, gpu, catalog)
        fwd, bwd, tp_part = fwd + f, bwd + b, tp_part + t
    return fwd, bwd, tp_part


def stage_layer_times(spec: ModelSpec, layers: list[Layer], gpu: GPUType, tp: int, dp: int,
                      *, recompute: bool = False, precision: str = "bf16",
                      calibration: Calibration | None = None,
                      catalog: GPUCatalog | None = None) -> LayerTimes:
    """Forward, backward and TP-communication seconds per micro-batch of every layer."""
    calibration = calibration or default_calibration()
    catalog = catalog or default_catalog()
    per_replica = spec.micro_batch_size / dp
    fwd, bwd, tp_comm = [], [], []  # floats, made arrays at the end (the same values)
    sources = []
    scale = calibration.scale_for(spec.name, gpu.name)
    _, fit_note = calibration.fit_for(gpu, catalog)
    fitted = "fitted" if gpu.name in calibration.gpus else "peak-scaled"
    last = spec.num_layers - 1
    moe = spec.has_dimensions and spec.num_experts > 1  # is_moe_layer, hoisted
    first_dense = spec.first_dense_layers
    # the fitted time depends on the layer only through its FLOPs, parameters and whether
    # it is the first, the last or an MoE layer: price each distinct one once
    memo: dict[tuple, tuple[float, float, float]] = {}
    for i, layer in enumerate(layers):
        key = (layer.kind, layer.flops, layer.params, i == 0, i == last,
               moe and i >= first_dense)
        got = memo.get(key)
        if got is None:
            got = memo[key] = fitted_layer_time(calibration, spec, layer, i, gpu, tp,
                                                per_replica, precision, catalog)
        model_f, model_b, model_tp = got
        exact = layer.measured_time(gpu.name, tp) if layer.measured else None
        if exact is not None:
            f, b, source = exact.fwd_s / dp, exact.bwd_s / dp, "measured"
            ratio_tp = model_tp / (model_f + model_b) if model_f + model_b > 0 else 0.0
            t_part = (f + b) * ratio_tp
        elif layer.measured:
            ref = min(layer.measured, key=lambda m: (m.gpu_type != gpu.name,
                                                      abs(np.log(m.tp / tp))))
            ref_gpu = catalog.get(ref.gpu_type)
            rf, rb, _ = fitted_layer_time(calibration, spec, layer, i, ref_gpu, ref.tp,
                                          spec.micro_batch_size, precision, catalog)
            ratio = (model_f + model_b) / (rf + rb) if rf + rb > 0 else 1.0
            share = model_f / (model_f + model_b) if model_f + model_b > 0 else 1 / 3
            total = (ref.fwd_s + ref.bwd_s) * ratio
            f, b = total * share, total * (1 - share)
            t_part = total * (model_tp / (model_f + model_b) if model_f + model_b else 0.0)
            source = "scaled-tp" if ref.gpu_type == gpu.name else "scaled-gpu"
        else:
            f, b, t_part = model_f, model_b, model_tp
            source = fitted
        if recompute:
            b += f
            t_part *= 1.5  # the recomputed forward repeats its two all-reduces
        fwd.append(f * scale)
        bwd.append(b * scale)
        tp_comm.append(t_part * scale)
        sources.append(source)
    note = "" if gpu.name in calibration.gpus else fit_note
    fit, _ = calibration.fit_for(gpu, catalog)
    if fit.precisions and precision not in fit.precisions and not any(
            s.startswith("measured") for s in sources):
        measured_at = "/".join(fit.precisions)
        note = (note + "; " if note else "") + (
            f"{gpu.name}'s efficiencies were fitted on {measured_at} runs only: at "
            f"{precision} they are assumed the same relative to the {precision} peak")
    return LayerTimes(fwd=np.array(fwd, dtype=float), bwd=np.array(bwd, dtype=float),
                      tp_comm=np.array(tp_comm, dtype=float), sources=sources, note=note)


def dp_allreduce_time(nbytes: float, gpu: GPUType, tp: int, dp: int, nic_latency_s: float,
                      catalog: GPUCatalog | None = None) -> float:
    """Gradient all-reduce of ``nbytes`` per GPU among ``dp`` replicas of a ``tp``-wide group:
    inside one node over NVLink (measured curves), else hierarchical (NVLink inside the node,
    the NIC across nodes), ring or tree as NCCL picks."""
    if dp <= 1 or nbytes <= 0:
        return 0.0
    per_node = max(1, min(dp, GPUS_PER_NODE // max(tp, 1)))
    nodes = -(-dp // per_node)
    nic = gpu.nic_gbps / 8 * 1e9
    if nodes == 1:
        bw, _ = intra_node_bandwidth(gpu, per_node, nbytes, catalog)
        return allreduce(nbytes, dp, bw, 2e-6)
    bw, _ = intra_node_bandwidth(gpu, per_node, nbytes, catalog) if per_node > 1 else (nic, "")
    return hierarchical_allreduce(nbytes, per_node, nodes, bw, 2e-6, nic, nic_latency_s)


def optimizer_times(layers: list[Layer], gpu: GPUType, tp: int, dp: int, zero: int,
                    calibration: Calibration | None = None,
                    catalog: GPUCatalog | None = None) -> np.ndarray:
    """Seconds of the optimizer update per layer on one GPU (ZeRO >= 1 shards it over DP).
    The fixed per-step overhead is charged once per stage by the caller."""
    calibration = calibration or default_calibration()
    fit, _ = calibration.fit_for(gpu, catalog)
    coef = fit.coefficients["optimizer"]
    shard = tp * (dp if zero >= 1 else 1)
    bw = gpu.hbm_tb_s * 1e12
    return np.array([coef[0] * layer.params * ADAM_BYTES_PER_PARAM / (shard * bw)
                     for layer in layers])


def optimizer_fixed(gpu: GPUType, calibration: Calibration | None = None,
                    catalog: GPUCatalog | None = None) -> float:
    calibration = calibration or default_calibration()
    fit, _ = calibration.fit_for(gpu, catalog)
    return fit.coefficients["optimizer"][1] * MS
