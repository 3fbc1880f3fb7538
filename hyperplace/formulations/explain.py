"""Why a job stayed pending, in words a person can act on."""

from __future__ import annotations

from collections import defaultdict

from hyperplace.formulations.mapping import Assignment
from hyperplace.formulations.placement import JobView, PlacementProblem


def _hop_words(h: int | None) -> str:
    return "anywhere in one cluster" if h is None else f"maxHopCount {h}"


def explain(p: PlacementProblem, assignment: Assignment) -> dict[int, list[str]]:
    """Reasons for every job the assignment leaves out (job index -> reasons)."""
    from hyperplace.solvers.greedy import State, try_place_job

    used = assignment.used()
    out: dict[int, list[str]] = {}
    for jv in p.jobs:
        if jv.index in assignment.units:
            continue
        reasons = list(jv.impossible)
        if jv.index in assignment.notes:
            reasons.append(f"dropped when mapping to GPUs: {assignment.notes[jv.index]}")
        if not reasons:
            reasons = _static_reasons(p, jv)
        if not reasons:
            reasons = _contention(p, jv, assignment, used, State, try_place_job)
        out[jv.index] = reasons
    return out


def _static_reasons(p: PlacementProblem, jv: JobView) -> list[str]:
    """Reasons that hold on an empty round: the request cannot fit the free GPUs at all."""
    reasons: list[str] = []
    for uc in jv.classes:
        eligible = [n for n in p.nodes if p.type_ok(uc.gpu_types, uc.min_memory_gb, n)]
        sel = uc.gpu_types or "any"
        if not eligible:
            have = defaultdict(int)
            for n in p.nodes:
                have[n.gpu_type.name] += n.node.gpu_count
            kinds = ", ".join(f"{t} x{c}" for t, c in sorted(have.items()))
            reasons.append(f"group {uc.group} needs {sel} GPUs with >= {uc.min_memory_gb:g} GB; "
                           f"the cluster has none (it has {kinds})")
            continue
        free = sum(len(n.free) for n in eligible)
        need = uc.size * uc.count
        if free < need:
            reasons.append(f"group {uc.group} needs {need} {sel} GPUs; {free} are free")
            continue
        piece = uc.pieces[0]
        best_n, best = None, 0
        for n in eligible:
            if uc.multi_node and uc.min_nvlink_gbps and n.uniform_gbps is None:
                continue
            k = n.max_disjoint(piece, uc.min_nvlink_gbps) * piece
            k = min(k, piece) if k else _largest_clique(n, uc.min_nvlink_gbps)
            if k > best:
                best_n, best = n, k
        if best < piece:
            where = f" on node {best_n.name}" if best_n else ""
            bw = f" with >= {uc.min_nvlink_gbps:g} GB/s between every pair" if uc.min_nvlink_gbps else ""
            reasons.append(f"needs {piece}x{sel} in one NVLink domain{bw}; the largest such free "
                           f"set is {best} GPUs{where}")
    if reasons:
        return reasons
    # whole job in one domain of its hop limit
    by_dom: dict[str, int] = defaultdict(int)
    for n in p.nodes:
        if any(p.type_ok(uc.gpu_types, uc.min_memory_gb, n) for uc in jv.classes):
            by_dom[p.domain(n, jv.hop_limit, job_level=True)] += len(n.free)
    if by_dom and max(by_dom.values()) < jv.gpus:
        d, f = max(by_dom.items(), key=lambda t: t[1])
        shape = " + ".join(f"{uc.count}x{uc.size}" for uc in jv.classes)
        reasons.append(f"gang of {shape} GPUs within {_hop_words(jv.hop_limit)}: the largest such "
                       f"domain ({d}) has {f} free eligible GPUs")
    return reasons


def _largest_clique(n, min_gbps: float) -> int:
    for size in range(len(n.free), 0, -1):
        if n.max_disjoint(size, min_gbps) >= 1:
            return size
    return 0


def _contention(p, jv, assignment, used, State, try_place_job) -> list[str]:
    alone = State(p)
    if try_place_job(p, jv, alone, max_trials=1000) is None:
        shape = " + ".join(f"{uc.count}x{uc.size}" for uc in jv.classes)
        return [f"fragmented: enough eligible GPUs are free, but not as {shape} GPUs meeting the "
                f"NVLink and {_hop_words(jv.hop_limit)} constraints together"]
    # it fits alone: who holds the GPUs it could have used?
    mine = {n.name for n in p.nodes if any(p.type_ok(uc.gpu_types, uc.min_memory_gb, n) for uc in jv.classes)}
    rivals = []
    for j, units in assignment.units.items():
        if any(node in mine for u in units for node, _ in u.pieces):
            rivals.append(p.jobs[j])
    rivals.sort(key=lambda r: (-r.priority, -r.gpus))
    if not rivals:
        return ["not admitted within the time budget (it fits alone; try a larger budget)"]
    names = ", ".join(f"{r.name} (priority {r.priority}, {r.gpus} GPUs)" for r in rivals[:3])
    more = f" and {len(rivals) - 3} more" if len(rivals) > 3 else ""
    lower = [r for r in rivals if r.priority < jv.priority]
    verb = "outranked by" if not lower else "left out in favour of"
    return [f"{verb} {names}{more}, which took the GPUs it fits on; it fits alone on the free GPUs"]
