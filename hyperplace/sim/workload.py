"""From trace rows to training-job manifests, offered load, and a foundation-model workload.

**Mapping rule** (trace row -> ``FoundationModelTrainingJob``), the same for every trace:

* ``g <= 8`` GPUs (one node): one ``DataParallel`` group of ``g`` GPUs, one replica, i.e. one
  gang unit on one node.
* ``g > 8``: ``ceil(g / 8)`` replicas of a ``TensorParallel`` group of 8 (one 8-GPU node
  each) joined by a ``DataParallel`` group of 1, as the seed manifest is written; the GPU
  count rounds up to a multiple of 8 (Philly's multi-node jobs are multiples of 8 already).
* A GPU-type constraint in the trace (Alibaba's ``gpu_spec``) becomes a ``gpu-type``
  toleration naming the allowed types, keeping only types the instance has; a constraint
  naming none of them is dropped (counted in :class:`Workload`).
* The trace duration is the job's *work*: its run time at reference speed
  (:mod:`hyperplace.sim.speed`).
* A trace row that cannot fit the empty instance (more GPUs than it has of an accepted type)
  is refused (:class:`~hyperplace.errors.InputError` naming the line and ``num_gpus``): a
  replay would wait for it forever, and a silent drop changes the load. With
  ``drop_unfit`` (``simulate --drop-unfit``; what-if scenarios, whose capacity changes
  may shrink the instance) such jobs are dropped before the replay and counted, for every
  policy alike, with the first one's line in :attr:`Workload.unfit_example`.
* A ``queue`` column names the queue: the manifest gets the ``volcano.sh/queue-name`` label
  for a Volcano queue, else ``kueue.x-k8s.io/queue-name`` (a LocalQueue or ClusterQueue
  name), so the round sees the queue exactly as it would see a submitted job's; a queue the
  instance does not declare is refused with the line.
* Priorities are not taken from traces (Philly has none; Alibaba's QoS is a latency class):
  every job is ``normal``.
* **Model** (``spec.model``): the trace's own ``model`` field when it has one, else a seeded
  draw (:func:`draw_model`, seed ``models-<seed>-<job name>``, so a job's model does not
  depend on the rest of the window) from :data:`MODEL_DRAW`, the families whose size is
  consistent with the job's GPU count (a 1-GPU job trains a sub-billion to 8B model, a
  256-GPU job a 70B to 405B one). The model decides the job's speed on each GPU type and
  placement through THE speed model (:func:`hyperplace.costmodel.speed.job_speed`, read by
  :class:`~hyperplace.sim.speed.SpeedModel`).
* **Predictions**: schedulers never see a job's true work. Each job gets one predicted work
  ``work x exp(N(0, sigma))`` (lognormal, median-unbiased, seeded per job:
  ``prediction-<seed>-<job name>``), :data:`PREDICTION_SIGMA` = 0.5 by default (a median
  absolute error of about 40 %, between the ML predictors of the GPU-cluster literature and
  user estimates, which Tsafrir et al. find several times off); ``sigma = 0`` makes
  predictions exact. Every policy of a run sees the same predictions: the engine plans with
  them (remaining predicted work), Slurm's user time limit is built from them.

**Offered load** (``--load``): offered work over the instance's capacity *at each GPU
type's speed for that work*, within the arrival window ``[first submit, last submit]``.
Job ``j``'s speed over the instance is ``capacity_j / GPUs``, where ``capacity_j = sum over
the instance's GPU types t of GPUs_t x speed_j(t)``
(:meth:`~hyperplace.sim.speed.SpeedModel.capacity`), so it runs ``run_j = work_j x GPUs /
capacity_j`` seconds; the load is ``sum_j gpus_j x min(run_j, end - submit_j) / (GPUs x
window)``: the share of the instance's GPU time the jobs would hold inside the window if
each ran from its arrival. Work past the window's end is not counted: a trace's jobs of
days would otherwise make "load 1.0" a nearly idle instance in any window shorter than they
run (the Philly sample's 3 h window at the old ``sum gpus x work / (window x GPUs)``: 1.4 %
utilisation at "load 1.0"). Load 1.0 asks for every GPU for the whole window on any
instance, whatever its types (a job that accepts only some types asks more of them). A
target load rescales the submit times (found by bisection: the order, sizes and durations
are kept); ``trace`` keeps the trace's own times. Arrivals are never squeezed into less than
:data:`MIN_WINDOW_S` (or their own span if shorter): a load the window's jobs cannot offer
(too few GPUs asked even if all arrived at once) or only as a burst is replayed at the most
they offer over that window, and the replay says so (``load_note``): the Alibaba sample's
1,439 GPUs cannot load the 6,212-GPU ``alibaba-2023`` inventory, nor Philly's 2,000 jobs
(2,674 GPUs, mostly of one GPU) the 1,024-GPU SuperPOD. The replay reports the utilisation
actually reached within the arrival window and the mean number of waiting jobs beside it.

**Foundation-model-shaped workload** (:func:`foundation_model_jobs`): the arrival times and
durations of a real trace, with job sizes drawn (seeded) from :data:`FM_SIZE_WEIGHTS`, chosen
to match what Shanghai AI Lab published for its Kalos LLM cluster (AcmeTrace, Hu et al.,
NSDI'24: about 20,000 GPU jobs in 4 months, 26.8 GPUs per GPU job on average, at most
1,024; most GPU time in multi-node pretraining). The weights give a mean of 26.9 GPUs before
capping sizes at the instance's GPUs. Shapes: up to 8 GPUs, one unit on one node asking the
GPU type's NVLink bandwidth; 16 and more, TP 8 x PP (2 or 4 stages for 30 % of jobs of 4+
nodes) x DP replicas; 30 % of multi-replica jobs of at most one leaf's nodes ask
``maxHopCount: 1`` between replicas; half of the jobs pin the fastest GPU family present,
the rest tolerate every family present.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, field

from hyperplace.errors import InputError
from hyperplace.instances.generator import model_parallel_job, small_job
from hyperplace.models import Instance, TrainingJob
from hyperplace.models.instance import in_queue
from hyperplace.sim.jobs import SimJob
from hyperplace.sim.speed import SpeedModel
from hyperplace.sim.traces import Trace, TraceRow

# The model draw by GPU count: (largest GPU count, [(preset, weight)]). Sizes follow what
# each family is trained on in public recipes (a 1-GPU job fine-tunes at most an 8B model,
# a job of 128+ GPUs pretrains 70B and more); the weights are our documented assumption.
MODEL_DRAW: tuple[tuple[int, tuple[tuple[str, float], ...]], ...] = (
    (1, (("opt-350m", 0.5), ("gpt-neo-2.7b", 0.35), ("llama3-8b", 0.15))),
    (8, (("gpt-neo-2.7b", 0.3), ("llama3-8b", 0.45), ("opt-30b", 0.25))),
    (64, (("llama3-8b", 0.35), ("opt-30b", 0.25), ("mixtral-8x7b", 0.2), ("llama3-70b", 0.2))),
    (1 << 30, (("llama3-70b", 0.6), ("gpt3-175b", 0.25), ("llama3-405b", 0.15))),
)
PREDICTION_SIGMA = 0.5
# arrivals are never squeezed into less than this (or their own span): the utilisation
# within so short a window is the ramp-up, not contention
MIN_WINDOW_S = 3600.0


def draw_model(name: str, gpus: int, seed: int = 0) -> str:
    """The seeded model draw of the mapping rule for a job of ``gpus`` GPUs."""
    rng = random.Random(f"models-{seed}-{name}")
    for top, choices in MODEL_DRAW:
        if gpus <= top:
            return rng.choices([m for m, _ in choices], [w for _, w in choices])[0]
    raise AssertionError("unreachable: the last MODEL_DRAW row takes every size")


def predicted_work(name: str, work_s: float, sigma: float, seed: int = 0) -> float:
    """``work x exp(N(0, sigma))``, seeded per job (the mapping rule's predictions)."""
    if sigma <= 0:
        return work_s
    rng = random.Random(f"prediction-{seed}-{name}")
    return work_s * math.exp(rng.gauss(0.0, sigma))


def with_predictions(jobs: list[SimJob], sigma: float = PREDICTION_SIGMA, seed: int = 0
                     ) -> list[SimJob]:
    """Give every job its predicted work (in place; see the mapping rule)."""
    if not math.isfinite(sigma) or sigma < 0:
        raise ValueError(f"the prediction error must be finite and >= 0, got {sigma}")
    for j in jobs:
        j.predicted_work_s = predicted_work(j.name, j.work_s, sigma, seed)
    return jobs

GPUS_PER_NODE = 8

# AcmeTrace (NSDI'24) Kalos: mean 26.8 GPUs per GPU job, up to 1,024. These weights give 26.9.
FM_SIZE_WEIGHTS: dict[int, float] = {
    1: 0.28, 2: 0.08, 4: 0.12, 8: 0.22, 16: 0.09, 32: 0.08, 64: 0.06, 128: 0.04,
    256: 0.02, 512: 0.008, 1024: 0.002,
}


@dataclass
class Workload:
    """Jobs ready to replay, and what the mapping left out."""

    jobs: list[SimJob]
    dropped_too_large: int = 0
    dropped_constraints: int = 0
    trace_skipped: int = 0
    # the first dropped job and the first dropped type constraint, for the command's note
    unfit_example: str = ""
    untyped_example: str = ""
    notes: list[str] = field(default_factory=list)


def instance_types(instance: Instance) -> dict[str, int]:
    """GPU type (catalog name) -> GPUs of that type in the instance."""
    out: Counter[str] = Counter()
    for c in instance.clusters:
        for n in c.nodes:
            out[instance.catalog.get(n.gpu_type).name] += n.gpu_count
    return dict(out)


def _selector(types: tuple[str, ...], instance: Instance) -> tuple[str | None, bool]:
    """(toleration value or None, constraint dropped?) for a trace's allowed types."""
    if not types:
        return None, False
    present = instance_types(instance)
    keep = [t for t in present if any(instance.catalog.get(t).matches(x) for x in types)]
    if not keep:
        return None, True
    return "|".join(keep), False


def _eligible_gpus(job: TrainingJob, instance: Instance,
                   memo: dict[tuple[str, ...], int] | None = None) -> int:
    units = job.units()
    key = tuple(sorted({u.gpu_types or "" for u in units}))
    if memo is not None and key in memo:  # it depends on the units' accepted types only
        return memo[key]
    best = 0
    for c in instance.clusters:
        total = 0
        for n in c.nodes:
            t = instance.catalog.get(n.gpu_type)
            if all(u.gpu_types is None or t.matches(u.gpu_types) for u in units):
                total += n.gpu_count
        best = max(best, total)
    if memo is not None:
        memo[key] = best
    return best


def manifest_for(name: str, gpus: int, tolerate: str | None, model: str = "trace"
                 ) -> TrainingJob:
    """The mapping rule of the module docstring for one trace row."""
    if gpus <= GPUS_PER_NODE:
        return small_job(name, model, gpus, tolerate=tolerate)
    return model_parallel_job(name, model, replicas=math.ceil(gpus / GPUS_PER_NODE),
                              tolerate=tolerate, memory_gb=None, dp_ib_gbps=None)


def _queued(manifest: TrainingJob, trace: Trace, row: TraceRow, instance: Instance
            ) -> tuple[TrainingJob, str]:
    try:
        return in_queue(manifest, row.queue, instance)
    except ValueError as exc:
        raise InputError(f"line {row.line}: queue: {exc}", source=trace.source) from None


def trace_jobs(trace: Trace, instance: Instance, seed: int = 0, drop_unfit: bool = False
               ) -> Workload:
    """The trace's rows as jobs on ``instance`` (the mapping rule above); a row that cannot
    fit the empty instance is refused, or dropped and counted with ``drop_unfit``."""
    out = Workload(jobs=[], trace_skipped=trace.skipped)
    memo: dict[tuple[str, ...], int] = {}
    for row in trace.rows:
        tolerate, dropped = _selector(row.gpu_types, instance)
        out.dropped_constraints += dropped
        if dropped and not out.untyped_example:
            out.untyped_example = f"line {row.line}: gpu_type {'|'.join(row.gpu_types)!r}"
        model = row.model or draw_model(row.name, row.gpus, seed)
        manifest = manifest_for(row.name, row.gpus, tolerate, model)
        gpus = manifest.total_gpus
        eligible = _eligible_gpus(manifest, instance, memo)
        if gpus > eligible:
            of = f" of type {tolerate}" if tolerate else ""
            asked = f"{row.gpus:,} GPUs" + (f" (as {gpus:,})" if gpus != row.gpus else "")
            why = (f"line {row.line}: num_gpus: {asked}, but the instance has {eligible:,} "
                   f"GPUs{of} in one cluster")
            if not drop_unfit:
                raise InputError(f"{why}: the job can never run, so a replay would wait for "
                                 "it forever (drop such jobs with --drop-unfit)",
                                 source=trace.source)
            out.dropped_too_large += 1
            out.unfit_example = out.unfit_example or why
            continue
        manifest, queue = _queued(manifest, trace, row, instance)
        out.jobs.append(SimJob(name=row.name, submit_s=row.submit_s, work_s=row.duration_s,
                               gpus=gpus, manifest=manifest, source=f"{trace.source}:{row.line}",
                               queue=queue))
    return out


def foundation_model_jobs(trace: Trace, instance: Instance, seed: int = 0) -> Workload:
    """The foundation-model-shaped workload of the module docstring (seeded)."""
    rng = random.Random(f"fm-{seed}")
    present = instance_types(instance)
    capacity = max((sum(n.gpu_count for n in c.nodes) for c in instance.clusters), default=0)
    families = sorted({instance.catalog.get(t).family for t in present})
    fastest = max(present, key=lambda t: instance.catalog.get(t).bf16_tflops)
    fast_family = instance.catalog.get(fastest).family
    nodes_per_leaf = _nodes_per_leaf(instance)
    sizes = [s for s in FM_SIZE_WEIGHTS if s <= capacity]
    weights = [FM_SIZE_WEIGHTS[s] for s in sizes]
    out = Workload(jobs=[], trace_skipped=trace.skipped)
    for i, row in enumerate(trace.rows):
        gpus = rng.choices(sizes, weights)[0]
        pinned = rng.random() < 0.5
        tolerate = fast_family.lower() if pinned else "|".join(f.lower() for f in families)
        name = f"fm-{i:05d}"
        model = row.model or draw_model(name, gpus, seed)
        if gpus <= GPUS_PER_NODE:
            nvlink = min(instance.catalog.get(t).nvlink_gbps for t in present
                         if not pinned or instance.catalog.get(t).family == fast_family)
            manifest = small_job(name, model, gpus, tolerate=tolerate,
                                 nvlink_gbps=nvlink if gpus > 1 else None)
        else:
            nodes = gpus // GPUS_PER_NODE
            stages = 1
            if nodes >= 4 and rng.random() < 0.3:
                stages = rng.choice((2, 4))
            replicas = nodes // stages
            hops = 1 if (replicas >= 2 and nodes <= nodes_per_leaf and rng.random() < 0.3) else None
            manifest = model_parallel_job(name, model, replicas=replicas, pipeline_stages=stages,
                                          tolerate=tolerate, memory_gb=None, dp_ib_gbps=None,
                                          dp_max_hops=hops)
        if manifest.total_gpus > _eligible_gpus(manifest, instance):
            out.dropped_too_large += 1
            out.unfit_example = out.unfit_example or (
                f"{name}: {manifest.total_gpus} GPUs of type {tolerate}")
            continue
        manifest, queue = _queued(manifest, trace, row, instance)
        out.jobs.append(SimJob(name=name, submit_s=row.submit_s, work_s=row.duration_s,
                               gpus=manifest.total_gpus, manifest=manifest,
                               source=f"{trace.source}:{row.line}", queue=queue))
    return out


def _nodes_per_leaf(instance: Instance) -> int:
    best = 1
    for c in instance.clusters:
        doms = c.network.domains(1) if 1 in c.network.radii else {}
        best = max([best, *(len(v) for v in doms.values())])
    return best


def _speed(speed: SpeedModel | Instance) -> SpeedModel:
    return speed if isinstance(speed, SpeedModel) else SpeedModel(speed)


def _shares(jobs: list[SimJob], sm: SpeedModel) -> list[tuple[float, float]]:
    """Per job: (fraction of the instance it holds while running, its run time at the
    instance's mean speed for its work)."""
    total = max(sum(sm.type_counts.values()), 1)
    out = []
    for j in jobs:
        cap = max(sm.capacity(j.manifest), 1e-9)
        out.append((j.gpus / total, j.work_s * total / cap))
    return out


def _load(shares: list[tuple[float, float]], submits: list[float], factor: float) -> float:
    t0 = submits[0]
    span = (submits[-1] - t0) * factor
    if span <= 0:
        return math.inf
    end = t0 + span
    held = sum(frac * min(run, end - (t0 + (s - t0) * factor))
               for (frac, run), s in zip(shares, submits))
    return held / span


def offered_load(jobs: list[SimJob], speed: SpeedModel | Instance) -> float:
    """Offered work over the instance's capacity at each type's speed for that work, within
    the arrival window (module docstring)."""
    if not jobs:
        return 0.0
    return _load(_shares(jobs, _speed(speed)), [j.submit_s for j in jobs], 1.0)


def max_offered_load(jobs: list[SimJob], speed: SpeedModel | Instance) -> float:
    """The load the jobs offer as their arrivals are squeezed together (the supremum):
    ``sum_j gpus_j x (1 - (submit_j - first) / window) / GPUs``."""
    if len(jobs) < 2 or jobs[-1].submit_s <= jobs[0].submit_s:
        return math.inf
    total = max(sum(_speed(speed).type_counts.values()), 1)
    t0, span = jobs[0].submit_s, jobs[-1].submit_s - jobs[0].submit_s
    return sum(j.gpus * (1 - (j.submit_s - t0) / span) for j in jobs) / total


def scale_to_load(jobs: list[SimJob], speed: SpeedModel | Instance, load: float
                  ) -> str | None:
    """Stretch or squeeze the jobs' submit times (in place) to offered load ``load`` (the
    load falls as the window stretches: found by bisection on the stretch factor).

    The arrivals are never squeezed into less than ``min(MIN_WINDOW_S, their own span)``: a
    load the jobs can offer only as a burst, or not at all, is replayed at the most they
    offer over that window, and the returned note says so (None when ``load`` was met).
    """
    if load <= 0 or len(jobs) < 2 or jobs[-1].submit_s <= jobs[0].submit_s:
        return None
    shares = _shares(jobs, _speed(speed))
    submits = [j.submit_s for j in jobs]
    span = submits[-1] - submits[0]
    floor = min(MIN_WINDOW_S, span) / span  # the smallest stretch factor allowed
    note = None
    if _load(shares, submits, floor) < load:
        factor = floor
        note = (f"the window's {len(jobs)} jobs offer at most "
                f"{_load(shares, submits, factor):.3g} of load {load:g} over "
                f"{factor * span / 3600:.2g} h (fewer GPUs asked than the instance has, or "
                f"only as a burst); replayed at that: give more jobs (--window, --jobs, "
                "--repeat) for more contention")
    else:
        lo, hi = floor, max(1.0, floor)
        while _load(shares, submits, hi) > load and hi < 1e12:
            hi *= 2
        for _ in range(200):
            mid = math.sqrt(lo * hi)
            if _load(shares, submits, mid) > load:
                lo = mid
            else:
                hi = mid
            if hi / lo < 1 + 1e-12:
                break
        factor = math.sqrt(lo * hi)
    t0 = jobs[0].submit_s
    for j in jobs:
        j.submit_s = t0 + (j.submit_s - t0) * factor
    return note
