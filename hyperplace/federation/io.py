"""Reading a federation round: member clusters and links, jobs, Karmada PropagationPolicies.

Federation file (``--cluster FED.yaml``): one ``Instance`` (clusters + ``interClusterLinks``)
or ``Cluster`` documents plus one ``hyperplace/v1`` ``Federation`` document
``{spec: {interClusterLinks: [{a, b, gbps, latencyMs}]}}``. Jobs (``--jobs`` files or
directories, read as ``solve --jobs`` reads them): ``FoundationModelTrainingJob``, the
workloads ``solve`` reads (Volcano ``Job``, ``batch/v1`` ``Job``, ``JobSet``, Kubeflow jobs),
``HyperJob`` (``training.volcano.sh/v1alpha1``) and ``PropagationPolicy``
(``policy.karmada.io/v1alpha1``) documents; a policy whose
``resourceSelectors`` name a job gives it ``placement.clusterAffinities`` (ordered fallback
groups), ``placement.clusterAffinity.clusterNames`` and, from a ``spreadByField: cluster``
spread constraint, ``maxGroups`` as the job's maxDomains. Limits: 64 clusters, 1,000 jobs.

The seed scenario (``hyperplace federate`` without arguments) is the bundled
``seed-beijing-shanghai`` federation with the seed's "resource bubbles": three of the four
nodes of each cluster are held by running jobs, so 8 B200 GPUs idle in Beijing and 8 H100
GPUs idle in Shanghai while the 16-GPU two-stage ``seed-8layer-pipeline`` fits neither
cluster alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from hyperplace.errors import InputError, from_validation_error
from hyperplace.federation.problem import (
    AffinityGroup,
    FederatedJob,
    FederationProblem,
    from_hyperjob,
    from_training_job,
)
from hyperplace.io import load_documents
from hyperplace.models.base import HPModel
from hyperplace.models.cluster import Cluster, InterClusterLink
from hyperplace.models.hyperjob import HyperJob
from hyperplace.models.instance import Instance, InstanceSpec
from hyperplace.models.job import ObjectMeta
from hyperplace.models.node import Node

MAX_CLUSTERS = 64
MAX_JOBS = 1000
SEED_INSTANCE = "seed-beijing-shanghai"


class FederationSpec(HPModel):
    inter_cluster_links: list[InterClusterLink] = Field(default_factory=list)


class FederationDocument(HPModel):
    api_version: str = "hyperplace/v1"
    kind: str = "Federation"
    metadata: ObjectMeta = Field(default_factory=lambda: ObjectMeta(name="federation"))
    spec: FederationSpec = Field(default_factory=FederationSpec)


def _validate(model: type, doc: Any, source: str, where: str | None):
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        err = from_validation_error(exc, source=source, model=model)
        msg = err.message.removeprefix("Value error, ")
        path = err.path
        if ": " in msg and not path:
            head, _, rest = msg.partition(": ")
            if " " not in head:
                path, msg = head, rest
        if where:
            path = f"{where}: {path}" if path else where
        raise InputError(msg, source=source, path=path) from None


def _label(i: int, n: int) -> str | None:
    return f"document {i + 1}" if n > 1 else None


def load_federation_file(path: str | Path) -> Instance:
    """Member clusters and links from one file (see the module docstring)."""
    from hyperplace.instances.registry import parse_cluster, warn_renamed_keys

    source = str(path)
    docs = load_documents(path)
    clusters: list[Cluster] = []
    gpu_types: list = []
    links: list[InterClusterLink] = []
    name = None
    for i, doc in enumerate(docs):
        where = _label(i, len(docs))
        kind = doc.get("kind")
        if kind == "Instance":
            warn_renamed_keys(doc, source, where)
            inst = _validate(Instance, doc, source, where)
            clusters += inst.clusters
            gpu_types += inst.spec.gpu_types
            links += inst.spec.inter_cluster_links
            name = inst.name
        elif kind == "Cluster":
            pc = parse_cluster(doc, source, where)
            clusters.append(pc.cluster)
            gpu_types += [t for t in pc.gpu_types if t not in gpu_types]
        elif kind == "Federation":
            fd = _validate(FederationDocument, doc, source, where)
            links += fd.spec.inter_cluster_links
            name = name or fd.metadata.name
        else:
            raise InputError(f"expected Instance, Cluster or Federation, got {kind!r}",
                             source=source, path=f"{where}: kind" if where else "kind")
    if not clusters:
        raise InputError("empty federation: no member cluster", source=source,
                         path="spec.clusters")
    if len(clusters) > MAX_CLUSTERS:
        raise InputError(f"{len(clusters)} clusters; at most {MAX_CLUSTERS}", source=source,
                         path="spec.clusters")
    names = {c.name for c in clusters}
    for i, link in enumerate(links):
        for end in ("a", "b"):
            if getattr(link, end) not in names:
                raise InputError(f"link to unknown cluster {getattr(link, end)!r} "
                                 f"(members: {', '.join(sorted(names))})", source=source,
                                 path=f"spec.interClusterLinks[{i}].{end}")
    doc = {"metadata": {"name": name or "+".join(c.name for c in clusters)},
           "spec": {"gpuTypes": gpu_types, "clusters": clusters, "interClusterLinks": links}}
    return _validate(Instance, doc, source, None)


def _policy_targets(doc: dict[str, Any]) -> list[str]:
    spec = doc.get("spec") or {}
    return [str(sel.get("name")) for sel in spec.get("resourceSelectors") or []
            if isinstance(sel, dict) and sel.get("name")]


def _apply_policy(job: FederatedJob, doc: dict[str, Any], source: str, where: str) -> None:
    """clusterAffinities, clusterAffinity.clusterNames and spread maxGroups from a policy."""
    placement = (doc.get("spec") or {}).get("placement") or {}
    groups = []
    for i, term in enumerate(placement.get("clusterAffinities") or []):
        names = tuple(term.get("clusterNames") or [])
        if not names:
            raise InputError("an affinity term needs clusterNames", source=source,
                             path=f"{where}spec.placement.clusterAffinities[{i}].clusterNames")
        groups.append(AffinityGroup(str(term.get("affinityName") or f"group-{i}"), names))
    if groups:
        job.affinities = groups
    single = (placement.get("clusterAffinity") or {}).get("clusterNames")
    if single:
        job.cluster_names = tuple(single)
    for i, sc in enumerate(placement.get("spreadConstraints") or []):
        if sc.get("spreadByField", "cluster") == "cluster" and "maxGroups" in sc:
            value = sc["maxGroups"]
            if not isinstance(value, int) or isinstance(value, bool):
                raise InputError("must be an integer", source=source,
                                 path=f"{where}spec.placement.spreadConstraints[{i}].maxGroups")
            job.max_domains = value


def load_jobs(paths: list[str | Path]) -> list[FederatedJob]:
    """Jobs and their PropagationPolicies from files or directories, read as every command
    reads job files (:func:`hyperplace.instances.registry.read_job_documents`: Volcano,
    batch/v1, JobSet and Kubeflow jobs too)."""
    from hyperplace.instances.registry import read_job_documents

    read = read_job_documents(list(paths))
    jobs: list[FederatedJob] = []
    for job, source, _ in read.jobs:
        if isinstance(job, HyperJob):
            jobs += _sourced(lambda: from_hyperjob(job), source)
        else:
            jobs.append(_sourced(lambda: from_training_job(job), source))
    policies = [(doc, source, f"{label}: " if label else "")
                for doc, source, label in read.policies]
    if len(jobs) > MAX_JOBS:
        raise InputError(f"{len(jobs)} jobs; at most {MAX_JOBS} per round", path="--jobs")
    by_name = {j.name: j for j in jobs}
    for doc, source, where in policies:
        for target in _policy_targets(doc):
            job = by_name.get(target) or next(
                (j for j in jobs if j.hyperjob and j.hyperjob.metadata.name == target), None)
            if job is None:
                raise InputError(f"PropagationPolicy selects {target!r}, which is not among "
                                 f"the jobs", source=source,
                                 path=f"{where}spec.resourceSelectors")
            _apply_policy(job, doc, source, where)
    return jobs


def _sourced(fn, source: str):
    try:
        return fn()
    except InputError as exc:
        if exc.source:
            raise
        raise InputError(exc.message, source=source, path=exc.path) from None


def seed_instance() -> Instance:
    """The seed federation with its resource bubbles (see the module docstring)."""
    from hyperplace.instances import load_instance

    base = load_instance(SEED_INSTANCE)
    clusters = []
    for c in base.clusters:
        nodes = []
        for k, n in enumerate(c.nodes):
            if k < len(c.nodes) - 1:
                # validated afresh: model_copy would keep the idle node's cached free GPUs
                n = Node.model_validate({**n.model_dump(), "allocated": {
                    g: f"{c.name}-running-{k}" for g in range(n.gpu_count)}})
            nodes.append(n)
        # a fresh Cluster, not model_copy: copies would keep the cached node index
        clusters.append(Cluster(name=c.name, region=c.region, labels=c.labels, nodes=nodes,
                                fabric=c.fabric))
    meta = base.metadata.model_copy(update={"name": f"{SEED_INSTANCE}-bubbles", "annotations": {
        "hyperplace.io/description": "seed federation with resource bubbles: 3 of 4 nodes busy "
                                     "in each cluster"}})
    return Instance(metadata=meta, spec=InstanceSpec(
        gpu_types=base.spec.gpu_types, clusters=clusters,
        inter_cluster_links=base.spec.inter_cluster_links, jobs=base.spec.jobs,
        model=base.spec.model))


def load_problem(*, instance: str | None = None, cluster: str | Path | None = None,
                 jobs: list[str | Path] | None = None, policy: str = "throughput",
                 max_slowdown: float | None = None) -> FederationProblem:
    """The round a command works on: a bundled/file instance with its queue, a federation
    file plus job files, or (nothing given) the seed scenario."""
    from hyperplace.federation.problem import DEFAULT_MAX_SLOWDOWN
    from hyperplace.instances import load_instance

    if cluster is not None or jobs:
        if instance is not None:
            raise InputError("give either --instance or --cluster/--jobs, not both")
        if cluster is None or not jobs:
            raise InputError("--cluster and --jobs go together")
        inst = load_federation_file(cluster)
        fjobs = load_jobs(list(jobs))
    else:
        inst = seed_instance() if instance is None else load_instance(instance)
        fjobs = []
        unpriced: dict[str, str] = {}
        for j in inst.jobs:
            # a queued job the round cannot price stays pending with the reason, rather
            # than failing the whole round
            try:
                fjobs.append(from_training_job(j))
            except InputError as exc:
                unpriced[j.name] = f"not federated: {exc.one_line()}"
        inst = inst.with_jobs([])
        return FederationProblem(inst, fjobs, policy=policy, unpriced=unpriced,
                                 max_slowdown=max_slowdown or DEFAULT_MAX_SLOWDOWN)
    return FederationProblem(inst, fjobs, policy=policy,
                             max_slowdown=max_slowdown or DEFAULT_MAX_SLOWDOWN)
