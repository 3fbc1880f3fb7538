"""Karmada's replica division rules, re-implemented from its source for comparison.

Cited from karmada-io/karmada at commit f8fdd02df (read, not copied):

* **Totals-based estimate** (general estimator), ``pkg/estimator/client/general.go:465-500``
  ``getMaximumReplicasBasedOnClusterSummary``: for every requested resource,
  ``floor((allocatable - allocated - allocating) / request)``; the minimum over resources.
  For a GPU job that is ``floor(free GPUs / GPUs per replica)`` of the whole cluster, blind
  to which node the GPUs are on. Component sets (``general.go:158-200``,
  ``maxAvailableComponentSets``): the per-set requirement is the sum over components and
  the same floor applies to the cluster totals.
* **Aggregated division**, ``pkg/scheduler/core/division_algorithm.go:81-89``
  (``dynamicDivideReplicas``, case ``AggregatedStrategy``): clusters sorted by available
  replicas, most first (``TargetClustersList.Less``, line 36), the shortest prefix whose sum
  covers the request, then the replicas spread over that prefix in proportion to their
  available replicas (``helper.SpreadReplicasByTargetClusters``,
  ``pkg/util/helper/binding.go:178``, which seats them by the Webster method,
  ``pkg/util/helper/webstermethod.go:112``).
* **Static-weight division**, ``pkg/scheduler/core/assignment.go:199-211``
  (``assignByStaticWeightStrategy``): Webster seats by the static weights (every cluster
  weight 1 when none are given), ignoring free capacity.
* **Ordered clusterAffinities**, ``pkg/scheduler/scheduler.go:618-650``
  (``scheduleResourceBindingWithClusterAffinities``): try each affinity group in order and
  keep the first one for which scheduling succeeds.
"""

from __future__ import annotations

import heapq


def totals_estimate(free_gpus: int, gpus_per_replica: int) -> int:
    """Karmada's general-estimator figure for one cluster (general.go:465)."""
    if gpus_per_replica <= 0:
        return 0
    return max(0, free_gpus) // gpus_per_replica


def webster(seats: int, votes: dict[str, int]) -> dict[str, int]:
    """Seat ``seats`` replicas by the Webster (Sainte-Laguë) method: each next seat goes to
    the party with the largest ``votes / (2·seats + 1)``; ties to the fewer seats, then the
    smaller name (webstermethod.go:112, tie-breaker ``sortNameAscending``)."""
    result = {name: 0 for name in votes}
    live = {n: v for n, v in votes.items() if v > 0}
    if not live:
        return result
    heap = [(-v / 1.0, 0, n) for n, v in live.items()]
    heapq.heapify(heap)
    for _ in range(seats):
        _, s, n = heapq.heappop(heap)
        result[n] = s + 1
        heapq.heappush(heap, (-live[n] / (2 * (s + 1) + 1), s + 1, n))
    return result


def aggregated(replicas: int, available: dict[str, int]) -> dict[str, int] | None:
    """Karmada Aggregated division: shortest most-available-first prefix covering
    ``replicas``, spread by available replicas; ``None`` when even all clusters fall short
    (``dynamicDivideReplicas`` returns UnschedulableError)."""
    if sum(available.values()) < replicas:
        return None
    ranked = sorted(available.items(), key=lambda kv: -kv[1])  # stable: ties keep input order
    prefix: dict[str, int] = {}
    total = 0
    for name, avail in ranked:
        prefix[name] = avail
        total += avail
        if total >= replicas:
            break
    seats = webster(replicas, prefix)
    return {n: s for n, s in seats.items() if s > 0}


def static_weight(replicas: int, weights: dict[str, int]) -> dict[str, int]:
    """Karmada static-weight division (assignment.go:199): Webster by weight; every cluster
    weight 1 when all weights are zero."""
    if not any(w > 0 for w in weights.values()):
        weights = {n: 1 for n in weights}
    seats = webster(replicas, weights)
    return {n: s for n, s in seats.items() if s > 0}
