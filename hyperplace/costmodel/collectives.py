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


# ---- expert parallelism (MoE all-to-all, #24) ---------------------------------------------

def alltoall(nbytes: float, ranks: int, bw: float, latency_s: float) -> float:
    """All-to-all of ``nbytes`` per rank over ``ranks`` on one link class: each rank keeps
    ``1/ranks`` and sends the rest, ``(n−1)/n · bytes / bw + (n−1) · latency`` (NCCL's
    pairwise exchange, one peer per step)."""
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    return (ranks - 1) / ranks * nbytes / bw + (ranks - 1) * latency_s


def moe_dispatch_bytes(tokens: float, hidden: int, top_k: int, bytes_per_value: int = 2) -> float:
    """Bytes one rank sends in one MoE dispatch (the combine sends as many back): each of its
    ``tokens`` goes to ``top_k`` experts as a ``hidden``-wide activation (BF16 by default)."""
    return float(tokens) * top_k * hidden * bytes_per_value


def expert_alltoall(nbytes: float, ranks: int, ranks_per_domain: int, nvlink_bw: float,
                    fabric_bw: float, nvlink_latency_s: float = 2e-6,
                    fabric_latency_s: float = 5e-6) -> float:
    """One all-to-all of an expert-parallel group of ``ranks`` whose ranks sit
    ``ranks_per_domain`` to an NVLink domain (a node, or an NVL72 rack).

    Routing is uniform (each destination gets ``1/ranks`` of a rank's bytes, the balanced
    router MoE training aims for): the share bound for ranks of the own domain,
    ``(d−1)/n``, crosses NVLink at ``nvlink_bw``, the rest, ``(n−d)/n``, the fabric at
    ``fabric_bw`` (bytes/s per rank, both directions at once); the two go in parallel, so
    the slower sets the time. With the whole group in one domain (``d = n``) it is the
    NVLink all-to-all; an EP 64 group on 8-GPU nodes sends 7/8 of its bytes over the fabric.
    """
    if ranks <= 1 or nbytes <= 0:
        return 0.0
    d = max(1, min(ranks_per_domain, ranks))
    inside = (d - 1) / ranks * nbytes / nvlink_bw + (d - 1) * nvlink_latency_s if d > 1 else 0.0
    outside = (ranks - d) / ranks * nbytes / fabric_bw + (ranks - d) * fabric_latency_s \
        if ranks > d else 0.0
    return max(inside, outside)


def moe_step_alltoall_s(*, tokens_per_rank: float, hidden: int, top_k: int, moe_layers: int,
                        ranks: int, ranks_per_domain: int, nvlink_bw: float,
                        fabric_bw: float) -> float:
    """All-to-all seconds of one training step of an EP group: per MoE layer a dispatch and
    a combine forward and the same two backward (four all-to-alls of
    :func:`moe_dispatch_bytes`)."""
    nbytes = moe_dispatch_bytes(tokens_per_rank, hidden, top_k)
    return 4 * moe_layers * expert_alltoall(nbytes, ranks, ranks_per_domain, nvlink_bw,
                                            fabric_bw)
