"""Training jobs as users write them (the seed's FoundationModelTrainingJob), and their gangs.

Expansion into the units the engine places (``TrainingJob.units()``):

* A **replica** is one copy of the model. ``spec.replicaCount`` replicas run data-parallel.
* Every group of type ``TensorParallel``, ``PipelineParallel`` or ``ExpertParallel`` is a
  *model-parallel* group: each replica gets one unit of ``gpusPerGroup`` GPUs per such group.
  The unit's own ``gpuRequirements`` and ``interNodeConnectivity`` hold among its GPUs.
* A ``DataParallel`` group describes the data-parallel dimension. If the job has
  model-parallel groups, it adds no GPUs (its ``gpusPerGroup`` must then be 1: one
  model-parallel copy per DP rank); its ``gpuRequirements`` (type, memory and NVLink floors)
  apply to every GPU of the job, Auxiliary units included, and its ``interNodeConnectivity``
  to the links *between* replicas. If the job has no
  model-parallel group, each replica is one unit of ``gpusPerGroup`` GPUs.
* An ``Auxiliary`` group is one unit for the whole job (not per replica).
* The job is a gang: every unit is placed in the same round, or none is.

Worked example, the seed manifest ``llama-3-120b-finetune``: ``replicaCount: 20``, one
``TensorParallel`` group of 8 and one ``DataParallel`` group of 1 -> 20 units of 8 GPUs
(160 GPUs). Each unit: type H100 (``acceleratorType``; the toleration ``h100|a100`` allows
both families, and a GPU must satisfy both: the selector is ``H100&h100|a100``), >= 80 GB, every pair >= 900 (NVLink
GB/s, the vendor figure the seed's comments refer to), so one 8-GPU NVSwitch node; across
replicas >= 200 Gb/s fabric bandwidth, no hop limit.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from hyperplace.models.base import HPModel
from hyperplace.models.limits import MAX_GROUP_GPUS, MAX_UNITS_PER_JOB, Name


class GroupType(StrEnum):
    TENSOR_PARALLEL = "TensorParallel"
    DATA_PARALLEL = "DataParallel"
    PIPELINE_PARALLEL = "PipelineParallel"
    EXPERT_PARALLEL = "ExpertParallel"
    AUXILIARY = "Auxiliary"


MODEL_PARALLEL = (GroupType.TENSOR_PARALLEL, GroupType.PIPELINE_PARALLEL, GroupType.EXPERT_PARALLEL)

# Named priorities, as the seed writes them; integers are accepted as they are.
PRIORITY_LEVELS = {"low": 1, "normal": 2, "medium": 2, "high": 3, "critical": 4}


class SkippedJob(HPModel):
    """A job read from its owner's documents that hyperplace does not place, and why (a
    CPU-only workload: no pod asks for a GPU). Kept so the plan and the table say so
    instead of the job vanishing."""

    job: str
    reason: str


class ObjectMeta(HPModel):
    name: Name
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class GPURequirements(HPModel):
    min_memory_gb: float = Field(default=0, ge=0, alias="minMemoryGB")
    min_nvlink_bandwidth_gbps_per_pair: float = Field(
        default=0, ge=0, alias="minNVLinkBandwidthGbpsPerPair"
    )
    accelerator_type: str | None = None


class InterNodeConnectivity(HPModel):
    min_infiniband_bandwidth_gbps: float = Field(default=0, ge=0, alias="minInfiniBandBandwidthGbps")
    max_hop_count: int | None = Field(default=None, ge=0)


class ResourceGroup(HPModel):
    name: str = Field(min_length=1)
    type: GroupType
    gpus_per_group: int = Field(gt=0, le=MAX_GROUP_GPUS, strict=True)
    gpu_requirements: GPURequirements = Field(default_factory=GPURequirements)
    inter_node_connectivity: InterNodeConnectivity = Field(default_factory=InterNodeConnectivity)


class Toleration(HPModel):
    key: str
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str | None = None
    effect: str | None = None


class Parallelism(HPModel):
    """How a job trains, as the cost model prices it (``hyperplace predict``'s flags):
    degrees (DP is the rest of the job's GPUs), schedule and memory options. A job may
    instead declare ``parallelism: auto``: the planner (``hyperplace plan``) picks."""

    tp: int = Field(default=1, gt=0, le=1024, strict=True)
    pp: int = Field(default=1, gt=0, le=4096, strict=True)
    cp: int = Field(default=1, gt=0, le=1024, strict=True)
    ep: int = Field(default=1, gt=0, le=1024, strict=True,
                    description="expert parallelism (MoE models): divides DP x CP")
    virtual_stages: int = Field(default=1, gt=0, le=1024, strict=True)
    micro_batch: int = Field(default=1, gt=0, le=65536, strict=True)
    global_batch: int | None = Field(default=None, gt=0, le=1 << 24, strict=True)
    recompute: Literal["none", "selective", "full"] = "none"
    zero: int = Field(default=1, ge=0, le=3, strict=True)
    precision: Literal["bf16", "fp16", "fp8"] = "bf16"


class TrainingJobSpec(HPModel):
    model: str = Field(min_length=1)
    parallelism: Parallelism | Literal["auto"] | None = Field(
        default=None, description="how the job trains (the cost model prices its speed with "
        "it); 'auto': the planner's best; none: the speed model's default rule")
    replica_count: int = Field(default=1, gt=0, le=16384, strict=True,
                               description="at most 16,384 replicas (131,072 GPUs at TP 8)")
    resource_groups: list[ResourceGroup] = Field(min_length=1)
    checkpoint_strategy: str | None = None
    priority: str | int = "normal"
    tolerations: list[Toleration] = Field(default_factory=list)

    @field_validator("priority")
    @classmethod
    def _known_priority(cls, v: str | int) -> str | int:
        if isinstance(v, str) and v.lower() not in PRIORITY_LEVELS:
            raise ValueError(f"unknown priority {v!r}; use one of {', '.join(PRIORITY_LEVELS)} or an integer")
        return v

    @model_validator(mode="after")
    def _groups(self) -> "TrainingJobSpec":
        groups = self.resource_groups
        names = {g.name for g in groups}
        if len(names) != len(groups):
            raise ValueError("resourceGroups: group names must be unique")
        mp = dps = aux = 0
        for g in groups:
            if g.type in MODEL_PARALLEL:
                mp += 1
            elif g.type == GroupType.DATA_PARALLEL:
                dps += 1
            elif g.type == GroupType.AUXILIARY:
                aux += 1
        if mp and dps:
            for i, g in enumerate(groups):  # names are unique: i is the group's index
                if g.type == GroupType.DATA_PARALLEL and g.gpus_per_group != 1:
                    raise ValueError(
                        f"resourceGroups[{i}].gpusPerGroup: a DataParallel group beside "
                        "model-parallel groups counts model copies per DP rank and must be 1")
        if dps > 1:
            raise ValueError("resourceGroups: at most one DataParallel group")
        per_replica = mp or 1
        units = self.replica_count * per_replica + aux
        if units > MAX_UNITS_PER_JOB:
            raise ValueError(f"resourceGroups: {units:,} gang units ({self.replica_count:,} "
                             f"replicas x {per_replica} groups), more than the limit of "
                             f"{MAX_UNITS_PER_JOB:,} per job")
        return self


class GangUnit(HPModel):
    """A set of GPUs placed together: one model-parallel group of one replica (or one DP rank)."""

    job: str
    name: str = Field(description="<group>/<replica>, unique within the job")
    group: str
    group_type: GroupType
    replica: int | None
    gpus: int
    gpu_types: str | None = Field(description="'|'-separated allowed types/families; None = any")
    min_memory_gb: float = 0
    min_nvlink_gbps: float = 0
    min_ib_gbps: float = 0
    max_hop_count: int | None = None
    #: a slice unit (:mod:`hyperplace.models.slices`): this many pods of equal size, in one
    #: NVLink domain, each pod whole on one node; 0 = not a slice
    slice_pods: int = 0


class TrainingJob(HPModel):
    """``ai.example.com/v1alpha1`` ``FoundationModelTrainingJob``, accepted verbatim."""

    api_version: Literal["ai.example.com/v1alpha1"] = "ai.example.com/v1alpha1"
    kind: Literal["FoundationModelTrainingJob"] = "FoundationModelTrainingJob"
    metadata: ObjectMeta
    spec: TrainingJobSpec

    @model_validator(mode="after")
    def _slices(self) -> "TrainingJob":
        if not self.metadata.annotations:  # no slice annotations: nothing to check
            return self
        from hyperplace.models.slices import check_job_slices

        mp = sum(g.type in MODEL_PARALLEL for g in self.spec.resource_groups)
        check_job_slices(self, self.spec.replica_count, mp or 1)
        return self

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def priority(self) -> int:
        p = self.spec.priority
        return p if isinstance(p, int) else PRIORITY_LEVELS[p.lower()]

    def _dp_group(self) -> ResourceGroup | None:
        return next((g for g in self.spec.resource_groups if g.type == GroupType.DATA_PARALLEL), None)

    def allowed_types(self, group: ResourceGroup) -> str | None:
        """The type selector for a group's GPUs: every selector that applies, intersected.

        The group's ``acceleratorType``, the DataParallel group's ``acceleratorType`` (its
        requirements hold for every GPU of the job) and the value of a ``gpu-type``
        toleration (operator ``Equal``) each restrict the types; a GPU must satisfy all of
        them (``&`` in the selector, see :meth:`GPUType.matches`). None: any type.
        """
        return self._allowed_types(group, self._dp_group())

    def _allowed_types(self, group: ResourceGroup, dp: ResourceGroup | None) -> str | None:
        parts: list[str] = []
        for accel in (group.gpu_requirements.accelerator_type,
                      dp.gpu_requirements.accelerator_type if dp is not None else None):
            if accel and accel not in parts:
                parts.append(accel)
        for t in self.spec.tolerations:
            if t.key == "gpu-type" and t.operator == "Equal" and t.value and t.value not in parts:
                parts.append(t.value)
        return "&".join(parts) or None

    @property
    def between_replicas(self) -> InterNodeConnectivity:
        dp = self._dp_group()
        return dp.inter_node_connectivity if dp else InterNodeConnectivity()

    def units(self) -> list[GangUnit]:
        dp: ResourceGroup | None = None  # the first DataParallel group
        mp: list[ResourceGroup] = []
        aux: list[ResourceGroup] = []
        for g in self.spec.resource_groups:
            if g.type in MODEL_PARALLEL:
                mp.append(g)
            elif g.type == GroupType.DATA_PARALLEL:
                if dp is None:
                    dp = g
            elif g.type == GroupType.AUXILIARY:
                aux.append(g)
        per_replica = mp or ([dp] if dp else [])
        out: list[GangUnit] = []
        for g in per_replica:  # replicas differ only in their name and number
            proto = self._unit(g, 0, dp)
            out += [proto] + [_copy_unit(proto, f"{g.name}/{r}", r)
                              for r in range(1, self.spec.replica_count)]
        if len(per_replica) > 1:  # replica by replica, its groups in order
            n = self.spec.replica_count
            out = [out[i * n + r] for r in range(n) for i in range(len(per_replica))]
        out = self._sliced(out)
        for g in aux:
            out.append(self._unit(g, None, dp))
        return out

    def _sliced(self, units: list[GangUnit]) -> list[GangUnit]:
        """With a slice size ``k`` (:mod:`hyperplace.models.slices`): every ``k`` replica
        units, in order, as one slice unit ``<group>/slice<i>`` of ``k`` pods."""
        if not self.metadata.annotations:  # slices are asked for by annotations
            return units
        from hyperplace.models.slices import slice_size

        k = slice_size(self)
        if k is None or not units:
            return units
        out = []
        for i in range(0, len(units), k):
            first = units[i]
            out.append(first.model_copy(update={
                "name": f"{first.group}/slice{i // k}", "replica": i // k,
                "gpus": first.gpus * k, "slice_pods": k}))
        return out

    def _unit(self, g: ResourceGroup, replica: int | None, dp: ResourceGroup | None) -> GangUnit:
        req = g.gpu_requirements
        mem = req.min_memory_gb
        nvl = req.min_nvlink_bandwidth_gbps_per_pair
        if dp is not None and dp is not g:  # the DataParallel group's floors hold on every GPU
            mem = max(mem, dp.gpu_requirements.min_memory_gb)
            nvl = max(nvl, dp.gpu_requirements.min_nvlink_bandwidth_gbps_per_pair)
        conn = g.inter_node_connectivity
        return _new_unit({
            "job": self.name,
            "name": f"{g.name}/{replica}" if replica is not None else g.name,
            "group": g.name,
            "group_type": g.type,
            "replica": replica,
            "gpus": g.gpus_per_group,
            "gpu_types": self._allowed_types(g, dp),
            "min_memory_gb": float(mem),
            "min_nvlink_gbps": float(nvl),
            "min_ib_gbps": float(conn.min_infiniband_bandwidth_gbps),
            "max_hop_count": conn.max_hop_count,
            "slice_pods": 0,
        })

    @property
    def total_gpus(self) -> int:
        return sum(u.gpus for u in self.units())


# GangUnits are made from a validated job (every field already checked), millions of times
# in a 131,072-GPU round (reading, building, checking): built as ``model_construct`` would
# (all fields set, no validation) through the slots' setters, a fifth of validating them.
_UNIT_FIELDS = frozenset(GangUnit.model_fields) - {"slice_pods"}  # as GangUnit(...) set them
_SLOTS = BaseModel.__dict__
_SET_DICT = _SLOTS["__dict__"].__set__
_SET_FIELDS = _SLOTS["__pydantic_fields_set__"].__set__
_SET_EXTRA = _SLOTS["__pydantic_extra__"].__set__
_SET_PRIVATE = _SLOTS["__pydantic_private__"].__set__


def _new_unit(fields: dict, _new=object.__new__) -> GangUnit:
    unit = _new(GangUnit)
    _SET_DICT(unit, fields)
    _SET_FIELDS(unit, set(_UNIT_FIELDS))  # a set of its own: model_copy adds to it
    _SET_EXTRA(unit, None)
    _SET_PRIVATE(unit, None)
    return unit


def _copy_unit(proto: GangUnit, name: str, replica: int) -> GangUnit:
    """Another replica's unit of the same group: ``proto`` renamed and renumbered."""
    return _new_unit({**proto.__dict__, "name": name, "replica": replica})
