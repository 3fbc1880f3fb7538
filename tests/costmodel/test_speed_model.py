"""THE speed model (hyperplace.costmodel.speed): predict, split and the simulator agree."""

from __future__ import annotations

import pytest

from hyperplace.costmodel.predict import INTRA_CLUSTER_LATENCY_MS, predict
from hyperplace.costmodel.speed import (
    DEFAULT_BY_GPUS,
    Spread,
    job_speed,
    network_factor,
    resolve_job_model,
    type_speed,
)
from hyperplace.errors import InputError
from hyperplace.instances.generator import model_parallel_job
from hyperplace.models import Cluster, FabricGenerator, FabricSpec, Instance, InstanceSpec, Node
from hyperplace.models.job import ObjectMeta
from hyperplace.models.presets import model_preset
from hyperplace.models.split import SplitProblem, Stage, StageLink
from hyperplace.sim.speed import SpeedModel
from hyperplace.solvers.split import solve_split


def _instance() -> Instance:
    nodes = [Node(name=f"h{i}", gpu_type="H100-80", gpu_count=8) for i in range(2)]
    nodes += [Node(name=f"a{i}", gpu_type="A100-80", gpu_count=8) for i in range(2)]
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2, uplink_gbps=400.0)
    cluster = Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=gen))
    return Instance(metadata=ObjectMeta(name="c"), spec=InstanceSpec(clusters=[cluster]))


def test_predict_split_and_simulator_give_the_same_speed():
    from hyperplace.models.job import Parallelism

    model = "llama3-70b"  # on 16 GPUs: TP 8 x PP 2, so split has two stages to price
    gpus = 16
    declared = Parallelism(tp=8, pp=2, micro_batch=1, global_batch=32, zero=1, recompute="full")
    fast = type_speed(model, "H100-80", gpus, parallelism=declared)
    ref = type_speed(model, "A100-80", gpus, parallelism=declared)
    cfg = fast.config
    assert (cfg.tp, cfg.pp, cfg.dp) == (8, 2, 1)
    spec = model_preset(model)
    # predict with the facade's configuration: the same step and tokens/s
    pred = predict(spec, "H100-80", tp=cfg.tp, pp=cfg.pp, dp=cfg.dp, micro_batch=cfg.micro_batch,
                   global_batch=cfg.global_batch, recompute=cfg.recompute, zero=cfg.zero,
                   sequence_parallel=True)
    assert pred.fits
    assert pred.step_time_s == pytest.approx(fast.step_time_s)
    assert pred.tokens_per_s == pytest.approx(fast.tokens_per_s)
    # split prices the same stages: its even (symmetric) split is predict's step
    stages = [Stage(name=f"s{i}", cluster="c", gpu_type="H100-80", gpu_count=cfg.tp * cfg.dp,
                    tp=cfg.tp) for i in range(cfg.pp)]
    links = [StageLink(a=a.name, b=b.name, gbps=400 * cfg.tp * cfg.dp,
                       latency_ms=INTRA_CLUSTER_LATENCY_MS, kind="ib")
             for a, b in zip(stages, stages[1:])]
    m = cfg.global_batch // (cfg.micro_batch * cfg.dp)
    problem = SplitProblem(model=spec.model_copy(update={"micro_batch_size": cfg.dp,
                                                         "sequence_parallel": True}),
                           stages=stages, links=links, microbatches=m, zero=cfg.zero,
                           recompute=cfg.recompute, fixed_order=True,
                           overlap_grad_reduce=cfg.dp > 1)
    plan = solve_split(problem, time_limit=5)
    assert plan.symmetric is not None
    assert plan.symmetric.step_time_s == pytest.approx(pred.step_time_s)
    # the simulator: a 16-GPU job of this model on the H100 leaf runs at the same ratio
    inst = _instance()
    job = model_parallel_job("j", "q", replicas=2, memory_gb=None, dp_ib_gbps=None)
    job = job.model_copy(update={"spec": job.spec.model_copy(
        update={"model": model, "parallelism": declared})})
    units = [u.name for u in job.units()]
    on_h100 = {units[0]: [("h0", i) for i in range(8)], units[1]: [("h1", i) for i in range(8)]}
    sim = SpeedModel(inst).speed(job, on_h100)
    assert sim == pytest.approx(pred.tokens_per_s / ref.tokens_per_s)
    assert sim == pytest.approx(job_speed(model, "H100-80", gpus, parallelism=declared).relative)


def test_a_job_naming_no_parallelism_or_auto_is_priced_with_the_planners_best():
    """No ``spec.parallelism`` or ``auto``: the planner's best on
    that type and GPU count, memoised; at least as fast as the default rule; the simulator
    and planned speeds use it."""
    from hyperplace.costmodel.plan import plan
    from hyperplace.costmodel.speed import DEFAULT_RULE, planner_stats

    model, gpus = "llama3-70b", 64
    best = plan(model_preset(model), [("H100-80", gpus)], top=1, space="pricing").best[0]
    mine = type_speed(model, "H100-80", gpus, parallelism="auto")
    assert mine.fits and mine.step_time_s == pytest.approx(best.prediction.step_time_s)
    c = best.candidate
    assert (mine.config.tp, mine.config.pp, mine.config.dp) == (c.tp, c.pp, c.dp * c.cp)
    # a job naming no parallelism is priced the same (PLAN_UNDECLARED)
    assert type_speed(model, "H100-80", gpus).step_time_s == mine.step_time_s
    rule = type_speed(model, "H100-80", gpus, parallelism=DEFAULT_RULE)
    assert mine.tokens_per_s >= rule.tokens_per_s * (1 - 1e-9)
    plans = planner_stats["plans"]
    for _ in range(3):  # memoised: no new search
        type_speed(model, "H100-80", gpus, parallelism="auto")
        type_speed(model, "H100-80", gpus)
    assert planner_stats["plans"] == plans
    inst = _instance()
    job = model_parallel_job("j", "q", replicas=2, memory_gb=None, dp_ib_gbps=None)
    job = job.model_copy(update={"spec": job.spec.model_copy(update={"model": model})})
    speeds = SpeedModel(inst, network=False)
    h100 = type_speed(model, "H100-80", 16, parallelism="auto").tokens_per_s
    a100 = type_speed(model, "A100-80", 16, parallelism="auto").tokens_per_s
    assert speeds.planned_speed(job, "H100-80", 0) == pytest.approx(h100 / a100)
    # a job nothing fits (an 8B model on one 80 GB GPU, full Adam state): the default rule
    # prices it and says it does not fit
    lone = type_speed("llama3-8b", "H100-80", 1, parallelism="auto")
    assert not lone.fits


def test_default_model_rule_is_one_table():
    assert resolve_job_model("llama-3-8b", 8)[0].name == "llama3-8b"
    assert resolve_job_model("llama3-70b-pretrain", 64)[0].name == "llama3-70b"
    for limit, preset in DEFAULT_BY_GPUS[:-1]:
        spec, rule = resolve_job_model("unknown", int(limit))
        assert spec.name == preset and "default" in rule
    assert resolve_job_model(None, 100_000)[0].name == DEFAULT_BY_GPUS[-1][1]


def test_network_factor_and_slowest_type():
    shares = {"collective": 0.1, "p2p": 0.0, "tp": 0.0}
    assert network_factor(None, shares) == 1.0
    assert network_factor(Spread(), shares) == 1.0
    assert network_factor(Spread(tiers=1), shares) == pytest.approx(0.9 + 0.1 / 0.83)
    both = job_speed("llama3-8b", ["H100-80", "A100-80"], 16)
    assert both.gpu_type == "A100-80" and both.relative == pytest.approx(1.0)


def test_bad_gpu_count_names_the_field():
    with pytest.raises(InputError, match="gpus"):
        type_speed("llama3-8b", "H100-80", 0)


def test_a_job_may_declare_its_parallelism_or_auto():
    from hyperplace.models.job import Parallelism

    declared = Parallelism(tp=8, pp=2, micro_batch=1, recompute="full")
    mine = type_speed("llama3-70b", "H100-80", 16, parallelism=declared)
    assert (mine.config.tp, mine.config.pp, mine.config.recompute) == (8, 2, True)
    pred = predict(model_preset("llama3-70b"), "H100", tp=8, pp=2, dp=1, micro_batch=1,
                   global_batch=mine.config.global_batch, recompute=True, zero=1,
                   sequence_parallel=True)
    assert mine.step_time_s == pytest.approx(pred.step_time_s)
    auto = type_speed("llama3-8b", "H100-80", 8, parallelism="auto")
    default = type_speed("llama3-8b", "H100-80", 8)
    assert auto.fits and auto.tokens_per_s >= default.tokens_per_s * (1 - 1e-9) or not default.fits
    with pytest.raises(InputError, match="spec.parallelism"):
        type_speed("llama3-8b", "H100-80", 12, parallelism=Parallelism(tp=8))
    # the field on a job's spec, camelCase on the wire
    job = model_parallel_job("j", "q", replicas=2, memory_gb=None, dp_ib_gbps=None)
    spec = job.spec.model_validate({**job.spec.model_dump(by_alias=True),
                                    "parallelism": {"tp": 8, "virtualStages": 1}})
    assert spec.parallelism.tp == 8
    assert job.spec.model_validate({**job.spec.model_dump(by_alias=True),
                                    "parallelism": "auto"}).parallelism == "auto"


def test_a_freed_model_specs_cached_speed_never_answers_for_another_spec():
    """job_speed's cache key holds a spec by id: the spec is kept alive with its entry, so a
    new spec that happens to get a freed spec's id is priced as itself (not from the cache)."""
    import gc

    base = model_preset("llama3-8b")
    small = base.model_copy(update={"num_layers": 8})
    big = base.model_copy(update={"num_layers": 64})
    want_big = job_speed(big, "H100-80", 64).step_time_s
    for _ in range(50):  # ids of freed specs are reused quickly by CPython
        tmp = base.model_copy(update={"num_layers": 8})
        assert job_speed(tmp, "H100-80", 64).step_time_s == job_speed(small, "H100-80", 64).step_time_s
        del tmp
        gc.collect()
        other = base.model_copy(update={"num_layers": 64})
        assert job_speed(other, "H100-80", 64).step_time_s == want_big
        del other
