"""What a plan does with multi-node NVLink domains (#24), for the bench's NVL72 tables.

Read from the plan and the instance alone (any scheduler's plan): of the admitted jobs with a
TP or EP unit on more than one tray, how many keep every such unit inside one NVLink domain
(its all-to-all / all-reduce on NVLink, not the fabric); how many racks are whole free after
the plan (for the jobs that need a rack); how many racks keep at least one whole free tray
(a spare: a failed tray can be replaced inside the rack).
"""

from __future__ import annotations

from dataclasses import dataclass

from hyperplace.models import Instance, PlacementPlan
from hyperplace.models.job import GroupType

_MODEL_PARALLEL = (GroupType.TENSOR_PARALLEL, GroupType.EXPERT_PARALLEL)


@dataclass(frozen=True)
class NVLinkMetrics:
    jobs_multi_tray: int   # admitted jobs with a TP/EP unit on more than one node
    jobs_in_one_domain: int  # ... whose every such unit lies in one NVLink domain
    racks: int
    racks_whole_before: int
    racks_whole_after: int
    racks_with_spare_before: int
    racks_with_spare_after: int


def nvlink_metrics(plan: PlacementPlan, instance: Instance) -> NVLinkMetrics | None:
    """The figures above, or None for an instance without multi-node NVLink domains."""
    domain_of: dict[str, str] = {}
    racks: list[tuple[str, list[tuple[str, int, bool]]]] = []
    for c in instance.clusters:
        net = c.network
        for d in net.nvlink_domains:
            trays = []
            for n in d.nodes:
                node = c.node_by_name[n]
                domain_of[n] = f"{c.name}/{d.name}"
                trays.append((n, node.gpu_count, not node.allocated and not node.faulty))
            racks.append((f"{c.name}/{d.name}", trays))
    if not racks:
        return None
    used: dict[str, int] = {}
    kinds = {}
    for j in instance.jobs:
        kinds[j.name] = {u.name: u.group_type for u in j.units()}
    multi = ok = 0
    by_job: dict[str, list[set[str]]] = {}
    for p in plan.placements:
        for g in p.gpus:
            used[g.node] = used.get(g.node, 0) + 1
        nodes = {g.node for g in p.gpus}
        if len(nodes) > 1 and kinds.get(p.job, {}).get(p.unit) in _MODEL_PARALLEL:
            by_job.setdefault(p.job, []).append({domain_of.get(n, f"node:{n}") for n in nodes})
    admitted = set(plan.admitted)
    for job, units in by_job.items():
        if job in admitted and any(n in domain_of for u in units for n in u) or \
                job in admitted and any(d in {r for r, _ in racks} for u in units for d in u):
            multi += 1
            ok += all(len(u) == 1 and next(iter(u)) in {r for r, _ in racks} for u in units)
    whole_before = sum(all(w for _, _, w in trays) for _, trays in racks)
    whole_after = sum(all(w and n not in used for n, _, w in trays) for _, trays in racks)
    spare_before = sum(any(w for _, _, w in trays) for _, trays in racks)
    spare_after = sum(any(w and n not in used for n, _, w in trays) for _, trays in racks)
    return NVLinkMetrics(multi, ok, len(racks), whole_before, whole_after, spare_before,
                         spare_after)
