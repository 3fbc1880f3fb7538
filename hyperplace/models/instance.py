"""An instance: clusters in their current state plus a pending queue (and a model to split)."""

from __future__ import annotations

from collections import Counter
from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from hyperplace.errors import known_words
from hyperplace.models.base import HPModel
from hyperplace.models.cluster import Cluster, Federation, InterClusterLink
from hyperplace.models.gpu import GPUCatalog, GPUType
from hyperplace.models.job import MODEL_PARALLEL, ObjectMeta, SkippedJob, TrainingJob
from hyperplace.models.limits import MAX_GPUS, MAX_JOBS, MAX_UNITS
from hyperplace.models.node import Node
from hyperplace.models.queue import (
    DEFAULT_QUEUE,
    KUEUE_QUEUE_LABEL,
    VOLCANO_QUEUE_KEYS,
    QueueError,
    QueueSet,
    parse_queues,
)
from hyperplace.models.slices import check_slices


class RunningJob(HPModel):
    """A job already holding GPUs (``node.allocated`` names it): what sharing decisions need
    to know about it. A running job not listed here belongs to the ``default`` queue."""

    name: str = Field(min_length=1, max_length=253)
    queue: str = Field(default=DEFAULT_QUEUE, min_length=1, max_length=253,
                       description="the queue its GPUs count against")
    priority: int = Field(default=2, ge=0, le=1_000_000)
    checkpoint_age_s: float = Field(default=0, ge=0, le=10**9, allow_inf_nan=False,
                                    description="seconds of work since its last checkpoint")
    job: TrainingJob | None = Field(
        default=None, description="its manifest (units, hop limits): what migration and "
                                  "repair need to place it elsewhere; without one it stays")
    remaining_s: float | None = Field(
        default=None, ge=0, le=10**9, allow_inf_nan=False,
        description="predicted seconds until it ends: the over-time schedule's forecasts "
                    "count its GPUs free from then (without it a default is assumed and said)")

    @classmethod
    def started(cls, job: TrainingJob, queue: str) -> "RunningJob":
        """The entry of a pending job that has just started in ``queue``; its priority is
        clamped into this model's range (a manifest's integer priority is unbounded), which
        keeps the order of every priority inside it."""
        return cls(name=job.name, queue=queue, priority=min(max(job.priority, 0), 1_000_000))

    @model_validator(mode="after")
    def _same_name(self) -> "RunningJob":
        if self.job is not None and self.job.name != self.name:
            raise ValueError(f"job.metadata.name: {self.job.name!r} is not the running job's "
                             f"name {self.name!r}")
        return self


class InstanceSpec(HPModel):
    gpu_types: list[GPUType] = Field(default_factory=list, description="user-declared GPU types")
    clusters: list[Cluster] = Field(min_length=1)
    inter_cluster_links: list[InterClusterLink] = Field(default_factory=list)
    jobs: list[TrainingJob] = Field(default_factory=list, max_length=MAX_JOBS,
                                    description="the pending queue")
    skipped: list[SkippedJob] = Field(
        default_factory=list, max_length=MAX_JOBS,
        description="jobs read from Kubernetes workloads that hyperplace does not place "
                    "(no pod asks for a GPU), with the reason; every plan repeats them")
    model: str | None = Field(default=None, description="model preset for the layer split")
    queues: list[dict[str, Any]] = Field(
        default_factory=list, max_length=1000,
        description="Kueue ResourceFlavor/ClusterQueue/LocalQueue/Cohort and Volcano Queue "
                    "documents (see hyperplace.models.queue); none: no quotas")
    running_jobs: list[RunningJob] = Field(default_factory=list, max_length=MAX_JOBS,
                                           description="queue, priority and checkpoint age of "
                                                       "the jobs holding GPUs")
    queue_usage: dict[str, Annotated[float, Field(ge=0, le=1e15)]] = Field(
        default_factory=dict, max_length=1000,
        description="decayed GPU-hours each queue used over earlier rounds (Slurm-style "
                    "fair-share history, hyperplace.models.usage); a queue "
                    "that got less is preferred by the fair-share objective; none: no history")


class Instance(HPModel):
    """``hyperplace/v1`` ``Instance``: what one scheduling round sees."""

    api_version: Literal["hyperplace/v1"] = "hyperplace/v1"
    kind: Literal["Instance"] = "Instance"
    metadata: ObjectMeta
    spec: InstanceSpec

    @model_validator(mode="after")
    def _known_references(self) -> "Instance":
        declared = [t.name for t in self.spec.gpu_types]
        for i, name in enumerate(declared):
            if name in declared[:i]:
                raise ValueError(f"spec.gpuTypes[{i}].name: GPU type {name!r} is declared twice "
                                 "(with different figures)")
        catalog = GPUCatalog(self.spec.gpu_types)
        gpus = sum(n.gpu_count for c in self.spec.clusters for n in c.nodes)
        if gpus > MAX_GPUS:
            raise ValueError(f"spec.clusters: {gpus:,} GPUs, more than the limit of "
                             f"{MAX_GPUS:,} per instance")
        # one pass over the nodes when all is well; the slow one finds the first culprit
        known = all(t in catalog for t in {n.gpu_type for c in self.spec.clusters
                                           for n in c.nodes})
        names = [n.name for c in self.spec.clusters for n in c.nodes]
        if not known or len(set(names)) != len(names):
            seen_nodes: set[str] = set()
            for ci, c in enumerate(self.spec.clusters):
                for ni, n in enumerate(c.nodes):
                    if n.gpu_type not in catalog:
                        raise ValueError(
                            f"spec.clusters[{ci}].nodes[{ni}].gpuType: unknown GPU type "
                            f"{n.gpu_type!r} ({known_words(n.gpu_type, catalog.names())}; declare "
                            "others under spec.gpuTypes)")
                    if n.name in seen_nodes:
                        raise ValueError(f"spec.clusters[{ci}].nodes[{ni}].name: node "
                                         f"{n.name!r} appears twice")
                    seen_nodes.add(n.name)
        names = [j.name for j in self.spec.jobs]
        dup = {n for n, k in Counter(names).items() if k > 1}  # linear: queues reach 5,000
        if dup:
            raise ValueError(f"spec.jobs: duplicate job name {sorted(dup)[0]!r}")
        self._check_queue(catalog)
        self.check_queues(catalog)
        self._check_running_manifests()
        # the federation's own rules on links and cluster names (its clusters and links are
        # validated already: constructing it would validate every cluster again)
        Federation.model_construct(clusters=self.spec.clusters,
                                   links=self.spec.inter_cluster_links).check_links()
        check_slices(self)  # slices divide the NVLink domains they may use (#24)
        return self

    def check_queues(self, catalog: GPUCatalog) -> None:
        """Queue documents parse, and every job (pending or running) and every queue with
        usage history names a known queue."""
        if not self.spec.queues:
            for name in self.spec.queue_usage:
                if name != DEFAULT_QUEUE:
                    raise ValueError(f"spec.queueUsage.{name}: unknown queue {name!r} (no queues "
                                     "are declared: every job is in 'default')")
            return
        types = {n.gpu_type for c in self.spec.clusters for n in c.nodes}
        try:
            qs = parse_queues(((f"spec.queues[{i}]", d) for i, d in enumerate(self.spec.queues)),
                              known_types=types, nodes=self._all_nodes())
        except QueueError as exc:
            raise ValueError(str(exc)) from None
        for ji, job in enumerate(self.spec.jobs):
            name = qs.queue_of(job.metadata.labels, job.metadata.annotations)
            if not qs.known(name):
                raise ValueError(f"spec.jobs[{ji}].metadata.labels: job {job.name!r} names queue "
                                 f"{name!r}, which is not declared (queues: {', '.join(sorted(qs.queues))})")
        for ri, run in enumerate(self.spec.running_jobs):
            if not qs.known(run.queue):
                raise ValueError(f"spec.runningJobs[{ri}].queue: unknown queue {run.queue!r} "
                                 f"(queues: {', '.join(sorted(qs.queues))})")
        for name in self.spec.queue_usage:
            if not qs.known(name):
                raise ValueError(f"spec.queueUsage.{name}: unknown queue {name!r} "
                                 f"(queues: {', '.join(sorted(qs.queues))})")

    def with_queue_documents(self, docs: list[tuple[str, dict[str, Any]]]) -> "Instance":
        """This round with queue documents added, each error naming where it came from.

        ``docs`` are ``(where, document)`` pairs (``queues.yaml: document 2``, ``queues[1]``):
        the documents are parsed against the cluster's GPU types first, so a bad field is
        reported as ``where.field.path`` (:class:`~hyperplace.models.queue.QueueError`);
        then jobs naming undeclared queues are refused (``ValueError``, ``spec.jobs[i]...``).
        ``hyperplace solve --queues``, ``simulate --queues`` and the service use this.
        """
        types = {n.gpu_type for c in self.spec.clusters for n in c.nodes}
        parse_queues(docs, known_types=types, nodes=self._all_nodes())
        return self.with_queues([d for _, d in docs])

    def with_queues(self, docs: list[dict[str, Any]]) -> "Instance":
        """This round with queue documents (Kueue/Volcano) added; checked like a file's."""
        spec = self.spec.model_copy(update={"queues": [*self.spec.queues, *docs]})
        out = self.model_copy(update={"spec": spec})
        for cached in ("queue_set", "running_job_info"):
            out.__dict__.pop(cached, None)
        out.check_queues(out.catalog)
        return out

    @cached_property
    def queue_set(self) -> QueueSet | None:
        """The declared queues (None when the instance declares none: no quotas)."""
        if not self.spec.queues:
            return None
        return parse_queues(((f"spec.queues[{i}]", d) for i, d in enumerate(self.spec.queues)),
                            nodes=self._all_nodes())

    def _all_nodes(self) -> list[Any]:
        return [n for c in self.spec.clusters for n in c.nodes]

    def queue_of(self, job: TrainingJob) -> str:
        """The queue a pending job belongs to (``default`` without declared queues)."""
        qs = self.queue_set
        return DEFAULT_QUEUE if qs is None else qs.queue_of(job.metadata.labels,
                                                            job.metadata.annotations)

    @cached_property
    def running_job_info(self) -> dict[str, RunningJob]:
        """Running jobs by name; those holding GPUs but not listed get the defaults."""
        out = {r.name: r for r in self.spec.running_jobs}
        for job in self.running_jobs():
            out.setdefault(job, RunningJob(name=job))
        return out

    def _check_queue(self, catalog: GPUCatalog) -> None:
        """A pending job may not carry a running job's name (the plan could not tell them
        apart). Whether an ``acceleratorType`` names a known GPU type is checked where
        documents are read (``instances.registry``): a typo in a file is an input error,
        while an Instance built in code keeps it and the plan explains it."""
        units = 0
        for j in self.spec.jobs:
            groups = j.spec.resource_groups
            mp = 1 if len(groups) == 1 and groups[0].type not in MODEL_PARALLEL else \
                sum(g.type in MODEL_PARALLEL for g in groups) or 1
            units += j.spec.replica_count * mp
        if units > MAX_UNITS:
            raise ValueError(f"spec.jobs: the queue expands into {units:,} gang units, more "
                             f"than the limit of {MAX_UNITS:,}")
        holders = {h for c in self.spec.clusters for n in c.nodes for h in n.allocated.values()}
        if holders.isdisjoint(j.name for j in self.spec.jobs):
            return
        running: dict[str, str] = {}
        for c in self.spec.clusters:
            for n in c.nodes:
                for holder in n.allocated.values():
                    running.setdefault(holder, n.name)
        for ji, job in enumerate(self.spec.jobs):
            if job.name in running:
                raise ValueError(
                    f"spec.jobs[{ji}].metadata.name: {job.name!r} is already running (it holds "
                    f"GPUs on node {running[job.name]!r}); a pending job needs its own name")

    @property
    def name(self) -> str:
        return self.metadata.name

    @cached_property
    def catalog(self) -> GPUCatalog:
        return GPUCatalog(self.spec.gpu_types)

    @cached_property
    def federation(self) -> Federation:
        return Federation(clusters=self.spec.clusters, links=self.spec.inter_cluster_links)

    @property
    def clusters(self) -> list[Cluster]:
        return self.spec.clusters

    @property
    def jobs(self) -> list[TrainingJob]:
        return self.spec.jobs

    @cached_property
    def node_index(self) -> dict[str, tuple[Cluster, Node]]:
        return {n.name: (c, n) for c in self.spec.clusters for n in c.nodes}

    def running_jobs(self) -> dict[str, int]:
        """Jobs already holding GPUs (kept where they are) -> GPU count."""
        out: dict[str, int] = {}
        for c in self.spec.clusters:
            for n in c.nodes:
                for job in n.allocated.values():
                    out[job] = out.get(job, 0) + 1
        return out

    @property
    def running_manifests(self) -> dict[str, TrainingJob]:
        """Running job -> its manifest, for the ``spec.runningJobs`` that have one (a job
        whose every GPU failed holds none and is still listed)."""
        return {r.name: r.job for r in self.spec.running_jobs if r.job is not None}

    def _check_running_manifests(self, specs: dict[str, TrainingJob] | None = None,
                                 source: str = "spec.runningJobs") -> None:
        """A running job holds at most the GPUs its manifest asks for (fewer once some of
        them failed): it restarts whole on its manifest when it moves, and a manifest asking
        for fewer than it holds describes some other job."""
        if specs is None and not any(r.job is not None for r in self.spec.running_jobs):
            return  # no manifests to compare
        held = self.running_jobs()
        if specs is None:
            specs = {r.name: r.job for r in self.spec.running_jobs if r.job is not None}
            where = {r.name: f"{source}[{i}].job" for i, r in enumerate(self.spec.running_jobs)}
        else:
            where = {name: source for name in specs}
        for name, manifest in specs.items():
            if held.get(name, 0) > manifest.total_gpus:
                raise ValueError(f"{where[name]}: the manifest of {name!r} asks for "
                                 f"{manifest.total_gpus} GPU(s), but it holds {held[name]} "
                                 "(node.allocated); a running job holds at most what its "
                                 "manifest asks for")

    def with_running_manifests(self, specs: list[TrainingJob]) -> "Instance":
        """A copy whose ``spec.runningJobs`` carry these manifests (entries added for running
        jobs not yet listed; a manifest naming no running job is an error)."""
        held = self.running_jobs()
        by_name = {s.name: s for s in specs}
        for name in by_name:
            if name not in held:
                raise ValueError(f"running job manifest {name!r}: no such job holds GPUs")
        self._check_running_manifests(by_name, "running job manifest")
        entries = [r.model_copy(update={"job": by_name.pop(r.name, r.job)})
                   for r in self.spec.running_jobs]
        entries += [RunningJob(name=n, job=s) for n, s in by_name.items()]
        out = self.model_copy(update={"spec": self.spec.model_copy(update={"running_jobs": entries})})
        out.__dict__.pop("running_job_info", None)
        return out

    def with_jobs(self, jobs: list[TrainingJob]) -> "Instance":
        return self.model_copy(update={"spec": self.spec.model_copy(update={"jobs": jobs})})


def in_queue(manifest: TrainingJob, queue: str, instance: Instance) -> tuple[TrainingJob, str]:
    """``manifest`` labelled for ``queue`` (see the mapping rule) and the queue it lands in."""
    if not queue:
        return manifest, instance.queue_of(manifest)
    qs = instance.queue_set
    if qs is None:
        raise ValueError(f"names queue {queue!r}, but the instance declares no queues "
                         "(give --queues or spec.queues)")
    volcano = queue in qs.queues and qs.queues[queue].source == "volcano"
    key = VOLCANO_QUEUE_KEYS[0] if volcano else KUEUE_QUEUE_LABEL
    labels = {**manifest.metadata.labels, key: queue}
    out = manifest.model_copy(update={"metadata": manifest.metadata.model_copy(
        update={"labels": labels})})
    name = qs.queue_of(labels, out.metadata.annotations)
    if not qs.known(name):
        raise ValueError(f"unknown queue {queue!r} (queues: {', '.join(sorted(qs.queues))})")
    return out, name
