"""Independent checker for over-time schedules (:mod:`hyperplace.solvers.schedule`).

It recomputes from the instance, not from the schedule model: for every pool a schedule
uses (its nodes and GPU type, as the schedule names them), the usable GPUs of those nodes
(``gpu_count`` minus failed GPUs, of that type); a job's demand in it (its GPUs, whole nodes
when it needs one or more nodes); which pools lie inside which (node subsets of the same type,
or any type for a mixed pool). Then at every time a job starts or a running job ends, the jobs
running then in a pool and every pool inside it, with the running jobs' GPUs on its nodes,
must fit its usable GPUs, and the gangs running then (jobs of a node or more) must fit the
pool's whole nodes that no running job holds any more. It also checks that every pending job has an entry, that a
scheduled job's pool accepts its GPU types, and that starts are not in the past.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hyperplace.check.placement import Violation
from hyperplace.models import Instance, TrainingJob


@dataclass(frozen=True)
class SlotView:
    """A scheduled job as the schedule states it."""

    job: str
    nodes: frozenset[str]
    gpu_type: str | None
    start_s: float | None
    end_s: float | None


def check_schedule(instance: Instance, pending: list[TrainingJob], slots: list[SlotView],
                   running: dict[str, tuple[list[tuple[str, int]], float]], now: float,
                   ) -> list[Violation]:
    """Violations of the schedule ``slots`` (see the module docstring).

    ``running``: job -> (GPUs it holds, predicted end time)."""
    out: list[Violation] = []
    nodes = {n.name: n for c in instance.clusters for n in c.nodes}
    by_job = {s.job: s for s in slots}
    jobs = {j.name: j for j in pending}
    for j in pending:
        if j.name not in by_job:
            out.append(Violation(code="schedule-missing", job=j.name,
                                 message="pending job has no schedule entry (no forecast)"))
    catalog = instance.catalog
    placed = [s for s in slots if s.start_s is not None]
    for s in placed:
        if s.job not in jobs:
            out.append(Violation(code="schedule-unknown", job=s.job,
                                 message="scheduled job is not pending"))
            continue
        if s.start_s < now - 1e-6:
            out.append(Violation(code="schedule-past", job=s.job,
                                 message=f"starts at {s.start_s:g}, before now ({now:g})"))
        if s.end_s is None or s.end_s <= s.start_s:
            out.append(Violation(code="schedule-length", job=s.job,
                                 message="scheduled without a positive length"))
        types = {nodes[n].gpu_type for n in s.nodes if n in nodes}
        if s.gpu_type is not None and types != {s.gpu_type}:
            out.append(Violation(code="schedule-pool", job=s.job,
                                 message=f"pool of type {s.gpu_type} holds {sorted(types)}"))
        for u in jobs[s.job].units():
            if u.gpu_types is None:
                continue
            allowed = {t for t in types if catalog.get(t).matches(u.gpu_types)}
            if s.gpu_type is not None and s.gpu_type not in allowed:
                out.append(Violation(code="schedule-type", job=s.job,
                                     message=f"{s.gpu_type} not accepted ({u.gpu_types})"))
                break
    placed = [s for s in placed if s.job in jobs]

    def typed(pool_nodes: frozenset[str], t: str | None) -> list[str]:
        return [n for n in pool_nodes if n in nodes and (t is None or nodes[n].gpu_type == t)]

    def demand(s: SlotView) -> int:
        g = jobs[s.job].total_gpus
        ns = typed(s.nodes, s.gpu_type)
        per = max((nodes[n].gpu_count for n in ns), default=1)
        return g if g < per else math.ceil(g / per) * per

    pools = {(s.nodes, s.gpu_type) for s in placed}
    for pn, pt in pools:
        inside = [s for s in placed if s.nodes <= pn and (pt is None or s.gpu_type == pt)]
        members = typed(pn, pt)
        member_set = set(members)
        cap = sum(nodes[n].gpu_count - len(set(nodes[n].faulty)) for n in members)
        run = [(sum(1 for n, _ in gpus if n in member_set), end)
               for gpus, end in running.values()]
        run = [(g, e) for g, e in run if g]
        whole = [n for n in members if not nodes[n].faulty]
        node_end: dict[str, float] = {}
        for gpus, end in running.values():
            for n, _ in gpus:
                if n in member_set:
                    node_end[n] = max(node_end.get(n, 0.0), end)
        times = sorted({s.start_s for s in inside})
        name = f"{pt or 'any type'} on {len(members)} nodes"
        for t in times:
            live = [s for s in inside if s.start_s <= t + 1e-6 < s.end_s]
            used = sum(demand(s) for s in live)
            used += sum(g for g, e in run if e > t + 1e-6)
            if used > cap:
                out.append(Violation(code="schedule-capacity",
                                     message=f"pool {name}: {used} GPUs at t={t:g} over its "
                                             f"{cap} usable"))
                break
            # gangs take whole nodes: those with no running job left on them
            gang = sum(demand(s) // max(1, max(nodes[n].gpu_count for n in members))
                       for s in live if jobs[s.job].total_gpus >= max(
                           nodes[n].gpu_count for n in members))
            free_whole = sum(1 for n in whole if node_end.get(n, -1.0) <= t + 1e-6)
            if gang > free_whole:
                out.append(Violation(code="schedule-whole-nodes",
                                     message=f"pool {name}: gangs need {gang} whole nodes at "
                                             f"t={t:g}, {free_whole} are free of running jobs"))
                break
    return out
