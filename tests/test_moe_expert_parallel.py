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
