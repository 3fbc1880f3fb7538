"""``FederationPlan``: how a federation round splits training jobs across member clusters.

Schema (``apiVersion: hyperplace/v1``, ``kind: FederationPlan``)::

    metadata: {name, instance}
    status: optimal | feasible | fallback | infeasible | no_solution | error
    solver, policy, objective, bound, gap, runtimeS, budgetS, message
    jobs:                                    # one per admitted job
    - job, priority, shape (monolithic | pipeline | data-parallel), clusters, affinityGroup
      subJobs: [{name, cluster, gpuType, gpus: [{node, gpu}], stages: [{position,
                 firstLayer, lastLayer}], dpRanks, units}]
      predicted: {stepTimeS, tokensPerS, parts: {...}, penaltyVsBestMonolithic}
      bestMonolithic: {cluster, stepTimeS, tokensPerS, note}
      evenSplit / karmadaAggregated: {stepTimeS, tokensPerS, penaltyVsEngine, ...}
      wan: [{a, b, gbpsNeeded, gbpsCapacity}]
      verification: {placementStatus per cluster, checkerViolations}
    pending: [{job, reasons}]

Every time in ``predicted`` comes from the layer-split cost model (``solve_split`` /
``evaluate_split``), which says what it was fitted on; the plan repeats that in ``costModel``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hyperplace.models.base import HPModel, Warnings
from hyperplace.models.plan import GPURef
from hyperplace.models.result import SolveStatus

ShapeKind = Literal["monolithic", "pipeline", "data-parallel"]


class StageRange(HPModel):
    """One pipeline stage of a sub-job: its position in the whole pipeline and its layers."""

    position: int = Field(ge=0)
    first_layer: int = Field(ge=0)
    last_layer: int = Field(ge=0, description="inclusive")
    group: str = Field(description="the job's resource group this stage came from")
    compute_s: float = Field(default=0.0, description="per micro-batch")
    transfer_s: float = Field(default=0.0, description="boundary sends+receives per micro-batch")
    load_s: float = Field(default=0.0, description="compute + transfer per micro-batch")


class SubJob(HPModel):
    """The part of a job that runs in one member cluster (one Volcano Job)."""

    name: str
    cluster: str
    gpu_type: str
    gpus: list[GPURef]
    stages: list[StageRange]
    dp_ranks: list[int] = Field(description="data-parallel ranks (replicas) held here")
    units: list[str] = Field(description="gang units as placed: <group>/<replica>")
    nodes: list[str]


class StepParts(HPModel):
    """Where a predicted step goes (seconds)."""

    pipeline_s: float = Field(description="(m-1)·bottleneck + Σ stage loads (1F1B)")
    bottleneck_s: float
    wan_transfer_s: float = Field(description="boundary transfers over WAN per micro-batch, "
                                              "both directions, in the bottleneck stage's load")
    dp_sync_intra_s: float = 0.0
    dp_sync_inter_s: float = Field(default=0.0, description="cross-cluster all-reduce")


class Prediction(HPModel):
    step_time_s: float
    tokens_per_s: float
    parts: StepParts
    layers_per_stage: list[int] = Field(default_factory=list)
    penalty_vs_best_monolithic: float | None = Field(
        default=None, description="step time / the best single-cluster step time (1.0 = none)")
    configuration: str | None = Field(
        default=None, description="the training configuration priced when it is the "
        "planner's (a single-stage job naming no parallelism or 'auto'); none: the job's "
        "own groups")


class Alternative(HPModel):
    """A comparison figure: the same job under another rule, priced by the same cost model."""

    name: str
    feasible: bool
    step_time_s: float | None = None
    tokens_per_s: float | None = None
    ratio_to_engine: float | None = Field(default=None, description="its step time / the engine's")
    division: dict[str, int] = Field(default_factory=dict, description="cluster -> units")
    layers_per_stage: list[int] = Field(default_factory=list)
    placeable_as_placed: bool | None = None
    note: str = ""


class WanUse(HPModel):
    a: str
    b: str
    gbps_needed: float = Field(description="average over a step")
    gbps_capacity: float


class Verification(HPModel):
    """Each cluster's part went through the placement engine and the checker."""

    placement_status: dict[str, str] = Field(description="cluster -> engine status")
    checker_violations: int


class FederatedJobPlan(HPModel):
    job: str
    kind: str = Field(description="HyperJob or FoundationModelTrainingJob")
    priority: int
    model: str
    shape: ShapeKind
    clusters: list[str]
    affinity_group: str | None = None
    gpus: int
    pipeline_stages: int
    replicas: int
    sub_jobs: list[SubJob]
    predicted: Prediction
    best_monolithic: Alternative
    even_split: Alternative
    karmada_aggregated: Alternative
    wan: list[WanUse] = Field(default_factory=list)
    verification: Verification
    notes: list[str] = Field(default_factory=list)


class PendingFederatedJob(HPModel):
    job: str
    reasons: list[str]


class FederationMeta(HPModel):
    name: str = "federation-plan"
    instance: str | None = None


class FederationPlan(HPModel):
    api_version: Literal["hyperplace/v1"] = "hyperplace/v1"
    kind: Literal["FederationPlan"] = "FederationPlan"
    metadata: FederationMeta = Field(default_factory=FederationMeta)
    status: SolveStatus
    solver: str
    policy: str
    objective: float | None = Field(default=None, description="priority-weighted admitted GPUs")
    bound: float | None = None
    gap: float | None = None
    runtime_s: float = 0.0
    budget_s: float | None = None
    message: str = ""
    cost_model: str = ""
    jobs: list[FederatedJobPlan] = Field(default_factory=list)
    pending: list[PendingFederatedJob] = Field(default_factory=list)
    warnings: Warnings

    def to_doc(self) -> dict:
        doc = super().to_doc()
        doc.setdefault("jobs", [])
        doc.setdefault("pending", [])
        return doc

    def job(self, name: str) -> FederatedJobPlan | None:
        return next((j for j in self.jobs if j.job == name), None)


class TemplateEstimate(HPModel):
    """One component template (a resource group) of a job in one cluster."""

    template: str
    gpus_per_unit: int
    units_per_set: int
    totals_units: int = Field(description="floor(free GPUs / GPUs per unit), Karmada-style")
    placed_units: int = Field(description="units the placement engine places now, alone")


class ClusterEstimate(HPModel):
    """Karmada's estimator question for one member cluster, answered two ways."""

    cluster: str
    gpu_types: list[str]
    free_gpus: int
    totals_replicas: int = Field(description="Karmada general estimator: cluster totals only")
    placed_replicas: int = Field(description="complete replicas (component sets) the placement "
                                             "engine places now, verified by the checker")
    templates: list[TemplateEstimate]
    reason: str = ""


class EstimateReport(HPModel):
    api_version: Literal["hyperplace/v1"] = "hyperplace/v1"
    kind: Literal["EstimateReport"] = "EstimateReport"
    instance: str
    job: str
    replica_gpus: int
    replicas_wanted: int
    clusters: list[ClusterEstimate]
    warnings: Warnings
