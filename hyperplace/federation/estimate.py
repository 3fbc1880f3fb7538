"""Karmada's scheduler-estimator question, answered as placed.

Karmada asks every member cluster "how many replicas of this workload fit?" and divides
replicas by the answers. Its general estimator answers from the cluster's resource totals
(``pkg/estimator/client/general.go:465``: ``floor(available / request)`` per resource) and,
for workloads of several templates, per component set from the summed requirement
(``general.go:158``); it cannot see that the free GPUs are scattered over nodes, NVLink
domains or leaves (karmada issue 521), nor that templates differ (issue 4049).

:func:`estimate` gives both figures per cluster: the totals-based one, and the number of
complete replicas (one unit of every template: a component set) and of units per template
that the placement engine places now on that cluster's free GPUs, each answer verified by
the checker; and, when they differ, the reason.
"""

from __future__ import annotations

from collections import Counter

from hyperplace.federation.asplaced import Prober, free_gpus, locations
from hyperplace.federation.karmada import totals_estimate
from hyperplace.federation.problem import FederatedJob
from hyperplace.models.federation import ClusterEstimate, EstimateReport, TemplateEstimate
from hyperplace.models.instance import Instance

# Estimates count replicas up to this many (Karmada's answers are int32; ours cost probes).
MAX_ESTIMATE = 4096


def _reason(job: FederatedJob, instance: Instance, cluster: str, gpu_types: list[str],
            totals: int, placed: int) -> str:
    if placed >= totals:
        return ""
    c = next(x for x in instance.clusters if x.name == cluster)
    blocks = Counter(n.free_count for n in c.nodes if n.gpu_type in gpu_types and n.free_count)
    largest = max(blocks, default=0)
    unit = max(job.unit_gpus(p) for p in range(job.stages))
    histogram = ", ".join(f"{k} node{'s' if k > 1 else ''} with {free} free"
                          for free, k in sorted(blocks.items(), reverse=True))
    if largest < min(unit, max(n.gpu_count for n in c.nodes)):
        return (f"the totals count {sum(f * k for f, k in blocks.items())} free GPUs, but a "
                f"unit needs {unit} GPUs inside one NVLink node and no node has that many free "
                f"({histogram})")
    return (f"the totals count whole-cluster GPUs; placed, the units' NVLink, memory and hop "
            f"requirements leave room for {placed} replica(s) ({histogram})")


def estimate(instance: Instance, job: FederatedJob, *, cap: int = MAX_ESTIMATE
             ) -> EstimateReport:
    """Per member cluster: replicas by totals vs as placed, units per template, and why."""
    prober = Prober(instance)
    catalog = instance.catalog
    out = []
    for c in instance.clusters:
        locs = locations(instance, job, [c.name], catalog)
        types = [loc.gpu_type for loc in locs]
        free = sum(free_gpus(c, t) for t in types)
        totals = totals_estimate(free, job.replica_gpus)
        placed = sum(prober.max_replicas(job, loc, cap=cap) for loc in locs)
        templates = []
        for k, g in enumerate(job.stage_groups):
            templates.append(TemplateEstimate(
                template=g.name, gpus_per_unit=g.gpus_per_group, units_per_set=1,
                totals_units=totals_estimate(free, g.gpus_per_group),
                placed_units=sum(prober.max_replicas(job, loc, positions=(k,), cap=cap)
                                 for loc in locs)))
        reason = _reason(job, instance, c.name, types, totals, placed) if locs else \
            f"no GPU type the job accepts ({job.type_selector() or 'any'})"
        out.append(ClusterEstimate(cluster=c.name, gpu_types=types, free_gpus=free,
                                   totals_replicas=totals, placed_replicas=placed,
                                   templates=templates, reason=reason))
    return EstimateReport(instance=instance.name, job=job.name, replica_gpus=job.replica_gpus,
                          replicas_wanted=job.replicas, clusters=out)
