"""Kueue-TAS-style baseline: topology-aware admission with the BestFit algorithm.

Rules re-implemented (shared/design/peers.md, Kueue Topology Aware Scheduling):

* Levels: ``block`` (the hop-3 domain: spine or SuperPOD group), ``rack`` (the hop-1
  domain: one leaf switch or scalable unit), ``hostname``; above them the cluster.
* A job's PodSets are its resource groups (all units of one group, as pods). A PodSet asks
  ``required`` at the level its hop limit gives (the unit's ``maxHopCount`` when a unit has
  several pods, the DataParallel ``maxHopCount`` when the PodSet has several units:
  0 -> hostname, 1 -> rack, 3 -> block), else ``preferred: rack``.
* Capacity is counted in pods: a node holds ``floor(free GPUs / pod GPUs)`` pods of the
  PodSet (nodes of a type it accepts); domains sum their nodes.
* BestFit: at the requested level pick one domain that holds the PodSet, the tightest one
  (smallest capacity that still fits; first in the capacity-descending order on ties).
  ``preferred`` climbs a level when no single domain fits. Then descend level by level:
  sort the children by capacity (most first), take the fewest consecutive children that
  cover the count, choosing the last one by best fit.
* A job is admitted when all its PodSets fit, in the first cluster (ResourceFlavor) that
  holds them; jobs are taken one at a time in queue order.

Blind spots kept on purpose: pods get the lowest-index free GPUs (no NVLink cliques), and
levels are ranks (no link bandwidth).
"""

from __future__ import annotations

from hyperplace.baselines.common import (
    ClusterView,
    FreeState,
    JobOutcome,
    Pod,
    pods_for,
    run_baseline,
)
from hyperplace.models import GangUnit, Instance, PlacementPlan, TrainingJob
from hyperplace.models.plan import GPURef

SOLVER = "kueue-tas-style"


def kueue_tas_style(instance: Instance) -> PlacementPlan:
    """Kueue TAS admission, one workload at a time, as a PlacementPlan."""
    return run_baseline(instance, SOLVER, _place_job)


def podsets(units: list[GangUnit]) -> list[list[GangUnit]]:
    """Units grouped by resource group, in manifest order: Kueue's PodSets."""
    groups: dict[str, list[GangUnit]] = {}
    for u in units:
        groups.setdefault(u.group, []).append(u)
    return list(groups.values())


def _constraint(job: TrainingJob, ps: list[GangUnit], pods: list[Pod]) -> int | None:
    """The PodSet's hop limit (None = no requirement, i.e. ``preferred: rack``)."""
    limits = []
    if len(ps) > 1 and job.between_replicas.max_hop_count is not None:
        limits.append(job.between_replicas.max_hop_count)
    if len(pods) > len(ps):
        limits += [u.max_hop_count for u in ps if u.max_hop_count is not None]
    return min(limits) if limits else None


class _Capacity:
    """Pods of one size each node (and domain) can still take."""

    def __init__(self, view: ClusterView, state: FreeState, eligible: set[str], pod_gpus: int):
        self.per_node = {n: (state.count(n) // pod_gpus if n in eligible else 0)
                         for n in view.nodes}

    def of(self, nodes: list[str]) -> int:
        return sum(self.per_node[n] for n in nodes)


def _best_fit_index(caps: list[int], count: int) -> int | None:
    """Kueue's choice among capacity-sorted domains: tightest that fits, first on ties."""
    best = None
    for i, c in enumerate(caps):
        if c >= count and (best is None or c < caps[best]):
            best = i
    return best


def _sorted_domains(doms: list[tuple[str, list[str]]], cap: _Capacity
                    ) -> list[tuple[int, str, list[str]]]:
    out = [(cap.of(nodes), name, nodes) for name, nodes in doms]
    out.sort(key=lambda d: -d[0])  # stable: topology order breaks ties
    return out


def _descend(view: ClusterView, level: int, nodes: list[str], count: int, cap: _Capacity
             ) -> list[tuple[str, int]]:
    """Pods per node under one chosen domain: fewest children, last one by best fit."""
    if level == 0:
        return [(nodes[0], count)]
    inside = set(nodes)
    children = [d for d in view.levels[level - 1].domains if d[1][0] in inside]
    ranked = _sorted_domains(children, cap)
    out: list[tuple[str, int]] = []
    remaining = count
    while remaining > 0 and ranked:
        idx = _best_fit_index([c for c, _, _ in ranked], remaining)
        if idx is not None:
            c, _, child = ranked.pop(idx)
            out += _descend(view, level - 1, child, remaining, cap)
            remaining = 0
        else:
            c, _, child = ranked.pop(0)
            if c == 0:
                break
            out += _descend(view, level - 1, child, c, cap)
            remaining -= c
    return out if remaining == 0 else []


def _assign_podset(job: TrainingJob, ps: list[GangUnit], view: ClusterView, state: FreeState
                   ) -> dict[str, list[GPURef]] | str:
    size = view.node_size(ps[0])
    pods = [p for u in ps for p in pods_for(u, size)]
    if not pods:
        return f"podset {ps[0].group!r}: no node of an accepted GPU type"
    pod_gpus = max(p.gpus for p in pods)
    eligible = {n for n, node in view.nodes.items() if view.suits(ps[0], node)}
    cap = _Capacity(view, state, eligible, pod_gpus)
    hops = _constraint(job, ps, pods)
    what = f"podset {ps[0].group!r} ({len(pods)} pods x {pod_gpus} GPUs)"
    if hops is not None:
        levels = [view.level_for_hops(hops)]
        mode = f"required within {hops} hops"
    else:
        levels = list(range(view.level_for_hops(1), len(view.levels)))
        mode = "preferred: rack"
    chosen = None
    most = 0
    for level in levels:
        ranked = _sorted_domains(view.levels[level].domains, cap)
        most = max([most] + [c for c, _, _ in ranked])
        idx = _best_fit_index([c for c, _, _ in ranked], len(pods))
        if idx is not None:
            chosen = (level, ranked[idx][2])
            break
    if chosen is None:
        return f"{what}, {mode}: the best domain holds {most} pods"
    slots = _descend(view, chosen[0], chosen[1], len(pods), cap)
    if not slots:
        return f"{what}: descent found no assignment"
    out: dict[str, list[GPURef]] = {}
    flat = [n for n, c in slots for _ in range(c)]
    for pod, node in zip(pods, flat):
        out.setdefault(pod.unit.name, []).extend(
            GPURef(node=node, gpu=i) for i in state.take(node, pod.gpus))
    return out


def _place_job(job: TrainingJob, state: FreeState, views: list[ClusterView]) -> JobOutcome:
    units = job.units()
    reasons: list[str] = []
    for view in views:
        trial = state.copy(list(view.nodes))
        placed: dict[str, list[GPURef]] = {}
        for ps in podsets(units):
            got = _assign_podset(job, ps, view, trial)
            if isinstance(got, str):
                reasons.append(f"{SOLVER}: {view.cluster.name}: {got}")
                break
            placed.update(got)
        else:
            state.commit(trial)
            return JobOutcome(units=placed)
    return JobOutcome(reasons=reasons)
