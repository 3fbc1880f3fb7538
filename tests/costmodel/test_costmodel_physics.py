"""The physical forms of the cost model against hand-computed values (#22)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from hyperplace.cli import app
from hyperplace.costmodel.kernels import LayerDims, elementwise_bytes, shape_efficiency
from hyperplace.costmodel.pipeline import FRAGMENTATION_RESERVE, interleaved_memory_factor, pipeline_time
from hyperplace.costmodel.predict import even_layers, predict
from hyperplace.models.gpu import default_catalog
from hyperplace.models.model_spec import ModelSpec
from hyperplace.models.presets import model_preset
from hyperplace.models.transformer import activation_per_token, layer_flops

runner = CliRunner()
GB = 1e9


def test_layer_flops_by_hand_for_two_sizes():
    # GPT 1.7B of SC'21 (h 2304, MHA, 4h MLP): 72·b·s·h²·(1 + s/(6h)) per layer
    gpt = ModelSpec(name="g", num_layers=24, hidden_size=2304, num_heads=24, seq_length=2048,
                    vocab_size=51200)
    b, s, h = 2, 2048, 2304
    assert layer_flops(gpt, 0, b, s) == pytest.approx(72 * b * s * h * h * (1 + s / (6 * h)))
    # Llama 3 8B (GQA 8 of 32 heads, SwiGLU 14336): 6·b·s·(2h² + 2·h·kv·d + 3·h·f) + 12·b·s²·h
    llama = model_preset("llama3-8b")
    h, f, kv_d = 4096, 14336, 8 * 128
    matmul = 2 * h * h + 2 * h * kv_d + 3 * h * f
    assert layer_flops(llama, 3, 1, 8192) == pytest.approx(
        6 * 8192 * matmul + 12 * 8192 * 8192 * h)


def test_layer_bytes_by_hand_for_two_sizes():
    # memory-bound bytes, forward + backward = 3 x forward, 16-bit values
    gpt = LayerDims(tokens=2048, seq=2048, hidden=2304, heads=24, kv_heads=24, ffn=9216,
                    gated=False, tp=1, flash=False)
    per_token = 11 * 2304 + 2 * 9216 + 4.5 * 24 * 2048
    assert elementwise_bytes(gpt, 2) == pytest.approx(3 * 2 * 2048 * per_token)
    # Llama-style, TP 8 with sequence parallelism, FlashAttention: everything sharded
    llama = LayerDims(tokens=8192, seq=8192, hidden=16384, heads=128, kv_heads=8, ffn=53248,
                      gated=True, tp=8, sequence_parallel=True, flash=True)
    rope = 4 * (16384 + 2 * 8 * 128) / 8
    per_token = 11 * 16384 / 8 + 3 * 53248 / 8 + rope
    assert elementwise_bytes(llama, 2) == pytest.approx(3 * 2 * 8192 * per_token)
    # activations kept (Korthikanti: 10 h replicated + 24 h sharded for GPT without scores)
    spec = ModelSpec(name="g", num_layers=2, hidden_size=2304, num_heads=24, seq_length=2048,
                     flash_attention=False)
    assert activation_per_token(spec, 0, 2048) == pytest.approx((10 * 2304, 24 * 2304 + 5 * 24 * 2048))
    l405 = model_preset("llama3-405b")
    rep, shard = activation_per_token(l405, 1, 8192)
    assert rep == 8 * 16384  # no dropout masks: Llama trains without dropout
    assert shard == 4 * 16384 + 4 * 1024 + 2 * 2 * 53248 + 2 * 53248


def test_gemm_shape_efficiency_by_hand():
    h100 = default_catalog().get("H100-80")
    # 4096 x 6144 output: 32 x 24 = 768 tiles of 128 x 256 on 132 SMs -> 6 waves
    q_wave = 4096 * 6144 / (6 * 132 * 128 * 256)
    assert shape_efficiency(4096, 6144, 2048, h100) == pytest.approx(q_wave * 2048 / 2176)
    assert shape_efficiency(4096, 6144, 256, h100) < shape_efficiency(4096, 6144, 8192, h100)


def test_interleaved_bubble_is_the_closed_form():
    t, p, m, v = 0.25, 4, 8, 2
    step = pipeline_time(m, t, p * t, v)
    assert (step - m * t) / (m * t) == pytest.approx((p - 1) / (v * m))
    assert pipeline_time(m, t, p * t, 1) == pytest.approx((m - 1) * t + p * t)
    assert interleaved_memory_factor(p, v) == pytest.approx(1 + (p - 1) / (p * v))
    # predict: equal stages, the bubble part shrinks by v
    spec = model_preset("llama3-8b")
    plain = predict(spec, "H100", tp=4, pp=4, dp=1, micro_batch=1, global_batch=16)
    inter = predict(spec, "H100", tp=4, pp=4, dp=1, micro_batch=1, global_batch=16,
                    virtual_stages=2)
    assert inter.parts["bubble"] < plain.parts["bubble"]


def test_memory_per_term_by_hand():
    spec = model_preset("llama3-8b")
    tp, dp, seq = 2, 4, 4096
    pred = predict(spec, "H100", tp=tp, dp=dp, micro_batch=1, global_batch=dp, seq=seq,
                   zero=1, sequence_parallel=True)
    h, f, kv_d, V, L = 4096, 14336, 1024, 128256, 32
    layer = 2 * h * h + 2 * h * kv_d + 3 * h * f + 2 * h
    params = L * layer + V * h + (V * h + h)  # layers, embedding, untied head + final norm
    mem = pred.memory
    assert mem["weights"] == pytest.approx(2 * params / tp / GB)
    assert mem["gradients"] == pytest.approx(2 * params / tp / GB)
    assert mem["optimizer"] == pytest.approx(12 * params / tp / dp / GB)
    per_token = 8 * h + 4 * h + 4 * kv_d + 6 * f  # SP: all of it sharded over TP
    assert mem["activations"] == pytest.approx(L * per_token * seq / tp / GB)
    assert mem["logits"] == pytest.approx(2 * 4 * seq * V / tp / GB)
    assert mem["runtime"] == pytest.approx(2.5)
    terms = sum(v for k, v in mem.items()
                if k not in ("stage", "microbatchesInFlight", "fragmentationReserve"))
    assert mem["fragmentationReserve"] == pytest.approx(FRAGMENTATION_RESERVE * terms)
    assert pred.memory_per_gpu_gb == pytest.approx(terms * (1 + FRAGMENTATION_RESERVE))


def test_llama3_405b_on_16k_h100_fits_with_its_published_parallelism():
    spec = model_preset("llama3-405b")
    assert even_layers(126, 16) == [7] + [8] * 14 + [7]
    pred = predict(spec, "H100", tp=8, pp=16, dp=128, micro_batch=1, global_batch=2048,
                   zero=1, sequence_parallel=True, selective_recompute=True)
    assert pred.fits
    full = predict(spec, "H100", tp=8, pp=16, dp=128, micro_batch=1, global_batch=2048,
                   zero=1, sequence_parallel=True, recompute=True)
    assert full.memory_per_gpu_gb < pred.memory_per_gpu_gb
    assert full.step_time_s > pred.step_time_s


@pytest.mark.parametrize("args,field", [
    (["--tp", "3"], "--tp"),
    (["--pp", "1", "--virtual-stages", "2"], "--virtual-stages"),
    (["--cp", "3"], "--cp"),
    (["--gpu", "A100-80", "--precision", "fp8"], "--precision"),
    (["--seq", "16384"], "--seq"),
    (["--virtual-stages", "0", "--pp", "2"], "--virtual-stages"),
    (["--recompute", "--selective-recompute"], "--selective-recompute"),
])
def test_bad_parallelism_is_one_line_naming_the_flag(args, field):
    base = {"--gpu": "H100"}
    for k, v in zip(args[::2], args[1::2]):
        if not v.startswith("--"):
            base[k] = v
    argv = ["predict", "--model-name", "llama3-8b"]
    flags = [a for a in args if a.startswith("--") and a not in base]
    for k, v in base.items():
        argv += [k, v]
    argv += flags
    res = runner.invoke(app, argv)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0]


def test_zero_dimension_model_file_is_refused(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: m\nnumLayers: 0\nhiddenSize: 1024\nnumHeads: 16\nseqLength: 2048\n")
    res = runner.invoke(app, ["predict", "--model", str(path), "--gpu", "H100"])
    assert res.exit_code == 2
    assert "numLayers" in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_prediction_says_what_it_was_fitted_on():
    res = runner.invoke(app, ["predict", "--model-name", "llama3-70b", "--gpu", "H100", "--tp",
                              "8", "--pp", "2", "--dp", "2", "--global-batch", "16",
                              "--format", "json"])
    doc = json.loads(res.stdout)
    note = next(n for n in doc["notes"] if n.startswith("coefficients"))
    assert "Megatron-Core" in note and "leave-one-out" in note
    b200 = runner.invoke(app, ["predict", "--model-name", "llama3-8b", "--gpu", "B200",
                               "--format", "json"])
    assert any("no measurement" in n for n in json.loads(b200.stdout)["notes"])


def test_selective_recompute_charges_the_attention_forward_and_activation_by_hand():
    """Llama 3 70B on H100, TP 8, one 8k sequence, FlashAttention: selective recomputation
    repeats the attention kernel's forward (a third of its causal 12·s²·h/2 FLOPs over TP,
    at the FlashAttention fraction of the BF16 peak) and the SwiGLU activation (read 2f,
    write f per token over TP, at HBM bandwidth), priced with the layer's own coefficients
    and added to the backward pass only."""
    from hyperplace.costmodel.calibration import default_calibration
    from hyperplace.costmodel.features import COLUMNS, LayerShape, selective_recompute_features
    from hyperplace.costmodel.kernels import FLASH_DEFAULT

    gpu = default_catalog().get("H100-80")
    s, h, f, tp = 8192, 8192, 28672, 8
    base = dict(kind="transformer", flops=1.0, micro_batch=1, seq=s, hidden=h, heads=64,
                kv_heads=8, ffn=f, gated=True, tp=tp, flash=True, sequence_parallel=True)
    row = dict(zip(COLUMNS["transformer"],
                   selective_recompute_features(LayerShape(**base, selective_recompute=True),
                                                gpu)))
    attention = 12.0 * s * s * h / tp / 2 / 3 / (989e12 * FLASH_DEFAULT)
    activation = 2 * s * 3 * f / tp / (3.35e12)
    assert row["attention"] == pytest.approx(attention, rel=1e-3)
    assert row["elementwise"] == pytest.approx(activation, rel=2e-2)  # HBM 3.35 TB/s
    assert row["gemm"] == row["fixed"] == row["tpComm"] == 0.0
    cal = default_calibration()
    plain = cal.layer_time(LayerShape(**base), gpu)
    again = cal.layer_time(LayerShape(**base, selective_recompute=True), gpu)
    coef = dict(zip(COLUMNS["transformer"], cal.fit_for(gpu)[0].coefficients["transformer"]))
    assert again[0] == plain[0]  # the forward is unchanged
    assert again[1] - plain[1] == pytest.approx(coef["attention"] * row["attention"]
                                                + coef["elementwise"] * row["elementwise"])
    # and predict charges it: slower than keeping the activations, faster than full
    spec = model_preset("llama3-70b")
    kw = dict(tp=8, pp=4, dp=2, global_batch=64)
    none = predict(spec, "H100-80", **kw).step_time_s
    sel = predict(spec, "H100-80", selective_recompute=True, **kw).step_time_s
    full = predict(spec, "H100-80", recompute=True, **kw).step_time_s
    assert none < sel < full


def test_sharded_state_against_published_peaks():
    """torchtitan's Llama 3.1 8B under FSDP on 8 and on 128 H100 (same local batch): the
    published peaks differ by what sharding the weights, gradients and Adam state over 16x
    more ranks saves (82.4 - 67.0 GiB); the cost model's memory per term says the same
    within 10 %. (The absolute peaks are in bench_fidelity's table, with their errors.)"""
    from hyperplace.costmodel.peaks import GIB, predict_peak, read_peaks

    rows = {r.run: r for r in read_peaks()}
    small, large = rows["torchtitan-llama3.1-8b-fsdp8"], rows["torchtitan-llama3.1-8b-fsdp128"]
    published = small.measured_gib - large.measured_gib
    predicted = (predict_peak(small).memory_per_gpu_gb
                 - predict_peak(large).memory_per_gpu_gb) * 1e9 / GIB
    assert predicted == pytest.approx(published, rel=0.10)
    # and it is the state: 16 bytes per parameter x (1/8 - 1/128), plus the reserve
    params = model_preset("llama3-8b").total_params()
    by_hand = 16 * params * (1 / 8 - 1 / 128) * (1 + FRAGMENTATION_RESERVE) / GIB
    assert predicted == pytest.approx(by_hand, rel=0.01)


def test_overlapped_param_gather_by_hand():
    """The distributed optimizer's gradient sync D is a reduce-scatter and a parameter
    all-gather of D/2 each: with --overlap-grad-reduce alone only the part of D beyond the
    last micro-batch's backward W_b shows; with --overlap-param-gather too the reduce-scatter
    hides under W_b and the all-gather under the first micro-batch's forward W_f
    (Megatron-Core's H100 runs of the fit set used both)."""
    from hyperplace.costmodel.scale_fit import read_fit_set

    row = next(r for r in read_fit_set() if r.run == "mcore-gpt-32b")
    assert row.config["overlap_param_gather"] and row.config["zero"] == 1
    c = {k: v for k, v in row.config.items() if k not in ("overlap_grad_reduce",
                                                            "overlap_param_gather", "recompute")}
    plain = predict(row.spec, row.gpu, overlap_grad_reduce=False, **c)
    grads = predict(row.spec, row.gpu, overlap_grad_reduce=True, **c)
    both = predict(row.spec, row.gpu, overlap_grad_reduce=True, overlap_param_gather=True, **c)
    d = plain.parts["dpSync"]
    w_f = sum(layer["fwdS"] for layer in plain.layers)
    w_b = sum(layer["bwdS"] for layer in plain.layers)
    assert d > w_b  # a case where the sync outlasts the window
    assert grads.parts["dpSync"] == pytest.approx(d - w_b)
    assert both.parts["dpSync"] == pytest.approx(max(0.0, d / 2 - w_b) + max(0.0, d / 2 - w_f))
    assert both.step_time_s < grads.step_time_s < plain.step_time_s


def test_a_configuration_that_does_not_fit_says_by_how_much_and_which_term_dominates():
    pred = predict(model_preset("llama3-70b"), "H100-80", tp=8, pp=1, dp=1, global_batch=8)
    assert not pred.fits
    note = next(n for n in pred.notes if n.startswith("does not fit"))
    over = pred.memory_per_gpu_gb - pred.memory_capacity_gb
    assert f"{over:.1f} GB over" in note
    terms = {k: v for k, v in pred.memory.items() if k not in ("stage", "microbatchesInFlight")}
    assert f"{max(terms, key=terms.get)} dominates" in note
