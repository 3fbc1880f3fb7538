"""Request and response bodies of the service.

The documents inside them are the library's own models, with the same schemas as the files
the CLI reads and writes (``Instance``, ``FoundationModelTrainingJob``, ``PlacementPlan``,
``SplitProblem``, ``SplitPlan``). Those are declared with ``SkipValidation`` here: the
OpenAPI document shows their full schema, but they are validated in a worker process, not
in the event loop, so a 16,384-GPU instance never stalls the server; their errors still come
back as 422 with the field path (``instance.spec.clusters[0].nodes[3].gpuType``).

The envelopes are strict: no string-to-number or string-to-bool coercion (``budgetS: "5"``
and ``apply: "yes"`` are 422), unknown fields refused. Names of jobs follow the library's
rule (:data:`hyperplace.models.limits.Name`, as the CLI reads them); stored-cluster names are
URL path segments (letters, digits, ``.``, ``_``, ``-``).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SkipValidation, model_validator
from pydantic.alias_generators import to_camel

from hyperplace.models.base import OptionalWarnings
from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.models.limits import MAX_JOBS
from hyperplace.models.limits import Name as JobName
from hyperplace.models.model_spec import ModelSpec
from hyperplace.models.plan import GPURef, PlacementPlan
from hyperplace.models.request import (
    HotSpares,
    MaxMoves,
    PolicyName,
    PreemptionName,
    RoundRequest,
    Seed,
    SolverName,
)
from hyperplace.models.split import SplitProblem

# A budget in seconds: positive and finite (NaN and infinities are refused with 422).
Budget = Annotated[float, Field(gt=0, allow_inf_nan=False,
                                description="seconds; cut to the server's --max-budget")]
Name = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


class Body(BaseModel):
    """camelCase on the wire like every document; snake_case accepted; unknown fields refused."""

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True,
                              strict=True)


class InstanceSource(Body):
    """Where the instance comes from: exactly one of ``instance`` (inline), ``bundled`` (a
    bundled instance's name, never a path) or ``cluster`` (a cluster stored with
    ``PUT /v1/clusters/{name}``). ``jobs``, if given, replaces the instance's pending queue;
    ``queues``, if given, adds queue documents (a bad field is a 422 naming ``queues[i]...``)."""

    instance: Annotated[Instance, SkipValidation] | None = None
    bundled: Name | None = None
    cluster: Name | None = None
    jobs: list[Annotated[TrainingJob, SkipValidation]] | None = Field(
        default=None, max_length=MAX_JOBS,
        description="pending queue to solve instead of the instance's own")
    queues: list[dict[str, Any]] | None = Field(
        default=None, max_length=1000,
        description="Kueue ResourceFlavor/ClusterQueue/LocalQueue/Cohort or Volcano Queue "
                    "documents added to the instance's own, as `hyperplace solve --queues`")

    @model_validator(mode="after")
    def _one_source(self) -> "InstanceSource":
        given = [k for k in ("instance", "bundled", "cluster") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of instance, bundled or cluster"
                             + (f" (got {' and '.join(given)})" if given else ""))
        return self

    def source_payload(self) -> dict[str, Any]:
        return {"instance": self.instance, "bundled": self.bundled, "cluster": self.cluster,
                "jobs": self.jobs, "queues": self.queues}


class PlacementRequest(InstanceSource):
    """One scheduling round, as ``hyperplace solve``: the round's fields are the library's
    :class:`~hyperplace.models.request.RoundRequest` (same types, same limits, same rules)."""

    budget_s: Budget | None = None
    solver: SolverName = "auto"
    policy: PolicyName = "performance"
    seed: Seed = 0
    apply: bool = Field(default=False, description=(
        "with cluster: record the admitted jobs as running on their GPUs in the stored "
        "cluster and drop them from its queue, so the next round starts from there"))
    preemption: PreemptionName = Field(
        default="never", description="as `hyperplace solve --preemption`: running jobs "
        "(spec.runningJobs) the round may stop; the plan lists them in preemptions[]")
    hot_spares: HotSpares = Field(default=0, description="as `hyperplace solve "
                                  "--hot-spares`: whole free nodes every leaf keeps free for repairs")
    running_moveable: bool = Field(default=False, description=(
        "as `hyperplace solve --running-moveable`: running jobs with a manifest "
        "(spec.runningJobs[].job) may migrate when that admits more; the plan lists them in "
        "migrations[]"))
    max_moves: MaxMoves | None = Field(default=None, description=(
        "with runningMoveable: at most this many migrations (default: no limit)"))

    @model_validator(mode="after")
    def _no_apply_with_preemption(self) -> "PlacementRequest":
        if self.apply and self.preemption != "never":
            raise ValueError("apply records admitted jobs in the stored cluster but does not "
                             "stop running ones: use preemption never with apply, and PATCH "
                             "the preempted jobs as completions")
        if self.apply and self.running_moveable:
            raise ValueError("apply records admitted jobs in the stored cluster but does not "
                             "move running ones: use runningMoveable false with apply, and "
                             "PATCH the migrated jobs' new GPUs")
        RoundRequest.check_rules(self.preemption, self.running_moveable, self.max_moves)
        return self


class CheckRequest(InstanceSource):
    """A plan (ours or another scheduler's) against the instance it was solved on."""

    plan: Annotated[PlacementPlan, SkipValidation]


class ViolationOut(Body):
    code: str
    job: str | None = None
    unit: str | None = None
    message: str


class CheckResponse(Body):
    ok: bool
    violations: list[ViolationOut]
    warnings: OptionalWarnings


class LayerSplitRequest(Body):
    """The layer split, as ``hyperplace split``: a ``SplitProblem`` whose ``model`` may be
    left out when ``modelName`` (a preset) or ``profile`` (a bundled measured profile) names
    it."""

    problem: Annotated[SplitProblem, SkipValidation] | dict[str, Any]
    model_name: str | None = Field(default=None, max_length=100)
    profile: str | None = Field(default=None, max_length=100)
    micro_batch_size: int | None = Field(default=None, gt=0, le=4096)
    solver: Literal["auto", "dp", "milp", "cpsat", "proportional"] = "auto"
    budget_s: Budget | None = None


class PredictRequest(Body):
    """One configuration priced by the cost model (as ``hyperplace predict``): the model by
    preset name (``modelName``) or inline (``model``, a ModelSpec)."""

    model_name: str | None = Field(default=None, max_length=100)
    model: Annotated[ModelSpec, SkipValidation] | None = None
    gpu: str = Field(min_length=1, max_length=100)
    tp: int = Field(default=1, ge=1, le=1024)
    pp: int = Field(default=1, ge=1, le=1024)
    dp: int = Field(default=1, ge=1, le=131072)
    microbatch_size: int = Field(default=1, ge=1, le=4096)
    global_batch: int | None = Field(default=None, ge=1, le=2**31 - 1)
    seq: int | None = Field(default=None, ge=1, le=2**22)
    recompute: bool = False
    zero: int = Field(default=0, ge=0, le=3)
    flash: bool = True
    sequence_parallel: bool = False
    precision: Literal["bf16", "fp16", "fp32"] = "bf16"

    @model_validator(mode="after")
    def _one_model(self) -> "PredictRequest":
        if (self.model_name is None) == (self.model is None):
            raise ValueError("give exactly one of modelName or model")
        return self


class FederationRequest(InstanceSource):
    """One federation round (as ``hyperplace federate``): the queue's jobs split across the
    instance's member clusters where one cluster cannot hold them, verified as placed."""

    budget_s: Budget | None = None
    solver: Literal["auto", "cpsat", "greedy"] = "auto"
    policy: Literal["throughput", "cost", "binpack"] = "throughput"
    max_slowdown: float = Field(default=3.0, ge=1, allow_inf_nan=False)


class EstimateRequest(InstanceSource):
    """Karmada's estimator question (as ``hyperplace estimate``): how many complete replicas
    of one job fit in each member cluster now, by totals and as placed. ``job`` names a job
    of the instance's queue, or ``trainingJob`` gives one inline."""

    job: str | None = Field(default=None, min_length=1, max_length=253)
    training_job: Annotated[TrainingJob, SkipValidation] | None = None

    @model_validator(mode="after")
    def _one_job(self) -> "EstimateRequest":
        if (self.job is None) == (self.training_job is None):
            raise ValueError("give exactly one of job or trainingJob")
        return self


class RunRequest(Body):
    """Work too long to wait for: submitted, then polled by id (and cancelled by id)."""

    kind: Literal["placement"] = "placement"
    request: PlacementRequest


RunState = Literal["queued", "running", "succeeded", "failed", "cancelled"]


class RunStatus(Body):
    id: str
    kind: str
    state: RunState
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    progress: float = Field(default=0.0, description="0..1: share of the budget used so far")
    budget_s: float | None = None
    result: dict[str, Any] | None = Field(default=None, description="the answer, when succeeded")
    error: dict[str, Any] | None = Field(default=None, description="why, when failed")


class NodeGPUs(Body):
    node: Name
    gpus: list[Annotated[int, Field(ge=0, le=71)]] | None = Field(
        default=None, description="GPU indices; all of the node's GPUs when left out")


class Allocation(Body):
    job: JobName
    gpus: list[GPURef] = Field(min_length=1)


class ClusterPatch(Body):
    """Deltas to a stored cluster since the last round (applied in this order)."""

    completions: list[JobName] = Field(default_factory=list, max_length=MAX_JOBS, description=(
        "jobs that finished: their GPUs are freed and they leave the queue; a job the cluster "
        "neither runs nor queues is a 422 at completions[i] and nothing of the PATCH is applied"))
    failures: list[NodeGPUs] = Field(default_factory=list, description="GPUs marked faulty")
    repairs: list[NodeGPUs] = Field(default_factory=list, description="faulty GPUs back in service")
    allocations: list[Allocation] = Field(default_factory=list, description=(
        "jobs started elsewhere (or as planned): their GPUs become allocated"))
    arrivals: list[Annotated[TrainingJob, SkipValidation]] = Field(
        default_factory=list, max_length=MAX_JOBS, description="jobs that joined the pending queue")


class UsageHistory(Body):
    """A stored cluster's per-queue usage history (kept in the database, updated whenever the
    GPUs its queues hold change: an applied round, a PATCH, a PUT)."""

    half_life_s: float = Field(description="the server's --half-life, in seconds")
    as_of: float | None = Field(description="when it was last brought up to date (Unix time)")
    gpu_hours: dict[str, float] = Field(description="decayed GPU-hours per queue as of asOf")
    held_gpus: dict[str, int] = Field(description="GPUs each queue holds since asOf")
    gpu_hours_now: dict[str, float] = Field(description=(
        "brought to the time of this answer: what a round now sees as spec.queueUsage"))


class ClusterInfo(Body):
    name: str
    version: int
    gpus: int
    free_gpus: int
    pending_jobs: int
    updated_at: float
    usage_history: UsageHistory | None = Field(default=None, description=(
        "per-queue usage history for fair share over rounds (absent with --half-life 0)"))
    interrupted_jobs: list[str] | None = Field(default=None, description=(
        "PATCH only: running jobs a failure hit; all their GPUs were freed"))
    warnings: OptionalWarnings


class ErrorBody(Body):
    """Every error answer: the status, one line saying what to fix, and the field path."""

    status: int
    error: str
    path: str | None = None
    problems: list[dict[str, Any]] = Field(default_factory=list)


# ---- scheduler extenders -------------------------------------------------------------------

class _GoKeys(BaseModel):
    """Extra fields allowed (the scheduler sends whole objects), but a key that spells one of
    ``go_keys`` in other case (``pod`` for ``Pod``) is refused: such a request is malformed,
    and ignoring it would silently pass every node."""

    model_config = ConfigDict(extra="allow", strict=True)
    go_keys: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _keys_as_go_spells_them(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in data:
                for go in cls.go_keys:
                    if isinstance(key, str) and key != go and key.lower() == go.lower():
                        raise ValueError(f"unknown key {key!r}: the field is {go!r} (the keys "
                                         "keep the Go field names' capitals)")
        return data


class ObjectMetaIn(_GoKeys):
    """The parts of a Kubernetes ``ObjectMeta`` the extenders read."""

    name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodIn(_GoKeys):
    metadata: ObjectMetaIn | None = None


class NodeIn(_GoKeys):
    metadata: ObjectMetaIn | None = None


class NodeListIn(_GoKeys):
    items: list[NodeIn] | None = None


class K8sExtenderArgs(_GoKeys):
    """``ExtenderArgs`` of ``k8s.io/kube-scheduler/extender/v1`` (types.go lines 73-82 at
    kubernetes/kube-scheduler e87dbddd): ``Pod``, and ``Nodes`` (a NodeList) or ``NodeNames``.
    Go field names without JSON tags, so the keys are capitalised as in Go (``pod`` is a
    422, not an empty request)."""

    go_keys: ClassVar[tuple[str, ...]] = ("Pod", "Nodes", "NodeNames")

    Pod: PodIn | None = None
    Nodes: NodeListIn | None = None
    NodeNames: list[str] | None = None


class K8sFilterResult(BaseModel):
    """``ExtenderFilterResult`` (types.go lines 87-103): the nodes that pass, ``FailedNodes``
    (name -> reason), ``FailedAndUnresolvableNodes`` and ``Error``."""

    Nodes: dict[str, Any] | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = Field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = Field(default_factory=dict)
    Error: str = ""


class K8sHostPriority(BaseModel):
    """``HostPriority`` (types.go lines 123-129): ``Host`` and ``Score`` in
    [MinExtenderPriority 0, MaxExtenderPriority 10] (lines 25-29)."""

    Host: str
    Score: int


class VolcanoTaskIn(_GoKeys):
    """The parts of Volcano's ``api.TaskInfo`` (job_info.go line 118, no JSON tags, so Go's
    capitals) the extender reads."""

    go_keys: ClassVar[tuple[str, ...]] = ("Name", "Namespace", "Job", "Pod", "UID")

    Name: str | None = None
    Namespace: str | None = None
    Job: str | None = None
    Pod: PodIn | None = None


class VolcanoNodeIn(_GoKeys):
    """Volcano's ``api.NodeInfo`` (node_info.go line 52): ``Name`` is required."""

    go_keys: ClassVar[tuple[str, ...]] = ("Name", "Node")

    Name: str = Field(min_length=1)


class VolcanoPredicateRequest(_GoKeys):
    """Volcano extender plugin ``PredicateRequest`` (volcano-sh/volcano ed72c7c8,
    pkg/scheduler/plugins/extender/argument.go lines 35-38): ``task`` is an ``api.TaskInfo``
    (pkg/scheduler/api/job_info.go line 118: ``Name``, ``Namespace``, ``Job``, ``Pod`` ...),
    ``node`` an ``api.NodeInfo`` (node_info.go line 52: ``Name``, ``Node`` ...)."""

    go_keys: ClassVar[tuple[str, ...]] = ("task", "node")

    task: VolcanoTaskIn
    node: VolcanoNodeIn


class VolcanoPredicateResponse(BaseModel):
    """argument.go lines 40-43: the reason under JSON key ``status`` and a ``code`` (api
    types.go lines 139-153: 0 Success, 1 Error, 2 Unschedulable, 3 UnschedulableAndUnresolvable)."""

    status: str = ""
    code: int = 0


class VolcanoPrioritizeRequest(_GoKeys):
    """argument.go lines 45-48: ``task`` and ``nodes`` (a list of ``api.NodeInfo``)."""

    go_keys: ClassVar[tuple[str, ...]] = ("task", "nodes")

    task: VolcanoTaskIn
    nodes: list[VolcanoNodeIn]


class VolcanoPrioritizeResponse(BaseModel):
    """argument.go lines 50-53: ``nodeScore`` (node -> score) and ``errorMessage``."""

    nodeScore: dict[str, float] = Field(default_factory=dict)
    errorMessage: str = ""
