"""Every backend against a brute-force optimum on tiny rounds (see ``placement_oracle``).

An exact backend that says ``optimal`` must reach the oracle's objective 1 and its
tie-breaker; every plan's objective is at most the oracle's and its bound at least.
"""

from __future__ import annotations

import os

import pytest

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_helpers import instance, job, node
from placement_oracle import Oracle

from hyperplace.check import check
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.driver import solve_placement

EXAMPLES = int(os.environ.get("HP_ORACLE_EXAMPLES", "12"))


@pytest.fixture(scope="module")
def solvers(request) -> list[str]:
    """The backends chosen with ``--solvers``, and ``auto``."""
    chosen = [s for s in request.config.getoption("solvers").split(",") if s]
    return chosen + (["auto"] if "auto" not in chosen else [])


def _compare(inst, solver: str, best: tuple[int, int] | None = None) -> None:
    best_weighted, best_jobs = best or Oracle(inst).best()
    # a generous budget for these tiny rounds: an exact backend must prove its plan, so the
    # strong check below runs whatever the machine's load (greedy proves only sometimes)
    plan = solve_placement(inst, solver=solver, budget_s=30, workers=1, seed=0)
    assert check(plan, inst) == []
    assert plan.objective <= best_weighted + 1e-6, (plan.objective, best_weighted)
    assert plan.bound >= best_weighted - 1e-6, (plan.bound, best_weighted)
    if solver != "greedy":
        assert plan.status == SolveStatus.OPTIMAL, (solver, plan.status, plan.message)
    if plan.status == SolveStatus.OPTIMAL:
        assert plan.objective == best_weighted
        assert len(plan.jobs) == best_jobs


@st.composite
def tiny_rounds(draw):
    """2-3 nodes of 4 or 8 GPUs (NVSwitch H100/A100), partly busy; 1-3 jobs whose units fit
    one node and have an NVLink floor, so that each sits on one node."""
    nodes = []
    for i in range(draw(st.integers(2, 3))):
        gpu_type = draw(st.sampled_from(["H100-80", "A100-80"]))
        gpus = draw(st.sampled_from([4, 8]))
        busy = draw(st.sets(st.integers(0, gpus - 1), max_size=gpus - 1))
        nodes.append(node(f"n{i}", gpu_type, gpus=gpus, allocated={g: "r" for g in busy}))
    jobs = [job(f"j{k}", tp=draw(st.sampled_from([1, 2, 4])), replicas=draw(st.integers(1, 2)),
                accel=draw(st.sampled_from([None, "H100", "A100"])),
                priority=draw(st.sampled_from(["low", "normal", "high"])),
                dp_hop=draw(st.sampled_from([None, 1])),
                nvlink=draw(st.sampled_from([600, 900])), mem=40)
            for k in range(draw(st.integers(1, 3)))]
    return instance(nodes, jobs, nodes_per_leaf=draw(st.integers(1, 2)))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inst=tiny_rounds())
def test_backend_matches_brute_force_on_tiny_rounds(solver, inst):
    _compare(inst, solver)


# (GPU type, NVLink topology, GPUs): NVSwitch nodes of two sizes, a DGX-1 (hybrid cube
# mesh: the largest 50 GB/s clique is 4 GPUs) and a PCIe node (64 GB/s between every pair)
MIXED_NODES = [("H100-80", "nvswitch", 4), ("H100-80", "nvswitch", 8),
               ("V100-32", "hybrid_cube_mesh", 8), ("A100-40", "pcie", 4)]


@st.composite
def mixed_rounds(draw):
    """2-3 nodes of mixed sizes and kinds, partly busy (a DGX-1 keeps 3-5 free GPUs so
    that the oracle's subset search stays small); 1-2 jobs (2 replicas only for a lone
    job) with or without an NVLink floor, with or without a hop limit of their own (a unit
    that fits in one node is cut only without a floor and with a hop limit), sized to fit
    the free GPUs, half of them larger than any node's free GPUs (they must be cut)."""
    nodes = []
    for i in range(draw(st.integers(2, 3))):
        gpu_type, nvlink, gpus = draw(st.sampled_from(MIXED_NODES))
        least, most = (3, 5) if nvlink == "hybrid_cube_mesh" else (0, gpus - 1)
        busy = draw(st.sets(st.integers(0, gpus - 1), min_size=least, max_size=most))
        nodes.append(node(f"n{i}", gpu_type, gpus=gpus, nvlink=nvlink,
                          allocated={g: "r" for g in busy}))
    free = sum(n.free_count for n in nodes)
    widest = max(n.free_count for n in nodes)
    jobs = []
    n_jobs = draw(st.integers(1, 2))
    for k in range(n_jobs):
        sizes = [s for s in (2, 3, 4, 6, 8, 12, 16) if s <= free]
        cut = [s for s in sizes if s > widest]  # sizes that must be cut on this round
        tp = draw(st.sampled_from(cut if cut and draw(st.booleans()) else sizes))
        group_type = draw(st.sampled_from(["TensorParallel", "DataParallel"]))
        most = 2 if n_jobs == 1 and 2 * tp <= free else 1
        jobs.append(job(f"j{k}", tp=tp, replicas=draw(st.integers(1, most)),
                        accel=None, priority=draw(st.sampled_from(["low", "normal", "high"])),
                        tp_hop=draw(st.sampled_from([None, 1, 1, 3])),
                        dp_hop=draw(st.sampled_from([None, 1])),
                        nvlink=draw(st.sampled_from([0, 0, 50, 600])), mem=16,
                        group_type=group_type))
    return instance(nodes, jobs, nodes_per_leaf=draw(st.integers(1, 2)))


@settings(max_examples=int(os.environ.get("HP_ORACLE_MIXED_EXAMPLES", "20")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(inst=mixed_rounds())
def test_every_backend_matches_brute_force_on_mixed_nodes_and_cut_units(solvers, inst):
    # the oracle once per round, every backend against it (auto included)
    best = Oracle(inst).best()
    for solver in solvers:
        _compare(inst, solver, best)


@st.composite
def nvlink_rounds(draw):
    """Two small NVLink domains (racks of 2-3 GB200 trays of 4 GPUs, 1.8 TB/s across the
    rack) under one leaf each, partly busy; 1-2 jobs whose TP groups of 2-8 GPUs have an
    NVLink floor (larger than a tray: one rack, cut across its trays) or none, some with
    ``maxHopCount: 0`` (one tray, or one rack when larger than a tray)."""
    from hyperplace.instances.nvl72 import rack_cluster, rack_nodes

    racks = {}
    for r in range(2):
        trays = draw(st.integers(2, 3))
        held = {}
        for t in range(trays):
            busy = draw(st.sets(st.integers(0, 3), max_size=3))
            if busy:
                held[t] = {g: "r" for g in busy}
        racks[f"r{r}"] = rack_nodes(f"r{r}", trays=trays, allocated=held)
    free = sum(n.free_count for ns in racks.values() for n in ns)
    jobs = []
    for k in range(draw(st.integers(1, 2))):
        sizes = [s for s in (2, 3, 4, 6, 8) if s <= free] or [1]
        jobs.append(job(f"j{k}", tp=draw(st.sampled_from(sizes)),
                        replicas=draw(st.integers(1, 2)), accel="GB200",
                        priority=draw(st.sampled_from(["low", "normal", "high"])),
                        tp_hop=draw(st.sampled_from([None, None, 0])),
                        nvlink=draw(st.sampled_from([0, 1800, 1800])), mem=100))
    return rack_cluster("c", racks), jobs


def _nvlink_instance(cluster, jobs):
    from hyperplace.models import Instance, InstanceSpec
    from hyperplace.models.job import ObjectMeta

    return Instance(metadata=ObjectMeta(name="nvl"), spec=InstanceSpec(
        clusters=[cluster], jobs=jobs))


@settings(max_examples=int(os.environ.get("HP_ORACLE_NVLINK_EXAMPLES", "12")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(drawn=nvlink_rounds())
def test_every_backend_matches_brute_force_on_small_nvlink_domains(solvers, drawn):
    # the oracle enumerates every split over the trays and keeps what the checker accepts
    # (one NVLink domain for a bound unit, trays 0 hops apart), independent of the model
    inst = _nvlink_instance(*drawn)
    best = Oracle(inst).best()
    for solver in solvers:
        _compare(inst, solver, best)
