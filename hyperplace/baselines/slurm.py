"""Slurm-tree-style baseline: topology/tree switch selection with best fit, GPUs as gres.

Rules re-implemented (shared/design/peers.md, Slurm ``topology/tree`` + ``select/cons_tres``):

* Jobs one at a time in queue order (priority, then submit order); no backfill.
* The job's tasks are its pods (see ``common``), GPUs counted per node (``gres/gpu``).
* Pick the lowest-level switch whose subtree can hold the whole job (checked by a first-fit
  of the tasks onto per-node free GPU counts); among switches of that level the tightest
  one (fewest free GPUs). ``--switches``: a job hop limit caps the level (the DataParallel
  ``maxHopCount``, or a multi-node unit's own; the smallest applies to the whole job, as
  one allocation carries one ``--switches`` value: hop 1 -> one leaf switch).
* Inside that switch, best fit over its leaf switches: if some leaf holds all remaining
  tasks, the tightest such leaf; otherwise the leaf with the most free GPUs takes what it
  can, and repeat. Within a leaf, nodes in index order, tasks first-fit.
* Multi-cluster instances: the first cluster that can hold the job (federated submit).

Blind spots kept on purpose: ``LinkSpeed`` is not used, and gres hands out the
lowest-index free GPUs (no NVLink cliques).
"""

from __future__ import annotations

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

SOLVER = "slurm-tree-style"


def slurm_tree_style(instance: Instance) -> PlacementPlan:
    """Slurm's tree topology selection, one job at a time, as a PlacementPlan."""
    return run_baseline(instance, SOLVER, _place_job)


def job_switch_limit(job: TrainingJob, units: list[GangUnit], pods: list[Pod]) -> int | None:
    """The hop limit that becomes the whole allocation's ``--switches`` constraint."""
    limits = []
    if len(units) > 1 and job.between_replicas.max_hop_count is not None:
        limits.append(job.between_replicas.max_hop_count)
    multi = {p.unit.name for p in pods if p.index > 0}
    limits += [u.max_hop_count for u in units if u.name in multi and u.max_hop_count is not None]
    return min(limits) if limits else None


def _first_fit(pods: list[Pod], nodes: list[str], view: ClusterView, free: dict[str, int]
               ) -> list[tuple[Pod, str]]:
    """Tasks in order onto nodes in index order; returns the tasks that found a node."""
    out = []
    for pod in pods:
        for n in nodes:
            if free[n] >= pod.gpus and view.suits(pod.unit, view.nodes[n]):
                free[n] -= pod.gpus
                out.append((pod, n))
                break
    return out


def _holds(pods: list[Pod], nodes: list[str], view: ClusterView, state: FreeState) -> bool:
    free = {n: state.count(n) for n in nodes}
    if sum(free.values()) < sum(p.gpus for p in pods):
        return False
    ordered = sorted(pods, key=lambda p: -p.gpus)
    return len(_first_fit(ordered, nodes, view, free)) == len(pods)


def _free_in(nodes: list[str], state: FreeState, eligible: set[str]) -> int:
    """Free GPUs of a type the job accepts: what gres would count for this request."""
    return sum(state.count(n) for n in nodes if n in eligible)


def _place_job(job: TrainingJob, state: FreeState, views: list[ClusterView]) -> JobOutcome:
    units = job.units()
    reasons = []
    for view in views:
        pods = [p for u in units for p in pods_for(u, view.node_size(u))]
        if len(pods) < len(units):
            reasons.append(f"{SOLVER}: {view.cluster.name}: no node with an accepted GPU type")
            continue
        hops = job_switch_limit(job, units, pods)
        top = view.level_for_hops(hops)
        start = view.leaf_level() if top > 0 else 0
        for level in range(start, top + 1):
            fitting = [nodes for _, nodes in view.levels[level].domains
                       if _holds(pods, nodes, view, state)]
            if not fitting:
                continue
            eligible = eligible_nodes(view, units)
            switch = min(fitting, key=lambda nodes: _free_in(nodes, state, eligible))
            placed = _allocate(pods, switch, view, state, level, eligible)
            if placed is not None:
                return JobOutcome(units=placed)
        reasons.append(f"{SOLVER}: {view.cluster.name}: no switch at or below level {top} "
                       f"(hop limit {hops if hops is not None else 'none'}) can hold "
                       f"{len(pods)} tasks / {sum(p.gpus for p in pods)} GPUs")
    return JobOutcome(reasons=reasons)


def _allocate(pods: list[Pod], switch_nodes: list[str], view: ClusterView, state: FreeState,
              level: int, eligible: set[str]) -> dict[str, list[GPURef]] | None:
    """Best fit over the switch's leaves, tightest first; first fit on nodes in a leaf."""
    inside = set(switch_nodes)
    leaf_level = min(level, view.leaf_level())
    leaves = [nodes for _, nodes in view.levels[leaf_level].domains if nodes[0] in inside]
    remaining = list(pods)
    trial = state.copy(switch_nodes)
    chosen: list[tuple[Pod, str]] = []
    while remaining:
        whole = [nodes for nodes in leaves if _holds(remaining, nodes, view, trial)]
        if whole:
            leaf = min(whole, key=lambda nodes: _free_in(nodes, trial, eligible))
        else:
            usable = [nodes for nodes in leaves if _free_in(nodes, trial, eligible) > 0]
            if not usable:
                return None
            leaf = max(usable, key=lambda nodes: _free_in(nodes, trial, eligible))
        free = {n: trial.count(n) for n in leaf}
        got = _first_fit(sorted(remaining, key=lambda p: -p.gpus), leaf, view, free)
        for pod, n in got:
            chosen.append((pod, n))
            trial.take(n, pod.gpus)
        placed_ids = {id(p) for p, _ in got}
        remaining = [p for p in remaining if id(p) not in placed_ids]
        leaves = [nodes for nodes in leaves if nodes is not leaf]
    order = {id(p): i for i, p in enumerate(pods)}
    out: dict[str, list[GPURef]] = {}
    for pod, n in sorted(chosen, key=lambda c: order[id(c[0])]):
        out[pod.unit.name] = out.get(pod.unit.name, []) + [GPURef(node=n, gpu=i) for i in state.take(n, pod.gpus)]
    return out
