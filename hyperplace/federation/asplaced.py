"""Sub-jobs placed AS PLACED: each cluster's part goes through the placement engine on that
cluster's own state, and the independent checker verifies the engine's plan.

Karmada's general estimator answers "how many replicas fit" from a cluster's resource
totals (``pkg/estimator/client/general.go:465``, ``getMaximumReplicasBasedOnClusterSummary``:
the minimum over resources of ``floor(available / request)``), which picks clusters where
no node, NVLink domain or leaf can hold a replica (karmada issue 521). Here a sub-job is
accepted only when the engine places every unit of it on real free GPUs of that cluster
(NVLink cliques, hop counts, gangs) and :func:`hyperplace.check.check` finds no violation.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from hyperplace.check import check
from hyperplace.federation.problem import FederatedJob
from hyperplace.models.cluster import Cluster
from hyperplace.models.gpu import GPUCatalog, GPUType
from hyperplace.models.instance import Instance, InstanceSpec
from hyperplace.models.job import (
    GPURequirements,
    ObjectMeta,
    ResourceGroup,
    TrainingJob,
    TrainingJobSpec,
)
from hyperplace.models.plan import PlacementPlan
from hyperplace.solvers.driver import solve_placement

# Budget for one probe (is this sub-job placeable?) and for the final joint verification.
PROBE_BUDGET_S = 0.5
VERIFY_BUDGET_S = 2.0


@dataclass(frozen=True)
class Location:
    """Where a sub-job can run: one GPU type in one member cluster."""

    cluster: str
    gpu_type: str

    def __str__(self) -> str:
        return f"{self.gpu_type}@{self.cluster}"


@dataclass(frozen=True)
class Part:
    """A job's share of one location: which pipeline positions, how many replicas of them."""

    location: Location
    positions: tuple[int, ...]
    replicas: int
    first_replica: int = 0

    def gpus(self, job: FederatedJob) -> int:
        return self.replicas * sum(job.unit_gpus(p) for p in self.positions)


def sub_job_name(job: FederatedJob, cluster: str) -> str:
    return f"{job.name}-{cluster}"


def _group_on(group: ResourceGroup, gpu_type: str) -> ResourceGroup:
    req = group.gpu_requirements
    return group.model_copy(update={"gpu_requirements": GPURequirements(
        min_memory_gb=req.min_memory_gb,
        min_nvlink_bandwidth_gbps_per_pair=req.min_nvlink_bandwidth_gbps_per_pair,
        accelerator_type=gpu_type)})


def sub_job(job: FederatedJob, part: Part) -> TrainingJob:
    """The part as a training job the placement engine understands: the job's own groups
    for those positions (their NVLink, memory and hop requirements kept), pinned to the
    location's GPU type, ``replicas`` data-parallel copies, the job's priority."""
    groups = [_group_on(job.stage_groups[p], part.location.gpu_type) for p in part.positions]
    if job.dp_group is not None:
        groups.append(_group_on(job.dp_group, part.location.gpu_type))
    return TrainingJob(
        metadata=ObjectMeta(name=sub_job_name(job, part.location.cluster),
                            namespace=job.namespace),
        spec=TrainingJobSpec(model=job.model.name, replica_count=part.replicas,
                             resource_groups=groups, priority=job.priority),
    )


def cluster_instance(instance: Instance, cluster: str, jobs: Iterable[TrainingJob]) -> Instance:
    """One member cluster in its current state (running jobs kept) with a queue of sub-jobs."""
    member = next(c for c in instance.clusters if c.name == cluster)
    return Instance(metadata=ObjectMeta(name=f"{instance.name}/{cluster}"),
                    spec=InstanceSpec(gpu_types=instance.spec.gpu_types, clusters=[member],
                                      jobs=list(jobs)))


@dataclass
class ClusterPlacement:
    """The engine's plan for one cluster's sub-jobs, and what the checker says of it."""

    cluster: str
    plan: PlacementPlan
    violations: list[str] = field(default_factory=list)
    instance: Instance | None = None  # what the plan was solved on (the cluster and its sub-jobs)

    @property
    def admitted(self) -> set[str]:
        return set(self.plan.admitted)

    def ok_for(self, names: Iterable[str]) -> bool:
        return not self.violations and set(names) <= self.admitted


def place(instance: Instance, cluster: str, jobs: list[TrainingJob], *, budget_s: float,
          solver: str = "auto") -> ClusterPlacement:
    """Run the placement engine on ``cluster`` with ``jobs`` and check its plan."""
    inst = cluster_instance(instance, cluster, jobs)
    plan = solve_placement(inst, solver=solver, budget_s=max(budget_s, 0.05))
    violations = [v.message for v in check(plan, inst)]
    return ClusterPlacement(cluster, plan, violations, inst)


def locations(instance: Instance, job: FederatedJob, clusters: Iterable[str],
              catalog: GPUCatalog) -> list[Location]:
    """(cluster, GPU type) pairs whose type the job accepts and whose memory suffices."""
    selector = job.type_selector()
    need_mem = max(g.gpu_requirements.min_memory_gb for g in job.stage_groups)
    if job.dp_group is not None:
        need_mem = max(need_mem, job.dp_group.gpu_requirements.min_memory_gb)
    wanted = set(clusters)
    out = []
    for c in instance.clusters:
        if c.name not in wanted:
            continue
        for t in dict.fromkeys(n.gpu_type for n in c.nodes):
            g = catalog.find(t)
            if g is None or (selector and not g.matches(selector)) or g.hbm_gb < need_mem:
                continue
            out.append(Location(c.name, g.name))
    return out


def free_gpus(cluster: Cluster, gpu_type: str) -> int:
    return sum(n.free_count for n in cluster.nodes if n.gpu_type == gpu_type)


def total_gpus(cluster: Cluster, gpu_type: str) -> int:
    return sum(n.gpu_count for n in cluster.nodes if n.gpu_type == gpu_type)


class Prober:
    """Memoised "does this part fit as placed, alone, in its cluster right now?"."""

    def __init__(self, instance: Instance, budget_s: float = PROBE_BUDGET_S):
        self.instance = instance
        self.budget_s = budget_s
        self.clusters = {c.name: c for c in instance.clusters}
        self._cache: dict[tuple, ClusterPlacement] = {}
        self.calls = 0

    def fits(self, job: FederatedJob, part: Part) -> bool:
        return self.probe(job, part).ok_for([sub_job_name(job, part.location.cluster)])

    def probe(self, job: FederatedJob, part: Part) -> ClusterPlacement:
        key = (job.name, part.location, part.positions, part.replicas)
        if key not in self._cache:
            cluster = self.clusters[part.location.cluster]
            if part.gpus(job) > free_gpus(cluster, part.location.gpu_type):
                # totals already say no: no engine call needed
                plan = PlacementPlan(status="infeasible", solver="totals")
                self._cache[key] = ClusterPlacement(cluster.name, plan)
            else:
                self.calls += 1
                self._cache[key] = place(self.instance, cluster.name, [sub_job(job, part)],
                                         budget_s=self.budget_s, solver="greedy")
                if not self._cache[key].ok_for([sub_job_name(job, part.location.cluster)]):
                    # greedy may miss a packing the exact engine finds: ask it before saying no
                    self.calls += 1
                    self._cache[key] = place(self.instance, cluster.name, [sub_job(job, part)],
                                             budget_s=self.budget_s)
        return self._cache[key]

    def max_replicas(self, job: FederatedJob, location: Location,
                     positions: tuple[int, ...] | None = None, cap: int | None = None) -> int:
        """Most replicas of ``positions`` (default: the whole pipeline) that fit as placed,
        at most ``cap`` (default: the job's replicas), by bisection over engine probes
        (fitting is monotone in the replica count)."""
        positions = positions if positions is not None else tuple(range(job.stages))
        per = sum(job.unit_gpus(p) for p in positions)
        cap = job.replicas if cap is None else cap
        hi = min(cap, free_gpus(self.clusters[location.cluster], location.gpu_type) // per)
        lo = 0
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.fits(job, Part(location, positions, mid)):
                lo = mid
            else:
                hi = mid - 1
        return lo


def gpu_type_of(catalog: GPUCatalog, name: str) -> GPUType:
    return catalog.get(name)
