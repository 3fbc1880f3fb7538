"""The physical form of a transformer layer's time: which kernels it runs, their shapes, and
what the hardware can do on each shape. No fitted number lives here: the fit
(:mod:`hyperplace.costmodel.scale_fit`) multiplies these times by one coefficient per term.

**GEMMs** (:func:`gemm_time`). A layer's forward pass is four GEMMs per tensor-parallel
shard, with ``T = b·s/cp`` tokens (context parallelism splits the sequence): QKV
``(T, h, (h + 2·kv·d)/tp)``, attention output ``(T, h/tp, h)``, MLP up ``(T, h, g·f/tp)``
(``g = 2`` for a gated MLP) and MLP down ``(T, f/tp, h)`` as ``(M, K, N)``; the backward
pass runs each as a data-gradient ``(M, N, K)`` and a weight-gradient ``(K, M, N)`` GEMM.
A GEMM of ``2·M·N·K`` FLOPs takes the larger of its compute time at the type's peak and
its operand traffic ``2·(MK + KN + MN)`` bytes at HBM bandwidth, the compute time divided
by the shape's efficiency:

* wave quantisation: output tiles of 128 x 256 (the CUTLASS/cuBLAS default for BF16 on
  Ampere and Hopper) spread over the streaming multiprocessors; the last wave runs partly
  empty, and edge tiles are partly padding: ``q_wave = M·N / (waves · SMs · 128 · 256)``;
* the K loop's prologue and epilogue, about two 64-wide k-tiles of work that is not
  overlapped: ``q_k = K / (K + 128)``.

So a GEMM is more efficient the larger its per-shard shape, as measured GEMMs are (and as
the Megatron-Core README explains its MFU rising from 41 % to 48 % with model size).

**Attention.** With FlashAttention the score matrix is never stored: the kernel does the
causal half of the ``12·b·s²·h`` forward+backward attention FLOPs (model FLOPs count the
full square) at a published fraction of peak per kernel generation
(:data:`FLASH_EFFICIENCY`). Without it (Megatron-LM 2021) QKᵀ and AV are batched GEMMs of
shape ``(s, d, s)`` and ``(s, s, d)`` per head, and the scores make memory traffic.

**Memory-bound work** at HBM bandwidth (:func:`elementwise_bytes`): layer norms, bias +
dropout + residual (fused, as Megatron does), the MLP activation, and without FlashAttention
the softmax and dropout over the ``a·s²`` scores. Without sequence parallelism the
``h``-wide ops are replicated on every TP rank; with it they are sharded.

Published figures used (not fitted): FlashAttention-2 (Dao, arXiv:2307.08691) reaches 50-73 %
of A100 peak forward+backward, 35 % of H100's; FlashAttention-3 (Shah et al.,
arXiv:2407.08608) 75 % of H100 BF16 peak forward and 1.5-1.75x FlashAttention-2 backward.
SM counts are from the vendors' datasheets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hyperplace.models.gpu import GPUType

TILE_M, TILE_N = 128, 256
K_OVERHEAD = 128
# Streaming multiprocessors (compute units for AMD) per GPU, from the datasheets.
SMS = {"V100": 80, "A100": 108, "H100": 132, "H200": 132, "GH200": 132, "H20": 78,
       "B200": 148, "GB200": 148, "GB300": 160, "MI300X": 304, "MI325X": 304, "MI355X": 256,
       "A10": 72, "L4": 58, "L40S": 142, "T4": 40}
DEFAULT_SMS = 108
# Forward+backward fraction of the BF16 peak a FlashAttention kernel reaches, by family.
# A100: FlashAttention-2 (50-73 % fwd+bwd: 0.55 taken for causal, head dim 128).
# Hopper: FlashAttention-3 / cuDNN fused attention (fwd 0.75, bwd ~0.5: 0.55 fwd+bwd).
# Blackwell and AMD: no published training figure here; Hopper's fraction assumed.
FLASH_EFFICIENCY = {"V100": 0.35, "A100": 0.55, "A10": 0.45, "L4": 0.45, "L40S": 0.45,
                    "T4": 0.35}
FLASH_DEFAULT = 0.55
FP8_FAMILIES = {"H100", "H200", "GH200", "H20", "B200", "GB200", "GB300", "MI300X", "MI325X",
                "MI355X", "L4", "L40S"}


def sms(gpu: GPUType) -> int:
    return SMS.get(gpu.family, DEFAULT_SMS)


def has_fp8(gpu: GPUType) -> bool:
    return gpu.family in FP8_FAMILIES


def shape_efficiency(m: float, n: float, k: float, gpu: GPUType, batch: float = 1.0) -> float:
    """Wave quantisation x K-loop efficiency of ``batch`` ``(M, K, N)`` GEMMs run as one
    batched kernel, in (0, 1]."""
    m, n, k = max(m, 1.0), max(n, 1.0), max(k, 1.0)
    tiles = math.ceil(m / TILE_M) * math.ceil(n / TILE_N) * max(1, math.ceil(batch))
    waves = math.ceil(tiles / sms(gpu))
    q_wave = m * n * max(1.0, batch) / (waves * sms(gpu) * TILE_M * TILE_N)
    return min(1.0, q_wave) * k / (k + K_OVERHEAD)


def gemm_time(m: float, k: float, n: float, gpu: GPUType, peak: float, bw: float,
              el: float, batch: float = 1.0) -> float:
    """Seconds of ``batch`` GEMMs ``(M, K) x (K, N)`` at 100 % of the shape's efficiency."""
    flops = 2.0 * m * n * k * batch
    compute = flops / (peak * shape_efficiency(m, n, k, gpu, batch))
    traffic = el * (m * k + k * n + m * n) * batch / bw
    return max(compute, traffic)


@dataclass(frozen=True)
class LayerDims:
    """One transformer layer's dimensions on one TP x CP shard, one micro-batch."""

    tokens: float  # b·s/cp per replica
    seq: int  # full sequence length
    hidden: int
    heads: int
    kv_heads: int
    ffn: int  # MLP width (an expert's, times active experts for MoE)
    gated: bool
    tp: int
    cp: int = 1
    sequence_parallel: bool = False
    flash: bool = True


def layer_gemms(d: LayerDims) -> list[tuple[float, float, float]]:
    """Forward GEMMs ``(M, K, N)`` of one layer per TP shard."""
    head_dim = d.hidden / d.heads
    qkv = (d.hidden + 2 * d.kv_heads * head_dim) / d.tp
    up = (2 if d.gated else 1) * d.ffn / d.tp
    t = d.tokens
    return [(t, d.hidden, qkv), (t, d.hidden / d.tp, d.hidden), (t, d.hidden, up),
            (t, d.ffn / d.tp, d.hidden)]


def gemm_seconds(d: LayerDims, gpu: GPUType, peak: float, bw: float, el: float) -> float:
    """Forward + backward seconds of a layer's dense GEMMs at 100 % shape efficiency (plus,
    without FlashAttention, the attention's batched GEMMs)."""
    total = 0.0
    for m, k, n in layer_gemms(d):
        total += gemm_time(m, k, n, gpu, peak, bw, el)  # forward
        total += gemm_time(m, n, k, gpu, peak, bw, el)  # data gradient
        total += gemm_time(k, m, n, gpu, peak, bw, el)  # weight gradient
    if not d.flash:
        head_dim = d.hidden / d.heads
        seqs = d.tokens / (d.seq / d.cp)
        batch = seqs * d.heads / d.tp
        s_q = d.seq / d.cp
        for m, k, n in ((s_q, head_dim, d.seq), (s_q, d.seq, head_dim)):
            total += 3 * gemm_time(m, k, n, gpu, peak, bw, el, batch)
    return total


def flash_seconds(d: LayerDims, gpu: GPUType, peak: float) -> float:
    """Forward + backward seconds of FlashAttention (the causal half of ``12·b·s²·h``)."""
    if not d.flash:
        return 0.0
    seqs = d.tokens / (d.seq / d.cp)
    # each CP rank holds s/cp queries against all s keys; causal: half the square
    flops = 12.0 * seqs * (d.seq / d.cp) * d.seq * d.hidden / d.tp / 2.0
    return flops / (peak * FLASH_EFFICIENCY.get(gpu.family, FLASH_DEFAULT))


def elementwise_bytes(d: LayerDims, el: float) -> float:
    """Forward + backward HBM bytes of a layer's memory-bound ops (module docstring)."""
    h_ops = 11.0 * d.hidden  # 2 norms (2h each), 2 fused bias-dropout-residuals (3.5h each)
    h_ops /= d.tp if d.sequence_parallel else 1
    mlp = (3.0 if d.gated else 2.0) * d.ffn / d.tp  # activation: read g·f, write f
    rope = 4.0 * (d.hidden + 2 * d.kv_heads * d.hidden / d.heads) / d.tp if d.gated else 0.0
    per_token = h_ops + mlp + rope
    if not d.flash:
        # softmax (read, write) and dropout (read, write, a byte mask) over the scores; the
        # batched GEMMs' own reads and writes of them are their operand traffic
        per_token += 4.5 * d.heads * d.seq / d.tp
    return 3.0 * el * d.tokens * per_token  # backward moves about twice the forward's bytes
