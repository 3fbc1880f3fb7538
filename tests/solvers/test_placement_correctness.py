"""Correctness cases of the placement issue (#8) and misleading reasons (#10), on every backend.

Each builds the smallest round that failed before and asserts what a valid, optimal plan
must do; every plan also goes through the independent checker.
"""

from __future__ import annotations

import pytest
from placement_helpers import instance, job, node

from hyperplace.check import check
from hyperplace.models import NIC, TrainingJob
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.driver import solve_placement


def admitted(plan) -> set[str]:
    return {j.job for j in plan.jobs}


def _doc(j: TrainingJob) -> dict:
    return j.model_dump(by_alias=True, mode="json", exclude_none=True)


def _with(j: TrainingJob, **changes) -> TrainingJob:
    """A copy of ``j`` with spec-level and per-group changes applied."""
    doc = _doc(j)
    for key, value in changes.pop("spec", {}).items():
        doc["spec"][key] = value
    for group_type, req in changes.pop("groups", {}).items():
        for g in doc["spec"]["resourceGroups"]:
            if g["type"] == group_type:
                for section, values in req.items():
                    g.setdefault(section, {}).update(values)
    assert not changes
    return TrainingJob.model_validate(doc)


def _aux_job(name: str, dp_mem: float) -> TrainingJob:
    doc = _doc(job(name, tp=2, accel=None, nvlink=0, mem=0))
    doc["spec"]["resourceGroups"][1]["gpuRequirements"] = {"minMemoryGB": dp_mem}
    doc["spec"]["resourceGroups"].append({"name": "aux", "type": "Auxiliary", "gpusPerGroup": 1,
                                          "gpuRequirements": {"minMemoryGB": 0}})
    return TrainingJob.model_validate(doc)


def test_declared_nic_rate_limits_the_node(solver):
    # case 4: links are 400 Gb/s, but n0/n1 declare one 100 Gb/s NIC; the job needs 200
    # between replicas, so its two 8-GPU replicas must use n2 and n3
    slow = [NIC(name="mlx0", gbps=100)]
    nodes = [node("n0").model_copy(update={"nics": slow}), node("n1").model_copy(update={"nics": slow}),
             node("n2"), node("n3")]
    j = _with(job("ib200", tp=8, replicas=2), groups={"DataParallel": {
        "interNodeConnectivity": {"minInfiniBandBandwidthGbps": 200}}})
    inst = instance(nodes, [j], nodes_per_leaf=4)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert {g.node for p in plan.placements for g in p.gpus} == {"n2", "n3"}


def test_checker_sees_the_nic(solver):
    # the same job forced onto the slow nodes: the checker must object
    slow = [NIC(name="mlx0", gbps=100)]
    nodes = [node("n0").model_copy(update={"nics": slow}), node("n1").model_copy(update={"nics": slow})]
    j = _with(job("ib200", tp=8, replicas=2), groups={"DataParallel": {
        "interNodeConnectivity": {"minInfiniBandBandwidthGbps": 200}}})
    inst = instance(nodes, [j], nodes_per_leaf=2)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert plan.jobs == []  # nothing fast enough
    forced = solve_placement(instance([node("n0"), node("n1")], [j], nodes_per_leaf=2),
                             solver=solver, budget_s=10)
    assert "replica-ib-bandwidth" in {v.code for v in check(forced, inst)}


def test_data_parallel_memory_floor_holds_for_auxiliary_units(solver):
    # case 5: DP asks >= 80 GB; the Auxiliary unit must not get the 40 GB A100
    nodes = [node("small", "A100-40", gpus=1), node("big", "H100-80", gpus=4)]
    inst = instance(nodes, [_aux_job("j", dp_mem=80)], nodes_per_leaf=2)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert admitted(plan) == {"j"}
    assert {g.node for p in plan.placements for g in p.gpus} == {"big"}


def test_data_parallel_accelerator_type_and_nvlink_floor_hold_for_every_group(solver):
    # case 5: TP says H100, DP says A100: no GPU is both, so the job cannot run; with DP
    # asking NVLink >= 900 an A100 node (600) cannot host the TP unit either
    nodes = [node("h", "H100-80"), node("a", "A100-80")]
    both = _with(job("both", tp=8, accel="H100", nvlink=0),
                 groups={"DataParallel": {"gpuRequirements": {"acceleratorType": "A100"}}})
    fast = _with(job("fast", tp=8, accel="A100", nvlink=0),
                 groups={"DataParallel": {"gpuRequirements": {"minNVLinkBandwidthGbpsPerPair": 900}}})
    inst = instance(nodes, [both, fast], nodes_per_leaf=2)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert plan.jobs == []
    reasons = {p.job: " ".join(p.reasons) for p in plan.pending}
    assert "H100 and A100" in reasons["both"] and "none of that type" in reasons["both"]
    assert "900" in reasons["fast"]


def test_toleration_and_accelerator_type_intersect(solver):
    # case 6: acceleratorType any H100|A100, toleration a100: only A100 qualifies
    nodes = [node("h", "H100-80"), node("a", "A100-80")]
    j = _with(job("j", tp=8, accel="H100|A100", nvlink=0),
              spec={"tolerations": [{"key": "gpu-type", "operator": "Equal", "value": "a100"}]})
    inst = instance(nodes, [j], nodes_per_leaf=2)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert {g.node for p in plan.placements for g in p.gpus} == {"a"}


def test_unknown_type_is_explained_by_the_type(solver):
    # #10: not "the fastest node link is 0 Gb/s" (a known type the cluster lacks; a typo is refused by validation)
    j = _with(job("z", tp=8, replicas=2, accel="B200"), groups={"DataParallel": {
        "interNodeConnectivity": {"minInfiniBandBandwidthGbps": 200}}})
    plan = solve_placement(instance([node("n0"), node("n1")], [j]), solver=solver, budget_s=5)
    (reason,) = plan.pending[0].reasons
    assert "B200" in reason and "H100-80 x16" in reason and "Gb/s" not in reason


def test_impossible_memory_is_explained_by_the_memory(solver):
    j = _with(job("huge", tp=8, replicas=2, accel=None, mem=0), groups={
        "TensorParallel": {"gpuRequirements": {"minMemoryGB": 1e6}},
        "DataParallel": {"interNodeConnectivity": {"minInfiniBandBandwidthGbps": 200}}})
    plan = solve_placement(instance([node("n0"), node("n1")], [j]), solver=solver, budget_s=5)
    (reason,) = plan.pending[0].reasons
    assert "1e+06 GB" in reason and "80 GB on H100-80" in reason and "Gb/s" not in reason


def test_cluster_without_nodes_is_explained_by_the_nodes(solver):
    j = _with(job("j", tp=8, replicas=2), groups={"DataParallel": {
        "interNodeConnectivity": {"minInfiniBandBandwidthGbps": 200}}})
    plan = solve_placement(instance([], [j]), solver=solver, budget_s=5)
    assert plan.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE, SolveStatus.FALLBACK)
    (reason,) = plan.pending[0].reasons
    assert "no nodes" in reason and "Gb/s" not in reason


def test_all_admitted_means_objective_one_is_proven(solver):
    # case 7: every job admitted, whatever the backend (greedy, or greedy's plan after a
    # fallback under a tiny budget): bound = objective, gap 0 on objective 1 and jobs
    inst = instance([node(f"n{i}") for i in range(8)], [job(f"j{i}", tp=4) for i in range(6)])
    for budget in (0.01, 10):
        plan = solve_placement(inst, solver=solver, budget_s=budget)
        assert check(plan, inst) == []
        assert len(plan.jobs) == 6
        assert plan.bound == plan.objective and plan.gap == 0
        assert plan.objective_gaps["admitted_priority_demand"] == 0
        assert plan.objective_gaps["admitted_jobs"] == 0
        if budget == 10 and solver != "greedy":  # generous for 8 nodes: the proof comes
            assert plan.status == SolveStatus.OPTIMAL, plan.message
        if plan.status == SolveStatus.OPTIMAL:
            assert set(plan.objective_gaps.values()) == {0.0}


def test_bound_is_the_tighter_one_and_gaps_are_per_objective(exact_solver):
    # case 7: one free node, three 8-GPU jobs: only one fits, so the bound is one job's weight
    inst = instance([node("n0"), node("n1", allocated={i: "r" for i in range(8)})],
                    [job(f"j{i}", tp=8) for i in range(3)])
    plan = solve_placement(inst, solver=exact_solver, budget_s=10)
    assert plan.status == SolveStatus.OPTIMAL and plan.gap == 0
    assert set(plan.objective_gaps) == {"admitted_priority_demand", "admitted_jobs",
                                        "communication", "fragmentation", "policy"}
    greedy = solve_placement(inst, solver="greedy")
    assert greedy.bound == greedy.objective  # the demand bound: 8 free GPUs, one job


def _tampered(plan, **changes):
    return plan.model_copy(update=changes)


def test_check_verifies_what_a_plan_claims(solver):
    # case 8: objective and bound of 1e9 must not pass; neither a wrong gap or status
    inst = instance([node("n0")], [job("a", tp=4), job("b", tp=4), job("c", tp=8)])
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    codes = lambda p: {v.code for v in check(p, inst)}  # noqa: E731
    assert "claim-objective" in codes(_tampered(plan, objective=1e9, bound=1e9, gap=0.0))
    assert "claim-bound" in codes(_tampered(plan, bound=plan.objective - 1))
    assert "claim-gap" in codes(_tampered(plan, gap=0.5))
    assert "claim-status" in codes(_tampered(plan, status=SolveStatus.OPTIMAL,
                                             bound=plan.objective + 4, gap=4 / plan.objective))
    assert "claim-status" in codes(_tampered(plan, status=SolveStatus.INFEASIBLE))
    terms = {**plan.objective_terms, "admitted_jobs": 3.0}
    assert "claim-admitted-jobs" in codes(_tampered(plan, objective_terms=terms))


def test_unit_larger_than_a_node_on_dgx1_uses_nvlink_quads(solver):
    # case 2: 16-GPU TP with NVLink >= 50 on four DGX-1 nodes whose free GPUs are one quad
    # each: 4 x 4 is valid (every same-node pair NVLinked) and must be found
    busy = {g: "r" for g in (4, 5, 6, 7)}
    nodes = [node(f"d{i}", "V100-32", nvlink="hybrid_cube_mesh", allocated=busy) for i in range(4)]
    inst = instance(nodes, [job("tp16", tp=16, accel="V100", nvlink=50, mem=32)], nodes_per_leaf=4)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert admitted(plan) == {"tp16"}


def test_twelve_gpu_unit_on_three_four_gpu_nodes(solver):
    # case 3: 12 GPUs, no NVLink floor, one leaf of three 4-GPU nodes: 4 + 4 + 4 fits
    nodes = [node(f"s{i}", gpus=4) for i in range(3)] + [node("b", gpus=8, allocated={0: "r"})]
    j = job("dp12", tp=12, accel=None, nvlink=0, mem=40, group_type="DataParallel", dp_hop=1)
    inst = instance(nodes, [j], nodes_per_leaf=4)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert admitted(plan) == {"dp12"}


def test_dgx1_quads_outrank_a_lower_priority_job(solver):
    # case 2 as reported: the 16-GPU TP unit (NVLink >= 50, largest such clique on a DGX-1
    # is 4) must take one quad on each of four nodes rather than leave its place to the
    # priority-1 job, which then finds no whole free node
    half = {g: "r" for g in (4, 5, 6, 7)}
    nodes = [node("d0", "V100-32", nvlink="hybrid_cube_mesh", allocated=half)] + \
        [node(f"d{i}", "V100-32", nvlink="hybrid_cube_mesh") for i in range(1, 4)]
    low = job("low8", tp=8, accel="V100", nvlink=0, mem=32, tp_hop=0, priority=1)
    tp16 = job("tp16", tp=16, accel="V100", nvlink=50, mem=32)
    inst = instance(nodes, [low, tp16], nodes_per_leaf=4)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert "tp16" in admitted(plan)
    per_node = {}
    for g in (g for p in plan.placements if p.job == "tp16" for g in p.gpus):
        per_node[g.node] = per_node.get(g.node, 0) + 1
    assert sorted(per_node.values()) == [4, 4, 4, 4]


def test_unit_with_a_hop_limit_may_span_nodes_when_it_fits_one(solver):
    # the oracle's case: a 4-GPU unit without an NVLink floor on two nodes with 3 free GPUs
    # each. Its group declares maxHopCount 1, so it may be cut (3 + 1 or 2 + 2) on one leaf
    busy = {g: "r" for g in range(3, 8)}
    nodes = [node("a", allocated=busy), node("b", allocated=busy)]
    j = job("dp4", tp=4, accel=None, nvlink=0, mem=40, tp_hop=1)
    inst = instance(nodes, [j], nodes_per_leaf=2)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert admitted(plan) == {"dp4"}


def test_unit_without_a_hop_limit_stays_on_one_node(solver):
    # the same unit whose group says nothing about links between nodes stays on one node
    # (the README's rule): pending, with a reason that names the free set, and the checker
    # rejects the cut placement
    busy = {g: "r" for g in range(3, 8)}
    nodes = [node("a", allocated=busy), node("b", allocated=busy)]
    j = job("dp4", tp=4, accel=None, nvlink=0, mem=40)
    inst = instance(nodes, [j], nodes_per_leaf=2)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert plan.jobs == []
    (reason,) = plan.pending[0].reasons
    assert "largest such free set is 3 GPUs" in reason
    cut = j.model_copy(update={"spec": j.spec.model_copy(update={"resource_groups": [
        g.model_copy(update={"inter_node_connectivity": g.inter_node_connectivity.model_copy(
            update={"max_hop_count": 1})}) if g.type == "TensorParallel" else g
        for g in j.spec.resource_groups]})})
    cut_plan = solve_placement(instance(nodes, [cut], nodes_per_leaf=2), solver=solver, budget_s=10)
    assert {v.code for v in check(cut_plan, inst)} >= {"unit-split"}


def test_twelve_gpu_unit_reason_is_about_its_pieces(solver):
    # case 3's reason: with only 11 free GPUs on the leaf the unit cannot run; the reason
    # must not claim it needs 8 GPUs in one NVLink domain
    nodes = [node("s0", gpus=4), node("s1", gpus=4, allocated={0: "r"}), node("b", gpus=8, allocated={
        i: "r" for i in range(4)})]
    j = job("dp12", tp=12, accel=None, nvlink=0, mem=40, group_type="DataParallel")
    plan = solve_placement(instance(nodes, [j], nodes_per_leaf=4), solver=solver, budget_s=10)
    (reason,) = plan.pending[0].reasons
    assert "NVLink domain" not in reason and "12" in reason and "11 are free" in reason


def test_two_units_cut_on_mixed_nodes_each_within_its_own_leaf(solver):
    # two 12-GPU DataParallel-free TP units with maxHopCount 1 each (between replicas
    # anywhere): one leaf of 4 + 8 free and one leaf of 4 + 4 + 4 free; each unit's pieces
    # lie in one leaf, so it is 8 + 4 on the first and 4 + 4 + 4 on the second
    nodes = [node("a0", gpus=4), node("a1"), node("a2", allocated={i: "r" for i in range(8)}),
             node("b0", gpus=4), node("b1", gpus=4), node("b2", gpus=4)]
    j = job("tp12", tp=12, replicas=2, accel=None, nvlink=0, mem=40, tp_hop=1)
    inst = instance(nodes, [j], nodes_per_leaf=3)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert admitted(plan) == {"tp12"}


def test_checker_accepts_quads_and_rejects_a_piece_below_the_floor():
    # the independent checker on hand-made plans of the 16-GPU unit on four DGX-1 nodes
    from hyperplace.models.plan import GPURef, JobSummary, PlacementPlan, UnitPlacement

    nodes = [node(f"d{i}", "V100-32", nvlink="hybrid_cube_mesh") for i in range(4)]
    tp16 = job("tp16", tp=16, accel="V100", nvlink=50, mem=32)
    inst = instance(nodes, [tp16], nodes_per_leaf=4)

    def plan_of(gpus):
        refs = [GPURef(node=n, gpu=g) for n, g in gpus]
        return PlacementPlan(status=SolveStatus.FEASIBLE, solver="hand", placements=[
            UnitPlacement(job="tp16", unit="tp/0", gpus=refs)], jobs=[JobSummary(
                job="tp16", priority=tp16.priority, gpus=16, gpu_types={"V100-32": 16},
                node_names=sorted({n for n, _ in gpus}))])

    quads = [(f"d{i}", g) for i in range(4) for g in (0, 1, 2, 3)]
    assert check(plan_of(quads), inst) == []
    uneven = [(f"d{i}", g) for i in range(2) for g in (0, 1, 2, 3)] + \
        [("d2", g) for g in (0, 1, 2, 3, 4, 5)] + [("d3", g) for g in (0, 1)]
    assert "nvlink-bandwidth" in {v.code for v in check(plan_of(uneven), inst)}


def test_a_cut_unit_may_use_the_gpus_of_a_preempted_job(solver):
    # three 4-GPU nodes, one held by a low-priority running job: the high-priority 12-GPU
    # unit (no NVLink floor, cut 4 + 4 + 4) is admitted only by stopping it
    from hyperplace.models.instance import RunningJob
    from hyperplace.solvers.workflows.preemption import solve_with_preemption

    nodes = [node("s0", gpus=4, allocated={g: "r" for g in range(4)}), node("s1", gpus=4),
             node("s2", gpus=4)]
    j = job("dp12", tp=12, accel=None, nvlink=0, mem=40, group_type="DataParallel",
            priority="high")
    inst = instance(nodes, [j], nodes_per_leaf=4)
    inst = inst.model_copy(update={"spec": inst.spec.model_copy(update={
        "running_jobs": [RunningJob(name="r", priority=1, checkpoint_age_s=10)]})})
    plan = solve_with_preemption(inst, preemption="lower-priority", solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert admitted(plan) == {"dp12"} and [p.job for p in plan.preemptions] == ["r"]


def test_many_units_are_cut_by_patterns_on_partly_used_nodes(solver):
    # six 16-GPU TP units (NVLink >= 900: H100 NVSwitch nodes) where every node has 4 free
    # GPUs: more units than get variables of their own, so the class is pooled and each
    # unit takes the 4 x 4 pattern; one leaf per unit (maxHopCount 1)
    busy = {g: "r" for g in range(4)}
    nodes = [node(f"n{i}", allocated=busy) for i in range(24)]
    j = job("tp16x6", tp=16, replicas=6, tp_hop=1)
    inst = instance(nodes, [j], nodes_per_leaf=4)
    plan = solve_placement(inst, solver=solver, budget_s=20)
    assert check(plan, inst) == []
    assert admitted(plan) == {"tp16x6"}


def test_many_twelve_gpu_units_on_four_gpu_nodes(solver):
    # case 3 with six replicas: 4 + 4 + 4 per unit on 18 nodes of 4 GPUs
    nodes = [node(f"s{i}", gpus=4) for i in range(18)]
    j = job("dp12x6", tp=12, replicas=6, accel=None, nvlink=0, mem=40, group_type="DataParallel")
    inst = instance(nodes, [j], nodes_per_leaf=6)
    plan = solve_placement(inst, solver=solver, budget_s=20)
    assert check(plan, inst) == []
    assert admitted(plan) == {"dp12x6"}


@pytest.mark.parametrize("case", [test_unit_larger_than_a_node_on_dgx1_uses_nvlink_quads,
                                  test_twelve_gpu_unit_on_three_four_gpu_nodes,
                                  test_dgx1_quads_outrank_a_lower_priority_job])
def test_cases_two_and_three_with_auto(case):
    # the conftest's backends are greedy, cpsat and milp; auto (greedy, then an exact
    # backend from its plan) must give the same answers
    case("auto")


def test_cut_units_with_their_own_hop_limit_on_a_line_of_leaves(solver):
    # four leaves in a line (not a tree: a node's hop-2 domains overlap); two 12-GPU units
    # with maxHopCount 2 each go on two neighbouring nodes. Even with every cut class asked
    # to pool its units, on such a fabric they get variables per unit (pooled counts need
    # one domain per node), so the plan is found and valid
    from placement_helpers import line_instance

    from hyperplace.formulations.placement import ModelParams
    from hyperplace.solvers.params import SolveParams

    j = job("u", tp=12, replicas=2, accel=None, nvlink=0, mem=40, tp_hop=2)
    inst = line_instance([j], dual_homed=False)
    params = SolveParams(model=ModelParams(flexible_max_units=0))
    plan = solve_placement(inst, solver=solver, budget_s=10, params=params)
    assert check(plan, inst) == []
    assert admitted(plan) == {"u"}


def test_many_units_on_dgx1_say_why_they_are_not_cut_there(solver):
    # six 16-GPU units at NVLink >= 50 on DGX-1 nodes: a pooled class cannot share a
    # hybrid-cube-mesh node between pieces of a unit, and the reason says so
    nodes = [node(f"d{i}", "V100-32", nvlink="hybrid_cube_mesh") for i in range(12)]
    j = job("tp16x6", tp=16, replicas=6, accel="V100", nvlink=50, mem=32)
    plan = solve_placement(instance(nodes, [j], nodes_per_leaf=4), solver=solver, budget_s=10)
    (reason,) = plan.pending[0].reasons
    assert "shared patterns" in reason and "4 units or fewer" in reason


def test_a_restricted_model_never_claims_optimal(exact_solver):
    # pooled cut patterns and a capped GPU-set enumeration each make the model see fewer
    # placements than the rules allow: the plan stays valid, but its status is not
    # `optimal`, its message names the restriction, and its bound ignores the restriction
    from hyperplace.formulations.placement import ModelParams
    from hyperplace.solvers.driver import demand_bound
    from hyperplace.solvers.params import SolveParams
    from hyperplace.formulations.placement.problem import PlacementProblem

    nodes = [node(f"s{i}", gpus=4) for i in range(18)]
    j = job("dp12x6", tp=12, replicas=6, accel=None, nvlink=0, mem=40, group_type="DataParallel")
    inst = instance(nodes, [j], nodes_per_leaf=6)
    plan = solve_placement(inst, solver=exact_solver, budget_s=20)
    assert check(plan, inst) == []
    assert plan.status != "optimal" and "cut patterns" in plan.message
    assert plan.bound == pytest.approx(demand_bound(PlacementProblem(inst)))

    dgx = [node(f"d{i}", "V100-32", nvlink="hybrid_cube_mesh") for i in range(2)]
    small = job("tp4", tp=4, accel="V100", nvlink=50, mem=32)
    inst = instance(dgx, [small], nodes_per_leaf=2)
    capped = SolveParams(model=ModelParams(max_clique_enum=1))
    plan = solve_placement(inst, solver=exact_solver, budget_s=10, params=capped)
    assert check(plan, inst) == []
    assert plan.status != "optimal" and "enumerated up to 1" in plan.message
    plain = solve_placement(inst, solver=exact_solver, budget_s=10)
    assert plain.status == "optimal" and "restricted" not in plain.message
