"""Scheduler extenders answered from the latest plan of the pod's job (no solve on the
request path: a dictionary look-up, well inside Volcano's 100 ms extender timeout).

Wire formats, re-implemented from the upstream type definitions:

* kube-scheduler ``k8s.io/kube-scheduler/extender/v1`` (kubernetes/kube-scheduler at
  e87dbddd, ``extender/v1/types.go``): ``ExtenderArgs`` (lines 73-82: ``Pod``, ``Nodes``,
  ``NodeNames``), ``ExtenderFilterResult`` (lines 87-103: ``Nodes``/``NodeNames``,
  ``FailedNodes``, ``FailedAndUnresolvableNodes``, ``Error``), ``HostPriorityList`` of
  ``{Host, Score}`` (lines 123-132) with scores in [0, 10] (lines 25-29). Go fields without
  JSON tags, so the keys keep Go's capitals; the Pod and Node objects inside use the API's
  lower-case JSON.
* Volcano's extender plugin (volcano-sh/volcano at ed72c7c8,
  ``pkg/scheduler/plugins/extender/argument.go`` lines 35-53): ``PredicateRequest{task,
  node}`` -> ``{status, code}`` and ``PrioritizeRequest{task, nodes}`` -> ``{nodeScore,
  errorMessage}``; ``extender.go`` lines 190-216 treat an empty ``status`` as a pass and a
  non-empty one with code 0 as ``Error``, so a refusal here carries code 2
  (``Unschedulable``, ``pkg/scheduler/api/types.go`` lines 139-153). ``TaskInfo`` and
  ``NodeInfo`` (``api/job_info.go`` line 118, ``api/node_info.go`` line 52) have no JSON
  tags either: ``Name``, ``Namespace``, ``Job`` (``namespace/podgroup``), ``Pod``.

The pod's job: the first of the configured labels found on the pod (``hyperplace.io/job``,
``volcano.sh/job-name``, ``training.kubeflow.org/job-name``, ``batch.kubernetes.io/job-name``,
``job-name``), else the ``scheduling.k8s.io/group-name`` annotation, else (Volcano) the
task's ``Job`` after its namespace. A job hyperplace has no plan for gets no opinion: every
node passes and every score is 0, so the extender never blocks work it does not manage.
"""

from __future__ import annotations

from typing import Any

from hyperplace.service.store import JobPlan

K8S_MAX_SCORE = 10  # MaxExtenderPriority
VOLCANO_MAX_SCORE = 100.0  # the scheduler framework's MaxNodeScore, as node-order plugins use
VOLCANO_UNSCHEDULABLE = 2


def pod_job(pod: dict[str, Any] | None, labels: tuple[str, ...]) -> str | None:
    meta = (pod or {}).get("metadata") or {}
    pod_labels = meta.get("labels") or {}
    for key in labels:
        if isinstance(pod_labels.get(key), str) and pod_labels[key]:
            return pod_labels[key]
    group = (meta.get("annotations") or {}).get("scheduling.k8s.io/group-name")
    return group if isinstance(group, str) and group else None


def task_job(task: dict[str, Any] | None, labels: tuple[str, ...]) -> str | None:
    task = task or {}
    job = pod_job(task.get("Pod"), labels)
    if job:
        return job
    jid = task.get("Job")
    return jid.rsplit("/", 1)[-1] if isinstance(jid, str) and jid else None


def _reason(job: str, plan: JobPlan, node: str) -> str:
    if plan.pending is not None:
        return f"hyperplace: job {job} is pending in the latest plan: {plan.pending}"
    where = ", ".join(sorted(plan.nodes)[:5]) + (" ..." if len(plan.nodes) > 5 else "")
    return f"hyperplace: the latest plan puts job {job} on {where}, not on {node}"


def _passes(plan: JobPlan | None, node: str) -> bool:
    return plan is None or (plan.pending is None and node in plan.nodes)


def k8s_filter(args: dict[str, Any], plans: dict[str, JobPlan], labels: tuple[str, ...]
               ) -> dict[str, Any]:
    job = pod_job(args.get("Pod"), labels)
    plan = plans.get(job) if job else None
    failed: dict[str, str] = {}
    out: dict[str, Any] = {"FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}
    if args.get("NodeNames") is not None:
        keep = []
        for name in args["NodeNames"]:
            if _passes(plan, name):
                keep.append(name)
            else:
                failed[name] = _reason(job or "", plan, name)  # type: ignore[arg-type]
        out["NodeNames"] = keep
        out["Nodes"] = None
    else:
        nodes = args.get("Nodes") or {}
        items = []
        for item in nodes.get("items") or []:
            name = ((item or {}).get("metadata") or {}).get("name", "")
            if _passes(plan, name):
                items.append(item)
            else:
                failed[name] = _reason(job or "", plan, name)  # type: ignore[arg-type]
        out["Nodes"] = {**nodes, "items": items}
        out["NodeNames"] = None
    return out


def _candidate_names(args: dict[str, Any]) -> list[str]:
    if args.get("NodeNames") is not None:
        return list(args["NodeNames"])
    return [((i or {}).get("metadata") or {}).get("name", "")
            for i in (args.get("Nodes") or {}).get("items") or []]


def _scores(plan: JobPlan | None, names: list[str], top: float) -> dict[str, float]:
    """Planned nodes score by the share of the job's GPUs they hold; others 0."""
    if plan is None or plan.pending is not None or not plan.nodes:
        return {n: 0 for n in names}
    most = max(plan.nodes.values())
    return {n: top * plan.nodes.get(n, 0) / most for n in names}


def k8s_prioritize(args: dict[str, Any], plans: dict[str, JobPlan], labels: tuple[str, ...]
                   ) -> list[dict[str, Any]]:
    job = pod_job(args.get("Pod"), labels)
    scores = _scores(plans.get(job) if job else None, _candidate_names(args), K8S_MAX_SCORE)
    return [{"Host": n, "Score": int(round(s))} for n, s in scores.items()]


def volcano_predicate(req: dict[str, Any], plans: dict[str, JobPlan], labels: tuple[str, ...]
                      ) -> dict[str, Any]:
    job = task_job(req.get("task"), labels)
    plan = plans.get(job) if job else None
    node = (req.get("node") or {}).get("Name", "")
    if _passes(plan, node):
        return {"status": "", "code": 0}
    return {"status": _reason(job or "", plan, node), "code": VOLCANO_UNSCHEDULABLE}  # type: ignore[arg-type]


def volcano_prioritize(req: dict[str, Any], plans: dict[str, JobPlan], labels: tuple[str, ...]
                       ) -> dict[str, Any]:
    job = task_job(req.get("task"), labels)
    names = [(n or {}).get("Name", "") for n in req.get("nodes") or []]
    scores = _scores(plans.get(job) if job else None, names, VOLCANO_MAX_SCORE)
    return {"nodeScore": scores, "errorMessage": ""}
