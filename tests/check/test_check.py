"""The checker catches each kind of violation on a small hand-built instance.

The instance: cluster ``lab`` with four H100 nodes on two leaves (h0, h1 | h2, h3; h0 has
GPU 0 held by a running job and GPU 1 faulty) and one DGX-1 V100 node (v0, its own leaf);
cluster ``remote`` with one H100 node. A valid plan is built by hand, then broken one rule
at a time.
"""

from __future__ import annotations

from collections import Counter

import pytest

from hyperplace.check import Violation, check, format_violations
from hyperplace.models import Cluster, Instance, Node, TrainingJob
from hyperplace.models.cluster import FabricGenerator, FabricSpec
from hyperplace.models.instance import InstanceSpec
from hyperplace.models.job import ObjectMeta
from hyperplace.models.plan import GPURef, JobSummary, PendingJob, PlacementPlan, UnitPlacement


def job(name: str, priority: str, replicas: int, groups: list[dict]) -> TrainingJob:
    return TrainingJob.model_validate({"metadata": {"name": name}, "spec": {
        "model": "m", "replicaCount": replicas, "priority": priority, "resourceGroups": groups}})


def tp(size: int, accel: str, nvlink: float) -> dict:
    return {"name": "tp", "type": "TensorParallel", "gpusPerGroup": size,
            "gpuRequirements": {"acceleratorType": accel, "minNVLinkBandwidthGbpsPerPair": nvlink}}


def dp(max_hops: int | None = None, accel: str | None = None) -> dict:
    g: dict = {"name": "dp", "type": "DataParallel", "gpusPerGroup": 1}
    if max_hops is not None:
        g["interNodeConnectivity"] = {"maxHopCount": max_hops}
    if accel:
        g["gpuRequirements"] = {"acceleratorType": accel}
    return g


@pytest.fixture(scope="module")
def instance() -> Instance:
    h = [Node(name="h0", gpu_type="H100-80", gpu_count=8, allocated={0: "running"}, faulty=[1]),
         *(Node(name=f"h{i}", gpu_type="H100-80", gpu_count=8) for i in (1, 2, 3)),
         Node(name="v0", gpu_type="V100-32", gpu_count=8, nvlink="hybrid_cube_mesh")]
    lab = Cluster(name="lab", nodes=h, fabric=FabricSpec(
        generator=FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2)))
    remote = Cluster(name="remote", nodes=[Node(name="r0", gpu_type="H100-80", gpu_count=8)],
                     fabric=FabricSpec(generator=FabricGenerator(type="fat-tree-2")))
    jobs = [
        job("tp8", "high", 1, [tp(8, "H100", 900), dp()]),
        job("dp2x4", "normal", 2, [tp(4, "H100", 900), dp(max_hops=1)]),
        job("clique4", "normal", 1, [tp(4, "V100", 50), dp()]),
        job("small", "low", 2, [dp(accel="H100")]),
        job("pp16", "low", 1, [{"name": "pp", "type": "PipelineParallel", "gpusPerGroup": 16,
                                "gpuRequirements": {"acceleratorType": "H100"},
                                "interNodeConnectivity": {"maxHopCount": 1}}]),
    ]
    return Instance(metadata=ObjectMeta(name="lab"),
                    spec=InstanceSpec(clusters=[lab, remote], jobs=jobs))


VALID = {
    "tp8": {"tp/0": [("h1", i) for i in range(8)]},
    "dp2x4": {"tp/0": [("h2", i) for i in range(4)], "tp/1": [("h3", i) for i in range(4)]},
    "clique4": {"tp/0": [("v0", i) for i in range(4)]},
    "small": {"dp/0": [("h0", 2)], "dp/1": [("h0", 3)]},
}


def make_plan(instance: Instance, placed: dict[str, dict[str, list[tuple[str, int]]]],
              reasons: dict[str, list[str]] | None = None) -> PlacementPlan:
    """A plan with a consistent jobs[] summary; jobs not placed are pending with a reason."""
    nodes = instance.node_index
    jobs = {j.name: j for j in instance.jobs}
    placements, summaries = [], []
    for name, units in placed.items():
        refs = []
        for unit, gpus in units.items():
            placements.append(UnitPlacement(job=name, unit=unit,
                                            gpus=[GPURef(node=n, gpu=g) for n, g in gpus]))
            refs += gpus
        types = Counter(instance.catalog.get(nodes[n][1].gpu_type).name for n, _ in refs if n in nodes)
        summaries.append(JobSummary(job=name, priority=jobs[name].priority if name in jobs else 1,
                                    gpus=len(refs), gpu_types=dict(types),
                                    node_names=sorted({n for n, _ in refs})))
    reasons = reasons or {}
    pending = [PendingJob(job=j.name, reasons=reasons.get(j.name, ["does not fit"]))
               for j in instance.jobs if j.name not in placed]
    return PlacementPlan(status="feasible", solver="hand", placements=placements,
                         jobs=summaries, pending=pending)


def codes(violations: list[Violation]) -> set[str]:
    return {v.code for v in violations}


def with_units(**changes: dict) -> dict:
    out = {k: dict(v) for k, v in VALID.items()}
    for name, units in changes.items():
        if units is None:
            out.pop(name)
        else:
            out[name] = units
    return out


def test_valid_plan_has_no_violations(instance):
    violations = check(make_plan(instance, VALID), instance)
    assert violations == [], format_violations(violations)
    assert format_violations([]) == "OK: no violations"


@pytest.mark.parametrize("small_units, code", [
    ({"dp/0": [("h0", 2)], "dp/1": [("h0", 2)]}, "gpu-reused"),
    ({"dp/0": [("h0", 1)], "dp/1": [("h0", 3)]}, "gpu-faulty"),
    ({"dp/0": [("h0", 0)], "dp/1": [("h0", 3)]}, "gpu-allocated"),
    ({"dp/0": [("nowhere", 0)], "dp/1": [("h0", 3)]}, "unknown-node"),
    ({"dp/0": [("h0", 9)], "dp/1": [("h0", 3)]}, "unknown-gpu"),
    ({"dp/0": [("h0", 2), ("h0", 4)], "dp/1": [("h0", 3)]}, "unit-size"),
    ({"dp/0": [("h0", 2)]}, "partial-gang"),
    ({"dp/0": [("h0", 2)], "dp/1": [("h0", 3)], "dp/9": [("h0", 4)]}, "unknown-unit"),
    ({"dp/0": [("h0", 2)], "dp/1": [("v0", 5)]}, "gpu-type"),
    ({"dp/0": [("h0", 2)], "dp/1": [("r0", 0)]}, "cross-cluster-job"),
])
def test_gpu_and_gang_violations(instance, small_units, code):
    violations = check(make_plan(instance, with_units(small=small_units)), instance)
    assert code in codes(violations), format_violations(violations)


def test_gpu_used_by_two_jobs(instance):
    plan = make_plan(instance, with_units(small={"dp/0": [("h1", 0)], "dp/1": [("h0", 3)]}))
    assert "gpu-reused" in codes(check(plan, instance))


def test_tp_unit_across_nodes_breaks_nvlink(instance):
    split = {"tp/0": [("h2", i) for i in range(4, 8)] + [("h3", i) for i in range(4, 8)]}
    violations = check(make_plan(instance, with_units(tp8=split)), instance)
    assert "nvlink-split" in codes(violations)


def test_non_clique_on_dgx1_node(instance):
    # GPUs 2,3,4,5 of a DGX-1: 2-4, 2-5, 3-4, 3-5 have no NVLink (PCIe only)
    violations = check(make_plan(instance, with_units(clique4={"tp/0": [("v0", i) for i in (2, 3, 4, 5)]})),
                       instance)
    assert codes(violations) == {"nvlink-bandwidth"}, format_violations(violations)
    # an island of the hybrid cube mesh is fine
    island = with_units(clique4={"tp/0": [("v0", i) for i in (4, 5, 6, 7)]})
    assert check(make_plan(instance, island), instance) == []


def test_hop_count_between_replicas_exceeded(instance):
    # h1 (leaf 0) and h2 (leaf 1) are 3 hops apart; the job allows 1
    far = {"tp/0": [("h1", i) for i in range(4)], "tp/1": [("h2", i) for i in range(4)]}
    placed = with_units(dp2x4=far, tp8={"tp/0": [("h3", i) for i in range(8)]})
    assert "replica-hop-count" in codes(check(make_plan(instance, placed), instance))


def test_hop_count_within_unit_exceeded(instance):
    # a 16-GPU pipeline unit limited to one leaf, spread over h1 (leaf 0) and h2 (leaf 1)
    placed = with_units(tp8={"tp/0": [("h3", i) for i in range(8)]}, dp2x4=None,
                        pp16={"pp/0": [("h1", i) for i in range(8)] + [("h2", i) for i in range(8)]})
    violations = check(make_plan(instance, placed), instance)
    # and dp2x4 (normal) was left out although it fits where low-priority pp16 and small sit
    assert codes(violations) == {"hop-count", "priority-inversion"}, format_violations(violations)


def test_pending_job_needs_a_reason(instance):
    plan = make_plan(instance, with_units(small=None), reasons={"small": []})
    assert codes(check(plan, instance)) == {"pending-no-reason"}


def test_job_neither_admitted_nor_pending(instance):
    plan = make_plan(instance, VALID)
    plan = plan.model_copy(update={"pending": [p for p in plan.pending if p.job != "pp16"]})
    assert codes(check(plan, instance)) == {"job-missing"}


def test_summary_must_match_placements(instance):
    plan = make_plan(instance, VALID)
    bad = [s.model_copy(update={"gpus": s.gpus + 1}) if s.job == "tp8" else s for s in plan.jobs]
    assert codes(check(plan.model_copy(update={"jobs": bad}), instance)) == {"summary-gpus"}
    missing = [s for s in plan.jobs if s.job != "tp8"]
    assert codes(check(plan.model_copy(update={"jobs": missing}), instance)) == {"summary-missing"}


def test_priority_inversion_when_low_priority_work_holds_its_gpus(instance):
    # tp8 (high) pending while low-priority 'small' holds h1, h2, h3 and r0 are free anyway
    inverted = with_units(tp8=None, small={"dp/0": [("h1", 0)], "dp/1": [("h1", 1)]})
    violations = check(make_plan(instance, inverted), instance)
    assert codes(violations) == {"priority-inversion"}, format_violations(violations)


def test_priority_rule_respects_higher_priority_holders():
    """One node: a critical 1-GPU job blocks a high TP8 job; a low one must not."""
    node = Node(name="n0", gpu_type="H100-80", gpu_count=8)
    cluster = Cluster(name="c", nodes=[node])
    jobs = [job("top", "high", 1, [tp(8, "H100", 900), dp()]),
            job("guard", "critical", 1, [dp(accel="H100")]),
            job("filler", "low", 1, [dp(accel="H100")])]
    inst = Instance(metadata=ObjectMeta(name="one"), spec=InstanceSpec(clusters=[cluster], jobs=jobs))
    guarded = make_plan(inst, {"guard": {"dp/0": [("n0", 0)]}, "filler": {"dp/0": [("n0", 1)]}})
    assert check(guarded, inst) == []
    unguarded = make_plan(inst.with_jobs([jobs[0], jobs[2]]), {"filler": {"dp/0": [("n0", 0)]}})
    assert codes(check(unguarded, inst.with_jobs([jobs[0], jobs[2]]))) == {"priority-inversion"}


def test_priority_verdict_per_job_when_jobs_share_a_shape():
    """Pending jobs of one shape and priority each get their own verdict (the checker works
    out a fit once per priority, queue and shape); a job of the same shape at the holder's
    priority is not an inversion, one above it is."""
    nodes = [Node(name=f"n{i}", gpu_type="H100-80", gpu_count=8) for i in range(2)]
    cluster = Cluster(name="c", nodes=nodes)
    jobs = [job("top", "high", 1, [tp(8, "H100", 900), dp()]),
            job("top2", "high", 1, [tp(8, "H100", 900), dp()]),
            job("mid", "normal", 1, [tp(8, "H100", 900), dp()]),
            job("peer", "low", 1, [tp(8, "H100", 900), dp()]),
            job("guard", "critical", 1, [dp(accel="H100")]),
            job("filler", "low", 1, [dp(accel="H100")])]
    inst = Instance(metadata=ObjectMeta(name="two"), spec=InstanceSpec(clusters=[cluster], jobs=jobs))
    plan = make_plan(inst, {"guard": {"dp/0": [("n1", 0)]}, "filler": {"dp/0": [("n0", 0)]}})
    flagged = {v.job: v.message for v in check(plan, inst) if v.code == "priority-inversion"}
    assert set(flagged) == {"top", "top2", "mid"}
    assert "pending at priority 3" in flagged["top2"] and "pending at priority 2" in flagged["mid"]
    assert all("(filler)" in m and "tp/0: n0" in m for m in flagged.values())


def test_unknown_job_in_plan(instance):
    placed = with_units()
    placed["ghost"] = {"u": [("h0", 4)]}
    assert "unknown-job" in codes(check(make_plan(instance, placed), instance))
