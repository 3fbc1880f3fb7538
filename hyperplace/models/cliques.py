"""The largest set of GPUs whose every pair is linked: the one definition of "largest NVLink
set", used by the placement formulation (a unit's NVLink floor) and the instance summary."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import combinations


def largest_clique(gpus: Iterable[int], linked: Callable[[int, int], bool]) -> int:
    """Size of the largest set of ``gpus`` whose every pair is ``linked`` (0 if no GPUs).

    The one definition of "largest NVLink set": exact (networkx's maximal cliques), used by
    :meth:`NodeView.largest_clique` (with a unit's NVLink floor) and by the instance
    summary (with "any NVLink").

    Parameters
    ----------
    gpus : iterable of int
        The GPUs to choose from (e.g. a node's free GPUs).
    linked : callable
        ``linked(a, b)`` with ``a < b``: whether the pair qualifies.
    """
    pool = sorted(gpus)
    if not pool:
        return 0
    import networkx as nx  # only for non-uniform nodes: a greedy-only solve never loads it

    graph = nx.Graph()
    graph.add_nodes_from(pool)
    graph.add_edges_from((a, b) for a, b in combinations(pool, 2) if linked(a, b))
    return max(len(c) for c in nx.find_cliques(graph))
