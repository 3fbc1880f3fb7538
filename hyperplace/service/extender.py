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
task's ``Job`` after its namespace. The pod's namespace: its ``metadata.namespace`` (the
task's ``Namespace``, or the part of ``Job`` before the slash), else ``default``.

Isolation: plans are recorded per stored cluster only (a round on an inline or bundled
instance changes nothing here), keyed by (stored cluster, namespace, job), and a plan has an
opinion only on the nodes of its own stored cluster: a pod's job planned on cluster A says
nothing about the nodes of cluster B, which pass with score 0. ``?cluster=NAME`` restricts
the answer to one stored cluster's plans. A job hyperplace has no plan for gets no opinion:
every node passes and every score is 0, so the extender never blocks work it does not manage.
"""


from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hyperplace.service.store import DEFAULT_NAMESPACE, JobPlan, PlanKey

K8S_MAX_SCORE = 10  # MaxExtenderPriority
VOLCANO_MAX_SCORE = 100.0  # the scheduler framework's MaxNodeScore, as node-order plugins use
VOLCANO_UNSCHEDULABLE = 2


class Plans:
    """The recorded plans of one job in one namespace, each with the nodes of its cluster."""

    def __init__(self, plans: dict[PlanKey, JobPlan], nodes_of: Callable[[str], frozenset[str]],
                 job: str | None, namespace: str | None, cluster: str | None = None):
        self.job = job or ""
        ns = namespace or DEFAULT_NAMESPACE
        self.candidates: list[tuple[frozenset[str], JobPlan]] = []
        if job:
            clusters = [cluster] if cluster is not None else sorted(
                {c for c, n, j in plans if n == ns and j == job})
            for c in clusters:
                plan = plans.get((c, ns, job))
                if plan is not None:
                    self.candidates.append((nodes_of(c), plan))

    def at(self, node: str) -> JobPlan | None:
        """The plan that has an opinion on ``node`` (the one of the cluster holding it)."""
        for nodes, plan in self.candidates:
            if node in nodes:
                return plan
        return None


def _meta(pod: dict[str, Any] | None) -> dict[str, Any]:
    meta = (pod or {}).get("metadata")
    return meta if isinstance(meta, dict) else {}


def pod_job(pod: dict[str, Any] | None, labels: tuple[str, ...]) -> str | None:
    meta = _meta(pod)
    pod_labels = meta.get("labels") or {}
    for key in labels:
        if isinstance(pod_labels.get(key), str) and pod_labels[key]:
            return pod_labels[key]
    group = (meta.get("annotations") or {}).get("scheduling.k8s.io/group-name")
    return group if isinstance(group, str) and group else None


def pod_namespace(pod: dict[str, Any] | None) -> str:
    ns = _meta(pod).get("namespace")
    return ns if isinstance(ns, str) and ns else DEFAULT_NAMESPACE


def task_job(task: dict[str, Any] | None, labels: tuple[str, ...]) -> str | None:
    task = task or {}
    job = pod_job(task.get("Pod"), labels)
    if job:
        return job
    jid = task.get("Job")
    return jid.rsplit("/", 1)[-1] if isinstance(jid, str) and jid else None


def task_namespace(task: dict[str, Any] | None) -> str:
    task = task or {}
    if isinstance(task.get("Namespace"), str) and task["Namespace"]:
        return task["Namespace"]
    if task.get("Pod"):
        return pod_namespace(task["Pod"])
    jid = task.get("Job")
    if isinstance(jid, str) and "/" in jid:
        return jid.split("/", 1)[0] or DEFAULT_NAMESPACE
    return DEFAULT_NAMESPACE


def _reason(job: str, plan: JobPlan, node: str) -> str:
    if plan.pending is not None:
        return f"hyperplace: job {job} is pending in the latest plan: {plan.pending}"
    where = ", ".join(sorted(plan.nodes)[:5]) + (" ..." if len(plan.nodes) > 5 else "")
    return f"hyperplace: the latest plan puts job {job} on {where}, not on {node}"


def _passes(plan: JobPlan | None, node: str) -> bool:
    return plan is None or (plan.pending is None and node in plan.nodes)


def _node_name(item: Any) -> str:
    meta = (item or {}).get("metadata") if isinstance(item, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


def k8s_filter(args: dict[str, Any], plans: Plans) -> dict[str, Any]:
    failed: dict[str, str] = {}
    out: dict[str, Any] = {"FailedNodes": failed, "FailedAndUnresolvableNodes": {}, "Error": ""}
    if args.get("NodeNames") is not None:
        keep = []
        for name in args["NodeNames"]:
            plan = plans.at(name)
            if _passes(plan, name):
                keep.append(name)
            else:
                failed[name] = _reason(plans.job, plan, name)  # type: ignore[arg-type]
        out["NodeNames"] = keep
        out["Nodes"] = None
    else:
        nodes = args.get("Nodes") or {}
        items = []
        for item in nodes.get("items") or []:
            name = _node_name(item)
            plan = plans.at(name)
            if _passes(plan, name):
                items.append(item)
            else:
                failed[name] = _reason(plans.job, plan, name)  # type: ignore[arg-type]
        out["Nodes"] = {**nodes, "items": items}
        out["NodeNames"] = None
    return out


def _candidate_names(args: dict[str, Any]) -> list[str]:
    if args.get("NodeNames") is not None:
        return list(args["NodeNames"])
    return [_node_name(i) for i in (args.get("Nodes") or {}).get("items") or []]


def _score(plan: JobPlan | None, node: str, top: float) -> float:
    """A planned node scores by the share of the job's GPUs it holds; others 0."""
    if plan is None or plan.pending is not None or not plan.nodes:
        return 0
    return top * plan.nodes.get(node, 0) / max(plan.nodes.values())


def k8s_prioritize(args: dict[str, Any], plans: Plans) -> list[dict[str, Any]]:
    return [{"Host": n, "Score": int(round(_score(plans.at(n), n, K8S_MAX_SCORE)))}
            for n in dict.fromkeys(_candidate_names(args))]


def volcano_predicate(req: dict[str, Any], plans: Plans) -> dict[str, Any]:
    node = (req.get("node") or {}).get("Name") or ""
    plan = plans.at(node)
    if _passes(plan, node):
        return {"status": "", "code": 0}
    return {"status": _reason(plans.job, plan, node), "code": VOLCANO_UNSCHEDULABLE}  # type: ignore[arg-type]


def volcano_prioritize(req: dict[str, Any], plans: Plans) -> dict[str, Any]:
    names = [(n or {}).get("Name") or "" for n in req.get("nodes") or []]
    return {"nodeScore": {n: _score(plans.at(n), n, VOLCANO_MAX_SCORE) for n in names},
            "errorMessage": ""}
