"""Collective and point-to-point times from bandwidth and latency (NCCL's algorithms).

* Ring all-reduce over n ranks: ``2·(n−1)/n · bytes / bw + 2·(n−1)·latency``; a (double
  binary) tree: ``2·bytes / bw + 2·⌈log2 n⌉·latency``; NCCL picks the faster, so do we
  (NCCL ``src/graph/tuning.cc`` models both the same way: a bandwidth term and a per-step
  latency).
* Hierarchical all-reduce over ``nodes × per_node`` ranks: reduce-scatter inside the node,
  all-reduce of ``bytes/per_node`` across nodes, all-gather inside the node.
* Point-to-point: ``bytes / bw + latency``.
"""

from __future__ import annotations

import math


def ring_allreduce(nbytes: float, ranks: int, bw: float, latency_s: float) -> float:
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * (ranks - 1) / ranks * nbytes / bw + 2.0 * (ranks - 1) * latency_s


def tree_allreduce(nbytes: float, ranks: int, bw: float, latency_s: float) -> float:
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return 2.0 * nbytes / bw + 2.0 * math.ceil(math.log2(ranks)) * latency_s


def allreduce(nbytes: float, ranks: int, bw: float, latency_s: float) -> float:
    """The faster of ring and tree, as NCCL's tuner chooses."""
    return min(ring_allreduce(nbytes, ranks, bw, latency_s),
               tree_allreduce(nbytes, ranks, bw, latency_s))


def hierarchical_allreduce(nbytes: float, per_node: int, nodes: int, intra_bw: float,
                           intra_latency_s: float, inter_bw: float,
                           inter_latency_s: float) -> float:
    """Reduce-scatter in the node, all-reduce across nodes, all-gather in the node."""
    if per_node * nodes <= 1:
        return 0.0
    inside = 0.0
    if per_node > 1:
        # reduce-scatter + all-gather = one ring all-reduce's volume
        inside = ring_allreduce(nbytes, per_node, intra_bw, intra_latency_s)
    across = allreduce(nbytes / per_node, nodes, inter_bw, inter_latency_s) if nodes > 1 else 0.0
    return inside + across


def p2p(nbytes: float, bw: float, latency_s: float) -> float:
    return nbytes / bw + latency_s if nbytes > 0 else 0.0
