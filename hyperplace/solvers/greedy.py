"""Topology-aware best fit: the answer that is always there, and the warm start for CP-SAT.

Jobs go in priority order (then larger first, then queue order). For each job the rule tries
the domains its ``maxHopCount`` allows, tightest first, places multi-node units before single
ones and every piece on the eligible node it fills best (partly used nodes, then the job's
own leaf, then the policy's preferred type). A job is admitted only if every unit fits (gang).
"""

from __future__ import annotations

from collections import defaultdict

from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.formulations.placement import JobView, NodeView, PlacementProblem, UnitClass

MAX_DOMAIN_TRIALS = 6


class State:
    """Free GPUs left per node during a greedy pass."""

    def __init__(self, problem: PlacementProblem):
        self.free: dict[str, tuple[int, ...]] = {n.name: n.free for n in problem.nodes}

    def take(self, node: str, gpus: tuple[int, ...]) -> None:
        self.free[node] = tuple(g for g in self.free[node] if g not in gpus)

    def give(self, node: str, gpus: tuple[int, ...]) -> None:
        self.free[node] = tuple(sorted(self.free[node] + gpus))


def _pick_gpus(n: NodeView, size: int, min_gbps: float, free: tuple[int, ...]
               ) -> tuple[int, ...] | None:
    if n.uniform_gbps is not None:
        if size > 1 and n.uniform_gbps < min_gbps:
            return None
        return free[:size] if len(free) >= size else None
    best, best_left = None, -1
    for c in n.cliques(size, min_gbps if size > 1 else 0, free):
        rest = tuple(g for g in free if g not in c)
        left = n.max_disjoint(size, min_gbps, rest) if rest else 0
        if left > best_left:
            best, best_left = c, left
    return best


def _place_piece(p: PlacementProblem, uc: UnitClass, size: int, nodes: list[NodeView],
                 state: State, job_leaves: set[str], spans: bool, min_ib: float
                 ) -> tuple[str, tuple[int, ...]] | None:
    best = None
    best_key = None
    for n in nodes:
        free = state.free[n.name]
        if len(free) < size or not p.type_ok(uc.gpu_types, uc.min_memory_gb, n):
            continue
        if spans and min_ib and (n.attach_gbps or 0) < min_ib:
            continue
        if uc.multi_node and uc.min_nvlink_gbps and n.uniform_gbps is None:
            continue
        key = (
            len(free) - size,  # best fit
            0 if n.leaf in job_leaves else 1,
            0 if len(free) < n.node.gpu_count else 1,  # partly used nodes first
            p.policy_penalty(n.gpu_type),
            n.index,
        )
        if best_key is not None and key >= best_key:
            continue
        gpus = _pick_gpus(n, size, uc.min_nvlink_gbps, free)
        if gpus is None:
            continue
        best, best_key = (n.name, gpus), key
    return best


def try_place_job(p: PlacementProblem, jv: JobView, state: State,
                  max_trials: int = MAX_DOMAIN_TRIALS) -> list[PlacedUnit] | None:
    """Place a whole job on ``state`` (mutating it) or return None and leave it unchanged."""
    if jv.impossible:
        return None
    spans = p.needs_fabric(jv)
    domains: dict[str, list[NodeView]] = defaultdict(list)
    for n in p.nodes:
        if state.free[n.name] and any(p.type_ok(uc.gpu_types, uc.min_memory_gb, n) for uc in jv.classes):
            domains[p.domain(n, jv.hop_limit, job_level=True)].append(n)
    scored = []
    for d, nodes in domains.items():
        free = sum(len(state.free[n.name]) for n in nodes)
        if free < jv.gpus:
            continue
        if spans and jv.min_ib_gbps and p.domain_bandwidth(nodes) < jv.min_ib_gbps:
            continue
        scored.append((free, d))
    scored.sort()
    for _, d in scored[:max_trials]:
        placed = _try_domain(p, jv, domains[d], state)
        if placed is not None:
            return placed
    return None


def _try_domain(p: PlacementProblem, jv: JobView, nodes: list[NodeView], state: State
                ) -> list[PlacedUnit] | None:
    taken: list[tuple[str, tuple[int, ...]]] = []
    units: list[PlacedUnit] = []
    job_leaves: set[str] = set()
    spans = p.needs_fabric(jv)

    def undo() -> None:
        for node, gpus in taken:
            state.give(node, gpus)

    for uc in sorted(jv.classes, key=lambda c: (-len(c.pieces), -c.size)):
        if uc.group == "(whole job)":
            got = _place_piece(p, uc, uc.size, nodes, state, job_leaves, spans, jv.min_ib_gbps)
            if got is None:
                undo()
                return None
            state.take(*got)
            taken.append(got)
            start = 0
            for u in uc.units:
                units.append(PlacedUnit(uc.index, u.name, [(got[0], got[1][start:start + u.gpus])]))
                start += u.gpus
            continue
        for u in uc.units:
            candidates = [nodes]
            if uc.multi_node and uc.hop_limit is not None:
                sub: dict[str, list[NodeView]] = defaultdict(list)
                for n in nodes:
                    sub[p.domain(n, uc.hop_limit)].append(n)
                candidates = sorted(sub.values(), key=lambda ns: sum(len(state.free[n.name]) for n in ns))
            done = None
            for cand in candidates:
                pieces: list[tuple[str, tuple[int, ...]]] = []
                for size in uc.pieces:
                    got = _place_piece(p, uc, size, cand, state, job_leaves, spans, uc.min_ib_gbps)
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


def job_order(p: PlacementProblem) -> list[JobView]:
    return sorted(p.jobs, key=lambda j: (-j.priority, -j.gpus, j.index))


def solve_greedy(p: PlacementProblem) -> Assignment:
    state = State(p)
    out = Assignment()
    for jv in job_order(p):
        placed = try_place_job(p, jv, state)
        if placed is not None:
            out.units[jv.index] = placed
    return out
