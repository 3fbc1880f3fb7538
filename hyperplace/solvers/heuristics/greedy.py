"""Topology-aware best fit: the answer that is always there, and the warm start for CP-SAT.

Jobs go in priority order, once larger first and once in queue order; the better pass wins. For each job the rule tries
the domains its ``maxHopCount`` allows, tightest first, places multi-node units before single
ones and every piece on the eligible node it fills best (fewest free GPUs left), preferring
the job's own leaf, then partly used nodes, then the policy's preferred type. A job is
admitted only if every unit fits (gang); otherwise everything it took is given back.

Free GPUs are indexed by (leaf, GPU type, free count) so that a round of 16k GPUs and
thousands of jobs takes a second or two, not minutes.
"""

from __future__ import annotations

import math
import time
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from hyperplace.formulations.explain import FitProbe
from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.formulations.placement import (
    DomainKey,
    JobView,
    NodeView,
    PlacementProblem,
    Stoppable,
    UnitClass,
)
from hyperplace.formulations.placement.extensions import OpeningRule
from hyperplace.solvers.params import GreedyParams

_DEFAULTS = GreedyParams()
#: Seconds a greedy pass that starts after its deadline may still run (part of the budget's
#: "+ 0.05 s", beside the mapping and the explanations): a whole pass of a few hundred
#: jobs, a bounded overrun beyond.
LATE_PASS_S = 0.03


def _counts() -> dict[str, int]:
    return defaultdict(int)


def _types_index() -> dict[str, dict[tuple[int, bool], int]]:
    return defaultdict(_key_index)


def _key_index() -> dict[tuple[int, bool], int]:
    return defaultdict(int)


class State:
    """Free GPUs per node, indexed so that a piece finds its best-fit node without scanning.

    ``index``: leaf -> type -> (free count, untouched) -> nodes (a bit set over the nodes'
    places in their leaf, so that among equal nodes best fit takes the first in the leaf and
    the state is a function of the free GPUs alone, whatever was taken and given back
    before), where *untouched* means a node whose GPUs are all free and were at the round's
    start (best fit prefers partly used nodes, so the two kinds are kept apart). ``leaves_with``:
    (type, free count, untouched) -> leaves holding such a node -> how many. A piece looks
    only at the leaves that have a node of the free count it tries, instead of every leaf
    of its domain for every count (at 65,536 GPUs that scan was 35 s of a 66 s greedy).
    ``masks`` holds the same as bit sets over the leaves' ranks (their order in the round,
    which every domain's leaf list follows), so that a piece takes the union over its types,
    the intersection with its domain and the first leaf in the domain's order as a few
    integer operations, not a scan of hundreds of leaves (131,072 GPUs: 512 leaves).

    ``openings``: the round extensions' opening rules (:meth:`RoundExtension.opening_rule
    <hyperplace.formulations.placement.extensions.RoundExtension.opening_rule>`; hot spares:
    whole free nodes each leaf may still open), kept up to date as nodes are opened and
    given back; ``rules=False`` ignores them (what the explanations ask: would the job fit
    without them?).
    """

    def __init__(self, problem: PlacementProblem, rules: bool = True):
        self.p = problem
        self.openings: tuple[OpeningRule, ...] = tuple(
            r for ext in problem.extensions if (r := ext.opening_rule()) is not None
        ) if rules else ()
        fresh = _FRESH.get(problem)
        if fresh is not None:
            self._copy(fresh)
            return
        if not self._advance(problem):
            self._build(problem)
        _FRESH[problem] = _Fresh(self)

    def _build(self, problem: PlacementProblem) -> None:
        """The round's free GPUs indexed from its node views (once per round: later states
        of the same round copy it, :class:`_Fresh`)."""
        self.free: dict[str, tuple[int, ...]] = {}
        self.index: dict[DomainKey, dict[str, dict[tuple[int, bool], int]]] = \
            defaultdict(_types_index)
        #: each node's place among its leaf's nodes (its bit in ``index``)
        self.slot: dict[str, int] = {n.name: i for nodes in problem.nodes_by_leaf.values()
                                     for i, n in enumerate(nodes)}
        self.leaves_with: dict[tuple[str, int, bool], dict[DomainKey, int]] = defaultdict(dict)
        #: the leaves in the round's order (that of ``PlacementProblem.nodes_by_leaf`` and of
        #: every list ``leaves_by_domain`` gives) and each one's rank in it
        self.leaf_at: list[DomainKey] = list(problem.nodes_by_leaf)
        self.rank: dict[DomainKey, int] = {leaf: i for i, leaf in enumerate(self.leaf_at)}
        #: (type, free count, untouched) -> bit set of the ranks of the leaves in ``leaves_with``
        self.masks: dict[tuple[str, int, bool], int] = defaultdict(int)
        self._domain_masks: dict[int, tuple[list[DomainKey], int, bool]] = {}
        self._policy_types: dict[tuple[str | None, float], list[str]] = {}
        self._fast_enough: dict[tuple[int | None, DomainKey, float], bool] = {}
        self.leaf_free: dict[DomainKey, dict[str, int]] = defaultdict(_counts)
        self._positions: dict[int, tuple[list[DomainKey], dict[DomainKey, int]]] = {}
        self._domain_free: dict[int | None, tuple[dict[DomainKey, list[DomainKey]],
                                                  dict[DomainKey, dict[str, int]]]] = {}
        #: NVLink-domain leaves (racks) -> their GPUs, for :meth:`whole_rack`
        self.rack_gpus: dict[DomainKey, int] = defaultdict(int)
        for n in problem.nodes:
            if (n.leaf.fabric_domain or "").startswith("nvl:"):
                self.rack_gpus[n.leaf] += n.node.gpu_count
        self.rack_gpus = dict(self.rack_gpus)
        for n in problem.nodes:
            self.free[n.name] = n.free
            if n.free:
                self._enter(n, n.free)
                self.leaf_free[n.leaf][n.gpu_type.name] += len(n.free)

    def _copy(self, fresh: _Fresh) -> None:
        """This round's fresh state, copied (:class:`_Fresh`)."""
        self.free = dict(fresh.free)
        index: dict[DomainKey, dict[str, dict[tuple[int, bool], int]]] = defaultdict(_types_index)
        for leaf, types in fresh.index.items():
            by_type = index[leaf]
            for t, by in types.items():
                by_type[t].update(by)
        self.index = index
        self.leaves_with = defaultdict(dict, {k: dict(v) for k, v in fresh.leaves_with.items()})
        self.masks = defaultdict(int, fresh.masks)
        self.leaf_free = defaultdict(_counts, {leaf: defaultdict(int, v)
                                                for leaf, v in fresh.leaf_free.items()})
        self._domain_free = {}
        for k, v in fresh.shared.items():
            setattr(self, k, v)

    def _advance(self, problem: PlacementProblem) -> bool:
        """The round's fresh state from the previous round's, when the problem carried every
        node's view in place (:meth:`PlacementProblem.carried_layout`) and that round indexed
        its free GPUs: only the nodes whose state changed are indexed again (16,384 nodes: the
        whole index was rebuilt from every view each warm round). The state is a function of
        the nodes' free GPUs alone, so it is the one :meth:`_build` gives. False: not carried."""
        carried = problem.carried_layout()
        before = _FRESH.get(carried[0]) if carried is not None else None
        if carried is None or before is None:
            return False
        self._copy(before)  # the nodes' places, leaves and racks hold; what the round's
        # domain lists and types give is made anew
        self._domain_masks, self._policy_types, self._fast_enough, self._positions = {}, {}, {}, {}
        for old, new in carried[1]:
            if old.free:
                self._leave(old, old.free)
                self.leaf_free[old.leaf][old.gpu_type.name] -= len(old.free)
            if new.free:
                self._enter(new, new.free)
                self.leaf_free[new.leaf][new.gpu_type.name] += len(new.free)
            self.free[new.name] = new.free
        return True

    @staticmethod
    def _key(n: NodeView, free: tuple[int, ...]) -> tuple[int, bool]:
        return len(free), n.fully_free and len(free) == len(n.free)

    def _enter(self, n: NodeView, free: tuple[int, ...]) -> None:
        key = self._key(n, free)
        t = n.gpu_type.name
        self.index[n.leaf][t][key] |= 1 << self.slot[n.name]
        count = self.leaves_with[(t, *key)]
        had = count.get(n.leaf, 0)
        count[n.leaf] = had + 1
        if not had:
            self.masks[(t, *key)] |= 1 << self.rank[n.leaf]

    def _leave(self, n: NodeView, free: tuple[int, ...]) -> None:
        key = self._key(n, free)
        t = n.gpu_type.name
        self.index[n.leaf][t][key] &= ~(1 << self.slot[n.name])
        count = self.leaves_with[(t, *key)]
        if count[n.leaf] == 1:
            del count[n.leaf]
            self.masks[(t, *key)] &= ~(1 << self.rank[n.leaf])
        else:
            count[n.leaf] -= 1

    def whole_rack(self, leaf: DomainKey) -> bool:
        """``leaf`` is an NVLink domain (a rack) all of whose GPUs are free: best fit opens
        it last, keeping whole racks for the jobs that need them (#24)."""
        cap = self.rack_gpus.get(leaf)
        return cap is not None and sum(self.leaf_free[leaf].values()) == cap

    def may_open(self, leaf: DomainKey) -> bool:
        """A piece may open a whole free node of ``leaf`` (every opening rule allows it:
        its hot spares stay free)."""
        for rule in self.openings:
            if not rule.may_open(leaf):
                return False
        return True

    def openable(self, mask: int) -> int:
        """The leaves of bit set ``mask`` that :meth:`may_open` a whole free node."""
        at = self.leaf_at
        for r in _ranks(mask):
            if not self.may_open(at[r]):
                mask &= ~(1 << r)
        return mask

    def _set(self, n: NodeView, new: tuple[int, ...]) -> None:
        old = self.free[n.name]
        if self.openings and n.fully_free:
            was, now = len(old) == len(n.free), len(new) == len(n.free)
            if was != now:
                for rule in self.openings:
                    rule.moved(n.leaf, now)
        if old:
            self._leave(n, old)
        if new:
            self._enter(n, new)
        delta = len(new) - len(old)
        t = n.gpu_type.name
        self.leaf_free[n.leaf][t] += delta
        for by_leaf, totals in self._domain_free.values():
            for d in by_leaf.get(n.leaf, ()):
                totals[d][t] += delta
        self.free[n.name] = new

    def domain_free(self, hop_limit: int | None, domains: dict[DomainKey, list[DomainKey]]
                    ) -> dict[DomainKey, dict[str, int]]:
        """Free GPUs per domain (of ``domains``, the leaves of each domain of a hop limit)
        and type, kept up to date as GPUs are taken and given back: a job no longer sums
        every leaf of every domain (at 65,536 GPUs that sum was 6 s of greedy)."""
        hit = self._domain_free.get(hop_limit)
        if hit is None:
            by_leaf: dict[DomainKey, list[DomainKey]] = defaultdict(list)
            totals: dict[DomainKey, dict[str, int]] = defaultdict(lambda: defaultdict(int))
            for d, leaves in domains.items():
                totals[d]  # every domain has an entry, empty or not
                for leaf in leaves:
                    by_leaf[leaf].append(d)
                    for t, c in self.leaf_free.get(leaf, {}).items():
                        totals[d][t] += c
            hit = self._domain_free[hop_limit] = (by_leaf, totals)
        return hit[1]

    def positions(self, leaves: list[DomainKey]) -> dict[DomainKey, int]:
        """Leaf -> its place in ``leaves`` (kept for the long, shared domain lists)."""
        hit = self._positions.get(id(leaves))
        if hit is not None and hit[0] is leaves:
            return hit[1]
        pos = {leaf: i for i, leaf in enumerate(leaves)}
        if len(leaves) > 32:
            self._positions[id(leaves)] = (leaves, pos)
        return pos

    def domain_mask(self, leaves: list[DomainKey]) -> tuple[int, bool]:
        """The bit set of ``leaves`` and whether their order is the round's (then the first
        leaf of a set in the domain's order is its lowest bit); kept for long lists."""
        hit = self._domain_masks.get(id(leaves))
        if hit is not None and hit[0] is leaves:
            return hit[1], hit[2]
        rank = self.rank
        ranks = [rank[leaf] for leaf in leaves]
        mask = sum(1 << r for r in set(ranks))
        ordered = len(ranks) == mask.bit_count() and all(a < b for a, b in zip(ranks, ranks[1:]))
        if len(leaves) > 32:
            self._domain_masks[id(leaves)] = (leaves, mask, ordered)
        return mask, ordered

    def fast_enough(self, hop_limit: int | None, d: DomainKey, leaves: list[DomainKey],
                    gbps: float) -> bool:
        """The nodes of domain ``d`` (``leaves``) that a job needing ``gbps`` between its
        nodes may use (slower ones are not eligible, ``link_eligible``) are joined fast
        enough (``PlacementProblem.domain_bandwidth``); the fabric does not change within a
        round, so once per domain and rate (a job spanning the whole 262,144-GPU cluster
        listed its 32,768 nodes at each try)."""
        key = (hop_limit, d, gbps)
        ok = self._fast_enough.get(key)
        if ok is None:
            p = self.p
            nodes = [n for leaf in leaves for n in p.nodes_by_leaf[leaf]
                     if (n.attach_gbps or 0) >= gbps]
            ok = self._fast_enough[key] = p.domain_bandwidth(nodes) >= gbps
        return ok

    def policy_types(self, uc: UnitClass) -> list[str]:
        """The GPU types a piece of ``uc`` may use, the policy's preferred first."""
        key = (uc.gpu_types, uc.min_memory_gb)
        found = self._policy_types.get(key)
        if found is None:
            p = self.p
            found = self._policy_types[key] = sorted(
                p.eligible_types(uc.gpu_types, uc.min_memory_gb),
                key=lambda t: p.policy_penalty(p.types_present[t]))
        return found

    def in_order(self, mask: int, ordered: bool, leaves: list[DomainKey],
                 job_leaves: set[DomainKey]) -> Iterator[DomainKey]:
        """The leaves of bit set ``mask`` (a subset of ``leaves``) in best fit's order: the
        job's leaves first, whole racks last, then the order of ``leaves``."""
        at = self.leaf_at
        if self.rack_gpus or not ordered:
            pos = self.positions(leaves)
            cands = [at[r] for r in _ranks(mask)]
            yield from _in_order(cands, lambda leaf: (leaf not in job_leaves,
                                                      self.whole_rack(leaf), pos[leaf]))
            return
        if job_leaves:
            mine = mask & sum(1 << self.rank[leaf] for leaf in job_leaves)
            for r in _ranks(mine):
                yield at[r]
            mask &= ~mine
        for r in _ranks(mask):
            yield at[r]

    def take(self, node: str, gpus: tuple[int, ...]) -> None:
        """Mark ``gpus`` of ``node`` used."""
        n = self.p.node_by_name[node]
        self._set(n, tuple(g for g in self.free[node] if g not in gpus))

    def give(self, node: str, gpus: tuple[int, ...]) -> None:
        """Free ``gpus`` of ``node`` again."""
        n = self.p.node_by_name[node]
        self._set(n, tuple(sorted(self.free[node] + gpus)))


class _Fresh:
    """A round's fresh greedy state, kept for the round's later states (the passes, the
    inversion fix and its probe, the explanations' probes): copying its tables is a few
    C-level dict copies, indexing 32,768 node views again was a third of a second. The
    caches of what does not change within a round (domain masks, type orders, domain
    bandwidths, leaf positions) are shared; the opening rules are made new per state."""

    def __init__(self, state: State):
        self.free = dict(state.free)
        self.index = {leaf: {t: dict(by) for t, by in types.items()}
                      for leaf, types in state.index.items()}
        self.leaves_with = {k: dict(v) for k, v in state.leaves_with.items()}
        self.masks = dict(state.masks)
        self.leaf_free = {leaf: dict(v) for leaf, v in state.leaf_free.items()}
        self.shared = {k: getattr(state, k) for k in (
            "slot", "leaf_at", "rank", "rack_gpus", "_domain_masks", "_policy_types",
            "_fast_enough", "_positions")}


#: each round's fresh state (:class:`_Fresh`), while the round's problem lives
_FRESH: weakref.WeakKeyDictionary[PlacementProblem, _Fresh] = weakref.WeakKeyDictionary()



def _pick_gpus(n: NodeView, size: int, min_gbps: float, free: tuple[int, ...],
               parts: tuple[int, ...] | None = None) -> tuple[int, ...] | None:
    if n.uniform_gbps is not None:
        if n.max_disjoint(size, min_gbps, free, parts) < 1:
            return None
        return free[:size]
    best, best_left = None, -1
    for c in n.cliques(size, min_gbps, free, parts):
        rest = tuple(g for g in free if g not in c)
        left = n.max_disjoint(size, min_gbps, rest, parts) if rest else 0
        if left > best_left:
            best, best_left = c, left
    return best


def _ranks(mask: int) -> Iterator[int]:
    """The set bits of ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _in_order(items: list[DomainKey], key: Callable[[DomainKey], tuple[bool, bool, int]]
              ) -> Iterator[DomainKey]:
    """``sorted(items, key=key)``, lazily: the first is nearly always the one taken."""
    first = min(items, key=key)
    yield first
    yield from sorted((c for c in items if c != first), key=key)


def _place_piece(p: PlacementProblem, jv: JobView, uc: UnitClass, size: int,
                 leaves: list[DomainKey], state: State, job_leaves: set[DomainKey],
                 exclude: set[str] | frozenset[str] = frozenset()
                 ) -> tuple[str, tuple[int, ...]] | None:
    """Best fit among ``leaves``: the smallest free count that fits, partly used nodes
    before untouched ones, the job's leaves first, then the domain's leaf order, then the
    policy's preferred type, then the node's place in its leaf (nodes in ``exclude``
    skipped)."""
    types = state.policy_types(uc)
    domain, ordered = state.domain_mask(leaves)
    masks = state.masks
    top = p.max_gpus_per_node
    for f in range(size, top + 1):
        for untouched in (False, True):
            mask = 0
            for t in types:
                mask |= masks.get((t, f, untouched), 0)
            mask &= domain
            if untouched and state.openings:
                mask = state.openable(mask)
            if not mask:
                continue
            for leaf in state.in_order(mask, ordered, leaves, job_leaves):
                by_type = state.index[leaf]
                nodes = p.nodes_by_leaf[leaf]
                for t in types:
                    bucket = by_type.get(t, {}).get((f, untouched))
                    if not bucket:
                        continue
                    for r in _ranks(bucket):
                        n = nodes[r]
                        name = n.name
                        if name in exclude:
                            continue
                        if not p.node_eligible(jv, uc, n):
                            continue
                        gpus = _pick_gpus(n, size, uc.min_nvlink_gbps, state.free[name], uc.parts)
                        if gpus is not None:
                            return name, gpus
    return None


def try_place_job(p: PlacementProblem, jv: JobView, state: State,
                  max_trials: int = _DEFAULTS.max_domain_trials) -> list[PlacedUnit] | None:
    """Place a whole job on ``state`` (mutating it) or return None and leave it unchanged.

    Parameters
    ----------
    p : PlacementProblem
        The round.
    jv : JobView
        The job to place (all its units, or none).
    state : State
        Free GPUs, updated in place when the job is placed.
    max_trials : int
        Domains tried, those with the fewest free eligible GPUs first.
    """
    if jv.impossible:
        return None
    spans = p.needs_fabric(jv)
    types = p.types_for(jv.classes)
    domains = p.leaves_by_domain(jv.hop_limit, True)
    scored = []
    for d, leaves in domains.items():
        by_type = state.domain_free(jv.hop_limit, domains)[d]
        free = sum(by_type[t] for t in types if t in by_type)
        if free < jv.gpus:
            continue
        if spans and jv.min_ib_gbps and not state.fast_enough(jv.hop_limit, d, leaves,
                                                              jv.min_ib_gbps):
            continue
        scored.append((free, d))
    scored.sort()
    for _, d in scored[:max_trials]:
        placed = _try_domain(p, jv, domains[d], state)
        if placed is not None:
            return placed
    return None


def _try_domain(p: PlacementProblem, jv: JobView, leaves: list[DomainKey], state: State
                ) -> list[PlacedUnit] | None:
    taken: list[tuple[str, tuple[int, ...]]] = []
    units: list[PlacedUnit] = []
    job_leaves: set[DomainKey] = set()

    def undo() -> None:
        for node, gpus in taken:
            state.give(node, gpus)

    for uc in sorted(jv.classes, key=lambda c: (-len(c.pieces), -c.size)):
        if uc.whole_job:
            got = _place_piece(p, jv, uc, uc.size, leaves, state, job_leaves)
            if got is None:
                undo()
                return None
            state.take(*got)
            taken.append(got)
            for u, grp in uc.split_whole(p.node_by_name[got[0]], got[1]):
                units.append(PlacedUnit(uc.index, u.name, [(got[0], grp)]))
            continue
        for u in uc.units:
            done = _place_unit(p, jv, uc, _unit_candidates(p, jv, uc, leaves, state),
                               state, job_leaves)
            if done is None:
                undo()
                return None
            taken.extend(done)
            for node, _ in done:
                job_leaves.add(p.node_by_name[node].leaf)
            units.append(PlacedUnit(uc.index, u.name, done))
    return units


def _unit_candidates(p: PlacementProblem, jv: JobView, uc: UnitClass, leaves: list[DomainKey],
                     state: State) -> list[list[DomainKey]]:
    """Where one unit is tried, in order: the job's leaves; a TP/EP unit that may span
    nodes, one rack first; a multi-node unit with a hop limit, each domain of that limit
    with room for it, fewest free GPUs first."""
    candidates = [leaves]
    if uc.multi_node and not uc.nvlink_bound and jv.traffic_class in ("tp", "ep"):
        candidates = one_rack_first(p, uc, leaves, state)
    if uc.multi_node and uc.hop_limit is not None:
        leaf_set = set(leaves)
        sub = [[leaf for leaf in ls if leaf in leaf_set]
               for d, ls in p.leaves_by_domain(uc.hop_limit, False).items()
               if not (uc.nvlink_bound and d.is_single_node)]
        types = p.eligible_types(uc.gpu_types, uc.min_memory_gb)
        sub = [ls for ls in sub if sum(state.leaf_free[leaf][t] for leaf in ls for t in types) >= uc.size]
        candidates = sorted(sub, key=lambda ls: sum(state.leaf_free[leaf][t] for leaf in ls for t in types))
    return candidates


def _place_unit(p: PlacementProblem, jv: JobView, uc: UnitClass,
                candidates: list[list[DomainKey]], state: State, job_leaves: set[DomainKey]
                ) -> list[tuple[str, tuple[int, ...]]] | None:
    """One unit's pieces in the first candidate leaves where they fit (a flexible unit as
    few pieces as best fit finds; another by its cut patterns, fewest pieces first); taken
    on ``state``, or None and ``state`` unchanged."""
    for cand in candidates:
        if uc.flexible:
            done = _place_flexible_unit(p, jv, uc, cand, state, job_leaves)
            if done is not None:
                return done
            continue
        for pattern in uc.patterns or (tuple(uc.pieces),):  # fewest pieces first
            pieces: list[tuple[str, tuple[int, ...]]] = []
            for size in pattern:
                got = _place_piece(p, jv, uc, size, cand, state, job_leaves)
                if got is None:
                    break
                state.take(*got)
                pieces.append(got)
            if len(pieces) == len(pattern):
                return pieces
            for node, gpus in pieces:
                state.give(node, gpus)
    return None


def one_rack_first(p: PlacementProblem, uc: UnitClass, leaves: list[DomainKey],
                   state: State) -> list[list[DomainKey]]:
    """Where a TP/EP unit that may span nodes is tried (#24): each NVLink domain (rack) of
    ``leaves`` that has its GPUs free, fewest free first (best fit, whole racks last), so
    its all-to-all stays on NVLink where it can; then all of ``leaves``."""
    types = p.eligible_types(uc.gpu_types, uc.min_memory_gb)
    racks = [(sum(state.leaf_free[leaf][t] for t in types), state.whole_rack(leaf), leaf)
             for leaf in leaves if leaf in state.rack_gpus]
    fits = sorted((whole, free, leaf) for free, whole, leaf in racks if free >= uc.size)
    return [[leaf] for _, _, leaf in fits] + [leaves]


def _place_flexible_unit(p: PlacementProblem, jv: JobView, uc: UnitClass,
                         leaves: list[DomainKey], state: State, job_leaves: set[DomainKey]
                         ) -> list[tuple[str, tuple[int, ...]]] | None:
    """A flexible unit (:attr:`UnitClass.flexible`) as few pieces as best fit finds: the
    largest piece that still fits somewhere, each on a node the unit does not use yet,
    until its GPUs are placed; taken on ``state``, or None and ``state`` unchanged."""
    left = uc.size
    pieces: list[tuple[str, tuple[int, ...]]] = []
    used: set[str] = set()
    top = min(uc.size, p.max_gpus_per_node)
    while left > 0:
        got = None
        for size in range(min(left, top), 0, -1):
            got = _place_piece(p, jv, uc, size, leaves, state, job_leaves, used)
            if got is not None:
                break
        if got is None:
            for node, gpus in pieces:
                state.give(node, gpus)
            return None
        state.take(*got)
        pieces.append(got)
        used.add(got[0])
        left -= len(got[1])
    return pieces


class QuotaLedger:
    """The one quota ledger of the greedy rules: GPUs per (queue, quota key) of the jobs
    admitted so far (``used``) and of the running jobs a round stops (``gone``: preemption
    victims, migration movers), checked against the queues' quotas and their cohorts'
    lending (``PlacementProblem.quotas``).

    :meth:`admit` counts a job only if every limit still holds (greedy's rule);
    :meth:`add` and :meth:`stop` count unconditionally and :meth:`ok` checks the whole
    (the preempting and migrating rules, which try a set of changes and undo it).
    """

    def __init__(self, p: PlacementProblem):
        self.p = p
        self.used: dict[tuple[str, str], float] = defaultdict(float)
        self.gone: dict[tuple[str, str], float] = defaultdict(float)
        self.stopped: dict[int, int] = defaultdict(int)  # victim index -> times stopped
        self.admitted: dict[str, int] = defaultdict(int)  # queue -> GPUs admitted now

    def _delta(self, jv: JobView, placed: list[PlacedUnit]) -> dict[tuple[str, str], float]:
        delta: dict[tuple[str, str], float] = defaultdict(float)
        for u in placed:
            for node, gpus in u.pieces:
                gpu_type = self.p.node_by_name[node].gpu_type.name
                for key, n in self.p.quotas.usage(jv.queue, gpu_type, len(gpus)).items():
                    delta[key] += n
        return delta

    def admit(self, jv: JobView, placed: list[PlacedUnit]) -> bool:
        """Count the job's GPUs if every limit still holds; else change nothing."""
        if not self.p.quotas.active:
            return True
        delta = self._delta(jv, placed)
        trial = dict(self.used)
        for key, n in delta.items():
            trial[key] = trial.get(key, 0) + n
        if not self.p.quotas.allows(trial):
            return False
        self.used.update(trial)
        return True

    def release(self, jv: JobView, placed: list[PlacedUnit]) -> None:
        """Give back a job's GPUs (it was released by the inversion fix)."""
        if self.p.quotas.active:
            for key, n in self._delta(jv, placed).items():
                self.used[key] -= n

    def add(self, queue: str, units: list[PlacedUnit], sign: int) -> None:
        """Count (``sign`` +1) or give back (-1) units admitted for ``queue``, unchecked."""
        for u in units:
            for node, gpus in u.pieces:
                self.admitted[queue] += sign * len(gpus)
                t = self.p.node_by_name[node].gpu_type.name
                for key, n in self.p.quotas.usage(queue, t, len(gpus)).items():
                    self.used[key] += sign * n

    def stop(self, v: Stoppable, sign: int) -> None:
        """A running job stopped (+1) or kept after all (-1): its GPUs count no more."""
        self.stopped[v.index] += sign
        for node, _ in v.gpus:
            t = self.p.node_by_name[node].gpu_type.name
            for key, n in self.p.quotas.usage(v.queue, t, 1).items():
                self.gone[key] += sign * n

    def ok(self) -> bool:
        """Every limit holds with what is counted: quotas and cohorts, then the round's
        families' own quota rules (:meth:`RoundExtension.quota_holds
        <hyperplace.formulations.placement.extensions.RoundExtension.quota_holds>`:
        preemption's reclaim rule and the guarantees of queues whose jobs are stopped)."""
        if not self.p.quotas.allows(self.used, self.gone):
            return False
        for ext in self.p.extensions:
            if not ext.quota_holds(self.used, self.gone, self.stopped, self.admitted):
                return False
        return True


def state_with_plan(p: PlacementProblem, a: Assignment) -> tuple[State, QuotaLedger]:
    """Greedy's GPU state and quota ledger with plan ``a`` in place: its units hold their
    GPUs and count against their queues, its stopped running jobs count no more."""
    state = State(p)
    ledger = QuotaLedger(p)
    for j, units in a.units.items():
        ledger.add(p.jobs[j].queue, units, +1)
        for u in units:
            for node, gpus in u.pieces:
                state.take(node, gpus)
    for v in a.stopped:
        ledger.stop(p.stoppable[v], +1)
    return state, ledger


def give_back(state: State, placed: list[PlacedUnit]) -> None:
    """Free the GPUs of ``placed`` on ``state`` again."""
    for u in placed:
        for node, gpus in u.pieces:
            state.give(node, gpus)


def _place_within_quota(p: PlacementProblem, jv: JobView, state: State, ledger: QuotaLedger,
                        trials: int) -> list[PlacedUnit] | None:
    """:func:`try_place_job`, then the quota check: a job over its queue's quota gives its
    GPUs back and stays pending."""
    placed = try_place_job(p, jv, state, trials)
    if placed is not None and not ledger.admit(jv, placed):
        give_back(state, placed)
        return None
    return placed


def job_orders(p: PlacementProblem) -> list[list[JobView]]:
    """Two passes, both highest priority first: largest jobs first (packs big gangs before
    small ones fragment the domains), and queue order (what the peers do, which often admits
    more small jobs). The better of the two is kept."""
    jobs = p.pending  # movers' copies run only when the exact model migrates them
    return [sorted(jobs, key=lambda j: (-j.priority, -j.gpus, j.index)),
            sorted(jobs, key=lambda j: (-j.priority, j.index))]


def plan_score(p: PlacementProblem, a: Assignment) -> tuple[int, int]:
    """The score greedy's plans are compared by (its passes, a warm start against a cold
    pass): objective (1) and its tie-breaker, priority-weighted admitted GPUs, admitted
    jobs."""
    return (sum(p.weights[p.jobs[j].priority] * p.jobs[j].gpus for j in a.units), len(a.units))


def _one_pass(p: PlacementProblem, order: list[JobView], params: GreedyParams,
              deadline: float | None = None) -> Assignment:
    state = State(p)
    ledger = QuotaLedger(p)
    out = Assignment()
    # (job shape, priority) of the searches that failed since the last job was placed: a job
    # of such a shape faces the same free GPUs and quotas, so it fails too (the priority
    # repair's rule; after a full cluster's first failures, 288 jobs failing 10 ms each at
    # 131,072 GPUs were most of a warm round)
    failed: set[tuple[object, ...]] = set()
    for k, jv in enumerate(order):
        if k and deadline is not None and time.perf_counter() > deadline:
            # out of time: the jobs not reached stay pending (all of lower priority)
            out.untried = {j.index for j in order[k:] if not j.impossible}
            break
        key = (p.job_shape(jv), jv.priority) if failed else None
        if key is not None and key in failed:
            continue
        placed = _place_within_quota(p, jv, state, ledger, params.max_domain_trials)
        if placed is not None:
            out.units[jv.index] = placed
            failed.clear()
        else:
            failed.add(key if key is not None else (p.job_shape(jv), jv.priority))
    return out


@dataclass
class GreedyStats:
    """What one :func:`solve_greedy` call spent, for the driver's budget rule.

    ``first_pass_s``: the first pass alone (one pass over the queue: what the inversion fix
    of another plan and the explanations' probes each cost at most, about); ``passes``:
    passes run; ``second_skipped``: the second pass was left out so that the exact backend
    keeps its time (``second_pass_ok`` said no); ``fix_s``: the inversion fix.
    """

    first_pass_s: float = 0.0
    passes: int = 0
    second_skipped: bool = False
    fix_s: float = 0.0


def solve_greedy(p: PlacementProblem, params: GreedyParams | None = None,
                 deadline: float | None = None, late_pass_s: float = 0.0,
                 stats: GreedyStats | None = None,
                 second_pass_ok: Callable[[float], bool] | None = None) -> Assignment:
    """Greedy's plan: the better of :func:`job_orders`' two passes, then the inversion fix.

    Parameters
    ----------
    p : PlacementProblem
        The round.
    params : GreedyParams, optional
        Domains tried per job.
    deadline : float, optional
        A ``time.perf_counter()`` value: a pass stops placing jobs there (the plan stays
        valid; jobs not reached stay pending), and the second pass is skipped when the
        first one's time no longer fits before it. A deadline already past when greedy
        starts gets one pass, in queue order, of :data:`LATE_PASS_S` + ``late_pass_s`` (at
        least its first job): an empty plan would answer nothing, and a whole pass could
        take seconds; a first pass that starts just before it gets that much time too. The
        inversion fix stops at the deadline either way (jobs it did not reach keep
        greedy's verdict). Without a deadline, both passes run whole.
    late_pass_s : float
        Extra seconds for a pass that starts late (the driver gives 5 % of the budget, the
        share the budget promise allows beyond it).
    stats : GreedyStats, optional
        Filled with what the passes and the inversion fix took.
    second_pass_ok : callable, optional
        Asked with the first pass's seconds before the second pass starts: False leaves the
        second pass out (the driver says False when it would take the time the exact
        backend's model needs).
    """
    params = params or _DEFAULTS
    fix_deadline = deadline
    now = time.perf_counter()
    if deadline is not None and now >= deadline:
        # the budget was gone before solving began (a cold start on a busy machine): a short
        # pass is still the answer, late but not empty (the plan reports its runtime)
        deadline = now + LATE_PASS_S + late_pass_s
        # in queue order (priority first): the largest-first order spends a short pass on
        # the largest gangs, which fail slowest (131,072 GPUs: 1 job admitted in 0.5 s)
        orders = job_orders(p)[1:]
    else:
        orders = job_orders(p)
    passes: list[Assignment] = []
    passes_started = 0.0  # set when the first pass begins
    stats = stats if stats is not None else GreedyStats()
    for order in orders:
        begun = time.perf_counter()
        if passes and deadline is not None and \
                deadline - begun < (begun - passes_started) * 1.2:
            break
        if passes and second_pass_ok is not None and not second_pass_ok(stats.first_pass_s):
            stats.second_skipped = True
            break
        if not passes:
            passes_started = begun
        # the first pass gets the late pass's time even when it starts just before the
        # deadline (a sliver of time would leave nearly every job untried)
        cut = deadline if passes or deadline is None else \
            max(deadline, begun + LATE_PASS_S + late_pass_s)
        passes.append(_one_pass(p, order, params, cut))
        if len(passes) == 1:
            stats.first_pass_s = time.perf_counter() - begun
    stats.passes = len(passes)
    best = max(passes, key=lambda a: plan_score(p, a))
    fix_start = time.perf_counter()
    fixed = fix_inversions(p, best, params, fix_deadline)
    stats.fix_s = time.perf_counter() - fix_start
    return fixed


def fit_probe(p: PlacementProblem, params: GreedyParams | None = None) -> FitProbe:
    """``fits_alone(job)`` for the explanations: whether greedy places the job on the
    round's free GPUs (nothing else admitted). The probe leaves its state as it found it."""
    params = params or _DEFAULTS
    state: State | None = None

    def fits_alone(jv: JobView) -> bool:
        nonlocal state
        state = state or State(p)
        placed = try_place_job(p, jv, state, max_trials=params.probe_domain_trials)
        if placed is None:
            return False
        for u in placed:
            for node, gpus in u.pieces:
                state.give(node, gpus)
        return True

    return fits_alone


def fix_inversions(p: PlacementProblem, a: Assignment,
                    params: GreedyParams | None = None,
                    deadline: float | None = None) -> Assignment:
    """Make the priority rule hold: no pending job fits on the free GPUs plus those of
    lower-priority admitted jobs.

    For each pending job, highest priority first: place it on the free GPUs if it fits;
    otherwise release every admitted job of lower priority, place it, and put the released
    jobs back where they fit (highest priority first). Admitted weighted demand only grows:
    one GPU of a higher class outweighs all GPUs of the lower ones.
    """
    trials = (params or _DEFAULTS).max_domain_trials
    out = Assignment(units=dict(a.units), notes=dict(a.notes), stopped=set(a.stopped),
                     untried=set(a.untried))
    # a job on GPUs of a preempted job stays where it is (only it may use them)
    on_victims = {j for j, units in a.units.items() for u in units for node, gpus in u.pieces
                  if set(gpus) & set(p.node_by_name[node].stoppable)}
    on_victims |= {j for j in a.units if p.is_copy(j)}  # a migrated job stays where it moved
    state, ledger = state_with_plan(p, out)
    pending = sorted((jv for jv in p.pending if jv.index not in out.units and not jv.impossible),
                     key=lambda j: (-j.priority, -j.gpus, j.index))
    # admitted jobs by priority level, so that finding the lower-priority ones costs nothing
    # when there are none (at 16,000 jobs scanning every admitted job per pending one was 8 s)
    admitted = _ByPriority(p, out.units)
    # (job shape, priority) -> the plan's version when such a job last failed to get in: a
    # job of the same shape and priority faces the same free GPUs and the same lower-priority
    # jobs until the plan changes, so it is not searched again (at 16,000 jobs, 58 searches
    # releasing ~7,600 jobs each were 6 s)
    version = 0
    failed: dict[tuple[object, ...], int] = {}
    probe = _LevelProbe(p, out, admitted, on_victims)
    for jv in pending:
        if deadline is not None and time.perf_counter() > deadline:
            break
        if jv.index in out.units:
            continue
        out.untried.discard(jv.index)
        key = (p.job_shape(jv), jv.priority)
        if failed.get(key) == version:
            continue
        placed = _place_within_quota(p, jv, state, ledger, trials)
        if placed is not None:
            out.units[jv.index] = placed
            admitted.add(jv.index)
            probe.placed(jv.index)
            version += 1
            continue
        lower = [j for j in admitted.below(jv.priority) if j not in on_victims]
        if lower and not probe.fits(jv, trials):
            # releasing them would not make room: what the failed search leaves, without it
            for j in lower:
                out.units[j] = out.units.pop(j)
            lower = []
        if not lower or not _over_lower(p, jv, lower, out, state, ledger, admitted, trials):
            failed[key] = version
            continue
        probe.changed()
        version += 1
    return out


class _LevelProbe:
    """Greedy's state with every admitted job of lower priority than the job at hand
    released (jobs on victims' GPUs and movers' copies stay), kept level by level as the
    inversion fix goes down the priorities: whether a release search would place the job
    is a search on it, not a release of thousands of jobs and their return (131,072 GPUs:
    17 such searches, each releasing ~7,700 jobs, were 6.9 s of CPU against 1.1 s for the
    pass). Exact: greedy's state is a function of the free GPUs alone (best fit's last
    tie-break is a node's place in its leaf), and the released state has these free GPUs;
    the quotas can only turn a placement down, never make one."""

    def __init__(self, p: PlacementProblem, out: Assignment, admitted: _ByPriority,
                 kept: set[int]):
        self.p, self.out, self.admitted, self.kept = p, out, admitted, kept
        self.state: State | None = None
        self.level = 0  # the lowest priority whose admitted jobs hold their GPUs in ``state``
        self.held: set[int] = set()

    def _take(self, j: int) -> None:
        assert self.state is not None
        self.held.add(j)
        for u in self.out.units[j]:
            for node, gpus in u.pieces:
                self.state.take(node, gpus)

    def fits(self, jv: JobView, trials: int) -> bool:
        """``jv`` fits (GPUs only) once the admitted jobs below its priority are released."""
        if self.state is None or jv.priority > self.level:
            self.state, self.held, self.level = State(self.p), set(), jv.priority
            for j in sorted(self.kept & self.out.units.keys()):
                self._take(j)
            top = math.inf
        else:
            top = self.level
        for level, js in self.admitted.levels.items():  # down to this job's priority
            if jv.priority <= level < top:
                for j in sorted(js - self.held):
                    self._take(j)
        self.level = jv.priority
        placed = try_place_job(self.p, jv, self.state, trials)
        if placed is None:
            return False
        give_back(self.state, placed)
        return True

    def placed(self, j: int) -> None:
        """Job ``j`` was placed on the free GPUs."""
        if self.state is not None and self.p.jobs[j].priority >= self.level:
            self._take(j)

    def changed(self) -> None:
        """A release search placed its job (and moved lower ones): built again when needed."""
        self.state, self.held = None, set()


def _over_lower(p: PlacementProblem, jv: JobView, lower: list[int], out: Assignment,
                state: State, ledger: QuotaLedger, admitted: _ByPriority, trials: int) -> bool:
    """Release the admitted jobs of lower priority, place ``jv`` and put the released jobs
    back where they still fit; or, when ``jv`` does not fit even so, put everything back as
    it was. Whether ``jv`` was placed."""
    released = {j: out.units.pop(j) for j in lower}
    admitted.discard(lower)
    for j, units in released.items():
        give_back(state, units)
        ledger.release(p.jobs[j], units)
    placed = _place_within_quota(p, jv, state, ledger, trials)
    if placed is None:  # no better: put everything back as it was
        for j, units in released.items():
            out.units[j] = units
            admitted.add(j)
            ledger.admit(p.jobs[j], units)
            for u in units:
                for node, gpus in u.pieces:
                    state.take(node, gpus)
        return False
    out.units[jv.index] = placed
    admitted.add(jv.index)
    for j in lower:  # the released jobs return where they still fit
        again = _place_within_quota(p, p.jobs[j], state, ledger, trials)
        if again is not None:
            out.units[j] = again
            admitted.add(j)
    return True


class _ByPriority:
    """Admitted job indices grouped by priority level (for :func:`fix_inversions`)."""

    def __init__(self, p: PlacementProblem, jobs: Iterable[int]):
        self.p = p
        self.levels: dict[int, set[int]] = defaultdict(set)
        for j in jobs:
            self.add(j)

    def add(self, j: int) -> None:
        self.levels[self.p.jobs[j].priority].add(j)

    def discard(self, jobs: Iterable[int]) -> None:
        for j in jobs:
            self.levels[self.p.jobs[j].priority].discard(j)

    def below(self, priority: int) -> list[int]:
        """Admitted jobs of lower priority, highest priority then largest first."""
        jobs = self.p.jobs
        found = [j for level, js in self.levels.items() if level < priority for j in js]
        return sorted(found, key=lambda j: (-jobs[j].priority, -jobs[j].gpus, j))
