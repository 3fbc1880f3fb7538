"""Federation problem data: member clusters in their current state, and the jobs to split.

A job to federate is a pipeline of ``P`` stages (its model-parallel groups, in the order
written; a job with only a DataParallel group has one stage) times ``D`` data-parallel
replicas (``replicaCount``). One *unit* is one stage of one replica: ``gpusPerGroup`` GPUs
kept inside one cluster (tensor parallelism never crosses a cluster). Shapes decide which
cluster holds which units: every unit of a job in one cluster (monolithic), whole pipeline
stages in different clusters (pipeline), or whole replicas in different clusters
(data-parallel, hierarchical all-reduce).

Jobs come as a ``FoundationModelTrainingJob`` (the model is ``spec.model``, a preset name)
or as a Volcano Global ``HyperJob`` whose replicated job has ``splitPolicy.mode: auto``:
``accelerators`` GPUs of ``acceleratorType`` in pods of the template's ``nvidia.com/gpu``
limit, with the model and the pipeline depth in the annotations ``hyperplace.io/model``
and ``hyperplace.io/pipeline-stages`` (default 1), priority in ``hyperplace.io/priority``.
Karmada-style ordered ``clusterAffinities`` come from a ``PropagationPolicy`` whose
``resourceSelectors`` name the job (or from ``hyperplace.io/cluster-affinities``:
``a,b;c`` = group 1 {a, b}, then group 2 {c}).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hyperplace.errors import InputError
from hyperplace.models.gpu import default_catalog
from hyperplace.models.hyperjob import HyperJob, ReplicatedJob
from hyperplace.models.instance import Instance
from hyperplace.models.job import (
    MODEL_PARALLEL,
    PRIORITY_LEVELS,
    GPURequirements,
    GroupType,
    InterNodeConnectivity,
    ObjectMeta,
    ResourceGroup,
    TrainingJob,
    TrainingJobSpec,
)
from hyperplace.models.model_spec import ModelSpec, model_preset

POLICIES = ("throughput", "cost", "binpack")
DEFAULT_MICROBATCHES = 8
# A split slower than this many times the job's best single-cluster step is refused:
# the job waits instead (the bench reports what waiting costs). Tunable per call.
DEFAULT_MAX_SLOWDOWN = 3.0
ANNOTATION_MODEL = "hyperplace.io/model"
ANNOTATION_STAGES = "hyperplace.io/pipeline-stages"
ANNOTATION_PRIORITY = "hyperplace.io/priority"
ANNOTATION_MICROBATCHES = "hyperplace.io/microbatches"
ANNOTATION_AFFINITIES = "hyperplace.io/cluster-affinities"
ANNOTATION_ZERO = "hyperplace.io/zero"
ANNOTATION_RECOMPUTE = "hyperplace.io/recompute"
# Megatron-LM's distributed optimizer (ZeRO-1 over the data-parallel group) is the usual
# setting for large runs; an annotation overrides it per job.
DEFAULT_ZERO = 1
GPU_RESOURCE = "nvidia.com/gpu"


@dataclass(frozen=True)
class AffinityGroup:
    """One Karmada ``clusterAffinities`` term: a named, ordered fallback group."""

    name: str
    clusters: tuple[str, ...]


@dataclass
class FederatedJob:
    """A job as the federation round sees it (see the module docstring)."""

    name: str
    kind: str
    priority: int
    model: ModelSpec
    job: TrainingJob  # canonical form; sub-jobs are cut from it
    stage_groups: list[ResourceGroup]
    dp_group: ResourceGroup | None
    replicas: int
    microbatches: int = DEFAULT_MICROBATCHES
    zero: int = DEFAULT_ZERO
    recompute: bool = False
    max_domains: int | None = None
    cluster_names: tuple[str, ...] = ()
    affinities: list[AffinityGroup] = field(default_factory=list)
    hyperjob: HyperJob | None = None
    replicated_job: str | None = None
    namespace: str | None = None
    model_note: str = ""  # how the model was chosen when the job names none known

    @property
    def stages(self) -> int:
        return len(self.stage_groups)

    def unit_gpus(self, position: int) -> int:
        return self.stage_groups[position].gpus_per_group

    @property
    def gpus(self) -> int:
        return self.replicas * sum(g.gpus_per_group for g in self.stage_groups)

    @property
    def replica_gpus(self) -> int:
        return sum(g.gpus_per_group for g in self.stage_groups)

    def type_selector(self) -> str | None:
        return self.job.allowed_types(self.stage_groups[0])

    def affinity_groups(self, all_clusters: list[str]) -> list[AffinityGroup]:
        """Groups to try in order; clusterNames narrows every group."""
        groups = self.affinities or [AffinityGroup("all", tuple(all_clusters))]
        if self.cluster_names:
            allowed = set(self.cluster_names)
            groups = [AffinityGroup(g.name, tuple(c for c in g.clusters if c in allowed))
                      for g in groups]
        return groups


def _priority(value: str | int | None, where: str) -> int:
    if value is None:
        return PRIORITY_LEVELS["normal"]
    if isinstance(value, int) or str(value).lstrip("-").isdigit():
        return int(value)
    if str(value).lower() in PRIORITY_LEVELS:
        return PRIORITY_LEVELS[str(value).lower()]
    raise InputError(f"unknown priority {value!r}; use one of {', '.join(PRIORITY_LEVELS)} "
                     "or an integer", path=where)


def parse_affinities(text: str, where: str) -> list[AffinityGroup]:
    """``a,b;c`` -> [group-0 {a, b}, group-1 {c}]."""
    groups = []
    for i, part in enumerate(text.split(";")):
        names = tuple(n.strip() for n in part.split(",") if n.strip())
        if not names:
            raise InputError(f"affinity group {i} names no cluster", path=where)
        groups.append(AffinityGroup(f"group-{i}", names))
    return groups


def _model(name: str, where: str) -> ModelSpec:
    try:
        return model_preset(name)
    except InputError as exc:
        raise InputError(exc.message, path=where) from None


#: What a job that names no known model is priced as (README "Federation"): a dense 8B
#: transformer (the smallest bundled LLM preset). The job is still placed and federated,
#: whole or by replicas, and the plan's notes say it was priced so.
DEFAULT_MODEL = "llama3-8b"
#: Architecture fields a job may give instead of a preset (annotations, integers).
ARCH_ANNOTATIONS = {"layers": "num_layers", "hidden": "hidden_size", "heads": "num_heads",
                    "seq": "seq_length", "vocab": "vocab_size", "experts": "num_experts",
                    "experts-per-token": "experts_per_token", "ffn-hidden": "ffn_hidden_size"}


def job_model(job: TrainingJob) -> tuple[ModelSpec, str]:
    """(model, note) as real jobs give it: a bundled preset (``spec.model``), a model file
    ``spec.model`` points to (YAML/JSON, :func:`load_model_file`), architecture fields in
    ``hyperplace.io/model-<field>`` annotations (layers, hidden, heads, seq, vocab, experts,
    ...); else :data:`DEFAULT_MODEL`, and the note says so."""
    from pathlib import Path

    name = job.spec.model
    try:
        return model_preset(name), ""
    except InputError:
        pass
    if name.endswith((".yaml", ".yml", ".json")) and Path(name).is_file():
        from hyperplace.models.model_file import load_model_file

        return load_model_file(name), ""
    ann = job.metadata.annotations
    fields: dict[str, int] = {}
    for key, attr in ARCH_ANNOTATIONS.items():
        raw = ann.get(f"hyperplace.io/model-{key}")
        if raw is not None:
            if not raw.isdigit() or int(raw) < 1:
                raise InputError(f"must be a positive integer, got {raw!r}",
                                 path=f"{job.name}: metadata.annotations.hyperplace.io/model-{key}")
            fields[attr] = int(raw)
    if {"num_layers", "hidden_size", "num_heads"} <= set(fields):
        fields.setdefault("seq_length", 4096)
        try:
            return ModelSpec(name=name, **fields), ""
        except ValueError as exc:
            raise InputError(str(exc).splitlines()[0],
                             path=f"{job.name}: metadata.annotations") from None
    return (model_preset(DEFAULT_MODEL),
            f"{job.name}: model {name!r} is no bundled preset, model file or architecture: "
            f"priced as {DEFAULT_MODEL} (the default)")


def from_training_job(job: TrainingJob) -> FederatedJob:
    """A FoundationModelTrainingJob: stages = its model-parallel groups, replicas = replicaCount."""
    mp = [g for g in job.spec.resource_groups if g.type in MODEL_PARALLEL]
    dp = next((g for g in job.spec.resource_groups if g.type == GroupType.DATA_PARALLEL), None)
    aux = [g for g in job.spec.resource_groups if g.type == GroupType.AUXILIARY]
    if aux:
        raise InputError("Auxiliary groups are not federated (they are one unit for the whole "
                         "job, outside the pipeline); place this job with `hyperplace solve`",
                         path=f"{job.name}: spec.resourceGroups")
    stages = mp or ([dp] if dp else [])
    ann = job.metadata.annotations
    model, model_note = job_model(job)
    affinities = (parse_affinities(ann[ANNOTATION_AFFINITIES],
                                   f"{job.name}: metadata.annotations")
                  if ANNOTATION_AFFINITIES in ann else [])
    return FederatedJob(
        name=job.name, kind="FoundationModelTrainingJob", priority=job.priority,
        model=model, model_note=model_note, job=job,
        stage_groups=list(stages), dp_group=dp if mp else None,
        replicas=job.spec.replica_count, microbatches=_microbatches(ann, job.name),
        affinities=affinities, namespace=job.metadata.namespace,
        **_memory_options(ann, job.name),
    )


def _microbatches(ann: dict[str, str], name: str) -> int:
    raw = ann.get(ANNOTATION_MICROBATCHES)
    if raw is None:
        return DEFAULT_MICROBATCHES
    if not raw.isdigit() or int(raw) < 1:
        raise InputError(f"must be a positive integer, got {raw!r}",
                         path=f"{name}: metadata.annotations.{ANNOTATION_MICROBATCHES}")
    return int(raw)


def _memory_options(ann: dict[str, str], name: str) -> dict:
    zero = ann.get(ANNOTATION_ZERO, str(DEFAULT_ZERO))
    if zero not in ("0", "1", "2", "3"):
        raise InputError(f"must be 0, 1, 2 or 3, got {zero!r}",
                         path=f"{name}: metadata.annotations.{ANNOTATION_ZERO}")
    rec = ann.get(ANNOTATION_RECOMPUTE, "false").lower()
    if rec not in ("true", "false"):
        raise InputError(f"must be true or false, got {rec!r}",
                         path=f"{name}: metadata.annotations.{ANNOTATION_RECOMPUTE}")
    return {"zero": int(zero), "recompute": rec == "true"}


def _pod_gpus(rj: ReplicatedJob, where: str) -> int:
    """GPUs per pod: the largest ``nvidia.com/gpu`` limit (or request) of the template's tasks."""
    best = 0
    for task in rj.template_spec.get("tasks", []) or []:
        spec = ((task or {}).get("template") or {}).get("spec") or {}
        for c in spec.get("containers", []) or []:
            res = (c or {}).get("resources") or {}
            for part in ("limits", "requests"):
                value = (res.get(part) or {}).get(GPU_RESOURCE)
                if value is not None:
                    try:
                        best = max(best, int(str(value)))
                    except ValueError:
                        raise InputError(f"{GPU_RESOURCE} must be an integer, got {value!r}",
                                         path=f"{where}.templateSpec.tasks") from None
    return best


#: Resource names ``splitPolicy.acceleratorType`` takes (Volcano Global: the extended
#: resource the accelerators are counted in, not a GPU model).
ACCELERATOR_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")


def _split_gpu_type(rj: Any, accelerator_type: str | None, where: str) -> str | None:
    """The GPU type a split replicated job asks for. Volcano defines
    ``splitPolicy.acceleratorType`` as the resource name (``nvidia.com/gpu``); the GPU model
    then comes from the template's pods (``nvidiaSelector``/required node affinity on
    ``nvidia.com/gpu.product``), any type if they name none. A value without ``/`` is read
    as a GPU type, as hyperplace wrote it before (kept so old files still load)."""
    if accelerator_type is None or "/" not in accelerator_type:
        return accelerator_type
    if accelerator_type not in ACCELERATOR_RESOURCES:
        raise InputError(f"unknown accelerator resource {accelerator_type!r} (one of "
                         f"{', '.join(ACCELERATOR_RESOURCES)})",
                         path=f"{where}.splitPolicy.acceleratorType")
    from hyperplace.instances.importers.jobs import selector_types

    found: set[str] = set()
    for ti, task in enumerate(rj.template_spec.get("tasks", []) or []):
        spec = ((task or {}).get("template") or {}).get("spec") or {}
        sel = selector_types(spec, default_catalog(), "", f"{where}.templateSpec.tasks[{ti}]"
                                                            ".template.spec.")
        if sel:
            found.add(sel)
    if len(found) > 1:
        raise InputError(f"tasks select different GPU types ({', '.join(sorted(found))})",
                         path=f"{where}.templateSpec.tasks")
    return found.pop() if found else None


def from_hyperjob(hj: HyperJob) -> list[FederatedJob]:
    """Each ``splitPolicy.mode: auto`` replicated job becomes one job to federate."""
    ann = hj.metadata.annotations
    out = []
    for i, rj in enumerate(hj.spec.replicated_jobs):
        if rj not in hj.auto_split:
            continue
        where = f"{hj.metadata.name}: spec.replicatedJobs[{i}]"
        sp = rj.split_policy
        assert sp is not None
        if not sp.accelerators:
            raise InputError("splitPolicy.mode auto needs accelerators (total GPUs)",
                             path=f"{where}.splitPolicy.accelerators")
        pod = _pod_gpus(rj, where) or min(8, sp.accelerators)
        if sp.accelerators % pod:
            raise InputError(f"{sp.accelerators} accelerators are not a multiple of the "
                             f"template's {pod} GPUs per pod", path=f"{where}.splitPolicy")
        if ANNOTATION_MODEL not in ann:
            raise InputError(f"the job's model is needed to price a split: add the annotation "
                             f"{ANNOTATION_MODEL}: <preset>",
                             path=f"{hj.metadata.name}: metadata.annotations")
        model = _model(ann[ANNOTATION_MODEL], f"{hj.metadata.name}: metadata.annotations."
                                              f"{ANNOTATION_MODEL}")
        raw_stages = ann.get(ANNOTATION_STAGES, "1")
        if not raw_stages.isdigit() or int(raw_stages) < 1:
            raise InputError(f"must be a positive integer, got {raw_stages!r}",
                             path=f"{hj.metadata.name}: metadata.annotations.{ANNOTATION_STAGES}")
        stages = int(raw_stages)
        units = sp.accelerators // pod
        if units % stages:
            raise InputError(f"{units} pods of {pod} GPUs do not divide into {stages} pipeline "
                             "stages", path=f"{hj.metadata.name}: metadata.annotations."
                                            f"{ANNOTATION_STAGES}")
        req = GPURequirements(accelerator_type=_split_gpu_type(rj, sp.accelerator_type, where))
        kind = GroupType.PIPELINE_PARALLEL if stages > 1 else GroupType.TENSOR_PARALLEL
        groups = [ResourceGroup(name=f"stage-{k}" if stages > 1 else "worker", type=kind,
                                gpus_per_group=pod, gpu_requirements=req)
                  for k in range(stages)]
        dp = ResourceGroup(name="data-parallel", type=GroupType.DATA_PARALLEL, gpus_per_group=1,
                           gpu_requirements=req, inter_node_connectivity=InterNodeConnectivity())
        name = f"{hj.metadata.name}-{rj.name}"
        priority = _priority(ann.get(ANNOTATION_PRIORITY),
                             f"{hj.metadata.name}: metadata.annotations.{ANNOTATION_PRIORITY}")
        job = TrainingJob(metadata=ObjectMeta(name=name, namespace=hj.metadata.namespace),
                          spec=TrainingJobSpec(model=model.name, replica_count=units // stages,
                                               resource_groups=[*groups, dp],
                                               priority=priority))
        affinities = (parse_affinities(ann[ANNOTATION_AFFINITIES],
                                       f"{hj.metadata.name}: metadata.annotations")
                      if ANNOTATION_AFFINITIES in ann else [])
        out.append(FederatedJob(
            name=name, kind="HyperJob", priority=priority, model=model, job=job,
            stage_groups=groups, dp_group=dp, replicas=units // stages,
            microbatches=_microbatches(ann, hj.metadata.name),
            **_memory_options(ann, hj.metadata.name),
            max_domains=hj.spec.max_domains, cluster_names=tuple(rj.cluster_names),
            affinities=affinities, hyperjob=hj, replicated_job=rj.name,
            namespace=hj.metadata.namespace,
        ))
    if not out:
        raise InputError("no replicated job has splitPolicy.mode: auto; nothing to federate",
                         path=f"{hj.metadata.name}: spec.replicatedJobs")
    return out


@dataclass
class FederationProblem:
    """Everything one federation round decides over."""

    instance: Instance
    jobs: list[FederatedJob]
    policy: str = "throughput"
    max_slowdown: float = DEFAULT_MAX_SLOWDOWN
    unpriced: dict[str, str] = field(default_factory=dict)  # queued job -> why it cannot be

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise InputError(f"unknown policy {self.policy!r}; use one of {', '.join(POLICIES)}",
                             path="--policy")
        names = [c.name for c in self.instance.clusters]
        if not names or not any(c.nodes for c in self.instance.clusters):
            raise InputError("the federation has no member cluster with nodes",
                             path="spec.clusters")
        seen: set[str] = set()
        for job in self.jobs:
            if job.name in seen:
                raise InputError(f"job {job.name!r} appears twice", path="jobs")
            seen.add(job.name)
            if job.max_domains is not None and job.max_domains < 1:
                raise InputError("maxDomains must be at least 1 (0 leaves no cluster to run in)",
                                 path=f"{job.name}: spec.maxDomains")
            for c in job.cluster_names:
                if c not in names:
                    raise InputError(f"unknown cluster {c!r} (members: {', '.join(names)})",
                                     path=f"{job.name}: clusterNames")
            for g in job.affinities:
                for c in g.clusters:
                    if c not in names:
                        raise InputError(
                            f"affinity {g.name!r} names unknown cluster {c!r} "
                            f"(members: {', '.join(names)})",
                            path=f"{job.name}: clusterAffinities")

    @property
    def cluster_names(self) -> list[str]:
        return [c.name for c in self.instance.clusters]
