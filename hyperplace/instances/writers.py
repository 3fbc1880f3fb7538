"""Plans written as what the cluster enforces: Kubernetes (DRA, Volcano, Kueue) and Slurm.

A :class:`~hyperplace.models.plan.PlacementPlan` names, per gang unit, the exact GPUs
(node, index). Kubernetes and Slurm can hold a job to that only through their own objects;
this module writes them (see the README's table of what is read and written):

Kubernetes (:func:`kubernetes_manifests`)
    Per admitted job one Volcano ``Job`` (``batch.volcano.sh/v1alpha1``) with one task per
    pod (a pod = the GPUs of one unit on one node): the task's pod is pinned to its node
    (required node affinity on ``kubernetes.io/hostname``) and takes its GPUs through a DRA
    ``ResourceClaim`` (``resource.k8s.io/v1``) written beside it, referenced from the pod's
    ``resourceClaims`` and the container's ``resources.claims``. The claim asks the NVIDIA
    DRA driver's device class ``gpu.nvidia.com`` for exactly the pod's GPU count, selected by
    a device attribute the driver publishes (:data:`DRA_ATTRIBUTES`, per driver release,
    ``--dra-driver``; default :data:`DEFAULT_DRA_DRIVER`), the first of these the instance
    knows for the node: ``uuid`` (every release) when the node's GPU UUIDs are known
    (``hyperplace.io/gpu-uuids``, from ResourceSlices at import); the PCI bus id (v25.8:
    ``gpu.nvidia.com/pcieBusID``; v25.12 on: the standard ``resource.kubernetes.io/pciBusID``)
    when the bus ids are known (``hyperplace.io/gpu-pci-bus-ids``: from ResourceSlices, or
    from an NCCL topology file, which lists each GPU's ``busid``); on v25.3 ``index``, the
    NVML device index (nvidia-smi's order, hyperplace's GPU index), known without any slice,
    so every v25.3 claim is exact. Otherwise only the count is asked (the node is still
    pinned; which of its GPUs is the driver's choice). The claim's ``hyperplace.io/exact``
    annotation says ``true``/``false`` and ``hyperplace.io/selected-by`` names the attribute
    (or ``count``). No later release publishes an id known without slices: ``index`` and
    ``minor`` were removed (commits 36fc80ab, 50d90da0, September 2025), and a device's name
    (``gpu-<minor>``, deviceinfo.go L107) cannot be selected: DRA's CEL sees
    ``device.driver``, ``device.attributes`` and ``device.capacity`` only. The Job's
    ``spec.networkTopology`` is ``mode: hard`` with ``highestTierAllowed`` the smallest HyperNode tier that holds all its nodes (tier t spans
    ``2t - 1`` hops), ``minAvailable`` all its pods, and ``queue`` its Volcano queue.
    The pods run the workload's own pod templates (:func:`source_tasks`, kept by the importer),
    with only the pin, the product selector and the claim added (the containers'
    ``nvidia.com/gpu`` requests give way to the claim); pods without GPUs are kept unpinned. A
    job with no template (hyperplace's own format) gets a placeholder container, annotated
    :data:`PLACEHOLDER_ANNOTATION`.
    Each job's Kueue ``TopologyAssignment`` (:func:`topology_assignment`) is written in the
    levels of the user's Kueue ``Topology`` (its ``nodeLabel`` keys, the values read from
    the nodes' labels), pod counts per domain, into the job's
    ``kueue.x-k8s.io/topology-assignment`` annotation (JSON), in the shape of the user's Kueue
    API (``--kueue-api``; else the apiVersion of the ``--topology`` document, a ``v1alpha1``
    Topology (Kueue before v0.14) meaning ``v1beta1``; else :data:`DEFAULT_KUEUE_API`):
    ``v1beta2`` (Kueue v0.15 on; its storage version from v0.16):
    ``levels`` + ``slices[{domainCount, valuesPerLevel[{universal | individual.roots}],
    podCounts{universal | individual}}]`` (kubernetes-sigs/kueue
    ``apis/kueue/v1beta2/workload_types.go``, ``TopologyAssignmentSlice``); ``v1beta1``:
    ``levels`` + ``domains[{values, count}]``. The plan file keeps the v1beta1 shape.
Slurm (:func:`sbatch_script`)
    ``#SBATCH --nodes``, ``--nodelist`` (the planned nodes), ``--gres=gpu:N`` (GPUs per
    node), ``--switches=K`` (the leaf switches the nodes span), and per node the GPU
    pod's GPU indices as ``CUDA_VISIBLE_DEVICES`` in an ``srun`` line per pod (unit on a node),
    since ``--gres`` counts GPUs and cannot name them; it runs the pod's own command (else a
    placeholder marked as one).
"""

from __future__ import annotations

import copy
import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from hyperplace.instances.importers.kubernetes import BUS_IDS_LABEL, DRA_DRIVER, HOSTNAME_LABEL, \
    UUIDS_LABEL
from hyperplace.models.gpu import gfd_product
from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan

TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/topology-assignment"
GPUS_ANNOTATION = "hyperplace.io/gpus"
EXACT_ANNOTATION = "hyperplace.io/exact"
SELECTED_BY_ANNOTATION = "hyperplace.io/selected-by"
DRIVER_ANNOTATION = "hyperplace.io/dra-driver"

#: Per NVIDIA DRA driver release (NVIDIA/k8s-dra-driver-gpu), the attributes it publishes for
#: a full GPU that name one device, in the order tried: (id kind, domain, attribute).
#: v25.3.2 cmd/gpu-kubelet-plugin/deviceinfo.go L98 ``uuid``, L104-105 ``index`` (IntValue,
#: the NVML index; L101 ``minor``); v25.8.1 deviceinfo.go L88 ``uuid``, L109 ``pcieBusID``;
#: v25.12.0 cmd/gpu-kubelet-plugin/partitions.go L42 ``uuid``, L37 + L63 the standard
#: ``resource.kubernetes.io/pciBusID`` (as on main: deviceinfo.go L157, L181; nvlib.go L533).
DRA_ATTRIBUTES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "25.3": (("uuid", "gpu.nvidia.com", "uuid"), ("index", "gpu.nvidia.com", "index")),
    "25.8": (("uuid", "gpu.nvidia.com", "uuid"), ("bus", "gpu.nvidia.com", "pcieBusID")),
    "25.12": (("uuid", "gpu.nvidia.com", "uuid"), ("bus", "resource.kubernetes.io", "pciBusID")),
}
DEFAULT_DRA_DRIVER = "25.12"
KUEUE_APIS = ("v1beta1", "v1beta2")
DEFAULT_KUEUE_API = "v1beta2"
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def dns_name(*parts: str, limit: int = 63) -> str:
    """A DNS-1123 label from ``parts`` (lower case, ``-`` for anything else)."""
    text = "-".join(p for p in parts if p)
    text = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return (text[:limit].rstrip("-")) or "x"


def pods_of(plan: PlacementPlan, job: str) -> list[tuple[str, str, list[int]]]:
    """(unit, node, GPU indices) of a job's pods: each unit's GPUs on each node, in order."""
    out = []
    for up in plan.placements:
        if up.job != job:
            continue
        by_node: dict[str, list[int]] = defaultdict(list)
        for g in up.gpus:
            by_node[g.node].append(g.gpu)
        for node, gpus in by_node.items():
            out.append((up.unit, node, sorted(gpus)))
    return out


def device_selector(instance: Instance, node_name: str, gpus: Sequence[int],
                    driver: str = DEFAULT_DRA_DRIVER) -> tuple[str | None, str]:
    """(CEL expression selecting exactly these GPUs of the node or None, the attribute used
    as ``domain/name``, or ``count`` when none is known): see the module docstring."""
    _, node = instance.node_index[node_name]
    known = {"uuid": UUIDS_LABEL, "bus": BUS_IDS_LABEL}
    for kind, domain, attr in DRA_ATTRIBUTES[driver]:
        ref = f"device.attributes['{domain}'].{attr}"
        if kind == "index":
            return f"{ref} in [{', '.join(str(g) for g in gpus)}]", f"{domain}/{attr}"
        ids = node.labels.get(known[kind], "").split(",")
        if len(ids) == node.gpu_count and all(ids):
            chosen = ", ".join(f"'{ids[g]}'" for g in gpus)
            return f"{ref} in [{chosen}]", f"{domain}/{attr}"
    return None, "count"


def resource_claim(instance: Instance, job: str, unit: str, node: str, gpus: Sequence[int],
                   namespace: str | None, driver: str = DEFAULT_DRA_DRIVER) -> dict[str, Any]:
    expr, selected_by = device_selector(instance, node, gpus, driver)
    request: dict[str, Any] = {"deviceClassName": DRA_DRIVER, "allocationMode": "ExactCount",
                               "count": len(gpus)}
    if expr:
        request["selectors"] = [{"cel": {"expression": expr}}]
    meta: dict[str, Any] = {"name": dns_name(job, unit, node, limit=253),
                            "labels": {"hyperplace.io/job": dns_name(job)},
                            "annotations": {GPUS_ANNOTATION: f"{node}:{','.join(map(str, gpus))}",
                                            EXACT_ANNOTATION: "true" if expr else "false",
                                            SELECTED_BY_ANNOTATION: selected_by,
                                            DRIVER_ANNOTATION: f"v{driver}"}}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta,
            "spec": {"devices": {"requests": [{"name": "gpus", "exactly": request}]}}}


def topology_levels(instance: Instance, topology: Mapping[str, Any] | None) -> list[str]:
    """The TopologyAssignment levels: the Kueue Topology's ``nodeLabel`` keys (outermost
    first), else the topology label keys the nodes carry (the importer's default map),
    ending with ``kubernetes.io/hostname``."""
    if topology is not None:
        keys = [str(lv["nodeLabel"]) for lv in topology["spec"]["levels"]]
    else:
        from hyperplace.instances.importers.kubernetes import DEFAULT_LEVELS

        present = set().union(*(n.labels for c in instance.clusters for n in c.nodes))
        keys = []
        for tier in sorted(DEFAULT_LEVELS, reverse=True):
            for k in DEFAULT_LEVELS[tier]:
                if k in present:
                    keys.append(k)
                    break
    if HOSTNAME_LABEL not in keys:
        keys.append(HOSTNAME_LABEL)
    return keys


def label_levels(instance: Instance) -> list[str] | None:
    """The topology label keys the nodes carry, outermost first, then the hostname; None
    when no node carries one (a generated or file-described fabric: hyperplace's own levels
    then)."""
    cached = _LEVELS_CACHE.get(id(instance))
    if cached is not None and cached[0] is instance:
        return cached[1]
    levels = topology_levels(instance, None)
    out = levels if len(levels) > 1 else None
    _LEVELS_CACHE.clear()  # one instance at a time: a plan is built for one round
    _LEVELS_CACHE[id(instance)] = (instance, out)
    return out


_LEVELS_CACHE: dict[int, tuple[Instance, list[str] | None]] = {}


def topology_assignment(instance: Instance, plan: PlacementPlan, job: str,
                        levels: Sequence[str]) -> dict[str, Any]:
    """Kueue's TopologyAssignment (``levels``, ``domains[{values, count}]``) of the job's
    pods, the values read from the nodes' own labels (the hostname level is the node name
    when the label is missing)."""
    counts: dict[tuple[str, ...], int] = defaultdict(int)
    for _unit, node_name, _gpus in pods_of(plan, job):
        _, node = instance.node_index[node_name]
        values = []
        for key in levels:
            value = node.labels.get(key) or (node.name if key == HOSTNAME_LABEL else None)
            if value is None:
                raise ValueError(f"node {node.name!r} has no label {key!r}, a level of the "
                                 "Kueue Topology")
            values.append(value)
        counts[tuple(values)] += 1
    return {"levels": list(levels),
            "domains": [{"values": list(v), "count": c} for v, c in sorted(counts.items())]}


def kueue_api_of(topology: Mapping[str, Any] | None, given: str | None = None) -> str:
    """The Kueue API version a TopologyAssignment is written in: ``given``, else the user's
    Topology document's, else :data:`DEFAULT_KUEUE_API`."""
    if given is not None:
        if given not in KUEUE_APIS:
            raise ValueError(f"Kueue API {given!r} is not one of {', '.join(KUEUE_APIS)}")
        return given
    version = str((topology or {}).get("apiVersion", "")).rpartition("/")[2]
    if version == "v1alpha1":  # Topology before Kueue v0.14: its Workloads are v1beta1
        return "v1beta1"
    return version if version in KUEUE_APIS else DEFAULT_KUEUE_API


def as_v1beta2(ta: Mapping[str, Any]) -> dict[str, Any]:
    """A v1beta1 TopologyAssignment (levels, domains) in Kueue v1beta2's shape: one slice
    covering every domain, a level's value ``universal`` when all domains share it, else
    ``individual.roots`` (one per domain); pod counts ``universal`` when all are equal."""
    domains = ta["domains"]
    per_level = []
    for i in range(len(ta["levels"])):
        values = [d["values"][i] for d in domains]
        per_level.append({"universal": values[0]} if len(set(values)) == 1
                         else {"individual": {"roots": values}})
    counts = [int(d["count"]) for d in domains]
    pods: dict[str, Any] = {"universal": counts[0]} if len(set(counts)) == 1 \
        else {"individual": counts}
    return {"levels": list(ta["levels"]),
            "slices": [{"domainCount": len(domains), "valuesPerLevel": per_level,
                        "podCounts": pods}]}


def v1beta2_domains(ta: Mapping[str, Any]) -> list[tuple[tuple[str, ...], int]]:
    """(values per level, pods) of every domain of a v1beta2 TopologyAssignment."""
    out = []
    for sl in ta["slices"]:
        n = sl["domainCount"]
        cols = []
        for lv in sl["valuesPerLevel"]:
            if "universal" in lv:
                cols.append([lv["universal"]] * n)
            else:
                ind = lv["individual"]
                cols.append([f"{ind.get('prefix', '')}{r}{ind.get('suffix', '')}"
                             for r in ind["roots"]])
        pc = sl["podCounts"]
        counts = [pc["universal"]] * n if "universal" in pc else list(pc["individual"])
        out += [(tuple(c[k] for c in cols), counts[k]) for k in range(n)]
    return out


def _tier_span(instance: Instance, nodes: Sequence[str]) -> int:
    """The smallest HyperNode tier holding all ``nodes``: tier t = hop radius 2t - 1."""
    hops = 0
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            h = _cluster_of(instance, a).network.hop_count(a, b)
            hops = max(hops, h if h is not None else 2 * 4 - 1)
    return max(1, (hops + 2) // 2)


def _cluster_of(instance: Instance, node: str) -> Any:
    return instance.node_index[node][0]


PLACEHOLDER_ANNOTATION = "hyperplace.io/placeholder-container"
#: On a pinned pod's template: the workload's task (role) it is a pod of. A task of N pods is
#: written as N tasks of one pinned pod each (each pod has its own node and ResourceClaim).
SOURCE_TASK_ANNOTATION = "hyperplace.io/source-task"
PLACEHOLDER_COMMAND = "python train.py"


def source_tasks(instance: Instance, job: str) -> dict[str, Any] | None:
    """The workload's own pod templates the importer kept (``hyperplace.io/pod-templates``:
    ``tasks`` and a Volcano Job's ``plugins``), or None for a job written in hyperplace's
    own format (no template: the writers then use a marked placeholder container)."""
    from hyperplace.instances.importers.jobs import POD_TEMPLATES_ANNOTATION

    manifest = next((j for j in instance.jobs if j.name == job), None)
    raw = manifest.metadata.annotations.get(POD_TEMPLATES_ANNOTATION) if manifest else None
    if not raw:
        return None
    kept = json.loads(raw)
    return kept if kept.get("tasks") else None


def _pod_templates(plan: PlacementPlan, job: str, kept: Mapping[str, Any]
                   ) -> list[tuple[str, str, dict[str, Any]]]:
    """(pod name, the workload's task name, its template) for each planned pod of ``pods_of``: the GPU pods of
    the workload in its order, each size's pods to the units of that size."""
    by_size: dict[int, list[tuple[str, str, dict[str, Any]]]] = defaultdict(list)
    for t in kept["tasks"]:
        for i in range(int(t["replicas"])):
            if t["gpus"]:
                name = t["name"] if int(t["replicas"]) == 1 else f"{t['name']}-{i}"
                by_size[int(t["gpus"])].append((name, t["name"], t["template"]))
    main = max(by_size, key=lambda g: (len(by_size[g]), g))
    taken: dict[int, int] = defaultdict(int)
    out = []
    for unit, _node, gpus in pods_of(plan, job):
        size = main if "/" in unit else len(gpus)  # replica units "pod/<r>"; others are single pods
        pool = by_size.get(size) or by_size[main]
        k = taken[size]
        out.append(pool[min(k, len(pool) - 1)])
        taken[size] += max(1, len(gpus) // size) if "/" in unit else 1
    return out


def _pinned_spec(template: Mapping[str, Any], host: str, claim: str, product: str | None
                 ) -> dict[str, Any]:
    """The user's pod spec with what the plan decides added: the node (required affinity on
    the hostname, first in every term), the GPU product selector, the DRA claim ``gpus`` in
    place of the containers' ``nvidia.com/gpu`` requests/limits."""
    spec = copy.deepcopy(dict(template.get("spec") or {}))
    pin = {"key": HOSTNAME_LABEL, "operator": "In", "values": [host]}
    required = spec.setdefault("affinity", {}).setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchExpressions"] = [pin, *[e for e in term.get("matchExpressions") or []
                                           if e.get("key") != HOSTNAME_LABEL]]
    required["nodeSelectorTerms"] = terms
    if product:
        spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}),
                                "nvidia.com/gpu.product": product}
    spec["resourceClaims"] = [*[rc for rc in spec.get("resourceClaims") or []
                                if rc.get("name") != "gpus"],
                              {"name": "gpus", "resourceClaimName": claim}]
    containers = spec.get("containers") or []
    gpu_users = []
    for c in containers:
        res = c.get("resources") or {}
        if any("nvidia.com/gpu" in (res.get(k) or {}) for k in ("limits", "requests")):
            gpu_users.append(c)
            for k in ("limits", "requests"):
                if k in res:
                    res[k] = {r: q for r, q in res[k].items() if r != "nvidia.com/gpu"}
                    if not res[k]:
                        del res[k]
    for c in gpu_users or containers[:1]:
        res = c.setdefault("resources", {})
        res["claims"] = [*[x for x in res.get("claims") or [] if x.get("name") != "gpus"],
                         {"name": "gpus"}]
    spec.setdefault("restartPolicy", "OnFailure")
    return spec


def volcano_job(instance: Instance, plan: PlacementPlan, job: str, claims: Mapping[tuple, str],
                *, namespace: str | None, queue: str | None, image: str,
                topology: dict[str, Any] | None) -> dict[str, Any]:
    tasks = []
    pods = pods_of(plan, job)
    kept = source_tasks(instance, job)
    templates = _pod_templates(plan, job, kept) if kept else [None] * len(pods)
    for (unit, node_name, gpus), source in zip(pods, templates, strict=True):
        _, node = instance.node_index[node_name]
        claim = claims[(unit, node_name)]
        host = node.labels.get(HOSTNAME_LABEL, node.name)
        product = gfd_product(node.gpu_type)
        pod_ann = {GPUS_ANNOTATION: f"{node_name}:{','.join(map(str, gpus))}"}
        if source is not None:
            name, task, template = source
            spec = _pinned_spec(template, host, claim, product)
            meta = copy.deepcopy(dict(template.get("metadata") or {}))
            meta["annotations"] = {**(meta.get("annotations") or {}), **pod_ann,
                                   SOURCE_TASK_ANNOTATION: task}
            tasks.append({"name": dns_name(name, node_name), "replicas": 1, "minAvailable": 1,
                          "template": {"metadata": meta, "spec": spec}})
            continue
        placeholder = {"name": "trainer", "image": image,
                       "resources": {"claims": [{"name": "gpus"}]}}
        spec = _pinned_spec({"spec": {"containers": [placeholder]}}, host, claim, product)
        pod_ann[PLACEHOLDER_ANNOTATION] = "true"
        tasks.append({"name": dns_name(unit, node_name), "replicas": 1, "minAvailable": 1,
                      "template": {"metadata": {"annotations": pod_ann}, "spec": spec}})
    for t in (kept or {}).get("tasks", []):  # pods without GPUs: the user's, not pinned
        if not t["gpus"]:
            tasks.append({"name": dns_name(t["name"]), "replicas": int(t["replicas"]),
                          "template": t["template"]})
    nodes = sorted({n for _, n, _ in pods})
    ann: dict[str, str] = {}
    if topology is not None:
        ann[TOPOLOGY_ANNOTATION] = json.dumps(topology, separators=(",", ":"))
    if kept is None:
        ann[PLACEHOLDER_ANNOTATION] = "true"
    meta_out: dict[str, Any] = {"name": dns_name(job),
                                "labels": {"hyperplace.io/job": dns_name(job)},
                                "annotations": ann}
    if namespace:
        meta_out["namespace"] = namespace
    spec_out: dict[str, Any] = {"schedulerName": "volcano",
                                "minAvailable": sum(t["replicas"] for t in tasks),
                                "networkTopology": {"mode": "hard",
                                                    "highestTierAllowed": _tier_span(instance, nodes)},
                                "tasks": tasks}
    if kept and kept.get("plugins"):
        spec_out["plugins"] = kept["plugins"]
    if queue:
        spec_out["queue"] = queue
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta_out,
            "spec": spec_out}


def kubernetes_manifests(instance: Instance, plan: PlacementPlan, *,
                         topology: Mapping[str, Any] | None = None,
                         namespace: str | None = None, image: str = DEFAULT_IMAGE,
                         dra_driver: str = DEFAULT_DRA_DRIVER, kueue_api: str | None = None
                         ) -> dict[str, list[dict[str, Any]]]:
    """job -> its documents (ResourceClaims, then the Volcano Job), for every admitted job."""
    if dra_driver not in DRA_ATTRIBUTES:
        raise ValueError(f"NVIDIA DRA driver release {dra_driver!r} is not one of "
                         f"{', '.join(DRA_ATTRIBUTES)}")
    api = kueue_api_of(topology, kueue_api)
    levels = topology_levels(instance, topology)
    jobs = {j.name: j for j in instance.jobs}
    out: dict[str, list[dict[str, Any]]] = {}
    for summary in plan.jobs:
        job = summary.job
        manifest = jobs.get(job)
        ns = namespace or (manifest.metadata.namespace if manifest else None)
        queue = None
        if manifest is not None:
            queue = manifest.metadata.labels.get("volcano.sh/queue-name")
        claims: dict[tuple, str] = {}
        docs = []
        for unit, node, gpus in pods_of(plan, job):
            rc = resource_claim(instance, job, unit, node, gpus, ns, dra_driver)
            claims[(unit, node)] = rc["metadata"]["name"]
            docs.append(rc)
        ta = topology_assignment(instance, plan, job, levels)
        if api == "v1beta2":
            ta = as_v1beta2(ta)
        docs.append(volcano_job(instance, plan, job, claims, namespace=ns, queue=queue,
                                image=image, topology=ta))
        out[job] = docs
    return out


def pod_command(template: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """(the shell command of the pod's GPU container: its ``command`` + ``args``, or None
    when it runs its image's entrypoint; the container's image)."""
    import shlex

    containers = (template.get("spec") or {}).get("containers") or []
    gpu = [c for c in containers if any("nvidia.com/gpu" in ((c.get("resources") or {}).get(k) or {})
                                        for k in ("limits", "requests"))]
    c = (gpu or containers or [{}])[0]
    argv = [str(a) for a in (c.get("command") or []) + (c.get("args") or [])]
    return (shlex.join(argv) if argv else None), c.get("image")


def sbatch_script(instance: Instance, plan: PlacementPlan, job: str, *,
                  command: str | None = None) -> str:
    """An sbatch script holding the job to its planned nodes and GPUs (module docstring).
    Each pod's ``srun`` runs ``command`` if given, else the command of the workload's own pod
    template (its GPU container's ``command`` + ``args``; the image is named in a comment:
    Slurm runs it on the node, not in the image, unless the site's container plugin is used),
    else a placeholder (:data:`PLACEHOLDER_COMMAND`) under a ``# hyperplace: PLACEHOLDER``
    comment."""
    per_node: dict[str, list[int]] = defaultdict(list)
    for _unit, node, gpus in pods_of(plan, job):
        per_node[node] += gpus
    if not per_node:
        raise ValueError(f"job {job!r} is not admitted in the plan")
    nodes = sorted(per_node)
    counts = {len(v) for v in per_node.values()}
    leaves = set()
    for n in nodes:
        leaves.add(_cluster_of(instance, n).network.leaf_of(n))
    lines = ["#!/bin/bash", f"#SBATCH --job-name={job}", f"#SBATCH --nodes={len(nodes)}",
             f"#SBATCH --nodelist={','.join(nodes)}",
             f"#SBATCH --gres=gpu:{max(counts)}",
             f"#SBATCH --switches={len(leaves)}",
             f"# hyperplace plan: {'; '.join(f'{n}:{sorted(g)}' for n, g in sorted(per_node.items()))}",
             ""]
    kept = source_tasks(instance, job)
    pods = pods_of(plan, job)
    templates = _pod_templates(plan, job, kept) if kept else [None] * len(pods)
    for (_unit, n, gpus), source in zip(pods, templates, strict=True):  # one task per pod
        cmd = command
        if cmd is None and source is not None:
            cmd, image = pod_command(source[2])
            lines.append(f"# {source[0]}: the workload's command" +
                         (f" (its image: {image})" if image else ""))
        if cmd is None:
            cmd = PLACEHOLDER_COMMAND
            why = "the pod names no command: its image's entrypoint" if source \
                else "the job has no pod template"
            lines.append(f"# hyperplace: PLACEHOLDER command ({why}): replace "
                         f"{PLACEHOLDER_COMMAND!r} with the training command")
        lines.append(f"srun --nodes=1 --ntasks=1 --exact --nodelist={n} --export=ALL,"
                     f"CUDA_VISIBLE_DEVICES={','.join(map(str, gpus))} {cmd} &")
    others = [f"{t['name']} ({t['replicas']})" for t in (kept or {}).get("tasks", [])
              if not t["gpus"]]
    if others:
        lines.append(f"# pods without GPUs, not placed by hyperplace: {', '.join(others)}")
    lines += ["wait", ""]
    return "\n".join(lines)


def split_tasks(docs: Sequence[Mapping[str, Any]]) -> dict[str, list[str]]:
    """The workload's tasks of several pods the written Jobs split into one task per pinned
    pod: source task -> the written task names (Volcano's svc plugin names its host files
    and ``VC_<TASK>_HOSTS`` per task, so a command reading the old task's must read these)."""
    out: dict[str, list[str]] = defaultdict(list)
    for d in docs:
        if d.get("kind") != "Job":
            continue
        for t in d["spec"]["tasks"]:
            src = ((t["template"].get("metadata") or {}).get("annotations") or {}).get(
                SOURCE_TASK_ANNOTATION)
            if src and src != t["name"]:
                out[f"{d['metadata']['name']}/{src}"].append(t["name"])
    return dict(out)


def is_placeholder(instance: Instance, job: str) -> bool:
    """True when the written manifests run a placeholder (no pod template for the job)."""
    return source_tasks(instance, job) is None


def placements_from_manifests(docs: Sequence[Mapping[str, Any]], instance: Instance
                              ) -> dict[str, dict[str, list[int]]]:
    """Read written manifests back: job -> node -> GPU indices, from each pod's node
    affinity and its ResourceClaim's device selector (UUIDs or PCI bus ids mapped back to
    indices through the node's labels; a count-only claim falls back to its annotation)."""
    claims = {d["metadata"]["name"]: d for d in docs if d.get("kind") == "ResourceClaim"}
    out: dict[str, dict[str, list[int]]] = {}
    for d in docs:
        if d.get("kind") != "Job":
            continue
        job = d["metadata"]["name"]
        for task in d["spec"]["tasks"]:
            spec = task["template"]["spec"]
            ours = [rc for rc in spec.get("resourceClaims") or [] if rc.get("name") == "gpus"]
            if not ours:  # a pod of the user's without GPUs: not placed by hyperplace
                continue
            term = spec["affinity"]["nodeAffinity"][
                "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
            host = term["matchExpressions"][0]["values"][0]
            node = next(n for c in instance.clusters for n in c.nodes
                        if n.labels.get(HOSTNAME_LABEL, n.name) == host)
            claim = claims[ours[0]["resourceClaimName"]]
            req = claim["spec"]["devices"]["requests"][0]["exactly"]
            gpus: list[int]
            if req.get("selectors"):
                expr = req["selectors"][0]["cel"]["expression"]
                listed = expr.split(" in ", 1)[1]
                if ".index in" in expr:
                    gpus = sorted(int(i) for i in re.findall(r"\d+", listed))
                else:
                    ids = re.findall(r"'([^']+)'", listed)
                    label = UUIDS_LABEL if ".uuid in" in expr else BUS_IDS_LABEL
                    known = node.labels[label].split(",")
                    gpus = sorted(known.index(i) for i in ids)
            else:
                gpus = [int(g) for g in claim["metadata"]["annotations"][GPUS_ANNOTATION]
                        .split(":", 1)[1].split(",")]
            assert len(gpus) == req["count"]
            out.setdefault(job, {}).setdefault(node.name, []).extend(gpus)
    return {j: {n: sorted(g) for n, g in v.items()} for j, v in out.items()}
