"""MoE expert parallelism (#24): the all-to-all term of the cost model, the DeepSeek-V3
preset, and EP groups placed so that their all-to-all stays inside an NVLink domain where
it can (every backend, with the checker)."""

from __future__ import annotations

import pytest

from hyperplace.check import check
from hyperplace.costmodel.collectives import (
    alltoall,
    expert_alltoall,
    moe_dispatch_bytes,
    moe_step_alltoall_s,
)
from hyperplace.instances.nvl72 import rack_cluster, rack_nodes
from hyperplace.models import Instance, InstanceSpec
from hyperplace.models.job import ObjectMeta
from hyperplace.models.presets import model_preset
from hyperplace.solvers.driver import solve_placement
from placement_helpers import job


def test_the_all_to_all_splits_its_bytes_between_nvlink_and_the_fabric():
    mb = 1e6
    # 8 ranks, all in one domain: the NVLink all-to-all, 7/8 of the bytes at NVLink rate
    assert expert_alltoall(8 * mb, 8, 8, 900e9, 50e9, 0, 0) == pytest.approx(7 / 8 * 8 * mb / 900e9)
    assert expert_alltoall(8 * mb, 8, 8, 900e9, 50e9, 0, 0) == pytest.approx(
        alltoall(8 * mb, 8, 900e9, 0))
    # EP 64 on 8-GPU nodes: 56/64 of the bytes over a 50 GB/s NIC; in one NVL72 rack none
    hgx = expert_alltoall(64 * mb, 64, 8, 900e9, 50e9, 0, 0)
    rack = expert_alltoall(64 * mb, 64, 64, 1800e9, 50e9, 0, 0)
    assert hgx == pytest.approx(56 / 64 * 64 * mb / 50e9)
    assert rack == pytest.approx(63 / 64 * 64 * mb / 1800e9)
    assert hgx / rack > 30
    # a step: 4 all-to-alls per MoE layer of tokens x top-k x hidden BF16 values
    assert moe_dispatch_bytes(4096, 7168, 8) == 4096 * 8 * 7168 * 2
    step = moe_step_alltoall_s(tokens_per_rank=4096, hidden=7168, top_k=8, moe_layers=58,
                               ranks=64, ranks_per_domain=64, nvlink_bw=900e9, fabric_bw=50e9)
    assert step == pytest.approx(4 * 58 * expert_alltoall(moe_dispatch_bytes(4096, 7168, 8),
                                                          64, 64, 900e9, 50e9))


def test_the_deepseek_v3_preset_has_its_published_shape():
    m = model_preset("deepseek-v3")
    assert (m.num_layers, m.hidden_size, m.num_experts, m.experts_per_token) == (61, 7168, 256, 8)
    assert m.total_params() == pytest.approx(671e9, rel=0.01)
    assert "2412.19437" in m.source
    for name in ("mixtral-8x7b", "deepseek-moe-16b"):
        assert model_preset(name).num_experts > 1


def test_an_ep_group_without_a_floor_stays_in_one_rack_where_it_can(solver):
    # no NVLink floor: the EP group may span racks, but r01 holds it whole; r00's three
    # free trays are the best fit for a piece, not for the group
    held = {i: {g: "x" for g in range(4)} for i in range(15)}
    racks = {"r00": rack_nodes("r00", allocated=held),
             "r01": rack_nodes("r01", allocated={i: {g: "y" for g in range(4)}
                                                 for i in range(13)})}
    ep = job("moe", tp=16, accel="GB200", nvlink=0, mem=180, group_type="ExpertParallel")
    inst = Instance(metadata=ObjectMeta(name="moe"), spec=InstanceSpec(
        clusters=[rack_cluster("gb", racks)], jobs=[ep]))
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert plan.admitted == ["moe"] and check(plan, inst) == []
    net = inst.clusters[0].network
    assert {net.nvlink_domain_of(g.node).name for g in plan.placements[0].gpus} == {"r01"}


# ---- expert parallelism in predict and plan (#22 item 2) --------------------------------


def _mixtral_ep(tp: int, dp: int, ep: int):
    from hyperplace.costmodel.predict import predict

    return predict(model_preset("mixtral-8x7b"), "H100-80", tp=tp, pp=1, dp=dp,
                   global_batch=64, ep=ep, zero=1)


def test_predicted_all_to_all_matches_a_hand_computed_case():
    """Mixtral 8x7B (32 MoE layers, hidden 4096, top-2, seq 4096) on 16 H100, one
    sequence per micro-batch, 64 per step. Per MoE layer and micro-batch four all-to-alls
    (dispatch and combine, forward and backward) of 4096 tokens x 2 experts x 4096 x 2
    bytes = 64 MiB per rank.
    * TP1 x EP8: the group is one 8-GPU node: 7/8 of the bytes over NVLink at 0.8 x 450 GB/s
      per direction, 7 steps of 2 us; m = 64 / 16 = 4 micro-batches.
    * TP2 x EP8 (8 DP ranks): 4 EP ranks per node, so 4/8 of the bytes leave the node over
      the 400 Gb/s NIC (50 GB/s), 4 steps of 5 us: the slower part sets the time."""
    nbytes = 4096 * 2 * 4096 * 2
    inside = 7 / 8 * nbytes / (0.8 * 450e9) + 7 * 2e-6
    assert _mixtral_ep(1, 16, 8).parts["epComm"] == pytest.approx(4 * 4 * 32 * inside)
    outside = 4 / 8 * nbytes / 50e9 + 4 * 5e-6
    m = 64 // 8
    assert _mixtral_ep(2, 8, 8).parts["epComm"] == pytest.approx(m * 4 * 32 * outside)
    # the parts still add up to the step
    p = _mixtral_ep(2, 8, 8)
    assert sum(p.parts.values()) == pytest.approx(p.step_time_s)
    assert "epComm" not in _mixtral_ep(2, 8, 1).parts


def test_expert_parallel_memory_by_hand():
    """EP shards the routed experts' weights and gradients (not already sharded by ZeRO-1);
    their optimizer state stays sharded over all DP ranks, as without EP. Mixtral: 32 MoE
    layers of 8 experts x 3 x 4096 x 14336 parameters; TP 2."""
    experts = 32 * 8 * 3 * 4096 * 14336
    one, four = _mixtral_ep(2, 8, 1).memory, _mixtral_ep(2, 8, 4).memory
    assert one["weights"] - four["weights"] == pytest.approx(2 * experts / 2 * 3 / 4 / 1e9)
    assert one["gradients"] - four["gradients"] == pytest.approx(2 * experts / 2 * 3 / 4 / 1e9)
    assert one["optimizer"] == pytest.approx(four["optimizer"])


@pytest.mark.parametrize("model,ep,why", [("llama3-8b", "2", "MoE"),
                                          ("mixtral-8x7b", "3", "experts"),
                                          ("mixtral-8x7b", "16", "experts"),
                                          ("deepseek-moe-16b", "16", "DP x CP")])
def test_bad_expert_parallelism_is_one_line_naming_ep(model, ep, why):
    from typer.testing import CliRunner

    from hyperplace.cli import app

    res = CliRunner().invoke(app, ["predict", "--model-name", model, "--gpu", "H100",
                                   "--tp", "1", "--dp", "8", "--ep", ep])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--ep" in lines[0] and why in lines[0]


def test_planner_searches_expert_parallelism_as_brute_force_does():
    from hyperplace.costmodel.plan import brute_force, plan

    spec = model_preset("deepseek-moe-16b")
    res = plan(spec, [("H100-80", 8)], global_batch=16, top=1)
    oracle = brute_force(spec, "H100-80", 8, 16)
    assert res.best[0].candidate == oracle[0].candidate
    assert any(o.candidate.ep > 1 for o in oracle)
    assert res.best[0].prediction.fits
