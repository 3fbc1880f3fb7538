"""Manifests for a federation plan: what today's Volcano Global / Karmada controllers apply.

Per sub-job (one cluster's part of a job):

* a Volcano ``Job`` (``batch.volcano.sh/v1alpha1``): one task per pipeline stage held, one
  pod per (unit, node) piece, ``minAvailable`` = every pod (gang), ``networkTopology``
  hard at the lowest HyperNode tier that holds the pods, node affinity to the chosen nodes,
  and the chosen GPU indices, layers and ranks in annotations;
* a Karmada ``PropagationPolicy`` (``policy.karmada.io/v1alpha1``) selecting that Job,
  ``clusterAffinity.clusterNames`` the one cluster and ``spreadConstraints`` by cluster
  1..1, as the HyperJob controller writes them (volcano-global
  ``docs/proposals/hyperjob-controller-design.md``).

Per job, the ``HyperJob`` (``training.volcano.sh/v1alpha1``) with the split filled in: one
replicated job per sub-job (``replicas: 1``, ``clusterNames: [cluster]``,
``splitPolicy.mode: static`` with its accelerators), so the controller's child names
``{hyperjob}-{replicatedJob}-0`` are exactly the Volcano Jobs written here; replicated jobs
that were not ``auto`` are kept as written. Plus the launch configuration
(:mod:`hyperplace.federation.launch`).

Files are written whole (temp file + ``os.replace``).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from hyperplace import io
from hyperplace.errors import InputError
from hyperplace.federation import launch
from hyperplace.federation.problem import FederatedJob, FederationProblem
from hyperplace.io import dump_yaml
from hyperplace.models.federation import FederatedJobPlan, FederationPlan, SubJob

DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
GPU_RESOURCE = "nvidia.com/gpu"


def child_name(sub: SubJob) -> str:
    """The Volcano Job name the HyperJob controller gives this sub-job's replicated job."""
    return f"{sub.name}-0"


def _replicated_name(job: FederatedJob, sub: SubJob) -> str:
    return f"{job.replicated_job}-{sub.cluster}" if job.replicated_job else sub.cluster


def _template_container(job: FederatedJob) -> dict[str, Any]:
    """The first container of the HyperJob's template, else a PyTorch container."""
    if job.hyperjob is not None:
        rj = next(r for r in job.hyperjob.spec.replicated_jobs if r.name == job.replicated_job)
        for task in rj.template_spec.get("tasks", []) or []:
            for c in (((task or {}).get("template") or {}).get("spec") or {}).get(
                    "containers", []) or []:
                return copy.deepcopy(c)
    return {"name": "trainer", "image": DEFAULT_IMAGE}


def _tier(problem: FederationProblem, sub: SubJob) -> int:
    """Lowest fabric tier holding every node of the sub-job: 1 leaf, 2 spine, 3 core."""
    if len(sub.nodes) <= 1:
        return 1
    cluster = next(c for c in problem.instance.clusters if c.name == sub.cluster)
    net = cluster.network
    # no path counts as 5; 0 is a real count (two trays of one NVLink domain)
    hops = max((h if (h := net.hop_count(a, b)) is not None else 5
                for a in sub.nodes for b in sub.nodes if a < b), default=1)
    return 1 if hops <= 1 else 2 if hops <= 3 else 3


def accelerator_resource(problem: FederationProblem, gpu_type: str) -> str:
    """The extended resource GPUs of ``gpu_type`` are requested as."""
    t = problem.instance.catalog.find(gpu_type)
    return "amd.com/gpu" if t is not None and t.vendor == "amd" else GPU_RESOURCE


def _product_selector(gpu_type: str) -> dict[str, str]:
    from hyperplace.models.gpu import gfd_product

    product = gfd_product(gpu_type)
    return {"nvidia.com/gpu.product": product} if product else {}


def volcano_spec(problem: FederationProblem, job: FederatedJob, plan: FederatedJobPlan,
                 sub: SubJob) -> dict[str, Any]:
    """The Volcano Job spec of one sub-job (also the HyperJob's templateSpec)."""
    container = _template_container(job)
    tasks = []
    pods = 0
    cursor = 0
    pieces_by_pos: dict[int, list[tuple[str, int]]] = {}
    for unit in sub.units:
        group = unit.partition("/")[0]
        pos = next(k for k, g in enumerate(job.stage_groups) if g.name == group)
        n = job.unit_gpus(pos)
        gpus = sub.gpus[cursor:cursor + n]
        cursor += n
        per_node: dict[str, int] = {}
        for g in gpus:
            per_node[g.node] = per_node.get(g.node, 0) + 1
        pieces_by_pos.setdefault(pos, []).extend(per_node.items())
    for stage in sub.stages:
        pieces = pieces_by_pos.get(stage.position, [])
        if not pieces:
            continue
        nodes = sorted({node for node, _ in pieces})
        per_pod = max(k for _, k in pieces)
        c = copy.deepcopy(container)
        c.setdefault("name", "trainer")
        res = c.setdefault("resources", {})
        res.setdefault("limits", {})[GPU_RESOURCE] = per_pod
        env = [e for e in c.get("env", []) if e.get("name") not in (
            "HYPERPLACE_PIPELINE_RANK", "HYPERPLACE_FIRST_LAYER", "HYPERPLACE_LAST_LAYER")]
        env += [{"name": "HYPERPLACE_PIPELINE_RANK", "value": str(stage.position)},
                {"name": "HYPERPLACE_FIRST_LAYER", "value": str(stage.first_layer)},
                {"name": "HYPERPLACE_LAST_LAYER", "value": str(stage.last_layer)}]
        c["env"] = env
        tasks.append({
            "name": f"stage-{stage.position}",
            "replicas": len(pieces),
            "minAvailable": len(pieces),
            "template": {
                "metadata": {"labels": {"hyperplace.io/job": job.name,
                                        "hyperplace.io/stage": str(stage.position)}},
                "spec": {
                    "restartPolicy": "OnFailure",
                    **({"nodeSelector": _product_selector(sub.gpu_type)}
                       if _product_selector(sub.gpu_type) else {}),
                    "affinity": {"nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [{
                                "key": "kubernetes.io/hostname", "operator": "In",
                                "values": nodes}]}]}}},
                    "containers": [c],
                },
            },
        })
        pods += len(pieces)
    return {
        "schedulerName": "volcano",
        "queue": "default",
        "minAvailable": pods,
        "networkTopology": {"mode": "hard", "highestTierAllowed": _tier(problem, sub)},
        "plugins": {"env": [], "svc": []},
        "tasks": tasks,
    }


def _annotations(sub: SubJob, plan: FederatedJobPlan) -> dict[str, str]:
    gpus: dict[str, list[int]] = {}
    for g in sub.gpus:
        gpus.setdefault(g.node, []).append(g.gpu)
    return {
        "hyperplace.io/gpus": ";".join(f"{n}:{','.join(map(str, sorted(v)))}"
                                       for n, v in gpus.items()),
        "hyperplace.io/stages": ",".join(f"{s.position}:{s.first_layer}-{s.last_layer}"
                                         for s in sub.stages),
        "hyperplace.io/dp-ranks": ",".join(map(str, sub.dp_ranks)),
        "hyperplace.io/predicted-step-s": f"{plan.predicted.step_time_s:.6g}",
        "hyperplace.io/shape": plan.shape,
    }


def volcano_job(problem, job, plan, sub) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": child_name(sub),
                            "labels": {"hyperplace.io/job": job.name,
                                       "hyperplace.io/cluster": sub.cluster},
                            "annotations": _annotations(sub, plan)}
    if job.namespace:
        meta["namespace"] = job.namespace
    return {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": meta,
            "spec": volcano_spec(problem, job, plan, sub)}


def propagation_policy(job: FederatedJob, sub: SubJob) -> dict[str, Any]:
    selector: dict[str, Any] = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                                "name": child_name(sub)}
    meta: dict[str, Any] = {"name": child_name(sub),
                            "labels": {"hyperplace.io/job": job.name}}
    if job.namespace:
        selector["namespace"] = job.namespace
        meta["namespace"] = job.namespace
    return {
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy", "metadata": meta,
        "spec": {
            "resourceSelectors": [selector],
            "placement": {
                "clusterAffinity": {"clusterNames": [sub.cluster]},
                "spreadConstraints": [{"spreadByField": "cluster", "minGroups": 1,
                                       "maxGroups": 1}],
                "replicaScheduling": {"replicaSchedulingType": "Divided",
                                      "replicaDivisionPreference": "Aggregated"},
            },
        },
    }


def hyperjob(problem: FederationProblem, job: FederatedJob, plan: FederatedJobPlan
             ) -> dict[str, Any]:
    """The job's HyperJob with the split filled in (see the module docstring)."""
    replicated = []
    if job.hyperjob is not None:
        src = job.hyperjob.to_doc()
        name = job.hyperjob.metadata.name
        meta = copy.deepcopy(src["metadata"])
        for rj in src["spec"]["replicatedJobs"]:
            if rj["name"] != job.replicated_job:
                replicated.append(rj)
        spec_extra = {k: v for k, v in src["spec"].items()
                      if k not in ("replicatedJobs", "maxDomains", "minAvailable")}
    else:
        name = job.name
        meta = {"name": name}
        if job.namespace:
            meta["namespace"] = job.namespace
        spec_extra = {}
    for sub in plan.sub_jobs:
        replicated.append({
            "name": _replicated_name(job, sub),
            "replicas": 1,
            "clusterNames": [sub.cluster],
            # Volcano Global: acceleratorType is the resource the accelerators are counted in;
            # the GPU model is in the template's nodeSelector (nvidia.com/gpu.product)
            "splitPolicy": {"mode": "static", "accelerators": len(sub.gpus),
                            "acceleratorType": accelerator_resource(problem, sub.gpu_type)},
            "templateSpec": volcano_spec(problem, job, plan, sub),
        })
    meta.setdefault("annotations", {})["hyperplace.io/federation-shape"] = plan.shape
    return {"apiVersion": "training.volcano.sh/v1alpha1", "kind": "HyperJob", "metadata": meta,
            "spec": {**spec_extra, "minAvailable": len(replicated),
                     "maxDomains": len(plan.clusters), "replicatedJobs": replicated}}


def manifests(problem: FederationProblem, plan: FederationPlan) -> dict[str, str]:
    """Relative path -> file text, for every admitted job."""
    files: dict[str, str] = {}
    jobs = {j.name: j for j in problem.jobs}
    for jp in plan.jobs:
        job = jobs[jp.job]
        base = jp.job
        for sub in jp.sub_jobs:
            files[f"{base}/volcano-job-{sub.cluster}.yaml"] = dump_yaml(
                volcano_job(problem, job, jp, sub))
            files[f"{base}/propagation-policy-{sub.cluster}.yaml"] = dump_yaml(
                propagation_policy(job, sub))
        files[f"{base}/hyperjob.yaml"] = dump_yaml(hyperjob(problem, job, jp))
        cfg = launch.launch_config(job, jp)
        files[f"{base}/launch/launch.json"] = json.dumps(cfg, indent=2) + "\n"
        files[f"{base}/launch/hostfile"] = launch.hostfile(cfg["ranks"])
        by_node: dict[str, list[int]] = {}
        for r in cfg["ranks"]:
            by_node.setdefault(r["node"], []).append(r["gpu"])
        for node, gpus in by_node.items():
            files[f"{base}/launch/nccl-topo-{node}.xml"] = launch.nccl_topology(
                problem.instance, node, gpus)
        files[f"{base}/launch/nccl.env"] = launch.nccl_env(problem.instance, cfg["ranks"],
                                                           jp.clusters)
    return files


def write_atomic(path: Path, text: str) -> None:
    """Write one manifest whole or not at all, making its folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    io.write_atomic(path, text)


def write_manifests(problem: FederationProblem, plan: FederationPlan, out_dir: str | Path
                    ) -> list[Path]:
    """Write every manifest under ``out_dir`` (created); returns the paths written."""
    root = Path(out_dir)
    if root.exists() and not root.is_dir():
        raise InputError("exists and is not a directory", source=str(out_dir), path="--output")
    try:
        root.mkdir(parents=True, exist_ok=True)
        written = []
        for rel, text in manifests(problem, plan).items():
            p = root / rel
            write_atomic(p, text)
            written.append(p)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", source=str(out_dir),
                         path="--output") from None
    return written
