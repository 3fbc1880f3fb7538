"""Seeded synthetic instances of any size, for benchmarks and property tests.

Why synthetic at all: the public traces have job sizes but no cluster state, no GPU types
on the Philly side and no fabric. So the generator takes what is real (the *distribution of
GPU counts per job* of the Microsoft Philly trace, ``data/traces/philly_sample.csv``) and
builds the rest from the shapes vendors publish (8-GPU NVSwitch nodes, leaf/spine fat-trees,
rail-optimised SuperPOD scalable units).

What a generated instance holds:

* ``ceil(gpus / 8)`` nodes of 8 NVSwitch GPUs, the GPU types split into contiguous blocks
  (clusters are bought in phases, so a leaf or scalable unit has one type);
* a ``superpod-rail`` fabric (32 nodes per SU) from 512 GPUs, otherwise ``fat-tree-2``
  with 8 nodes per leaf (``fabric=`` overrides);
* *running* jobs holding ``fragmentation`` x GPUs, sizes drawn from Philly too. Jobs of 8+
  GPUs take whole nodes picked at random (scattering them over leaves); smaller ones land
  on an already-used node with probability 0.7, else on a fresh one. Pure scattering would
  touch every node at 30 % load (two thirds of Philly's GPU volume is 1-GPU jobs) and leave
  nothing for 8-GPU groups; pure packing would leave no fragmentation to optimise. The 0.7
  keeps both whole-free and partly-used nodes, as real clusters have;
* a pending queue of ``jobs`` FoundationModelTrainingJobs: 1-4 GPU jobs are one
  DataParallel group; 8+ GPU jobs are TensorParallel groups of 8 times DP replicas, 30 % of
  those with 16+ GPUs split into 2 or 4 pipeline stages, 30 % of multi-replica jobs asking
  ``maxHopCount: 1`` between replicas; half of the jobs pin one GPU family
  (``acceleratorType``), the rest tolerate any type present; priorities low/normal/high
  at 3:5:2.

Two independent random streams (state and queue) derive from the seed, so changing the
queue length does not reshuffle the cluster state. Same arguments, same bytes.
"""

from __future__ import annotations

import csv
import math
import random
from functools import cache
from importlib import resources
from typing import Any

from hyperplace.errors import InputError, known_words
from hyperplace.models import (
    Cluster,
    FabricGenerator,
    FabricSpec,
    GPUCatalog,
    GPUType,
    Instance,
    InstanceSpec,
    Node,
    TrainingJob,
)
from hyperplace.models.job import ObjectMeta

GPUS_PER_NODE = 8
SUPERPOD_THRESHOLD_GPUS = 512
DEFAULT_GPU_TYPES = ("H100-80", "A100-80")
FABRICS = ("auto", "fat-tree-2", "fat-tree-3", "superpod-rail")
PHILLY_SOURCE = (
    "Microsoft Philly trace (2017, CC-BY-4.0) via the Sia artifact "
    "(siasosp23/artifacts sia-simulator/traces/philly.csv), 2,000-job window from 2017-11-01"
)

# Annotation keys every instance carries for `instances list` / `show`.
DESCRIPTION_KEY = "hyperplace.io/description"
SOURCE_KEY = "hyperplace.io/source"

_PRIORITIES = ("low", "normal", "high")
_PRIORITY_WEIGHTS = (3, 5, 2)
_LLM_MODELS = ("llama3-8b", "llama3-70b", "gpt3-175b")
_SMALL_MODELS = ("resnet50", "bert-large", "vit-l16", "llama3-8b")
_PACK_PROBABILITY = 0.7


@cache
def philly_gpu_counts() -> tuple[int, ...]:
    """GPU count of every job in the bundled Philly sample (the empirical distribution)."""
    path = resources.files("hyperplace.data") / "traces" / "philly_sample.csv"
    with path.open() as fh:
        counts = tuple(int(row["num_gpus"]) for row in csv.DictReader(fh))
    return tuple(c for c in counts if c > 0)


# ---- job shapes (shared with the bundled builders) -----------------------------------

def _requirements(memory_gb: float | None, nvlink_gbps: float | None,
                  accelerator: str | None) -> dict[str, Any]:
    req: dict[str, Any] = {}
    if memory_gb:
        req["minMemoryGB"] = memory_gb
    if nvlink_gbps:
        req["minNVLinkBandwidthGbpsPerPair"] = nvlink_gbps
    if accelerator:
        req["acceleratorType"] = accelerator
    return req


def _connectivity(ib_gbps: float | None, max_hops: int | None) -> dict[str, Any]:
    conn: dict[str, Any] = {}
    if ib_gbps:
        conn["minInfiniBandBandwidthGbps"] = ib_gbps
    if max_hops is not None:
        conn["maxHopCount"] = max_hops
    return conn


def _job_doc(name: str, model: str, replicas: int, groups: list[dict[str, Any]],
             priority: str, tolerate: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": model, "replicaCount": replicas, "resourceGroups": groups,
                            "priority": priority}
    if tolerate:
        spec["tolerations"] = [{"key": "gpu-type", "operator": "Equal", "value": tolerate}]
    return {"apiVersion": "ai.example.com/v1alpha1", "kind": "FoundationModelTrainingJob",
            "metadata": {"name": name}, "spec": spec}


def model_parallel_job(
    name: str, model: str, *, replicas: int, tp: int = 8, pipeline_stages: int = 1,
    accelerator: str | None = None, tolerate: str | None = None, memory_gb: float | None = 80,
    nvlink_gbps: float | None = None, tp_max_hops: int | None = None,
    tp_ib_gbps: float | None = None, dp_max_hops: int | None = None,
    dp_ib_gbps: float | None = 200, priority: str = "normal",
    dp_nvlink_gbps: float | None = None, checkpoint: str | None = None,
) -> TrainingJob:
    """A job shaped like the seed manifest: TP groups (optionally pipeline stages) x replicas.

    Stage 0 is the ``TensorParallel`` group, later stages are ``PipelineParallel`` groups of
    the same width; the ``DataParallel`` group of 1 carries the between-replica demands.
    """
    groups = [{
        "name": "tensor-parallel-group", "type": "TensorParallel", "gpusPerGroup": tp,
        "gpuRequirements": _requirements(memory_gb, nvlink_gbps, accelerator),
        "interNodeConnectivity": _connectivity(tp_ib_gbps, tp_max_hops),
    }]
    for stage in range(1, pipeline_stages):
        groups.append({
            "name": f"pipeline-stage-{stage}", "type": "PipelineParallel", "gpusPerGroup": tp,
            "gpuRequirements": _requirements(memory_gb, nvlink_gbps, accelerator),
            "interNodeConnectivity": _connectivity(tp_ib_gbps, tp_max_hops),
        })
    groups.append({
        "name": "data-parallel-replica-resources", "type": "DataParallel", "gpusPerGroup": 1,
        "gpuRequirements": _requirements(memory_gb, dp_nvlink_gbps, None),
        "interNodeConnectivity": _connectivity(dp_ib_gbps, dp_max_hops),
    })
    doc = _job_doc(name, model, replicas, groups, priority, tolerate)
    if checkpoint:
        doc["spec"]["checkpointStrategy"] = checkpoint
    return TrainingJob.model_validate(doc)


def small_job(name: str, model: str, gpus: int, *, replicas: int = 1,
              accelerator: str | None = None, tolerate: str | None = None,
              memory_gb: float | None = None, nvlink_gbps: float | None = None,
              max_hops: int | None = None, priority: str = "normal") -> TrainingJob:
    """A job with only a DataParallel group: each replica is one unit of ``gpus`` GPUs."""
    groups = [{
        "name": "workers", "type": "DataParallel", "gpusPerGroup": gpus,
        "gpuRequirements": _requirements(memory_gb, nvlink_gbps, accelerator),
        "interNodeConnectivity": _connectivity(None, max_hops),
    }]
    return TrainingJob.model_validate(_job_doc(name, model, replicas, groups, priority, tolerate))


def job_of_size(name: str, gpus: int, types: list[GPUType], rng: random.Random) -> TrainingJob:
    """A realistic job of ``gpus`` GPUs (see the module docstring for the shape rules)."""
    families = sorted({t.family for t in types})
    pinned = rng.random() < 0.5
    family = rng.choice(families) if pinned else None
    eligible = [t for t in types if family is None or t.family == family]
    memory = min(t.hbm_gb for t in eligible)
    nvlink = min(t.nvlink_gbps for t in eligible)
    tolerate = None if pinned else "|".join(f.lower() for f in families)
    priority = rng.choices(_PRIORITIES, _PRIORITY_WEIGHTS)[0]
    if gpus < GPUS_PER_NODE:
        return small_job(name, rng.choice(_SMALL_MODELS), gpus, accelerator=family,
                         tolerate=tolerate, memory_gb=math.floor(memory),
                         nvlink_gbps=nvlink if gpus > 1 else None, priority=priority)
    nodes = math.ceil(gpus / GPUS_PER_NODE)
    stages = 1
    if nodes >= 2 and rng.random() < 0.3:
        stages = 4 if nodes % 4 == 0 and rng.random() < 0.5 else 2
        if nodes % stages:
            stages = 1
    replicas = nodes // stages
    dp_hops = 1 if replicas >= 2 and rng.random() < 0.3 else None
    return model_parallel_job(
        name, rng.choice(_LLM_MODELS), replicas=replicas, pipeline_stages=stages,
        accelerator=family, tolerate=tolerate, memory_gb=math.floor(memory), nvlink_gbps=nvlink,
        tp_ib_gbps=None, dp_max_hops=dp_hops, dp_ib_gbps=200, priority=priority,
    )


# ---- cluster state ---------------------------------------------------------------

def fabric_for(fabric: str, gpus: int) -> FabricGenerator:
    """The fabric shape for ``gpus`` GPUs (``auto``: SuperPOD from 512 GPUs, else fat-tree)."""
    kind = fabric
    if fabric == "auto":
        kind = "superpod-rail" if gpus >= SUPERPOD_THRESHOLD_GPUS else "fat-tree-2"
    if kind == "superpod-rail":
        return FabricGenerator(type="superpod-rail", nodes_per_su=32)
    if kind == "fat-tree-3":
        return FabricGenerator(type="fat-tree-3", nodes_per_leaf=8, leaves_per_pod=4,
                               spines_per_pod=4, cores=4)
    if kind == "fat-tree-2":
        return FabricGenerator(type="fat-tree-2", nodes_per_leaf=8, spines=4)
    raise InputError(f"unknown fabric {fabric!r}; use one of {', '.join(FABRICS)}",
                     path="fabric")


class _Ordered(list):
    """A list of distinct node indices, each appended at most once, whose ``remove`` finds
    the element's place by counting (a Fenwick tree over the order of appending) instead of
    comparing it with every element before it: ``list.remove`` made a 131,072-GPU
    instance's scattering quadratic in its partly used nodes (a third of generating it, and
    growing with the square at a million GPUs). Same elements in the same order as a plain
    list, so the same random draws pick the same nodes."""

    def __init__(self, items: list[int], capacity: int):
        super().__init__(items)
        self._slot: dict[int, int] = {}  # element -> its place in the order of appending
        self._tree = [0] * (capacity + 1)
        self._appended = 0
        for x in items:
            self._mark(x)

    def _mark(self, x: int) -> None:
        self._slot[x] = i = self._appended
        self._appended += 1
        self._bump(i, 1)

    def _bump(self, i: int, delta: int) -> None:
        i += 1
        tree = self._tree
        while i < len(tree):
            tree[i] += delta
            i += i & -i

    def append(self, x: int) -> None:
        super().append(x)
        self._mark(x)

    def remove(self, x: int) -> None:
        i = self._slot.pop(x)
        before, k = 0, i  # elements appended before x and still here: x's index
        while k > 0:
            before += self._tree[k]
            k -= k & -k
        self._bump(i, -1)
        del self[before]


def scatter_running_jobs(free: list[list[int]], target_gpus: int, rng: random.Random,
                         sizes: tuple[int, ...], prefix: str = "run"
                         ) -> list[dict[int, str]]:
    """Allocate ``target_gpus`` GPUs to running jobs drawn from ``sizes``; per-node maps.

    ``free[i]`` lists node i's usable GPU indices and is consumed. Whole-node jobs scatter
    over random nodes; small ones prefer partly used nodes (see the module docstring).
    """
    allocated: list[dict[int, str]] = [{} for _ in free]
    whole = [i for i, f in enumerate(free) if len(f) == GPUS_PER_NODE]
    partial = _Ordered([i for i, f in enumerate(free) if 0 < len(f) < GPUS_PER_NODE],
                       len(free))
    remaining = target_gpus
    job_id = 0

    def take(node: int, count: int, job: str) -> None:
        picks = sorted(rng.sample(free[node], count))
        for g in picks:
            allocated[node][g] = job
        left = set(free[node]) - set(picks)
        free[node] = sorted(left)

    def drop(lst: list[int], pos: int) -> int:
        lst[pos], lst[-1] = lst[-1], lst[pos]
        return lst.pop()

    while remaining > 0 and (whole or partial):
        size = min(rng.choice(sizes), remaining)
        job_id += 1
        job = f"{prefix}-{job_id:05d}"
        if size >= GPUS_PER_NODE and len(whole) >= size // GPUS_PER_NODE:
            for _ in range(size // GPUS_PER_NODE):
                node = drop(whole, rng.randrange(len(whole)))
                take(node, GPUS_PER_NODE, job)
            remaining -= size // GPUS_PER_NODE * GPUS_PER_NODE
            continue
        size = min(size, GPUS_PER_NODE - 1)
        node = -1
        if partial and (not whole or rng.random() < _PACK_PROBABILITY):
            for _ in range(8):
                pos = rng.randrange(len(partial))
                if len(free[partial[pos]]) >= size:
                    node = partial[pos]
                    break
            if node < 0:
                size = 1
                node = partial[rng.randrange(len(partial))]
        if node < 0:
            node = drop(whole, rng.randrange(len(whole)))
            partial.append(node)
        take(node, size, job)
        remaining -= size
        if not free[node]:
            partial.remove(node)
    return allocated


def _cluster(name: str, prefix: str, node_count: int, types: list[GPUType],
             fragmentation: float, faulty_gpus: int, state_rng: random.Random,
             fabric_gen: FabricGenerator) -> Cluster:
    """One generated cluster: ``node_count`` 8-GPU nodes, the types in contiguous blocks,
    ``faulty_gpus`` faulty and ``fragmentation`` of the rest held by running jobs."""
    sizes = philly_gpu_counts()
    total = node_count * GPUS_PER_NODE
    per_type = [node_count // len(types)] * len(types)
    for i in range(node_count - sum(per_type)):
        per_type[i] += 1
    node_types = [t for t, k in zip(types, per_type) for _ in range(k)]
    names = [f"{prefix}{t.family.lower()}-{i:05d}" for i, t in enumerate(node_types)]

    free = [list(range(GPUS_PER_NODE)) for _ in names]
    faulty: list[list[int]] = [[] for _ in names]
    for pos in sorted(state_rng.sample(range(total), min(faulty_gpus, total))):
        node, gpu = divmod(pos, GPUS_PER_NODE)
        faulty[node].append(gpu)
        free[node].remove(gpu)
    usable = total - min(faulty_gpus, total)
    allocated = scatter_running_jobs(free, round(fragmentation * usable), state_rng, sizes,
                                     prefix=f"{prefix}run")
    nodes = [
        Node(name=n, gpu_type=t.name, gpu_count=GPUS_PER_NODE, allocated=a, faulty=f)
        for n, t, a, f in zip(names, node_types, allocated, faulty)
    ]
    return Cluster(name=name, region="synthetic", nodes=nodes,
                   fabric=FabricSpec(generator=fabric_gen))


def generate_federation(clusters: int, gpus_per_cluster: int, jobs: int,
                        gpu_types: list[str] | None = None, fragmentation: float = 0.3,
                        seed: int = 0, size_scale: int = 1) -> Instance:
    """``clusters`` generated clusters of ``gpus_per_cluster`` GPUs each (``c00``,
    ``c01``...; node and running-job names prefixed with the cluster's) and one queue of
    ``jobs`` jobs drawn as :func:`generate` draws them, every job sized to fit one cluster.
    Each cluster's state has its own random stream (``seed`` and its position)."""
    if clusters < 1:
        raise InputError(f"must be 1 or more, got {clusters}", path="clusters")
    if gpus_per_cluster < GPUS_PER_NODE:
        raise InputError(f"must be at least {GPUS_PER_NODE} (one node), got "
                         f"{gpus_per_cluster}", path="gpus_per_cluster")
    if jobs < 0:
        raise InputError(f"must be 0 or more, got {jobs}", path="jobs")
    if not 0.0 <= fragmentation <= 1.0:
        raise InputError(f"must be within [0, 1], got {fragmentation}", path="fragmentation")
    types = _resolve_types(gpu_types)
    node_count = math.ceil(gpus_per_cluster / GPUS_PER_NODE)
    fabric_gen = fabric_for("auto", node_count * GPUS_PER_NODE)
    members = [_cluster(f"c{k:02d}", f"c{k:02d}-", node_count, types, fragmentation, 0,
                        random.Random(f"hyperplace-state-{seed}-{k}"), fabric_gen)
               for k in range(clusters)]
    queue_rng = random.Random(f"hyperplace-queue-{seed}")
    largest = node_count * GPUS_PER_NODE
    sizes = philly_gpu_counts()
    width = len(str(max(jobs, 1)))
    queue = [job_of_size(f"job-{i:0{width}d}",
                         min(largest, queue_rng.choice(sizes) * size_scale), types, queue_rng)
             for i in range(1, jobs + 1)]
    total = clusters * largest
    type_list = ",".join(t.name for t in types)
    meta = ObjectMeta(
        name=f"federation-{clusters}x{largest}g-{jobs}j-seed{seed}",
        annotations={
            DESCRIPTION_KEY: (f"synthetic federation: {clusters} clusters of {largest} GPUs "
                              f"({total} GPUs, {type_list}), {fragmentation:.0%} held by "
                              f"running jobs, {jobs} pending jobs"),
            SOURCE_KEY: (f"hyperplace.instances.generate_federation(clusters={clusters}, "
                         f"gpus_per_cluster={gpus_per_cluster}, jobs={jobs}, "
                         f"gpu_types={type_list}, fragmentation={fragmentation}, seed={seed}, "
                         f"size_scale={size_scale}); job sizes drawn from {PHILLY_SOURCE}"),
        },
    )
    return Instance(metadata=meta, spec=InstanceSpec(clusters=members, jobs=queue))


def _resolve_types(gpu_types: list[str] | None) -> list[GPUType]:
    catalog = GPUCatalog()
    names = list(gpu_types) if gpu_types else list(DEFAULT_GPU_TYPES)
    out: list[GPUType] = []
    for i, name in enumerate(names):
        t = catalog.find(name)
        if t is None:
            raise InputError(f"unknown GPU type {name!r} ({known_words(name, catalog.names())})",
                             path=f"gpu_types[{i}]")
        if t not in out:
            out.append(t)
    return out


def generate(gpus: int, jobs: int, gpu_types: list[str] | None = None,
             fragmentation: float = 0.3, seed: int = 0, fabric: str = "auto",
             faulty_gpus: int = 0, size_scale: int = 1) -> Instance:
    """A synthetic instance; same arguments give the same instance (and the same file).

    ``size_scale`` multiplies the Philly job sizes of the *queue*: with 8, Philly's
    distribution is read in 8-GPU nodes instead of GPUs (1 -> 8, 4 -> 32, 32 -> 256), a
    foundation-model mix of multi-node gangs (an assumption, not a trace).
    """
    if gpus < GPUS_PER_NODE:
        raise InputError(f"must be at least {GPUS_PER_NODE} (one node), got {gpus}", path="gpus")
    if jobs < 0:
        raise InputError(f"must be 0 or more, got {jobs}", path="jobs")
    if not 0.0 <= fragmentation <= 1.0:
        raise InputError(f"must be within [0, 1], got {fragmentation}", path="fragmentation")
    if size_scale < 1:
        raise InputError(f"must be 1 or more, got {size_scale}", path="size_scale")
    if faulty_gpus < 0:
        raise InputError(f"must be 0 or more, got {faulty_gpus}", path="faulty_gpus")
    types = _resolve_types(gpu_types)
    node_count = math.ceil(gpus / GPUS_PER_NODE)
    total = node_count * GPUS_PER_NODE
    fabric_gen = fabric_for(fabric, total)
    sizes = philly_gpu_counts()
    state_rng = random.Random(f"hyperplace-state-{seed}")
    queue_rng = random.Random(f"hyperplace-queue-{seed}")
    cluster = _cluster("generated", "", node_count, types, fragmentation, faulty_gpus,
                       state_rng, fabric_gen)
    width = len(str(max(jobs, 1)))
    queue = [job_of_size(f"job-{i:0{width}d}", queue_rng.choice(sizes) * size_scale, types,
                         queue_rng)
             for i in range(1, jobs + 1)]
    type_list = ",".join(t.name for t in types)
    meta = ObjectMeta(
        name=f"generated-{total}g-{jobs}j-seed{seed}",
        annotations={
            DESCRIPTION_KEY: (f"synthetic: {total} GPUs ({type_list}), {fabric_gen.type}, "
                              f"{fragmentation:.0%} held by running jobs, {jobs} pending jobs"),
            SOURCE_KEY: (f"hyperplace.instances.generate(gpus={gpus}, jobs={jobs}, "
                         f"gpu_types={type_list}, fragmentation={fragmentation}, seed={seed}, "
                         f"fabric={fabric}, faulty_gpus={faulty_gpus}, size_scale={size_scale}); job sizes "
                         f"drawn from "
                         f"{PHILLY_SOURCE}"),
        },
    )
    return Instance(metadata=meta, spec=InstanceSpec(clusters=[cluster], jobs=queue))
