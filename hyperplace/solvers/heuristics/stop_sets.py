"""Stop sets: which running jobs greedy stops (preemption) or moves (migration) for a pending
job, and in what order they are tried. The one toolkit of greedy's preemption and migration
heuristics (and of defragmentation's set enumeration):

* :func:`sets_by_lost_work`: subsets of the candidates, lazily, in order of (lost work,
  count);
* :class:`StopIndex` and :func:`node_sets`: the one node-by-node builder (per domain of the
  job's hop limit, on each node the cheapest candidates until a piece fits, then the
  cheapest nodes for all its pieces), from per-node lists built once per round;
* :func:`set_cost`: the one score of a stop set (highest level stopped, GPUs, lost work:
  objective 1's order, roughly), by which the node-by-node sets are ranked.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from hyperplace.formulations.placement import JobView, PlacementProblem, Stoppable

if TYPE_CHECKING:
    from hyperplace.solvers.heuristics.greedy import State


class _HasLost(Protocol):
    @property
    def lost(self) -> float: ...


T = TypeVar("T", bound=_HasLost)
S = TypeVar("S", bound=Stoppable)
#: (set cost, node, the candidates cleared on it) per node of one domain
NodeCosts = list[tuple[tuple[float, int, float], str, list[S]]]
#: stop set (candidate indices) -> (its cost, its candidates)
Options = dict[frozenset[int], tuple[tuple[float, int, float], tuple[S, ...]]]


def sets_by_lost_work(cands: Sequence[T]) -> Iterator[tuple[T, ...]]:
    """Non-empty subsets of ``cands`` (anything with ``lost``, sorted by it) lazily, in
    order of (lost work, count): a heap of subsets whose successors are "add the next
    candidate" and "swap the last for the next", both of which never lower the key."""
    if not cands:
        return
    heap: list[tuple[float, int, tuple[int, ...]]] = [(cands[0].lost, 1, (0,))]
    while heap:
        lost, size, idx = heapq.heappop(heap)
        yield tuple(cands[i] for i in idx)
        last = idx[-1]
        if last + 1 < len(cands):
            nxt = cands[last + 1].lost
            heapq.heappush(heap, (lost + nxt, size + 1, (*idx, last + 1)))
            heapq.heappush(heap, (lost - cands[last].lost + nxt, size, (*idx[:-1], last + 1)))


def set_cost(stopped: Sequence[Stoppable]) -> tuple[float, int, float]:
    """The score of a stop set: highest level stopped, GPUs stopped, lost work (objective
    1's order, roughly; lower is cheaper)."""
    return (max((v.level for v in stopped), default=-float("inf")),
            sum(len(v.gpus) for v in stopped), sum(v.lost for v in stopped))


class StopIndex(Generic[S]):
    """A round's candidates per node, cheapest first (level, lost work, name), with how many
    of their GPUs each holds there, and per job shape the nodes a piece may use per domain of
    its hop limit: built once per round (at 16,384 GPUs and 10,000 movers rebuilding them
    per job took ~25 ms a job)."""

    def __init__(self, p: PlacementProblem, cands: Sequence[S]):
        self.p = p
        self.on_node: dict[str, list[tuple[S, int]]] = {}
        for v in sorted(cands, key=lambda v: (v.level, v.lost, v.name)):
            there: dict[str, int] = {}
            for node, _ in v.gpus:
                there[node] = there.get(node, 0) + 1
            for node, k in there.items():
                self.on_node.setdefault(node, []).append((v, k))
        self._nodes: dict[tuple[object, ...], list[list[str]]] = {}

    def nodes_for(self, jv: JobView, size: int) -> list[list[str]]:
        """Per domain of the job's hop limit, the nodes a piece of ``size`` GPUs of its
        first class may use (the same for every job of its shape)."""
        key = (self.p.job_shape(jv), size)
        found = self._nodes.get(key)
        if found is None:
            p, uc0 = self.p, jv.classes[0]
            found = [[n.name for leaf in leaves for n in p.nodes_by_leaf.get(leaf, [])
                      if p.node_eligible(jv, uc0, n) and n.node.gpu_count >= size]
                     for leaves in p.leaves_by_domain(jv.hop_limit, True).values()]
            self._nodes[key] = found
        return found


def node_sets(jv: JobView, state: State, index: StopIndex[S],
              usable: Callable[[S], bool]) -> list[tuple[S, ...]]:
    """Stop sets that clear whole pieces node by node: per domain of the job's hop limit, on
    each node the cheapest ``usable`` candidates of ``index`` until a piece of the job's
    largest size fits, then the cheapest nodes (:func:`set_cost`, then name) for all its
    pieces; the sets of every domain, each once, cheapest first."""
    size = max(max(uc.pieces) for uc in jv.classes)
    count = sum(len(uc.pieces) * uc.count for uc in jv.classes)
    options: Options[S] = {}
    for names in index.nodes_for(jv, size):
        if len(names) < count:
            continue
        costs: NodeCosts[S] = []
        for name in names:
            room, chosen = len(state.free[name]), list[S]()
            for v, k in index.on_node.get(name, ()):
                if room >= size:
                    break
                if not usable(v):
                    continue
                chosen.append(v)
                room += k
            if room >= size:
                costs.append((set_cost(chosen), name, chosen))
        _add_cheapest_nodes(costs, count, options)
    return [combo for _, combo in sorted(options.values(), key=lambda o: o[0])]


def _add_cheapest_nodes(costs: NodeCosts[S], count: int, options: Options[S]) -> None:
    """One domain's option: the candidates of its ``count`` cheapest nodes (cost, then
    name) as one set, kept once; nothing when the domain has fewer nodes that can be
    cleared."""
    if len(costs) < count:
        return
    costs.sort(key=lambda t: (t[0], t[1]))
    picked: dict[int, S] = {}
    for _, _, chosen in costs[:count]:
        picked.update({v.index: v for v in chosen})
    combo = tuple(picked.values())
    if combo:
        options[frozenset(picked)] = (set_cost(combo), combo)
