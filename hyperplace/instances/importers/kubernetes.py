"""Kubernetes ``Node`` objects (``kubectl get nodes -o json``) and ``Pod`` lists -> a Cluster.

What an operator has is the API server's view: ``kubectl get nodes -o json`` (a ``List`` of
``Node``; one ``Node`` as ``kubectl get node NAME -o yaml`` prints it is read too) and
``kubectl get pods -A -o json`` for what already runs. The mapping:

GPUs of a node
    ``status.capacity["nvidia.com/gpu"]`` is the node's GPU count (``amd.com/gpu`` for AMD);
    without it, NVIDIA GPU Feature Discovery's ``nvidia.com/gpu.count`` label. GPUs the device
    plugin does not offer (``capacity - allocatable``, the plugin's unhealthy devices) are
    marked ``faulty``; the API does not say which indices, so the highest ones are taken.
    A node with no GPU is left out (CPU and control-plane nodes), and so, with a note, is a
    node whose ``nvidia.com/gpu`` are not whole GPUs: time-sliced (GFD's
    ``nvidia.com/gpu.replicas`` > 1, a ``-SHARED`` product: the capacity is replicas x GPUs)
    or MIG slices under the single strategy (a ``-MIG-<profile>`` product); only such nodes
    is an error.
GPU type
    GFD's ``nvidia.com/gpu.product`` (``NVIDIA-H100-80GB-HBM3``, ``NVIDIA-GB200``;
    ``-SHARED``/``-MIG-...`` suffixes name the whole GPU) through the catalog's aliases,
    checked against ``nvidia.com/gpu.memory`` (MiB) when both are there: an H200 labelled
    with 143771 MiB is never typed H100-80. In a VM given an NVIDIA vGPU
    (``nvidia.com/vgpu.present: "true"``) the product names a profile,
    ``<GRID|NVIDIA>-<board>-<framebuffer GB><series>``: a whole-board profile
    (``GRID-A100-40C``) is that GPU, a smaller one (``NVIDIA-A16-4Q``) a time-shared slice,
    refused with the profile named (hyperplace places whole GPUs). AMD's device plugin labels
    (``amd.com/gpu.product-name``) are read the same way. ``gpu_type`` (``--gpu-type``)
    overrides the label for every node; a product no catalog entry matches is an error that
    names the node and the label.
NVLink inside a node
    Kubernetes does not publish it. A type with NVLink on a node of 4 or 8 GPUs is taken as
    an NVSwitch node (HGX/DGX baseboards, GB200/GB300 trays), else PCIe, and the node label
    ``hyperplace.io/assumed`` says ``nvlink``. (``nvidia-smi topo -m`` of a node gives it
    exactly: ``--from nvidia-smi``.)
NVLink across nodes (multi-node NVLink, GB200/GB300 NVL72)
    ``nvidia.com/gpu.clique`` (GFD: ``<clusterUUID>.<cliqueId>``) or Topograph's
    ``accelerator.topograph.run/domain`` (older Topograph: ``network.topology.nvidia.com/
    accelerator``): the node keeps the label, and the nodes that share a value make one
    ``fabric.nvlinkDomains`` entry (:func:`hyperplace.instances.importers.nvlink.domains_from_labels`).
Network tiers
    A map from label key to fabric tier (:data:`DEFAULT_LEVELS`, tier 1 = the switch nearest
    the node): Topograph's ``fabric.topograph.run/tier-N`` (N = 0 nearest) and its older
    ``network.topology.nvidia.com/{block,spine,datacenter}`` and
    ``topology.kubernetes.io/network-level-N``, Kueue's TAS samples'
    ``cloud.provider.com/topology-{rack,block}``, GKE's ``cloud.google.com/gce-topology-
    {subblock,block}``, EKS's ``topology.k8s.aws/network-node-layer-{3,2,1}``. A Kueue
    ``Topology`` (``levels``, outermost first) replaces the map with its own levels, which is
    how a Volcano or custom labelling is read too (Volcano's HyperNode label discovery takes
    its keys from configuration). As in Kueue, a domain is the *path* of values down to its
    level (rack ``r1`` of block ``b1`` is not rack ``r1`` of block ``b2``), so a switch is
    named ``<value of the outermost level>/.../<value>``. Each node links to its nearest
    labelled switch at ``node_gbps`` (default: GPUs x the type's per-GPU NIC figure), each
    switch to its parent at ``uplink_gbps`` (default: the fastest node link, a non-blocking
    fabric: labels say where a node is, not how thick the cables above it are); when several top-level domains remain, one
    switch above them joins them (they are one cluster). Nodes without any level label and
    a cluster without topology labels get the default two-tier fat-tree, and say so
    (``hyperplace.io/assumed: fabric``).
Labels and taints
    Every node label is kept (ResourceFlavors, nodeSelectors and affinities match them);
    ``spec.unschedulable`` nodes (cordoned) keep their GPUs but all are marked faulty.
DRA ResourceSlices (``kubectl get resourceslices -o json``, optional)
    The NVIDIA DRA driver (``gpu.nvidia.com``) publishes each GPU of a node as a device named
    ``gpu-<minor>`` with attributes ``uuid`` and ``resource.kubernetes.io/pciBusID``
    (NVIDIA/k8s-dra-driver-gpu ``cmd/gpu-kubelet-plugin/deviceinfo.go``). Ordered by minor
    number they are the node's GPU indices; the node keeps them as the labels
    ``hyperplace.io/gpu-uuids`` and ``hyperplace.io/gpu-pci-bus-ids`` (comma-separated, index
    order), which is what lets the written ResourceClaims select the planned devices.
Pods (what runs)
    A pod bound to a node (``spec.nodeName``) in phase Pending or Running holds the sum of
    its containers' ``nvidia.com/gpu`` requests (limits when no request) on that node; the
    GPUs go to its job, named by the first of ``volcano.sh/job-name``,
    ``training.kubeflow.org/job-name``, ``jobset.sigs.k8s.io/jobset-name``,
    ``batch.kubernetes.io/job-name``, ``job-name`` labels, the owner reference, else the pod
    name. The API does not say which device indices a pod holds, so the lowest free ones
    are marked ``allocated``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from hyperplace.errors import InputError, from_validation_error, known_words
from hyperplace.models.cluster import Cluster, FabricGenerator, FabricSpec
from hyperplace.models.fabric import Link, Switch
from hyperplace.models.gpu import GPUCatalog, GPUType, default_catalog
from hyperplace.models.node import Node, NVLinkTopology
from hyperplace.models.limits import MAX_GROUP_GPUS

ASSUMED_LABEL = "hyperplace.io/assumed"
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu")
PRODUCT_LABELS = ("nvidia.com/gpu.product", "amd.com/gpu.product-name", "amd.com/gpu.product")
COUNT_LABEL = "nvidia.com/gpu.count"
MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB, per GPU
VGPU_LABEL = "nvidia.com/vgpu.present"  # GFD: "true" in a VM given an NVIDIA vGPU
#: GFD's product of a vGPU: ``<GRID|NVIDIA>-<board>-<framebuffer GB><series>`` (series A, B,
#: C = compute, Q = workstation), e.g. ``GRID-A100-40C``, ``NVIDIA-A16-4Q``
VGPU_PRODUCT = re.compile(r"^(?:GRID|NVIDIA)-(?P<board>.+)-(?P<gb>\d+)(?P<series>[ABCQ])$")
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Label keys whose value names a node's multi-node NVLink domain, first found wins.
NVLINK_DOMAIN_LABELS = ("nvidia.com/gpu.clique", "accelerator.topograph.run/domain",
                        "network.topology.nvidia.com/accelerator",
                        "network.topology.kubernetes.io/accelerator")

#: Default map of topology label keys to fabric tiers (1 = nearest the node), as the tools
#: that set them name them. Within a tier the first key a node has wins.
DEFAULT_LEVELS: dict[int, tuple[str, ...]] = {
    1: ("fabric.topograph.run/tier-0", "network.topology.nvidia.com/block",
        "network.topology.kubernetes.io/block", "topology.kubernetes.io/network-level-1",
        "cloud.provider.com/topology-rack", "cloud.google.com/gce-topology-subblock",
        "topology.k8s.aws/network-node-layer-3"),
    2: ("fabric.topograph.run/tier-1", "network.topology.nvidia.com/spine",
        "network.topology.kubernetes.io/spine", "topology.kubernetes.io/network-level-2",
        "cloud.provider.com/topology-block", "cloud.google.com/gce-topology-block",
        "topology.k8s.aws/network-node-layer-2"),
    3: ("fabric.topograph.run/tier-2", "network.topology.nvidia.com/datacenter",
        "network.topology.kubernetes.io/datacenter", "topology.kubernetes.io/network-level-3",
        "topology.k8s.aws/network-node-layer-1"),
    4: ("fabric.topograph.run/tier-3",),
}
MAX_TIER = 4
UUIDS_LABEL = "hyperplace.io/gpu-uuids"
BUS_IDS_LABEL = "hyperplace.io/gpu-pci-bus-ids"
DRA_DRIVER = "gpu.nvidia.com"
_JOB_LABELS = ("volcano.sh/job-name", "training.kubeflow.org/job-name",
               "jobset.sigs.k8s.io/jobset-name", "batch.kubernetes.io/job-name", "job-name")
_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKMGTPE]i?|m)?\s*$")


def quantity(value: Any, src: str, path: str) -> float:
    """A Kubernetes resource quantity (``8``, ``"8"``, ``500m``, ``16Gi``) as a number."""
    if isinstance(value, bool):
        raise InputError(f"expected a quantity, got {value!r}", source=src, path=path)
    if isinstance(value, (int, float)):
        return float(value)
    m = _QUANTITY.match(str(value))
    if not m:
        raise InputError(f"{value!r} is not a Kubernetes quantity", source=src, path=path)
    number, unit = float(m.group(1)), m.group(2) or ""
    scale = {"": 1, "m": 1e-3, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
             "E": 1e18, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40,
             "Pi": 2 ** 50, "Ei": 2 ** 60}[unit]
    return number * scale


def gpu_quantity(value: Any, src: str, path: str) -> int:
    q = quantity(value, src, path)
    if q < 0 or q != math.floor(q):
        raise InputError(f"GPU count must be a whole number >= 0, got {value!r}", source=src,
                         path=path)
    return int(q)


def mapping_or_empty(value: Any, src: str, path: str) -> dict[str, Any]:
    """``value`` as a mapping (an absent one is empty), else an error naming ``path``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"expected a mapping, got {type(value).__name__}", source=src, path=path)
    return value


def _list_items(doc: dict[str, Any], kind: str, src: str, where: str) -> list[tuple[dict, str]]:
    """(object, its path for messages) of ``kind`` in a ``List`` or a single object."""
    if doc.get("kind") in ("List", f"{kind}List"):
        items = doc.get("items")
        if not isinstance(items, list):
            raise InputError("a List needs items: [...]", source=src, path=f"{where}items")
        out = []
        for i, item in enumerate(items):
            if not isinstance(item, dict) or item.get("kind", kind) != kind:
                got = item.get("kind") if isinstance(item, dict) else type(item).__name__
                raise InputError(f"expected {kind}, got {got!r}", source=src,
                                 path=f"{where}items[{i}].kind")
            out.append((item, f"{where}items[{i}]."))
        return out
    return [(doc, where)]


def levels_from_topology(doc: Mapping[str, Any], src: str, where: str = "") -> dict[int, tuple[str, ...]]:
    """A Kueue ``Topology``'s ``spec.levels`` (outermost first) as a tier map; the
    ``kubernetes.io/hostname`` level is the node itself, and a clique level
    (``nvidia.com/gpu.clique``) the node's NVLink domain, not switches."""
    levels = (doc.get("spec") or {}).get("levels")
    if not isinstance(levels, list) or not levels:
        raise InputError("a Topology needs spec.levels: [{nodeLabel: ...}, ...]", source=src,
                         path=f"{where}spec.levels")
    keys = []
    for i, lv in enumerate(levels):
        key = lv.get("nodeLabel") if isinstance(lv, dict) else None
        if not isinstance(key, str) or not key:
            raise InputError("needs nodeLabel", source=src, path=f"{where}spec.levels[{i}]")
        keys.append(key)
    # a clique level (nvidia.com/gpu.clique) is the NVLink domain between node and leaf,
    # read from the same label by the importer (#24), not a switch
    switches = [k for k in keys if k != HOSTNAME_LABEL and k not in NVLINK_DOMAIN_LABELS]
    if len(switches) > MAX_TIER:
        raise InputError(f"{len(switches)} switch levels; hyperplace models at most {MAX_TIER}",
                         source=src, path=f"{where}spec.levels")
    return {tier: (key,) for tier, key in enumerate(reversed(switches), start=1)}


@dataclass
class NodeFacts:
    """What one Node object says, before the cluster is assembled."""

    name: str
    gpus: int
    unhealthy: int
    product: str | None
    memory_mib: float | None
    labels: dict[str, str]
    unschedulable: bool
    path: str
    # why the node's nvidia.com/gpu are not whole GPUs (time-slicing replicas, MIG slices):
    # such a node is left out with a note
    shared: str | None = None


REPLICAS_LABEL = "nvidia.com/gpu.replicas"  # GFD: time-slicing / MPS replicas per GPU
STRATEGY_LABEL = "nvidia.com/gpu.sharing-strategy"  # GFD: "time-slicing" or "mps"


def _sharing(name: str, gpus: int, labels: dict[str, str], product: str | None) -> str | None:
    """Why a node's ``nvidia.com/gpu`` are not whole GPUs, or None: GFD labels a
    time-sliced node ``nvidia.com/gpu.replicas: N`` (its capacity is N x the GPUs, the product
    ending ``-SHARED``) and a node under the single MIG strategy with a ``-MIG-<profile>``
    product (its capacity counts MIG slices)."""
    replicas = labels.get(REPLICAS_LABEL, "").strip()
    if (replicas.isdigit() and int(replicas) > 1) or (product or "").endswith("-SHARED"):
        whole = labels.get(COUNT_LABEL, "?")
        how = "shares its GPUs by MPS" if labels.get(STRATEGY_LABEL) == "mps" else \
            "time-slices its GPUs"
        return (f"node {name!r} {how} ({REPLICAS_LABEL} {replicas or '?'}: its "
                f"{gpus} nvidia.com/gpu are shares of {whole} GPUs)")
    if "-MIG-" in (product or ""):
        return (f"node {name!r} offers MIG slices ({product}: its {gpus} nvidia.com/gpu are "
                "slices, not GPUs)")
    return None


def _node_facts(obj: dict[str, Any], src: str, where: str) -> NodeFacts | None:
    meta = mapping_or_empty(obj.get("metadata"), src, f"{where}metadata")
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise InputError("required field is missing", source=src, path=f"{where}metadata.name")
    labels = {str(k): str(v) for k, v in mapping_or_empty(meta.get("labels"), src,
                                                    f"{where}metadata.labels").items()}
    status = mapping_or_empty(obj.get("status"), src, f"{where}status")
    capacity = mapping_or_empty(status.get("capacity"), src, f"{where}status.capacity")
    allocatable = mapping_or_empty(status.get("allocatable"), src, f"{where}status.allocatable")
    gpus = 0
    resource = None
    for r in GPU_RESOURCES:
        if r in capacity:
            gpus, resource = gpu_quantity(capacity[r], src, f"{where}status.capacity.{r}"), r
            break
    if resource is None and COUNT_LABEL in labels:
        gpus = gpu_quantity(labels[COUNT_LABEL], src, f"{where}metadata.labels.{COUNT_LABEL}")
    if gpus == 0:
        return None
    usable = gpus
    if resource is not None and resource in allocatable:
        usable = gpu_quantity(allocatable[resource], src, f"{where}status.allocatable.{resource}")
        if usable > gpus:
            raise InputError(f"allocatable {usable} GPUs is more than the capacity {gpus}",
                             source=src, path=f"{where}status.allocatable.{resource}")
    product = next((labels[k] for k in PRODUCT_LABELS if labels.get(k)), None)
    memory = None
    if labels.get(MEMORY_LABEL):
        memory = quantity(labels[MEMORY_LABEL], src, f"{where}metadata.labels.{MEMORY_LABEL}")
    unschedulable = bool(mapping_or_empty(obj.get("spec"), src, f"{where}spec").get("unschedulable"))
    return NodeFacts(name, gpus, gpus - usable, product, memory, labels, unschedulable, where,
                     _sharing(name, gpus, labels, product))


def _gpu_type(f: NodeFacts, gpu_type: str | None, cat: GPUCatalog, src: str) -> GPUType:
    if gpu_type is not None:
        t = cat.find(gpu_type)
        if t is None:
            raise InputError(f"unknown GPU type {gpu_type!r} ({known_words(gpu_type, cat.names())})",
                             path="--gpu-type")
        return t
    label = next((k for k in PRODUCT_LABELS if f.labels.get(k)), PRODUCT_LABELS[0])
    where = f"{f.path}metadata.labels.{label}"
    if f.product is None:
        raise InputError(f"node {f.name!r} has {f.gpus} GPUs but no {PRODUCT_LABELS[0]} label "
                         "(GPU Feature Discovery sets it): give --gpu-type", source=src, path=where)
    vgpu = VGPU_PRODUCT.match(f.product) if f.labels.get(VGPU_LABEL) == "true" else None
    if vgpu is not None:
        return _vgpu_type(f.product, vgpu, cat, src, where)
    t = cat.find(f.product)
    if t is None:
        raise InputError(f"GPU product {f.product!r} is not a known GPU type (known: "
                         f"{', '.join(cat.names())}); give --gpu-type or declare it", source=src,
                         path=where)
    if f.memory_mib is not None and t.family == cat.get(t.name).family:
        # the label's memory picks among a family's sizes (A100 40/80, GH200 96/144, V100)
        gb = f.memory_mib / 1024
        same = [c for c in cat if c.family == t.family]
        closest = min(same, key=lambda c: abs(c.hbm_gb - gb))
        if abs(closest.hbm_gb - gb) < abs(t.hbm_gb - gb):
            t = closest
    return t


def _vgpu_type(product: str, m: re.Match[str], cat: GPUCatalog, src: str, where: str
               ) -> GPUType:
    """The type of a vGPU (GFD's ``vgpu.present``): a profile that is its whole board's
    framebuffer (``GRID-A100-40C``) is that GPU; a smaller one (``NVIDIA-A16-4Q``: 4 GB) is a
    time-shared slice, which a placement of whole GPUs cannot treat as a GPU: refused,
    naming the profile (``--gpu-type`` places it as one anyway)."""
    gb = int(m["gb"])
    board = cat.find(m["board"])
    if board is None:
        raise InputError(f"vGPU profile {product!r} ({gb} GB) of an {m['board']} board, which "
                         "is not a known GPU type; give --gpu-type or declare it", source=src,
                         path=where)
    t = min((c for c in cat if c.family == board.family), key=lambda c: abs(c.hbm_gb - gb))
    if abs(t.hbm_gb - gb) > 0.1 * t.hbm_gb:
        raise InputError(f"vGPU profile {product!r}: {gb} GB of an {t.name}'s {t.hbm_gb:g} GB, "
                         "a time-shared slice of one GPU; hyperplace places whole GPUs (give "
                         "--gpu-type to place it as one)", source=src, path=where)
    return t


def _tier_values(labels: Mapping[str, str], levels: Mapping[int, Sequence[str]]
                 ) -> dict[int, tuple[str, str]]:
    """tier -> (label key, value) of the levels a node carries."""
    out = {}
    for tier, keys in levels.items():
        for k in keys:
            if labels.get(k):
                out[tier] = (k, labels[k])
                break
    return out


def _fabric(nodes: list[Node], facts: dict[str, NodeFacts], levels: Mapping[int, Sequence[str]],
            node_gbps: Mapping[str, float], uplink_gbps: float, nodes_per_leaf: int
            ) -> tuple[FabricSpec, bool]:
    """(fabric, assumed?) from the nodes' level labels."""
    by_node = {n.name: _tier_values(facts[n.name].labels, levels) for n in nodes}
    tiers = sorted({t for v in by_node.values() for t in v})
    if not tiers:
        gbps = max(node_gbps.values()) if node_gbps else 400.0
        return FabricSpec(generator=FabricGenerator(
            type="fat-tree-2", nodes_per_leaf=nodes_per_leaf,
            spines=max(1, min(8, nodes_per_leaf)), node_gbps=gbps, uplink_gbps=gbps)), True
    switches: dict[str, int] = {}
    links: dict[tuple[str, str], float] = {}
    unlabelled: list[str] = []
    top_level: set[str] = set()
    for n in nodes:
        vals = by_node[n.name]
        if not vals:
            unlabelled.append(n.name)
            continue
        path: list[tuple[int, str]] = []  # (tier, switch name), outermost first
        prefix = ""
        for t in sorted(vals, reverse=True):
            prefix = f"{prefix}/{vals[t][1]}" if prefix else vals[t][1]
            path.append((t, prefix))
        for t, name in path:
            switches[name] = t
        top_level.add(path[0][1])
        for (_, parent), (_, child) in zip(path, path[1:]):
            links[(child, parent)] = uplink_gbps
        links[(n.name, path[-1][1])] = node_gbps[n.name]
    if unlabelled or len(top_level) > 1:
        root_tier = min(MAX_TIER, max(tiers) + 1)
        root = "cluster-root"
        while root in switches or root in by_node:
            root += "-"
        switches[root] = root_tier
        for top in sorted(top_level):
            links[(top, root)] = uplink_gbps
        for name in unlabelled:
            links[(name, root)] = node_gbps[name]
    return FabricSpec(switches=[Switch(name=s, tier=t) for s, t in switches.items()],
                      links=[Link(a=a, b=b, gbps=g) for (a, b), g in links.items()]), \
        bool(unlabelled)


def _attr(device: Mapping[str, Any], key: str) -> str | None:
    value = (device.get("attributes") or {}).get(key)
    if isinstance(value, dict):
        v = value.get("string", value.get("stringValue"))
        return str(v) if v is not None else None
    return None


def read_slices(docs: Iterable[tuple[dict[str, Any], str]], src: str
                ) -> tuple[dict[str, dict[str, list[str]]], list[str]]:
    """node -> {"uuids": [...], "busIds": [...]} in GPU index order, from the NVIDIA DRA
    driver's ResourceSlices; and notes."""
    out: dict[str, dict[str, list[str]]] = {}
    notes: list[str] = []
    for doc, where in docs:
        for sl, path in _list_items(doc, "ResourceSlice", src, where):
            spec = mapping_or_empty(sl.get("spec"), src, f"{path}spec")
            if spec.get("driver") != DRA_DRIVER or not spec.get("nodeName"):
                continue
            devices = spec.get("devices") or []
            if not isinstance(devices, list):
                raise InputError("expected a list", source=src, path=f"{path}spec.devices")
            gpus = []
            for k, d in enumerate(devices):
                d = mapping_or_empty(d, src, f"{path}spec.devices[{k}]")
                m = re.fullmatch(r"gpu-(\d+)", str(d.get("name", "")))
                if m and _attr(d, "type") in (None, "gpu"):
                    gpus.append((int(m.group(1)), _attr(d, "uuid") or "",
                                 _attr(d, "resource.kubernetes.io/pciBusID") or ""))
            entry = out.setdefault(str(spec["nodeName"]), {"uuids": [], "busIds": []})
            for _, uuid, bus in sorted(gpus):
                entry["uuids"].append(uuid)
                entry["busIds"].append(bus)
    return out, notes


@dataclass
class PodUse:
    job: str
    node: str
    gpus: int
    path: str


def _pod_job(meta: Mapping[str, Any]) -> str:
    labels = meta.get("labels") or {}
    for k in _JOB_LABELS:
        if labels.get(k):
            return str(labels[k])
    owners = meta.get("ownerReferences") or []
    if owners and isinstance(owners[0], dict) and owners[0].get("name"):
        return str(owners[0]["name"])
    return str(meta.get("name"))


def container_gpus(spec: Mapping[str, Any], src: str, where: str) -> int:
    """GPUs a pod spec asks for: containers' ``nvidia.com/gpu`` (or ``amd.com/gpu``)
    requests, limits when no request (Kubernetes sets request = limit for extended
    resources); init containers run before and count only if larger."""
    def one(c: Mapping[str, Any], path: str) -> int:
        res = mapping_or_empty(c.get("resources"), src, f"{path}.resources")
        for part in ("requests", "limits"):
            block = mapping_or_empty(res.get(part), src, f"{path}.resources.{part}")
            for r in GPU_RESOURCES:
                if r in block:
                    where_r = f"{path}.resources.{part}.{r}"
                    n = gpu_quantity(block[r], src, where_r)
                    if n > MAX_GROUP_GPUS:  # said here, not as the job model's field
                        raise InputError(
                            f"{block[r]!r} asks for {n:,} GPUs in one container; a pod holds "
                            f"at most {MAX_GROUP_GPUS:,} (a suffix such as Gi or k multiplies)",
                            source=src, path=where_r)
                    return n
        return 0
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        raise InputError("expected a list", source=src, path=f"{where}containers")
    total = sum(one(c, f"{where}containers[{i}]") for i, c in enumerate(containers))
    inits = spec.get("initContainers") or []
    init = max((one(c, f"{where}initContainers[{i}]") for i, c in enumerate(inits)), default=0)
    return max(total, init)


def read_pods(docs: Iterable[tuple[dict[str, Any], str]], src: str) -> list[PodUse]:
    """Bound, unfinished pods that hold GPUs."""
    out = []
    for doc, where in docs:
        for pod, path in _list_items(doc, "Pod", src, where):
            meta = mapping_or_empty(pod.get("metadata"), src, f"{path}metadata")
            spec = mapping_or_empty(pod.get("spec"), src, f"{path}spec")
            phase = (pod.get("status") or {}).get("phase", "Pending")
            node = spec.get("nodeName")
            if not node or phase not in ("Pending", "Running", "Unknown"):
                continue
            gpus = container_gpus(spec, src, f"{path}spec.")
            if gpus:
                out.append(PodUse(_pod_job(meta), str(node), gpus, path))
    return out


@dataclass
class KubernetesCluster:
    cluster: Cluster
    notes: list[str] = field(default_factory=list)


def import_kubernetes_nodes(
    node_docs: Sequence[tuple[dict[str, Any], str]],
    src: str,
    *,
    name: str = "kubernetes",
    pod_docs: Sequence[tuple[dict[str, Any], str]] = (),
    slice_docs: Sequence[tuple[dict[str, Any], str]] = (),
    gpu_type: str | None = None,
    levels: Mapping[int, Sequence[str]] | None = None,
    node_gbps: float | None = None,
    uplink_gbps: float | None = None,
    nodes_per_leaf: int = 8,
    catalog: GPUCatalog | None = None,
) -> KubernetesCluster:
    """A :class:`Cluster` from Node objects (``List`` or single), with pods' GPUs allocated.

    ``node_docs``/``pod_docs`` are (document, path prefix for messages) pairs, e.g.
    ``(doc, "document 2: ")``.
    """
    cat = catalog or default_catalog()
    lv = dict(levels or DEFAULT_LEVELS)
    facts: dict[str, NodeFacts] = {}
    shared: dict[str, str] = {}
    shared_notes: list[str] = []
    skipped = 0
    for doc, where in node_docs:
        for obj, path in _list_items(doc, "Node", src, where):
            f = _node_facts(obj, src, path)
            if f is None:
                skipped += 1
                continue
            if f.name in facts or f.name in shared:
                raise InputError(f"node {f.name!r} appears twice", source=src,
                                 path=f"{path}metadata.name")
            if f.shared is not None:  # shares or slices of GPUs: not whole GPUs to place
                shared[f.name] = f.shared
                continue
            facts[f.name] = f
    if shared:
        first = next(iter(shared.values()))
        if not facts:
            raise InputError(f"no node has whole GPUs: {first}; hyperplace places whole GPUs",
                             source=src)
        shared_notes.append(f"{len(shared)} node(s) left out, their GPUs shared or sliced "
                            f"({first}; hyperplace places whole GPUs)")
    if not facts:
        raise InputError("no node has GPUs (status.capacity['nvidia.com/gpu'] or the "
                         f"{COUNT_LABEL} label)", source=src)
    plans: dict[str, dict[str, Any]] = {}
    gbps: dict[str, float] = {}
    for f in facts.values():
        t = _gpu_type(f, gpu_type, cat, src)
        assumed = []
        if t.nvlink_gbps > 0 and f.gpus in (4, 8):
            kind = NVLinkTopology.NVSWITCH
            assumed.append("nvlink")
        else:
            kind = NVLinkTopology.PCIE
            if t.nvlink_gbps > 0:
                assumed.append("nvlink")
        faulty = list(range(f.gpus)) if f.unschedulable else \
            list(range(f.gpus - f.unhealthy, f.gpus))
        plans[f.name] = {"name": f.name, "gpu_type": t.name, "gpu_count": f.gpus,
                         "nvlink": kind, "labels": dict(f.labels), "faulty": faulty,
                         "allocated": {}, "assumed": assumed, "path": f.path}
        gbps[f.name] = node_gbps or f.gpus * t.nic_gbps
    notes = list(shared_notes)
    if skipped:
        notes.append(f"{skipped} node(s) without GPUs left out")
    for use in read_pods(pod_docs, src):
        plan = plans.get(use.node)
        if plan is None:
            what = ("a node left out (its GPUs shared or sliced)" if use.node in shared
                    else "not a GPU node of this cluster")
            notes.append(f"pod of {use.job!r} on {use.node!r}: {what}, ignored")
            continue
        busy = set(plan["allocated"]) | set(plan["faulty"])
        free = [g for g in range(plan["gpu_count"]) if g not in busy]
        if use.gpus > len(free):
            raise InputError(f"pods on node {use.node!r} hold more GPUs than it has "
                             f"({use.gpus} more asked, {len(free)} free)", source=src,
                             path=f"{use.path}spec")
        for g in free[:use.gpus]:
            plan["allocated"][g] = use.job
    slices, slice_notes = read_slices(slice_docs, src)
    notes += slice_notes
    for node, devs in slices.items():
        plan = plans.get(node)
        if plan is None:
            continue
        if len(devs["uuids"]) != plan["gpu_count"]:
            notes.append(f"ResourceSlices of {node!r} list {len(devs['uuids'])} GPUs, the node "
                         f"has {plan['gpu_count']}: device ids not used")
            continue
        if all(devs["uuids"]):
            plan["labels"][UUIDS_LABEL] = ",".join(devs["uuids"])
        if all(devs["busIds"]):
            plan["labels"][BUS_IDS_LABEL] = ",".join(devs["busIds"])
    proto = [Node(name=p["name"], gpu_type=p["gpu_type"], gpu_count=p["gpu_count"])
             for p in plans.values()]
    fabric, _ = _fabric(proto, facts, lv, gbps, uplink_gbps or max(gbps.values()),
                        nodes_per_leaf)
    nodes: list[Node] = []
    for p in plans.values():
        assumed = p.pop("assumed")
        path = p.pop("path")
        if not _tier_values(facts[p["name"]].labels, lv):
            assumed.append("fabric")
        if assumed:
            p["labels"][ASSUMED_LABEL] = ",".join(assumed)
        try:
            nodes.append(Node(**p))
        except ValidationError as exc:
            raise from_validation_error(exc, source=src, prefix=path.rstrip(": .")) from None
    from hyperplace.instances.importers.nvlink import domains_from_labels

    racks = domains_from_labels(nodes)  # nodes sharing a gpu.clique: one NVLink domain (#24)
    if racks:
        fabric = fabric.model_copy(update={"nvlink_domains": racks})
        notes.append(f"{len(racks)} multi-node NVLink domain(s) from the clique labels")
    try:
        cluster = Cluster(name=name, nodes=nodes, fabric=fabric)
    except ValidationError as exc:
        raise from_validation_error(exc, source=src) from None
    return KubernetesCluster(cluster, notes)
