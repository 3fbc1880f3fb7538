"""The fitted cost model: data read as Sailor's simulator reads it, presets against their
published configurations, activation memory, measured bandwidths, the fit itself."""

from __future__ import annotations

import json

import pytest

from hyperplace.costmodel.calibration import (
    SCHEMA_VERSION,
    Calibration,
    default_calibration,
    load_calibration,
)
from hyperplace.costmodel.collectives import hierarchical_allreduce, ring_allreduce, tree_allreduce
from hyperplace.costmodel.fit import fit_profiles, predict_row
from hyperplace.costmodel.hardware import intra_node_bandwidth
from hyperplace.costmodel.layers import stage_layer_times
from hyperplace.errors import InputError
from hyperplace.models.gpu import default_catalog
from hyperplace.models.presets import model_preset
from hyperplace.models.profiles import llm_info, load_profile_model

CATALOG = default_catalog()


def test_sailor_llm_info_is_keyed_by_tensor_parallel_degree() -> None:
    """LLaMA-3-8 at micro-batch 4 is the full 268.5 M-parameter layer at 8k tokens, with
    fp16 activations times the micro-batch (Sailor's runtime_simulator reads
    llm_info[str(tmp)][layer] and multiplies act_mem_floats by mbs and the float size)."""
    model = load_profile_model("LLAMA-3-8:mb=4")
    layer = model.build_layers()[1]
    assert layer.params == 268_496_896
    assert model.seq_length == 8192
    act_floats = llm_info()["LLAMA-3-8"]["1"]["1"]["act_mem_floats"]
    assert layer.activation_bytes(tp=1) == pytest.approx(act_floats * 2 * 4)
    # The TP-2 key holds half the parameters: it is a TP shard, not a micro-batch size.
    assert llm_info()["LLAMA-3-8"]["2"]["1"]["params_floats"] * 2 == pytest.approx(
        layer.params, rel=1e-3)
    assert layer.output_bytes == 4 * 8192 * 4096 * 2


@pytest.mark.parametrize(("name", "published"), [
    ("llama3-8b", 8.03e9), ("llama3-70b", 70.55e9), ("llama3-405b", 405.85e9),
    ("gpt3-175b", 174.6e9), ("mixtral-8x7b", 46.7e9), ("deepseek-moe-16b", 16.4e9),
    ("opt-30b", 30.0e9)])
def test_presets_match_their_published_parameter_counts(name: str, published: float) -> None:
    model = model_preset(name)
    assert model.source
    assert model.total_params() == pytest.approx(published, rel=0.01)


def test_profiled_models_have_their_own_names() -> None:
    for name in ("opt-350m", "gpt-neo-2.7b", "llama3-8b", "opt-30b", "OPT-30", "LLAMA-3-8"):
        assert model_preset(name).num_layers > 0


def test_flash_attention_is_the_default_and_sequence_parallel_shards_everything() -> None:
    model = model_preset("llama3-70b")
    assert model.flash_attention
    layer = model.build_layers()[5]
    gb = layer.activation_bytes(tp=8) / 1e9
    # 8h replicated + (4h + 4·kv·d + 6f)/8 sharded bytes per token (no dropout in Llama)
    h, f, kv_d, s = 8192, 28672, 1024, 8192
    assert gb == pytest.approx((8 * h + (4 * h + 4 * kv_d + 6 * f) / 8) * s / 1e9)
    assert 0.7 < gb < 0.8  # ~0.75 GB per layer per micro-batch at TP 8
    no_flash = model.model_copy(update={"flash_attention": False}).build_layers()[5]
    # without FlashAttention the softmax output stays: 2·a·s bytes per token, sharded
    assert no_flash.activation_bytes(tp=8) == pytest.approx(gb * 1e9 + 2 * 64 * s * s / 8)
    sp = model.model_copy(update={"sequence_parallel": True}).build_layers()[5]
    assert sp.activation_bytes(tp=8) == pytest.approx(
        (sp.activation_bytes_replicated + sp.activation_bytes_sharded) / 8)
    assert sp.activation_bytes_replicated == 0


def test_tp_bandwidth_is_the_measured_curve_not_the_nominal_nvlink() -> None:
    v100, _ = intra_node_bandwidth(CATALOG.get("V100-16"), 2, 1e9)
    h100, source = intra_node_bandwidth(CATALOG.get("H100-80"), 2, 1e9)
    assert v100 == pytest.approx(68.28e9, rel=0.01)  # Sailor's measured peak, not 150 GB/s
    assert h100 == pytest.approx(125.46e9, rel=0.01)
    assert "measured" in source
    b200, source = intra_node_bandwidth(CATALOG.get("B200"), 8, 1e9)
    assert "scaled" in source and b200 > h100


def test_collectives_by_hand() -> None:
    assert ring_allreduce(8e9, 4, 100e9, 0.0) == pytest.approx(2 * 3 / 4 * 8e9 / 100e9)
    assert tree_allreduce(8e9, 4, 100e9, 1e-5) == pytest.approx(2 * 8e9 / 100e9 + 4 * 1e-5)
    # hierarchical: ring in the node (8) + all-reduce of 1/8 across 2 nodes
    t = hierarchical_allreduce(8e9, 8, 2, 200e9, 0.0, 50e9, 0.0)
    inside = 2 * 7 / 8 * 8e9 / 200e9
    across = min(2 * 1 / 2 * 1e9 / 50e9, 2 * 1e9 / 50e9)
    assert t == pytest.approx(inside + across)


def test_fit_reproduces_the_profiles_in_sample() -> None:
    calibration, rows = fit_profiles()
    transformer = [r for r in rows if r.kind == "transformer"]
    for pair in {(r.model, r.gpu) for r in transformer}:
        errors = sorted(abs(predict_row(calibration, r) / r.time_s - 1)
                        for r in transformer if (r.model, r.gpu) == pair)
        assert errors[len(errors) // 2] < 0.15, pair
    assert any("copied profile" in n for n in calibration.notes)  # GPT-Neo GH-96


def test_unmeasured_type_falls_back_and_says_so() -> None:
    model = model_preset("llama3-8b")
    times = stage_layer_times(model, model.build_layers(), CATALOG.get("B200"), 8, 1)
    assert set(times.sources) == {"peak-scaled"}
    assert "nearest measured type" in times.note
    h100 = stage_layer_times(model, model.build_layers(), CATALOG.get("H100-80"), 8, 1)
    assert times.total.sum() < h100.total.sum()


def test_calibration_of_another_schema_version_is_refused(tmp_path) -> None:
    doc = default_calibration().to_doc()
    doc["schemaVersion"] = SCHEMA_VERSION + 1
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=f"version {SCHEMA_VERSION + 1}"):
        load_calibration(path)


def test_calibration_round_trips() -> None:
    doc = default_calibration().to_doc()
    again = Calibration.from_doc(json.loads(json.dumps(doc)))
    assert again.to_doc() == doc
