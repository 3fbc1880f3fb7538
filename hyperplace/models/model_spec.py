"""A model to split into pipeline stages or to price: its dimensions and its layers.

The data classes live here; the arithmetic is in :mod:`hyperplace.models.transformer`, the
named models in :mod:`hyperplace.models.presets`, reading files in
:mod:`hyperplace.models.model_file` and Sailor's measured profiles in
:mod:`hyperplace.models.profiles`. The layer split needs, per layer: FLOPs, parameters,
activation bytes and the bytes sent to the next layer, so every source ends up as a list of
:class:`Layer` and the solvers never know which one they got.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from pydantic import Field, model_validator

from hyperplace.models.base import HPModel
from hyperplace.models.limits import MAX_LAYERS
from hyperplace.models.transformer import (
    BF16_BYTES,
    activation_bytes,
    head_flops,
    is_moe_layer,
    layer_flops,
    layer_params,
    param_state_bytes_per_param,
    transformer_layer_flops,
)

LayerKind = Literal["transformer", "embedding", "head", "norm"]


class MeasuredTime(HPModel):
    """A measured per-micro-batch time of one layer on one TP group of one GPU type."""

    gpu_type: str = Field(description="catalog name, e.g. A100-40")
    tp: int = Field(default=1, ge=1, strict=True)
    fwd_s: float = Field(ge=0)
    bwd_s: float = Field(ge=0)


class Layer(HPModel):
    """One layer's cost per micro-batch, before any parallelism.

    Activation bytes are split in a part every tensor-parallel rank keeps whole
    (``activation_bytes_replicated``, the ``10·sbh`` of Korthikanti et al.) and a part
    sharded over the TP degree, so the formulation can price any TP degree from one layer.
    """

    name: str
    kind: LayerKind = Field(default="transformer",
                            description="what the layer is, for the fitted cost model")
    flops: float = Field(ge=0, description="forward+backward FLOPs per micro-batch")
    params: float = Field(ge=0, description="parameter count")
    activation_bytes_replicated: float = Field(default=0.0, ge=0)
    activation_bytes_sharded: float = Field(default=0.0, ge=0)
    recompute_bytes: float = Field(
        default=0.0, ge=0, description="bytes kept per micro-batch with full recomputation"
    )
    output_bytes: float = Field(
        default=0.0, ge=0, description="activation sent to the next layer per micro-batch"
    )
    tp_allreduce_bytes: float = Field(
        default=0.0, ge=0, description="bytes of each of the 4 TP all-reduces per micro-batch"
    )
    measured: list[MeasuredTime] = Field(default_factory=list)

    def activation_bytes(self, tp: int = 1, recompute: bool = False) -> float:
        """Bytes kept per micro-batch per TP rank for the backward pass."""
        if recompute:
            return self.recompute_bytes
        return self.activation_bytes_replicated + self.activation_bytes_sharded / tp

    def measured_time(self, gpu_type: str, tp: int) -> MeasuredTime | None:
        for m in self.measured:
            if m.gpu_type == gpu_type and m.tp == tp:
                return m
        return None


class LayerOverride(HPModel):
    """Replace some derived figures of one layer (e.g. a MoE layer or a measured one)."""

    index: int = Field(ge=0, strict=True)
    flops: float | None = Field(default=None, ge=0)
    params: float | None = Field(default=None, ge=0)
    activation_bytes: float | None = Field(
        default=None, ge=0, description="per micro-batch, all sharded over TP"
    )
    output_bytes: float | None = Field(default=None, ge=0)
    measured: list[MeasuredTime] | None = None


class ModelSpec(HPModel):
    """A decoder-only transformer by its dimensions, or by explicit (e.g. measured) layers.

    The embedding's parameters are folded into the first layer and the LM head's parameters
    and FLOPs (``6·b·s·h·V``) into the last one, so the layer count is the transformer's.
    Grouped-query attention (``numKvHeads``), gated MLPs (SwiGLU), mixture-of-experts layers
    (``numExperts``, ``expertsPerToken``, ``sharedExperts``, ``moeFfnHiddenSize``, the first
    ``firstDenseLayers`` dense) and tied embeddings change parameters and FLOPs as in
    :mod:`hyperplace.models.transformer`. FlashAttention is on by default, as in today's
    training stacks (Megatron-LM ``--use-flash-attn``, PyTorch SDPA, torchtitan).
    """

    name: str = Field(min_length=1)
    num_layers: int = Field(gt=0, le=MAX_LAYERS, strict=True, description="transformer layers")
    hidden_size: int = Field(gt=0, strict=True)
    num_heads: int = Field(gt=0, strict=True)
    seq_length: int = Field(gt=0, strict=True)
    vocab_size: int = Field(default=0, ge=0, strict=True)
    num_kv_heads: int | None = Field(default=None, gt=0, strict=True,
                                     description="grouped-query attention; default num_heads")
    ffn_hidden_size: int | None = Field(default=None, gt=0, strict=True,
                                        description="MLP width; default 4·hidden")
    gated_mlp: bool = Field(default=False, description="SwiGLU-style MLP (3 matrices)")
    num_experts: int = Field(default=1, gt=0, strict=True, description="routed experts")
    experts_per_token: int = Field(default=1, gt=0, strict=True, description="top-k routing")
    shared_experts: int = Field(default=0, ge=0, strict=True)
    moe_ffn_hidden_size: int | None = Field(default=None, gt=0, strict=True,
                                            description="expert width; default ffn")
    first_dense_layers: int = Field(default=0, ge=0, strict=True)
    tie_embeddings: bool = False
    layer_params: float | None = Field(
        default=None, gt=0, description="measured parameters per layer (profiled variants)")
    micro_batch_size: int = Field(default=1, gt=0, strict=True,
                                  description="sequences per micro-batch")
    parameters: float | None = Field(default=None, gt=0, description="informational total")
    flash_attention: bool = True
    sequence_parallel: bool = False
    selective_recompute: bool = Field(default=False, description="recompute the attention "
                                      "core and the MLP activation function in backward")
    dropout: bool | None = Field(default=None, description="trained with dropout; default: "
                                 "ungated (GPT/OPT-style) models yes, gated (Llama-style) no")
    assumed: str = Field(default="", description="why the dimensions are assumed, if they are")
    source: str = Field(default="", description="where the configuration comes from")
    layer_overrides: list[LayerOverride] = Field(default_factory=list)
    layers: list[Layer] | None = Field(
        default=None, description="explicit layers (e.g. from a profile) instead of formulas"
    )

    @model_validator(mode="after")
    def _consistent(self) -> "ModelSpec":
        if self.layers is not None and len(self.layers) != self.num_layers:
            raise ValueError(
                f"layers: numLayers is {self.num_layers} but {len(self.layers)} explicit "
                "layers are given"
            )
        for i, o in enumerate(self.layer_overrides):
            if o.index >= self.num_layers:
                raise ValueError(
                    f"layerOverrides[{i}].index: {o.index} is outside 0..{self.num_layers - 1}"
                )
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            raise ValueError(f"numKvHeads: {self.num_kv_heads} does not divide numHeads "
                             f"{self.num_heads}")
        if self.experts_per_token > self.num_experts:
            raise ValueError(f"expertsPerToken: {self.experts_per_token} is more than "
                             f"numExperts {self.num_experts}")
        return self

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    @property
    def ffn(self) -> int:
        return self.ffn_hidden_size or 4 * self.hidden_size

    @property
    def moe_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn

    @property
    def has_dimensions(self) -> bool:
        """True when layer costs come from the dimensions (not explicit layers)."""
        return self.layers is None

    @property
    def tokens_per_microbatch(self) -> int:
        return self.micro_batch_size * self.seq_length

    def embedding_params(self) -> float:
        return float(self.vocab_size * self.hidden_size)

    def head_params(self) -> float:
        """LM head parameters (none of its own when tied to the embedding), plus final norm."""
        own = 0.0 if self.tie_embeddings else float(self.vocab_size * self.hidden_size)
        return own + self.hidden_size

    def build_layers(self) -> list[Layer]:
        """The per-layer costs the split works with (formulas, then overrides)."""
        if self.layers is not None:
            base = list(self.layers)
        else:
            b, s, h = self.micro_batch_size, self.seq_length, self.hidden_size
            sbh = float(s * b * h)
            base = []
            # the formulas depend on a layer's index only through whether it is an MoE
            # layer (transformer.is_moe_layer): a middle layer of each kind is validated
            # once and the others are copies of it under their own names (the same floats;
            # its empty ``measured`` list shared, read-only as every memoised layer is)
            last = self.num_layers - 1
            middle: dict[bool, Layer] = {}
            for i in range(self.num_layers):
                moe = is_moe_layer(self, i)
                like = middle.get(moe) if 0 < i < last else None
                if like is not None:
                    copied = copy.copy(like)  # what model_copy(update=...) does, faster
                    copied.__dict__["name"] = f"layer{i}"
                    base.append(copied)
                    continue
                flops = layer_flops(self, i, b, s)
                params, _ = layer_params(self, i)
                if i == 0:
                    params += self.embedding_params()
                if i == last:
                    params += self.head_params()
                    flops += head_flops(self, b, s)
                replicated, sharded = activation_bytes(self, i, b, s)
                layer = Layer(
                    name=f"layer{i}",
                    flops=flops,
                    params=params,
                    activation_bytes_replicated=replicated,
                    activation_bytes_sharded=sharded,
                    recompute_bytes=BF16_BYTES * sbh,
                    output_bytes=BF16_BYTES * sbh,
                    tp_allreduce_bytes=BF16_BYTES * sbh,
                )
                if 0 < i < last:
                    middle[moe] = layer
                base.append(layer)
        for o in self.layer_overrides:
            cur = base[o.index]
            upd: dict[str, Any] = {}
            if o.flops is not None:
                upd["flops"] = o.flops
            if o.params is not None:
                upd["params"] = o.params
            if o.activation_bytes is not None:
                upd["activation_bytes_replicated"] = 0.0
                upd["activation_bytes_sharded"] = o.activation_bytes
            if o.output_bytes is not None:
                upd["output_bytes"] = o.output_bytes
            if o.measured is not None:
                upd["measured"] = o.measured
            base[o.index] = cur.model_copy(update=upd)
        return base

    def total_params(self) -> float:
        return sum(layer.params for layer in self.build_layers())


# Names that moved out when this module was split by responsibility stay importable from
# here (``from hyperplace.models.model_spec import model_preset``) for existing callers;
# resolved on first use because those modules import this one.
_MOVED = {
    "input_error_from_validation": "hyperplace.models.model_file",
    "load_model_file": "hyperplace.models.model_file",
    "model_from_doc": "hyperplace.models.model_file",
    "model_preset": "hyperplace.models.presets",
    "preset_names": "hyperplace.models.presets",
    "load_profile_model": "hyperplace.models.profiles",
    "parse_profile_name": "hyperplace.models.profiles",
    "profile_names": "hyperplace.models.profiles",
    "resolve_model": "hyperplace.models.profiles",
}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        import importlib

        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BF16_BYTES", "Layer", "LayerKind", "LayerOverride", "MeasuredTime", "ModelSpec",
    "param_state_bytes_per_param", "transformer_layer_flops", *_MOVED,
]
