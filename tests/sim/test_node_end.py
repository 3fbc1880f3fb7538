"""When the planning engine expects a busy node whole again (``node_end``): the latest of its
jobs' expected ends, or the expected end of the last of them (``last_residual_s``)."""

from __future__ import annotations

import numpy as np
import pytest

from hyperplace.formulations.schedule import PendingJob, RunningSlot, build_schedule_problem
from hyperplace.instances.generator import model_parallel_job
from hyperplace.models import Cluster, FabricGenerator, FabricSpec, Instance, InstanceSpec, Node
from hyperplace.models.job import ObjectMeta
from hyperplace.sim.planning import PlanningEngine, last_residual_s, residual_s


def test_one_job_is_its_own_residual():
    for p, e in ((3600.0, 0.0), (3600.0, 1800.0), (100.0, 250.0)):
        assert last_residual_s([(p, e)], 0.5) == residual_s(p, e, 0.5)
        assert last_residual_s([(p, e)], 0.5, 0.7) == residual_s(p, e, 0.5, 0.7)


def test_alike_jobs_that_just_started_end_at_the_root_quantile():
    # all of k alike jobs have ended by t with chance F(t)^k: the median is F's 0.5^(1/k)
    got = last_residual_s([(3600.0, 0.0)] * 8, 0.5)
    assert got == pytest.approx(residual_s(3600.0, 0.0, 0.5, 0.5 ** (1 / 8)), rel=1e-5)
    assert got > 1.9 * 3600.0  # about 7,196 s, twice a job's own median


def test_agrees_with_sampling_and_is_later_than_each_job():
    runs = [(3600.0, 1000.0), (7200.0, 100.0), (100.0, 150.0), (5000.0, 0.0)]
    rng = np.random.default_rng(7)
    rest = []
    for p, e in runs:  # remaining times of the runs still running at their elapsed time
        t = p * np.exp(rng.normal(0.0, 0.5, 4_000_000))
        rest.append((t[t > e] - e)[:100_000])
    last = np.max(np.stack(rest), axis=0)
    for q in (0.5, 0.7):
        got = last_residual_s(runs, 0.5, q)
        assert got == pytest.approx(float(np.quantile(last, q)), rel=0.01)
        assert got > max(residual_s(p, e, 0.5, q) for p, e in runs)


def test_no_error_is_the_latest_end_and_a_bad_quantile_is_refused():
    assert last_residual_s([(3600.0, 600.0), (100.0, 0.0)], 0.0) == 3000.0
    assert last_residual_s([], 0.5) == 0.0
    with pytest.raises(ValueError, match="quantile"):
        last_residual_s([(3600.0, 0.0)], 0.5, 1.0)
    with pytest.raises(ValueError, match="node_end"):
        PlanningEngine(node_end="first")


def _problem(node_free_s):
    nodes = [Node(name=f"h{i}", gpu_type="H100-80", gpu_count=8) for i in range(2)]
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2, uplink_gbps=400.0)
    inst = Instance(metadata=ObjectMeta(name="t"), spec=InstanceSpec(clusters=[
        Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=gen))]))
    running = [RunningSlot("a", tuple(("h0", g) for g in range(4)), 1200.0),
               RunningSlot("b", tuple(("h0", g) for g in range(4, 8)), 1800.0),
               RunningSlot("c", tuple(("h1", g) for g in range(8)), 600.0)]
    gang = model_parallel_job("gang", "m", replicas=2, memory_gb=None, dp_ib_gbps=None)
    return build_schedule_problem(inst, [PendingJob(gang, 0.0)], running, 0.0,
                                  lambda job, t, c: 3000.0, horizon_s=7200.0, step_s=300.0,
                                  node_free_s=node_free_s)


def _node_ends(problem):
    return sorted((b.end_s, b.gpus) for b in problem.node_busy)


def test_a_later_node_end_holds_the_node_busy_and_an_earlier_one_does_not():
    assert _node_ends(_problem(None)) == [(600.0, 1), (1800.0, 1)]
    assert _node_ends(_problem({"h0": 2700.0})) == [(600.0, 1), (2700.0, 1)]
    # never earlier than the latest of its jobs' ends, and a node with no job stays free
    assert _node_ends(_problem({"h0": 900.0, "h9": 5000.0})) == [(600.0, 1), (1800.0, 1)]
    # the GPU counts keep the jobs' own ends
    assert sorted(b.end_s for b in _problem({"h0": 2700.0}).busy) == [600.0, 1200.0, 1800.0]


def test_the_engine_gives_a_node_shared_by_several_jobs_the_end_of_the_last():
    from types import SimpleNamespace as NS

    def running(start, end, gpus):
        return NS(start_s=start, predicted_end_s=end, gpus=gpus)

    # a and b share h0 (b's gang also holds h1, alone there); c is alone on a0
    view = NS(now=1000.0, running={
        "a": running(0.0, 3600.0, [("h0", g) for g in range(4)]),
        "b": running(500.0, 4100.0, [("h0", g) for g in range(4, 8)]
                     + [("h1", g) for g in range(8)]),
        "c": running(0.0, 2000.0, [("a0", 0)])})
    got = PlanningEngine(node_end="last", prediction_sigma=0.5).node_free_s(view)
    assert set(got) == {"h0"}
    assert got["h0"] == pytest.approx(
        1000.0 + last_residual_s([(3600.0, 1000.0), (3600.0, 500.0)], 0.5))
    assert got["h0"] > 1000.0 + max(residual_s(3600.0, e, 0.5) for e in (1000.0, 500.0))
    # "latest" (the default) and exact predictions: the jobs' own ends
    assert PlanningEngine().node_free_s(view) is None
    assert PlanningEngine(node_end="last", prediction_sigma=0.0).node_free_s(view) is None
