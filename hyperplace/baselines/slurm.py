"""Slurm baseline: ``topology/tree`` node selection, GPUs as gres with ``Links=``.

Re-implemented from SchedMD/slurm at commit 284c3b9,
``src/plugins/topology/tree/eval_nodes_tree.c`` (``_eval_nodes_topo`` L773-1425):

* Jobs one at a time in queue order (priority, then submit order); no backfill here (the
  over-time simulation adds it). The job's tasks are its pods (see ``common``); a node can
  take a task when it has a GPU type the job accepts and enough free GPUs (the job's
  node map).
* The top switch is the highest-level switch with enough usable nodes (L920-972): with one
  tree per cluster that is its root, so every usable node of the cluster is a candidate.
* Leaf switches are then chosen one at a time (L1280-1348) by ``_topo_choose_best_switch``
  (L108-136) and ``_topo_compare_switches`` (L60-106): a leaf closer (switch distance,
  ``_topo_add_dist`` L43-53) to the leaves already chosen wins if it can hold the rest of
  the job; at equal distance, of two leaves that both fit the one with **fewer usable
  nodes** wins (the tightest by node count, not by free GPUs); a fitting leaf beats one
  that does not; when neither fits their parents are compared the same way, then the
  leaf with more usable nodes wins, then the lower level; ties keep the first leaf.
  "Fits" is Slurm's node and CPU count test; with GPU tasks of different sizes we test
  that the switch's usable nodes can hold the remaining tasks. The "fits" that
  ``_topo_choose_best_switch`` uses for a closer leaf is the one of the level the
  comparison climbed to (``*i_fit_out = i_fit`` inside the loop, L66-73), not the leaf's.
* Nodes of the chosen leaf are taken in bitmap (index) order, not by free resources
  (L1302-1306 says so), each node taking as many of the remaining tasks as its free GPUs
  allow (block distribution).
* ``--switches=1`` (a hop limit of 1: one leaf switch) makes a job whose allocation spans
  more leaves wait (L705-730) until it has waited ``max_switch_wait`` (default 300 s,
  ``src/slurmctld/job_mgr.c`` ``_max_switch_wait`` L869-872; the wait starts at its first
  evaluation, L184-189): then it runs across leaves (``best_switch = true``, L721-723).
  The over-time simulation tells the rule how long each job has waited
  (``FreeState.waited_s``); a single round has waited 0 s, so the job stays pending.
  Slurm's tree plugin has no constraint
  for a spine (hop 3), so such a job may be spread over spines and the checker says so.
  A hop limit of 0 is ``-N 1``: all tasks on one node.
* Which GPUs of a node a task gets: ``gpu_choice.slurm_gres_choice`` (cons_tres with the
  ``Links=`` matrix).
* Multi-cluster instances: the first cluster that can hold the job (federated submit).

Blind spots kept on purpose: ``LinkSpeed`` is not used (tiers are ranks).
"""

from __future__ import annotations

import random

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

SOLVER = "slurm-tree-style"


def slurm_tree_style(instance: Instance, seed: int = 0) -> PlacementPlan:
    """Slurm's tree topology selection, one job at a time (deterministic)."""
    return run_baseline(instance, SOLVER, place_job, seed, chooser="slurm-gres")


def job_switch_limit(job: TrainingJob, units: list[GangUnit], pods: list[Pod]) -> int | None:
    """The hop limit that becomes the whole allocation's ``--switches`` / ``-N`` constraint."""
    limits = []
    if len(units) > 1 and job.between_replicas.max_hop_count is not None:
        limits.append(job.between_replicas.max_hop_count)
    multi = {p.unit.name for p in pods if p.index > 0}
    limits += [u.max_hop_count for u in units if u.name in multi and u.max_hop_count is not None]
    if len(units) == 1 and units[0].max_hop_count is not None:
        limits.append(units[0].max_hop_count)
    return min(limits) if limits else None


def _pack(pods: list[Pod], nodes: list[str], free: dict[str, int], view: ClusterView
          ) -> list[tuple[Pod, str]]:
    """Block distribution: nodes in index order, each takes the remaining tasks that fit."""
    out = []
    remaining = list(pods)
    for n in nodes:
        rest = []
        for pod in remaining:
            if free[n] >= pod.gpus and view.suits(pod.unit, view.nodes[n]):
                free[n] -= pod.gpus
                out.append((pod, n))
            else:
                rest.append(pod)
        remaining = rest
        if not remaining:
            break
    return out


def _holds(pods: list[Pod], nodes: list[str], free: dict[str, int], view: ClusterView) -> bool:
    return len(_pack(pods, nodes, dict(free), view)) == len(pods)


class _Tree:
    """Leaf switches of one cluster restricted to the job's usable nodes."""

    def __init__(self, view: ClusterView, usable: list[str]):
        self.view = view
        self.leaf = view.leaf_level()
        inside = set(usable)
        self.leaves = [[n for n in nodes if n in inside] for _, nodes in view.levels[self.leaf].domains]
        self.first = [nodes[0] for _, nodes in view.levels[self.leaf].domains]

    def distance(self, i: int, j: int) -> int:
        """Switch distance between two leaves: how far up their common switch sits."""
        if i == j:
            return 0
        lca = self.view.lca_level(self.first[i], self.first[j])
        return 2 * ((lca if lca is not None else len(self.view.levels)) - self.leaf)

    def parent_nodes(self, i: int, up: int) -> list[str]:
        """Usable nodes under leaf ``i``'s ancestor ``up`` levels higher."""
        level = min(self.leaf + up, len(self.view.levels) - 1)
        dom = self.view.member[level][self.first[i]]
        inside = set(self.view.levels[level].domains[dom][1])
        return [n for k, nodes in enumerate(self.leaves) for n in nodes
                if n in inside]


def _compare(tree: _Tree, i: int, j: int, pods: list[Pod], free: dict[str, int]
             ) -> tuple[int, bool]:
    """``_topo_compare_switches``: (1 if leaf i is the better fit, -1 if j, 0 if equal; i fits)."""
    up = 0
    ni, nj = tree.leaves[i], tree.leaves[j]
    while True:
        i_fit = _holds(pods, ni, free, tree.view)  # i's fit at the level reached (L66-73)
        j_fit = _holds(pods, nj, free, tree.view)
        if i_fit and j_fit:
            if len(ni) != len(nj):
                return (1 if len(ni) < len(nj) else -1), i_fit
            break
        if i_fit:
            return 1, i_fit
        if j_fit:
            return -1, i_fit
        top = len(tree.view.levels) - 1
        if tree.leaf + up >= top:
            break
        up += 1
        lv = tree.leaf + up
        if tree.view.member[lv][tree.first[i]] == tree.view.member[lv][tree.first[j]]:
            break  # same parent: stop climbing (L84-91)
        ni, nj = tree.parent_nodes(i, up), tree.parent_nodes(j, up)
    if len(ni) != len(nj):
        return (1 if len(ni) > len(nj) else -1), i_fit
    return 0, i_fit


def _choose_leaf(tree: _Tree, candidates: list[int], dist: dict[int, int], pods: list[Pod],
                 free: dict[str, int]) -> int | None:
    """``_topo_choose_best_switch`` over the leaves in index order."""
    best = None
    for i in candidates:
        if not tree.leaves[i]:
            continue
        if best is None:
            best = i
            continue
        tcs, i_fit = _compare(tree, i, best, pods, free)
        if (dist[i] < dist[best] and i_fit) or (dist[i] == dist[best] and tcs > 0):
            best = i
    return best


MAX_SWITCH_WAIT_S = 300.0  # job_mgr.c _max_switch_wait: default max_switch_wait


def _select(pods: list[Pod], view: ClusterView, usable: list[str], free: dict[str, int],
            hops: int | None, waited_s: float = 0.0) -> list[tuple[Pod, str]] | str:
    """Nodes for every task, or why the job waits."""
    if hops == 0:  # -N 1
        tree = _Tree(view, [n for n in usable if _holds(pods, [n], free, view)])
        leaf = _choose_leaf(tree, list(range(len(tree.leaves))),
                            dict.fromkeys(range(len(tree.leaves)), 0), pods, free)
        if leaf is None:
            return "-N 1: no node holds every task"
        return _pack(pods, tree.leaves[leaf][:1], dict(free), view)
    tree = _Tree(view, usable)
    dist = dict.fromkeys(range(len(tree.leaves)), 0)
    remaining = list(pods)
    chosen: list[tuple[Pod, str]] = []
    used_leaves: list[int] = []
    left = set(range(len(tree.leaves)))
    while remaining:
        leaf = _choose_leaf(tree, sorted(left), dist, remaining, free)
        if leaf is None:
            break
        left.discard(leaf)
        used_leaves.append(leaf)
        for k in dist:
            dist[k] += tree.distance(leaf, k)
        got = _pack(remaining, tree.leaves[leaf], free, view)
        placed = {id(p) for p, _ in got}
        chosen += got
        remaining = [p for p in remaining if id(p) not in placed]
    if remaining:
        return (f"{len(remaining)} of {len(pods)} tasks found no node with enough free GPUs "
                "of an accepted type")
    if (hops is not None and hops <= 1 and len(set(used_leaves)) > 1
            and waited_s < MAX_SWITCH_WAIT_S):
        return (f"--switches=1: the allocation needs {len(used_leaves)} leaf switches; the job "
                "waits for one switch")
    return chosen


def place_job(job: TrainingJob, state: FreeState, views: list[ClusterView],
              rng: random.Random | None = None) -> JobOutcome:
    """One job through the tree plugin; on success its GPUs are taken in ``state``."""
    units = job.units()
    reasons = []
    for view in views:
        pods = [p for u in units for p in pods_for(u, view.node_size(u))]
        if len(pods) < len(units):
            reasons.append(f"slurm: {view.cluster.name}: no node with an accepted GPU type")
            continue
        smallest = min(p.gpus for p in pods)
        usable = [n for n, node in view.nodes.items()
                  if state.count(n) >= smallest and any(view.suits(u, node) for u in units)]
        free = {n: state.count(n) for n in usable}
        hops = job_switch_limit(job, units, pods)
        got = _select(pods, view, usable, dict(free), hops,
                      state.waited_s.get(job.name, 0.0))
        if isinstance(got, str):
            reasons.append(f"slurm: {view.cluster.name}: {got}")
            continue
        order = {id(p): i for i, p in enumerate(pods)}
        out: dict[str, list[GPURef]] = {}
        for pod, n in sorted(got, key=lambda c: order[id(c[0])]):
            out.setdefault(pod.unit.name, []).extend(
                GPURef(node=n, gpu=g) for g in state.take(n, pod.gpus))
        return JobOutcome(units=out)
    return JobOutcome(reasons=reasons)
