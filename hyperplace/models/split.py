"""The layer-split problem and its answer, in the domain's words.

A *stage* is a group of GPUs of one type in one cluster running one pipeline stage with
tensor-parallel degree ``tp`` and ``gpu_count / tp`` data-parallel replicas (the micro-batch
is divided over the replicas, as in Metis and AMP). Links say how fast boundary activations
move between two stages (or two clusters); the :class:`SplitPlan` says which contiguous
layers each stage runs and what that costs, next to the baselines people use today.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from hyperplace.models.base import HPModel
from hyperplace.models.model_spec import ModelSpec
from hyperplace.models.result import SolveStats

LinkKind = Literal["nvlink", "ib", "wan"]

# Defaults when no link is declared between two stages (cost-model.md, Communication).
DEFAULT_INTRA_CLUSTER_GBPS = 400.0  # InfiniBand NDR
DEFAULT_INTRA_CLUSTER_LATENCY_MS = 0.005
DEFAULT_INTER_CLUSTER_GBPS = 100.0  # a typical leased WAN wave
DEFAULT_INTER_CLUSTER_LATENCY_MS = 20.0
# The largest stage: 16,384 TP-8 replicas, the same ceiling as a training job's replicaCount.
MAX_STAGE_GPUS = 131072


class Stage(HPModel):
    """GPUs of one type in one cluster that run one contiguous range of layers."""

    name: str = Field(default="", description="unique; defaults to TYPExCOUNT@CLUSTER")
    cluster: str = Field(min_length=1)
    gpu_type: str = Field(min_length=1)
    gpu_count: int = Field(gt=0, le=MAX_STAGE_GPUS, strict=True)
    tp: int | None = Field(default=None, gt=0, description="tensor parallel; default min(count, 8)")
    optional: bool = Field(default=False, description="may stay empty (left out of the pipeline)")
    precision: Literal["bf16", "fp16", "fp32", "fp8"] | None = Field(
        default=None, description="this stage's training precision; default the problem's")

    @model_validator(mode="after")
    def _fill(self) -> "Stage":
        if not self.name:
            object.__setattr__(self, "name", f"{self.gpu_type}x{self.gpu_count}@{self.cluster}")
        if self.tp is None:
            object.__setattr__(self, "tp", min(self.gpu_count, 8))
        if self.gpu_count % self.tensor_parallel:
            raise ValueError(
                f"tp: {self.tp} does not divide the stage's {self.gpu_count} GPUs"
            )
        return self

    @property
    def tensor_parallel(self) -> int:
        return self.tp or min(self.gpu_count, 8)

    @property
    def data_parallel(self) -> int:
        return self.gpu_count // self.tensor_parallel


class StageLink(HPModel):
    """Bandwidth and latency between two stages or two clusters (stage names win)."""

    a: str = Field(min_length=1, description="stage or cluster name")
    b: str = Field(min_length=1, description="stage or cluster name")
    gbps: float = Field(gt=0, description="Gb/s available to the pipeline boundary")
    latency_ms: float = Field(default=0.0, ge=0)
    kind: LinkKind = "wan"


class SplitProblem(HPModel):
    """Everything the layer split needs: model, stages, links, schedule and memory options."""

    model: ModelSpec
    stages: list[Stage] = Field(min_length=1)
    links: list[StageLink] = Field(default_factory=list)
    microbatches: int = Field(default=8, gt=0, description="micro-batches per step (m)")
    zero: int = Field(default=0, ge=0, le=3, description="ZeRO stage, sharded over a stage's DP")
    recompute: bool = Field(default=False, description="full activation recomputation")
    virtual_stages: int = Field(default=1, gt=0, le=1024, strict=True,
                                description="interleaved 1F1B: model chunks per pipeline rank")
    overlap_grad_reduce: bool = Field(
        default=False, description="the DP gradient reduction runs under the last micro-batch's "
        "backward pass (Megatron-Core --overlap-grad-reduce, PyTorch DDP/FSDP buckets)")
    overlap_param_gather: bool = Field(
        default=False, description="with the distributed optimizer (ZeRO >= 1) and "
        "overlap_grad_reduce: the reduce-scatter half runs under the last micro-batch's "
        "backward, the parameter all-gather half under the first one's forward "
        "(Megatron-Core --overlap-param-gather)")
    precision: Literal["bf16", "fp16", "fp32", "fp8"] = Field(
        default="bf16", description="training precision (peak FLOPs and bytes per value)")
    expert_parallel: int = Field(
        default=1, gt=0, le=65536, strict=True, description="MoE expert parallelism: the "
        "routed experts of a stage sharded over this many of its data-parallel ranks")
    context_parallel: int = Field(
        default=1, gt=0, le=65536, strict=True, description="context-parallel ranks among "
        "a stage's data-parallel ranks (where an expert-parallel group sits)")
    fixed_order: bool = Field(default=False, description="keep the stages in the given order")
    runtime_overhead_gb: float = Field(default=2.5, ge=0, description="framework, CUDA context")
    fp32_grad_accum: bool = Field(default=False, description="gradients kept in FP32 (ZeRO 0)")
    intra_cluster_gbps: float = Field(default=DEFAULT_INTRA_CLUSTER_GBPS, gt=0)
    intra_cluster_latency_ms: float = Field(default=DEFAULT_INTRA_CLUSTER_LATENCY_MS, ge=0)
    inter_cluster_gbps: float = Field(default=DEFAULT_INTER_CLUSTER_GBPS, gt=0)
    inter_cluster_latency_ms: float = Field(default=DEFAULT_INTER_CLUSTER_LATENCY_MS, ge=0)

    @model_validator(mode="after")
    def _unique_names(self) -> "SplitProblem":
        """Default names (TYPExCOUNT@CLUSTER) repeat for identical stages: number them
        ``#2``, ``#3``; a name the user chose twice is an error."""
        seen: set[str] = set()
        stages = []
        for i, s in enumerate(self.stages):
            if s.name in seen:
                if s.name != f"{s.gpu_type}x{s.gpu_count}@{s.cluster}":
                    raise ValueError(f"stages[{i}]: stage name {s.name!r} appears twice")
                n = 2
                while f"{s.name}#{n}" in seen:
                    n += 1
                s = s.model_copy(update={"name": f"{s.name}#{n}"})
            seen.add(s.name)
            stages.append(s)
        object.__setattr__(self, "stages", stages)
        return self


class StageAssignment(HPModel):
    """One stage's share of the plan (times per micro-batch, memory per GPU)."""

    name: str
    cluster: str
    gpu_type: str
    gpu_count: int
    tp: int
    dp: int
    position: int | None = Field(description="0-based pipeline position; None when empty")
    first_layer: int | None = None
    last_layer: int | None = Field(default=None, description="inclusive")
    num_layers: int = 0
    compute_s: float = 0.0
    transfer_s: float = Field(default=0.0, description="boundary sends+receives, both sides")
    load_s: float = Field(default=0.0, description="compute + transfer per micro-batch")
    idle_s: float = Field(default=0.0, description="bottleneck - load: waiting per micro-batch")
    dp_sync_s: float = Field(default=0.0, description="gradient all-reduce once per step")
    optimizer_s: float = Field(default=0.0, description="optimizer update once per step")
    inflight_microbatches: int = 0
    memory_used_gb: float = 0.0
    memory_available_gb: float = 0.0

    @property
    def layer_range(self) -> str:
        if self.first_layer is None:
            return "-"
        return f"{self.first_layer}-{self.last_layer}"


class BaselineSummary(HPModel):
    """A baseline split evaluated under the same cost model as the optimum."""

    name: str
    layers_per_stage: list[int]
    feasible: bool
    bottleneck_s: float | None = None
    step_time_s: float | None = None
    ratio_to_optimal: float | None = Field(default=None, description="baseline / optimum")
    idle_s: list[float] = Field(default_factory=list, description="per stage, per micro-batch")
    message: str = ""


class SplitPlan(HPModel):
    """The chosen split with the numbers that justify it."""

    model: str
    feasible: bool
    stages: list[StageAssignment] = Field(description="in pipeline order, empty stages last")
    order: list[str] = Field(description="stage names in pipeline order (non-empty only)")
    cuts: list[int] = Field(default_factory=list, description="[0, c1, ..., L] over the order")
    num_layers: int
    microbatches: int
    tokens_per_microbatch: int
    bottleneck_s: float | None = None
    pipeline_time_s: float | None = Field(default=None, description="(m-1)·max + Σ")
    dp_sync_s: float | None = Field(default=None, description="max over stages of DP all-reduce")
    optimizer_s: float | None = Field(default=None, description="max over stages of the update")
    step_time_s: float | None = None
    bubble_fraction: float | None = None
    throughput_tokens_s: float | None = None
    lower_bound_s: float | None = Field(default=None, description="fluid bound on the bottleneck")
    stats: SolveStats
    symmetric: BaselineSummary | None = None
    proportional: BaselineSummary | None = None
    wan_crossings: int = 0
    notes: list[str] = Field(default_factory=list)
    infeasible_reason: str = ""

    def summary(self) -> str:
        """One line people can paste into an issue."""
        if not self.feasible:
            return f"{self.model}: infeasible: {self.infeasible_reason}"
        counts = "/".join(str(s.num_layers) for s in self.stages if s.position is not None)
        line = (f"{self.model}: split {counts} over {' -> '.join(self.order)}, bottleneck "
                f"{1e3 * (self.bottleneck_s or 0):.2f} ms, {self.stats.status.value} "
                f"({self.stats.solver})")
        if self.symmetric and self.symmetric.ratio_to_optimal:
            line += f", symmetric is {self.symmetric.ratio_to_optimal:.2f}x slower"
        return line
