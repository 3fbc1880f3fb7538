"""The placement allowance of what the planning engine starts now (``pool_allowance``):
with ``keep_whole`` jobs smaller than a node leave whole the free nodes a planned gang
needs (``"reserved"``: a reserved gang)."""

from __future__ import annotations

from hyperplace.formulations.schedule import PendingJob, RunningSlot, build_schedule_problem
from hyperplace.instances.generator import model_parallel_job, small_job
from hyperplace.models import Cluster, FabricGenerator, FabricSpec, Instance, InstanceSpec, Node
from hyperplace.models.job import ObjectMeta
from hyperplace.sim.planning import pool_allowance
from hyperplace.solvers.schedule import Planned, ScheduleResult


def _setting():
    """Two leaves of two H100 nodes: h0 whole and free, h1 full until step 2, h2 and h3
    with one free GPU each for long; a 16-GPU gang planned at step 2 in the type's pool
    (any two whole nodes) and a 2-GPU job starting now."""
    nodes = [Node(name=f"h{i}", gpu_type="H100-80", gpu_count=8) for i in range(4)]
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2, uplink_gbps=400.0)
    inst = Instance(metadata=ObjectMeta(name="t"), spec=InstanceSpec(clusters=[
        Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=gen))]))
    running = [RunningSlot("r1", tuple(("h1", g) for g in range(8)), 600.0),
               RunningSlot("r2", tuple(("h2", g) for g in range(7)), 36000.0),
               RunningSlot("r3", tuple(("h3", g) for g in range(7)), 36000.0)]
    gang = model_parallel_job("gang", "m", replicas=2, memory_gb=None, dp_ib_gbps=None)
    small = small_job("small", "m", 2)
    problem = build_schedule_problem(
        inst, [PendingJob(gang, 0.0), PendingJob(small, 0.0)], running, 0.0,
        lambda job, t, c: 3000.0, horizon_s=3600.0, step_s=300.0)
    jobs = {j.name: j for j in problem.jobs}
    type_pool = next(p for p in problem.pools if p.gpu_type and p.domain is None)
    k_gang = next(k for k, o in enumerate(jobs["gang"].options) if o.pool == type_pool.id)
    k_small = next(k for k, o in enumerate(jobs["small"].options) if o.pool == type_pool.id)
    d = problem.dur_steps(jobs["gang"].options[k_gang], 2)
    entries = {"gang": Planned("gang", k_gang, 2, type_pool.id, d),
               "small": Planned("small", k_small, 0, type_pool.id,
                                problem.dur_steps(jobs["small"].options[k_small], 0))}
    result = ScheduleResult(problem=problem, entries=entries, status="feasible", objective=0,
                            bound=None, solve_s=0.0, modelled=2, greedy_objective=0)
    free = {"h0": list(range(8)), "h1": [], "h2": [7], "h3": [7]}
    return problem, result, type_pool, free


def test_a_small_job_leaves_the_whole_node_a_planned_gang_needs():
    problem, result, pool, free = _setting()
    assert any(p.parent == pool.id for p in problem.pools)  # the leaves are its children
    sizes = {n: 8 for n in free}
    kept = pool_allowance(problem, result, ["small"], pool.id, False, free, sizes,
                          keep_whole=True)
    # h0 is one of the two whole nodes the gang needs at step 2 (h1 frees then): the
    # 2-GPU job may take only the single free GPUs of h2 and h3 (where it does not fit)
    assert kept["h0"] == set() and all(len(kept[n]) <= 1 for n in ("h2", "h3"))
    # counted by GPUs only (the default, WHOLE_NODES_KEPT off), it may break h0 and keep the
    # gang waiting
    loose = pool_allowance(problem, result, ["small"], pool.id, False, free, sizes)
    assert loose["h0"] and len(loose["h0"]) >= 2


def test_a_small_job_may_break_a_whole_node_no_gang_needs():
    problem, result, pool, free = _setting()
    del result.entries["gang"]  # no gang planned: h0 is spare
    kept = pool_allowance(problem, result, ["small"], pool.id, False, free,
                          {n: 8 for n in free}, keep_whole=True)
    assert kept["h0"] and len(kept["h0"]) >= 2


def test_reserved_keeps_only_the_whole_nodes_of_reserved_gangs():
    from hyperplace.formulations.schedule import Reservation

    problem, result, pool, free = _setting()
    sizes = {n: 8 for n in free}
    # the gang only planned: "reserved" lets the small job break h0
    loose = pool_allowance(problem, result, ["small"], pool.id, False, free, sizes,
                           keep_whole="reserved")
    assert loose["h0"] and len(loose["h0"]) >= 2
    # the gang reserved there: h0 is kept whole for it
    problem.reservations["gang"] = Reservation("gang", pool.id, problem.time_of(2))
    kept = pool_allowance(problem, result, ["small"], pool.id, False, free, sizes,
                          keep_whole="reserved")
    assert kept["h0"] == set()


def test_the_engine_refuses_a_bad_keep_whole_or_end_quantile():
    import math

    import pytest

    from hyperplace.sim.planning import PlanningEngine, residual_s

    for bad in ("gangs", 1, 0.0):
        with pytest.raises(ValueError, match="keep_whole"):
            PlanningEngine(keep_whole=bad)
    for q in (0.0, 1.0, math.nan):
        with pytest.raises(ValueError, match="end_quantile"):
            PlanningEngine(end_quantile=q)
    # the median is the default, and a later quantile expects a later end
    assert residual_s(100.0, 0.0, 0.5) == pytest.approx(100.0)
    assert residual_s(100.0, 50.0, 0.5, 0.7) > residual_s(100.0, 50.0, 0.5)


def test_the_median_residual_is_the_formula_before_the_quantile():
    """``residual_s`` at its default quantile is the median it gave before the quantile
    was an argument (the replays' decisions stay what the committed cells show)."""
    import math
    import random
    from statistics import NormalDist

    from hyperplace.sim.planning import residual_s

    def before(predicted, elapsed, sigma):
        m = max(predicted, 1e-9)
        if elapsed <= 0 or sigma <= 0:
            return max(0.0, m - max(elapsed, 0.0))
        nd = NormalDist()
        survive = 1.0 - nd.cdf(math.log(elapsed / m) / sigma)
        z = nd.inv_cdf(min(1.0 - 1e-15, 1.0 - max(survive, 1e-300) / 2.0))
        return max(0.0, m * math.exp(sigma * min(z, 8.0)) - elapsed)

    rng = random.Random(3)
    for _ in range(2000):
        p, e = rng.uniform(1, 1e6), rng.choice([0.0, -5.0, rng.uniform(0, 3e6)])
        sigma = rng.choice([0.0, 0.1, 0.5, 1.5])
        assert residual_s(p, e, sigma) == before(p, e, sigma)
