"""Kueue TAS baseline: Topology Aware Scheduling's assignment of each PodSet to domains.

Re-implemented from kubernetes-sigs/kueue at commit ff69552,
``pkg/cache/scheduler/tas_flavor_snapshot.go`` (line numbers below are that file's) and
``pkg/features/kube_features.go``:

What a PodSet asks
    A job's PodSets are its units grouped by pod template (:func:`podsets`: resource
    groups whose pods are the same are one PodSet, as a user writes them). The request
    is what the user would write for the job's hop limits: ``required`` at the level of the
    limit that binds the whole PodSet (the DataParallel ``maxHopCount`` when the PodSet has
    several units, the unit's own when it is one multi-pod unit; 0 -> hostname, 1 -> rack,
    3 -> block); a unit of several pods with its own tighter limit inside a larger PodSet
    is a slice (``podset-slice-required-topology`` at the unit's level, slice size = the
    unit's pods). A PodSet with no limit at all has no topology request: on a TAS flavor
    it is *implied* (``TASPodSetRequests.Implied``), its level is the lowest one, hostname
    (``levelKeyWithImpliedFallback`` L1212-1220), and it counts as unconstrained
    (``isUnconstrained`` L1244-1246); so is a request with only a slice constraint.

Algorithm choice (``useLeastFreeCapacityAlgorithm`` L1463-1471)
    Unconstrained PodSets use LeastFreeCapacity when the ``TASProfileMixed`` feature gate
    is on (default on since v0.15, kube_features.go L653-656); all others use BestFit.
    ``TASBalancedPlacement`` is alpha and off (kube_features.go L692-694), so
    ``findLevelWithFitDomains`` is always used (L1025-1030).

Counting (``fillInCounts`` L1800-)
    A node holds ``floor(free GPUs / pod GPUs)`` pods of the PodSet (nodes of a type it
    accepts); a domain sums its nodes; at the slice level a domain holds
    ``pods // slice size`` slices and above it the sum of its children's slices.

Finding the level (``findLevelWithFitDomains`` L1336-1441)
    Domains of the requested level are sorted (``sortedDomains`` L1770-1796): BestFit by
    slice count descending, LeastFreeCapacity ascending; then pod count ascending, then
    the domain's level values. LeastFreeCapacity takes the first domain that fits, i.e.
    the *fullest* one (L1360-1373). BestFit: if the first (largest) fits, the fitting
    domain with the fewest slices, the first such in sort order (``findBestFitDomainBy``
    L1307-1331). If none fits: ``required`` fails (L1379-1391); otherwise BestFit climbs one
    level (L1392-1394); at the top level, or when unconstrained, it takes domains in sort
    order until the count is covered, the last one by best fit (L1422-1438).

Descending (L1031-1079, ``updateCountsToMinimumGeneric`` L1575-1654)
    Above the slice level the children of all chosen domains are sorted together and take
    the count greedily in slices (the last by best fit under BestFit); at and below it
    each chosen domain's pods go to its own children the same way, pod by pod.

A workload is admitted when all its PodSets fit, in order, each seeing the previous ones'
usage (``addAssumedUsage`` L734-737); quota is assumed not to bind. Multi-cluster
instances: one TAS flavor per cluster, tried in order (the first that fits wins).
Kueue only admits and writes node selectors; the kube-scheduler binds each pod to its
assigned host and NVIDIA's device plugin picks its GPUs (``gpu_choice``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

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

SOLVER = "kueue-tas-style"


def kueue_tas_style(instance: Instance, seed: int = 0) -> PlacementPlan:
    """Kueue TAS admission, one workload at a time (deterministic: ``seed`` is unused)."""
    return run_baseline(instance, SOLVER, place_job, seed)


def pod_template(unit: GangUnit, view: ClusterView) -> tuple:
    """What a unit's pods ask that a pod can say: GPUs, type selector and memory (its node
    selector and requests, :func:`hyperplace.baselines.common.suits`) and, for a unit of
    several pods, its own topology request (hop limit, slice). Not its role (a
    tensor-parallel rank and a pipeline stage of the same size run the same pod) nor its
    NVLink or InfiniBand floors, which no pod spec expresses."""
    multi = unit.gpus > view.node_size(unit)
    return (unit.gpus, unit.gpu_types, unit.min_memory_gb, unit.slice_pods,
            view.unit_hops(unit) if multi else None)


def podsets(units: list[GangUnit], view: ClusterView) -> list[list[GangUnit]]:
    """Kueue's PodSets: the job's units grouped by pod template, in manifest order.

    A training job's pods are written as one replicated template whatever role each rank
    plays (a PyTorchJob's ``Worker`` replicas, a JobSet's one ``replicatedJob``: Megatron
    assigns tensor and pipeline ranks at run time), so resource groups whose pods are the
    same are one PodSet, which TAS keeps in one domain and one flavor; groups that differ
    (another GPU type, size or memory floor) are PodSets of their own, each assigned its own
    domain (``podset-group-name`` cannot join them: it takes exactly two PodSets, one of a
    single pod, ``pkg/controller/jobframework/tas_validation.go`` L214-262), so such a job
    may break its between-replica hop limit (``sim.peers.TOLERATED``)."""
    groups: dict[tuple, list[GangUnit]] = {}
    for u in units:
        groups.setdefault(pod_template(u, view), []).append(u)
    return list(groups.values())


@dataclass(frozen=True)
class TopologyRequest:
    """A PodSet's topology request, in view level indices (0 = hostname)."""

    level: int                 # requested level (hostname for implied)
    required: bool
    unconstrained: bool        # implied, explicit unconstrained, or slice-only
    slice_level: int           # level the slices must fit in (hostname when no slices)
    slice_size: int            # pods per slice (1 when no slices)

    @property
    def least_free_capacity(self) -> bool:
        """TASProfileMixed (on by default): unconstrained -> LeastFreeCapacity."""
        return self.unconstrained


def topology_request(job: TrainingJob, ps: list[GangUnit], pods_per_unit: int,
                     view: ClusterView) -> TopologyRequest:
    """The request a user writes for this PodSet's hop limits (see the module docstring)."""
    if len(ps) > 1:
        podset_hops = job.between_replicas.max_hop_count
    else:
        podset_hops = view.unit_hops(ps[0]) if pods_per_unit > 1 else None
    unit_hops = view.unit_hops(ps[0]) if (len(ps) > 1 and pods_per_unit > 1) else None
    slice_level, slice_size = 0, 1
    if unit_hops is not None:
        lv = view.level_for_hops(unit_hops)
        if podset_hops is None or lv < view.level_for_hops(podset_hops):
            slice_level, slice_size = lv, pods_per_unit
    if podset_hops is not None:
        return TopologyRequest(view.level_for_hops(podset_hops), True, False,
                               slice_level, slice_size)
    if slice_size > 1:  # slice-only request: highest level, unconstrained (L1231-1232)
        return TopologyRequest(len(view.levels) - 1, False, True, slice_level, slice_size)
    return TopologyRequest(0, False, True, 0, 1)  # implied: hostname, unconstrained


class _Assign:
    """One PodSet's domain counts and the BestFit / LeastFreeCapacity steps over them.

    Counts live in one array per level (``pods[level][i]``, ``slices[level][i]``); a
    domain is ``(level, i)``.
    """

    def __init__(self, view: ClusterView, state: FreeState, eligible: set[str], pod_gpus: int,
                 req: TopologyRequest):
        self.view = view
        self.req = req
        free = np.fromiter((state.count(n) if n in eligible else 0 for n in view.order),
                           dtype=np.int64, count=len(view.order))
        per_node = free // pod_gpus
        self.pods: list[np.ndarray] = [
            np.bincount(view.member_idx[lv], weights=per_node,
                        minlength=len(view.levels[lv].domains)).astype(np.int64)
            for lv in range(len(view.levels))]
        self.slices: list[np.ndarray] = []
        for lv in range(len(view.levels)):
            if lv < req.slice_level:
                self.slices.append(self.pods[lv].copy())
            elif lv == req.slice_level:
                self.slices.append(self.pods[lv] // req.slice_size)
            else:
                below = self.slices[lv - 1]
                self.slices.append(np.array([int(below[kids].sum()) if kids else 0
                                             for kids in view.children[lv]], dtype=np.int64))
        ranks = getattr(view, "kueue_name_rank", None)  # computed once per view
        if ranks is None:
            ranks = []
            for lv in view.levels:
                order = sorted(range(len(lv.domains)), key=lambda i: lv.domains[i][0])
                rank = np.empty(len(order), dtype=np.int64)
                rank[order] = np.arange(len(order))
                ranks.append(rank)
            view.kueue_name_rank = ranks  # type: ignore[attr-defined]
        self.rank = ranks

    def children(self, dom: tuple[int, int]) -> list[tuple[int, int]]:
        level, i = dom
        if level == 0:
            return []
        return [(level - 1, j) for j in self.view.children[level][i]]

    def pod_count(self, dom: tuple[int, int]) -> int:
        return int(self.pods[dom[0]][dom[1]])

    def cap(self, dom: tuple[int, int], slices: bool) -> int:
        arr = self.slices if slices else self.pods
        return int(arr[dom[0]][dom[1]])

    def set_pods(self, dom: tuple[int, int], value: int) -> None:
        self.pods[dom[0]][dom[1]] = value

    def sort(self, doms: list[tuple[int, int]], slices: bool = True) -> list[tuple[int, int]]:
        """``sortedDomains`` L1770-1796: capacity (BestFit descending, LeastFreeCapacity
        ascending), then pods ascending, then the domain's level values (its name)."""
        if not doms:
            return []
        sign = 1 if self.req.least_free_capacity else -1
        lv = np.fromiter((d[0] for d in doms), dtype=np.int64, count=len(doms))
        ix = np.fromiter((d[1] for d in doms), dtype=np.int64, count=len(doms))
        arr = self.slices if slices else self.pods
        cap = np.empty(len(doms), dtype=np.int64)
        pods = np.empty(len(doms), dtype=np.int64)
        rank = np.empty(len(doms), dtype=np.int64)
        for level in np.unique(lv):
            m = lv == level
            cap[m] = arr[level][ix[m]]
            pods[m] = self.pods[level][ix[m]]
            rank[m] = self.rank[level][ix[m]]
        order = np.lexsort((rank, pods, sign * cap))
        return [doms[k] for k in order]

    def best_fit(self, doms: list[tuple[int, int]], needed: int, slices: bool) -> tuple[int, int]:
        """``findBestFitDomainBy`` L1307-1331: fewest that still fits, first on ties."""
        best, best_count = doms[0], None
        for d in doms:
            c = self.cap(d, slices)
            if c >= needed and (best_count is None or c < best_count):
                best, best_count = d, c
        return best

    def find_level(self, level: int, count: int) -> list[tuple[int, int]] | str:
        """``findLevelWithFitDomains`` L1336-1441."""
        req = self.req
        needed = count // req.slice_size
        caps = self.slices[level]
        if req.least_free_capacity:  # L1360-1373: the fullest domain that fits
            fitting = np.flatnonzero(caps >= needed)
            if len(fitting):
                order = np.lexsort((self.rank[level][fitting], self.pods[level][fitting],
                                    caps[fitting]))
                return [(level, int(fitting[order[0]]))]
            if req.required:
                return f"no domain holds {needed} slices (most: {int(caps.max())})"
        doms = self.sort([(level, i) for i in range(len(caps))])
        top = doms[0]
        if req.least_free_capacity:
            pass
        elif self.cap(top, True) >= needed:
            return [self.best_fit(doms, needed, True)]
        if self.cap(top, True) < needed or req.least_free_capacity:
            if req.required:
                return f"the largest domain holds {self.cap(top, True)} of {needed} slices"
            if level < len(self.view.levels) - 1 and not req.unconstrained:
                return self.find_level(level + 1, count)
            chosen, remaining = [], needed
            for idx, d in enumerate(doms):
                if remaining <= 0:
                    break
                if not req.least_free_capacity and self.cap(d, True) >= remaining:
                    d = self.best_fit(doms[idx:], remaining, True)
                chosen.append(d)
                remaining -= self.cap(d, True)
            if remaining > 0:
                return f"all domains together hold {needed - remaining} of {needed} slices"
            return chosen
        return [top]

    def to_minimum(self, doms: list[tuple[int, int]], count: int, slices: bool
                   ) -> list[tuple[int, int]]:
        """``updateCountsToMinimumGeneric`` without leaders: assign ``count``, last by best fit."""
        size = self.req.slice_size if slices else 1
        remaining = count // size if slices else count
        out = []
        for i, d in enumerate(doms):
            if not self.req.least_free_capacity and self.cap(d, slices) >= remaining:
                d = self.best_fit(doms[i:], remaining, slices)
            have = self.cap(d, slices)
            if have >= remaining:
                self.set_pods(d, remaining * size)
                out.append(d)
                return out
            self.set_pods(d, have * size)
            remaining -= have
            out.append(d)
        return out if remaining <= 0 else []

    def descend(self, fit_level: int, chosen: list[tuple[int, int]], count: int
                ) -> dict[str, int]:
        """L1031-1079: down to hostnames; pods per node."""
        current = self.to_minimum(chosen, count, True)
        level = fit_level
        while level > 0 and level > self.req.slice_level:  # above the slice level
            lower = [c for d in current for c in self.children(d)]
            current = self.to_minimum(self.sort(lower), count, True)
            level -= 1
        while level > 0:  # at or below it: each domain's pods to its own children
            nxt = []
            for d in current:
                kids = self.sort(self.children(d), slices=False)
                nxt += self.to_minimum(kids, self.pod_count(d), False)
            current = nxt
            level -= 1
        return {self.view.levels[0].domains[d[1]][1][0]: self.pod_count(d)
                for d in current if self.pod_count(d) > 0}


def _assign_podset(job: TrainingJob, ps: list[GangUnit], view: ClusterView, state: FreeState
                   ) -> dict[str, list[GPURef]] | str:
    size = view.node_size(ps[0])
    per_unit = [pods_for(u, size) for u in ps]
    pods: list[Pod] = [p for unit_pods in per_unit for p in unit_pods]
    if not pods:
        return f"podset {ps[0].group!r}: no node of an accepted GPU type"
    pod_gpus = max(p.gpus for p in pods)
    eligible = eligible_nodes(view, ps[:1])
    req = topology_request(job, ps, len(per_unit[0]), view)
    what = f"podset {ps[0].group!r} ({len(pods)} pods x {pod_gpus} GPUs)"
    assign = _Assign(view, state, eligible, pod_gpus, req)
    found = assign.find_level(req.level, len(pods))
    if isinstance(found, str):
        mode = ("required at level " + str(req.level)) if req.required else "unconstrained"
        return f"{what}, {mode}: {found}"
    fit_level = found[0][0]
    per_node = assign.descend(fit_level, found, len(pods))
    if sum(per_node.values()) < len(pods):
        return f"{what}: the descent found room for {sum(per_node.values())} pods"
    # pods in index order fill the hosts in the order of their level values, top level first
    # (``buildAssignment`` L1701-1710 sorts domains by ``compareDomainLevelValues``)
    path = {n: tuple(view.levels[lv].domains[view.member[lv][n]][0]
                     for lv in range(len(view.levels) - 1, -1, -1)) for n in per_node}
    slots = [n for n in sorted(per_node, key=path.__getitem__) for _ in range(per_node[n])]
    out: dict[str, list[GPURef]] = {}
    for pod, node in zip(pods, slots):
        out.setdefault(pod.unit.name, []).extend(
            GPURef(node=node, gpu=g) for g in state.take(node, pod.gpus))
    return out


def place_job(job: TrainingJob, state: FreeState, views: list[ClusterView],
              rng: random.Random | None = None) -> JobOutcome:
    """One workload through TAS; on success its GPUs are taken in ``state``."""
    units = job.units()
    reasons: list[str] = []
    for view in views:
        placed: dict[str, list[GPURef]] = {}
        for ps in podsets(units, view):  # each PodSet sees the ones before it (assumed usage)
            got = _assign_podset(job, ps, view, state)
            if isinstance(got, str):
                reasons.append(f"kueue: {view.cluster.name}: {got}")
                for gpus in placed.values():  # not admitted: give the earlier PodSets' GPUs back
                    for g in gpus:
                        state.release(g.node, [g.gpu])
                break
            placed.update(got)
        else:
            return JobOutcome(units=placed)
    return JobOutcome(reasons=reasons)
