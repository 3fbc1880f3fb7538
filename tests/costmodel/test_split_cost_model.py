"""The layer split's figures against shared/design/cost-model.md, worked by hand on one layer,
and the plan's reported totals against their own definitions."""

from __future__ import annotations

import pytest

from hyperplace.costmodel.pipeline import FRAGMENTATION_RESERVE
from hyperplace.costmodel.layers import stage_layer_times
from hyperplace.formulations.layer_split import build_split_data
from hyperplace.models.gpu import default_catalog
from hyperplace.models.model_spec import ModelSpec, model_preset, param_state_bytes_per_param
from hyperplace.models.split import SplitProblem, Stage, StageLink
from hyperplace.solvers.split import solve_split

B, S, H, A = 2, 4096, 12288, 96  # seed-8layer: micro-batch 2, 4k context, GPT-3 width


def test_one_layer_flops_and_activation_bytes_by_hand() -> None:
    no_flash = model_preset("seed-8layer").model_copy(update={"flash_attention": False})
    layer = no_flash.build_layers()[3]  # a middle layer: no embedding/head
    # 72·b·s·h²·(1 + s/(6h)) = 72·2·4096·12288²·(1 + 4096/73728)
    assert layer.flops == pytest.approx(72 * 2 * 4096 * 12288**2 * (1 + 1 / 18))
    assert layer.params == 12 * H * H + 2 * H  # matrices and two norms (no biases modelled)
    sbh = S * B * H
    # Korthikanti: s·b·h·(10 + 24/t + 5·a·s/(h·t)); 5·96·4096/12288 = 160.
    assert layer.activation_bytes(tp=1) == pytest.approx(sbh * (34 + 160))
    assert layer.activation_bytes(tp=8) == pytest.approx(sbh * (10 + 24 / 8 + 160 / 8))
    assert layer.activation_bytes(recompute=True) == 2 * sbh
    flash = ModelSpec(name="f", num_layers=2, hidden_size=H, num_heads=A, seq_length=S,
                      micro_batch_size=B, flash_attention=True).build_layers()[0]
    assert flash.activation_bytes(tp=8) == pytest.approx(sbh * (10 + 24 / 8))


@pytest.mark.parametrize(("zero", "dp", "expected"),
                         [(0, 4, 16.0), (1, 4, 4 + 12 / 4), (2, 4, 2 + 14 / 4), (3, 4, 16 / 4),
                          (3, 1, 16.0)])
def test_state_bytes_per_parameter(zero: int, dp: int, expected: float) -> None:
    assert param_state_bytes_per_param(zero, dp) == pytest.approx(expected)


def test_stage_time_memory_and_transfer_by_hand() -> None:
    """Compute, memory at each position (min(P - i, m) micro-batches) and the WAN boundary."""
    problem = SplitProblem(
        model=model_preset("seed-8layer"), microbatches=8, fixed_order=True,
        stages=[Stage(cluster="beijing", gpu_type="B200", gpu_count=8),
                Stage(cluster="shanghai", gpu_type="H100-80", gpu_count=8)],
        links=[StageLink(a="beijing", b="shanghai", gbps=100, latency_ms=20)])
    data = build_split_data(problem)
    g = default_catalog().get("B200")
    layers = problem.model.build_layers()
    layer = layers[3]
    # Layer times are the fitted cost model's, the one implementation predict uses too.
    times = stage_layer_times(problem.model, layers, g, 8, 1)
    assert data.time[0, 3] == pytest.approx(times.fwd[3] + times.bwd[3])
    assert data.tp_comm[0, 3] == pytest.approx(times.tp_comm[3])
    # Position 0 of 2 keeps min(2, 8) = 2 micro-batches, position 1 keeps 1.
    assert list(data.inflight) == [2, 1]
    state = layer.params * 16 / 8
    acts = S * B * H * (10 + 24 / 8)  # FlashAttention (the default): no 5·a·s/h term
    # the allocator's fragmentation reserve on top of every term
    reserve = 1 + FRAGMENTATION_RESERVE
    assert data.mem_layer[0, 3] == pytest.approx((state + 2 * acts) * reserve)
    assert data.mem_layer[1, 3] == pytest.approx((state + 1 * acts) * reserve)
    assert data.mem_const[0] == pytest.approx(2.5e9 * reserve)
    # Activation forward and gradient back: 2·(b·s·h·2 bytes / 12.5 GB/s + 20 ms).
    assert data.xfer[0, 4] == pytest.approx(2 * (2 * S * B * H / 12.5e9 + 0.020))


@pytest.mark.parametrize("microbatches", [1, 3, 8])
def test_inflight_microbatches_never_exceed_m(microbatches: int) -> None:
    problem = SplitProblem(model=model_preset("llama3-8b"), microbatches=microbatches,
                           stages=[Stage(cluster="c", gpu_type="H100-80", gpu_count=8,
                                         name=f"s{i}") for i in range(4)], fixed_order=True)
    data = build_split_data(problem)
    assert list(data.inflight) == [min(4 - i, microbatches) for i in range(4)]


def test_reported_totals_follow_their_definitions() -> None:
    """bottleneck = max load; pipeline = (m-1)·max + Σ; step adds DP sync and the optimizer
    update of the slowest stage; bubble and
    throughput from those; idle = bottleneck - load."""
    problem = SplitProblem(
        model=model_preset("llama3-8b"), microbatches=6, zero=1,
        stages=[Stage(cluster="a", gpu_type="A100-80", gpu_count=16),
                Stage(cluster="a", gpu_type="H100-80", gpu_count=8),
                Stage(cluster="b", gpu_type="B200", gpu_count=8, tp=4)])
    plan = solve_split(problem)
    assert plan.feasible
    used = [s for s in plan.stages if s.position is not None]
    loads = [s.load_s for s in used]
    m = plan.microbatches
    assert plan.bottleneck_s == pytest.approx(max(loads))
    assert plan.pipeline_time_s == pytest.approx((m - 1) * max(loads) + sum(loads))
    # The step ends when the slowest stage has synchronised its gradients and updated.
    assert plan.step_time_s == pytest.approx(
        plan.pipeline_time_s + max(s.dp_sync_s + s.optimizer_s for s in used))
    assert plan.optimizer_s == pytest.approx(max(s.optimizer_s for s in used))
    assert plan.optimizer_s > 0
    assert plan.dp_sync_s > 0  # 16 A100s at TP 8 are 2 data-parallel replicas
    assert plan.bubble_fraction == pytest.approx(
        (plan.pipeline_time_s - m * max(loads)) / plan.pipeline_time_s)
    assert plan.throughput_tokens_s == pytest.approx(
        m * plan.tokens_per_microbatch / plan.step_time_s)
    for s in used:
        assert s.load_s == pytest.approx(s.compute_s + s.transfer_s)
        assert s.idle_s == pytest.approx(plan.bottleneck_s - s.load_s)
    assert sum(s.num_layers for s in used) == plan.num_layers == 32


def test_equal_stages_bubble_is_the_textbook_fraction() -> None:
    """With identical stage loads the bubble is (P - 1)/(m + P - 1), as in cost-model.md."""
    model = ModelSpec(name="even", num_layers=8, hidden_size=4096, num_heads=32,
                      seq_length=2048)
    problem = SplitProblem(model=model, microbatches=8, fixed_order=True,
                           stages=[Stage(cluster="c", gpu_type="H100-80", gpu_count=8,
                                         name=f"s{i}") for i in range(4)],
                           links=[StageLink(a="c", b="c", gbps=1e9, latency_ms=0)])
    plan = solve_split(problem)
    # Compute dominates and the middle stages pay two transfers, so loads are near-equal.
    assert [s.num_layers for s in plan.stages] == [2, 2, 2, 2]
    assert plan.bubble_fraction == pytest.approx(3 / 11, rel=1e-3)
