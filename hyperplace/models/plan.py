"""``PlacementPlan``: what a scheduling round decided, in a form controllers can apply.

Schema (``apiVersion: hyperplace/v1``, ``kind: PlacementPlan``)::

    metadata: {name, instance}
    status: optimal | feasible | fallback | infeasible | no_solution | error
    solver, objective, bound, gap, objectiveGaps, runtimeS, budgetS, message
    placements: [{job, unit, gpus: [{node, gpu}]}]          # one entry per gang unit
    jobs: [{job, priority, gpus, gpuTypes, nodeNames,        # per admitted job
            topologyAssignment: {levels, domains: [{values, count}]}}]
    pending: [{job, reasons: [...], analysis, inadmissible}]  # every job not admitted
    preemptions: [{job, why, preemptor, gpus, lostGpuSeconds}] # running jobs stopped
    preemptionPolicy: lower-priority | reclaim-within-cohort  # when the round could preempt
    migrations: [{job, why, forJob, gpus, gpusMoved, lostGpuSeconds,  # running jobs moved
                  fromNodes, toNodes}]                        # (new GPUs in placements)
    hotSpares: N                                              # whole free nodes kept per leaf
    objectiveTerms: {admittedPriorityDemand, communication, fragmentation, policy}

``topologyAssignment`` is Kueue's TopologyAssignment (levels, then domain values -> GPU
count); ``nodeNames`` is what a Volcano ``nodeAffinity`` needs.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hyperplace.models.base import HPModel, Warnings
from hyperplace.models.job import SkippedJob
from hyperplace.models.result import SolveStatus


class GPURef(HPModel):
    node: str
    gpu: int = Field(ge=0)


class UnitPlacement(HPModel):
    job: str
    unit: str
    gpus: list[GPURef]


class TopologyDomain(HPModel):
    values: list[str]
    count: int


class TopologyAssignment(HPModel):
    levels: list[str]
    domains: list[TopologyDomain]


class JobSummary(HPModel):
    job: str
    priority: int
    gpus: int
    gpu_types: dict[str, int] = Field(default_factory=dict)
    node_names: list[str] = Field(default_factory=list)
    topology_assignment: TopologyAssignment | None = None


class PendingJob(HPModel):
    """A job the plan leaves pending and why.

    ``analysis``: ``full`` when the reasons come from the per-job analysis (what the job
    needs against what is free, whom it lost to); ``skipped`` when the solve's budget ran
    out before that analysis reached the job (or its shape was past the probe limit): the
    reasons are then true but generic, and a larger budget (or ``hyperplace why``) gives the
    full answer.

    ``inadmissible``: True when the job's queue can never admit it, whatever else runs (no
    quota of the queue covers a GPU type the job could use, or it asks more than the queue
    may ever hold there; Kueue calls such a workload inadmissible): the forecast plans no
    start for it.
    """

    job: str
    reasons: list[str]
    analysis: Literal["full", "skipped"] = "full"
    inadmissible: bool = False


class Forecast(HPModel):
    """When and where a pending job is planned to start (the over-time schedule's answer,
    :mod:`hyperplace.solvers.schedule`), refreshed every round.

    ``earliest_s``/``latest_s``: the planned start window, seconds from the plan's time
    (one schedule step wide; in a replay the planning engine's calibrated window,
    :class:`hyperplace.sim.forecast.StartCalibration`); both None when no start falls
    inside the schedule's reach.
    ``pool``: the GPU type and fabric domain it is planned on ("16 H100-80 in leaf t1:leaf-3").
    """

    job: str
    earliest_s: float | None = None
    latest_s: float | None = None
    gpus: int = 0
    gpu_type: str | None = None
    domain: str | None = None
    pool: str = ""
    starts_now: bool = False
    text: str = ""


class Preemption(HPModel):
    """A running job stopped so that a higher-priority (or reclaiming) job fits."""

    job: str
    why: str = Field(description="lower-priority | reclaim-within-cohort")
    preemptor: str = ""
    gpus: int = Field(default=0, ge=0)
    lost_gpu_seconds: float = Field(default=0.0, ge=0,
                                    description="GPUs x seconds since its last checkpoint")


class Migration(HPModel):
    """A running job checkpointed and restarted elsewhere (#14): its new GPUs are its
    ``placements`` entries (units of the manifest in ``spec.runningJobs[].job``), its old
    ones are released."""

    job: str
    why: str = Field(description="admit (so that forJob fits) | defrag (frees a domain) | repair")
    for_job: str = ""
    gpus: int = Field(default=0, ge=0, description="GPUs it holds")
    gpus_moved: int = Field(default=0, ge=0,
                            description="GPUs it holds afterwards that it did not hold before")
    lost_gpu_seconds: float = Field(default=0.0, ge=0,
                                    description="GPUs x seconds since its last checkpoint")
    from_nodes: list[str] = Field(default_factory=list)
    to_nodes: list[str] = Field(default_factory=list)


class PlanMeta(HPModel):
    name: str = "plan"
    instance: str | None = None


class PlacementPlan(HPModel):
    api_version: Literal["hyperplace/v1"] = "hyperplace/v1"
    kind: Literal["PlacementPlan"] = "PlacementPlan"
    metadata: PlanMeta = Field(default_factory=PlanMeta)
    status: SolveStatus
    solver: str
    objective: int | float | None = Field(default=None, description=(
        "objective 1, the priority-weighted admitted GPUs; hyperplace writes it as an exact "
        "integer (with many priority levels it passes 2**53, beyond a double's exact "
        "integers)"))
    bound: int | float | None = None
    gap: float | None = None
    objective_gaps: dict[str, float | None] = Field(default_factory=dict)
    runtime_s: float = 0.0
    budget_s: float | None = None
    message: str = ""
    placements: list[UnitPlacement] = Field(default_factory=list)
    jobs: list[JobSummary] = Field(default_factory=list)
    pending: list[PendingJob] = Field(default_factory=list)
    skipped: list[SkippedJob] = Field(default_factory=list, description=(
        "jobs of the input hyperplace does not place, with the reason (a workload none of "
        "whose pods asks for a GPU): neither admitted nor pending"))
    objective_terms: dict[str, int | float] = Field(default_factory=dict)
    preemptions: list[Preemption] = Field(default_factory=list)
    preemption_policy: str | None = Field(
        default=None, description="set when the round could preempt (lower-priority | "
        "reclaim-within-cohort): objective 1 then counts the running jobs kept, each in its "
        "own priority level")
    migrations: list[Migration] = Field(default_factory=list)
    forecasts: list[Forecast] = Field(default_factory=list, description=(
        "per pending job its planned start window and pool from the over-time schedule "
        "(empty when the round was solved without one)"))
    warnings: Warnings
    hot_spares: int = Field(default=0, ge=0, description=(
        "whole free nodes per leaf domain new placements leave free (the operator setting "
        "the round was solved with; repairs may use them)"))

    def to_doc(self) -> dict:
        """Like every document, but ``placements``, ``jobs`` and ``pending`` are always there
        (empty lists included), so a controller can read them without guarding."""
        doc = super().to_doc()
        for key in ("placements", "jobs", "pending"):
            doc.setdefault(key, [])
        return doc

    @property
    def admitted(self) -> list[str]:
        seen: dict[str, None] = {}
        for p in self.placements:
            seen.setdefault(p.job, None)
        return list(seen)
