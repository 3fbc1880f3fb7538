"""Deltas to a stored cluster, applied to its JSON document (the worker re-validates the
result, so a delta can never leave an invalid cluster behind).

A cluster document is the ``Instance`` document the library writes (``instance_document``):
GPU state lives in each node's ``allocated`` (GPU index -> job) and ``faulty`` lists; the
pending queue is ``spec.jobs``; running jobs admitted by an applied round are listed in
``spec.runningJobs`` with their queue and priority when the cluster declares queues (a job
that completes or is interrupted leaves that list).
"""

from __future__ import annotations

import copy
from typing import Any

from hyperplace.service.schemas import ClusterPatch
from hyperplace.service.worker import RequestProblem


def _nodes(doc: dict[str, Any]) -> dict[str, tuple[int, dict[str, Any]]]:
    """node name -> (cluster index, node dict), over every cluster of the document."""
    out = {}
    for ci, cluster in enumerate(doc["spec"]["clusters"]):
        for node in cluster.get("nodes", []):
            out[node["name"]] = (ci, node)
    return out


def _job_name(job: Any) -> Any:
    """A queued job document's name, or None (a malformed arrival is refused later, with
    its path, by the worker that validates the patched document)."""
    meta = job.get("metadata") if isinstance(job, dict) else None
    return meta.get("name") if isinstance(meta, dict) else None


def _bad(path: str, message: str, status: int = 422) -> RequestProblem:
    return RequestProblem(status, [{"path": path, "message": message}])


def _gpu_list(node: dict[str, Any], gpus: list[int] | None, path: str) -> list[int]:
    count = int(node.get("gpuCount", 0))
    if gpus is None:
        return list(range(count))
    for i, g in enumerate(gpus):
        if g >= count:
            raise _bad(f"{path}.gpus[{i}]", f"node {node['name']!r} has GPUs 0..{count - 1}")
    return list(gpus)


def apply_patch(doc: dict[str, Any], patch: ClusterPatch,
                interrupted: list[str] | None = None) -> dict[str, Any]:
    """The document after ``patch``: completions, failures, repairs, allocations, arrivals.

    A GPU is faulty or allocated, never both: a failure under a running job interrupts that
    job, whose GPUs are all freed (a gang runs whole or not at all); its name is appended to
    ``interrupted`` so the caller can say so (and resubmit it as an arrival if it wants).
    """
    doc = copy.deepcopy(doc)
    stopped: set[str] = set(patch.completions)
    nodes = _nodes(doc)
    spec = doc["spec"]
    queue = spec.setdefault("jobs", [])
    done = set(patch.completions)
    if done:
        for _, node in nodes.values():
            alloc = node.get("allocated") or {}
            node["allocated"] = {k: v for k, v in alloc.items() if v not in done}
        spec["jobs"] = queue = [j for j in queue if _job_name(j) not in done]
    for field_name, items in (("failures", patch.failures), ("repairs", patch.repairs)):
        for i, item in enumerate(items):
            path = f"{field_name}[{i}]"
            if item.node not in nodes:
                raise _bad(f"{path}.node", f"no node {item.node!r} in this cluster")
            node = nodes[item.node][1]
            gpus = set(_gpu_list(node, item.gpus, path))
            if field_name == "failures":
                alloc = node.get("allocated") or {}
                hit = {alloc[str(g)] for g in gpus if str(g) in alloc}
                if hit:
                    stopped |= hit
                    for _, other in nodes.values():
                        held = other.get("allocated") or {}
                        other["allocated"] = {k: v for k, v in held.items() if v not in hit}
                    if interrupted is not None:
                        interrupted.extend(sorted(hit - set(interrupted)))
            faulty = set(node.get("faulty") or [])
            node["faulty"] = sorted(faulty | gpus if field_name == "failures" else faulty - gpus)
    for i, alloc in enumerate(patch.allocations):
        for k, ref in enumerate(alloc.gpus):
            path = f"allocations[{i}].gpus[{k}]"
            if ref.node not in nodes:
                raise _bad(f"{path}.node", f"no node {ref.node!r} in this cluster")
            node = nodes[ref.node][1]
            _gpu_list(node, [ref.gpu], path)
            held = (node.get("allocated") or {}).get(str(ref.gpu))
            if held is not None and held != alloc.job:
                raise _bad(path, f"GPU {ref.node}/{ref.gpu} is held by {held!r}", 409)
            node.setdefault("allocated", {})[str(ref.gpu)] = alloc.job
        started = alloc.job
        spec["jobs"] = queue = [j for j in queue if _job_name(j) != started]
    names = {_job_name(j) for j in queue}
    for i, job in enumerate(patch.arrivals):
        name = _job_name(job)
        if name is not None and name in names:
            raise _bad(f"arrivals[{i}].metadata.name", f"job {name!r} is already queued", 409)
        names.add(name)
        queue.append(job)
    if stopped and spec.get("runningJobs"):
        spec["runningJobs"] = [r for r in spec["runningJobs"]
                               if not isinstance(r, dict) or r.get("name") not in stopped]
    return doc


def apply_plan(doc: dict[str, Any], allocations: list[list[Any]],
               running: list[list[Any]] | None = None) -> dict[str, Any]:
    """The document after a round: each admitted job holds its GPUs and leaves the queue.

    ``running`` (``[job, queue, priority, gpus]`` per admitted job) lists the admitted jobs
    in ``spec.runningJobs`` when the cluster declares queues, so later rounds count their
    GPUs under their queue."""
    patch = ClusterPatch.model_validate({"allocations": [
        {"job": job, "gpus": [{"node": n, "gpu": g} for n, g in gpus]}
        for job, gpus in _merge(allocations)]})
    out = apply_patch(doc, patch)
    spec = out["spec"]
    if running and spec.get("queues"):
        started = {job for job, *_ in running}
        spec["runningJobs"] = [
            *(r for r in spec.get("runningJobs") or [] if r.get("name") not in started),
            *({"name": job, "queue": queue, "priority": priority}
              for job, queue, priority, _ in running)]
    return out


def _merge(allocations: list[list[Any]]) -> list[tuple[str, list[list[Any]]]]:
    per: dict[str, list[list[Any]]] = {}
    for job, gpus in allocations:
        per.setdefault(job, []).extend(gpus)
    return list(per.items())
