"""THE speed model: how fast a job runs on a placement.

Every place that needs a job's speed asks :func:`job_speed` (or one of the thin helpers
below built on it): ``hyperplace predict`` and ``split`` price configurations with the same
per-layer times (:func:`hyperplace.costmodel.predict.predict`), the simulator's durations
(:mod:`hyperplace.sim.speed`), the federation's ordering of locations, ``solve --policy
performance`` and the peers' fastest-type-first node order. No GPU type is ranked by a
"peak x planning MFU" constant any more.

**A placement** is the GPU type(s) a job got, how many GPUs, and how the nodes are spread
over the network (:class:`Spread`: switch tiers crossed, leaf oversubscription, whether a
tensor-parallel group is cut over nodes). Synchronous training runs at its slowest GPU type.

**The job's model (the default rule, here and only here).** A job whose ``model`` names a
preset (``hyperplace split --list-models``; aliases such as ``llama-3-8b`` and suffixed names
such as ``llama3-70b-pretrain`` match) is priced as that model. A job naming no known model
is priced as the dense transformer preset sized to its GPU count (:data:`DEFAULT_BY_GPUS`):
up to 4 GPUs ``gpt-neo-2.7b``, up to 32 ``llama3-8b``, up to 512 ``llama3-70b``, beyond that
``llama3-405b``; the answer says which rule applied.

**The configuration**: the job's declared ``spec.parallelism`` (degrees, schedule, memory
options); for ``auto`` (and for none when :data:`PLAN_UNDECLARED`) the planner's best on
that type and GPU count (:mod:`hyperplace.costmodel.plan`, memoised per model, type and
GPUs: :func:`planned_config`). Otherwise, and where the planner has no configuration
(nothing fits or divides), this rule: TP the largest power of two <= 8 dividing the GPUs per job and the heads; PP the
smallest divisor of the rest that fits in memory, with the distributed optimizer (ZeRO-1)
and, if needed, full recomputation; DP the rest; micro-batch 1 and ``max(8, 4·PP)``
micro-batches per step (:func:`default_config`).

**Network.** The step's predicted parts say what share of it is DP synchronisation,
pipeline point-to-point and TP communication; each share runs at the bandwidth the
placement gets. Published figures (ByteDance Arnold, arXiv 2509.15940): groups spread across
pods lose up to 17 % of collective bandwidth and 70 % of point-to-point bandwidth, applied
at every switch tier crossed beyond one leaf; an oversubscribed leaf divides bandwidth
leaving it by its ratio; a TP group cut over nodes leaves NVLink for the NIC (about 1/9 of
NVLink on DGX H100: 50 vs 450 GB/s per GPU each way). The shares are floored at
:data:`MIN_COMM_SHARE` (bucketed all-reduce and P2P are overlapped with compute in the
prediction, but a slower network exposes them again).

**Fast path.** Answers are cached per (model, GPU type, GPUs, calibration): a simulator
replay asks thousands of times for a few dozen distinct keys; a cached call is a dict
look-up. ``job_speed`` of a cached key takes microseconds.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from hyperplace.costmodel.calibration import Calibration, default_calibration
from hyperplace.errors import InputError
from hyperplace.models.gpu import GPUCatalog, GPUType, default_catalog
from hyperplace.models.model_spec import ModelSpec
from hyperplace.models.presets import ALIASES, model_preset, preset_names

REFERENCE_TYPE = "A100-80"
# (largest GPU count, preset) for jobs that name no known model
DEFAULT_BY_GPUS: tuple[tuple[float, str], ...] = (
    (4, "gpt-neo-2.7b"), (32, "llama3-8b"), (512, "llama3-70b"), (math.inf, "llama3-405b"))
# For ranking GPU types without a job (solve --policy performance): a llama3-70b on 64 GPUs.
RANK_MODEL, RANK_GPUS = "llama3-70b", 64
# ``parallelism=DEFAULT_RULE``: price with the default rule (:func:`default_config`), not the
# planner; what ranking GPU types without a job uses (cheap: no search).
DEFAULT_RULE = "default-rule"
# A job declaring no parallelism is priced with the planner's best (as ``auto``) when True,
# else with the default rule.
PLAN_UNDECLARED = True
CROSS_POD_COLLECTIVE_BW = 0.83   # Arnold: up to 17 % collective bandwidth lost across pods
CROSS_POD_P2P_BW = 0.30          # Arnold: up to 70 % point-to-point bandwidth lost
TP_OFF_NVLINK_BW = 1 / 9.0       # NIC vs NVLink per GPU on DGX H100 (400 Gb/s vs 450 GB/s)
MIN_COMM_SHARE = {"collective": 0.05, "p2p": 0.02, "tp": 0.10}
MAX_GPUS = 1 << 20

_active: list[Calibration] = []


@contextlib.contextmanager
def use_calibration(calibration: Calibration | None) -> Iterator[None]:
    """Price every speed inside the block with ``calibration`` (``solve --calibration``)."""
    if calibration is None:
        yield
        return
    _active.append(calibration)
    try:
        yield
    finally:
        _active.pop()


def active_calibration() -> Calibration:
    return _active[-1] if _active else default_calibration()


_alive: dict[int, Calibration] = {}


def _cal_key(calibration: Calibration) -> int:
    """Cache key of a calibration; the object is kept so that its id is never reused."""
    _alive[id(calibration)] = calibration
    return id(calibration)


@dataclass(frozen=True)
class Spread:
    """How a placement's nodes sit in the network (0 tiers: one node or one leaf)."""

    tiers: int = 0
    oversubscription: float = 1.0
    pipeline: bool = False  # the job has pipeline stages between nodes
    tp_cut_tiers: int | None = None  # a TP group spans nodes: tiers it crosses (0: one leaf)


@dataclass(frozen=True)
class Config:
    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    recompute: bool
    zero: int
    label: str = ""  # the planner's label of its configuration (empty: the default rule)


@dataclass(frozen=True)
class TypeSpeed:
    """A model on ``gpus`` GPUs of one type, network aside (cached)."""

    model: str
    model_rule: str
    gpu_type: str
    gpus: int
    config: Config
    step_time_s: float
    tokens_per_s: float
    fits: bool
    shares: dict[str, float]  # share of the step: collective, p2p, tp
    sources: tuple[str, ...]

    @property
    def tokens_per_s_per_gpu(self) -> float:
        return self.tokens_per_s / self.gpus


@dataclass(frozen=True)
class JobSpeed:
    """What :func:`job_speed` answers."""

    model: str
    model_rule: str
    gpu_type: str  # the slowest type of the placement
    gpus: int
    tokens_per_s: float
    step_time_s: float
    network_factor: float  # time multiplier >= 1
    relative: float  # speed relative to the reference type on the same GPUs, same spread
    reference: str
    config: Config
    fits: bool
    sources: tuple[str, ...] = field(default=())

    def to_doc(self) -> dict[str, Any]:
        return {"model": self.model, "modelRule": self.model_rule, "gpuType": self.gpu_type,
                "gpus": self.gpus, "tokensPerS": self.tokens_per_s,
                "stepTimeS": self.step_time_s, "networkFactor": self.network_factor,
                "relativeSpeed": self.relative, "reference": self.reference,
                "config": self.config.__dict__, "fits": self.fits,
                "timeSources": list(self.sources)}


def _preset_key(name: str) -> str | None:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    names = preset_names()
    if key in names:
        return key
    # a suffixed job model name: llama3-70b-pretrain, llama-3-8b-sft
    squashed = re.sub(r"[^a-z0-9.]", "", key)
    best = None
    for known in [*names, *ALIASES]:
        k = re.sub(r"[^a-z0-9.]", "", known)
        if squashed.startswith(k) and (best is None or len(k) > len(best[0])):
            best = (k, ALIASES.get(known, known))
    return best[1] if best else None


def resolve_job_model(name: str | ModelSpec | None, gpus: int) -> tuple[ModelSpec, str]:
    """The model a job is priced as, and the rule that chose it (module docstring)."""
    if isinstance(name, ModelSpec):
        return name, "given"
    key = _preset_key(name) if name else None
    if key is not None:
        return model_preset(key), f"preset {key}"
    preset = next(p for limit, p in DEFAULT_BY_GPUS if gpus <= limit)
    why = f"{name!r} is no known model" if name else "no model named"
    return model_preset(preset), f"default {preset} for {gpus} GPUs ({why})"


def _pow2_at_most(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def default_config(spec: ModelSpec, gpu: GPUType, gpus: int,
                   calibration: Calibration, catalog: GPUCatalog) -> tuple[Config, Any]:
    """The configuration rule of the module docstring, and its prediction."""
    from hyperplace.costmodel.predict import predict

    tp = min(8, _pow2_at_most(gpus))
    while tp > 1 and (gpus % tp or spec.num_heads % tp):
        tp //= 2
    rest = gpus // tp
    divisors = [d for d in range(1, min(rest, spec.num_layers) + 1) if rest % d == 0]
    last = None
    for recompute in (False, True):
        for pp in divisors:
            dp = rest // pp
            m = max(8, 4 * pp)
            cfg = Config(tp=tp, pp=pp, dp=dp, micro_batch=1, global_batch=dp * m,
                         recompute=recompute, zero=1 if dp > 1 else 0)
            pred = predict(spec, gpu.name, tp=tp, pp=pp, dp=dp, micro_batch=1,
                           global_batch=cfg.global_batch, recompute=recompute, zero=cfg.zero,
                           calibration=calibration, catalog=catalog, detail=False)
            last = (cfg, pred)
            if pred.fits:
                return cfg, pred
    assert last is not None
    return last


_cache: dict[tuple, TypeSpeed] = {}
_fast: dict[tuple, TypeSpeed] = {}
MAX_FAST_CATALOGS = 256
_alive_catalogs: dict[int, GPUCatalog] = {}
_job_cache: dict[tuple, "JobSpeed"] = {}
#: model specs whose id is in a :data:`_job_cache` key, kept so that the id is not reused by
#: another spec while the entry lives (an id alone would let a freed spec's entry answer
#: for a new one: results depending on what the process computed before)
_alive_models: dict[int, ModelSpec] = {}
_planned: dict[tuple, tuple[Config, Any] | None] = {}
planner_stats = {"plans": 0, "seconds": 0.0, "fallbacks": 0}


def planned_config(spec: ModelSpec, gpu: GPUType, gpus: int, calibration: Calibration,
                   catalog: GPUCatalog, global_batch: int | None = None
                   ) -> tuple[Config, Any] | None:
    """The planner's best configuration of ``spec`` on ``gpus`` GPUs of ``gpu`` and its
    prediction (:func:`hyperplace.costmodel.plan.plan` over its pricing space: micro-batch 1,
    plain or 2-way interleaved 1F1B; top 1, at ``global_batch`` sequences
    or its default of about 4 M tokens), memoised per (model, type, GPUs, batch,
    calibration): a job that declares
    ``parallelism: auto`` or none. Where nothing the planner searches fits or divides (a
    prime GPU count above the layers, a model too large for the GPUs), the default rule
    (:func:`default_config`) prices it and ``planner_stats['fallbacks']`` counts it."""
    import time

    from hyperplace.costmodel.plan import plan

    mkey = spec.model_dump_json()
    key = (mkey, gpu, gpus, _cal_key(calibration), global_batch)
    if key in _planned:
        return _planned[key]
    began = time.perf_counter()
    try:
        res = plan(spec, [(gpu.name, gpus)], global_batch=global_batch, top=1,
                   calibration=calibration, catalog=catalog, space="pricing",
                   explain=False)
        best = res.best[0] if res.best else None
    except InputError:
        best = None
    planner_stats["plans"] += 1
    if best is None and global_batch is not None:
        hit = None  # the caller keeps its own shape
    elif best is None:
        planner_stats["fallbacks"] += 1
        hit = default_config(spec, gpu, gpus, calibration, catalog)
    else:
        c, pred = best.candidate, best.prediction
        hit = (Config(tp=c.tp, pp=c.pp, dp=c.dp * c.cp, micro_batch=c.micro_batch,
                      global_batch=res.global_batch, recompute=c.recompute == "full",
                      zero=c.zero, label=c.label()), pred)
    planner_stats["seconds"] += time.perf_counter() - began
    if len(_planned) > 100_000:
        _planned.clear()
    _planned[key] = hit
    return hit


def declared_config(spec: ModelSpec, gpu: GPUType, gpus: int, par: Any,
                    calibration: Calibration, catalog: GPUCatalog) -> tuple[Config, Any]:
    """A job's declared parallelism (``spec.parallelism``), or the planner's best for
    ``auto`` or none (:func:`planned_config`); InputError naming the field when the degrees
    do not fit the GPUs."""
    from hyperplace.costmodel.predict import predict

    if par == DEFAULT_RULE or (par is None and not PLAN_UNDECLARED):
        return default_config(spec, gpu, gpus, calibration, catalog)
    if par is None or par == "auto":
        hit = planned_config(spec, gpu, gpus, calibration, catalog)
        assert hit is not None  # without a batch of its own it falls back to the rule
        return hit
    per = par.tp * par.pp * par.cp
    if gpus % per:
        raise InputError(f"TP {par.tp} x PP {par.pp} x CP {par.cp} = {per} does not divide "
                         f"the job's {gpus} GPUs", path="spec.parallelism")
    dp = gpus // per
    gb = par.global_batch or dp * par.micro_batch * max(8, 4 * par.pp)
    pred = predict(spec, gpu.name, tp=par.tp, pp=par.pp, dp=dp, cp=par.cp,
                   virtual_stages=par.virtual_stages, micro_batch=par.micro_batch,
                   global_batch=gb, recompute=par.recompute == "full",
                   selective_recompute=par.recompute == "selective", zero=par.zero,
                   precision=par.precision, sequence_parallel=par.tp > 1, ep=par.ep,
                   calibration=calibration, catalog=catalog, detail=False)
    return Config(tp=par.tp, pp=par.pp, dp=dp * par.cp, micro_batch=par.micro_batch,
                  global_batch=gb, recompute=par.recompute == "full", zero=par.zero), pred


def type_speed(model: str | ModelSpec | None, gpu: GPUType | str, gpus: int, *,
               catalog: GPUCatalog | None = None, calibration: Calibration | None = None,
               parallelism: Any = None) -> TypeSpeed:
    """A model's throughput on ``gpus`` GPUs of one type, network aside (cached);
    ``parallelism``: a job's declared :class:`~hyperplace.models.job.Parallelism` or
    ``"auto"`` (default: :func:`default_config`)."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 0 < gpus <= MAX_GPUS:
        raise InputError(f"must be a positive integer at most {MAX_GPUS}, got {gpus!r}",
                         path="gpus")
    catalog = catalog or default_catalog()
    calibration = calibration or active_calibration()
    fast = None
    if model is None or isinstance(model, str):
        # a repeated call (thousands of jobs, a few dozen keys): one look-up, before the
        # model's name is resolved
        if id(catalog) not in _alive_catalogs:
            if len(_alive_catalogs) >= MAX_FAST_CATALOGS:  # a long-lived service: bounded
                _alive_catalogs.clear()
                _fast.clear()
            _alive_catalogs[id(catalog)] = catalog  # kept so that its id is not reused
        fast = (model, gpu, gpus, _cal_key(calibration), parallelism, id(catalog))
        hit = _fast.get(fast)
        if hit is not None:
            return hit
    if isinstance(gpu, str):
        found = catalog.find(gpu)
        if found is None:
            raise InputError(f"unknown GPU type {gpu!r}", path="gpuType")
        gpu = found
    spec, rule = resolve_job_model(model, gpus)
    # a spec by value (its fields hold lists, so the spec itself is not hashable)
    mkey = spec.model_dump_json() if isinstance(model, ModelSpec) else spec.name
    key = (mkey, gpu, gpus, _cal_key(calibration), parallelism)
    hit = _cache.get(key)
    if hit is not None:
        if fast is not None:
            _fast[fast] = hit
        return hit
    one = GPUCatalog([gpu]) if catalog.find(gpu.name) != gpu else catalog
    cfg, pred = declared_config(spec, gpu, gpus, parallelism, calibration, one)
    step = pred.step_time_s
    parts = pred.parts
    shares = {"collective": parts["dpSync"] / step, "p2p": parts["p2p"] / step,
              "tp": parts["tpComm"] / step}
    used = cfg.tp * cfg.pp * cfg.dp  # dp counts CP ranks too
    hit = TypeSpeed(model=spec.name, model_rule=rule, gpu_type=gpu.name, gpus=gpus,
                    config=cfg, step_time_s=step,
                    tokens_per_s=pred.tokens_per_s * gpus / used, fits=pred.fits,
                    shares=shares, sources=tuple(pred.sources))
    if len(_cache) > 100_000:
        _cache.clear()
        _fast.clear()
    _cache[key] = hit
    if fast is not None:
        _fast[fast] = hit
    return hit


def network_factor(spread: Spread | None, shares: dict[str, float]) -> float:
    """Time multiplier (>= 1) of a step whose communication shares run slower."""
    if spread is None:
        return 1.0
    time = 1.0
    over = max(spread.oversubscription, 1.0)
    if spread.tiers > 0:
        bw = CROSS_POD_COLLECTIVE_BW ** spread.tiers / over
        s = max(shares.get("collective", 0.0), MIN_COMM_SHARE["collective"])
        time *= (1 - s) + s / bw
        if spread.pipeline:
            bw = CROSS_POD_P2P_BW ** spread.tiers / over
            s = max(shares.get("p2p", 0.0), MIN_COMM_SHARE["p2p"])
            time *= (1 - s) + s / bw
    if spread.tp_cut_tiers is not None:
        c = spread.tp_cut_tiers
        bw = (CROSS_POD_P2P_BW ** c / over) if c else 1.0
        s = max(shares.get("tp", 0.0), MIN_COMM_SHARE["tp"])
        time *= (1 - s) + s / (bw * TP_OFF_NVLINK_BW)
    return time


def job_speed(model: str | ModelSpec | None, gpu_types: str | GPUType | Sequence[str | GPUType],
              gpus: int, spread: Spread | None = None, *, catalog: GPUCatalog | None = None,
              calibration: Calibration | None = None,
              reference: str = REFERENCE_TYPE, parallelism: Any = None) -> JobSpeed:
    """How fast a job (its ``model`` name or spec) runs on ``gpus`` GPUs of ``gpu_types``
    spread as ``spread``: THE speed function (module docstring)."""
    catalog = catalog or default_catalog()
    types = [gpu_types] if isinstance(gpu_types, (str, GPUType)) else list(gpu_types)
    cal = calibration or active_calibration()
    if isinstance(model, ModelSpec):
        _alive_models[id(model)] = model
    fast = (model if not isinstance(model, ModelSpec) else id(model), tuple(types), gpus,
            spread, reference, _cal_key(cal), parallelism)
    if any(isinstance(t, str) for t in types):  # names mean what this catalog says
        fast = (*fast, tuple(catalog.find(t) if isinstance(t, str) else t for t in types))
    hit = _job_cache.get(fast)
    if hit is not None:
        return hit
    if not types:
        raise InputError("a placement needs at least one GPU type", path="gpuTypes")
    speeds = [type_speed(model, t, gpus, catalog=catalog, calibration=calibration,
                         parallelism=parallelism) for t in dict.fromkeys(types)]
    slow = min(speeds, key=lambda s: s.tokens_per_s)
    ref = type_speed(model, reference, gpus, catalog=catalog, calibration=calibration,
                     parallelism=parallelism)
    factor = network_factor(spread, slow.shares)
    out = JobSpeed(model=slow.model, model_rule=slow.model_rule, gpu_type=slow.gpu_type,
                    gpus=gpus, tokens_per_s=slow.tokens_per_s / factor,
                    step_time_s=slow.step_time_s * factor, network_factor=factor,
                    relative=slow.tokens_per_s / ref.tokens_per_s / factor,
                    reference=ref.gpu_type, config=slow.config, fits=slow.fits,
                    sources=slow.sources)
    if len(_job_cache) > 100_000:
        _job_cache.clear()
        _alive_models.clear()
    _job_cache[fast] = out
    return out


def relative_speed(model: str | ModelSpec | None, gpu: GPUType | str, gpus: int, *,
                   catalog: GPUCatalog | None = None, calibration: Calibration | None = None,
                   reference: str = REFERENCE_TYPE, parallelism: Any = None) -> float:
    """Throughput of ``model`` on ``gpus`` GPUs of ``gpu`` relative to the reference type
    (the simulator's speed 1.0), network aside."""
    mine = type_speed(model, gpu, gpus, catalog=catalog, calibration=calibration,
                      parallelism=parallelism)
    ref = type_speed(model, reference, gpus, catalog=catalog, calibration=calibration,
                     parallelism=parallelism)
    return mine.tokens_per_s / ref.tokens_per_s


def rank_speed(gpu: GPUType | str, catalog: GPUCatalog | None = None,
               calibration: Calibration | None = None) -> float:
    """A GPU type's speed for ranking types without a job (``--policy performance``,
    fastest-type-first orders): relative speed of :data:`RANK_MODEL` on :data:`RANK_GPUS`
    with the default rule's configuration (a ranking, not a job's price: no search)."""
    return relative_speed(RANK_MODEL, gpu, RANK_GPUS, catalog=catalog,
                          calibration=calibration, parallelism=DEFAULT_RULE)


def clear_caches() -> None:
    """Forget every memoised speed and plan (benches measuring a cold start)."""
    for cache in (_cache, _fast, _job_cache, _planned, _alive_models):
        cache.clear()
    planner_stats.update(plans=0, seconds=0.0, fallbacks=0)
