"""``hyperplace predict``: the figures, their parts, agreement with ``split``, bad input."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from hyperplace.cli import app
from hyperplace.costmodel.predict import predict
from hyperplace.models.presets import model_preset
from hyperplace.models.split import SplitProblem, Stage, StageLink
from hyperplace.solvers.split import solve_split

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["predict", *args])


def test_json_keys_and_parts_add_up_to_the_step() -> None:
    res = run("--model-name", "llama3-8b", "--gpu", "H100", "--tp", "2", "--pp", "2",
              "--dp", "2", "--microbatch-size", "1", "--global-batch", "16", "--seq", "4096",
              "--zero", "1", "--no-overlap-grad-reduce", "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    for key in ("stepTimeS", "tokensPerS", "tflopsPerGpu", "mfu", "memoryPerGpuGb", "parts",
                "layers"):
        assert key in doc
    assert set(doc["parts"]) == {"compute", "tpComm", "p2p", "bubble", "dpSync", "optimizer"}
    assert sum(doc["parts"].values()) == pytest.approx(doc["stepTimeS"])
    assert all(v >= 0 for v in doc["parts"].values())
    assert doc["parts"]["tpComm"] > 0 and doc["parts"]["dpSync"] > 0
    assert len(doc["layers"]) == 32
    assert {"index", "kind", "fwdS", "bwdS"} <= set(doc["layers"][0])
    assert doc["tokensPerS"] == pytest.approx(16 * 4096 / doc["stepTimeS"])
    assert 0 < doc["mfu"] < 1


def test_predict_and_split_agree_on_the_same_configuration() -> None:
    """Two identical stages split evenly: predict's step is the split's symmetric step."""
    model = model_preset("llama3-8b")
    pred = predict(model, "A100-80", tp=4, pp=2, dp=2, micro_batch=1, global_batch=8)
    stages = [Stage(name=f"stage{i}", cluster="cluster", gpu_type="A100-80", gpu_count=8,
                    tp=4) for i in range(2)]
    link = StageLink(a="stage0", b="stage1", gbps=200 * 8, latency_ms=0.005, kind="ib")
    problem = SplitProblem(model=model.model_copy(update={"micro_batch_size": 2}),
                           stages=stages, links=[link], microbatches=4, fixed_order=True,
                           overlap_grad_reduce=True)
    plan = solve_split(problem)
    assert plan.symmetric is not None
    assert plan.symmetric.step_time_s == pytest.approx(pred.step_time_s)
    assert plan.bottleneck_s <= plan.symmetric.bottleneck_s * (1 + 1e-9)


def test_recompute_costs_time_and_saves_memory() -> None:
    model = model_preset("llama3-8b")
    plain = predict(model, "H100", tp=4, micro_batch=2, global_batch=8)
    rec = predict(model, "H100", tp=4, micro_batch=2, global_batch=8, recompute=True)
    assert rec.step_time_s > plain.step_time_s
    assert rec.memory_per_gpu_gb < plain.memory_per_gpu_gb
    assert rec.hardware_tflops_per_gpu == pytest.approx(rec.model_tflops_per_gpu * 4 / 3)


def test_flash_off_costs_memory() -> None:
    model = model_preset("llama3-8b")
    on = predict(model, "H100", tp=2, global_batch=4)
    off = predict(model, "H100", tp=2, global_batch=4, flash=False)
    assert off.memory_per_gpu_gb > on.memory_per_gpu_gb
    assert off.step_time_s > on.step_time_s


def test_126_layer_model_answers_quickly() -> None:
    """A smoke check of the cost, not a timing assertion (bench/bench_fidelity.py times it)."""
    model = model_preset("llama3-405b")
    start = time.perf_counter()
    pred = predict(model, "H100", tp=8, pp=16, dp=8, global_batch=128, zero=1,
                   sequence_parallel=True)
    assert len(pred.layers) == 126
    assert time.perf_counter() - start < 30


@pytest.mark.parametrize(("args", "where"), [
    (("--model-name", "gpt-9", "--gpu", "H100"), "--model-name"),
    (("--model-name", "llama3-8b", "--gpu", "Z80"), "--gpu"),
    (("--model-name", "llama3-8b", "--gpu", "H100", "--tp", "3"), "--tp"),
    (("--model-name", "llama3-8b", "--gpu", "H100", "--pp", "33"), "--pp"),
    (("--model-name", "llama3-8b", "--gpu", "H100", "--dp", "4", "--global-batch", "6"),
     "--global-batch"),
    (("--model-name", "llama3-8b", "--gpu", "H100", "--tp", "0"), "--tp"),
    (("--model-name", "llama3-8b", "--gpu", "H100", "--zero", "5"), "--zero"),
])
def test_bad_input_is_one_line_exit_2(args: tuple[str, ...], where: str) -> None:
    res = run(*args)
    assert res.exit_code == 2
    assert res.stderr.startswith("error: ") and where in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def test_a_configuration_that_does_not_fit_says_so_first_with_by_how_much() -> None:
    res = run("--model-name", "llama3-70b", "--gpu", "H100", "--tp", "8", "--pp", "4",
              "--dp", "16", "--global-batch", "512", "--virtual-stages", "4")
    assert res.exit_code == 0, res.output
    pred = predict(model_preset("llama3-70b"), "H100", tp=8, pp=4, dp=16, global_batch=512,
                   virtual_stages=4)
    assert not pred.fits
    first = " ".join(res.stdout.split("\n\n")[0].split())
    assert first.startswith(f"DOES NOT FIT: {pred.memory_per_gpu_gb:.1f} GB per GPU needed, "
                            f"80 GB available ("
                            f"{pred.memory_per_gpu_gb - 80:.1f} GB over)")
    assert res.stdout.index("DOES NOT FIT") < res.stdout.index("tokens/s")


def test_a_fitting_configuration_has_no_does_not_fit_line() -> None:
    res = run("--model-name", "llama3-8b", "--gpu", "H100", "--tp", "2", "--pp", "2",
              "--dp", "2", "--global-batch", "16", "--virtual-stages", "2")
    assert res.exit_code == 0, res.output
    assert "DOES NOT FIT" not in res.stdout


@pytest.mark.parametrize("virtual", ["3", "7"])
def test_virtual_stages_must_divide_the_layers_per_stage(virtual) -> None:
    # Megatron-Core refuses it: every pipeline stage's layers must be a multiple of the
    # virtual pipeline size (megatron/core/transformer/transformer_config.py)
    res = run("--model-name", "llama3-70b", "--gpu", "H100", "--tp", "8", "--pp", "4",
              "--dp", "16", "--global-batch", "512", "--virtual-stages", virtual)
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--virtual-stages" in lines[0] and "20 layers" in lines[0]
