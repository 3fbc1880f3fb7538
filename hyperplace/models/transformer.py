"""Transformer arithmetic: parameters, FLOPs and activation bytes from a model's dimensions.

One place for the formulas the layer split, ``hyperplace predict`` and the fitted cost model
all use (``shared/design/cost-model.md``):

* FLOPs: every matrix multiply costs ``2·tokens·params`` forward and twice that backward, so a
  layer is ``6·tokens·active_params``; attention scores and values add ``12·b·s²·h`` (Narayanan
  et al., SC'21, eq. 3: ``72·b·s·h²·(1 + s/(6h))`` for a GPT layer). Full recomputation adds
  one forward pass (``8·tokens·params``, i.e. ``96`` instead of ``72``).
* Activation bytes (Korthikanti et al. 2022, "Reducing Activation Recomputation", Table 2):
  ``s·b·h·(34 + 5·a·s/h)`` for a GPT layer, of which ``10·sbh`` stays whole on every
  tensor-parallel rank and the rest is sharded; sequence parallelism shards all of it;
  FlashAttention drops the ``5·a·s/h`` term (the ``s×s`` score matrix is never stored).
  The 34 splits as attention 11 + MLP 19 + norms 4; the MLP part is generalised to other
  widths and to gated (SwiGLU) and mixture-of-experts MLPs in proportion to the activations
  it keeps.
* Optimizer state: 16 bytes per parameter under mixed-precision Adam, sharded by ZeRO.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperplace.errors import InputError

if TYPE_CHECKING:
    from hyperplace.models.model_spec import ModelSpec

BF16_BYTES = 2
# Bytes each tensor-parallel rank keeps whole for a layer without sequence parallelism,
# in units of s·b·h (Korthikanti et al. 2022, Section 4.2.2: layer-norm inputs and dropout masks).
REPLICATED_SBH = 10.0


def transformer_layer_flops(b: int, s: int, h: int) -> float:
    """Forward+backward FLOPs of one GPT layer, ``72·b·s·h²·(1 + s/(6h))`` (SC'21)."""
    return 72.0 * b * s * h * h * (1.0 + s / (6.0 * h))


def attention_params(spec: "ModelSpec") -> float:
    """Q, K, V and output projections (grouped-query attention shrinks K and V)."""
    h = spec.hidden_size
    head_dim = h / spec.num_heads
    return 2.0 * h * h + 2.0 * h * spec.kv_heads * head_dim


def mlp_params(spec: "ModelSpec", ffn: int) -> float:
    """One MLP (an expert, for MoE) of width ``ffn``: 3 matrices when gated, else 2."""
    return (3.0 if spec.gated_mlp else 2.0) * spec.hidden_size * ffn


def is_moe_layer(spec: "ModelSpec", index: int) -> bool:
    return spec.num_experts > 1 and index >= spec.first_dense_layers


def layer_params(spec: "ModelSpec", index: int = 0) -> tuple[float, float]:
    """(stored, active per token) parameters of transformer layer ``index``.

    A measured per-layer count (``layerParams``) wins: it is what the profiled run had.
    """
    if spec.layer_params is not None:
        return spec.layer_params, spec.layer_params
    h = spec.hidden_size
    norms = 2.0 * h
    attn = attention_params(spec)
    if is_moe_layer(spec, index):
        expert = mlp_params(spec, spec.moe_ffn)
        router = h * spec.num_experts
        stored = spec.num_experts * expert + spec.shared_experts * expert + router
        active = spec.experts_per_token * expert + spec.shared_experts * expert + router
        return attn + stored + norms, attn + active + norms
    dense = mlp_params(spec, spec.ffn)
    return attn + dense + norms, attn + dense + norms


def layer_flops(spec: "ModelSpec", index: int, b: int, s: int) -> float:
    """Forward+backward model FLOPs of transformer layer ``index`` for ``b`` sequences of ``s``
    (matrix multiplies only: norm weights do no matmul)."""
    _, active = layer_params(spec, index)
    matmul = active - (0.0 if spec.layer_params is not None else 2.0 * spec.hidden_size)
    return 6.0 * b * s * matmul + 12.0 * b * s * s * spec.hidden_size


def head_flops(spec: "ModelSpec", b: int, s: int) -> float:
    """Forward+backward FLOPs of the LM head (logits over the vocabulary)."""
    return 6.0 * b * s * spec.hidden_size * spec.vocab_size


def mlp_activation_sbh(spec: "ModelSpec", index: int) -> float:
    """Activation bytes the MLP keeps, in units of s·b·h (19 for a 4h-wide GELU MLP)."""
    if is_moe_layer(spec, index):
        width = spec.moe_ffn * (spec.experts_per_token + spec.shared_experts)
    else:
        width = spec.ffn
    per_width = 4.0 * (1.5 if spec.gated_mlp else 1.0)
    return 3.0 + per_width * width / spec.hidden_size


def activation_bytes(spec: "ModelSpec", index: int, b: int, s: int) -> tuple[float, float]:
    """(replicated, sharded) activation bytes of a layer per micro-batch (Korthikanti 2022).

    With sequence parallelism nothing is replicated; with FlashAttention the ``5·a·s/h``
    score term is gone.
    """
    sbh = float(s * b * spec.hidden_size)
    scores = 0.0 if spec.flash_attention else 5.0 * spec.num_heads * s / spec.hidden_size
    total = 11.0 + mlp_activation_sbh(spec, index) + 4.0 + scores
    if spec.sequence_parallel:
        return 0.0, total * sbh
    return REPLICATED_SBH * sbh, (total - REPLICATED_SBH) * sbh


def param_state_bytes_per_param(zero: int, dp: int, fp32_grad_accum: bool = False) -> float:
    """Bytes per parameter for weights, grads and Adam state under mixed precision.

    16 (2 + 2 + 12) without ZeRO, 18 with fp32 gradient accumulation; ZeRO-1/2/3 shard over
    the data-parallel degree d: ``4 + 12/d``, ``2 + 14/d``, ``16/d``.
    """
    d = max(1, dp)
    if zero == 0:
        return 18.0 if fp32_grad_accum else 16.0
    if zero == 1:
        return 4.0 + 12.0 / d
    if zero == 2:
        return 2.0 + 14.0 / d
    if zero == 3:
        return 16.0 / d
    raise InputError(f"ZeRO stage must be 0, 1, 2 or 3, got {zero}", path="zero")
