"""What the federation replays share: the one-cluster refusal, the speed of a split job,
part manifests and the per-cluster plans the independent checker sees.

**Speed of a split job.** A job placed whole in one member cluster runs at the speed of THE
speed model (:class:`hyperplace.sim.speed.SpeedModel` over
:func:`hyperplace.costmodel.speed.job_speed`), as in every single-cluster replay. A job
split over clusters runs at the speed the federation's pricing predicts: its *slowest
stage* (the one speed model's speed of the job on the part of the slowest cluster, at the
job's total GPU count, with that part's network spread) times the *cross-cluster penalty*
of :class:`hyperplace.federation.pricing.Pricer` (the layer-split cost model): the step
time of the whole job on the slowest part's GPU type over the split's step time (WAN
activations between pipeline stages, the hierarchical WAN all-reduce between replicas),
at most 1 (a split never runs faster than its slowest stage alone). A split the pricing
cannot run (no WAN link on the ring, no layer split fits) runs at ``1 /
DEFAULT_MAX_SLOWDOWN`` of its slowest stage, the slowest split the federation engine
itself admits.

**Jobs whose model does not fit their GPUs.** The replay's workload draws a model per job
from its GPU count (:mod:`hyperplace.sim.workload`) without a memory check; the
federation's pricing checks memory and refuses, e.g., a 30B model on 2 GPUs anywhere. Such
a job (no GPU type of the federation holds it whole by the pricing) is priced as the
default model for its GPU count (:data:`hyperplace.costmodel.speed.DEFAULT_BY_GPUS`, the
one speed model's own rule for a job naming no model) so that every policy runs the same
jobs; its speed on a placement stays the one speed model's, as for every peer. The run's
notes count them.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from hyperplace.baselines.common import JobOutcome, build_plan
from hyperplace.check import Violation, check
from hyperplace.errors import InputError
from hyperplace.federation.asplaced import Location, cluster_instance
from hyperplace.federation.pricing import Pricer
from hyperplace.federation.problem import DEFAULT_MAX_SLOWDOWN, FederatedJob, from_training_job
from hyperplace.models import Instance, PlacementPlan, TrainingJob
from hyperplace.models.job import GroupType
from hyperplace.models.plan import GPURef
from hyperplace.sim.speed import SpeedModel

MIN_CLUSTERS = 2
GPU = tuple[str, int]


def require_federation(instance: Instance) -> None:
    """A federation replay needs at least two member clusters (one line, exit 2)."""
    n = len(instance.clusters)
    if n < MIN_CLUSTERS:
        raise InputError(f"a federation policy needs at least {MIN_CLUSTERS} member clusters; "
                         f"this instance has {n} (use a single-cluster policy, or an "
                         "instance such as seed-beijing-shanghai)",
                         source=instance.name, path="spec.clusters")


@dataclass
class FederatedSpeed(SpeedModel):
    """The one speed model, except for the jobs a federation policy split this round: the
    speed it priced for them (:func:`split_speed`), handed over once at their start."""

    split: dict[str, float] = field(default_factory=dict)

    def speed(self, job: TrainingJob, gpus_by_unit: dict[str, list[GPU]]) -> float:
        priced = self.split.pop(job.name, None)
        return priced if priced is not None else super().speed(job, gpus_by_unit)


def split_speed(speed: SpeedModel, pricer: Pricer, fjob: FederatedJob, manifest: TrainingJob,
                by_cluster: dict[str, dict[str, list[GPU]]], step_s: float | None
                ) -> tuple[float, float]:
    """(speed, penalty) of ``manifest`` split as ``by_cluster`` (cluster -> unit -> GPUs)
    with the federation pricing's step ``step_s`` (module docstring)."""
    per = {c: SpeedModel.speed(speed, manifest, units) for c, units in by_cluster.items()}
    slow = min(per, key=lambda c: (per[c], c))
    node = next(n for gpus in by_cluster[slow].values() for n, _ in gpus)
    gpu_type = speed.instance.catalog.get(speed.instance.node_index[node][1].gpu_type).name
    mono = pricer.monolithic(fjob, Location(slow, gpu_type))
    if step_s is None or not math.isfinite(step_s) or step_s <= 0 or not mono.feasible \
            or not math.isfinite(mono.step_time_s):
        penalty = 1.0 / DEFAULT_MAX_SLOWDOWN
    else:
        penalty = min(1.0, mono.step_time_s / step_s)
    return per[slow] * penalty, penalty


def priced_job(manifest: TrainingJob, pricer: Pricer, instance: Instance
               ) -> tuple[FederatedJob, bool]:
    """The job as the federation prices it, and whether it had to be priced as the default
    model for its GPU count (module docstring)."""
    from hyperplace.costmodel.speed import DEFAULT_BY_GPUS
    from hyperplace.models.model_spec import model_preset

    fj = from_training_job(manifest)
    sel = fj.type_selector()
    catalog = instance.catalog
    where: dict[str, str] = {}
    for c in instance.clusters:
        for n in c.nodes:
            t = catalog.get(n.gpu_type)
            if sel is None or t.matches(sel):
                where.setdefault(t.name, c.name)
    if any(pricer.monolithic(fj, Location(c, t)).feasible for t, c in where.items()):
        return fj, False
    default = next(p for limit, p in DEFAULT_BY_GPUS if fj.gpus <= limit)
    if default == fj.model.name:
        return fj, False
    return dataclasses.replace(fj, model=model_preset(default), model_note=(
        f"{fj.name}: {fj.model.name} does not fit {fj.gpus} GPUs' memory by the pricing; "
        f"priced as {default}, the default for {fj.gpus} GPUs")), True


PIPELINE_FORM_STAGES = 2


def pipeline_form(fj: FederatedJob, stages: int = PIPELINE_FORM_STAGES) -> FederatedJob | None:
    """The job as ``stages`` pipeline stages of its own tensor-parallel group, for a split
    across member clusters (None: it has no such form).

    A job that names no parallelism (or ``auto``) leaves its layout to the system, and the
    replay's mapping writes it as ``D`` data-parallel replicas of one TP group, one stage.
    Split by replicas, such a job all-reduces its gradients over the WAN every step (for a
    30B model on 100 Gb/s, seconds per step); split by *pipeline stages* it passes only
    activations between the clusters, with the layer split the cost model picks per GPU
    type (asymmetric: more layers on the faster type). So for the split shapes the engine
    offers the federation round the same GPUs as ``stages`` consecutive stages of the TP
    group times ``D / stages`` replicas (``D`` divisible by ``stages``); the round prices
    that form's splits with the layer-split cost model (:class:`Pricer`), and the replay
    runs a split at the speed of :func:`split_speed` (the one speed model's, times that
    form's cross-cluster penalty). Jobs that declare a parallelism, that already have
    pipeline stages, or that are one unit keep their own form."""
    par = fj.job.spec.parallelism
    if not (par is None or par == "auto") or fj.stages != 1 or fj.dp_group is None \
            or fj.replicas < stages or fj.replicas % stages:
        return None
    tp = fj.stage_groups[0]
    more = [tp.model_copy(update={"name": f"pipeline-stage-{k}",
                                  "type": GroupType.PIPELINE_PARALLEL})
            for k in range(1, stages)]
    return dataclasses.replace(fj, stage_groups=[tp, *more], replicas=fj.replicas // stages)


def part_manifest(job: TrainingJob, cluster: str, replicas: int) -> TrainingJob:
    """The job's part in one member cluster: its own groups, ``replicas`` data-parallel
    copies, named ``<job>-<cluster>`` (as the federation names its sub-jobs)."""
    data = job.model_dump(by_alias=True, exclude_none=True)
    data["metadata"]["name"] = f"{job.name}-{cluster}"
    data["spec"]["replicaCount"] = replicas
    return TrainingJob.model_validate(data)


@dataclass
class ClusterCheck:
    """One member cluster's plan of a round (the parts started or admitted there) and the
    instance it was made on: what :func:`hyperplace.check.check` is run on."""

    cluster: str
    instance: Instance
    plan: PlacementPlan


def cluster_plan(round_instance: Instance, cluster: str, solver: str,
                 parts: dict[str, tuple[TrainingJob, dict[str, list[GPURef]]]],
                 runtime_s: float = 0.0) -> ClusterCheck:
    """``parts``: sub-job name -> (manifest, unit -> GPUs), all in ``cluster``."""
    inst = cluster_instance(round_instance, cluster, [m for m, _ in parts.values()])
    outcomes = {name: JobOutcome(units=units) for name, (_, units) in parts.items()}
    return ClusterCheck(cluster, inst, build_plan(inst, solver, outcomes, runtime_s))


def violations(checks: list[ClusterCheck]) -> list[Violation]:
    """The independent checker on every member cluster's plan of the round."""
    out: list[Violation] = []
    for c in checks:
        for v in check(c.plan, c.instance):
            out.append(v.model_copy(update={"message": f"member cluster {c.cluster}: "
                                                       f"{v.message}"}))
    return out


def as_refs(gpus: list[GPU]) -> list[GPURef]:
    return [GPURef(node=n, gpu=i) for n, i in gpus]


class SplitPricing:
    """What the federation policies keep over a replay: one :class:`Pricer` (layer splits
    priced once per job and locations), the speed model that carries split speeds, each
    job's priced form and pipeline form, the member-cluster plans of the round for the
    checker and the split starts. A mixin: the engine calls :meth:`init_pricing` and keeps
    a ``stats`` dict with ``priced_as_default``."""

    instance: Instance
    stats: dict

    def init_pricing(self, instance: Instance) -> None:
        self.pricer = Pricer(instance.federation, instance.catalog)
        self.fs: FederatedSpeed | None = None
        self._fjobs: dict[str, FederatedJob] = {}
        self._pforms: dict[str, FederatedJob | None] = {}
        self._checks: list[ClusterCheck] = []
        self.splits: list = []  # SplitRecord (hyperplace.fedsim.engine)

    def speed_model(self, instance: Instance, network: bool) -> FederatedSpeed:
        self.fs = FederatedSpeed(instance, network=network)
        return self.fs

    def priced_form(self, manifest: TrainingJob, split: bool = True) -> FederatedJob:
        """The job as a federation round prices it: its :func:`pipeline_form` when it may
        split and has one, else its own form (priced as the default model when its drawn
        model does not fit its memory: :func:`priced_job`)."""
        name = manifest.name
        fj = self._fjobs.get(name)
        if fj is None:
            fj, default = priced_job(manifest, self.pricer, self.instance)
            self._fjobs[name] = fj
            self.stats["priced_as_default"] += int(default)
            self._pforms[name] = pipeline_form(fj)
        return (self._pforms.get(name) if split else None) or fj
