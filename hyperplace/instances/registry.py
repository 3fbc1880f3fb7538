"""Finding, reading and checking instances: bundled names, Instance files, Cluster + job files.

Every reader here turns bad input into one :class:`InputError` that names the file, the
field path and the problem (``jobs.yaml: document 2: spec.resourceGroups[0].gpusPerGroup:
Input should be greater than 0``), because the CLI, the service and the benchmarks all
report through it and a person has to be able to fix the file from that one line.

Documents are told apart by ``kind``:

* ``Instance`` (``hyperplace/v1``): clusters, their state and a pending queue;
* ``Cluster`` (``hyperplace/v1``): ``metadata.name`` plus ``spec: {region, labels, nodes,
  fabric, gpuTypes}``, i.e. one cluster without a queue;
* ``FoundationModelTrainingJob`` (``ai.example.com/v1alpha1``): the seed's job manifest;
* ``HyperNode`` (``topology.volcano.sh/v1alpha1``): Volcano's topology tiers, checked by
  the HyperNode importer (which turns them into fabrics).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from hyperplace.errors import InputError, from_validation_error, known_words
from hyperplace.instances import DEFAULT_INSTANCE  # noqa: F401  (re-exported)
from hyperplace.instances.generator import DESCRIPTION_KEY, SOURCE_KEY
from hyperplace.io import dump_yaml, load_documents
from hyperplace.models import (
    Cluster,
    GPUCatalog,
    GPUType,
    HyperJob,
    Instance,
    TrainingJob,
)
from hyperplace.models.base import HPModel
from hyperplace.models.gpu import unknown_alternative
from hyperplace.models.job import ObjectMeta

# Bundled instances, in the order `instances list` shows them.
BUNDLED = (
    "seed-beijing-shanghai",
    "mixed-a100-h100",
    "superpod-h100-4su",
    "dgx1-v100",
    "alibaba-2023",
    "gb200-nvl72",
    "mixed-h100-nvl72",
)

KINDS = ("Instance", "Cluster", "FoundationModelTrainingJob", "HyperNode", "HyperJob")
#: Kinds read in their owners' formats (:mod:`hyperplace.instances.foreign`), for messages.
FOREIGN_KINDS = ("Node", "NodeList", "Pod", "PodList", "ResourceSlice", "List", "Topology",
                 "ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort", "Queue", "Job",
                 "PodGroup", "JobSet", "PyTorchJob", "MPIJob", "ResourceClaim",
                 "PropagationPolicy")
_JOB_KIND = "FoundationModelTrainingJob"
_JOB_SUFFIXES = (".yaml", ".yml", ".json")


class ClusterDocSpec(HPModel):
    """What a ``Cluster`` document's ``spec`` may hold (the name lives in ``metadata``)."""

    region: str = ""
    labels: dict[str, str] = Field(default_factory=dict)
    gpu_types: list[GPUType] = Field(default_factory=list)
    nodes: list[Any] = Field(default_factory=list)
    fabric: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _types_once(self) -> "ClusterDocSpec":
        names = [t.name for t in self.gpu_types]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise ValueError(f"gpuTypes[{i}].name: GPU type {name!r} is declared twice")
        return self


class ClusterDocument(HPModel):
    """``hyperplace/v1`` ``Cluster``: one cluster and its state, no queue."""

    api_version: Literal["hyperplace/v1"] = "hyperplace/v1"
    kind: Literal["Cluster"] = "Cluster"
    metadata: ObjectMeta
    spec: ClusterDocSpec


@dataclass(frozen=True)
class ParsedCluster:
    cluster: Cluster
    gpu_types: list[GPUType]


@dataclass(frozen=True)
class InstanceInfo:
    """One row of ``instances list``."""

    name: str
    description: str
    clusters: int
    nodes: int
    gpus: int
    free_gpus: int
    pending_jobs: int
    source: str


# ---- errors -----------------------------------------------------------------------

_PATH_PREFIX = re.compile(r"^([A-Za-z_]\w*(?:\[\d+\])*(?:\.[A-Za-z_]\w*(?:\[\d+\])*)*): (.+)$", re.S)

# Model validators of Federation report paths relative to the federation; inside an
# Instance those fields live under spec.
_INSTANCE_RELATIVE = {"links": "spec.interClusterLinks", "clusters": "spec.clusters"}


def _join(*parts: str | None) -> str | None:
    out = ""
    for p in parts:
        if not p:
            continue
        out = p if not out else (f"{out}{p}" if p.startswith("[") else f"{out}.{p}")
    return out or None


def _tidy(err: InputError, *, document: str | None = None) -> InputError:
    """Move a field path that a model validator put into the message back into the path.

    Pydantic reports ``raise ValueError("fabric.links[3].b: ...")`` from a model validator
    at the model's own location with the message ``Value error, fabric.links[3].b: ...``;
    people need ``spec.clusters[0].fabric.links[3].b: ...``.
    """
    message = err.message.removeprefix("Value error, ")
    path = err.path
    match = _PATH_PREFIX.match(message)
    if match:
        sub, message = match.group(1), match.group(2)
        if not path:
            head = re.split(r"[.\[]", sub, maxsplit=1)[0]
            if head in _INSTANCE_RELATIVE and not sub.startswith("spec"):
                sub = _INSTANCE_RELATIVE[head] + sub[len(head):]
        path = _join(path, sub)
    elif not path and message.startswith("clusters: "):
        path, message = "spec.clusters", message.removeprefix("clusters: ")
    if document:
        path = f"{document}: {path}" if path else document
    return InputError(message.splitlines()[0], source=err.source, path=path)


def _validate(model: type[HPModel], doc: Any, source: str, document: str | None = None,
              prefix: str = "") -> Any:
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise _tidy(from_validation_error(exc, source=source, prefix=prefix, model=model),
                    document=document) from None


def _doc_label(index: int, total: int) -> str | None:
    """``document 2`` for multi-document files; nothing when the file holds one document."""
    return f"document {index + 1}" if total > 1 else None


_HYPERNODE_HINT = ("a HyperNode file describes the network only, not the nodes' GPUs: make a "
                   "Cluster file with `hyperplace instances import --from hypernode FILE "
                   "--gpu-type TYPE -o cluster.yaml` and solve that")


# ---- documents ----------------------------------------------------------------------

def document_kind(doc: dict[str, Any], source: str, document: str | None = None) -> str:
    kind = doc.get("kind")
    if kind is None:
        raise InputError("required field is missing", source=source,
                         path=f"{document}: kind" if document else "kind")
    if kind not in KINDS:
        where = f"{document}: kind" if document else "kind"
        raise InputError(f"unknown kind {kind!r}; expected one of "
                         f"{', '.join(KINDS + FOREIGN_KINDS)}", source=source, path=where)
    return str(kind)


#: Keys renamed so that their names say their unit: NVLink figures are GB/s (bytes), and
#: ``gbps`` is the Gb/s (bits) of links and NICs everywhere else. old -> new.
RENAMED_KEYS = {"nvlinkGbps": "nvlinkGigabytesPerSecond", "gbps": "gigabytesPerSecond",
                "gbpsPerGpu": "gigabytesPerSecondPerGpu"}


def _mappings(value: Any) -> list[tuple[int, dict[str, Any]]]:
    return [(i, v) for i, v in enumerate(value) if isinstance(v, dict)] \
        if isinstance(value, list) else []


def _renamed_in_cluster(body: dict[str, Any], at: str) -> list[tuple[str, dict[str, Any], str]]:
    """(path, mapping, old key) of every place a renamed key may sit in a cluster's body."""
    out = [(f"{at}gpuTypes[{i}]", t, "nvlinkGbps") for i, t in _mappings(body.get("gpuTypes"))]
    for i, node in _mappings(body.get("nodes")):
        out.append((f"{at}nodes[{i}]", node, "nvlinkGbps"))
        if "nvlinkPairs" in node:
            out += [(f"{at}nodes[{i}].nvlinkPairs[{k}]", p, "gbps")
                    for k, p in _mappings(node["nvlinkPairs"])]
    fabric = body.get("fabric")
    if isinstance(fabric, dict) and "nvlinkDomains" in fabric:
        out += [(f"{at}fabric.nvlinkDomains[{i}]", d, "gbpsPerGpu")
                for i, d in _mappings(fabric["nvlinkDomains"])]
    return out


def warn_renamed_keys(doc: Any, source: str, document: str | None = None) -> None:
    """A ``DeprecatedKey`` warning per old key a Cluster or Instance document uses (they
    are still read, :data:`RENAMED_KEYS`), naming the file, the first path and how many
    more; both spellings in one mapping is an :class:`InputError` at the old key."""
    import warnings

    from hyperplace.errors import DeprecatedKey

    spec = doc.get("spec") if isinstance(doc, dict) else None
    if not isinstance(spec, dict):
        return
    places = _renamed_in_cluster(spec, "spec.") + [
        place for i, c in _mappings(spec.get("clusters"))
        for place in _renamed_in_cluster(c, f"spec.clusters[{i}].")]
    found: dict[str, list[str]] = {}
    for at, mapping, old in places:
        if old not in mapping:
            continue
        new = RENAMED_KEYS[old]
        path = f"{document}: {at}.{old}" if document else f"{at}.{old}"
        if new in mapping:
            raise InputError(f"the old spelling of {new}; give {new} only", source=source,
                             path=path)
        found.setdefault(old, []).append(path)
    for old, paths in found.items():
        more = f" (and {len(paths) - 1:,} more)" if len(paths) > 1 else ""
        warnings.warn(DeprecatedKey(
            f"{source}: {paths[0]}{more}: {old!r} is deprecated: NVLink figures are GB/s "
            f"(bytes), not the Gb/s of links; write {RENAMED_KEYS[old]!r} (read as it this "
            "time)"), stacklevel=2)


def parse_cluster(doc: dict[str, Any], source: str, document: str | None = None
                  ) -> ParsedCluster:
    """A ``Cluster`` document as a :class:`Cluster` (GPU types checked against the catalog)."""
    warn_renamed_keys(doc, source, document)
    parsed: ClusterDocument = _validate(ClusterDocument, doc, source, document)
    body = {k: v for k, v in doc["spec"].items() if k not in ("gpuTypes", "gpu_types")}
    body["name"] = parsed.metadata.name
    cluster: Cluster = _validate(Cluster, body, source, document, prefix="spec")
    catalog = GPUCatalog(parsed.spec.gpu_types)
    for i, node in enumerate(cluster.nodes):
        if node.gpu_type not in catalog:
            where = f"spec.nodes[{i}].gpuType"
            raise InputError(
                f"unknown GPU type {node.gpu_type!r} "
                f"({known_words(node.gpu_type, catalog.names())}; "
                "declare others under spec.gpuTypes)", source=source,
                path=f"{document}: {where}" if document else where)
    return ParsedCluster(cluster, list(parsed.spec.gpu_types))


def parse_job(doc: dict[str, Any], source: str, document: str | None = None) -> TrainingJob:
    return _validate(TrainingJob, doc, source, document)


def parse_instance(doc: dict[str, Any], source: str, document: str | None = None) -> Instance:
    warn_renamed_keys(doc, source, document)
    inst: Instance = _validate(Instance, doc, source, document)
    _check_jobs_against([(j, source, document) for j in inst.jobs], inst.spec.gpu_types,
                        inst.clusters, prefix=lambda i: f"spec.jobs[{i}].")
    return inst


def check_hypernodes(docs: list[dict[str, Any]], source: str) -> str:
    """HyperNode documents checked by the importer (tiers, members, one parent each)."""
    from hyperplace.instances.importers.hypernode import hypernodes_to_fabric

    fabric = hypernodes_to_fabric(docs, source=source, check_only=True)
    tiers = sorted({s.tier for s in fabric.switches})
    span = f"tier {tiers[0]}" if len(tiers) == 1 else f"tiers {tiers[0]}-{tiers[-1]}"
    return f"{len(docs)} HyperNode{'s' if len(docs) > 1 else ''}, {span}"


# ---- assembling instances -------------------------------------------------------------

def _build_instance(name: str, clusters: list[ParsedCluster], jobs: list[TrainingJob],
                    source: str, base: Instance | None = None) -> Instance:
    if base is not None:
        doc: dict[str, Any] = {"metadata": base.metadata,
                               "spec": base.spec.model_copy(update={"jobs": jobs, "skipped": []})}
    else:
        types: list[GPUType] = []
        for pc in clusters:
            types += [t for t in pc.gpu_types if t not in types]
        doc = {"metadata": {"name": name},
               "spec": {"gpuTypes": types, "clusters": [pc.cluster for pc in clusters],
                        "jobs": jobs}}
    return _validate(Instance, doc, source)


def _check_unique_jobs(jobs: list[tuple[TrainingJob, str, str | None]]) -> None:
    seen: dict[str, str] = {}
    for job, source, document in jobs:
        if job.name in seen:
            where = f"{document}: metadata.name" if document else "metadata.name"
            raise InputError(f"job {job.name!r} is already defined in {seen[job.name]}",
                             source=source, path=where)
        seen[job.name] = source


def _check_jobs_against(jobs: list[tuple[TrainingJob, str, str | None]],
                         types: list[GPUType], clusters: list[Cluster],
                         prefix: Callable[[int], str] = lambda i: "") -> None:
    """Each job, in its own file and document: its ``acceleratorType`` names a known GPU
    type (built in or declared beside the clusters), and its name is not a running job's."""
    catalog = GPUCatalog(types)
    holders = {h for c in clusters for n in c.nodes for h in n.allocated.values()}
    unknown: dict[str, str | None] = {}  # selector -> its unknown alternative (queues repeat them)
    for index, (job, source, document) in enumerate(jobs):
        def where(path: str, document: str | None = document, index: int = index) -> str:
            return f"{document}: {prefix(index)}{path}" if document else prefix(index) + path
        if job.name in holders:
            running = {held: n.name for c in clusters for n in c.nodes
                       for held in n.allocated.values()}  # the last node holding it
            raise InputError(f"{job.name!r} is already running (it holds GPUs on node "
                             f"{running[job.name]!r}); a pending job needs its own name",
                             source=source, path=where("metadata.name"))
        # the gpu-type toleration selects types too when no acceleratorType is given
        selectors = [(gi, None, group.gpu_requirements.accelerator_type)
                     for gi, group in enumerate(job.spec.resource_groups)]
        selectors += [(None, ti, t.value) for ti, t in enumerate(job.spec.tolerations)
                      if t.key == "gpu-type" and t.operator == "Equal"]
        for gi, ti, selector in selectors:
            if selector and selector not in unknown:
                unknown[selector] = unknown_alternative(selector, catalog)
            bad = unknown[selector] if selector else None
            if bad is not None:
                field = f"spec.resourceGroups[{gi}].gpuRequirements.acceleratorType" \
                    if gi is not None else f"spec.tolerations[{ti}].value"
                known = sorted({t.family for t in catalog} | set(catalog.names()))
                raise InputError(
                    f"unknown GPU type {bad!r} (known: {', '.join(known)}; a cluster file "
                    "declares others under spec.gpuTypes)", source=source,
                    path=where(field))


def _declared_types(clusters: list[ParsedCluster]) -> list[GPUType]:
    return [t for pc in clusters for t in pc.gpu_types]


def _expand(docs: list[dict[str, Any]], source: str):
    """Foreign documents (Kubernetes nodes, pods and workloads, Kueue and Volcano queues)
    as hyperplace's (:mod:`hyperplace.instances.foreign`)."""
    from hyperplace.instances.foreign import expand

    return expand(docs, source, label_of=lambda i: _doc_label(i, len(docs)))


def _with_queues(inst: Instance, queues: list[tuple[str, dict[str, Any]]], source: str
                 ) -> Instance:
    if not queues:
        return inst
    from hyperplace.models.queue import QueueError

    try:
        return inst.with_queue_documents(queues)
    except QueueError as exc:
        raise InputError(exc.message, source=source, path=exc.path) from None
    except ValueError as exc:
        raise _tidy(InputError(str(exc), source=source)) from None


def instance_from_documents(docs: list[dict[str, Any]], source: str) -> Instance:
    """One Instance document, or Cluster documents followed by job documents (either may be
    given in their owners' formats: Kubernetes Nodes and Pods, workloads, Kueue queues)."""
    ex = _expand(docs, source)
    inst = _with_skipped(_instance_from_expanded(ex.docs, source), ex.skipped)
    return _with_queues(inst, [(q, d) for q, d in ex.queues
                               if d.get("kind") != "Topology"], source)


def _instance_from_expanded(labelled: list[tuple[dict[str, Any], str | None]], source: str
                            ) -> Instance:
    docs = [d for d, _ in labelled]
    if not docs:
        raise InputError("no Cluster, Instance or Node document: nothing to place jobs on",
                         source=source)
    kinds = [document_kind(d, source, label) for d, label in labelled]
    if kinds[0] == "Instance":
        if len(docs) > 1:
            raise InputError("an Instance file holds exactly one document", source=source,
                             path="document 2")
        return parse_instance(docs[0], source)
    clusters: list[ParsedCluster] = []
    jobs: list[tuple[TrainingJob, str, str | None]] = []
    for (doc, label), kind in zip(labelled, kinds):
        if kind == "Cluster":
            clusters.append(parse_cluster(doc, source, label))
        elif kind == _JOB_KIND:
            jobs.append((parse_job(doc, source, label), source, label))
        else:
            why = _HYPERNODE_HINT if kind == "HyperNode" else \
                f"a {kind} cannot be loaded as part of an instance"
            raise InputError(why, source=source, path=f"{label}: kind" if label else "kind")
    if not clusters:
        raise InputError("no Cluster or Instance document: nothing to place jobs on (a jobs "
                         "file goes with --jobs, beside --cluster)", source=source)
    _check_unique_jobs(jobs)
    _check_jobs_against(jobs, _declared_types(clusters), [pc.cluster for pc in clusters])
    name = "+".join(pc.cluster.name for pc in clusters)
    return _build_instance(name, clusters, [j for j, _, _ in jobs], source)


def _with_skipped(inst: Instance, skipped: list[tuple[str, str]]) -> Instance:
    """The instance remembering the workloads it does not place (a plan reports them)."""
    if not skipped:
        return inst
    from hyperplace.models.job import SkippedJob

    known = {s.job for s in inst.spec.skipped}
    extra = [SkippedJob(job=j, reason=r) for j, r in skipped if j not in known]
    return inst.model_copy(update={"spec": inst.spec.model_copy(
        update={"skipped": [*inst.spec.skipped, *extra]})})


@dataclass
class JobDocuments:
    """What job files hold, read the same way for every command (``solve``, ``federate``,
    ``estimate``, ``defrag``): jobs in file order (``FoundationModelTrainingJob``, the
    workloads of :mod:`hyperplace.instances.foreign` as one, and ``HyperJob``), Karmada
    ``PropagationPolicy`` documents, and the workloads left out (no GPU asked)."""

    jobs: list[tuple[TrainingJob | HyperJob, str, str | None]] = field(default_factory=list)
    policies: list[tuple[dict[str, Any], str, str | None]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (job, why not placed)


def job_files(path: str | Path) -> list[Path]:
    """A file, or the YAML/JSON files of a directory by name."""
    p = Path(path)
    if not p.is_dir():
        return [p]
    files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in _JOB_SUFFIXES)
    if not files:
        raise InputError("directory holds no .yaml, .yml or .json file", source=str(path))
    return files


def read_job_documents(paths: list[str | Path]) -> JobDocuments:
    """Jobs and their policies from files or directories (see :class:`JobDocuments`)."""
    from hyperplace.instances.foreign import classify

    out = JobDocuments()
    for f in (f for path in paths for f in job_files(path)):
        source = str(f)
        docs = load_documents(f)
        ex = _expand(docs, source)
        out.skipped += ex.skipped
        out.policies += [(d, source, _doc_label(i, len(docs))) for i, d in enumerate(docs)
                         if classify(d) == "written" and d.get("kind") == "PropagationPolicy"]
        for doc, label in ex.docs:
            kind = document_kind(doc, source, label)
            if kind == _JOB_KIND:
                out.jobs.append((parse_job(doc, source, label), source, label))
            elif kind == "HyperJob":
                out.jobs.append((_validate(HyperJob, doc, source, label), source, label))
            else:
                raise InputError(f"expected a job ({_JOB_KIND}, HyperJob, or a Volcano, "
                                 f"batch/v1, JobSet or Kubeflow job), got {kind!r}",
                                 source=source, path=f"{label}: kind" if label else "kind")
    return out


def read_jobs(path: str | Path, skipped: list[tuple[str, str]] | None = None
              ) -> list[tuple[TrainingJob, str, str | None]]:
    """The jobs of one cluster's round (:func:`read_job_documents`; a HyperJob spans
    clusters, so it is refused here); workloads left out (no GPU asked) are added to
    ``skipped`` as (job, reason)."""
    read = read_job_documents([path])
    if skipped is not None:
        skipped += read.skipped
    out: list[tuple[TrainingJob, str, str | None]] = []
    for job, source, label in read.jobs:
        if isinstance(job, HyperJob):
            raise InputError("a HyperJob is split across member clusters: federation reads "
                             "it (hyperplace federate), a one-cluster round does not",
                             source=source, path=f"{label}: kind" if label else "kind")
        out.append((job, source, label))
    return out


def load_cluster_and_jobs(cluster_file: str | Path, jobs_file_or_dir: str | Path) -> Instance:
    """Clusters from one file (Cluster documents or an Instance), the queue from another.

    An Instance file's own queue is replaced by the jobs given, so a saved cluster state
    can be replayed against different queues.
    """
    source = str(cluster_file)
    ex = _expand(load_documents(cluster_file), source)
    skipped: list[tuple[str, str]] = list(ex.skipped)
    jobs = read_jobs(jobs_file_or_dir, skipped)
    _check_unique_jobs(jobs)
    job_models = [j for j, _, _ in jobs]
    queues = [(q, d) for q, d in ex.queues if d.get("kind") != "Topology"]
    if not ex.docs:
        raise InputError("no Cluster, Instance or Node document", source=source)
    first = document_kind(ex.docs[0][0], source, ex.docs[0][1])
    if first == "Instance":
        base = _instance_from_expanded(ex.docs, source)
        _check_jobs_against(jobs, base.spec.gpu_types, base.clusters)
        return _with_queues(_with_skipped(_build_instance(base.name, [], job_models, source,
                                                          base=base), skipped),
                            queues, source)
    clusters: list[ParsedCluster] = []
    for doc, label in ex.docs:
        kind = document_kind(doc, source, label)
        if kind != "Cluster":
            why = _HYPERNODE_HINT if kind == "HyperNode" else \
                f"expected Cluster or Instance, got {kind!r}"
            raise InputError(why, source=source, path=f"{label}: kind" if label else "kind")
        clusters.append(parse_cluster(doc, source, label))
    _check_jobs_against(jobs, _declared_types(clusters), [pc.cluster for pc in clusters])
    name = "+".join(pc.cluster.name for pc in clusters)
    return _with_queues(_with_skipped(_build_instance(name, clusters, job_models, source),
                                      skipped), queues, source)


# ---- bundled instances ------------------------------------------------------------------

# Package-data YAML files that are not instances.
_NOT_INSTANCES = frozenset({"seed_job"})


def bundled_path(name: str) -> Any:
    return resources.files("hyperplace.data") / f"{name}.yaml"


def bundled_names() -> list[str]:
    """Bundled instances present here: the catalogue first, then any other instance file
    dropped into package data (e.g. the peer-scheduler cases), by name."""
    data = resources.files("hyperplace.data")
    extra = sorted(f.name.removesuffix(".yaml") for f in data.iterdir()
                   if f.name.endswith(".yaml"))
    return ([n for n in BUNDLED if bundled_path(n).is_file()]
            + [n for n in extra if n not in BUNDLED and n not in _NOT_INSTANCES])


@cache
def _load_bundled(name: str) -> Instance:
    ref = bundled_path(name)
    with resources.as_file(ref) as path:
        return instance_from_documents(load_documents(path), f"{name} (bundled)")


_file_cache: dict[tuple[str, int, int], Instance] = {}


def load_instance(name_or_path: str | Path) -> Instance:
    """A bundled instance by name, or an Instance (or Cluster + jobs) file; cached."""
    key = str(name_or_path)
    if key in BUNDLED or (key and "/" not in key and "\\" not in key
                          and key not in _NOT_INSTANCES and bundled_path(key).is_file()
                          and not Path(key).exists()):
        return _load_bundled(key)
    p = Path(key)
    if not p.exists():
        raise InputError(
            f"no such file, and not a bundled instance (bundled: {', '.join(bundled_names())})",
            source=key)
    if p.is_file():
        stat = p.stat()
        cache_key = (str(p.resolve()), stat.st_mtime_ns, stat.st_size)
        if cache_key not in _file_cache:
            if len(_file_cache) > 16:
                _file_cache.clear()
            _file_cache[cache_key] = instance_from_documents(load_documents(p), key)
        return _file_cache[cache_key]
    return instance_from_documents(load_documents(p), key)  # raises: a directory


def describe(instance: Instance) -> tuple[str, str]:
    """(description, source/provenance) from the instance's annotations."""
    ann = instance.metadata.annotations
    return ann.get(DESCRIPTION_KEY, ""), ann.get(SOURCE_KEY, "")


def instance_info(instance: Instance) -> InstanceInfo:
    nodes = [n for c in instance.clusters for n in c.nodes]
    description, source = describe(instance)
    return InstanceInfo(
        name=instance.name, description=description, clusters=len(instance.clusters),
        nodes=len(nodes), gpus=sum(n.gpu_count for n in nodes),
        free_gpus=sum(n.free_count for n in nodes), pending_jobs=len(instance.jobs),
        source=source,
    )


def list_instances() -> list[InstanceInfo]:
    """The bundled instances present in this installation (see :func:`bundled_names`)."""
    return [instance_info(load_instance(name)) for name in bundled_names()]


# ---- validate -----------------------------------------------------------------------------

def validate_file(path: str | Path) -> str:
    """Check every document of a file; return a one-line summary or raise InputError."""
    source = str(path)
    docs = load_documents(path)
    ex = _expand(docs, source)
    kinds = [document_kind(d, source, label) for d, label in ex.docs]
    if "Instance" in kinds:
        inst = instance_from_documents(docs, source)
        info = instance_info(inst)
        return (f"Instance {inst.name}, {info.clusters} cluster(s), {info.nodes} nodes, "
                f"{info.gpus} GPUs ({info.free_gpus} free), {info.pending_jobs} pending jobs")
    parts: list[str] = []
    jobs: list[tuple[TrainingJob, str, str | None]] = []
    clusters: list[ParsedCluster] = []
    hypernodes: list[dict[str, Any]] = []
    for (doc, label), kind in zip(ex.docs, kinds):
        if kind == "Cluster":
            clusters.append(parse_cluster(doc, source, label))
        elif kind == _JOB_KIND:
            jobs.append((parse_job(doc, source, label), source, label))
        elif kind == "HyperJob":
            hj = _validate(HyperJob, doc, source, label)
            parts.append(f"HyperJob {hj.metadata.name}, {len(hj.spec.replicated_jobs)} replicated "
                         f"job(s), {len(hj.child_job_names())} child Volcano Jobs"
                         + (f", {len(hj.auto_split)} with splitPolicy auto" if hj.auto_split else ""))
        else:
            hypernodes.append(doc)
    _check_unique_jobs(jobs)
    _check_jobs_against(jobs, _declared_types(clusters), [pc.cluster for pc in clusters])
    if clusters:
        # the cross-document checks (GPU types, node names) of a cluster + jobs instance, on
        # the documents already parsed above
        _build_instance("+".join(pc.cluster.name for pc in clusters), clusters,
                        [j for j, _, _ in jobs], source)
        for pc in clusters:
            c = pc.cluster
            free = sum(n.free_count for n in c.nodes)
            parts.append(f"Cluster {c.name}, {len(c.nodes)} nodes, {c.gpu_count} GPUs "
                         f"({free} free), fabric {c.network.kind}")
    if jobs:
        gpus = sum(j.total_gpus for j, _, _ in jobs)
        parts.append(f"{len(jobs)} {_JOB_KIND}{'s' if len(jobs) > 1 else ''}, "
                     f"{gpus} GPU{'s' if gpus != 1 else ''} requested")
    if hypernodes:
        parts.append(check_hypernodes(hypernodes, source))
    parts += _check_queue_documents(ex, source, clusters)
    if ex.written:
        from hyperplace.instances.foreign import check_written

        kinds = sorted({d.get("kind", "") for _, d in ex.written})
        parts.append(f"{len(ex.written)} written object(s) ({', '.join(kinds)}): " + ", ".join(
            check_written(d, source, "") for _, d in ex.written[:3])
            + (", ..." if len(ex.written) > 3 else ""))
    if ex.notes:
        parts.append(f"{len(ex.notes)} note(s): " + "; ".join(
            n.removeprefix(f"{source}: ") for n in ex.notes))
    return "; ".join(parts)


def _check_queue_documents(ex: Any, source: str, clusters: list[ParsedCluster]) -> list[str]:
    """Queue and Topology documents of a file, checked as ``--queues`` reads them."""
    from hyperplace.instances.importers.kubernetes import levels_from_topology
    from hyperplace.models.queue import QueueError, parse_queues

    out: list[str] = []
    for t in ex.topologies:
        levels = levels_from_topology(t, source)
        out.append(f"Topology {t.get('metadata', {}).get('name')}, {len(levels)} switch level(s)")
    queue_docs = [(w, d) for w, d in ex.queues if d.get("kind") != "Topology"]
    if queue_docs:
        nodes = [n for pc in clusters for n in pc.cluster.nodes]
        try:
            qs = parse_queues(queue_docs, known_types={n.gpu_type for n in nodes} if nodes
                              else None, nodes=nodes or None)
        except QueueError as exc:
            raise InputError(exc.message, source=source, path=exc.path) from None
        kinds = sorted({d.get("kind", "") for _, d in queue_docs})
        out.append(f"{len(queue_docs)} queue document(s) ({', '.join(kinds)}): "
                   f"{len(qs.queues)} queue(s), {len(qs.local_queues)} LocalQueue(s)")
        bare = sorted(q.name for q in qs.queues.values() if not q.quotas)
        if bare:  # Kueue admits no GPU workload in a ClusterQueue that does not cover GPUs
            out.append(f"queue(s) covering no GPU (no nvidia.com/gpu in their resourceGroups), "
                       f"so a GPU job in them is never admitted: {', '.join(bare)}")
    return out


# ---- writing ------------------------------------------------------------------------------

def _with_kind(model: Instance | TrainingJob) -> dict[str, Any]:
    return {"apiVersion": model.api_version, "kind": model.kind, **model.to_doc()}


def instance_document(instance: Instance) -> dict[str, Any]:
    """The Instance as a document that loads back equal (kinds spelled out, defaults left out).

    Jobs keep their own apiVersion/kind so one can be cut out of the file and submitted as a
    manifest as it is.
    """
    doc = _with_kind(instance)
    if instance.jobs:
        doc["spec"]["jobs"] = [_with_kind(j) for j in instance.jobs]
    return doc


def render_instance(instance: Instance, fmt: str = "yaml") -> str:
    """YAML (GPU indices as integer keys, as people write them) or JSON text."""
    doc = instance_document(instance)
    if fmt == "json":
        return json.dumps(doc, indent=2) + "\n"
    if fmt != "yaml":
        raise InputError(f"unknown format {fmt!r}; use yaml or json", path="format")
    for cluster in doc["spec"]["clusters"]:
        for node in cluster.get("nodes", []):
            if "allocated" in node:
                node["allocated"] = {int(k): v for k, v in node["allocated"].items()}
    return dump_yaml(doc)
