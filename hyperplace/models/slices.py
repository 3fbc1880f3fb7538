"""Slices: a job's pods in fixed-size groups, each group inside one NVLink domain (#24).

Kueue's topology-aware scheduling writes it as two pod-set annotations,
``kueue.x-k8s.io/podset-slice-required-topology`` (the level each slice must stay in; here
the NVLink domain, GFD's ``nvidia.com/gpu.clique`` label) and
``kueue.x-k8s.io/podset-slice-size`` (pods per slice); KAI-Scheduler calls the same idea
segments (``kai.scheduler/segment-size`` with ``kai.scheduler/segment-topology-required-
placement``). hyperplace reads either pair on a ``FoundationModelTrainingJob``'s metadata.

A pod is one gang unit of the job as it would run without slices (one replica of its only
group: on GB200 one pod of 4 GPUs is one compute tray), so a job of ``R`` such units with
slice size ``k`` becomes ``R / k`` *slice units* ``<group>/slice<i>`` of ``k`` pods each
(:meth:`~hyperplace.models.job.TrainingJob.units`), every one lying on the trays of one
NVLink domain, each pod whole on one node (slices of different jobs, and slices of one job,
may use different racks). The rules:

* the size is a whole number >= 1 that divides the job's pods (``R``);
* the job has one group per replica (a DataParallel-only job, or one model-parallel group);
* the slice divides the trays every NVLink domain of the job's GPU types offers (its trays
  less its spare trays, :class:`~hyperplace.models.nvlink.NVLinkDomain`), checked with the
  clusters (:func:`check_slices`); each violation is one line naming the annotation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hyperplace.models.instance import Instance
    from hyperplace.models.job import TrainingJob

#: Kueue pod-set annotations (TAS): pods per slice, and the topology level of a slice
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
SLICE_TOPOLOGY = "kueue.x-k8s.io/podset-slice-required-topology"
#: KAI-Scheduler's segments (NVIDIA/KAI-Scheduler docs/developer/designs/segmented-subgroups):
#: pods per segment and the topology level each segment must stay in
KAI_SEGMENT_SIZE = "kai.scheduler/segment-size"
KAI_SEGMENT_TOPOLOGY = "kai.scheduler/segment-topology-required-placement"
#: GPU Feature Discovery's label naming a node's NVLink domain (clique)
CLIQUE_LABEL = "nvidia.com/gpu.clique"


def slice_size(job: TrainingJob) -> int | None:
    """Pods per slice the job asks for (None: no slices); ValueError naming the field."""
    ann = job.metadata.annotations
    size_key, level_key = (SLICE_SIZE, SLICE_TOPOLOGY) if SLICE_SIZE in ann else \
        (KAI_SEGMENT_SIZE, KAI_SEGMENT_TOPOLOGY)
    raw = ann.get(size_key)
    if raw is None:
        return None
    where = f"metadata.annotations.{size_key}"
    try:
        k = int(str(raw).strip())
    except ValueError:
        raise ValueError(f"{where}: {raw!r} is not a whole number of pods") from None
    if k < 1:
        raise ValueError(f"{where}: a slice holds at least 1 pod, not {k}")
    level = ann.get(level_key, CLIQUE_LABEL)
    if level != CLIQUE_LABEL:
        raise ValueError(f"metadata.annotations.{level_key}: slices are kept inside an "
                         f"NVLink domain ({CLIQUE_LABEL!r}), not {level!r}")
    return k


def check_job_slices(job: TrainingJob, pods: int, groups_per_replica: int) -> None:
    """The job's own slice rules (size divides its pods, one group per replica)."""
    k = slice_size(job)
    if k is None:
        return
    key = SLICE_SIZE if SLICE_SIZE in job.metadata.annotations else KAI_SEGMENT_SIZE
    where = f"metadata.annotations.{key}"
    if groups_per_replica != 1:
        raise ValueError(f"{where}: slices group a job's pods, one unit per replica; this job "
                         f"has {groups_per_replica} groups per replica")
    if pods % k:
        raise ValueError(f"{where}: a slice of {k} pods does not divide the job's {pods} pods "
                         "(replicaCount)")


def check_slices(instance: Instance) -> None:
    """Every slice job's slice divides the trays of every NVLink domain its GPUs could use
    (ValueError naming ``spec.jobs[i].metadata.annotations...``)."""
    if not any(SLICE_SIZE in j.metadata.annotations or KAI_SEGMENT_SIZE in j.metadata.annotations
               for j in instance.spec.jobs):
        return
    catalog = instance.catalog
    domains = []
    for c in instance.clusters:
        by_name = {n.name: n for n in c.nodes}
        for d in c.fabric.nvlink_domains:  # the spec: validation builds no fabric
            first = by_name[d.nodes[0]]
            domains.append((d, first.gpu_count, catalog.find(first.gpu_type)))
    if not domains:
        return
    for i, job in enumerate(instance.spec.jobs):
        k = slice_size(job)
        if k is None:
            continue
        (unit, *_) = job.units()
        pod = unit.gpus // k
        for d, tray, t in domains:
            if t is None or (unit.gpu_types and not t.matches(unit.gpu_types)) or \
                    t.hbm_gb + 1e-9 < unit.min_memory_gb:
                continue
            if (k * pod) % tray or d.usable_trays % (k * pod // tray):
                key = SLICE_SIZE if SLICE_SIZE in job.metadata.annotations else KAI_SEGMENT_SIZE
                raise ValueError(
                    f"spec.jobs[{i}].metadata.annotations.{key}: a slice of {k} pods "
                    f"({k * pod} GPUs) does not divide NVLink domain {d.name!r} "
                    f"({d.usable_trays} trays of {tray} GPUs"
                    + (f" after its {d.spare_trays} spare trays" if d.spare_trays else "")
                    + ")")
