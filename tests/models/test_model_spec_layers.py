"""A model's formula layers (``ModelSpec.build_layers``): each kind of layer is computed and
validated once and copied for the others (#20: the forecast's planner builds thousands).
The oracle is the layer-by-layer construction, every layer validated on its own; the count
of formula evaluations and validations pins the "once" (review R5: the equality alone holds
for the layer-by-layer construction too)."""

from __future__ import annotations

import pytest

from hyperplace.models.model_spec import Layer
from hyperplace.models.presets import model_preset, preset_names
from hyperplace.models.transformer import (
    BF16_BYTES,
    activation_bytes,
    head_flops,
    layer_flops,
    layer_params,
)


def _one_by_one(spec) -> list[Layer]:
    b, s, h = spec.micro_batch_size, spec.seq_length, spec.hidden_size
    sbh = float(s * b * h)
    out = []
    for i in range(spec.num_layers):
        flops = layer_flops(spec, i, b, s)
        params, _ = layer_params(spec, i)
        if i == 0:
            params += spec.embedding_params()
        if i == spec.num_layers - 1:
            params += spec.head_params()
            flops += head_flops(spec, b, s)
        replicated, sharded = activation_bytes(spec, i, b, s)
        out.append(Layer(name=f"layer{i}", flops=flops, params=params,
                         activation_bytes_replicated=replicated,
                         activation_bytes_sharded=sharded, recompute_bytes=BF16_BYTES * sbh,
                         output_bytes=BF16_BYTES * sbh, tp_allreduce_bytes=BF16_BYTES * sbh))
    return out


#: The presets with formula layers (a preset with measured layers has none): filtered here so
#: that a fresh clone's run never skips (the guide's rule).
FORMULA_PRESETS = [n for n in preset_names() if model_preset(n).layers is None]


def test_the_formula_presets_are_there():
    assert len(FORMULA_PRESETS) >= 10


@pytest.mark.parametrize("name", FORMULA_PRESETS)
@pytest.mark.parametrize("update", [{}, {"micro_batch_size": 3, "sequence_parallel": True},
                                    {"micro_batch_size": 16, "selective_recompute": True}])
def test_formula_layers_are_the_layer_by_layer_ones(name, update):
    spec = model_preset(name).model_copy(update=update)
    got, want = spec.build_layers(), _one_by_one(spec)
    assert [x.name for x in got] == [f"layer{i}" for i in range(spec.num_layers)]
    assert got == want
    assert [x.model_dump() for x in got] == [x.model_dump() for x in want]
    assert [x.model_fields_set for x in got] == [x.model_fields_set for x in want]
    assert len({id(x) for x in got}) == len(got)  # every layer its own object


def test_an_moe_model_keeps_its_dense_layers_apart():
    moe = [n for n in preset_names() if model_preset(n).num_experts > 1
           and model_preset(n).first_dense_layers > 0]
    assert moe, "an MoE preset with leading dense layers (DeepSeek-style) to test on"
    spec = model_preset(moe[0])
    layers = spec.build_layers()
    first = spec.first_dense_layers
    assert layers[first - 1].params != layers[first + 1].params  # dense vs MoE
    assert layers == _one_by_one(spec)


@pytest.mark.parametrize("name", FORMULA_PRESETS)
def test_each_kind_of_layer_is_computed_and_validated_once(name, monkeypatch):
    """The first and the last layer (embedding, head) and one middle layer per kind (dense,
    MoE) are computed by the formulas and validated; every other layer is a copy."""
    from hyperplace.models import model_spec, transformer

    spec = model_preset(name)
    counts = {"flops": 0, "validated": 0}

    def flops(*args, **kwargs):
        counts["flops"] += 1
        return transformer.layer_flops(*args, **kwargs)

    def validated(**fields):
        counts["validated"] += 1
        return Layer(**fields)

    monkeypatch.setattr(model_spec, "layer_flops", flops)
    monkeypatch.setattr(model_spec, "Layer", validated)
    layers = spec.build_layers()
    last = spec.num_layers - 1
    kinds = {transformer.is_moe_layer(spec, i) for i in range(1, last)}
    expected = min(spec.num_layers, 2) + len(kinds)
    assert counts == {"flops": expected, "validated": expected}
    assert expected < spec.num_layers or spec.num_layers <= 3
    assert len(layers) == spec.num_layers and all(isinstance(x, Layer) for x in layers)
