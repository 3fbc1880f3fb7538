"""Volcano-style baseline: gang scheduling with network-topology-aware allocate (HyperNodes).

Rules re-implemented (shared/design/peers.md, Volcano allocate + binpack):

* Jobs one at a time in queue order; a job (PodGroup) is bound only if every pod fits.
* HyperNode tiers are the cluster's topology levels (tier 1 = leaf switch, tier 2 = spine
  or pod, top = the cluster). ``highestTierAllowed`` comes from the job's hop limit: the
  DataParallel ``maxHopCount`` for multi-unit jobs, the unit's own for one-unit jobs
  (hop 1 -> tier 1, hop 3 -> tier 2, hop 0 -> one node, unset -> top).
* Walk tiers from 1 up to that tier. At a tier, every HyperNode whose idle GPUs (of a type
  the job accepts) cover the job's GPUs gets a dry-run; the best-scoring successful one
  wins, score = GPU utilisation of the HyperNode after placement (binpack; ties go to the
  HyperNode seen first, as no job already holds tasks). If no dry-run succeeds the walk
  climbs to the next tier.
* Inside the HyperNode each pod goes to the node with the highest binpack score
  ``(used + request) / allocatable`` among nodes with enough free GPUs (first node on ties).
  A unit larger than a node (several pods) that has its own ``maxHopCount`` is a partition
  (``partitionPolicy``): it gets its own tier walk inside the job's HyperNode.
* Multi-cluster instances: each cluster is walked on its own (each runs its own Volcano)
  and the cluster whose chosen HyperNode scores best wins; a job never crosses clusters.

Blind spots kept on purpose: GPU counts per node only, so a pod gets the lowest-index free
GPUs (not an NVLink clique on DGX-1 nodes); tiers are ranks, so link bandwidth is ignored.
"""

from __future__ import annotations

from typing import Callable

from hyperplace.baselines.common import (
    ClusterView,
    FreeState,
    JobOutcome,
    Pod,
    eligible_nodes,
    pods_for,
    run_baseline,
)
from hyperplace.models import GangUnit, Instance, PlacementPlan, TrainingJob
from hyperplace.models.plan import GPURef

SOLVER = "volcano-style"

# A dry run: takes a scratch state for the HyperNode's nodes, fills it, returns the units'
# GPUs (or None when the gang does not fit).
DryRun = Callable[[FreeState, list[str]], dict[str, list[GPURef]] | None]


def volcano_style(instance: Instance) -> PlacementPlan:
    """Volcano's allocate action, one job at a time, as a PlacementPlan."""
    return run_baseline(instance, SOLVER, _place_job)


def job_hop_limit(job: TrainingJob, units: list[GangUnit]) -> int | None:
    """The hop limit a user would put in the job's ``networkTopology``."""
    if len(units) == 1:
        return units[0].max_hop_count
    return job.between_replicas.max_hop_count


def _binpack_pods(pods: list[Pod], nodes: list[str], state: FreeState) -> list[GPURef] | None:
    """Each pod to the fullest node that still has room (Volcano binpack node score)."""
    out: list[GPURef] = []
    for pod in pods:
        best, best_score = None, -1.0
        for n in nodes:
            if state.count(n) < pod.gpus:
                continue
            score = (state.used[n] + pod.gpus) / max(1, state.allocatable[n])
            if score > best_score:
                best, best_score = n, score
        if best is None:
            return None
        out += [GPURef(node=best, gpu=i) for i in state.take(best, pod.gpus)]
    return out


def _utilisation(state: FreeState, nodes: list[str]) -> float:
    alloc = sum(state.allocatable[n] for n in nodes)
    return sum(state.used[n] for n in nodes) / alloc if alloc else 0.0


def _tier_walk(view: ClusterView, scope: set[str], max_level: int, demand: int,
               eligible: set[str], state: FreeState, dry_run: DryRun
               ) -> tuple[FreeState, dict[str, list[GPURef]]] | str:
    """Lowest tier first; best binpack HyperNode among successful dry runs; else a reason."""
    start = view.leaf_level() if max_level > 0 else 0
    tried = 0
    largest_idle = 0
    for level in range(start, max_level + 1):
        best = None
        for _, dom_nodes in view.levels[level].domains:
            nodes = [n for n in dom_nodes if n in scope]
            if not nodes:
                continue
            idle = sum(state.count(n) for n in nodes if n in eligible)
            largest_idle = max(largest_idle, idle)
            if idle < demand:
                continue
            tried += 1
            trial = state.copy(nodes)
            got = dry_run(trial, nodes)
            if got is None:
                continue
            score = _utilisation(trial, nodes)
            if best is None or score > best[0]:
                best = (score, trial, got)
        if best is not None:
            return best[1], best[2]
    if tried == 0:
        return (f"no HyperNode up to tier {max_level} has {demand} idle GPUs of an accepted "
                f"type (most: {largest_idle})")
    return (f"gang did not fit on any of {tried} HyperNodes with enough idle GPUs up to tier "
            f"{max_level} (per-node GPU counts)")


def _place_job(job: TrainingJob, state: FreeState, views: list[ClusterView]) -> JobOutcome:
    units = job.units()
    demand = sum(u.gpus for u in units)
    hops = job_hop_limit(job, units)
    reasons: list[str] = []
    candidates = []
    for view in views:
        eligible = eligible_nodes(view, units)
        if not eligible:
            continue

        def dry_run(trial: FreeState, nodes: list[str], view: ClusterView = view
                    ) -> dict[str, list[GPURef]] | None:
            return _dry_run_job(units, view, trial, nodes)

        result = _tier_walk(view, set(view.nodes), view.level_for_hops(hops), demand, eligible,
                            state, dry_run)
        if isinstance(result, str):
            reasons.append(f"{SOLVER}: {view.cluster.name}: {result}")
        else:
            trial, got = result
            nodes = list(trial.free)
            candidates.append((_utilisation(trial, nodes), trial, got))
    if not candidates:
        return JobOutcome(reasons=reasons or [f"{SOLVER}: no node has a GPU type the job accepts"])
    _, trial, got = max(candidates, key=lambda c: c[0])
    state.commit(trial)
    return JobOutcome(units=got)


def _dry_run_job(units: list[GangUnit], view: ClusterView, trial: FreeState,
                 nodes: list[str]) -> dict[str, list[GPURef]] | None:
    placed: dict[str, list[GPURef]] = {}
    for unit in units:
        pods = pods_for(unit, view.node_size(unit))
        if not pods:
            return None
        unit_nodes = [n for n in nodes if view.suits(unit, view.nodes[n])]
        if len(pods) > 1 and unit.max_hop_count is not None:
            def partition_run(t: FreeState, ns: list[str], pods: list[Pod] = pods
                              ) -> dict[str, list[GPURef]] | None:
                got = _binpack_pods(pods, ns, t)
                return None if got is None else {"": got}

            result = _tier_walk(view, set(unit_nodes), view.level_for_hops(unit.max_hop_count),
                                unit.gpus, set(unit_nodes), trial, partition_run)
            if isinstance(result, str):
                return None
            sub, got = result
            trial.commit(sub)
            placed[unit.name] = got[""]
        else:
            got_pods = _binpack_pods(pods, unit_nodes, trial)
            if got_pods is None:
                return None
            placed[unit.name] = got_pods
    return placed
