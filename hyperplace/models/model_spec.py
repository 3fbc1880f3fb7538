"""A model to split into pipeline stages: its layers and what each costs.

Per-layer costs come from the formulas in ``shared/design/cost-model.md`` (Narayanan et al.
SC'21 for FLOPs, Korthikanti et al. 2022 for activation bytes) or from measured per-layer
times (Sailor's profiles, bundled under ``hyperplace/data``; see
:func:`load_profile_model`). The layer split only needs, per layer: FLOPs, parameters,
activation bytes and the bytes sent to the next layer, so both sources end up as a list of
:class:`Layer` and the solvers never know which one they got.

Profile provenance (copied unmodified from ``shared/data/profiles``, see also
``hyperplace/data/PROFILES_PROVENANCE.txt``):

* ``sailor_layer_profiles.csv``: measured forward/backward/update seconds per layer, by model,
  GPU type, micro-batch and tensor-parallel degree. Sailor (eth-easl/sailor, MIT),
  ``sailor/Planner/sailor_planner/profiles/*/*/profile.json``.
* ``sailor_llm_info.json``: per layer parameter and activation bytes, by model and micro-batch.
  Sailor ``sailor/Planner/llm_info.json`` (MIT).
"""

from __future__ import annotations

import csv
import json
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from hyperplace.errors import InputError, from_validation_error
from hyperplace.io import load_documents
from hyperplace.models.base import HPModel
from hyperplace.models.gpu import GPUCatalog, default_catalog

BF16_BYTES = 2


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


# Alias so callers can say what they mean: a layer's profile is its cost.
LayerProfile = Layer


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


def transformer_layer_flops(b: int, s: int, h: int) -> float:
    """Forward+backward FLOPs of one transformer layer, ``72·b·s·h²·(1 + s/(6h))`` (SC'21)."""
    return 72.0 * b * s * h * h * (1.0 + s / (6.0 * h))


def transformer_layer_activation_bytes(
    b: int, s: int, h: int, a: int, tp: int = 1, flash_attention: bool = False
) -> float:
    """Activation bytes per layer per micro-batch (Korthikanti et al. 2022).

    ``s·b·h·(34 + 5·a·s/h)`` without parallelism, ``s·b·h·(10 + 24/t + 5·a·s/(h·t))`` with
    tensor parallel degree t; FlashAttention drops the ``5·a·s/h`` term.
    """
    attn = 0.0 if flash_attention else 5.0 * a * s / h
    return s * b * h * (10.0 + (24.0 + attn) / tp)


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


class ModelSpec(HPModel):
    """A decoder-only transformer by its dimensions, or by explicit (e.g. measured) layers.

    The embedding's parameters are folded into the first layer and the LM head's parameters
    and FLOPs (``6·b·s·h·V``) into the last one, so the layer count is the transformer's.
    """

    name: str = Field(min_length=1)
    num_layers: int = Field(gt=0, strict=True, description="transformer layers")
    hidden_size: int = Field(gt=0, strict=True)
    num_heads: int = Field(gt=0, strict=True)
    seq_length: int = Field(gt=0, strict=True)
    vocab_size: int = Field(default=0, ge=0, strict=True)
    micro_batch_size: int = Field(default=1, gt=0, strict=True,
                                  description="sequences per micro-batch")
    parameters: float | None = Field(default=None, gt=0, description="informational total")
    flash_attention: bool = False
    assumed: str = Field(default="", description="why the dimensions are assumed, if they are")
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
        return self

    @property
    def tokens_per_microbatch(self) -> int:
        return self.micro_batch_size * self.seq_length

    def build_layers(self) -> list[Layer]:
        """The per-layer costs the split works with (formulas, then overrides)."""
        if self.layers is not None:
            base = list(self.layers)
        else:
            b, s, h, a = self.micro_batch_size, self.seq_length, self.hidden_size, self.num_heads
            attn = 0.0 if self.flash_attention else 5.0 * a * s / h
            sbh = float(s * b * h)
            base = []
            for i in range(self.num_layers):
                flops = transformer_layer_flops(b, s, h)
                params = 12.0 * h * h + 13.0 * h
                if i == 0:
                    params += self.vocab_size * h  # token embedding
                if i == self.num_layers - 1:
                    params += self.vocab_size * h  # untied LM head
                    flops += 6.0 * b * s * h * self.vocab_size
                base.append(
                    Layer(
                        name=f"layer{i}",
                        flops=flops,
                        params=params,
                        activation_bytes_replicated=10.0 * sbh,
                        activation_bytes_sharded=(24.0 + attn) * sbh,
                        recompute_bytes=2.0 * sbh,
                        output_bytes=BF16_BYTES * sbh,
                        tp_allreduce_bytes=BF16_BYTES * sbh,
                    )
                )
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


# --------------------------------------------------------------------------- presets

_PRESETS: dict[str, dict[str, Any]] = {
    "llama3-8b": dict(num_layers=32, hidden_size=4096, num_heads=32, seq_length=8192,
                      vocab_size=128256, parameters=8.0e9),
    "llama3-70b": dict(num_layers=80, hidden_size=8192, num_heads=64, seq_length=8192,
                       vocab_size=128256, parameters=70.6e9),
    "llama3-120b": dict(
        num_layers=96, hidden_size=10240, num_heads=80, seq_length=8192, vocab_size=128256,
        parameters=1.23e11,
        assumed="no public Llama-3 120B exists: an assumed Llama-3-shaped config "
                "(96 layers, hidden 10240, 80 heads, 8k context) giving ~123B parameters",
    ),
    "gpt3-175b": dict(num_layers=96, hidden_size=12288, num_heads=96, seq_length=2048,
                      vocab_size=50257, parameters=1.75e11),
    # The seed federation example: 8 GPT-3-width layers. Wide layers make compute large
    # next to the WAN hop, as in the seed story, and at micro-batch 2 with 8-way TP even the
    # most lopsided split stays within an H100's 80 GB, so memory never decides it.
    "seed-8layer": dict(
        num_layers=8, hidden_size=12288, num_heads=96, seq_length=4096, vocab_size=32000,
        micro_batch_size=2,
        assumed="illustrative 8-layer model for the seed B200/H100 federation example",
    ),
}


def preset_names() -> list[str]:
    return sorted(_PRESETS)


def model_preset(name: str, micro_batch_size: int | None = None) -> ModelSpec:
    """A named model; raises :class:`InputError` naming the known presets."""
    key = name.strip().lower()
    if key not in _PRESETS:
        raise InputError(
            f"unknown model preset {name!r}; known: {', '.join(preset_names())}", path="model"
        )
    fields = dict(_PRESETS[key])
    if micro_batch_size is not None:
        fields["micro_batch_size"] = micro_batch_size
    return ModelSpec(name=key, **fields)


# --------------------------------------------------------------------------- YAML

# A field path a model validator put at the start of its message ("layerOverrides[2].index: ").
_PATH_PREFIX = re.compile(r"^([A-Za-z_]\w*(?:\[\d+\])*(?:\.[A-Za-z_]\w*(?:\[\d+\])*)*): (.+)$",
                          re.S)


def input_error_from_validation(exc: ValidationError, *, source: str | None = None,
                                prefix: str = "") -> InputError:
    """A pydantic error as one line, with a model validator's field path moved into the path.

    Pydantic reports ``raise ValueError("layerOverrides[2].index: ...")`` from a model
    validator at the model's own location, as ``Value error, layerOverrides[2].index: ...``;
    people need ``spec.layerOverrides[2].index: ...`` and no "Value error" noise.
    """
    err = from_validation_error(exc, source=source, prefix=prefix)
    message = err.message.removeprefix("Value error, ")
    path = err.path
    match = _PATH_PREFIX.match(message)
    if match:
        sub, message = match.group(1), match.group(2)
        path = sub if not path else (f"{path}{sub}" if sub.startswith("[") else f"{path}.{sub}")
    return InputError(message.splitlines()[0], source=err.source, path=path)


def model_from_doc(doc: Any, source: str | None = None,
                   catalog: GPUCatalog | None = None) -> ModelSpec:
    """Read ``{apiVersion: hyperplace/v1, kind: ModelSpec, metadata: {name}, spec: {...}}``.

    A bare spec mapping (with ``name``) is accepted too, so quick files stay short. Measured
    times must name GPU types the catalog knows: a time filed under a name no stage can
    match would otherwise be ignored without a word.
    """
    if not isinstance(doc, dict):
        raise InputError("expected a mapping (apiVersion/kind/metadata/spec)", source=source)
    if "spec" in doc or "kind" in doc:
        if doc.get("apiVersion", "hyperplace/v1") != "hyperplace/v1":
            raise InputError(f"unsupported apiVersion {doc.get('apiVersion')!r}",
                             source=source, path="apiVersion")
        if doc.get("kind", "ModelSpec") != "ModelSpec":
            raise InputError(f"expected kind ModelSpec, got {doc.get('kind')!r}",
                             source=source, path="kind")
        extra = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
        if extra:
            raise InputError("unknown field", source=source, path=sorted(extra)[0])
        spec = doc.get("spec")
        if not isinstance(spec, dict):
            raise InputError("required field is missing" if spec is None
                             else "expected a mapping", source=source, path="spec")
        meta = doc.get("metadata") or {}
        body = dict(spec)
        if "name" not in body and isinstance(meta, dict) and meta.get("name"):
            body["name"] = meta["name"]
        prefix = "spec"
    else:
        body, prefix = doc, ""
    try:
        model = ModelSpec.model_validate(body)
    except ValidationError as exc:
        raise input_error_from_validation(exc, source=source, prefix=prefix) from None
    return _canonical_measured_gpu_types(model, catalog or default_catalog(), source, prefix)


def _canonical_measured_gpu_types(model: ModelSpec, catalog: GPUCatalog, source: str | None,
                                  prefix: str) -> ModelSpec:
    """Measured times filed under catalog names (``H100`` -> ``H100-80``), since stages are
    matched to measurements by catalog name; an unknown name is an error."""
    head = f"{prefix}." if prefix else ""

    def canonical(measured: list[MeasuredTime], where: str) -> list[MeasuredTime]:
        out = []
        for j, m in enumerate(measured):
            gpu = catalog.find(m.gpu_type)
            if gpu is None:
                raise InputError(
                    f"unknown GPU type {m.gpu_type!r}; known: {', '.join(catalog.names())}",
                    source=source, path=f"{head}{where}.measured[{j}].gpuType")
            out.append(m.model_copy(update={"gpu_type": gpu.name}))
        return out

    update: dict[str, Any] = {}
    if model.layers is not None:
        update["layers"] = [layer.model_copy(update={
            "measured": canonical(layer.measured, f"layers[{i}]")})
            for i, layer in enumerate(model.layers)]
    update["layer_overrides"] = [o if o.measured is None else o.model_copy(update={
        "measured": canonical(o.measured, f"layerOverrides[{i}]")})
        for i, o in enumerate(model.layer_overrides)]
    return model.model_copy(update=update)


def load_model_file(path: str | Path) -> ModelSpec:
    """A ModelSpec from a YAML or JSON file, with one-line errors naming the file."""
    docs = load_documents(path)
    if len(docs) > 1:
        raise InputError(f"expected one ModelSpec document, found {len(docs)}", source=str(path))
    return model_from_doc(docs[0], source=str(path))


# --------------------------------------------------------------------------- profiles

# Dimensions of the profiled models (public configs). The sequence length is not listed:
# it is derived from the profile's own activation sizes (b·s·h floats at a layer output).
_PROFILE_DIMS: dict[str, dict[str, int]] = {
    "OPT-350": dict(hidden_size=1024, num_heads=16, vocab_size=50272),
    "GPT-Neo-2.7": dict(hidden_size=2560, num_heads=20, vocab_size=50257),
    "LLAMA-3-8": dict(hidden_size=4096, num_heads=32, vocab_size=128256),
    "OPT-30": dict(hidden_size=7168, num_heads=56, vocab_size=50272),
}


def _data_file(name: str) -> Any:
    return resources.files("hyperplace.data") / name


@cache
def _llm_info() -> dict[str, Any]:
    with _data_file("sailor_llm_info.json").open() as fh:
        return json.load(fh)


@cache
def _layer_rows() -> list[dict[str, str]]:
    with _data_file("sailor_layer_profiles.csv").open() as fh:
        return list(csv.DictReader(fh))


def profile_names() -> list[str]:
    """``MODEL:mb=B`` names of the bundled measured profiles."""
    return [f"{m}:mb={b}" for m, v in sorted(_llm_info().items()) for b in sorted(v, key=int)]


def parse_profile_name(name: str) -> tuple[str, int]:
    """``LLAMA-3-8`` or ``LLAMA-3-8:mb=2`` -> (model, micro-batch); case-insensitive model."""
    model, _, rest = name.partition(":")
    mb = 1
    if rest:
        key, _, val = rest.partition("=")
        if key.strip() not in ("mb", "micro_batch") or not val.strip().isdigit():
            raise InputError(f"malformed profile {name!r}; expected MODEL or MODEL:mb=B",
                             path="profile")
        mb = int(val)
    for known in _llm_info():
        if known.lower() == model.strip().lower():
            return known, mb
    raise InputError(f"unknown profile {name!r}; known: {', '.join(profile_names())}",
                     path="profile")


def load_profile_model(name: str, catalog: GPUCatalog | None = None) -> ModelSpec:
    """A ModelSpec whose layers carry Sailor's measured times (all GPU types, all TP degrees).

    Sailor's layers include the embedding (first), a final norm and the LM head (last two),
    each its own layer, as measured. GPU names are mapped to the catalog (``GH-96`` is a
    GH200 whose GPU is an H100, catalog ``H100-80``); types the catalog does not know (RTX
    cards) are skipped. FLOPs, which only matter for GPU types with no measurement, are
    back-computed from the fastest-to-find reference measurement: ``(fwd+bwd)·tp·peak·mfu``.
    """
    catalog = catalog or default_catalog()
    model, mb = parse_profile_name(name)
    info = _llm_info()[model]
    if str(mb) not in info:
        raise InputError(
            f"profile {model} has no micro-batch {mb}; measured: {', '.join(sorted(info, key=int))}",
            path="profile",
        )
    per_layer = info[str(mb)]
    n = len(per_layer)
    measured: dict[int, list[MeasuredTime]] = {i: [] for i in range(n)}
    for row in _layer_rows():
        if row["model"] != model or int(row["micro_batch_size"]) != mb:
            continue
        gpu = catalog.find(row["gpu_type"])
        if gpu is None:
            continue
        idx = int(row["layer"])
        if idx in measured:
            measured[idx].append(MeasuredTime(gpu_type=gpu.name, tp=int(row["tensor_parallel"]),
                                              fwd_s=float(row["fwd_s"]), bwd_s=float(row["bwd_s"])))
    dims = _PROFILE_DIMS[model]
    mid = per_layer[str(n // 2)]
    seq = max(1, round(mid["act_output_floats"] / (mb * dims["hidden_size"])))
    layers = []
    for i in range(n):
        li = per_layer[str(i)]
        ms = sorted(measured[i], key=lambda m: (m.tp, m.gpu_type))
        flops = 0.0
        if ms:
            ref = ms[0]
            g = catalog.get(ref.gpu_type)
            flops = (ref.fwd_s + ref.bwd_s) * ref.tp * g.bf16_tflops * 1e12 * g.mfu
        out_bytes = float(li["act_output_floats"]) * BF16_BYTES
        layers.append(Layer(
            name=f"{model}/layer{i}",
            flops=flops,
            params=float(li["params_floats"]),
            activation_bytes_sharded=float(li["act_mem_bytes"]),
            recompute_bytes=float(li["act_input_floats"]) * BF16_BYTES,
            output_bytes=out_bytes,
            measured=ms,
        ))
    return ModelSpec(name=f"{model}:mb={mb}", num_layers=n, seq_length=seq,
                     micro_batch_size=mb, layers=layers, **dims)


def resolve_model(
    *, path: str | None = None, preset: str | None = None, profile: str | None = None,
    micro_batch_size: int | None = None,
) -> ModelSpec:
    """Exactly one of a file, a preset name or a profile name -> ModelSpec."""
    options = {"--model": path, "--model-name": preset, "--profile": profile}
    given = [name for name, value in options.items() if value]
    if len(given) != 1:
        raise InputError("give exactly one of --model, --model-name or --profile"
                         + (f" (got {' and '.join(given)})" if given else ""))
    if path:
        m = load_model_file(path)
        if micro_batch_size is not None:
            if m.layers is not None:
                # Explicit layers were priced at one micro-batch size; rescaling them would
                # be a guess, and ignoring the option would be silent.
                raise InputError("the model file gives explicit layers, whose costs hold for "
                                 "the micro-batch they were measured at; drop "
                                 "--micro-batch-size", source=path, path="spec.layers")
            m = m.model_copy(update={"micro_batch_size": micro_batch_size})
        return m
    try:
        if preset:
            return model_preset(preset, micro_batch_size)
        assert profile is not None
        if micro_batch_size is not None:
            _, mb = parse_profile_name(profile)
            if ":" in profile and mb != micro_batch_size:
                raise InputError(f"profile {profile!r} says micro-batch {mb} but "
                                 f"--micro-batch-size is {micro_batch_size}")
            profile = f"{profile.partition(':')[0]}:mb={micro_batch_size}"
        return load_profile_model(profile)
    except InputError as exc:
        # Name the option the person typed, not the library's parameter.
        raise InputError(exc.message, path="--model-name" if preset else "--profile") from None


