"""Sailor's measured per-layer profiles as models, and choosing a model from CLI options.

Provenance (copied unmodified from ``shared/data/profiles``, see also
``hyperplace/data/PROFILES_PROVENANCE.txt``):

* ``sailor_layer_profiles.csv``: measured forward/backward/update seconds per layer, by model,
  GPU type, micro-batch and tensor-parallel degree. Sailor (eth-easl/sailor, MIT),
  ``sailor/Planner/sailor_planner/profiles/*/*/profile.json``.
* ``sailor_llm_info.json``: per layer parameter and activation sizes, by model and
  **tensor-parallel degree** (keys 1, 2, 4, 8: parameters halve from key to key). Sailor's
  runtime simulator reads it as ``model_mem_info[str(tmp)][str(layer)]`` and multiplies
  ``act_mem_floats`` by the micro-batch size and the float size (2 bytes in fp16)
  (``sailor/Planner/simulations/runtime_simulator.py``, ``Simulator.check_config_fits``).
  Its ``*_bytes`` fields count 4 bytes per value and are not used.
"""

from __future__ import annotations

import csv
import json
from functools import cache
from importlib import resources
from typing import Any

from hyperplace.errors import InputError, known_words
from hyperplace.models.gpu import GPUCatalog, default_catalog
from hyperplace.models.model_file import load_model_file
from hyperplace.models.model_spec import Layer, LayerKind, MeasuredTime, ModelSpec
from hyperplace.models.presets import model_preset
from hyperplace.models.transformer import BF16_BYTES

# Dimensions of the profiled models (public configs, see hyperplace.models.presets). The
# sequence length is not listed: it is derived from the profile's own activation sizes
# (b·s·h values at a layer output, per sequence).
PROFILE_DIMS: dict[str, dict[str, int]] = {
    "OPT-350": dict(hidden_size=1024, num_heads=16, vocab_size=50272),
    "GPT-Neo-2.7": dict(hidden_size=2560, num_heads=20, vocab_size=50257),
    "LLAMA-3-8": dict(hidden_size=4096, num_heads=32, vocab_size=128256),
    "OPT-30": dict(hidden_size=7168, num_heads=56, vocab_size=50272),
}
# The preset each profiled model is an instance of.
PROFILE_PRESET = {"OPT-350": "opt-350m", "GPT-Neo-2.7": "gpt-neo-2.7b",
                  "LLAMA-3-8": "llama3-8b", "OPT-30": "opt-30b"}


def _data_file(name: str) -> Any:
    return resources.files("hyperplace.data") / name


@cache
def llm_info() -> dict[str, Any]:
    """Sailor's per-layer sizes: ``[model][tp][layer] -> {params_floats, act_*_floats}``."""
    with _data_file("sailor_llm_info.json").open() as fh:
        return json.load(fh)


@cache
def layer_rows() -> list[dict[str, str]]:
    """Sailor's measured per-layer times, one dict per CSV row."""
    with _data_file("sailor_layer_profiles.csv").open() as fh:
        return list(csv.DictReader(fh))


@cache
def measured_micro_batches() -> dict[str, list[int]]:
    out: dict[str, set[int]] = {}
    for row in layer_rows():
        out.setdefault(row["model"], set()).add(int(row["micro_batch_size"]))
    return {m: sorted(v) for m, v in out.items()}


def profile_names() -> list[str]:
    """``MODEL:mb=B`` names of the bundled measured profiles."""
    mbs = measured_micro_batches()
    return [f"{m}:mb={b}" for m in sorted(llm_info()) for b in mbs.get(m, [])]


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
    for known in llm_info():
        if known.lower() == model.strip().lower():
            return known, mb
    raise InputError(f"unknown profile {name!r} ({known_words(name, sorted(llm_info()))})",
                     path="profile")


def layer_kind(model: str, index: int, num_entries: int) -> LayerKind:
    """Sailor's layers: the embedding first, the transformer layers, then a final norm
    (LLaMA) and the LM head (the last entry; for the tied GPT-Neo, the final norm only)."""
    transformer = PROFILE_TRANSFORMER_LAYERS[model]
    if index == 0:
        return "embedding"
    if index <= transformer:
        return "transformer"
    if index == num_entries - 1 and model != "GPT-Neo-2.7":
        return "head"
    return "norm"


PROFILE_TRANSFORMER_LAYERS = {"OPT-350": 24, "GPT-Neo-2.7": 32, "LLAMA-3-8": 32, "OPT-30": 48}


def sequence_length(model: str) -> int:
    """Tokens per sequence, from a transformer layer's output (``s·h`` values per sequence)."""
    per_layer = llm_info()[model]["1"]
    return round(per_layer["1"]["act_output_floats"] / PROFILE_DIMS[model]["hidden_size"])


def activation_split(model: str, index: int, mb: int) -> tuple[float, float]:
    """(replicated, sharded) activation bytes per micro-batch from the TP-1 and TP-2 entries
    (``act(t) = R + S/t``), fp16 values times the micro-batch size, as Sailor counts them."""
    info = llm_info()[model]
    act1 = float(info["1"][str(index)]["act_mem_floats"]) * BF16_BYTES * mb
    if "2" not in info:
        return 0.0, act1
    act2 = float(info["2"][str(index)]["act_mem_floats"]) * BF16_BYTES * mb
    replicated = min(max(0.0, 2.0 * act2 - act1), act1)
    return replicated, act1 - replicated


def load_profile_model(name: str, catalog: GPUCatalog | None = None) -> ModelSpec:
    """A ModelSpec whose layers carry Sailor's measured times (all GPU types, all TP degrees).

    Sailor's layers include the embedding (first), a final norm and the LM head (last two),
    each its own layer, as measured. Parameters come from the TP-1 entry of
    ``sailor_llm_info.json`` (the full layer), activations from its ``act_mem_floats`` in
    fp16 times the micro-batch size. GPU names are mapped to the catalog (``GH-96`` is a
    GH200 whose GPU is an H100, catalog ``H100-80``); types the catalog does not know (RTX
    cards) are skipped. FLOPs, which price the layer on GPU types with no measurement, come
    from the dimensions: ``6·b·s·params + 12·b·s²·h`` for a transformer layer and
    ``6·b·s·h·V`` for the head.
    """
    catalog = catalog or default_catalog()
    model, mb = parse_profile_name(name)
    info = llm_info()[model]["1"]
    if mb not in measured_micro_batches().get(model, []):
        raise InputError(
            f"profile {model} has no micro-batch {mb}; measured: "
            f"{', '.join(map(str, measured_micro_batches().get(model, [])))}", path="profile")
    n = len(info)
    measured: dict[int, list[MeasuredTime]] = {i: [] for i in range(n)}
    for row in layer_rows():
        if row["model"] != model or int(row["micro_batch_size"]) != mb:
            continue
        gpu = catalog.find(row["gpu_type"])
        if gpu is None:
            continue
        idx = int(row["layer"])
        if idx in measured:
            measured[idx].append(MeasuredTime(gpu_type=gpu.name, tp=int(row["tensor_parallel"]),
                                              fwd_s=float(row["fwd_s"]), bwd_s=float(row["bwd_s"])))
    dims = PROFILE_DIMS[model]
    seq = sequence_length(model)
    h, vocab = dims["hidden_size"], dims["vocab_size"]
    layers = []
    for i in range(n):
        li = info[str(i)]
        kind = layer_kind(model, i, n)
        params = float(li["params_floats"])
        if kind == "transformer":
            flops = 6.0 * mb * seq * params + 12.0 * mb * seq * seq * h
        elif kind == "head":
            flops = 6.0 * mb * seq * h * vocab
        else:
            flops = 0.0
        replicated, sharded = activation_split(model, i, mb)
        out_bytes = float(li["act_output_floats"]) * BF16_BYTES * mb
        layers.append(Layer(
            name=f"{model}/layer{i}", kind=kind, flops=flops, params=params,
            activation_bytes_replicated=replicated, activation_bytes_sharded=sharded,
            recompute_bytes=float(li["act_input_floats"]) * BF16_BYTES * mb,
            output_bytes=out_bytes,
            tp_allreduce_bytes=BF16_BYTES * mb * seq * h if kind == "transformer" else 0.0,
            measured=sorted(measured[i], key=lambda m: (m.tp, m.gpu_type)),
        ))
    return ModelSpec(name=f"{model}:mb={mb}", num_layers=n, seq_length=seq,
                     micro_batch_size=mb, layers=layers, hidden_size=h,
                     num_heads=dims["num_heads"], vocab_size=vocab,
                     source=f"Sailor profile {model}, micro-batch {mb}")


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
