"""What a plan is worth, in numbers that can be compared across solvers and baselines.

Why these: the objective each solver reports is its own; the bench needs one yardstick
computed the same way for every plan. Admitted demand is weighted with the same
lexicographic priority weights the engine optimises (``models.priority``), so "more"
means "better for the priority rule", not just more GPUs. Communication is measured as
hop counts over node pairs (multi-node units, multi-node jobs); fragmentation as what is
left whole (free nodes, free leaf domains) for the next large job.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import combinations
from statistics import mean

from pydantic import BaseModel, ConfigDict, Field

from hyperplace.check import Violation, check
from hyperplace.models.priority import priority_weights, weighted_demand
from hyperplace.models import Instance, PlacementPlan


class PlanMetrics(BaseModel):
    model_config = ConfigDict(frozen=True)

    admitted_weighted_demand: int
    useful_weighted_demand: int = Field(
        description="the same, counting only jobs with no checker violation of their own")
    admitted_jobs: int
    usefully_admitted_jobs: int
    admitted_gpus: int
    admitted_gpus_by_priority: dict[int, int]
    pending_jobs: int
    unit_hops_mean: float | None = Field(
        description="mean over multi-node units of the mean hop count over their node pairs")
    unit_hops_max: int | None
    job_hops_mean: float | None = Field(
        description="mean over multi-node jobs of the mean hop count over their node pairs")
    job_hops_max: int | None
    leaf_domains_per_job: float | None = Field(
        description="mean number of hop-1 (leaf switch) domains an admitted job touches")
    whole_free_nodes: int = Field(description="nodes with every GPU free after the plan")
    whole_free_leaf_domains: int = Field(description="leaf domains with every GPU free after the plan")
    gpus_by_type: dict[str, int]
    violations: int


def _pair_hops(instance: Instance, nodes: list[str]) -> list[int]:
    index = instance.node_index
    out = []
    for a, b in combinations(nodes, 2):
        if a not in index or b not in index or index[a][0] is not index[b][0]:
            continue
        hops, _ = index[a][0].network.path(a, b)
        if hops is not None:
            out.append(hops)
    return out


def _hop_stats(instance: Instance, groups: list[list[str]]) -> tuple[float | None, int | None]:
    means: list[float] = []
    worst: int | None = None
    for nodes in groups:
        if len(nodes) < 2:
            continue
        hops = _pair_hops(instance, nodes)
        if hops:
            means.append(mean(hops))
            worst = max(hops) if worst is None else max(worst, max(hops))
    return (mean(means) if means else None), worst


def plan_metrics(plan: PlacementPlan, instance: Instance,
                 violations: list[Violation] | None = None) -> PlanMetrics:
    """Yardsticks for one plan; ``violations`` from :func:`check` if already computed."""
    if violations is None:
        violations = check(plan, instance)
    jobs = {j.name: j for j in instance.jobs}
    free_total = sum(n.free_count for c in instance.clusters for n in c.nodes)
    weights = priority_weights(((j.priority, j.total_gpus) for j in instance.jobs), free_total)
    index = instance.node_index

    job_nodes: dict[str, list[str]] = defaultdict(list)
    unit_nodes: list[list[str]] = []
    job_gpus: Counter[str] = Counter()
    used: dict[str, set[int]] = defaultdict(set)
    by_type: Counter[str] = Counter()
    for p in plan.placements:
        nodes = list(dict.fromkeys(g.node for g in p.gpus))
        unit_nodes.append(nodes)
        for n in nodes:
            if n not in job_nodes[p.job]:
                job_nodes[p.job].append(n)
        job_gpus[p.job] += len(p.gpus)
        for g in p.gpus:
            used[g.node].add(g.gpu)
            if g.node in index:
                by_type[instance.catalog.get(index[g.node][1].gpu_type).name] += 1

    admitted = [j for j in job_gpus if j in jobs]
    bad_jobs = {v.job for v in violations if v.job is not None and v.code != "priority-inversion"}
    # a GPU used twice spoils every job that holds it; the violation names no job
    if any(v.code == "gpu-reused" and v.job is None for v in violations):
        count = Counter((g.node, g.gpu) for p in plan.placements for g in p.gpus)
        bad_jobs |= {p.job for p in plan.placements
                     if any(count[(g.node, g.gpu)] > 1 for g in p.gpus)}
    useful = [j for j in admitted if j not in bad_jobs]
    by_prio: Counter[int] = Counter()
    for j in admitted:
        by_prio[jobs[j].priority] += job_gpus[j]

    unit_mean, unit_max = _hop_stats(instance, unit_nodes)
    job_mean, job_max = _hop_stats(instance, [job_nodes[j] for j in admitted])
    leaves = []
    for j in admitted:
        doms = {index[n][0].network.node_domain(n, 1) or n for n in job_nodes[j] if n in index}
        leaves.append(len(doms))

    whole_nodes = 0
    leaf_free: dict[tuple[str, str], bool] = {}
    for c in instance.clusters:
        net = c.network
        for n in c.nodes:
            free_now = len(n.free_gpus) - len(used.get(n.name, set()) & set(n.free_gpus))
            whole = free_now == n.gpu_count
            whole_nodes += whole
            key = (c.name, net.node_domain(n.name, 1) or n.name)
            leaf_free[key] = leaf_free.get(key, True) and whole

    return PlanMetrics(
        admitted_weighted_demand=weighted_demand(((jobs[j].priority, job_gpus[j]) for j in admitted),
                                                 weights),
        useful_weighted_demand=weighted_demand(((jobs[j].priority, job_gpus[j]) for j in useful),
                                               weights),
        admitted_jobs=len(admitted),
        usefully_admitted_jobs=len(useful),
        admitted_gpus=sum(job_gpus[j] for j in admitted),
        admitted_gpus_by_priority=dict(sorted(by_prio.items(), reverse=True)),
        pending_jobs=len(instance.jobs) - len(admitted),
        unit_hops_mean=unit_mean, unit_hops_max=unit_max,
        job_hops_mean=job_mean, job_hops_max=job_max,
        leaf_domains_per_job=mean(leaves) if leaves else None,
        whole_free_nodes=whole_nodes,
        whole_free_leaf_domains=sum(leaf_free.values()),
        gpus_by_type=dict(sorted(by_type.items())),
        violations=len(violations),
    )
