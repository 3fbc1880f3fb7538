"""Rack-scale NVLink clusters (#24): GB200/GB300 NVL72 racks under a leaf/spine fabric,
alone or beside HGX nodes, as :class:`~hyperplace.models.cluster.Cluster` objects.

An NVL72 rack is 18 compute trays of 4 GPUs (nodes ``<rack>-t00`` .. ``-t17``) in one
NVLink domain (9 NVLink switch trays, 1.8 TB/s per GPU); each tray's NICs go to the rack's
leaf switch (``racks_per_leaf`` racks per leaf), every leaf to every spine. HGX nodes of 8
GPUs sit on leaves of their own under the same spines, so one fabric holds trees of two
depths (tray -> rack -> leaf -> spine beside node -> leaf -> spine).
"""

from __future__ import annotations

from typing import Any

from hyperplace.models import Cluster, FabricSpec, Instance, InstanceSpec, Node, TrainingJob
from hyperplace.models.fabric import Link, Switch
from hyperplace.models.job import ObjectMeta
from hyperplace.models.nvlink import NVLinkDomain
from hyperplace.models.slices import CLIQUE_LABEL, SLICE_SIZE, SLICE_TOPOLOGY

#: NVL72: compute trays per rack, GPUs per tray, NVLink switch trays, per-GPU NVLink GB/s
NVL72_TRAYS, NVL72_TRAY_GPUS, NVL72_SWITCH_TRAYS, NVL72_GBPS = 18, 4, 9, 1800.0

def rack_nodes(rack: str, gpu_type: str = "GB200", *, trays: int = NVL72_TRAYS,
               allocated: dict[int, dict[int, str]] | None = None,
               faulty: dict[int, list[int]] | None = None) -> list[Node]:
    """The compute trays of one rack (``<rack>-t00``..), state given by tray index."""
    allocated = allocated or {}
    faulty = faulty or {}
    return [Node(name=f"{rack}-t{i:02d}", gpu_type=gpu_type, gpu_count=NVL72_TRAY_GPUS,
                 labels={"nvidia.com/gpu.clique": f"{rack}.0"},
                 allocated=allocated.get(i, {}), faulty=faulty.get(i, []))
            for i in range(trays)]


def rack_domain(rack: str, nodes: list[Node], *, system: str = "GB200 NVL72",
                gbps: float | None = NVL72_GBPS, partition_trays: int | None = None,
                spare_trays: int = 0) -> NVLinkDomain:
    """The NVLink domain of one rack's trays."""
    return NVLinkDomain(name=rack, nodes=[n.name for n in nodes], gbps_per_gpu=gbps,
                        system=system, switch_trays=NVL72_SWITCH_TRAYS,
                        partition_trays=partition_trays, spare_trays=spare_trays)


def rack_cluster(name: str, racks: dict[str, list[Node]], *, hgx: list[Node] | None = None,
                 hgx_per_leaf: int = 16, racks_per_leaf: int = 1, spines: int = 4,
                 nic_gbps: float = 400.0, uplink_gbps: float = 800.0,
                 domains: list[NVLinkDomain] | None = None, region: str = "") -> Cluster:
    """A cluster of NVL72 racks (and HGX nodes) on one leaf/spine fabric.

    Parameters
    ----------
    racks : dict
        Rack name -> its trays (:func:`rack_nodes`); one NVLink domain each unless
        ``domains`` are given.
    hgx : list of Node
        Ordinary nodes, ``hgx_per_leaf`` to a leaf of their own.
    """
    switches: list[Switch] = []
    links: list[Link] = []
    leaf_names: list[str] = []

    def leaf(nodes: list[Node]) -> None:
        s = f"leaf{len(leaf_names):03d}"
        leaf_names.append(s)
        switches.append(Switch(name=s, tier=1))
        links.extend(Link(a=n.name, b=s, gbps=nic_gbps) for n in nodes)

    names = list(racks)
    for i in range(0, len(names), racks_per_leaf):
        leaf([n for r in names[i:i + racks_per_leaf] for n in racks[r]])
    hgx = hgx or []
    for i in range(0, len(hgx), hgx_per_leaf):
        leaf(list(hgx[i:i + hgx_per_leaf]))
    per = max(1, (racks_per_leaf * NVL72_TRAYS) // spines)
    for j in range(spines):
        switches.append(Switch(name=f"spine{j:02d}", tier=2))
        links.extend(Link(a=s, b=f"spine{j:02d}", gbps=uplink_gbps, count=per)
                     for s in leaf_names)
    if domains is None:
        domains = [rack_domain(r, trays) for r, trays in racks.items()]
    nodes = [n for r in names for n in racks[r]] + list(hgx)
    return Cluster(name=name, region=region, nodes=nodes,
                   fabric=FabricSpec(switches=switches, links=links, nvlink_domains=domains))


# ---- bundled instances (rewritten by ``python -m hyperplace.instances.bundled``) ----------

def nvl72_job(name: str, model: str, gpus: int, *, group: str = "TensorParallel",
              replicas: int = 1, gpu_type: str = "GB200", nvlink_gbps: float | None = 1800,
              memory_gb: float = 180, priority: str = "normal", slice_pods: int | None = None,
              dp_hops: int | None = None, tp_hops: int | None = None) -> TrainingJob:
    """A job of ``replicas`` units of ``gpus`` GPUs (one ``group``, plus DataParallel of 1
    for a model-parallel group); ``slice_pods``: Kueue slices of that many units."""
    req: dict[str, Any] = {"minMemoryGB": memory_gb, "acceleratorType": gpu_type}
    if nvlink_gbps:
        req["minNVLinkBandwidthGbpsPerPair"] = nvlink_gbps
    groups: list[dict[str, Any]] = [{
        "name": "experts" if group == "ExpertParallel" else
        "workers" if group == "DataParallel" else "tensor-parallel",
        "type": group, "gpusPerGroup": gpus, "gpuRequirements": req,
        "interNodeConnectivity": {} if tp_hops is None else {"maxHopCount": tp_hops}}]
    if group != "DataParallel":
        groups.append({"name": "data-parallel", "type": "DataParallel", "gpusPerGroup": 1,
                       "interNodeConnectivity": {"minInfiniBandBandwidthGbps": 400,
                                                 **({"maxHopCount": dp_hops}
                                                    if dp_hops is not None else {})}})
    meta: dict[str, Any] = {"name": name}
    if slice_pods:
        meta["annotations"] = {SLICE_SIZE: str(slice_pods), SLICE_TOPOLOGY: CLIQUE_LABEL}
    return TrainingJob.model_validate({
        "apiVersion": "ai.example.com/v1alpha1", "kind": "FoundationModelTrainingJob",
        "metadata": meta, "spec": {"model": model, "replicaCount": replicas,
                                   "resourceGroups": groups, "priority": priority}})


def _held(job: str, trays: range) -> dict[int, dict[int, str]]:
    return {i: {g: job for g in range(NVL72_TRAY_GPUS)} for i in trays}


def build_gb200_nvl72() -> Instance:
    """8 GB200 NVL72 racks (576 GPUs), two racks per leaf under 4 spines, partly busy."""
    busy = {
        "r00": _held("pretrain-moe-a", range(0, 16)),                 # 16 trays of a job
        "r01": {**_held("ft-llama-70b", range(0, 6)), **_held("eval-b", range(12, 14))},
        "r02": _held("train-dense-c", range(0, 4)),
        "r03": {**_held("ft-llama-70b", range(0, 8))},
        "r05": _held("inference-d", range(9, 18)),
    }
    faulty = {"r02": {7: [1]}, "r06": {3: [0, 1, 2, 3]}}
    racks = {f"r{r:02d}": rack_nodes(f"r{r:02d}", allocated=busy.get(f"r{r:02d}"),
                                     faulty=faulty.get(f"r{r:02d}"))
             for r in range(8)}
    cluster = rack_cluster("gb200-nvl72", racks, racks_per_leaf=2, spines=4)
    jobs = [
        # a whole rack at NVLink: only an untouched rack will do
        nvl72_job("pretrain-405b-tp72", "llama3-405b", 72, priority="high"),
        # MoE expert parallelism across 16 trays: a rack with 64 free (r02 has 55, r03 40)
        nvl72_job("moe-ep64", "deepseek-v3", 64, group="ExpertParallel", priority="high"),
        # TP 16 (4 trays) x 3 replicas, each replica in one rack, replicas anywhere
        nvl72_job("llama-70b-tp16", "llama3-70b", 16, replicas=3),
        # Kueue slices of 2 trays: 6 pods of one tray each, each slice inside one rack
        nvl72_job("sliced-dp", "llama3-8b", 4, group="DataParallel", replicas=6,
                  nvlink_gbps=None, slice_pods=2),
        # small fine-tunes that should fill started racks, not open whole ones
        nvl72_job("ft-8b-a", "llama3-8b", 4, nvlink_gbps=1800, priority="low"),
        nvl72_job("ft-8b-b", "llama3-8b", 4, nvlink_gbps=1800, priority="low"),
        # no NVL72 rack holds 128 GPUs in one NVLink domain
        nvl72_job("tp128-too-big", "llama3-405b", 128),
    ]
    return Instance(
        metadata=_meta("gb200-nvl72",
                       "8 GB200 NVL72 racks (18 trays x 4 GPUs each, 576 GPUs) on leaf/spine; "
                       "rack-sized TP/EP groups, slices, whole racks to keep",
                       "NVIDIA GB200 NVL72 (18 compute trays of 4 GPUs, 9 NVLink switch trays, "
                       "1.8 TB/s per GPU): nvidia.com/en-us/data-center/gb200-nvl72/",
                       "two racks per leaf, 4 x 800 Gb/s spines (an assumption); 400 Gb/s "
                       "per GPU NIC (ConnectX-7)"),
        spec=InstanceSpec(clusters=[cluster], jobs=jobs))


def build_mixed_h100_nvl72() -> Instance:
    """16 HGX H100 nodes (two leaves of 8) and 4 GB200 NVL72 racks in one fabric."""
    hgx = [Node(name=f"hgx-{i:02d}", gpu_type="H100-80", gpu_count=8,
                allocated={g: "h100-running" for g in range(8)} if i in (0, 1, 9) else {})
           for i in range(16)]
    busy = {"r00": _held("gb-running", range(0, 10)), "r02": _held("gb-running", range(4, 8))}
    racks = {f"r{r:02d}": rack_nodes(f"r{r:02d}", allocated=busy.get(f"r{r:02d}"))
             for r in range(4)}
    cluster = rack_cluster("mixed-h100-nvl72", racks, hgx=hgx, hgx_per_leaf=8,
                           racks_per_leaf=1, spines=4)
    jobs = [
        # H100 TP 16 across two HGX nodes over InfiniBand, as before
        nvl72_job("h100-tp16", "llama3-70b", 16, gpu_type="H100", memory_gb=80,
                  nvlink_gbps=900, replicas=2, dp_hops=3),
        # GB200 EP 64 in one rack (r01 or r03: whole)
        nvl72_job("gb-moe-ep64", "mixtral-8x7b", 64, group="ExpertParallel", priority="high"),
        # GB200 TP 32 (8 trays) in one rack: r00 has 8 trays free, r02 14
        nvl72_job("gb-tp32", "llama3-70b", 32, replicas=2),
        # either type, 8 GPUs: one HGX node or two trays of one rack
        nvl72_job("any-tp8", "llama3-8b", 8, gpu_type="H100|GB200", memory_gb=80,
                  nvlink_gbps=900, priority="low"),
    ]
    return Instance(
        metadata=_meta("mixed-h100-nvl72",
                       "16 HGX H100 (8 GPUs) beside 4 GB200 NVL72 racks under one spine tier: "
                       "trees of two depths (tray -> rack -> leaf, node -> leaf)",
                       "DGX H100 and GB200 NVL72 datasheets",
                       "H100 nodes 8 per leaf, one rack per leaf, 4 spines (an assumption)"),
        spec=InstanceSpec(clusters=[cluster], jobs=jobs))


def _meta(name: str, description: str, source: str, assumptions: str) -> ObjectMeta:
    from hyperplace.instances.generator import DESCRIPTION_KEY, SOURCE_KEY

    return ObjectMeta(name=name, annotations={DESCRIPTION_KEY: description, SOURCE_KEY: source,
                                              "hyperplace.io/assumptions": assumptions})


def generate_nvl72(racks: int, jobs: int, load: float = 0.5, seed: int = 1,
                   racks_per_leaf: int = 2, spines: int = 8) -> Instance:
    """A generated GB200 NVL72 cluster of ``racks`` racks and a queue of ``jobs`` jobs.

    About ``load`` of the trays run earlier jobs (whole trays, in runs from a random tray of
    a random rack, as jobs that held a rack part come and go); the queue mixes what NVL72
    clusters run: TP/EP groups of 8 to 72 GPUs with the NVLink floor (one rack each), Kueue
    slices of 2, 3 or 6 trays (divisors of 18), whole-rack jobs and one-tray fine-tunes, in
    proportions 35/15/15/10/25 % (an assumption: no public NVL72 trace exists).
    """
    import random

    rng = random.Random(seed)
    busy: dict[str, dict[int, dict[int, str]]] = {f"r{r:03d}": {} for r in range(racks)}
    target = int(load * racks * NVL72_TRAYS)
    held, k = 0, 0
    while held < target:
        rack = f"r{rng.randrange(racks):03d}"
        start, length = rng.randrange(NVL72_TRAYS), rng.choice((1, 2, 4, 8, 16))
        name = f"running-{k}"
        k += 1
        for t in range(start, min(NVL72_TRAYS, start + length)):
            if t not in busy[rack] and held < target:
                busy[rack][t] = {g: name for g in range(NVL72_TRAY_GPUS)}
                held += 1
    nodes = {r: rack_nodes(r, allocated=busy[r]) for r in busy}
    cluster = rack_cluster(f"nvl72-{racks}", nodes, racks_per_leaf=racks_per_leaf, spines=spines)
    queue: list[TrainingJob] = []
    prios = ("low", "normal", "normal", "high")
    for j in range(jobs):
        kind = rng.random()
        prio = rng.choice(prios)
        if kind < 0.35:
            gpus = rng.choice((8, 16, 32, 64, 72))
            group = rng.choice(("TensorParallel", "ExpertParallel"))
            queue.append(nvl72_job(f"j{j:05d}-{'tp' if group[0] == 'T' else 'ep'}{gpus}",
                                   "deepseek-v3" if group[0] == "E" else "llama3-70b", gpus,
                                   group=group, replicas=rng.choice((1, 1, 2)), priority=prio))
        elif kind < 0.5:
            k_ = rng.choice((2, 3, 6))
            queue.append(nvl72_job(f"j{j:05d}-slices{k_}", "llama3-8b", 4, group="DataParallel",
                                   replicas=k_ * rng.choice((1, 2, 3)), nvlink_gbps=None,
                                   slice_pods=k_, priority=prio))
        elif kind < 0.6:
            queue.append(nvl72_job(f"j{j:05d}-rack", "llama3-405b", 72, priority=prio))
        else:
            queue.append(nvl72_job(f"j{j:05d}-ft", "llama3-8b", 4, priority=prio))
    return Instance(
        metadata=_meta(f"generated-nvl72-{racks}r-{jobs}j",
                       f"{racks} GB200 NVL72 racks ({racks * 72:,} GPUs), {jobs} jobs, load "
                       f"{load:g}, seed {seed}", "generated (hyperplace.instances.nvl72)",
                       "job mix and occupancy assumed (no public NVL72 trace)"),
        spec=InstanceSpec(clusters=[cluster], jobs=queue))
