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

import time
from collections import defaultdict

from hyperplace.formulations.explain import FitProbe
from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.formulations.placement import (
    DomainKey,
    JobView,
    NodeView,
    PlacementProblem,
    UnitClass,
)
from hyperplace.solvers.params import GreedyParams

_DEFAULTS = GreedyParams()


class State:
    """Free GPUs per node, with an index by leaf, type and free count."""

    def __init__(self, problem: PlacementProblem):
        self.p = problem
        self.free: dict[str, tuple[int, ...]] = {}
        # leaf -> type -> free count -> {node name: None} (insertion-ordered set)
        self.index: dict[DomainKey, dict[str, dict[int, dict[str, None]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(dict)))
        self.leaf_free: dict[DomainKey, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for n in problem.nodes:
            self.free[n.name] = n.free
            if n.free:
                self.index[n.leaf][n.gpu_type.name][len(n.free)][n.name] = None
                self.leaf_free[n.leaf][n.gpu_type.name] += len(n.free)

    def _set(self, n: NodeView, new: tuple[int, ...]) -> None:
        old = self.free[n.name]
        t = n.gpu_type.name
        if old:
            del self.index[n.leaf][t][len(old)][n.name]
        if new:
            self.index[n.leaf][t][len(new)][n.name] = None
        self.leaf_free[n.leaf][t] += len(new) - len(old)
        self.free[n.name] = new

    def take(self, node: str, gpus: tuple[int, ...]) -> None:
        """Mark ``gpus`` of ``node`` used."""
        n = self.p.node_by_name[node]
        self._set(n, tuple(g for g in self.free[node] if g not in gpus))

    def give(self, node: str, gpus: tuple[int, ...]) -> None:
        """Free ``gpus`` of ``node`` again."""
        n = self.p.node_by_name[node]
        self._set(n, tuple(sorted(self.free[node] + gpus)))


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


def _place_piece(p: PlacementProblem, jv: JobView, uc: UnitClass, size: int,
                 leaves: list[DomainKey], state: State, job_leaves: set[DomainKey]
                 ) -> tuple[str, tuple[int, ...]] | None:
    """Best fit among ``leaves``: the smallest free count that fits, the job's leaves first."""
    types = sorted(p.eligible_types(uc.gpu_types, uc.min_memory_gb),
                   key=lambda t: p.policy_penalty(p.types_present[t]))
    ordered = [leaf for leaf in leaves if leaf in job_leaves] + \
              [leaf for leaf in leaves if leaf not in job_leaves]
    top = p.max_gpus_per_node
    for f in range(size, top + 1):
        for partly in (True, False):
            for leaf in ordered:
                by_type = state.index.get(leaf)
                if not by_type:
                    continue
                for t in types:
                    bucket = by_type.get(t, {}).get(f)
                    if not bucket:
                        continue
                    for name in bucket:
                        n = p.node_by_name[name]
                        if not p.node_eligible(jv, uc, n):
                            continue
                        if partly and n.fully_free and f == len(n.free):
                            continue
                        if not partly and not (n.fully_free and f == len(n.free)):
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
        free = sum(state.leaf_free[leaf][t] for leaf in leaves for t in types if leaf in state.leaf_free)
        if free < jv.gpus:
            continue
        if spans and jv.min_ib_gbps:
            # slower nodes are not eligible (link_eligible); the rest must be joined fast enough
            nodes = [n for leaf in leaves for n in p.nodes_by_leaf[leaf]
                     if (n.attach_gbps or 0) >= jv.min_ib_gbps]
            if p.domain_bandwidth(nodes) < jv.min_ib_gbps:
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
    leaf_set = set(leaves)

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
            candidates = [leaves]
            if uc.multi_node and uc.hop_limit is not None:
                sub = [[leaf for leaf in ls if leaf in leaf_set]
                       for ls in p.leaves_by_domain(uc.hop_limit, False).values()]
                types = p.eligible_types(uc.gpu_types, uc.min_memory_gb)
                sub = [ls for ls in sub if sum(state.leaf_free[leaf][t] for leaf in ls for t in types) >= uc.size]
                candidates = sorted(sub, key=lambda ls: sum(state.leaf_free[leaf][t] for leaf in ls for t in types))
            done = None
            for cand in candidates:
                pieces: list[tuple[str, tuple[int, ...]]] = []
                for size in uc.pieces:
                    got = _place_piece(p, jv, uc, size, cand, state, job_leaves)
                    if got is None:
                        break
                    state.take(*got)
                    pieces.append(got)
                if len(pieces) == len(uc.pieces):
                    done = pieces
                    break
                for node, gpus in pieces:
                    state.give(node, gpus)
            if done is None:
                undo()
                return None
            taken.extend(done)
            for node, _ in done:
                job_leaves.add(p.node_by_name[node].leaf)
            units.append(PlacedUnit(uc.index, u.name, done))
    return units


def job_orders(p: PlacementProblem) -> list[list[JobView]]:
    """Two passes, both highest priority first: largest jobs first (packs big gangs before
    small ones fragment the domains), and queue order (what the peers do, which often admits
    more small jobs). The better of the two is kept."""
    return [sorted(p.jobs, key=lambda j: (-j.priority, -j.gpus, j.index)),
            sorted(p.jobs, key=lambda j: (-j.priority, j.index))]


def _score(p: PlacementProblem, a: Assignment) -> tuple[int, int]:
    """Objective (1) and its tie-breaker: priority-weighted admitted GPUs, admitted jobs."""
    return (sum(p.weights[p.jobs[j].priority] * p.jobs[j].gpus for j in a.units), len(a.units))


def _one_pass(p: PlacementProblem, order: list[JobView], params: GreedyParams,
              deadline: float | None = None) -> Assignment:
    state = State(p)
    out = Assignment()
    for jv in order:
        if deadline is not None and time.perf_counter() > deadline:
            break  # out of time: the jobs not reached stay pending (all of lower priority)
        placed = try_place_job(p, jv, state, params.max_domain_trials)
        if placed is not None:
            out.units[jv.index] = placed
    return out


def solve_greedy(p: PlacementProblem, params: GreedyParams | None = None,
                 deadline: float | None = None) -> Assignment:
    """Greedy's plan: the better of :func:`job_orders`' two passes, then the priority repair.

    Parameters
    ----------
    p : PlacementProblem
        The round.
    params : GreedyParams, optional
        Domains tried per job.
    deadline : float, optional
        A ``time.perf_counter()`` value: a pass stops placing jobs there (the plan stays
        valid; jobs not reached stay pending), and the second pass is skipped when the
        first one's time no longer fits before it.
    """
    params = params or _DEFAULTS
    passes: list[Assignment] = []
    passes_started = 0.0  # set when the first pass begins
    for order in job_orders(p):
        begun = time.perf_counter()
        if passes and deadline is not None and \
                deadline - begun < (begun - passes_started) * 1.2:
            break
        if not passes:
            passes_started = begun
        passes.append(_one_pass(p, order, params, deadline))
    best = max(passes, key=lambda a: _score(p, a))
    return repair_priority(p, best, params, deadline)


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


def repair_priority(p: PlacementProblem, a: Assignment,
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
    out = Assignment(units=dict(a.units), notes=dict(a.notes))
    state = State(p)
    for units in out.units.values():
        for u in units:
            for node, gpus in u.pieces:
                state.take(node, gpus)
    pending = sorted((jv for jv in p.jobs if jv.index not in out.units and not jv.impossible),
                     key=lambda j: (-j.priority, -j.gpus, j.index))
    for jv in pending:
        if deadline is not None and time.perf_counter() > deadline:
            break
        if jv.index in out.units:
            continue
        placed = try_place_job(p, jv, state, trials)
        if placed is not None:
            out.units[jv.index] = placed
            continue
        lower = sorted((j for j in out.units if p.jobs[j].priority < jv.priority),
                       key=lambda j: (-p.jobs[j].priority, -p.jobs[j].gpus, j))
        if not lower:
            continue
        released = {j: out.units.pop(j) for j in lower}
        for units in released.values():
            for u in units:
                for node, gpus in u.pieces:
                    state.give(node, gpus)
        placed = try_place_job(p, jv, state, trials)
        if placed is None:  # no better: put everything back as it was
            for j, units in released.items():
                out.units[j] = units
                for u in units:
                    for node, gpus in u.pieces:
                        state.take(node, gpus)
            continue
        out.units[jv.index] = placed
        for j in lower:  # the released jobs return where they still fit
            again = try_place_job(p, p.jobs[j], state, trials)
            if again is not None:
                out.units[j] = again
    return out
