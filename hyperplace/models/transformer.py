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


def mlp_width(spec: "ModelSpec", index: int) -> float:
    """The MLP width a token goes through (active experts' widths for MoE)."""
    if is_moe_layer(spec, index):
        return float(spec.moe_ffn * (spec.experts_per_token + spec.shared_experts))
    return float(spec.ffn)


def uses_dropout(spec: "ModelSpec") -> bool:
    """Dropout as trained: the model's field, else GPT/OPT-style (ungated) models yes,
    Llama-style (gated) no."""
    return spec.dropout if spec.dropout is not None else not spec.gated_mlp


def activation_per_token(spec: "ModelSpec", index: int, s: int,
                         selective: bool = False) -> tuple[float, float]:
    """(replicated, sharded) bytes a layer keeps per token for its backward pass.

    Korthikanti et al. 2022 (Section 4.1) counted for a GPT layer: ``34·h + 5·a·s`` bytes,
    of which ``10·h`` replicated on every TP rank without sequence parallelism. The same
    count term by term, for any widths (16-bit values, 1-byte dropout masks):

    * replicated: the two norms' inputs ``4h``, the QKV and MLP-up inputs ``2h + 2h``, a
      dropout mask after attention and after the MLP ``h + h`` (when the model uses dropout);
    * sharded: Q ``2h``, K and V ``4·kv·d``, the output projection's input ``2h``; the MLP's
      up output ``2·g·f`` (``g = 2`` gated) and its activation output ``2f``;
    * the score matrix without FlashAttention: softmax output ``2·a·s``, and with dropout
      its mask ``a·s`` and output ``2·a·s``; selective recomputation (Korthikanti's
      attention-only, plus the MLP activation function as Megatron-Core's
      ``--recompute-modules`` allows) recomputes them and the activation output instead.
    """
    h, a = float(spec.hidden_size), spec.num_heads
    kv_d = spec.kv_heads * h / a
    drop = uses_dropout(spec)
    f = mlp_width(spec, index)
    g = 2.0 if spec.gated_mlp else 1.0
    selective = selective or spec.selective_recompute
    replicated = 8.0 * h + (2.0 * h if drop else 0.0)
    # selective recomputation also recomputes the MLP's activation function from its
    # input (Megatron-Core --recompute-modules ... act): its output is not kept
    sharded = 4.0 * h + 4.0 * kv_d + 2.0 * g * f + (0.0 if selective else 2.0 * f)
    if not spec.flash_attention and not selective:
        sharded += (5.0 if drop else 2.0) * a * s
    return replicated, sharded


def activation_bytes(spec: "ModelSpec", index: int, b: int, s: int) -> tuple[float, float]:
    """(replicated, sharded) activation bytes of a layer per micro-batch
    (:func:`activation_per_token` x tokens); with sequence parallelism nothing is
    replicated."""
    replicated, sharded = activation_per_token(spec, index, s)
    tokens = float(s * b)
    if spec.sequence_parallel:
        return 0.0, (replicated + sharded) * tokens
    return replicated * tokens, sharded * tokens


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
