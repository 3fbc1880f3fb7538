"""The fitted cost model's terms: one feature column per physical cost, per layer kind.

A layer's time on a GPU type is ``Σ_j coef[g, kind, j] · feature_j``, each feature a time
the hardware would take at 100 % of what its shape allows (:mod:`hyperplace.costmodel.kernels`
gives the shapes and the physics), so each coefficient is an inverse efficiency fitted from
measurements, never negative:

* ``gemm``: the layer's GEMMs (forward, data- and weight-gradient) per TP shard, each at the
  larger of its compute time at peak divided by its shape efficiency (wave quantisation,
  K-loop overhead) and its operand traffic at HBM bandwidth; without FlashAttention also the
  attention's batched GEMMs. A layer given by FLOPs only (no dimensions) counts
  ``flops / (TP · peak)``;
* ``attention``: FlashAttention's causal work at the published kernel efficiency (for a
  layer given by FLOPs only: the score matrix's ``b·a·s²`` values / HBM bandwidth);
* ``elementwise``: memory-bound bytes (norms, fused bias-dropout-residual, the MLP
  activation, RoPE; without FlashAttention the softmax and dropout over the scores) / HBM
  bandwidth;
* ``fixed``: a millisecond (kernel launches and framework overhead per layer);
* ``tpComm``: the layer's tensor-parallel all-reduces (4 per transformer layer, 2 for the
  embedding) at the measured intra-node bandwidth for that message size; its coefficient is
  the exposed (not overlapped) share, ``1 − overlap``;
* ``tpFixed``: a millisecond when TP > 1 (synchronisation);
* ``logits``: the FP32 cross-entropy's traffic, :data:`CE_BYTES_PER_LOGIT` per logit of
  ``b·s·V`` / (TP · HBM bandwidth), for the LM head;
* ``optimizer``: 16 bytes of Adam state traffic per parameter / HBM bandwidth.
"""

from __future__ import annotations

from dataclasses import dataclass

from hyperplace.costmodel.collectives import ring_allreduce
from hyperplace.costmodel.hardware import (
    element_bytes,
    intra_node_bandwidth,
    memory_bandwidth,
    peak_flops,
)
from hyperplace.costmodel.kernels import (
    LayerDims,
    elementwise_bytes,
    flash_seconds,
    gemm_seconds,
    gemm_time,
)
from hyperplace.models.gpu import GPUCatalog, GPUType

MS = 1e-3
# Cross-entropy over the vocabulary in FP32, as Megatron and torchtitan compute it, forward
# and backward: read the 16-bit logits and write an FP32 copy (2 + 4), max/subtract/exp/
# normalise in place (2 x (4 + 4)), the gradient softmax - one-hot (4 + 4) and its 16-bit
# cast (4 + 2): about 36 bytes of HBM traffic per logit.
CE_BYTES_PER_LOGIT = 36.0
# NCCL ring all-reduce on NVSwitch boards: bus bandwidth as a share of the per-direction
# NVLink datasheet figure, and the per-step latency (assumed; the fit's tpComm coefficient
# absorbs what they miss).
NVSWITCH_BUS_EFFICIENCY = 0.8
NVSWITCH_STEP_LATENCY_S = 5e-6
FP8_RELATIVE_EFFICIENCY = 0.8
ADAM_BYTES_PER_PARAM = 16.0

COLUMNS: dict[str, tuple[str, ...]] = {
    "transformer": ("gemm", "attention", "elementwise", "fixed", "tpComm", "tpFixed"),
    "embedding": ("elementwise", "fixed", "tpComm", "tpFixed"),
    "head": ("gemm", "logits", "fixed", "tpFixed"),
    "norm": ("elementwise", "fixed"),
    "optimizer": ("optimizer", "fixed"),
}
KINDS = tuple(COLUMNS)
# Columns that are tensor-parallel communication (reported as the ``tpComm`` part).
TP_COLUMNS = {"tpComm", "tpFixed"}


@dataclass(frozen=True)
class LayerShape:
    """What the features need to know about one layer and one run."""

    kind: str
    flops: float  # forward+backward model FLOPs of the whole layer, one micro-batch
    micro_batch: float  # sequences per replica per micro-batch
    seq: int
    hidden: int
    heads: int
    vocab: int = 0
    params: float = 0.0  # parameters of the layer (optimizer features)
    tp: int = 1
    precision: str = "bf16"
    flash: bool = False
    kv_heads: int = 0  # 0: = heads
    ffn: int = 0  # MLP width; 0: unknown (a layer given by FLOPs only)
    gated: bool = False
    cp: int = 1  # context parallelism: the sequence split over cp ranks
    sequence_parallel: bool = False
    selective_recompute: bool = False  # attention core and MLP activation recomputed

    def dims(self) -> LayerDims | None:
        if self.ffn <= 0 or self.hidden <= 0 or self.heads <= 0:
            return None
        return LayerDims(tokens=self.micro_batch * self.seq / self.cp, seq=self.seq,
                         hidden=self.hidden, heads=self.heads,
                         kv_heads=self.kv_heads or self.heads, ffn=self.ffn, gated=self.gated,
                         tp=self.tp, cp=self.cp, sequence_parallel=self.sequence_parallel,
                         flash=self.flash)


def tp_allreduce_time(gpu: GPUType, tp: int, nbytes: float,
                      catalog: GPUCatalog | None = None) -> float:
    """Seconds of one TP all-reduce of ``nbytes`` inside a node.

    On an NVSwitch board (all-to-all NVLink at >= 600 GB/s per GPU: DGX/HGX A100, H100,
    B200, NVL72) every GPU drives its full NVLink whatever the TP degree: ring all-reduce
    with :data:`NVSWITCH_BUS_EFFICIENCY` of the per-direction NVLink figure and
    :data:`NVSWITCH_STEP_LATENCY_S` per ring step. Elsewhere the measured Sailor curves.
    """
    if gpu.nvlink_gbps >= 600:
        bw = NVSWITCH_BUS_EFFICIENCY * gpu.nvlink_gbps / 2 * 1e9
        return ring_allreduce(nbytes, tp, bw, NVSWITCH_STEP_LATENCY_S)
    link, _ = intra_node_bandwidth(gpu, tp, nbytes, catalog)
    return ring_allreduce(nbytes, tp, link, 0.0)


def features(shape: LayerShape, gpu: GPUType, catalog: GPUCatalog | None = None) -> list[float]:
    """The feature row of ``shape`` on ``gpu``, in the order of ``COLUMNS[shape.kind]``."""
    t = shape.tp
    el = element_bytes(shape.precision)
    bw = memory_bandwidth(gpu)
    sbh = shape.micro_batch * shape.seq * shape.hidden / shape.cp
    values: dict[str, float] = {"fixed": MS, "tpFixed": MS if t > 1 else 0.0}
    peak = peak_flops(gpu, shape.precision)
    if shape.precision == "fp8":
        # GEMMs at the FP8 peak (Transformer Engine); attention and elementwise stay BF16.
        # FP8 GEMMs are not in the fit set: their efficiency relative to the FP8 peak is
        # assumed FP8_RELATIVE_EFFICIENCY of the fitted BF16 one (an assumption, said so).
        el = 2
    dims = shape.dims()
    values["attention"] = 0.0
    if shape.kind == "transformer" and dims is not None:
        fp8 = shape.precision == "fp8"
        values["gemm"] = gemm_seconds(dims, gpu, peak, bw, 1 if fp8 else el) / (
            FP8_RELATIVE_EFFICIENCY if fp8 else 1.0)
        values["attention"] = flash_seconds(dims, gpu, peak / 2 if fp8 else peak)
        values["elementwise"] = elementwise_bytes(dims, el) / bw
    elif shape.kind == "head" and shape.vocab and shape.hidden:
        tokens = shape.micro_batch * shape.seq / shape.cp
        n = shape.vocab / t
        values["gemm"] = (gemm_time(tokens, shape.hidden, n, gpu, peak, bw, el)
                          + gemm_time(tokens, n, shape.hidden, gpu, peak, bw, el)
                          + gemm_time(shape.hidden, tokens, n, gpu, peak, bw, el))
    else:
        # a layer given by its FLOPs only (a profiled layer): the attention column holds
        # the score matrix's traffic, which FlashAttention never writes
        values["gemm"] = shape.flops / (t * peak)
        values["attention"] = 0.0 if shape.flash else (
            shape.micro_batch * shape.heads * shape.seq * shape.seq * el / (t * bw))
        values["elementwise"] = sbh * el / (t * bw)
    if shape.kind != "transformer" or dims is None:
        values.setdefault("elementwise", sbh * el / (t * bw))
    values["logits"] = (shape.micro_batch * shape.seq * shape.vocab * CE_BYTES_PER_LOGIT
                        / (t * bw * shape.cp))
    values["optimizer"] = shape.params * ADAM_BYTES_PER_PARAM / (t * bw)
    if t > 1 and shape.kind in ("transformer", "embedding"):
        nbytes = sbh * el
        count = 4 if shape.kind == "transformer" else 2
        values["tpComm"] = count * tp_allreduce_time(gpu, t, nbytes, catalog)
    else:
        values["tpComm"] = 0.0
    return [values[c] for c in COLUMNS[shape.kind]]


def selective_recompute_features(shape: LayerShape, gpu: GPUType) -> list[float]:
    """The forward work selective recomputation repeats in the backward pass, as a row in
    the order of ``COLUMNS[shape.kind]`` (priced with the same fitted coefficients as the
    layer's own terms): the attention core (Korthikanti et al. 2022, section 4.2: QKᵀ,
    softmax, dropout, AV; with FlashAttention its forward kernel, a third of the kernel's
    forward+backward FLOPs) and the MLP activation function (read ``g·f``, write ``f`` per
    token: a third of the activation's forward+backward traffic), both forward only.
    Zeros for anything but a transformer layer with dimensions."""
    dims = shape.dims()
    if shape.kind != "transformer" or dims is None or not shape.selective_recompute:
        return [0.0] * len(COLUMNS[shape.kind])
    el = 2 if shape.precision == "fp8" else element_bytes(shape.precision)
    bw = memory_bandwidth(gpu)
    peak = peak_flops(gpu, shape.precision)
    values = {c: 0.0 for c in COLUMNS[shape.kind]}
    values["attention"] = flash_seconds(dims, gpu, peak / 2 if shape.precision == "fp8"
                                        else peak) / 3.0
    act = (3.0 if dims.gated else 2.0) * dims.ffn / dims.tp  # bytes per token / el, fwd
    per_token = act
    if not dims.flash:
        head_dim = dims.hidden / dims.heads
        batch = dims.tokens / (dims.seq / dims.cp) * dims.heads / dims.tp
        s_q = dims.seq / dims.cp
        values["gemm"] = sum(gemm_time(m, k, n, gpu, peak, bw, el, batch)
                             for m, k, n in ((s_q, head_dim, dims.seq),
                                             (s_q, dims.seq, head_dim)))
        per_token += 4.5 * dims.heads * dims.seq / dims.tp
    values["elementwise"] = el * dims.tokens * per_token / bw
    return [values[c] for c in COLUMNS[shape.kind]]
