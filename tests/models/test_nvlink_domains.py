"""Multi-node NVLink domains (#24): GB200 NVL72 racks under leaf/spine, alone and beside
HGX nodes. Every plan goes through the independent checker, on every backend."""

from __future__ import annotations

from hyperplace.check import check
from hyperplace.instances.nvl72 import rack_cluster, rack_domain, rack_nodes
from hyperplace.models import Instance, InstanceSpec
from hyperplace.models.job import ObjectMeta
from hyperplace.solvers.driver import solve_placement
from placement_helpers import job, node


def _inst(cluster, jobs, *types):
    return Instance(metadata=ObjectMeta(name="nvl"), spec=InstanceSpec(
        clusters=[cluster], jobs=jobs))


def _gb_job(name, gpus, *, replicas=1, group_type="TensorParallel", nvlink=1800.0, **kw):
    return job(name, tp=gpus, replicas=replicas, accel="GB200", nvlink=nvlink, mem=180,
               group_type=group_type, **kw)


def _racks(busy: dict[str, int] | None = None, count: int = 2):
    """Racks r00.. of 18 trays; ``busy[rack]`` whole trays held (from tray 0)."""
    busy = busy or {}
    out = {}
    for r in range(count):
        name = f"r{r:02d}"
        held = {i: {g: f"run-{name}" for g in range(4)} for i in range(busy.get(name, 0))}
        out[name] = rack_nodes(name, allocated=held)
    return out


def _domains_used(plan, inst):
    net = inst.clusters[0].network
    out = {}
    for p in plan.placements:
        out[p.unit] = out[(p.job, p.unit)] = {
            net.nvlink_domain_of(g.node).name if net.nvlink_domain_of(g.node) else g.node
            for g in p.gpus}
    return out


def test_a_16_gpu_tp_group_spans_four_trays_of_one_rack(solver):
    # one tray free per rack but four in r01: the 16-GPU TP group needs one NVLink domain
    racks = _racks({"r00": 15, "r01": 14})
    inst = _inst(rack_cluster("gb", racks), [_gb_job("tp16", 16)])
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert plan.admitted == ["tp16"] and check(plan, inst) == []
    (unit,) = plan.placements
    assert _domains_used(plan, inst)[unit.unit] == {"r01"}
    assert len({g.node for g in unit.gpus}) == 4


def test_a_64_gpu_ep_group_is_refused_a_rack_with_48_free(solver):
    # r00 has 48 free GPUs (12 trays), r01 64 (16 trays): the EP group goes to r01
    racks = _racks({"r00": 6, "r01": 2})
    inst = _inst(rack_cluster("gb", racks), [_gb_job("ep64", 64, group_type="ExpertParallel")])
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert plan.admitted == ["ep64"] and check(plan, inst) == []
    assert _domains_used(plan, inst)[plan.placements[0].unit] == {"r01"}
    # with r01 busy too, it waits, and says which domain came closest
    racks = _racks({"r00": 6, "r01": 7})
    inst = _inst(rack_cluster("gb", racks), [_gb_job("ep64", 64, group_type="ExpertParallel")])
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert plan.admitted == [] and check(plan, inst) == []
    (why,) = plan.pending
    assert any("64 GPUs in one NVLink domain" in r and "48" in r and "r00" in r
               for r in why.reasons), why.reasons


def test_a_group_larger_than_any_rack_cannot_run_and_says_why(solver):
    inst = _inst(rack_cluster("gb", _racks()), [_gb_job("tp128", 128)])
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert plan.admitted == [] and check(plan, inst) == []
    assert any("128 GPUs in one NVLink domain" in r and "72" in r
               for r in plan.pending[0].reasons), plan.pending[0].reasons


def test_trays_of_one_rack_are_zero_hops_apart(solver):
    # maxHopCount 0 on the TP group: one node, or one NVLink domain (its own switch layer)
    inst = _inst(rack_cluster("gb", _racks({"r00": 16})), [_gb_job("hop0", 32, tp_hop=0)])
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert plan.admitted == ["hop0"] and check(plan, inst) == []
    assert _domains_used(plan, inst)[plan.placements[0].unit] == {"r01"}


def test_a_mixed_h100_and_nvl72_cluster(solver):
    hgx = [node(f"h{i:02d}") for i in range(4)]
    racks = _racks({"r00": 10})
    cluster = rack_cluster("mixed", racks, hgx=hgx, hgx_per_leaf=2)
    jobs = [job("h100-tp16", tp=16, accel="H100"),            # two HGX nodes over IB
            _gb_job("gb-tp32", 32),                           # eight trays of one rack
            _gb_job("gb-dp", 4, replicas=6, group_type="TensorParallel")]
    inst = _inst(cluster, jobs)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert set(plan.admitted) == {"h100-tp16", "gb-tp32", "gb-dp"}, plan.pending
    assert check(plan, inst) == []
    used = _domains_used(plan, inst)
    assert len(used[("gb-tp32", "tp/0")]) == 1  # one rack
    assert used[("h100-tp16", "tp/0")] <= {"h00", "h01", "h02", "h03"}
    assert len(used[("h100-tp16", "tp/0")]) == 2  # two HGX nodes over the fabric



def _sliced(name, pods, k, *, pod_gpus=4):
    j = job(name, tp=pod_gpus, replicas=1, accel="GB200", nvlink=0, mem=180,
            group_type="DataParallel")
    spec = j.spec.model_copy(update={"replica_count": pods})
    meta = j.metadata.model_copy(update={"annotations": {
        "kueue.x-k8s.io/podset-slice-size": str(k),
        "kueue.x-k8s.io/podset-slice-required-topology": "nvidia.com/gpu.clique"}})
    return j.model_copy(update={"spec": spec, "metadata": meta})


def test_slices_of_four_trays_each_stay_in_one_rack(solver):
    # 8 pods of one tray in slices of 4 trays; r00 has 6 free trays, r01 6: one slice each
    # (no rack has the 8 free trays that one slice-less gang in one rack would need)
    racks = _racks({"r00": 12, "r01": 12})
    domains = [rack_domain(r, t, spare_trays=2) for r, t in racks.items()]
    inst = _inst(rack_cluster("gb", racks, domains=domains), [_sliced("sliced", 8, 4)])
    units = [u.name for u in inst.jobs[0].units()]
    assert units == ["tp/slice0", "tp/slice1"]
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert plan.admitted == ["sliced"] and check(plan, inst) == []
    used = _domains_used(plan, inst)
    assert used["tp/slice0"] != used["tp/slice1"]
    for p in plan.placements:
        assert len(used[p.unit]) == 1
        per_node = {}
        for g in p.gpus:
            per_node[g.node] = per_node.get(g.node, 0) + 1
        assert sorted(per_node.values()) == [4, 4, 4, 4]  # whole trays


def test_the_checker_refuses_a_slice_across_racks():
    from hyperplace.models.plan import GPURef, UnitPlacement

    racks = _racks()
    inst = _inst(rack_cluster("gb", racks), [_sliced("s", 2, 2)])
    trays = ["r00-t00", "r01-t00"]
    plan = solve_placement(inst, solver="greedy", budget_s=5)
    assert check(plan, inst) == []
    bad = plan.model_copy(update={"placements": [UnitPlacement(
        job="s", unit="tp/slice0",
        gpus=[GPURef(node=n, gpu=g) for n in trays for g in range(4)])]})
    codes = {v.code for v in check(bad, inst)}
    assert "nvlink-domain" in codes
    # pods whole: 2 + 2 + 4 GPUs on three trays of one rack is not two pods of a tray
    gpus = [("r00-t00", 0), ("r00-t00", 1), ("r00-t01", 0), ("r00-t01", 1)]
    cut = plan.model_copy(update={"placements": [UnitPlacement(
        job="s", unit="tp/slice0", gpus=[GPURef(node=n, gpu=g) for n, g in gpus * 2][:4] +
        [GPURef(node="r00-t02", gpu=g) for g in range(4)])]})
    assert "slice-shape" in {v.code for v in check(cut, inst)}


def test_a_slice_that_does_not_divide_the_rack_is_bad_input(tmp_path, capsys):
    import yaml

    from cli_run import run_main

    inst = _inst(rack_cluster("gb", _racks()), [_sliced("s", 4, 2)])
    doc = inst.to_doc()
    doc["spec"]["jobs"][0]["metadata"]["annotations"]["kueue.x-k8s.io/podset-slice-size"] = "4"
    doc["spec"]["jobs"][0]["spec"]["replicaCount"] = 8
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert run_main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "podset-slice-size" in err[0] and "does not divide" in err[0]


def test_a_failed_tray_is_repaired_inside_its_rack_with_a_spare(solver):
    from hyperplace.models.instance import RunningJob
    from hyperplace.solvers.workflows.repair import repair, repair_instance

    # "train" (TP 16 with an NVLink floor) on r00-t00..t03; r00 keeps one whole free tray
    # (t17), every other tray of r00 busy; r01 is free
    held = {i: {g: "train" for g in range(4)} for i in range(4)}
    held.update({i: {g: "other" for g in range(4)} for i in range(4, 17)})
    racks = {"r00": rack_nodes("r00", allocated=held), "r01": rack_nodes("r01")}
    inst = _inst(rack_cluster("gb", racks), [])
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name="train", checkpoint_age_s=60, job=_gb_job("train", 16)),
        RunningJob(name="other")]})
    inst = inst.model_copy(update={"spec": spec})
    failed = [("r00-t02", None)]
    result = repair(inst, failed, solver=solver)
    assert check(result.plan, repair_instance(inst, failed)) == []
    (r,) = result.jobs
    assert r.placed and r.gpus_moved == 4  # the spare tray replaces the failed one
    nodes = {g.node for p in result.plan.placements for g in p.gpus}
    assert nodes == {"r00-t00", "r00-t01", "r00-t03", "r00-t17"}


def test_hot_spares_are_kept_per_rack(solver):
    # --hot-spares 1: every rack keeps one whole free tray; 17 free trays in r00, 2 in r01
    racks = _racks({"r00": 1, "r01": 16})
    inst = _inst(rack_cluster("gb", racks), [_gb_job("tp64", 64), _gb_job("tp8", 8)])
    plan = solve_placement(inst, solver=solver, budget_s=10, hot_spares=1)
    assert check(plan, inst) == []
    assert plan.admitted == ["tp64"]  # tp8 would take r01's last two trays, or r00's spare
    (why,) = plan.pending
    assert any("hot-spare rule: rack r01 keeps 1 whole free tray" in r
               for r in why.reasons), why.reasons


def test_small_jobs_fill_a_started_rack_and_keep_whole_racks_free(solver):
    # r00 has one busy tray; r01 is whole: the four one-tray jobs go to r00, so that the
    # 72-GPU job that follows still finds a whole rack
    racks = _racks({"r00": 1})
    jobs = [_gb_job(f"small{i}", 4) for i in range(4)] + [_gb_job("rack", 72, priority="low")]
    inst = _inst(rack_cluster("gb", racks), jobs)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert set(plan.admitted) == {"small0", "small1", "small2", "small3", "rack"}
    assert check(plan, inst) == []
    used = _domains_used(plan, inst)
    assert all(used[(f"small{i}", "tp/0")] == {"r00"} for i in range(4))
    # the same small jobs alone also leave r01 whole
    alone = _inst(rack_cluster("gb", _racks({"r00": 1})), jobs[:4])
    plan = solve_placement(alone, solver=solver, budget_s=10)
    assert check(plan, alone) == [] and len(plan.admitted) == 4
    assert all(d == {"r00"} for k, d in _domains_used(plan, alone).items() if isinstance(k, tuple))


def test_spare_trays_a_rack_declares_are_kept(solver):
    from hyperplace.models.plan import GPURef, UnitPlacement

    # each rack keeps 2 whole free trays (spareTrays, the "16 of 18" practice): a 72-GPU
    # group no longer fits a rack, a 64-GPU one does
    racks = _racks()
    domains = [rack_domain(r, t, spare_trays=2) for r, t in racks.items()]
    inst = _inst(rack_cluster("gb", racks, domains=domains),
                 [_gb_job("tp72", 72), _gb_job("tp64", 64), _gb_job("tp64b", 64)])
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert set(plan.admitted) == {"tp64", "tp64b"}
    (why,) = plan.pending
    assert any("72 GPUs in one NVLink domain" in r and "64" in r for r in why.reasons), why
    # a plan that takes a spare tray breaks the rule
    taken = {g.node for p in plan.placements for g in p.gpus}
    spare = next(n.name for n in racks["r00"] if n.name not in taken)
    extra = UnitPlacement(job="tp72", unit="tp/0", gpus=[GPURef(node=spare, gpu=g)
                                                          for g in range(4)])
    bad = plan.model_copy(update={"placements": [*plan.placements, extra]})
    assert "hot-spares" in {v.code for v in check(bad, inst)}


def test_nvlink_domain_bad_input_is_one_line(tmp_path, capsys):
    import yaml

    from cli_run import run_main

    cluster = rack_cluster("gb", _racks(count=1))
    base = _inst(cluster, []).to_doc()
    fab = base["spec"]["clusters"][0]["fabric"]

    def bad(edit, field):
        doc = yaml.safe_load(yaml.safe_dump(base))
        edit(doc["spec"]["clusters"][0])
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(doc))
        assert run_main(["validate", str(path)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and field in err[0], err
        return err[0]

    assert fab["nvlinkDomains"][0]["nodes"][0] == "r00-t00"
    bad(lambda c: c["fabric"]["nvlinkDomains"][0]["nodes"].append("r00-t00"),
        "nvlinkDomains[0].nodes[18]")
    bad(lambda c: c["fabric"]["nvlinkDomains"].append({"name": "again", "nodes": ["r00-t05"]}),
        "nvlinkDomains[1].nodes[0]")
    for figure in (-1, float("inf"), float("nan")):
        bad(lambda c, x=figure: c["fabric"]["nvlinkDomains"][0].update(
            gigabytesPerSecondPerGpu=x), "gigabytesPerSecondPerGpu")
    bad(lambda c: c["fabric"]["nvlinkDomains"][0].update(partitionTrays=4), "partitionTrays")
    msg = bad(lambda c: c["nodes"][3].update(gpuCount=8), "nodes[3].gpuCount")
    assert "4 GPUs" in msg


def test_kai_segments_read_as_slices(solver):
    # KAI-Scheduler's segment annotations mean the same: 6 one-tray pods in segments of 3
    j = _sliced("kai", 6, 3)
    meta = j.metadata.model_copy(update={"annotations": {
        "kai.scheduler/segment-size": "3",
        "kai.scheduler/segment-topology-required-placement": "nvidia.com/gpu.clique"}})
    j = j.model_copy(update={"metadata": meta})
    racks = _racks({"r00": 15, "r01": 15})
    inst = _inst(rack_cluster("gb", racks), [j])
    assert [u.name for u in inst.jobs[0].units()] == ["tp/slice0", "tp/slice1"]
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert plan.admitted == ["kai"] and check(plan, inst) == []
    used = _domains_used(plan, inst)
    assert {frozenset(used[("kai", f"tp/slice{i}")]) for i in range(2)} == \
        {frozenset({"r00"}), frozenset({"r01"})}
