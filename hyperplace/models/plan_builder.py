"""The one plan builder: how the engine (:func:`hyperplace.formulations.mapping.to_plan`), the
peers (:func:`hyperplace.baselines.common.build_plan`) and the workflows that combine plans
(:func:`hyperplace.solvers.workflows.defrag.compose_plan`: defragmentation, repair) assemble a
:class:`~hyperplace.models.plan.PlacementPlan`.

A placed job gives its units' GPUs; the builder writes the ``placements[]`` rows and the
job's summary (GPUs per type, the nodes it uses, a topology assignment when the caller has
one). A pending job gives its reasons. :meth:`PlanBuilder.build` adds the plan's metadata
(``<instance>-<kind>``) and the fields only the caller knows (status, solver, bounds...).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from hyperplace.models.cluster import Cluster
from hyperplace.models.instance import Instance
from hyperplace.models.plan import (
    GPURef,
    JobSummary,
    PendingJob,
    PlacementPlan,
    PlanMeta,
    TopologyAssignment,
    TopologyDomain,
    UnitPlacement,
)


class PlanBuilder:
    """Collects the placed and the pending jobs of one plan over ``instance``."""

    def __init__(self, instance: Instance) -> None:
        self.instance = instance
        self.placements: list[UnitPlacement] = []
        self.jobs: list[JobSummary] = []
        self.pending: list[PendingJob] = []
        self._nodes: dict[str, tuple[Cluster, str]] | None = None

    def _node(self, node: str) -> tuple[Cluster, str]:
        if self._nodes is None:
            catalog = self.instance.catalog
            self._nodes = {n.name: (c, catalog.get(n.gpu_type).name)
                           for c in self.instance.clusters for n in c.nodes}
        return self._nodes[node]

    def gpu_type(self, node: str) -> str:
        """The catalog name of ``node``'s GPU type."""
        return self._node(node)[1]

    def host_topology(self, refs: Sequence[GPURef]) -> TopologyAssignment:
        """A Kueue-style topology assignment (levels rack, hostname) of GPUs on one
        cluster: per node, in the order the GPUs use them, its leaf domain (or
        ``node:<name>``) and the GPUs it holds."""
        network = self._node(refs[0].node)[0].network
        per_node = Counter(g.node for g in refs)
        return TopologyAssignment(levels=["rack", "hostname"], domains=[
            TopologyDomain(values=[network.node_domain(n, 1) or f"node:{n}", n], count=c)
            for n, c in per_node.items()])

    def place(self, job: str, priority: int, units: Iterable[tuple[str, Sequence[GPURef]]], *,
              gpus: int | None = None, topology: TopologyAssignment | None = None,
              sort_nodes: bool = True) -> None:
        """Job ``job`` placed: ``units`` are (unit name, its GPUs) in the order to list them.

        ``gpus``: the job's size as its summary states it (default: the GPUs given);
        ``sort_nodes``: list its nodes by name (else in the order the units use them, as
        the peers bind pods)."""
        types: Counter[str] = Counter()
        nodes: list[str] = []
        for unit, refs in units:
            self.placements.append(UnitPlacement(job=job, unit=unit, gpus=list(refs)))
            for g in refs:
                types[self.gpu_type(g.node)] += 1
                if g.node not in nodes:
                    nodes.append(g.node)
        self.jobs.append(JobSummary(
            job=job, priority=priority, gpus=sum(types.values()) if gpus is None else gpus,
            gpu_types=dict(types), node_names=sorted(nodes) if sort_nodes else nodes,
            topology_assignment=topology))

    def keep(self, plan: PlacementPlan) -> None:
        """Every placed job of ``plan`` (its placement rows and summaries) as they are."""
        self.placements += plan.placements
        self.jobs += plan.jobs

    def wait(self, job: str, reasons: list[str], analysed: bool = True,
             inadmissible: bool = False) -> None:
        """Job ``job`` pending for ``reasons`` (``analysed``: by the per-job analysis, not
        the generic reason given when the budget ran out first; ``inadmissible``: its queue
        can never admit it)."""
        self.pending.append(PendingJob(job=job, reasons=reasons,
                                       analysis="full" if analysed else "skipped",
                                       inadmissible=inadmissible))

    @property
    def placed(self) -> set[str]:
        return {u.job for u in self.placements}

    def build(self, kind: str, **fields: Any) -> PlacementPlan:
        """The plan, named ``<instance>-<kind>``; ``fields``: the other plan fields."""
        name = self.instance.name
        fields.setdefault("skipped", list(self.instance.spec.skipped))
        return PlacementPlan(metadata=PlanMeta(name=f"{name}-{kind}", instance=name),
                             placements=self.placements, jobs=self.jobs, pending=self.pending,
                             **fields)

