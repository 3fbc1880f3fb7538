"""Volcano baseline: the allocate action with the network-topology-aware and binpack plugins.

Re-implemented from volcano-sh/volcano at commit ed72c7c (files under ``pkg/scheduler/``):

The cluster-top HyperNode
    ``framework/session.go`` L286-315 ``addClusterTopHyperNode``: every session adds a
    virtual HyperNode holding every node, one tier above the highest real tier, as the
    parent of the real roots; it is in ``HyperNodesTiers`` (L246-247, L472-484), so it is
    the ``maxTier`` of the network-topology-aware plugin's scores (below) and a tier of the
    gradient.

Which path a job takes
    ``actions/allocate/allocate.go`` L305-341: a job with a hard topology or a sub-job
    (subgroup) policy goes through ``allocateForJob`` and walks HyperNode tiers; every
    other job is placed task by task over all nodes (``allocateResourcesForTasks`` on
    ``ClusterTopHyperNode``). **Soft mode is hard mode up to the cluster top**:
    ``session.go`` L1076-1088 (``adjustNetworkTopologySpec``) and
    ``convertSoftToHardTopology`` (L1091-1128) rewrite a soft job's ``networkTopology`` to
    hard with ``highestTierAllowed`` = the cluster-top tier, and a soft sub-job's to hard
    with the job's tier (``api/sub_job_info.go`` L110-120), so a soft job is dry-run on the
    lowest tier where it fits, climbing to the whole cluster, and never filtered out.
    Here a job's hop limit (the DataParallel ``maxHopCount`` for a multi-unit job, the
    unit's own otherwise) becomes ``networkTopology`` in the mode
    :attr:`VolcanoConfig.topology_mode` says (``hard`` by default: the user who wrote a hop
    limit wants it enforced); a job without one has no ``networkTopology``. Hop 1 is tier
    1 (the leaf HyperNode), hop 3 tier 2, and so on; hop 0 cannot be said with a tier
    (tier 1 is the lowest), so it becomes tier 1 and the checker reports any breach.

Hard mode (``allocateForJob``, allocate.go L370-463)
    ``hyperNodeGradientFn`` (``plugins/network-topology-aware/network_topology_aware.go``
    L602-671) lists the HyperNodes of tier <= ``highestTierAllowed`` whose idle GPUs cover
    the job's minimum resources, grouped by tier, lowest tier first. For the first tier
    with any success, every candidate is dry-run (tasks placed, then discarded, L386-431)
    and the job goes to the best-scoring one (``selectBestHyperNodeForJob`` L543-558: the
    highest score, ties broken by Go's random map order). A unit larger than one node with
    its own ``maxHopCount`` is a sub-job (a partition) with its own hard tier, placed
    inside the job's HyperNode the same way (``allocateForSubJob`` L465-539): its
    gradient (``HyperNodeGradientForSubJobFn``, network_topology_aware.go L310-325) walks
    the job's HyperNode's subtree from the lowest tier up to the sub-job's tier.

HyperNode score (``HyperNodeOrderFn``, network_topology_aware.go L359-438)
    ``(used + request) / allocatable`` summed over the resources that have a HyperNode
    binpack weight (0 if the request does not fit), then, among the best, the share of the
    job's tasks already in it; times ``10 x weight`` (L808-813). Ties:
    ``util/scheduler_helper.go`` L212-228 ``SelectBestHyperNodeAndScore`` picks at random.

Task by task (``allocateResourcesForTasks``, allocate.go L719-867)
    For each task: the nodes that pass the predicates (GPU type, enough idle GPUs), then
    the best node by score (``prioritizeNodes`` L882-951, ``util.PrioritizeNodes``
    scheduler_helper.go L78-142, ``SelectBestNodeAndScore`` L194-210: highest score,
    **random among equal scores**). A job whose tasks do not all fit is discarded whole
    (L854-866: the gang is all-or-nothing within one scheduling cycle). Node score:

    * binpack (``plugins/binpack/binpack.go`` L186-261): ``10 x weight x sum_r w_r (used_r
      + req_r) / allocatable_r / sum_r w_r`` over the resources the task requests *that
      have a weight*. CPU and memory have weight 1 by default; ``nvidia.com/gpu`` counts
      only when listed in ``binpack.resources`` (L44-48, L221-224).
    * network-topology-aware, task of a job without topology (L479-516, on by default:
      ``hypernode.binpack.normal-pod.enable`` true, fading 0.8): the HyperNode binpack
      score of the node's HyperNode at each tier, the cluster top included, weighted
      ``fading^(tier-1)``, averaged.
    * network-topology-aware, task of a job with topology (hard or soft, L559-589): 0 for
      the first task; then ``(maxTier - tier(LCA)) / (maxTier - minTier)`` (L760-798) of
      the node's leaf HyperNode and the HyperNode the job's placed tasks span (1 for the
      same leaf), plus the share of the job's tasks already there when the best scores
      tie. ``maxTier`` is the cluster top's tier, so an LCA at the highest real tier still
      scores above 0 and only crossing to the cluster top scores 0.

Configuration (:class:`VolcanoConfig`)
    ``volcano-style`` assumes what a GPU cluster operator following Volcano's docs would
    set: ``binpack.resources: nvidia.com/gpu`` and ``hypernode.binpack.resources:
    nvidia.com/gpu`` (weight 1 each), with the network-topology-aware plugin enabled.
    ``volcano-default`` is the shipped ``installer/helm/chart/volcano/config/
    volcano-scheduler.conf`` (binpack with its default weights) plus the
    network-topology-aware plugin with default arguments: GPUs carry no weight anywhere,
    our pods request only GPUs, so every feasible node and HyperNode scores the same and
    the choice is uniformly random.

Blind spots kept on purpose: the scheduler counts GPUs per node; which GPUs a pod gets is
the device plugin's choice (``gpu_choice``); tiers are ranks, so bandwidth is ignored.
Multi-cluster instances: each cluster runs its own Volcano; the job goes to the first
cluster (instance order) that can run it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

import numpy as np

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
MAX_NODE_SCORE = 10.0  # k8s.io/kube-scheduler/framework MaxNodeScore
FULL_SCORE = 1.0


@dataclass(frozen=True)
class VolcanoConfig:
    """The scheduler configuration a Volcano baseline assumes.

    gpu_binpack
        ``nvidia.com/gpu`` listed in ``binpack.resources`` and
        ``hypernode.binpack.resources`` (weight 1). False: the shipped defaults (CPU and
        memory only), which make every node score the same for GPU-only pods.
    topology_mode
        The ``networkTopology.mode`` a job's hop limit becomes: ``hard`` or ``soft`` (hard
        up to the cluster top: the lowest tier that fits is preferred, none is refused).
    normal_pod_fading
        ``hypernode.binpack.normal-pod.fading`` (default 0.8).
    """

    gpu_binpack: bool = True
    topology_mode: Literal["hard", "soft"] = "hard"
    normal_pod_fading: float = 0.8

    def __post_init__(self) -> None:
        if self.topology_mode not in ("hard", "soft"):
            raise ValueError("topology_mode must be 'hard' or 'soft'")
        if self.normal_pod_fading < 0:
            raise ValueError("normal_pod_fading must be >= 0")


GPU_BINPACK = VolcanoConfig()
DEFAULT_CONFIG = VolcanoConfig(gpu_binpack=False)


def volcano_style(instance: Instance, seed: int = 0) -> PlacementPlan:
    """Volcano with GPU binpack configured (the bench's assumption), one run for ``seed``."""
    return run_baseline(instance, SOLVER, _placer(GPU_BINPACK), seed)


def volcano_default(instance: Instance, seed: int = 0) -> PlacementPlan:
    """Volcano with the shipped default weights (GPUs unweighted), one run for ``seed``."""
    return run_baseline(instance, "volcano-default", _placer(DEFAULT_CONFIG), seed)


def _placer(config: VolcanoConfig):
    def place(job: TrainingJob, state: FreeState, views: list[ClusterView],
              rng: random.Random) -> JobOutcome:
        return place_job(job, state, views, rng, config)
    return place


def job_hop_limit(job: TrainingJob, units: list[GangUnit]) -> int | None:
    """The hop limit a user would put in the job's ``networkTopology``."""
    if len(units) == 1:
        return units[0].max_hop_count
    return job.between_replicas.max_hop_count


def cluster_top(view: ClusterView) -> int:
    """The level index of the cluster-top HyperNode (every node of the cluster)."""
    return len(view.levels) - 1


def tiers(view: ClusterView) -> list[int]:
    """The level indices of the gradient's tiers, lowest first: the real HyperNode tiers,
    then the cluster top (``addClusterTopHyperNode``) unless the highest real tier is a
    single HyperNode already holding every node (the same node set, so the same fits)."""
    out = list(view.hypernode_levels)
    if cluster_top(view) not in out:
        out.append(cluster_top(view))
    return out


def tier_level(view: ClusterView, hops: int) -> int | None:
    """The level index of ``highestTierAllowed`` for a hop limit (tier 1 at least)."""
    if not view.hypernode_levels:
        return None
    allowed = [i for i in view.hypernode_levels if view.levels[i].radius <= hops]
    return allowed[-1] if allowed else view.hypernode_levels[0]


# ---- scores ----------------------------------------------------------------------------

class _Scorer:
    """Node and HyperNode scores of the configured plugins on the current state (vectorised).

    Scores are computed for a list of candidate nodes at once, in the node order given;
    equal inputs give bit-equal floats, so ties are exact, as they are in Go.
    """

    def __init__(self, view: ClusterView, state: FreeState, config: VolcanoConfig):
        self.view = view
        self.state = state
        self.config = config

    def hypernode_binpack(self, level: int, dom: int, request: int) -> float:
        """``getSubJobHyperNodeBinPackingScore`` for one HyperNode (0 when GPUs are unweighted)."""
        if not self.config.gpu_binpack:
            return 0.0  # no resource with a weight: totalWeight 0 -> ZeroScore
        nodes = self.view.levels[level].domains[dom][1]
        alloc = sum(self.state.allocatable[n] for n in nodes)
        used = sum(self.state.used[n] for n in nodes)
        if alloc <= 0 or used + request > alloc:
            return 0.0
        return (used + request) / alloc

    def node_scores(self, cands: list[str], request: int, placed: list[str] | None,
                    total_tasks: int) -> np.ndarray:
        """binpack + network-topology-aware score per candidate (``placed`` None: no topology)."""
        view = self.view
        idx = np.fromiter((view.index[n] for n in cands), dtype=np.int64, count=len(cands))
        score = np.zeros(len(cands))
        if self.config.gpu_binpack:
            used = np.fromiter((self.state.used[n] for n in cands), dtype=float, count=len(cands))
            alloc = view.allocatable[idx]
            fits = (alloc > 0) & (used + request <= alloc)
            score += np.where(fits, MAX_NODE_SCORE * (used + request) / np.maximum(alloc, 1), 0.0)
        if placed is None:
            score += self._normal_pod(idx, request)
        elif placed:
            score += self._topology_pod(idx, placed)
            score = self._task_share(score, idx, placed, total_tasks)
        return score

    def _normal_pod(self, idx: np.ndarray, request: int) -> np.ndarray:
        """``batchNodeOrderFnForNormalPods``: tier-faded HyperNode binpack (L479-516)."""
        levels = self.view.hypernode_levels
        if not levels or not self.config.gpu_binpack:
            return np.zeros(len(idx))  # every HyperNode scores ZeroScore: no weighted resource
        view = self.view
        used_all = np.fromiter((self.state.used[n] for n in view.order), dtype=float,
                               count=len(view.order))
        total = np.zeros(len(idx))
        weight_sum = 0.0
        for tier, level in enumerate(levels, start=1):
            w = self.config.normal_pod_fading ** (tier - 1)
            weight_sum += w
            member = view.member_idx[level]
            ndom = len(view.levels[level].domains)
            dom_used = np.bincount(member, weights=used_all, minlength=ndom)
            dom_alloc = np.bincount(member, weights=view.allocatable, minlength=ndom)
            fits = (dom_alloc > 0) & (dom_used + request <= dom_alloc)
            dom_score = np.where(fits, (dom_used + request) / np.maximum(dom_alloc, 1), 0.0)
            total += w * dom_score[member[idx]]
        # the cluster-top HyperNode, one tier above the real ones: the same for every node
        w = self.config.normal_pod_fading ** len(levels)
        weight_sum += w
        top_used, top_alloc = float(used_all.sum()), float(view.allocatable.sum())
        if top_alloc > 0 and top_used + request <= top_alloc:
            total += w * (top_used + request) / top_alloc
        return MAX_NODE_SCORE * total / weight_sum if weight_sum > 0 else np.zeros(len(idx))

    def _lca(self, idx: np.ndarray, placed: list[str]) -> np.ndarray:
        return lca_levels(self.view, idx, placed)

    def _topology_pod(self, idx: np.ndarray, placed: list[str]) -> np.ndarray:
        return topology_pod_scores(self.view, self._lca(idx, placed))

    def _task_share(self, score: np.ndarray, idx: np.ndarray, placed: list[str],
                    total: int) -> np.ndarray:
        """L578-586: among the best-scoring nodes, add the job's task share of their leaf."""
        levels = self.view.hypernode_levels
        if not levels or len(score) == 0:
            return score
        best = score == score.max()
        if best.sum() < 2:
            return score
        member = self.view.member_idx[levels[0]]
        counts = np.bincount(member[[self.view.index[p] for p in placed]],
                             minlength=len(self.view.levels[levels[0]].domains))
        share = counts[member[idx]] / total
        return np.where(best, score + MAX_NODE_SCORE * share, score)


def topology_pod_scores(view: ClusterView, lca: np.ndarray) -> np.ndarray:
    """``batchNodeOrderFnForNetworkAwarePods`` (L559-577) with ``networkTopologyAwareScore``
    (L760-798): per candidate, given the level ``lca`` of its lowest common HyperNode with
    the job's placed tasks, full score in the same leaf HyperNode, else ``(maxTier - tier)
    / (maxTier - minTier)`` with ``maxTier`` the cluster top's tier (one above the highest
    real tier), times ``MaxNodeScore``."""
    levels = view.hypernode_levels
    score = np.zeros(len(lca))
    if not levels:
        return score
    score[lca <= levels[0]] = FULL_SCORE
    max_tier = len(levels) + 1  # the cluster top's tier (minTier is 1)
    for tier, level in enumerate(levels[1:], start=2):
        score[lca == level] = (max_tier - tier) / (max_tier - 1)
    return MAX_NODE_SCORE * score  # an LCA at the cluster top (or none) scores 0


def network_topology_scores(view: ClusterView, candidates: list[str], placed: list[str]
                            ) -> list[float]:
    """The network-topology-aware score of each candidate node for the next task of a job
    with topology whose tasks are on ``placed`` (the part of the node score that is not
    binpack)."""
    idx = np.fromiter((view.index[n] for n in candidates), dtype=np.int64,
                      count=len(candidates))
    return [float(x) for x in topology_pod_scores(view, lca_levels(view, idx, placed))]


def lca_levels(view: ClusterView, idx: np.ndarray, placed: list[str]) -> np.ndarray:
    """Per candidate (node index), the lowest level whose domain holds it and every placed
    node (``len(view.levels)``: none)."""
    top = len(view.levels)
    out = np.zeros(len(idx), dtype=np.int64)
    for p in set(placed):
        pi = view.index[p]
        lca = np.full(len(idx), top, dtype=np.int64)
        for level in range(top - 1, -1, -1):
            member = view.member_idx[level]
            lca = np.where(member[idx] == member[pi], level, lca)
        out = np.maximum(out, lca)
    return out


def _place_tasks(pods: list[Pod], nodes: list[str], view: ClusterView, state: FreeState,
                 rng: random.Random, config: VolcanoConfig, with_topology: bool
                 ) -> dict[str, list[GPURef]] | None:
    """``allocateResourcesForTasks``: pod by pod, best node each; None if one does not fit.

    ``SelectBestNodeAndScore``: the highest score, one of the equal ones at random (nodes
    in cluster order, so a seed reproduces the run).
    """
    scorer = _Scorer(view, state, config)
    placed_nodes: list[str] = []
    out: dict[str, list[GPURef]] = {}
    for pod in pods:
        candidates = [n for n in nodes
                      if state.count(n) >= pod.gpus and view.suits(pod.unit, view.nodes[n])]
        if not candidates:  # the gang does not fit: discard what this job took (L865)
            for gpus in out.values():
                for g in gpus:
                    state.release(g.node, [g.gpu])
            return None
        if len(candidates) == 1:  # allocate.go L934-935: a single node is used as is
            best = candidates[0]
        else:
            scores = scorer.node_scores(candidates, pod.gpus,
                                        placed_nodes if with_topology else None, len(pods))
            top = np.flatnonzero(scores == scores.max())
            best = candidates[int(top[rng.randrange(len(top))])]
        out.setdefault(pod.unit.name, []).extend(
            GPURef(node=best, gpu=g) for g in state.take(best, pod.gpus))
        placed_nodes.append(best)
    return out


def _pods_of(units: list[GangUnit], view: ClusterView) -> list[Pod] | None:
    pods = [p for u in units for p in pods_for(u, view.node_size(u))]
    return pods if len(pods) >= len(units) else None


def _gradient(view: ClusterView, state: FreeState, top_level: int, demand: int,
              scope: set[str] | None) -> list[tuple[int, list[int]]]:
    """``hyperNodeGradientFn``: (level, eligible HyperNodes) per tier, lowest tier first.

    Eligible: tier <= ``highestTierAllowed`` and idle GPUs (all types, as the resource
    cache sums them) >= the (sub-)job's minimum (L649-671); inside ``scope`` for a sub-job.
    """
    out = []
    for level in tiers(view):
        if level > top_level:
            break
        tier = []
        for i, (_, nodes) in enumerate(view.levels[level].domains):
            if scope is not None and not scope.issuperset(nodes):
                continue
            if sum(state.count(n) for n in nodes) >= demand:
                tier.append(i)
        if tier:
            out.append((level, tier))
    return out


def _subjobs(units: list[GangUnit], view: ClusterView, config: VolcanoConfig
             ) -> list[tuple[list[Pod], int | None]]:
    """The default sub-job (units without a tier of their own) and one per partitioned unit
    (soft: hard up to the job's tier, ``convertSoftToHardTopology``; the job's HyperNode
    caps it in :func:`_dry_run`)."""
    default: list[Pod] = []
    parts: list[tuple[list[Pod], int | None]] = []
    for u in units:
        pods = pods_for(u, view.node_size(u))
        hops = view.unit_hops(u)
        if len(pods) > 1 and hops is not None:
            parts.append((pods, tier_level(view, hops) if config.topology_mode == "hard"
                          else cluster_top(view)))
        else:
            default += pods
    return ([(default, None)] if default else []) + parts


def _dry_run(units: list[GangUnit], level: int, dom: int, view: ClusterView, trial: FreeState,
             rng: random.Random, config: VolcanoConfig
             ) -> tuple[dict[str, list[GPURef]], float] | None:
    """The job's sub-jobs inside one HyperNode (``allocateForJob`` L395-413); their score sum."""
    nodes = view.levels[level].domains[dom][1]
    placed: dict[str, list[GPURef]] = {}
    total = 0.0
    for pods, sub_level in _subjobs(units, view, config):
        request = sum(p.gpus for p in pods)
        if sub_level is None:
            grads = [[(level, dom)]]  # no tier of its own: the job's HyperNode (L307, L324)
        else:  # the job's HyperNode's subtree, lowest tier first, up to the sub-job's tier
            grads = [[(lv, d) for d in doms] for lv, doms in
                     _gradient(view, trial, min(sub_level, level), request, set(nodes))]
        got = None
        for candidates in grads:  # the next tier only when none of this one fits (L505-508)
            got = _best_subjob_hypernode(pods, candidates, view, trial, rng, config)
            if got is not None:
                break
        if got is None:
            return None
        sub_placed, score = got
        for unit, gpus in sub_placed.items():
            placed.setdefault(unit, []).extend(gpus)
        total += score
    return placed, total


def _best_subjob_hypernode(pods: list[Pod], candidates: list[tuple[int, int]],
                           view: ClusterView, trial: FreeState, rng: random.Random,
                           config: VolcanoConfig
                           ) -> tuple[dict[str, list[GPURef]], float] | None:
    """``allocateForSubJob`` for one tier: dry-run each HyperNode, best score, random ties."""
    scorer = _Scorer(view, trial, config)
    request = sum(p.gpus for p in pods)
    results = []
    for level, dom in candidates:
        nodes = view.levels[level].domains[dom][1]
        score = MAX_NODE_SCORE * scorer.hypernode_binpack(level, dom, request)
        sub = trial.copy(nodes)
        got = _place_tasks(pods, nodes, view, sub, rng, config, with_topology=True)
        if got is not None:
            results.append((score, sub, got))
    if not results:
        return None
    top = max(r[0] for r in results)
    score, sub, got = rng.choice([r for r in results if r[0] == top])
    trial.commit(sub)
    return got, score


def _hard_job(units: list[GangUnit], view: ClusterView, state: FreeState, rng: random.Random,
              config: VolcanoConfig, top_level: int, job_topology: bool = True
              ) -> dict[str, list[GPURef]] | str:
    """``allocateForJob``: tier by tier, dry-run every eligible HyperNode, keep the best
    (``job_topology`` False: a sub-job policy only, the job's gradient is the cluster top
    alone, network_topology_aware.go L307)."""
    pods = _pods_of(units, view)
    if pods is None:
        return "no node has a GPU type the job accepts"
    demand = sum(p.gpus for p in pods)
    gradient = _gradient(view, state, top_level, demand, None)
    if not job_topology:
        gradient = [(lv, doms) for lv, doms in gradient if lv == cluster_top(view)]
    tier_no = tiers(view).index(top_level) + 1
    if not gradient:
        return f"no HyperNode up to tier {tier_no} has {demand} idle GPUs"
    tried = 0
    for level, doms in gradient:
        results = []
        for dom in doms:
            tried += 1
            trial = state.copy(view.levels[level].domains[dom][1])
            got = _dry_run(units, level, dom, view, trial, rng, config)
            if got is not None:
                results.append((got[1], trial, got[0]))
        if results:
            top = max(r[0] for r in results)
            _, trial, placed = rng.choice([r for r in results if r[0] == top])
            state.commit(trial)
            return placed
    return (f"hard topology up to tier {tier_no}: the gang fit none of the {tried} HyperNodes "
            f"with {demand} idle GPUs")


def place_job(job: TrainingJob, state: FreeState, views: list[ClusterView],
              rng: random.Random, config: VolcanoConfig = GPU_BINPACK) -> JobOutcome:
    """One job through Volcano's allocate action; on success its GPUs are taken in ``state``."""
    units = job.units()
    hops = job_hop_limit(job, units)
    reasons: list[str] = []
    for view in views:
        if not eligible_nodes(view, units):
            reasons.append(f"{view.cluster.name}: no node has a GPU type the job accepts")
            continue
        top = tier_level(view, hops) if hops is not None else None
        if top is not None and config.topology_mode == "soft":
            top = cluster_top(view)  # session.go L1076-1088: soft is hard up to the top
        if top is None and view.clique_level is not None and view.hypernode_levels and \
                any(view.unit_hops(u) == 0 for u in units):
            # a unit bound to the NVL72 tier (its subGroup's networkTopology), the job free
            top = view.hypernode_levels[-1]
        job_topology = top is not None
        if top is None and any(view.unit_hops(u) is not None
                               and len(pods_for(u, view.node_size(u))) > 1 for u in units):
            # a sub-job policy without a job topology: allocateForJob from the cluster top
            # (allocate.go L308, gradient [[ClusterTopHyperNode]], L307 of the plugin)
            top = cluster_top(view)
        if top is not None:
            got = _hard_job(units, view, state, rng, config, top, job_topology)
        else:
            pods = _pods_of(units, view)
            placed = None if pods is None else _place_tasks(
                pods, view.order, view, state, rng, config, with_topology=hops is not None)
            got = placed if placed is not None else (
                "the gang's tasks do not all fit, one by one over all nodes")
        if isinstance(got, str):
            reasons.append(f"{view.cluster.name}: {got}")
            continue
        return JobOutcome(units=got)
    return JobOutcome(reasons=[f"volcano: {r}" for r in reasons])
