"""Volcano Global's ``HyperJob`` (``training.volcano.sh/v1alpha1``): one training job split
into Volcano Jobs across clusters.

Shape as in the upstream CRD (shared/schemas/training.volcano.sh_hyperjobs.yaml):
``spec.replicatedJobs[{name, replicas, clusterNames, splitPolicy{mode: static|auto,
accelerators, acceleratorType}, templateSpec: <Volcano Job spec>}]`` plus ``minAvailable``,
``maxDomains`` and ``plugins``. The controller names child jobs ``{hyperjob}-{replicatedJob}-{i}``
and gives each a Karmada PropagationPolicy; ``splitPolicy.mode: auto`` leaves the split to an
external service, which is what hyperplace is for. ``templateSpec`` is a Volcano Job spec and
is kept as written (its own CRD is batch.volcano.sh).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from hyperplace.models.base import HPModel
from hyperplace.models.job import ObjectMeta
from hyperplace.models.limits import MAX_HYPERJOB_REPLICAS


class SplitPolicy(HPModel):
    mode: Literal["static", "auto"] | None = None
    accelerators: int | None = Field(default=None, ge=0, strict=True)
    accelerator_type: str | None = None


class ReplicatedJob(HPModel):
    name: str = Field(min_length=1)
    replicas: int = Field(default=1, ge=0, le=MAX_HYPERJOB_REPLICAS, strict=True)
    cluster_names: list[str] = Field(default_factory=list)
    split_policy: SplitPolicy | None = None
    template_spec: dict[str, Any] = Field(description="a Volcano Job spec (batch.volcano.sh)")


class HyperJobSpec(HPModel):
    replicated_jobs: list[ReplicatedJob] = Field(min_length=1)
    min_available: int | None = Field(default=None, ge=0, strict=True)
    max_domains: int | None = Field(default=None, ge=0, strict=True)
    plugins: dict[str, list[str]] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _unique_names(self) -> "HyperJobSpec":
        names = [r.name for r in self.replicated_jobs]
        for i, n in enumerate(names):
            if names.index(n) != i:
                raise ValueError(f"replicatedJobs[{i}].name: duplicate replicated job {n!r}")
        return self


class HyperJob(HPModel):
    api_version: Literal["training.volcano.sh/v1alpha1"] = "training.volcano.sh/v1alpha1"
    kind: Literal["HyperJob"] = "HyperJob"
    metadata: ObjectMeta
    spec: HyperJobSpec

    def child_job_names(self) -> list[str]:
        """Names the controller gives the child Volcano Jobs: ``{hyperjob}-{replicatedJob}-{i}``."""
        return [f"{self.metadata.name}-{r.name}-{i}"
                for r in self.spec.replicated_jobs for i in range(r.replicas)]

    @property
    def auto_split(self) -> list[ReplicatedJob]:
        """Replicated jobs whose split is left to an external service (``mode: auto``)."""
        return [r for r in self.spec.replicated_jobs
                if r.split_policy is not None and r.split_policy.mode == "auto"]
