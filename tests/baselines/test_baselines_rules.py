"""Each peer rule pinned on a tiny instance, with the upstream rule it comes from.

Every plan a baseline makes here also goes through the independent checker.
"""

from __future__ import annotations

import random

import pytest

from hyperplace.baselines import (
    BASELINES,
    RULES,
    VolcanoConfig,
    cluster_views,
    new_state,
    place_one,
    run_peer,
    volcano,
)
from hyperplace.baselines.common import FreeState
from hyperplace.baselines.gpu_choice import device_plugin_choice, slurm_gres_choice
from hyperplace.benchkit.peer_cases import _dp, _job, _node, _tp
from hyperplace.check import check, format_violations
from hyperplace.models import Cluster, Instance, Node
from hyperplace.models.cluster import FabricGenerator, FabricSpec
from hyperplace.models.instance import InstanceSpec
from hyperplace.models.job import ObjectMeta

DGX1 = Node.model_validate({"name": "d", "gpuType": "V100-32", "gpuCount": 8,
                            "nvlink": "hybrid_cube_mesh"})


def instance(nodes: list[Node], jobs, per_leaf: int) -> Instance:
    cluster = Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=FabricGenerator(
        type="fat-tree-2", nodes_per_leaf=per_leaf, spines=1)))
    return Instance(metadata=ObjectMeta(name="tiny"),
                    spec=InstanceSpec(clusters=[cluster], jobs=jobs))


def busy(k: int) -> dict[int, str]:
    return {i: "resident" for i in range(k)}


def nodes_of(plan, job: str) -> list[str]:
    return sorted({g.node for p in plan.placements if p.job == job for g in p.gpus})


def checked(plan, inst, allowed=frozenset()):
    violations = check(plan, inst)
    assert {v.code for v in violations} <= set(allowed), format_violations(violations)
    return violations


# ---- GPU choice inside a node ------------------------------------------------------

def test_device_plugin_picks_the_best_linked_gpus_on_dgx1():
    # go-gpuallocator BestEffortPolicy: the 4-GPU NVLink clique, not the lowest indices
    assert device_plugin_choice(DGX1, (0, 1, 2, 3, 4), 4) == [0, 1, 2, 3]
    assert device_plugin_choice(DGX1, (2, 3, 4, 5, 6, 7), 4) == [4, 5, 6, 7]
    # partition score: {2,3}+{4,5} (2 NVLinks each + same PCIe switch) beats any other pairing
    assert device_plugin_choice(DGX1, (2, 3, 4, 5), 2) == [2, 3]
    # 1 GPU: the first available device
    assert device_plugin_choice(DGX1, (5, 6), 1) == [5]


def test_slurm_gres_follows_its_ascending_link_sort():
    # _pick_gres_topo: first free GPU, then re-sort by links to the chosen ones, ascending
    # (gres_select_filter.c L590-593), resuming at the second candidate. From an empty DGX-1:
    # take 0; totals 1:2 2:1 3:1 4:2 -> order 0,5,6,7,2,3,1,4 -> take 5; ... -> {0,3,5,6}
    assert slurm_gres_choice(DGX1, tuple(range(8)), 4) == [0, 3, 5, 6]
    nvswitch = Node.model_validate({"name": "h", "gpuType": "H100-80", "gpuCount": 8})
    assert slurm_gres_choice(nvswitch, (1, 2, 5, 7), 2) == [1, 2]  # no Links=: index order


# ---- Kueue TAS -----------------------------------------------------------------------

def test_kueue_implied_podset_goes_to_the_fullest_node():
    # no topology request on a TAS flavor: implied, hostname level, LeastFreeCapacity
    inst = instance([_node("n0", "H100-80", {}), _node("n1", "H100-80", busy(4)),
                     _node("n2", "H100-80", busy(6))],
                    [_job("tp2", "m", "normal", 1, [_tp(2, "H100", 900, 80), _dp()])], 4)
    plan = BASELINES["kueue-tas-style"](inst)
    assert nodes_of(plan, "tp2") == ["n2"]
    checked(plan, inst)


def test_kueue_required_rack_uses_best_fit():
    # required: rack -> BestFit: the rack with the fewest pods that still holds all of them
    nodes = [_node("a0", "H100-80", {}), _node("a1", "H100-80", {}),
             _node("b0", "H100-80", busy(4)), _node("b1", "H100-80", busy(4))]
    job = _job("dp8", "m", "normal", 8, [_dp(max_hops=1, accelerator="H100")])
    inst = instance(nodes, [job], 2)
    plan = BASELINES["kueue-tas-style"](inst)
    assert nodes_of(plan, "dp8") == ["b0", "b1"]  # rack b holds 8 pods, rack a 16
    checked(plan, inst)


# ---- Slurm topology/tree ------------------------------------------------------------

def test_slurm_picks_the_leaf_with_fewest_usable_nodes_that_fits():
    # leaf A: 2 empty nodes (16 free GPUs); leaf B: 3 half-used nodes (12 free GPUs).
    # Three 4-GPU tasks fit both; eval_nodes_tree.c compares node counts: A (2) wins,
    # although B has fewer free GPUs.
    nodes = [_node("a0", "H100-80", {}), _node("a1", "H100-80", {}), _node("a2", "H100-80", busy(8)),
             _node("b0", "H100-80", busy(4)), _node("b1", "H100-80", busy(4)),
             _node("b2", "H100-80", busy(4))]
    job = _job("tp4x3", "m", "normal", 3, [_tp(4, "H100", 900, 80), _dp()])
    inst = instance(nodes, [job], 3)
    plan = BASELINES["slurm-tree-style"](inst)
    assert nodes_of(plan, "tp4x3") == ["a0", "a1"]
    checked(plan, inst)


def test_slurm_switches_1_waits_rather_than_spanning_leaves():
    nodes = [_node(f"n{i}", "H100-80", {}) for i in range(4)]
    job = _job("dp24", "m", "normal", 3, [_tp(8, "H100", 900, 80), _dp(max_hops=1)])
    inst = instance(nodes, [job], 2)
    plan = BASELINES["slurm-tree-style"](inst)
    assert plan.admitted == [] and "switches=1" in plan.pending[0].reasons[0]


# ---- Volcano --------------------------------------------------------------------------

def _two_leaves():
    # leaf 0: n0, n1 half used; leaf 1: n2, n3 empty
    return [_node("n0", "H100-80", busy(4)), _node("n1", "H100-80", busy(4)),
            _node("n2", "H100-80", {}), _node("n3", "H100-80", {})]


def test_volcano_soft_mode_is_hard_mode_up_to_the_cluster_top():
    # 3 TP4 pods, hop limit 1 (one leaf). Leaf 1 (n2, n3 empty) holds them: hard and soft
    # (session.go convertSoftToHardTopology: hard with the cluster top as the limit) both
    # take the lowest tier that fits, leaf 1.
    job = _job("tp4x3", "m", "normal", 3, [_tp(4, "H100", 900, 80), _dp(max_hops=1)])
    inst = instance(_two_leaves(), [job], 2)
    views = cluster_views(inst)
    for mode in ("hard", "soft"):
        got = volcano.place_job(job, FreeState(inst), views, random.Random(0),
                                VolcanoConfig(topology_mode=mode))
        assert {g.node for gpus in got.units.values() for g in gpus} == {"n2", "n3"}, mode
    # 5 TP4 pods (20 GPUs): no leaf has them (12 and 16 free). Hard refuses; soft climbs
    # to the cluster top and crosses leaves.
    big = _job("tp4x5", "m", "normal", 5, [_tp(4, "H100", 900, 80), _dp(max_hops=1)])
    inst = instance(_two_leaves(), [big], 2)
    views = cluster_views(inst)
    hard = volcano.place_job(big, FreeState(inst), views, random.Random(0), VolcanoConfig())
    assert not hard.units and "tier 1" in hard.reasons[0]
    soft = volcano.place_job(big, FreeState(inst), views, random.Random(0),
                             VolcanoConfig(topology_mode="soft"))
    used = {g.node for gpus in soft.units.values() for g in gpus}
    assert used == {"n0", "n1", "n2", "n3"}


def test_volcano_topology_score_has_the_cluster_top_tier():
    # fat-tree-2: leaf HyperNodes (tier 1) under one spine HyperNode (tier 2) holding every
    # node; Volcano adds the cluster top (tier 3, session.go addClusterTopHyperNode), so
    # maxTier is 3: same leaf 10, LCA at the spine 10 x (3 - 2) / (3 - 1) = 5 (not 0).
    inst = instance([_node(f"n{i}", "H100-80", {}) for i in range(4)], [], 2)
    view = cluster_views(inst)[0]
    assert volcano.tiers(view) == [1, 2]  # the spine holds every node: the top adds no fit
    assert volcano.network_topology_scores(view, ["n1", "n2", "n3"], ["n0"]) == [10, 5, 5]
    # fat-tree-3 (leaf, pod, core = every node; cluster top tier 4): 10, 10 x 2/3, 10 x 1/3
    cluster = Cluster(name="c", nodes=[_node(f"m{i}", "H100-80", {}) for i in range(8)],
                      fabric=FabricSpec(generator=FabricGenerator(
                          type="fat-tree-3", nodes_per_leaf=2, leaves_per_pod=2)))
    inst3 = Instance(metadata=ObjectMeta(name="t3"), spec=InstanceSpec(clusters=[cluster]))
    view3 = cluster_views(inst3)[0]
    got = volcano.network_topology_scores(view3, ["m1", "m2", "m4"], ["m0"])
    assert got == pytest.approx([10, 20 / 3, 10 / 3])


def test_volcano_binpack_on_gpus_fills_the_fullest_node():
    job = _job("tp4", "m", "normal", 1, [_tp(4, "H100", 900, 80), _dp()])
    inst = instance(_two_leaves(), [job], 2)
    for seed in range(5):
        plan = BASELINES["volcano-style"](inst, seed=seed)
        assert nodes_of(plan, "tp4") in (["n0"], ["n1"])  # score (4+4)/8 beats (0+4)/8
        checked(plan, inst)


def test_volcano_default_config_breaks_ties_at_random_and_seeds_reproduce():
    job = _job("tp4", "m", "normal", 1, [_tp(4, "H100", 900, 80), _dp()])
    inst = instance(_two_leaves(), [job], 2)
    seen = {tuple(nodes_of(BASELINES["volcano-default"](inst, seed=s), "tp4")) for s in range(20)}
    assert len(seen) > 1  # GPUs carry no binpack weight: every feasible node ties
    again = [nodes_of(BASELINES["volcano-default"](inst, seed=3), "tp4") for _ in range(3)]
    assert again[0] == again[1] == again[2]


def test_volcano_hard_mode_picks_a_leaf_hypernode():
    job = _job("dp2", "m", "normal", 2, [_tp(8, "H100", 900, 80), _dp(max_hops=1)])
    inst = instance(_two_leaves(), [job], 2)
    plan = BASELINES["volcano-style"](inst)
    assert nodes_of(plan, "dp2") == ["n2", "n3"]
    checked(plan, inst)


# ---- the API the over-time simulation uses ------------------------------------------

@pytest.mark.parametrize("rule", list(RULES))
def test_place_one_takes_gpus_and_release_gives_them_back(rule):
    job = _job("tp4", "m", "normal", 1, [_tp(4, "H100", 900, 80), _dp()])
    inst = instance(_two_leaves(), [job], 2)
    state = new_state(inst, rule)
    before = {n: list(v) for n, v in state.free.items()}
    got = place_one(inst, job, state, rule, seed=1)
    assert got is not None and sum(len(v) for v in got.values()) == 4
    for gpus in got.values():
        for g in gpus:
            assert g.gpu not in state.free[g.node]
            state.release(g.node, [g.gpu])
    assert state.free == before
    big = _job("tp8x4", "m", "normal", 4, [_tp(8, "H100", 900, 80), _dp()])  # 32 > 24 free
    assert place_one(inst, big, state, rule) is None
    assert state.free == before


@pytest.mark.parametrize("rule", list(RULES))
def test_run_peer_plans_pass_the_checker(rule):
    nodes = _two_leaves() + [_node("n4", "A100-80", busy(2))]
    jobs = [_job("tp8", "m", "high", 1, [_tp(8, "H100", 900, 80), _dp()]),
            _job("dp3", "m", "normal", 3, [_tp(2, "A100", 600, 80), _dp()]),
            _job("tp4x2", "m", "normal", 2, [_tp(4, "H100", 900, 80), _dp(max_hops=1)])]
    inst = instance(nodes, jobs, 3)
    plan = run_peer(inst, rule, seed=2)
    assert plan.solver == rule
    # Kueue without TAS cannot ask for a topology; every other rule keeps hop limits
    checked(plan, inst, {"replica-hop-count"} if rule == "kueue-quota-style" else set())
    assert set(plan.admitted) | {p.job for p in plan.pending} == {j.name for j in jobs}


def _pp(size: int, accelerator: str = "H100", memory: float = 80) -> dict:
    """A pipeline stage whose pods ask what ``_tp(size, accelerator, 0, memory)``'s do."""
    return {"name": "pp", "type": "PipelineParallel", "gpusPerGroup": size,
            "gpuRequirements": {"minMemoryGB": memory, "acceleratorType": accelerator}}


def test_kueue_one_pod_template_is_one_podset_in_one_rack():
    """A job's tensor-parallel ranks and pipeline stages of the same pod are one PodSet
    (as a PyTorchJob's Worker replicas are): TAS keeps all four pods in one rack, as the
    job's DataParallel maxHopCount 1 asks. As two PodSets, BestFit put one on the two-node
    rack and the other on the four-node rack, 3 hops apart."""
    nodes = [_node(f"n{i}", "H100-80", {}) for i in range(6)]  # racks n0-n3 and n4-n5
    job = _job("tp-pp", "m", "normal", 2, [_tp(8, "H100", 0, 80), _pp(8), _dp(max_hops=1)])
    inst = instance(nodes, [job], 4)
    plan = BASELINES["kueue-tas-style"](inst)
    assert nodes_of(plan, "tp-pp") == ["n0", "n1", "n2", "n3"]
    checked(plan, inst)


def test_kueue_pods_of_different_templates_stay_separate_podsets():
    from hyperplace.baselines.kueue import podsets

    view = cluster_views(instance([_node(f"n{i}", "H100-80", {}) for i in range(4)], [], 2))[0]
    same = _job("a", "m", "normal", 2, [_tp(8, "H100", 0, 80), _pp(8), _dp(max_hops=1)])
    # an NVLink floor is no part of a pod spec: still one template
    floor = _job("f", "m", "normal", 2, [_tp(8, "H100", 300, 80), _pp(8), _dp(max_hops=1)])
    other = _job("b", "m", "normal", 2, [_tp(8, "H100", 0, 80), _pp(4), _dp(max_hops=1)])
    assert [len(ps) for ps in podsets(same.units(), view)] == [4]
    assert [len(ps) for ps in podsets(floor.units(), view)] == [4]
    assert [[u.group for u in ps] for ps in podsets(other.units(), view)] == [
        ["tp", "tp"], ["pp", "pp"]]
