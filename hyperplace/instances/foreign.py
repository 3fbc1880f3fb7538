"""Documents in their owners' formats, turned into hyperplace's before an instance is built.

Wherever a file is accepted (an instance or cluster file, ``--jobs``, ``--queues``,
``validate``, the service), these kinds may appear beside hyperplace's own:

* cluster state: Kubernetes ``Node`` / ``NodeList`` / ``List`` of nodes and ``Pod`` lists
  (:mod:`hyperplace.instances.importers.kubernetes`), with a Kueue ``Topology`` naming the
  levels the node labels are read at. All of them in one file make **one** ``Cluster``
  document, named after the file.
* queues: Kueue ``ResourceFlavor``, ``ClusterQueue``, ``LocalQueue``, ``Cohort`` and
  Volcano ``Queue`` (read by :mod:`hyperplace.models.queue`); a ``Topology`` in a queue file
  is read for its levels and is otherwise no queue.
* jobs: Volcano ``Job``/``PodGroup``, ``batch/v1`` ``Job``, ``JobSet``, Kubeflow
  ``PyTorchJob``/``MPIJob`` (:mod:`hyperplace.instances.importers.jobs`).

:func:`expand` returns hyperplace documents (with the label each error should carry) plus
the queue documents and the notes (what was left out or assumed) for the command to print.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hyperplace.errors import InputError

CLUSTER_KINDS = frozenset({"Node", "NodeList", "Pod", "PodList", "ResourceSlice",
                           "ResourceSliceList"})
QUEUE_KINDS = frozenset({"ResourceFlavor", "ClusterQueue", "LocalQueue", "Cohort", "Queue",
                         "QueueList"})
TOPOLOGY_KIND = "Topology"
#: Objects hyperplace writes beside the jobs (``hyperplace manifests``, ``federate --out``):
#: checked by ``validate``, skipped (with a note) where jobs or clusters are read.
WRITTEN_KINDS = {("resource.k8s.io", "ResourceClaim"), ("policy.karmada.io", "PropagationPolicy")}


def _group(api_version: Any) -> str:
    return str(api_version or "").split("/")[0] if "/" in str(api_version or "") else ""


def job_kind(doc: dict[str, Any]) -> bool:
    from hyperplace.instances.importers.jobs import is_job_document

    return is_job_document(doc)


def classify(doc: Any) -> str | None:
    """``cluster``, ``queue``, ``topology``, ``job``, ``mixed`` (a List of several), or None
    for hyperplace's own kinds (and anything else: the caller names it)."""
    if not isinstance(doc, dict):
        return None
    kind = doc.get("kind")
    if not isinstance(kind, str):
        return None
    if kind == "List":
        items = doc.get("items")
        if not isinstance(items, list) or not items:
            return "cluster"  # an empty List of nodes is refused by the importer, by name
        kinds = {classify(i) for i in items}
        return kinds.pop() if len(kinds) == 1 and None not in kinds else "mixed"
    if kind in CLUSTER_KINDS:
        return "cluster"
    group = _group(doc.get("apiVersion"))
    if kind == TOPOLOGY_KIND and group == "kueue.x-k8s.io":
        return "topology"
    if kind in QUEUE_KINDS and (group == "kueue.x-k8s.io" or
                                (group == "scheduling.volcano.sh" and kind in ("Queue",
                                                                               "QueueList"))):
        return "queue"
    if job_kind(doc):
        return "job"
    if (group, kind) in WRITTEN_KINDS:
        return "written"
    return None


@dataclass
class Expanded:
    """hyperplace documents with their message labels, and what came beside them."""

    docs: list[tuple[dict[str, Any], str | None]]
    queues: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    written: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    topologies: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (job, why not placed)


def _prefix(label: str | None) -> str:
    return f"{label}: " if label else ""


def expand(docs: list[dict[str, Any]], source: str, *, gpu_type: str | None = None,
           cluster_name: str | None = None, label_of=None) -> Expanded:
    """Turn foreign documents into hyperplace ones (see the module docstring).

    ``label_of(i)`` names document ``i`` in messages (``document 3``; None for a file of
    one document).
    """
    from hyperplace.instances.importers.jobs import job_document
    from hyperplace.instances.importers.kubernetes import import_kubernetes_nodes, \
        levels_from_topology

    label_of = label_of or (lambda i: f"document {i + 1}" if len(docs) > 1 else None)
    out = Expanded(docs=[])
    nodes: list[tuple[dict[str, Any], str]] = []
    pods: list[tuple[dict[str, Any], str]] = []
    slices: list[tuple[dict[str, Any], str]] = []
    cluster_at: int | None = None
    topology_docs = [d for d in docs if classify(d) == "topology"]
    claim_counts = {str((d.get("metadata") or {}).get("name")): _claim_count(d)
                    for d in docs if classify(d) == "written" and d.get("kind") == "ResourceClaim"}

    def levels_seen():
        return levels_from_topology(topology_docs[0], source) if topology_docs else None
    for i, doc in enumerate(docs):
        label = label_of(i)
        what = classify(doc)
        if what is None:
            out.docs.append((doc, label))
        elif what == "mixed":
            raise InputError("a List holds objects of several kinds; give nodes, pods, jobs "
                             "and queues as Lists of one kind", source=source,
                             path=f"{_prefix(label)}items")
        elif what == "cluster":
            if cluster_at is None:
                cluster_at = len(out.docs)
                out.docs.append(({}, label))  # placeholder, filled below
            items = doc.get("items") if doc.get("kind") in (
                "List", "NodeList", "PodList", "ResourceSliceList") else [doc]
            first = (items or [{}])[0]
            kind = first.get("kind") if isinstance(first, dict) else None
            kind = kind or str(doc.get("kind", "")).removesuffix("List")
            (pods if kind == "Pod" else slices if kind == "ResourceSlice"
             else nodes).append((doc, _prefix(label)))
        elif what == "written":
            out.written.append((label or "document 1", doc))
            check_written(doc, source, _prefix(label))
        elif what == "topology":
            out.topologies.append(doc)
            out.queues.append((f"{_prefix(label)}".rstrip(": ") or "document 1", doc))
        elif what == "queue":
            where = label or "document 1"
            if doc.get("kind") in ("List", "QueueList"):
                for k, item in enumerate(doc.get("items") or []):
                    out.queues.append((f"{where}: items[{k}]", item))
            else:
                out.queues.append((where, doc))
        else:  # job
            items = doc.get("items") if doc.get("kind") == "List" else [doc]
            for k, item in enumerate(items):
                where = _prefix(label) + (f"items[{k}]." if doc.get("kind") == "List" else "")
                job, notes = job_document(item, source, where, levels=levels_seen(),
                                          claims=claim_counts)
                if job is not None:
                    out.docs.append((job, label))
                else:
                    out.skipped.append((skipped_name(item), notes[-1].removeprefix(
                        f"{source}: {skipped_name(item)}: ")))
                out.notes += notes
    if cluster_at is not None and not nodes and not pods:
        out.docs.pop(cluster_at)
        out.notes.append(f"{source}: {len(slices)} ResourceSlice document(s) without their "
                         "Nodes: they add device ids to the nodes they name when read with them")
        cluster_at = None
    if cluster_at is not None:
        if not nodes:
            raise InputError("Pods but no Node: the pods say what runs, the nodes what there "
                             "is (kubectl get nodes -o json)", source=source)
        levels = None
        if out.topologies:
            t = out.topologies[0]
            levels = levels_from_topology(t, source)
        kc = import_kubernetes_nodes(nodes, source, pod_docs=pods, slice_docs=slices,
                                     gpu_type=gpu_type,
                                     levels=levels, name=cluster_name or _stem(source))
        from hyperplace.instances.importing import cluster_document

        out.docs[cluster_at] = (cluster_document(kc.cluster, []), out.docs[cluster_at][1])
        out.notes += kc.notes
    return out


def unmatched_queue_files(instance: Any, docs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    """One warning per queue file none of whose queues a pending job names (the jobs then
    run in ``default``, free of those quotas: usually a label typo or the wrong file)."""
    if not instance.jobs or instance.queue_set is None:
        return []
    used = {instance.queue_of(j) for j in instance.jobs}
    labels = {j.metadata.labels.get("kueue.x-k8s.io/queue-name") for j in instance.jobs}
    by_file: dict[str, set[str]] = {}
    for where, d in docs:
        f = where.split(": document")[0]
        name = (d.get("metadata") or {}).get("name")
        if d.get("kind") in ("ClusterQueue", "LocalQueue", "Queue") and name:
            by_file.setdefault(f, set()).add(str(name))
        else:
            by_file.setdefault(f, set())
    out = []
    for f, names in by_file.items():
        if names and not names & (used | labels):
            out.append(f"{f}: no pending job names any of its queues ({', '.join(sorted(names))});"
                       f" the jobs name {', '.join(sorted(used))}")
    return out


def skipped_name(doc: dict[str, Any]) -> str:
    """The name a workload hyperplace leaves out is reported under."""
    meta = doc.get("metadata") or {}
    return str(meta.get("name") or meta.get("generateName") or "?").rstrip("-")


def _claim_count(doc: dict[str, Any]) -> int:
    reqs = ((doc.get("spec") or {}).get("devices") or {}).get("requests") or []
    return sum(int((r.get("exactly") or {}).get("count", 1)) for r in reqs
               if isinstance(r, dict) and (r.get("exactly") or {}).get("deviceClassName")
               in ("gpu.nvidia.com", None))


def check_written(doc: dict[str, Any], source: str, where: str) -> str:
    """The fields hyperplace relies on in an object it writes; a one-line summary."""
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise InputError("required field is missing", source=source, path=f"{where}spec")
    if doc.get("kind") == "ResourceClaim":
        reqs = (spec.get("devices") or {}).get("requests")
        if not isinstance(reqs, list) or not reqs:
            raise InputError("needs at least one request", source=source,
                             path=f"{where}spec.devices.requests")
        total = 0
        for i, r in enumerate(reqs):
            ex = r.get("exactly") if isinstance(r, dict) else None
            count = ex.get("count", 1) if isinstance(ex, dict) else None
            if not isinstance(ex, dict) or not ex.get("deviceClassName") or \
                    not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise InputError("needs exactly.deviceClassName and a count >= 1",
                                 source=source, path=f"{where}spec.devices.requests[{i}]")
            total += count
        return f"ResourceClaim {doc.get('metadata', {}).get('name')}, {total} device(s)"
    sel = spec.get("resourceSelectors")
    if not isinstance(sel, list) or not sel:
        raise InputError("needs resourceSelectors", source=source,
                         path=f"{where}spec.resourceSelectors")
    return f"PropagationPolicy {doc.get('metadata', {}).get('name')}"


def _stem(source: str) -> str:
    stem = Path(source).stem if source not in ("-", "<stdin>") else "kubernetes"
    return stem or "kubernetes"
