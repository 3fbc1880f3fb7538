"""Kueue without TAS: admission by quota only, then the kube-scheduler binds pods one by one.

This is the setup behind kubernetes-sigs/kueue#1476 (a 2 x 8-GPU job admitted while the
free GPUs were split 7/7/8): before Topology Aware Scheduling, Kueue checks quota, not
whether the pods fit on nodes.

* Admission (kubernetes-sigs/kueue at commit ff69552,
  ``pkg/scheduler/flavorassigner/flavorassigner.go`` ``fitsResourceQuota`` L1334-1369): a
  workload fits when the ClusterQueue's usage plus its request stays within the
  available quota. Here the nominal ``nvidia.com/gpu`` quota is each cluster's GPU count,
  the running (resident) jobs use their GPUs of it, and every admitted workload keeps its
  whole request reserved until it finishes, whether or not its pods are running.
* Binding: without TAS nothing ties the pods together; the kube-scheduler places each pod
  on its own (kubernetes/kubernetes ``pkg/scheduler/schedule_one.go``: filter the nodes
  with room, score them, take the best, ties at random). The default scoring
  (``NodeResourcesFit`` LeastAllocated, ``NodeResourcesBalancedAllocation``) weighs CPU
  and memory only; our pods request GPUs only, so every feasible node scores the same and
  the node is a random feasible one. A pod that finds no node stays pending while the
  pods already bound keep their GPUs (``JobOutcome.held``): the job is admitted but does
  not run, and its quota blocks the workloads behind it.
* GPUs inside a node: NVIDIA's device plugin (``gpu_choice``).
"""

from __future__ import annotations

import random

from hyperplace.baselines.common import ClusterView, FreeState, JobOutcome, Pod, pods_for
from hyperplace.models import TrainingJob
from hyperplace.models.plan import GPURef

SOLVER = "kueue-quota-style"


def _quota_left(state: FreeState, view: ClusterView) -> int:
    """Nominal quota (all GPUs) minus residents, running jobs and admitted reservations."""
    free = sum(state.count(n) for n in view.nodes)
    return free - state.reserved.get(view.cluster.name, 0)


def place_job(job: TrainingJob, state: FreeState, views: list[ClusterView],
              rng: random.Random) -> JobOutcome:
    """Admit by quota, then bind pod by pod; a partly bound job holds its GPUs and quota."""
    units = job.units()
    demand = sum(u.gpus for u in units)
    reasons = []
    for view in views:
        left = _quota_left(state, view)
        if demand > left:
            reasons.append(f"kueue: {view.cluster.name}: insufficient unused quota for "
                           f"nvidia.com/gpu, {demand - left} more needed")
            continue
        pods: list[Pod] = [p for u in units for p in pods_for(u, view.node_size(u))]
        placed: dict[str, list[GPURef]] = {}
        unbound = 0
        for pod in pods:
            feasible = [n for n in view.nodes if state.count(n) >= pod.gpus
                        and view.suits(pod.unit, view.nodes[n])]
            if not feasible or len(pods) < len(units):
                unbound += pod.gpus
                continue
            node = rng.choice(feasible)
            placed.setdefault(pod.unit.name, []).extend(
                GPURef(node=node, gpu=g) for g in state.take(node, pod.gpus))
        if unbound == 0 and len(pods) >= len(units):
            return JobOutcome(units=placed)
        # admitted by quota, not running: bound pods keep their GPUs, the rest stays reserved
        state.reserved[view.cluster.name] = state.reserved.get(view.cluster.name, 0) + unbound
        held = [g for gpus in placed.values() for g in gpus]
        return JobOutcome(
            reasons=[f"kueue: {view.cluster.name}: admitted by quota ({demand} GPUs), but "
                     f"{unbound} GPUs of its pods found no node; the bound pods hold "
                     f"{len(held)} GPUs and the job does not run"],
            held=held)
    return JobOutcome(reasons=reasons)
