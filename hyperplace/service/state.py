"""Deltas to a stored cluster, applied to its JSON document through the one round state
(the worker re-validates the result, so a delta can never leave an invalid cluster behind).

A cluster document is the ``Instance`` document the library writes (``instance_document``):
GPU state lives in each node's ``allocated`` (GPU index -> job) and ``faulty`` lists; the
pending queue is ``spec.jobs``; running jobs admitted by an applied round are listed in
``spec.runningJobs`` with their queue and priority when the cluster declares queues (a job
that completes or is interrupted leaves that list).

This module is the service's edge of :class:`~hyperplace.solvers.workflows.session.RoundState`
(the state the simulator and :class:`~hyperplace.solvers.workflows.session.PlacementSession`
keep too): a PATCH's JSON becomes a :class:`~hyperplace.solvers.workflows.session.RoundDelta`
on a round state read from the document's nodes and queue, and the state's GPUs and queue are
written back. The service's wording is translated here: a "completion" of a pending job is a
withdrawal (it leaves the queue), one of a job the cluster neither runs nor queues is refused
(422 at ``completions[i]``, and nothing of the PATCH is applied), and interrupted jobs are not requeued (the caller resubmits them as arrivals if it wants). Queue
entries stay documents (an arrival is validated with the whole document by the worker).

The stored cluster's usage history (fair share over rounds) is that round state's: the
service reads the stored :meth:`~hyperplace.solvers.workflows.session.RoundState.history`
back with :func:`~hyperplace.solvers.workflows.session.usage_at`, hands it to the round state
of the document it changes, and stores that state's history after the change.
"""

from __future__ import annotations

import copy
from typing import Any

from hyperplace.errors import ConflictError, InputError, known_words
from hyperplace.models.instance import RunningJob
from hyperplace.models.usage import DEFAULT_QUEUE, QueueUsage
from hyperplace.service.schemas import ClusterPatch
from hyperplace.service.worker import RequestProblem
from hyperplace.solvers.workflows.session import RoundDelta, RoundState


def _nodes(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """node name -> node dict, over every cluster of the document."""
    return {node["name"]: node for cluster in doc["spec"]["clusters"]
            for node in cluster.get("nodes", [])}


def _job_name(job: Any) -> Any:
    """A queued job document's name, or None (a malformed arrival is refused later, with
    its path, by the worker that validates the patched document)."""
    meta = job.get("metadata") if isinstance(job, dict) else None
    return meta.get("name") if isinstance(meta, dict) else None


def _allocated(node: dict[str, Any]) -> dict[int, str]:
    return {int(k): v for k, v in (node.get("allocated") or {}).items()}


def _running(entry: dict[str, Any]) -> RunningJob:
    """A stored ``spec.runningJobs`` entry's name and queue (the document was validated
    when it was stored; the round state needs nothing else of it)."""
    return RunningJob.model_construct(name=entry["name"],
                                      queue=entry.get("queue") or DEFAULT_QUEUE)


def round_state(doc: dict[str, Any], usage: QueueUsage | None = None,
                now_s: float | None = None) -> RoundState:
    """The round state of a stored document: its nodes' GPUs, running jobs (with their
    queues) and queue, carrying the usage history ``usage`` (brought to ``now_s``, the time
    of every change made to this state)."""
    nodes = _nodes(doc)
    running = [_running(r) for r in doc["spec"].get("runningJobs") or [] if isinstance(r, dict)]
    return RoundState(gpus={n: int(node.get("gpuCount", 0)) for n, node in nodes.items()},
                      allocated={n: _allocated(node) for n, node in nodes.items()},
                      faulty={n: node.get("faulty") or [] for n, node in nodes.items()},
                      queue=doc["spec"].get("jobs") or [], name=_job_name, requeue=None,
                      usage=usage, running=running,
                      **({} if now_s is None else {"clock": lambda: now_s}))


def patch_delta(patch: ClusterPatch, state: RoundState) -> RoundDelta:
    """The round delta a PATCH asks for, in the round state's words.

    A completion of a job the cluster neither runs nor queues is an error, not a no-op: a
    typo in a job name would otherwise change nothing and say nothing (an unknown node in
    ``failures`` is refused the same way). Kubernetes does the same with a patch whose target
    does not exist: the whole patch is refused with a 4xx (kubernetes/kubernetes#68225,
    #79239), not answered 200 unchanged. A client that retries a PATCH it already made reads
    the cluster (GET) first: its version says whether the first one was applied."""
    for i, job in enumerate(patch.completions):
        if job not in state.jobs and job not in state.queue:
            names = sorted({*state.jobs, *(k for k in state.queue if isinstance(k, str))})
            raise InputError(f"no running or pending job {job!r} in this cluster "
                             f"({known_words(job, names) if names else 'none known'})",
                             path=f"completions[{i}]")
    done = list(dict.fromkeys(patch.completions))
    return RoundDelta(
        completions=[j for j in done if j in state.jobs],
        withdrawals=[j for j in done if j not in state.jobs and j in state.queue],
        failures=[(f.node, f.gpus) for f in patch.failures],
        recoveries=[(f.node, f.gpus) for f in patch.repairs],
        allocations=[(a.job, [(r.node, r.gpu) for r in a.gpus]) for a in patch.allocations],
        arrivals=list(patch.arrivals))


def apply_patch(doc: dict[str, Any], patch: ClusterPatch,
                interrupted: list[str] | None = None, usage: QueueUsage | None = None,
                now_s: float | None = None) -> tuple[dict[str, Any], RoundState]:
    """The document after ``patch`` (completions, failures, repairs, allocations,
    arrivals) and the round state that applied it, which carries ``usage`` (the stored
    usage history brought to ``now_s``, the time of the patch).

    A GPU is faulty or allocated, never both: a failure under a running job interrupts that
    job, whose GPUs are all freed (a gang runs whole or not at all); its name is appended to
    ``interrupted`` so the caller can say so (and resubmit it as an arrival if it wants).
    A refused item is a 422 (409 for a GPU another job holds or a job already queued) naming
    its field.
    """
    doc = copy.deepcopy(doc)
    state = round_state(doc, usage, now_s)
    try:
        hit = state.apply(patch_delta(patch, state))
    except InputError as exc:
        status = 409 if isinstance(exc, ConflictError) else 422
        raise RequestProblem(status, [{"path": exc.path, "message": exc.message}]) from None
    if interrupted is not None:
        interrupted.extend(j for j in hit if j not in interrupted)
    for name, node in _nodes(doc).items():
        owner = state.owner[name]
        if owner != _allocated(node):
            node["allocated"] = {str(g): job for g, job in owner.items()}
        down = sorted(state.unusable(name))
        if down != sorted(node.get("faulty") or []):
            node["faulty"] = down
    spec = doc["spec"]
    spec["jobs"] = state.pending()
    stopped = set(patch.completions) | set(hit)
    if stopped and spec.get("runningJobs"):
        spec["runningJobs"] = [r for r in spec["runningJobs"]
                               if not isinstance(r, dict) or r.get("name") not in stopped]
    return doc, state


def apply_plan(doc: dict[str, Any], allocations: list[list[Any]],
               running: list[list[Any]] | None = None, usage: QueueUsage | None = None,
               now_s: float | None = None) -> tuple[dict[str, Any], RoundState]:
    """The document after a round (each admitted job holds its GPUs and leaves the queue)
    and the round state that committed it, carrying ``usage`` as :func:`apply_patch` does.

    ``running`` (``[job, queue, priority, gpus]`` per admitted job) gives the admitted jobs'
    queues: the state counts their GPUs under them, and the document lists them in
    ``spec.runningJobs`` when the cluster declares queues, so later rounds do too."""
    patch = ClusterPatch.model_validate({"allocations": [
        {"job": job, "gpus": [{"node": n, "gpu": g} for n, g in gpus]}
        for job, gpus in _merge(allocations)]})
    out, state = apply_patch(doc, patch, None, usage, now_s)
    for job, queue, priority, _ in running or []:
        state.set_running_info(RunningJob.model_construct(name=job, queue=queue,
                                                          priority=priority))
    spec = out["spec"]
    if running and spec.get("queues"):
        started = {job for job, *_ in running}
        spec["runningJobs"] = [
            *(r for r in spec.get("runningJobs") or [] if r.get("name") not in started),
            *({"name": job, "queue": queue, "priority": priority}
              for job, queue, priority, _ in running)]
    return out, state


def _merge(allocations: list[list[Any]]) -> list[tuple[str, list[list[Any]]]]:
    per: dict[str, list[list[Any]]] = {}
    for job, gpus in allocations:
        per.setdefault(job, []).extend(gpus)
    return list(per.items())
