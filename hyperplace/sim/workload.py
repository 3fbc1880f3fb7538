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
* Jobs that cannot fit the empty instance (more GPUs than it has of an accepted type) are
  dropped before the replay and counted, for every policy alike: otherwise a strict FIFO
  would wait for them forever.
* A ``queue`` column names the queue: the manifest gets the ``volcano.sh/queue-name`` label
  for a Volcano queue, else ``kueue.x-k8s.io/queue-name`` (a LocalQueue or ClusterQueue
  name), so the round sees the queue exactly as it would see a submitted job's; a queue the
  instance does not declare is refused with the line.
* Priorities are not taken from traces (Philly has none; Alibaba's QoS is a latency class):
  every job is ``normal``.

**Offered load** (``--load``): GPU-seconds asked per second of the arrival window, over the
instance's GPUs: ``sum(gpus x work) / (window x GPUs)``. Load 1.0 asks for every GPU for the
whole window, on any instance. A target load rescales the submit times (the order, sizes and
durations are kept); ``trace`` keeps the trace's own times.

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
from hyperplace.sim.traces import Trace, TraceRow

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


def _eligible_gpus(job: TrainingJob, instance: Instance) -> int:
    units = job.units()
    best = 0
    for c in instance.clusters:
        total = 0
        for n in c.nodes:
            t = instance.catalog.get(n.gpu_type)
            if all(u.gpu_types is None or t.matches(u.gpu_types) for u in units):
                total += n.gpu_count
        best = max(best, total)
    return best


def manifest_for(name: str, gpus: int, tolerate: str | None) -> TrainingJob:
    """The mapping rule of the module docstring for one trace row."""
    if gpus <= GPUS_PER_NODE:
        return small_job(name, "trace", gpus, tolerate=tolerate)
    return model_parallel_job(name, "trace", replicas=math.ceil(gpus / GPUS_PER_NODE),
                              tolerate=tolerate, memory_gb=None, dp_ib_gbps=None)


def _queued(manifest: TrainingJob, trace: Trace, row: TraceRow, instance: Instance
            ) -> tuple[TrainingJob, str]:
    try:
        return in_queue(manifest, row.queue, instance)
    except ValueError as exc:
        raise InputError(f"line {row.line}: queue: {exc}", source=trace.source) from None


def trace_jobs(trace: Trace, instance: Instance) -> Workload:
    """The trace's rows as jobs on ``instance`` (the mapping rule above)."""
    out = Workload(jobs=[], trace_skipped=trace.skipped)
    for row in trace.rows:
        tolerate, dropped = _selector(row.gpu_types, instance)
        out.dropped_constraints += dropped
        manifest = manifest_for(row.name, row.gpus, tolerate)
        gpus = manifest.total_gpus
        if gpus > _eligible_gpus(manifest, instance):
            out.dropped_too_large += 1
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
        if gpus <= GPUS_PER_NODE:
            nvlink = min(instance.catalog.get(t).nvlink_gbps for t in present
                         if not pinned or instance.catalog.get(t).family == fast_family)
            manifest = small_job(name, "llm", gpus, tolerate=tolerate,
                                 nvlink_gbps=nvlink if gpus > 1 else None)
        else:
            nodes = gpus // GPUS_PER_NODE
            stages = 1
            if nodes >= 4 and rng.random() < 0.3:
                stages = rng.choice((2, 4))
            replicas = nodes // stages
            hops = 1 if (replicas >= 2 and nodes <= nodes_per_leaf and rng.random() < 0.3) else None
            manifest = model_parallel_job(name, "llm", replicas=replicas, pipeline_stages=stages,
                                          tolerate=tolerate, memory_gb=None, dp_ib_gbps=None,
                                          dp_max_hops=hops)
        if manifest.total_gpus > _eligible_gpus(manifest, instance):
            out.dropped_too_large += 1
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


def offered_load(jobs: list[SimJob], gpus: int) -> float:
    """GPU-seconds asked per second of the arrival window, over ``gpus`` GPUs."""
    if not jobs or gpus <= 0:
        return 0.0
    span = jobs[-1].submit_s - jobs[0].submit_s
    if span <= 0:
        return math.inf
    return sum(j.gpus * j.work_s for j in jobs) / (span * gpus)


def scale_to_load(jobs: list[SimJob], gpus: int, load: float) -> list[SimJob]:
    """The same jobs with submit times stretched or squeezed to offered load ``load``."""
    now = offered_load(jobs, gpus)
    if load <= 0 or not math.isfinite(now) or now <= 0:
        return jobs
    factor = now / load
    t0 = jobs[0].submit_s
    for j in jobs:
        j.submit_s = t0 + (j.submit_s - t0) * factor
    return jobs
