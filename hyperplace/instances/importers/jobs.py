"""Kubernetes batch workloads -> hyperplace's gang (a ``FoundationModelTrainingJob`` document).

Kinds read (``apiVersion`` group, kind):

* ``batch.volcano.sh`` ``Job``: ``spec.tasks[]`` (``replicas``, ``template``),
  ``spec.minAvailable``, ``spec.queue``, ``spec.priorityClassName``, ``spec.networkTopology``
  (``mode: hard`` with ``highestTierAllowed: N`` -> at most ``2N - 1`` switch hops between the
  job's nodes: tier N is the HyperNode tier, and nodes under one tier-N HyperNode are
  ``2N - 1`` hops apart; ``soft`` is a preference and no limit).
* ``scheduling.volcano.sh`` ``PodGroup``: ``spec.minMember`` pods sharing
  ``spec.minResources["nvidia.com/gpu"]`` equally, ``spec.queue``, ``spec.networkTopology``.
* ``batch`` ``Job`` (``batch/v1``): ``spec.parallelism`` pods (default 1) of
  ``spec.template``.
* ``jobset.x-k8s.io`` ``JobSet``: every ``spec.replicatedJobs[]``: ``replicas`` x the child
  Job's ``parallelism`` pods.
* ``kubeflow.org`` ``PyTorchJob`` (``spec.pytorchReplicaSpecs``: Master, Worker) and
  ``MPIJob`` (``spec.mpiReplicaSpecs``: Launcher, Worker): ``replicas`` pods per role.

From each pod template: the GPUs (containers' ``nvidia.com/gpu`` requests, limits when no
request; else the DRA ResourceClaims its ``resourceClaims`` name, when they are in the same
file, as ``hyperplace manifests`` writes them), the GPU type (``nodeSelector`` or required node affinity on
``nvidia.com/gpu.product``, read through the catalog's aliases: ``NVIDIA-H100-80GB-HBM3``
-> ``H100-80``; ``In`` with several values -> any of them), tolerations (kept; a
``gpu-type`` toleration selects types as in the seed's manifests), and Kueue's
``kueue.x-k8s.io/podset-required-topology`` annotation (a level label: hop limit ``2t - 1``
for the level's tier ``t``, ``0`` for ``kubernetes.io/hostname``; the tier comes from the
Kueue ``Topology`` given beside the job, else from the default level map of
:mod:`hyperplace.instances.importers.kubernetes`). ``podset-preferred-topology`` is a
preference: kept as an annotation, no limit.

The gang: every pod that asks for GPUs is one unit held on one node. Pods of equal size are
the replicas (``replicaCount`` = their number) of one ``TensorParallel`` group named ``pod``
of the pod's GPUs with ``maxHopCount: 0`` (a pod cannot span nodes); the ``DataParallel``
group (``gpusPerGroup: 1``) carries the GPU type and the hop limit between pods. A single pod
of another size (a PyTorchJob Master, an MPIJob Launcher with GPUs) is an ``Auxiliary``
unit; anything else cannot be one gang of hyperplace's and is refused with the field. Pods without GPUs are not
placed by hyperplace (a note says so); a job none of whose pods asks for a GPU (Kueue's CPU
samples) is left out with a note.

The queue: Kueue's ``kueue.x-k8s.io/queue-name`` label is kept; Volcano's ``spec.queue``
becomes the ``volcano.sh/queue-name`` label. ``minAvailable``/``minMember`` below the pod
count is noted: hyperplace places the whole gang.

The model: the ``hyperplace.io/model`` annotation (a preset name or a model file path), else
``spec.model`` is ``unspecified``: the job is placed like any other (placement needs no
model); cost estimates that need one use the documented default (see the README).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from hyperplace.errors import InputError
from hyperplace.instances.importers.kubernetes import (
    DEFAULT_LEVELS,
    HOSTNAME_LABEL,
    PRODUCT_LABELS,
    container_gpus,
    gpu_quantity,
    mapping_or_empty,
)
from hyperplace.models.gpu import GPUCatalog, default_catalog

MODEL_ANNOTATION = "hyperplace.io/model"
UNSPECIFIED_MODEL = "unspecified"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
VOLCANO_QUEUE_LABEL = "volcano.sh/queue-name"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
JOB_API = "ai.example.com/v1alpha1"
JOB_KIND = "FoundationModelTrainingJob"
#: The workload's own pod templates, kept for ``hyperplace manifests`` (JSON: ``tasks``
#: [{``name``, ``replicas``, ``gpus`` per pod, ``template``}] in the document's order, and a
#: Volcano Job's ``plugins``), so the written Job runs the user's containers.
POD_TEMPLATES_ANNOTATION = "hyperplace.io/pod-templates"

#: (apiVersion group, kind) of the workloads read.
WORKLOAD_KINDS = {
    ("batch.volcano.sh", "Job"), ("scheduling.volcano.sh", "PodGroup"), ("batch", "Job"),
    ("jobset.x-k8s.io", "JobSet"), ("kubeflow.org", "PyTorchJob"), ("kubeflow.org", "MPIJob"),
}


def _group(api_version: Any) -> str:
    text = str(api_version or "")
    return text.split("/")[0] if "/" in text else ""


def is_job_document(doc: Mapping[str, Any]) -> bool:
    return (_group(doc.get("apiVersion")), doc.get("kind")) in WORKLOAD_KINDS


def _count(value: Any, default: int, src: str, path: str) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InputError(f"must be a whole number >= 0, got {value!r}", source=src, path=path)
    return value


class PodSet:
    """Pods of one template: (role name, count, template, path of the template)."""

    def __init__(self, name: str, count: int, template: dict[str, Any], path: str):
        self.name, self.count, self.template, self.path = name, count, template, path


def _pod_sets(doc: dict[str, Any], src: str, where: str) -> list[PodSet]:
    kind, group = doc.get("kind"), _group(doc.get("apiVersion"))
    spec = mapping_or_empty(doc.get("spec"), src, f"{where}spec")
    if (group, kind) == ("batch.volcano.sh", "Job"):
        tasks = spec.get("tasks")
        if not isinstance(tasks, list) or not tasks:
            raise InputError("a Volcano Job needs spec.tasks", source=src, path=f"{where}spec.tasks")
        return [PodSet(str((t or {}).get("name", f"task-{i}")),
                       _count((t or {}).get("replicas"), 1, src, f"{where}spec.tasks[{i}].replicas"),
                       mapping_or_empty((t or {}).get("template"), src, f"{where}spec.tasks[{i}].template"),
                       f"{where}spec.tasks[{i}].template") for i, t in enumerate(tasks)]
    if (group, kind) == ("batch", "Job"):
        return [PodSet("job", _count(spec.get("parallelism"), 1, src, f"{where}spec.parallelism"),
                       mapping_or_empty(spec.get("template"), src, f"{where}spec.template"),
                       f"{where}spec.template")]
    if kind == "JobSet":
        rjs = spec.get("replicatedJobs")
        if not isinstance(rjs, list) or not rjs:
            raise InputError("a JobSet needs spec.replicatedJobs", source=src,
                             path=f"{where}spec.replicatedJobs")
        out = []
        for i, rj in enumerate(rjs):
            p = f"{where}spec.replicatedJobs[{i}]"
            rj = mapping_or_empty(rj, src, p)
            job_spec = mapping_or_empty(mapping_or_empty(rj.get("template"), src, f"{p}.template").get("spec"), src,
                          f"{p}.template.spec")
            n = _count(rj.get("replicas"), 1, src, f"{p}.replicas") * \
                _count(job_spec.get("parallelism"), 1, src, f"{p}.template.spec.parallelism")
            out.append(PodSet(str(rj.get("name", f"rj-{i}")), n,
                              mapping_or_empty(job_spec.get("template"), src, f"{p}.template.spec.template"),
                              f"{p}.template.spec.template"))
        return out
    if kind in ("PyTorchJob", "MPIJob"):
        key = "pytorchReplicaSpecs" if kind == "PyTorchJob" else "mpiReplicaSpecs"
        roles = mapping_or_empty(spec.get(key), src, f"{where}spec.{key}")
        if not roles:
            raise InputError(f"a {kind} needs spec.{key}", source=src, path=f"{where}spec.{key}")
        out = []
        for role, rs in roles.items():
            p = f"{where}spec.{key}.{role}"
            rs = mapping_or_empty(rs, src, p)
            out.append(PodSet(str(role), _count(rs.get("replicas"), 1, src, f"{p}.replicas"),
                              mapping_or_empty(rs.get("template"), src, f"{p}.template"), f"{p}.template"))
        return out
    raise InputError(f"not a workload kind hyperplace reads: {kind!r}", source=src,
                     path=f"{where}kind")


def claimed_gpus(pod_spec: Mapping[str, Any], claims: Mapping[str, int]) -> int:
    """GPUs a pod takes through DRA: its ``resourceClaims`` that name a ResourceClaim given
    beside it (as ``hyperplace manifests`` writes them), by their request counts."""
    total = 0
    for rc in pod_spec.get("resourceClaims") or []:
        if isinstance(rc, dict) and rc.get("resourceClaimName") in claims:
            total += claims[rc["resourceClaimName"]]
    return total


def selector_types(pod_spec: Mapping[str, Any], cat: GPUCatalog, src: str, where: str
                    ) -> str | None:
    """GPU types a pod spec's nodeSelector / required node affinity allows, as ``a|b``."""
    sel = mapping_or_empty(pod_spec.get("nodeSelector"), src, f"{where}nodeSelector")
    values: list[tuple[str, str]] = []
    for k in PRODUCT_LABELS:
        if k in sel:
            values.append((str(sel[k]), f"{where}nodeSelector.{k}"))
    aff = mapping_or_empty(mapping_or_empty(pod_spec.get("affinity"), src, f"{where}affinity").get("nodeAffinity"), src,
             f"{where}affinity.nodeAffinity")
    req = mapping_or_empty(aff.get("requiredDuringSchedulingIgnoredDuringExecution"), src,
             f"{where}affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution")
    alts: list[str] = []
    for ti, term in enumerate(req.get("nodeSelectorTerms") or []):
        for ei, expr in enumerate((term or {}).get("matchExpressions") or []):
            if (expr or {}).get("key") in PRODUCT_LABELS and expr.get("operator") == "In":
                p = (f"{where}affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                     f".nodeSelectorTerms[{ti}].matchExpressions[{ei}].values")
                alts += [(str(v), p) for v in expr.get("values") or []]  # type: ignore[misc]
    names: list[str] = []
    for value, path in values + alts:  # type: ignore[operator]
        t = cat.find(value)
        if t is None:
            raise InputError(f"GPU product {value!r} is not a known GPU type (known: "
                             f"{', '.join(cat.names())})", source=src, path=path)
        if t.name not in names:
            names.append(t.name)
    if values and alts:  # both must hold: the selector's type, if the affinity allows it
        allowed = [n for n in names[:1] if n in names[1:]] or names[:1]
        return "|".join(allowed)
    return "|".join(names) or None


def _hops_for_level(level: str, levels: Mapping[int, Sequence[str]], src: str, path: str) -> int:
    if level == HOSTNAME_LABEL:
        return 0
    for tier, keys in levels.items():
        if level in keys:
            return 2 * tier - 1
    raise InputError(f"topology level {level!r} is not a level of the Kueue Topology (give the "
                     "Topology document with the job or the queues) nor a known topology label",
                     source=src, path=path)


def job_document(doc: dict[str, Any], src: str, where: str = "", *,
                 levels: Mapping[int, Sequence[str]] | None = None,
                 catalog: GPUCatalog | None = None, claims: Mapping[str, int] | None = None,
                 ) -> tuple[dict[str, Any] | None, list[str]]:
    """(``FoundationModelTrainingJob`` document, notes) for one workload document; None
    (and a note) for a job none of whose pods asks for a GPU."""
    cat = catalog or default_catalog()
    lv = levels or DEFAULT_LEVELS
    kind = doc.get("kind")
    meta = mapping_or_empty(doc.get("metadata"), src, f"{where}metadata")
    name = meta.get("name") or meta.get("generateName")
    if not isinstance(name, str) or not name:
        raise InputError("required field is missing", source=src, path=f"{where}metadata.name")
    name = name.rstrip("-")
    labels = {str(k): str(v) for k, v in mapping_or_empty(meta.get("labels"), src,
                                            f"{where}metadata.labels").items()}
    annotations = {str(k): str(v) for k, v in mapping_or_empty(meta.get("annotations"), src,
                                                 f"{where}metadata.annotations").items()}
    spec = mapping_or_empty(doc.get("spec"), src, f"{where}spec")
    notes: list[str] = []
    kept: list[dict[str, Any]] = []  # the pod templates, for the written manifests
    if kind == "PodGroup":
        members = _count(spec.get("minMember"), 1, src, f"{where}spec.minMember")
        res = mapping_or_empty(spec.get("minResources"), src, f"{where}spec.minResources")
        total = gpu_quantity(res.get("nvidia.com/gpu", 0), src,
                             f"{where}spec.minResources.nvidia.com/gpu")
        if total == 0:
            raise InputError("the PodGroup asks for no GPU (spec.minResources['nvidia.com/gpu'])",
                             source=src, path=f"{where}spec.minResources")
        if members < 1 or total % members:
            raise InputError(f"{total} GPUs do not split evenly over minMember {members} pods",
                             source=src, path=f"{where}spec.minMember")
        sizes = [(members, total // members, None, {}, f"{where}spec")]
    else:
        sizes = []
        for ps in _pod_sets(doc, src, where):
            pod_spec = mapping_or_empty(ps.template.get("spec"), src, f"{ps.path}.spec")
            gpus = container_gpus(pod_spec, src, f"{ps.path}.spec.") or \
                claimed_gpus(pod_spec, claims or {})
            if ps.count == 0:
                continue
            kept.append({"name": ps.name, "replicas": ps.count, "gpus": gpus,
                         "template": ps.template})
            if gpus == 0:
                notes.append(f"{src}: {name}: {ps.count} pod(s) of {ps.name!r} ask for no GPU: "
                             "not placed by hyperplace")
                continue
            sizes.append((ps.count, gpus, pod_spec, mapping_or_empty(ps.template.get("metadata"), src,
                                                      f"{ps.path}.metadata"), ps.path))
    if not sizes:
        return None, [f"{src}: {name}: no pod asks for a GPU (no nvidia.com/gpu in a "
                      "container's resources, no GPU ResourceClaim)"]
    # one accelerator selector, tolerations and hop limit for the gang (the strictest)
    accel: str | None = None
    tolerations: list[dict[str, Any]] = []
    hops: int | None = None
    for _count_, _gpus, pod_spec, pod_meta, path in sizes:
        if pod_spec is not None:
            sel = selector_types(pod_spec, cat, src, f"{path}.spec.")
            if sel and accel and sel != accel:
                raise InputError(f"pods select different GPU types ({accel} and {sel}); "
                                 "hyperplace places one gang on one selector", source=src,
                                 path=f"{path}.spec.nodeSelector")
            accel = sel or accel
            for ti, t in enumerate(pod_spec.get("tolerations") or []):
                t = mapping_or_empty(t, src, f"{path}.spec.tolerations[{ti}]")
                entry = {k: t[k] for k in ("key", "operator", "value", "effect") if t.get(k)}
                if entry.get("key") and entry not in tolerations:
                    tolerations.append(entry)
        ann = {str(k): str(v) for k, v in (pod_meta.get("annotations") or {}).items()}
        if REQUIRED_TOPOLOGY in ann:
            h = _hops_for_level(ann[REQUIRED_TOPOLOGY], lv, src,
                                f"{path}.metadata.annotations.{REQUIRED_TOPOLOGY}")
            hops = h if hops is None else min(hops, h)
        for key in (REQUIRED_TOPOLOGY, PREFERRED_TOPOLOGY):
            if key in ann:
                annotations.setdefault(key, ann[key])
    nt = mapping_or_empty(spec.get("networkTopology"), src, f"{where}spec.networkTopology")
    if nt.get("mode", "hard") == "hard" and "highestTierAllowed" in nt:
        tier = nt["highestTierAllowed"]
        if isinstance(tier, bool) or not isinstance(tier, int) or tier < 1:
            raise InputError(f"must be a tier >= 1, got {tier!r}", source=src,
                             path=f"{where}spec.networkTopology.highestTierAllowed")
        h = 2 * tier - 1
        hops = h if hops is None else min(hops, h)
    elif nt.get("mode") not in (None, "hard", "soft"):
        raise InputError(f"mode must be hard or soft, got {nt.get('mode')!r}", source=src,
                         path=f"{where}spec.networkTopology.mode")
    if spec.get("queue") and kind in ("Job", "PodGroup") and \
            _group(doc.get("apiVersion")) in ("batch.volcano.sh", "scheduling.volcano.sh"):
        labels.setdefault(VOLCANO_QUEUE_LABEL, str(spec["queue"]))
    pods = sum(c for c, *_ in sizes)
    min_avail = spec.get("minAvailable", spec.get("minMember") if kind != "PodGroup" else None)
    if isinstance(min_avail, int) and not isinstance(min_avail, bool) and 0 < min_avail < pods:
        notes.append(f"{src}: {name}: minAvailable {min_avail} < {pods} GPU pods: hyperplace "
                     "places the whole gang")
    by_size: dict[int, int] = {}
    for count, gpus, *_ in sizes:
        by_size[gpus] = by_size.get(gpus, 0) + count
    main = max(by_size, key=lambda g: (by_size[g], g))
    req: dict[str, Any] = {}
    if accel:
        req["acceleratorType"] = accel
    one_node = {"maxHopCount": 0}  # a pod runs on one node
    pod: dict[str, Any] = {"name": "pod", "type": "TensorParallel", "gpusPerGroup": main,
                           "interNodeConnectivity": one_node}
    dp: dict[str, Any] = {"name": "pods", "type": "DataParallel", "gpusPerGroup": 1}
    if req:
        dp["gpuRequirements"] = req
    if hops is not None:
        dp["interNodeConnectivity"] = {"maxHopCount": hops}
    groups: list[dict[str, Any]] = [pod, dp]
    for gpus, count in by_size.items():
        if gpus == main:
            continue
        if count != 1:
            raise InputError(f"{count} pods of {gpus} GPUs beside {by_size[main]} of {main}: "
                             "hyperplace's gang holds one pod size plus single pods of others",
                             source=src, path=f"{where}spec")
        groups.append({"name": f"pod-{gpus}gpu", "type": "Auxiliary", "gpusPerGroup": gpus,
                       "interNodeConnectivity": one_node})
    model = annotations.get(MODEL_ANNOTATION, UNSPECIFIED_MODEL)
    priority: Any = "normal"
    pc = str(spec.get("priorityClassName") or labels.get("kueue.x-k8s.io/priority-class") or "")
    from hyperplace.models.job import PRIORITY_LEVELS

    if pc.lower() in PRIORITY_LEVELS:
        priority = pc.lower()
    annotations.setdefault("hyperplace.io/source-kind",
                           f"{doc.get('apiVersion')}/{kind}")
    if kept:
        keep: dict[str, Any] = {"tasks": kept}
        if isinstance(spec.get("plugins"), dict) and kind == "Job" and \
                _group(doc.get("apiVersion")) == "batch.volcano.sh":
            keep["plugins"] = spec["plugins"]
        annotations[POD_TEMPLATES_ANNOTATION] = json.dumps(keep, separators=(",", ":"), default=str,
                                                           sort_keys=True)
    out_meta: dict[str, Any] = {"name": name, "labels": labels, "annotations": annotations}
    if meta.get("namespace"):
        out_meta["namespace"] = str(meta["namespace"])
    job_spec: dict[str, Any] = {"model": model, "replicaCount": by_size[main],
                                "resourceGroups": groups, "priority": priority}
    if tolerations:
        job_spec["tolerations"] = tolerations
    return {"apiVersion": JOB_API, "kind": JOB_KIND, "metadata": out_meta, "spec": job_spec}, notes
