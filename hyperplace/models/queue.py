"""Queues that share a cluster: Kueue ``ClusterQueue``/``LocalQueue`` and Volcano ``Queue``,
mapped onto one internal :class:`QueueSet`.

Operators already write their quotas in one of two vocabularies; hyperplace reads both and
maps them onto the same model: per queue and GPU type, a **guaranteed share** (nominal
quota), a **borrowing limit**, a **lending limit** and a **weight**; queues that lend to each
other form a **cohort**.

Kueue (``kueue.x-k8s.io/v1beta1``)
    ``ClusterQueue.spec.resourceGroups[].flavors[].resources[]`` with ``name:
    nvidia.com/gpu`` gives ``nominalQuota``, ``borrowingLimit`` and ``lendingLimit`` per
    flavor; ``spec.cohort`` names the cohort; ``spec.fairSharing.weight`` the weight
    (default 1). A flavor maps to a GPU type by its ``ResourceFlavor``'s ``nodeLabels``
    value for ``gpu-type``/``nvidia.com/gpu.product`` when one is given, else by its own name
    (``h100`` → ``H100``, matched case-insensitively as a type or family). A ``LocalQueue``
    (``spec.clusterQueue``) is the name jobs use, through the ``kueue.x-k8s.io/queue-name``
    label.

Volcano (``scheduling.volcano.sh/v1beta1``)
    ``Queue.spec.weight`` is the weight; ``spec.guarantee.resource["nvidia.com/gpu"]`` the
    guaranteed share; ``spec.capability["nvidia.com/gpu"]`` the cap (so the borrowing limit
    is capability minus guarantee); ``spec.deserved`` is accepted and used as the guarantee
    when no ``guarantee`` is given (Volcano's capacity plugin reclaims up to ``deserved``).
    Volcano quotas are not per GPU type: they map to the wildcard flavor ``*``. All Volcano
    queues share one cluster-wide cohort, as Volcano's proportion plugin shares the whole
    cluster by weight; hierarchical queues (``volcano.sh/hierarchy: root/eng/prod`` with
    ``volcano.sh/hierarchy-weights``, or ``spec.parent``) get their subtree as cohort, nested
    under the levels above. Jobs name a Volcano queue with the ``volcano.sh/queue-name`` label or
    the ``scheduling.volcano.sh/queue-name`` annotation.

A job that names no queue belongs to the ``default`` queue, which is unlimited unless one is
declared under that name.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
ANY_TYPE = "*"
DEFAULT_QUEUE = "default"
VOLCANO_COHORT = "volcano"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
VOLCANO_QUEUE_KEYS = ("volcano.sh/queue-name", "scheduling.volcano.sh/queue-name")
FLAVOR_TYPE_LABELS = ("gpu-type", "nvidia.com/gpu.product", "accelerator")
UNLIMITED = math.inf


class QueueError(ValueError):
    """A queue document that cannot be used; ``path`` names the offending field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True)
class Quota:
    """GPUs of one type (or ``*``) a queue is guaranteed, may borrow, and may lend.

    ``borrowing_limit`` and ``lending_limit`` are ``inf`` when not set (Kueue's defaults:
    borrow without limit from the cohort, lend all unused nominal quota).
    """

    nominal: float
    borrowing_limit: float = UNLIMITED
    lending_limit: float = UNLIMITED

    @property
    def cap(self) -> float:
        """The most this queue may use: its nominal quota plus what it may borrow."""
        return self.nominal + self.borrowing_limit

    @property
    def lendable(self) -> float:
        """The most of its nominal quota this queue lends when idle."""
        return min(self.nominal, self.lending_limit)


@dataclass(frozen=True)
class Queue:
    """One queue in the internal model (Kueue ClusterQueue or Volcano Queue)."""

    name: str
    quotas: Mapping[str, Quota]
    weight: float = 1.0
    cohort: str | None = None
    source: str = "kueue"
    preemption: str = "never"

    def quota_for(self, gpu_type: str) -> Quota | None:
        """The quota covering ``gpu_type``: its own flavor, else the wildcard, else none."""
        return self.quotas.get(gpu_type.upper()) or self.quotas.get(ANY_TYPE)


@dataclass(frozen=True)
class QueueSet:
    """All queues of a cluster, and the local names jobs use to reach them."""

    queues: Mapping[str, Queue]
    local_queues: Mapping[str, str] = field(default_factory=dict)
    cohort_parents: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_cohorts(self.queues, self.cohort_parents)

    def queue_of(self, labels: Mapping[str, str], annotations: Mapping[str, str] | None = None,
                 ) -> str:
        """The queue a job belongs to, from its labels or annotations (``default`` if none)."""
        name = labels.get(KUEUE_QUEUE_LABEL)
        if name is not None:
            return self.local_queues.get(name, name)
        for key in VOLCANO_QUEUE_KEYS:
            name = labels.get(key) or (annotations or {}).get(key)
            if name is not None:
                return name
        return DEFAULT_QUEUE

    def cohort_members(self, cohort: str | None) -> list[Queue]:
        """Queues that share with ``cohort``: every queue whose cohort has the same root."""
        if cohort is None:
            return []
        root = self.root_cohort(cohort)
        return [q for q in self.queues.values()
                if q.cohort is not None and self.root_cohort(q.cohort) == root]

    def root_cohort(self, cohort: str) -> str:
        """The top of ``cohort``'s ``Cohort.spec.parent`` chain (itself when it has none)."""
        while cohort in self.cohort_parents:
            cohort = self.cohort_parents[cohort]
        return cohort

    def known(self, name: str) -> bool:
        return name in self.queues or name == DEFAULT_QUEUE


def _check_cohorts(queues: Mapping[str, Queue], parents: Mapping[str, str]) -> None:
    """Kueue ``Cohort`` objects nest through ``spec.parent``; a chain that comes back to
    itself has no root to share within, so it is refused with the cycle named."""
    for start in parents:
        seen = [start]
        node = start
        while node in parents:
            node = parents[node]
            if node in seen:
                cycle = " -> ".join([*seen[seen.index(node):], node])
                raise QueueError(f"Cohort {start}.spec.parent", f"cohorts form a cycle: {cycle}")
            seen.append(node)


def _quantity(value: Any, path: str) -> float:
    """A Kubernetes quantity for a count of GPUs: an integer or a plain numeric string."""
    if isinstance(value, bool):
        raise QueueError(path, "must be a number of GPUs, not a boolean")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and value.strip():
        try:
            number = float(value.strip())
        except ValueError:
            raise QueueError(path, f"{value!r} is not a GPU count") from None
    else:
        raise QueueError(path, "must be a number of GPUs")
    if not math.isfinite(number) or number < 0:
        raise QueueError(path, f"must be a finite, non-negative GPU count, got {value!r}")
    return number


def _mapping(value: Any, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise QueueError(path, "must be a mapping")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise QueueError(path, "must be a list")
    return value


def _name(doc: Mapping[str, Any], path: str) -> str:
    name = _mapping(doc.get("metadata"), f"{path}.metadata").get("name")
    if not isinstance(name, str) or not name:
        raise QueueError(f"{path}.metadata.name", "is required")
    return name


def _flavor_type(name: str, flavor_docs: Mapping[str, Mapping[str, Any]],
                 nodes: Sequence[Any] | None = None) -> str | None:
    """The GPU type (or ``*``) a flavor's quota counts against; None: it selects no node.

    By the flavor's ``nodeLabels`` as Kueue matches them: a GPU-type label's value read
    through the GPU catalog (``nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3`` -> ``H100-80``);
    else, when the cluster's nodes are known, the type of the nodes whose labels hold every
    ``nodeLabels`` pair (``cloud.provider.com/node-group: tas-group``), ``*`` when they are
    of several types or the flavor has no nodeLabels (Kueue's empty flavor matches every
    node); without nodes, the flavor's name (``h100`` -> ``H100``).
    """
    doc = flavor_docs.get(name)
    labels = _mapping(_mapping(doc.get("spec") if doc else None, name).get("nodeLabels"), name)
    for key in FLAVOR_TYPE_LABELS:
        if key in labels:
            from hyperplace.models.gpu import default_catalog

            value = str(labels[key])
            cat = default_catalog()
            if any(value.upper() in (t.name.upper(), t.family.upper()) for t in cat):
                return value.upper()  # a type or family name, as written (H100 covers H100-*)
            t = cat.find(value)  # a product string: NVIDIA-H100-80GB-HBM3 -> H100-80
            return t.name.upper() if t is not None else value.upper()
    if nodes is not None and doc is not None:
        if not labels:
            return ANY_TYPE
        types = {n.gpu_type for n in nodes
                 if all(n.labels.get(str(k)) == str(v) for k, v in labels.items())}
        if not types:
            return None
        return types.pop().upper() if len(types) == 1 else ANY_TYPE
    return name.upper()


def _kueue_cluster_queue(doc: Mapping[str, Any], path: str,
                         flavors: Mapping[str, Mapping[str, Any]],
                         known_types: Iterable[str] | None,
                         nodes: Sequence[Any] | None = None) -> Queue:
    name = _name(doc, path)
    spec = _mapping(doc.get("spec"), f"{path}.spec")
    quotas: dict[str, Quota] = {}
    for gi, group in enumerate(_list(spec.get("resourceGroups"), f"{path}.spec.resourceGroups")):
        gpath = f"{path}.spec.resourceGroups[{gi}]"
        group = _mapping(group, gpath)
        for fi, flavor in enumerate(_list(group.get("flavors"), f"{gpath}.flavors")):
            fpath = f"{gpath}.flavors[{fi}]"
            flavor = _mapping(flavor, fpath)
            fname = flavor.get("name")
            if not isinstance(fname, str) or not fname:
                raise QueueError(f"{fpath}.name", "is required")
            if flavors and fname not in flavors:
                raise QueueError(f"{fpath}.name",
                                 f"unknown ResourceFlavor {fname!r} (declared: {', '.join(sorted(flavors))})")
            gpu_type = _flavor_type(fname, flavors, nodes)
            has_gpu = any(isinstance(r, dict) and r.get("name") == GPU_RESOURCE
                          for r in _list(flavor.get("resources"), f"{fpath}.resources"))
            if gpu_type is None:
                if has_gpu:
                    raise QueueError(f"{fpath}.name", f"ResourceFlavor {fname!r} selects no node "
                                     "of the cluster (its spec.nodeLabels match none)")
                continue
            if known_types is not None and gpu_type != ANY_TYPE and has_gpu:
                known = {t.upper() for t in known_types}
                if gpu_type not in known and not any(k.startswith(gpu_type) for k in known):
                    raise QueueError(f"{fpath}.name", f"flavor {fname!r} maps to GPU type {gpu_type!r}, "
                                     f"which the cluster does not have (types: {', '.join(sorted(known))})")
            for ri, res in enumerate(_list(flavor.get("resources"), f"{fpath}.resources")):
                rpath = f"{fpath}.resources[{ri}]"
                res = _mapping(res, rpath)
                if res.get("name") != GPU_RESOURCE:
                    continue
                if gpu_type in quotas:  # two flavors on one type (e.g. two '*'): add up
                    prev = quotas[gpu_type]
                    quotas[gpu_type] = Quota(
                        nominal=prev.nominal + _quantity(res.get("nominalQuota", 0),
                                                         f"{rpath}.nominalQuota"),
                        borrowing_limit=UNLIMITED, lending_limit=UNLIMITED)
                    continue
                quotas[gpu_type] = Quota(
                    nominal=_quantity(res.get("nominalQuota", 0), f"{rpath}.nominalQuota"),
                    borrowing_limit=_quantity(res["borrowingLimit"], f"{rpath}.borrowingLimit")
                    if "borrowingLimit" in res else UNLIMITED,
                    lending_limit=_quantity(res["lendingLimit"], f"{rpath}.lendingLimit")
                    if "lendingLimit" in res else UNLIMITED,
                )
    cohort = spec.get("cohort")
    if cohort is not None and not isinstance(cohort, str):
        raise QueueError(f"{path}.spec.cohort", "must be a string")
    weight = _quantity(_mapping(spec.get("fairSharing"), f"{path}.spec.fairSharing").get("weight", 1),
                       f"{path}.spec.fairSharing.weight")
    preemption = _mapping(spec.get("preemption"), f"{path}.spec.preemption")
    policy = "never"
    if preemption.get("withinClusterQueue") in ("LowerPriority", "LowerOrNewerEqualPriority"):
        policy = "lower-priority"
    if preemption.get("reclaimWithinCohort") in ("Any", "LowerPriority", "LowerOrNewerEqualPriority"):
        policy = "reclaim-within-cohort"
    return Queue(name=name, quotas=quotas, weight=weight or 1.0, cohort=cohort or None,
                 source="kueue", preemption=policy)


def _volcano_queue(doc: Mapping[str, Any], path: str) -> Queue:
    name = _name(doc, path)
    spec = _mapping(doc.get("spec"), f"{path}.spec")
    weight = _quantity(spec.get("weight", 1), f"{path}.spec.weight")
    guarantee = _mapping(_mapping(spec.get("guarantee"), f"{path}.spec.guarantee").get("resource"),
                         f"{path}.spec.guarantee.resource")
    deserved = _mapping(spec.get("deserved"), f"{path}.spec.deserved")
    capability = _mapping(spec.get("capability"), f"{path}.spec.capability")
    if GPU_RESOURCE in guarantee:
        nominal = _quantity(guarantee[GPU_RESOURCE], f"{path}.spec.guarantee.resource.{GPU_RESOURCE}")
    elif GPU_RESOURCE in deserved:
        nominal = _quantity(deserved[GPU_RESOURCE], f"{path}.spec.deserved.{GPU_RESOURCE}")
    else:
        nominal = 0.0
    borrow = UNLIMITED
    if GPU_RESOURCE in capability:
        cap = _quantity(capability[GPU_RESOURCE], f"{path}.spec.capability.{GPU_RESOURCE}")
        if cap < nominal:
            raise QueueError(f"{path}.spec.capability.{GPU_RESOURCE}",
                             f"capability {cap:g} is below the guaranteed {nominal:g} GPUs")
        borrow = cap - nominal
    return Queue(name=name, quotas={ANY_TYPE: Quota(nominal=nominal, borrowing_limit=borrow)},
                 weight=weight or 1.0, cohort=VOLCANO_COHORT, source="volcano",
                 preemption="reclaim-within-cohort" if spec.get("reclaimable", True) else "never")


HIERARCHY = "volcano.sh/hierarchy"
HIERARCHY_WEIGHTS = "volcano.sh/hierarchy-weights"


def _volcano_hierarchy(q: Queue, doc: Mapping[str, Any], path: str,
                       cohort_parents: dict[str, str]) -> Queue:
    """Volcano's hierarchical queues: the ``volcano.sh/hierarchy`` annotation (``root/eng/
    prod``, the queue's own name last) and ``volcano.sh/hierarchy-weights`` (``1/2/8``), or
    ``spec.parent`` (a parent queue's name). The queue's cohort is its parent path, each
    level's parent the level above (so queues of one subtree lend to each other first), and
    its weight the last hierarchy weight."""
    ann = _mapping(_mapping(doc.get("metadata"), f"{path}.metadata").get("annotations"),
                   f"{path}.metadata.annotations")
    parent = _mapping(doc.get("spec"), f"{path}.spec").get("parent")
    if HIERARCHY not in ann:
        if isinstance(parent, str) and parent and parent != "root":
            return dataclasses.replace(q, cohort=f"{VOLCANO_COHORT}/{parent}")
        return q
    parts = [p for p in str(ann[HIERARCHY]).split("/") if p]
    where = f"{path}.metadata.annotations.{HIERARCHY}"
    if not parts or parts[-1] != q.name:
        raise QueueError(where, f"{ann[HIERARCHY]!r} must end with the queue's name {q.name!r}")
    weight = q.weight
    if HIERARCHY_WEIGHTS in ann:
        raw = str(ann[HIERARCHY_WEIGHTS]).split("/")
        if len(raw) != len(parts):
            raise QueueError(f"{path}.metadata.annotations.{HIERARCHY_WEIGHTS}",
                             f"{len(raw)} weights for {len(parts)} hierarchy levels")
        weight = _quantity(raw[-1], f"{path}.metadata.annotations.{HIERARCHY_WEIGHTS}") or 1.0
    levels = [f"{VOLCANO_COHORT}/" + "/".join(parts[:k]) for k in range(1, len(parts))]
    for child, up in zip(levels[1:], levels):
        cohort_parents.setdefault(child, up)
    return dataclasses.replace(q, cohort=levels[-1] if levels else VOLCANO_COHORT,
                               weight=weight)


def parse_queues(docs: Iterable[tuple[str, Mapping[str, Any]]],
                 known_types: Iterable[str] | None = None,
                 nodes: Sequence[Any] | None = None) -> QueueSet:
    """Read Kueue ``ResourceFlavor``/``ClusterQueue``/``LocalQueue`` and Volcano ``Queue``
    documents into one :class:`QueueSet`.

    Parameters
    ----------
    docs
        ``(path, document)`` pairs; ``path`` prefixes every error (e.g. ``queues.yaml:
        document 2``).
    known_types
        GPU type names of the cluster; a flavor that maps to none of them is refused.
    nodes
        The cluster's nodes: a ResourceFlavor then maps to the GPU type of the nodes its
        ``nodeLabels`` select (Kueue's ``tas-flavor``), not to its name. A Kueue
        ``Topology`` among the documents is no queue and is skipped (its levels are read by
        the Kubernetes importers).

    Raises
    ------
    QueueError
        With the field path of the first problem: an unknown flavor, a negative or
        non-numeric quota, a LocalQueue naming an unknown ClusterQueue, a duplicate queue.
    """
    docs = list(docs)
    flavors = {_name(d, p): d for p, d in docs if d.get("kind") == "ResourceFlavor"}
    queues: dict[str, Queue] = {}
    locals_: dict[str, str] = {}
    cohort_parents: dict[str, str] = {}
    for path, doc in docs:
        kind = doc.get("kind")
        if kind == "ClusterQueue":
            q = _kueue_cluster_queue(doc, path, flavors, known_types, nodes)
        elif kind == "Queue" and str(doc.get("apiVersion", "")).startswith("scheduling.volcano.sh/"):
            q = _volcano_hierarchy(_volcano_queue(doc, path), doc, path, cohort_parents)
        elif kind == "LocalQueue":
            target = _mapping(doc.get("spec"), f"{path}.spec").get("clusterQueue")
            if not isinstance(target, str) or not target:
                raise QueueError(f"{path}.spec.clusterQueue", "is required")
            locals_[_name(doc, path)] = target
            continue
        elif kind == "Cohort":
            parent = _mapping(doc.get("spec"), f"{path}.spec").get("parent")
            if parent is not None:
                if not isinstance(parent, str) or not parent:
                    raise QueueError(f"{path}.spec.parent", "must be a cohort name")
                cohort_parents[_name(doc, path)] = parent
            continue
        elif kind == "ResourceFlavor" or (
                kind == "Topology" and str(doc.get("apiVersion", "")).startswith("kueue.x-k8s.io/")):
            continue
        else:
            raise QueueError(f"{path}.kind", f"expected ClusterQueue, LocalQueue, ResourceFlavor, "
                             f"Cohort or a Volcano Queue, got {kind!r}")
        if q.name in queues:
            raise QueueError(f"{path}.metadata.name", f"queue {q.name!r} is declared twice")
        queues[q.name] = q
    for path, doc in docs:
        if doc.get("kind") == "LocalQueue":
            target = doc["spec"]["clusterQueue"]
            if target not in queues:
                raise QueueError(f"{path}.spec.clusterQueue",
                                 f"unknown ClusterQueue {target!r} (declared: {', '.join(sorted(queues)) or 'none'})")
    return QueueSet(queues=queues, local_queues=locals_, cohort_parents=cohort_parents)
