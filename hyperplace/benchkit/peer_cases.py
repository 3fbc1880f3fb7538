"""Named instances where the peers' rules (``hyperplace.baselines``) do worse than the engine.

Each instance is small enough to check by hand. The YAML files in
``hyperplace/data/peer-*.yaml`` are written by this module
(``python -m hyperplace.benchkit.peer_cases``); edit the builders, not the files. What
each rule does on each instance is pinned in ``tests/baselines/test_baselines.py``.

* ``peer-gang-takes-needed-leaf``: a gang with no topology request (4 x TP4) and then a
  gang that must stay on one leaf (2 x TP8). Leaf A has five half-used nodes, leaf B two
  empty ones. Slurm's tree plugin takes the leaf with the fewest usable nodes that fits
  (B), and Volcano with its default weights puts the TP4 pods on random feasible nodes
  (some on B), so the second gang finds no leaf. Volcano with GPU binpack and Kueue's
  LeastFreeCapacity fill the half-used nodes and admit both, as the engine does. Before
  this change the instance was called ``peer-volcano-3373-deadlock``; volcano-sh/volcano#3373
  is two gangs each partly bound across scheduling rounds, which a one-round plan cannot
  show (Volcano discards a gang that does not fit whole within a round,
  ``allocate.go`` L854-866), so the name now says what it shows.
* ``peer-volcano-5751-nvlink-islands`` (volcano-sh/volcano#5751, free GPUs split across
  NVLink islands cannot serve a same-domain request). DGX-1 V100 nodes: ``dgx-a`` has 4
  free GPUs, two in each NVLink island ({2,3} and {4,5}, no NVLink between the halves);
  ``dgx-b`` has 5 free including the island {0,1,2,3}. The 4-GPU NVLink job goes to
  ``dgx-a`` under the deterministic rules (binpack prefers the fuller node, Kueue's
  LeastFreeCapacity the fullest, Slurm the first), where the device plugin can only hand
  it the four free GPUs, which are not an NVLink clique. Optimum: the NVLink job on
  ``dgx-b``'s island, the data-parallel job on ``dgx-a`` (8 useful GPUs against 4).
* ``peer-kueue-1476-split-7-7-8`` (kubernetes-sigs/kueue#1476: without TAS, quota admitted
  a 2 x 8-GPU job while the free GPUs were split 7/7/8). Free GPUs are 7 and 7 on leaf A
  and 8 on leaf B. ``kueue-quota-style`` (quota only) admits the 2 x TP8 job, binds one
  pod and leaves the other pending: 8 GPUs held and 16 of quota reserved by a job that
  does not run, so the jobs behind it are refused quota; that is the reported failure.
  With topology-aware rules the 2 x TP8 job stays pending, and the 8-rank one-leaf DP job
  goes to leaf B (BestFit / tightest / fullest), which leaves no whole node for the TP8
  job behind it. Optimum: the 8 ranks on leaf A's 7 + 1, TP8 on leaf B, TP4 and TP2 in
  the rest (22 GPUs against 14, or 6 for quota-only).
* ``peer-search-*``: found by :func:`search` (a seeded random search over small clusters
  and queues for the largest gap between the engine and the best peer rule's mean over
  seeds); the annotation names the search seed and the trial.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Any

from hyperplace.io import dump_yaml, load_documents, parse
from hyperplace.models import Cluster, Instance, Node, TrainingJob
from hyperplace.models.cluster import FabricGenerator, FabricSpec
from hyperplace.models.fabric import Link, Switch
from hyperplace.models.instance import InstanceSpec
from hyperplace.models.job import ObjectMeta

DESCRIPTION_KEY = "hyperplace.io/description"
SOURCE_KEY = "hyperplace.io/source"


def _job(name: str, model: str, priority: str, replicas: int, groups: list[dict[str, Any]]
         ) -> TrainingJob:
    return TrainingJob.model_validate({
        "metadata": {"name": name},
        "spec": {"model": model, "replicaCount": replicas, "priority": priority,
                 "resourceGroups": groups},
    })


def _tp(size: int, accelerator: str, nvlink: float, memory: float) -> dict[str, Any]:
    return {"name": "tp", "type": "TensorParallel", "gpusPerGroup": size,
            "gpuRequirements": {"minMemoryGB": memory, "minNVLinkBandwidthGbpsPerPair": nvlink,
                                "acceleratorType": accelerator}}


def _dp(max_hops: int | None = None, ib: float | None = None, size: int = 1,
        accelerator: str | None = None) -> dict[str, Any]:
    conn: dict[str, Any] = {}
    if max_hops is not None:
        conn["maxHopCount"] = max_hops
    if ib is not None:
        conn["minInfiniBandBandwidthGbps"] = ib
    group: dict[str, Any] = {"name": "dp", "type": "DataParallel", "gpusPerGroup": size,
                             "interNodeConnectivity": conn}
    if accelerator:
        group["gpuRequirements"] = {"acceleratorType": accelerator}
    return group


def _node(name: str, gpu_type: str, busy: dict[int, str], **extra: Any) -> Node:
    return Node.model_validate({"name": name, "gpuType": gpu_type, "gpuCount": 8,
                                "allocated": busy, **extra})


def _instance(name: str, description: str, source: str, cluster: Cluster,
              jobs: list[TrainingJob]) -> Instance:
    meta = ObjectMeta(name=name, annotations={DESCRIPTION_KEY: description, SOURCE_KEY: source})
    return Instance(metadata=meta, spec=InstanceSpec(clusters=[cluster], jobs=jobs))


def gang_takes_needed_leaf() -> Instance:
    """Two leaves: five half-used H100 nodes on A, two empty ones on B; two gangs."""
    a_nodes = [_node(f"a{i}", "H100-80", {k: f"resident-{i}" for k in range(4)}) for i in range(5)]
    b_nodes = [_node(f"b{i}", "H100-80", {}) for i in range(2)]
    switches = [Switch(name="leaf-a", tier=1), Switch(name="leaf-b", tier=1),
                Switch(name="spine-0", tier=2)]
    links = [Link(a=n.name, b="leaf-a", gbps=400, count=8) for n in a_nodes]
    links += [Link(a=n.name, b="leaf-b", gbps=400, count=8) for n in b_nodes]
    links += [Link(a="leaf-a", b="spine-0", gbps=400, count=40),
              Link(a="leaf-b", b="spine-0", gbps=400, count=16)]
    cluster = Cluster(name="gpu-pod", region="on-prem", nodes=[*a_nodes, *b_nodes],
                      fabric=FabricSpec(switches=switches, links=links))
    jobs = [
        _job("moe-pretrain-4xtp4", "mixtral-8x7b", "high", 4,
             [_tp(4, "H100", 900, 80), _dp(ib=200)]),
        _job("dense-pretrain-2xtp8", "llama3-70b", "high", 2,
             [_tp(8, "H100", 900, 80), _dp(max_hops=1, ib=400)]),
    ]
    return _instance(
        "peer-gang-takes-needed-leaf",
        "two gangs: 4xTP4 (no topology request) then 2xTP8 (one leaf); Slurm's tightest leaf "
        "and Volcano's random node choice (default weights) put the first on the small empty "
        "leaf the second needs",
        "hand-built; was peer-volcano-3373-deadlock, renamed: #3373's partial-binding deadlock "
        "needs several scheduling rounds",
        cluster, jobs)


def volcano_5751_nvlink_islands() -> Instance:
    """Two DGX-1 V100 nodes; the fuller one has its free GPUs split across NVLink islands."""
    mesh = {"nvlink": "hybrid_cube_mesh"}
    nodes = [
        _node("dgx-a", "V100-32", {0: "bert-large", 1: "bert-large", 6: "gnmt", 7: "gnmt"}, **mesh),
        _node("dgx-b", "V100-32", {5: "resnet50", 6: "resnet50", 7: "resnet50"}, **mesh),
        _node("dgx-c", "V100-32", {i: "transformer-xl" for i in range(8)}, **mesh),
    ]
    cluster = Cluster(name="dgx1-lab", region="on-prem", nodes=nodes,
                      fabric=FabricSpec(generator=FabricGenerator(
                          type="fat-tree-2", nodes_per_leaf=4, spines=1, node_gbps=100,
                          uplink_gbps=100)))
    jobs = [
        _job("gpt2-xl-tp4", "gpt2-xl", "high", 1, [_tp(4, "V100", 50, 32), _dp()]),
        _job("resnet152-dp4", "resnet152", "normal", 4, [_dp(max_hops=1, accelerator="V100")]),
    ]
    return _instance(
        "peer-volcano-5751-nvlink-islands",
        "DGX-1 V100: the fullest node's 4 free GPUs straddle both NVLink islands; a 4-GPU "
        "NVLink job and a 4-rank DP job",
        "after volcano-sh/volcano#5751 (free GPUs split across NVLink islands); DGX-1 NVLink "
        "matrix from microsoft/msccl-tools; hand-built",
        cluster, jobs)


def kueue_1476_split_7_7_8() -> Instance:
    """Free GPUs 7 and 7 on leaf A, 8 on leaf B; a 2x8 job and smaller ones queued."""
    nodes = [
        _node("n1", "H100-80", {0: "vllm-serve-1"}),
        _node("n2", "H100-80", {0: "vllm-serve-2"}),
        _node("n3", "H100-80", {}),
        _node("n4", "H100-80", {i: "nemotron-sft" for i in range(8)}),
    ]
    cluster = Cluster(name="h100-east", region="us-east", nodes=nodes,
                      fabric=FabricSpec(generator=FabricGenerator(
                          type="fat-tree-2", nodes_per_leaf=2, spines=2)))
    jobs = [
        _job("pretrain-2xtp8", "llama3-70b", "high", 2,
             [_tp(8, "H100", 900, 80), _dp(ib=400)]),
        _job("finetune-dp8", "llama3-8b", "normal", 8, [_dp(max_hops=1, accelerator="H100")]),
        _job("sft-tp8", "llama3-70b", "normal", 1, [_tp(8, "H100", 900, 80), _dp()]),
        _job("eval-tp4", "llama3-8b", "normal", 1, [_tp(4, "H100", 900, 80), _dp()]),
        _job("eval-tp2", "llama3-8b", "normal", 1, [_tp(2, "H100", 900, 80), _dp()]),
    ]
    return _instance(
        "peer-kueue-1476-split-7-7-8",
        "free GPUs split 7/7/8 over two leaves; a 2xTP8 job that cannot run, an 8-rank DP job "
        "on one leaf, then TP8, TP4 and TP2 jobs",
        "kubernetes-sigs/kueue#1476 (2x8-GPU job admitted by quota while free GPUs were split "
        "7/7/8), reproduced by kueue-quota-style; hand-built",
        cluster, jobs)


# ---- seeded random search for instances where the engine and the peers differ most --------

SEARCH_SEED = 7
SEARCH_TRIALS = 120
# (seed, trial) of the cases the search kept; `--search` prints the ranking they came from
SEARCH_FOUND: tuple[tuple[int, int], ...] = ((7, 109), (7, 36), (7, 13))


def random_case(seed: int, trial: int) -> Instance:
    """One small random cluster and queue, a function of (seed, trial) only.

    Two or three leaves of two or three 8-GPU nodes, each a DGX-1 V100 (hybrid cube mesh)
    or an H100 NVSwitch node, partly allocated; three to six jobs: TP groups of 2, 4 or 8
    GPUs asking for NVLink (1 to 3 replicas, optionally on one leaf) or data-parallel jobs of
    2, 4 or 8 ranks (optionally on one leaf), normal or high priority.
    """
    rng = random.Random(seed * 1_000_003 + trial)
    leaves, per_leaf = rng.choice([2, 3]), rng.choice([2, 3])
    nodes = []
    for i in range(leaves * per_leaf):
        busy = sorted(rng.sample(range(8), rng.choice([0, 0, 2, 3, 4, 5, 6, 8])))
        if rng.random() < 0.5:
            nodes.append(_node(f"dgx{i}", "V100-32", {g: "resident" for g in busy},
                               nvlink="hybrid_cube_mesh"))
        else:
            nodes.append(_node(f"h100-{i}", "H100-80", {g: "resident" for g in busy}))
    cluster = Cluster(name="lab", region="on-prem", nodes=nodes,
                      fabric=FabricSpec(generator=FabricGenerator(
                          type="fat-tree-2", nodes_per_leaf=per_leaf, spines=1)))
    jobs = []
    for j in range(rng.randint(3, 6)):
        accel = rng.choice(["V100", "H100"])
        priority = rng.choice(["normal", "normal", "high"])
        hops = rng.choice([None, None, 1])
        if rng.random() < 0.6:
            size = rng.choice([2, 4, 4, 8])
            nvlink, memory = (50, 32) if accel == "V100" else (900, 80)
            replicas = rng.choice([1, 1, 2, 3])
            jobs.append(_job(f"tp{size}x{replicas}-{j}", "model", priority, replicas,
                             [_tp(size, accel, nvlink, memory), _dp(max_hops=hops)]))
        else:
            ranks = rng.choice([2, 4, 8])
            jobs.append(_job(f"dp{ranks}-{j}", "model", priority, ranks,
                             [_dp(max_hops=hops, accelerator=accel)]))
    return _instance(
        f"peer-search-s{seed}-t{trial}",
        f"found by the seeded random search (seed {seed}, trial {trial}): the largest gap "
        "between the engine's useful GPUs and the best peer rule's mean over seeds",
        f"hyperplace.benchkit.peer_cases.search(seed={seed}); random_case({seed}, {trial})",
        cluster, jobs)


def search(seed: int = SEARCH_SEED, trials: int = SEARCH_TRIALS, keep: int = 3,
           rule_seeds: int = 5, budget_s: float = 2.0) -> list[tuple[float, float, int]]:
    """Rank random cases by engine useful GPUs minus the best peer rule's mean useful GPUs.

    Returns ``(gap, best rule mean, trial)`` for the ``keep`` largest gaps (every plan goes
    through the checker; useful = admitted with no violation of the job's own
    requirements). Randomised rules run over ``rule_seeds`` seeds.
    """
    from hyperplace.baselines import BASELINES, RANDOMISED
    from hyperplace.check import check
    from hyperplace.solvers.driver import solve_placement

    def useful_gpus(plan, inst) -> int:
        violations = check(plan, inst)
        bad = {v.job for v in violations if v.job is not None}
        return sum(len(p.gpus) for p in plan.placements if p.job not in bad)

    ranked = []
    for trial in range(trials):
        inst = random_case(seed, trial)
        engine = useful_gpus(solve_placement(inst, solver="auto", budget_s=budget_s, seed=0), inst)
        best = 0.0
        for name, run in BASELINES.items():
            seeds = range(rule_seeds) if name in RANDOMISED else range(1)
            best = max(best, sum(useful_gpus(run(inst, seed=s), inst) for s in seeds) / len(seeds))
        ranked.append((engine - best, best, trial))
    ranked.sort(key=lambda r: (-r[0], r[2]))
    return ranked[:keep]


PEER_CASES: dict[str, Callable[[], Instance]] = {
    "peer-gang-takes-needed-leaf": gang_takes_needed_leaf,
    "peer-volcano-5751-nvlink-islands": volcano_5751_nvlink_islands,
    "peer-kueue-1476-split-7-7-8": kueue_1476_split_7_7_8,
}
PEER_CASES.update({f"peer-search-s{sd}-t{tr}": partial(random_case, sd, tr)
                   for sd, tr in SEARCH_FOUND})


def render(instance: Instance) -> str:
    """The instance as YAML that loads back equal (jobs keep apiVersion/kind)."""
    doc = {"apiVersion": instance.api_version, "kind": instance.kind, **instance.to_doc()}
    doc["spec"]["jobs"] = [{"apiVersion": j.api_version, "kind": j.kind, **j.to_doc()}
                           for j in instance.jobs]
    for cluster in doc["spec"]["clusters"]:
        for node in cluster.get("nodes", []):
            if "allocated" in node:
                node["allocated"] = {int(k): v for k, v in node["allocated"].items()}
    header = ("# Generated by `python -m hyperplace.benchkit.peer_cases` "
              "(hyperplace/benchkit/peer_cases.py); edit the builder, not this file.\n")
    return header + dump_yaml(doc)


def data_path(name: str) -> Path:
    return Path(str(resources.files("hyperplace.data") / f"{name}.yaml"))


@cache
def load_peer_case(name: str) -> Instance:
    """A named peer-failure instance, read from its bundled YAML file."""
    path = data_path(name)
    docs = load_documents(path)
    return parse(Instance, docs[0], source=str(path))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Write the peer-failure instances as YAML.")
    parser.add_argument("--out", type=Path, default=None, help="directory (default: bundled data)")
    parser.add_argument("--search", action="store_true",
                        help="run the seeded random search and print its ranking instead")
    parser.add_argument("--seed", type=int, default=SEARCH_SEED)
    parser.add_argument("--trials", type=int, default=SEARCH_TRIALS)
    args = parser.parse_args(argv)
    if args.search:
        for gap, best, trial in search(args.seed, args.trials, keep=10):
            print(f"seed {args.seed} trial {trial}: engine - best peer mean = {gap:+.1f} useful "
                  f"GPUs (best peer mean {best:.1f})")
        return
    for name, build in PEER_CASES.items():
        path = (args.out / f"{name}.yaml") if args.out else data_path(name)
        path.write_text(render(build()), encoding="utf-8")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
