"""Why a job stayed pending, in words a person can act on."""

from __future__ import annotations

from collections import defaultdict

from hyperplace.formulations.mapping import Assignment
from hyperplace.formulations.placement import JobView, NodeView, PlacementProblem, UnitClass

# Past this many pending jobs, the "does it fit alone?" probe is skipped (it costs a greedy
# trial per job); the static reasons are still given.
MAX_CONTENTION_PROBES = 400


def _hop_words(h: int | None) -> str:
    return "anywhere in one cluster" if h is None else f"maxHopCount {h}"


class _Facts:
    """Aggregates of the round's initial free state, computed once."""

    def __init__(self, p: PlacementProblem):
        self.p = p
        self.free_by_type: dict[str, int] = defaultdict(int)
        self.nodes_by_type: dict[str, list[NodeView]] = defaultdict(list)
        for n in p.nodes:
            self.free_by_type[n.gpu_type.name] += len(n.free)
            self.nodes_by_type[n.gpu_type.name].append(n)
        self._clique: dict[tuple, tuple[int, NodeView | None]] = {}
        self._domains: dict[tuple, dict[str, int]] = {}

    def largest_clique(self, types: frozenset[str], piece: int, bw: float, multi: bool,
                       parts: tuple[int, ...] | None = None) -> tuple[int, NodeView | None]:
        key = (types, piece, bw, multi, parts)
        if key not in self._clique:
            best, where = 0, None
            for t in types:
                for n in self.nodes_by_type[t]:
                    if multi and bw and n.uniform_gbps is None:
                        continue
                    if n.max_disjoint(piece, bw, parts=parts) >= 1:
                        k = piece
                    elif n.uniform_gbps is not None:
                        k = len(n.free) if (n.uniform_gbps >= bw or len(n.free) <= 1) else min(1, len(n.free))
                    else:
                        k = next((s for s in range(len(n.free), 0, -1) if n.max_disjoint(s, bw) >= 1), 0)
                    if k > best:
                        best, where = k, n
                    if best >= piece:
                        break
                if best >= piece:
                    break
            self._clique[key] = (best, where)
        return self._clique[key]

    def domain_free(self, types: frozenset[str], hop: int | None) -> dict[str, int]:
        key = (types, hop)
        if key not in self._domains:
            out: dict[str, int] = defaultdict(int)
            for t in types:
                for n in self.nodes_by_type[t]:
                    out[self.p.domain(n, hop, job_level=True)] += len(n.free)
            self._domains[key] = dict(out)
        return self._domains[key]


def explain(p: PlacementProblem, assignment: Assignment, deadline: float | None = None
            ) -> dict[int, list[str]]:
    """Reasons for every job the assignment leaves out (job index -> reasons).

    The per-job "does it fit alone?" probe stops at ``deadline`` (a ``time.perf_counter``
    value) so that explanations never break a solve's budget; later jobs then get the
    static reasons or a generic one.
    """
    import time

    from hyperplace.solvers.greedy import State, try_place_job

    facts = _Facts(p)
    rivals_by_types: dict[frozenset[str], list[JobView]] = {}
    out: dict[int, list[str]] = {}
    probe_state: State | None = None
    probes = 0
    for jv in p.jobs:
        if jv.index in assignment.units:
            continue
        reasons = list(jv.impossible)
        if jv.index in assignment.notes:
            reasons.append(f"dropped when mapping to GPUs: {assignment.notes[jv.index]}")
        if not reasons:
            reasons = _static_reasons(p, facts, jv)
        if not reasons:
            if probes < MAX_CONTENTION_PROBES and (deadline is None or time.perf_counter() < deadline):
                probes += 1
                probe_state = probe_state or State(p)
                placed = try_place_job(p, jv, probe_state, max_trials=1000)
                if placed is not None:
                    for u in placed:
                        for node, gpus in u.pieces:
                            probe_state.give(node, gpus)
                    reasons = _contention(p, jv, assignment, rivals_by_types)
                else:
                    shape = " + ".join(f"{uc.count}x{uc.size}" for uc in jv.classes)
                    reasons = [f"fragmented: enough eligible GPUs are free, but not as {shape} "
                               f"GPUs meeting the NVLink and {_hop_words(jv.hop_limit)} "
                               "constraints together"]
            else:
                reasons = ["not admitted: the GPUs it could use went to other jobs this round "
                           "(per-job analysis skipped in very large queues)"]
        out[jv.index] = reasons
    return out


def _static_reasons(p: PlacementProblem, facts: _Facts, jv: JobView) -> list[str]:
    """Reasons that hold on an empty round: the request cannot fit the free GPUs at all."""
    reasons: list[str] = []
    for uc in jv.classes:
        types = p.eligible_types(uc.gpu_types, uc.min_memory_gb)
        sel = uc.gpu_types or "any"
        if not types:
            have = defaultdict(int)
            for n in p.nodes:
                have[n.gpu_type.name] += n.node.gpu_count
            kinds = ", ".join(f"{t} x{c}" for t, c in sorted(have.items()))
            has = f"it has {kinds}" if kinds else "it has no GPUs at all"
            reasons.append(f"group {uc.group} needs {sel} GPUs with >= {uc.min_memory_gb:g} GB; "
                           f"the cluster has none ({has})")
            continue
        free = sum(facts.free_by_type[t] for t in types)
        need = uc.size * uc.count
        if free < need:
            reasons.append(f"group {uc.group} needs {need} {sel} GPUs; {free} are free")
            continue
        reasons.extend(_nvlink_reason(facts, uc, types, sel))
    if reasons:
        return reasons
    types = frozenset().union(*(p.eligible_types(uc.gpu_types, uc.min_memory_gb) for uc in jv.classes))
    by_dom = facts.domain_free(types, jv.hop_limit)
    if by_dom and max(by_dom.values()) < jv.gpus:
        d, f = max(by_dom.items(), key=lambda t: t[1])
        shape = " + ".join(f"{uc.count}x{uc.size}" for uc in jv.classes)
        reasons.append(f"gang of {shape} GPUs within {_hop_words(jv.hop_limit)}: the largest such "
                       f"domain ({d}) has {f} free eligible GPUs")
    return reasons


def _nvlink_reason(facts: _Facts, uc: UnitClass, types: frozenset[str], sel: str) -> list[str]:
    piece = uc.pieces[0]
    best, where = facts.largest_clique(types, piece, uc.min_nvlink_gbps, uc.multi_node, uc.parts)
    if best >= piece:
        return []
    on = f" on node {where.name}" if where else ""
    bw = f" with >= {uc.min_nvlink_gbps:g} GB/s between every pair" if uc.min_nvlink_gbps else ""
    return [f"needs {piece}x{sel} in one NVLink domain{bw}; the largest such free set is "
            f"{best} GPUs{on}"]


def _contention(p: PlacementProblem, jv: JobView, assignment: Assignment,
                cache: dict[frozenset[str], list[JobView]]) -> list[str]:
    types = frozenset().union(*(p.eligible_types(uc.gpu_types, uc.min_memory_gb) for uc in jv.classes))
    if types not in cache:
        found = [p.jobs[j] for j, units in assignment.units.items()
                 if any(p.node_by_name[node].gpu_type.name in types
                        for u in units for node, _ in u.pieces)]
        cache[types] = sorted(found, key=lambda r: (-r.priority, -r.gpus))
    rivals = cache[types]
    if not rivals:
        return ["not admitted within the time budget (it fits alone; try a larger budget)"]
    # name the jobs at the same or a higher priority first: they are the ones that outrank it
    ranked = [r for r in rivals if r.priority >= jv.priority] or rivals
    names = ", ".join(f"{r.name} (priority {r.priority}, {r.gpus} GPUs)" for r in ranked[:3])
    more = f" and {len(ranked) - 3} more" if len(ranked) > 3 else ""
    verb = "outranked by" if ranked[0].priority >= jv.priority else "left out in favour of"
    return [f"{verb} {names}{more}, which took the {'/'.join(sorted(types))} GPUs it needs; "
            "it fits alone on this round's free GPUs"]
