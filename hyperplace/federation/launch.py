"""The launch configuration a training framework needs for a federated job.

Ranks are laid out Megatron-LM style: ``rank = (pp · D + dp) · T + tp`` for pipeline rank
``pp``, data-parallel rank ``dp`` (the replica) and tensor rank ``tp``, i.e. tensor ranks
innermost (one NVLink node), then data-parallel, then pipeline, matching Megatron's default
``order="tp-cp-ep-dp-pp"`` for the dimensions used here. Each stage's layer range is the
exact split; Megatron-LM takes uneven first/last stages through
``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` and any
other uneven split through a per-stage list, which is written out here in full.

Files (per job, under ``launch/<job>/``):

* ``launch.json``: world size, the TP/PP/DP sizes, one row per rank (cluster, node, GPU
  index, local rank, pipeline/data/tensor rank, layer range), Megatron-LM arguments and the
  torchrun command of every node;
* ``hostfile``: ``<node> slots=<GPUs>`` lines for MPI launchers (mpirun/DeepSpeed);
* ``nccl-topo-<node>.xml``: an NCCL topology file (``NCCL_TOPO_FILE``) listing exactly the
  allocated GPUs and the node's NICs nearest to them, NVSwitch links and NIC speeds (Mb/s).
  hyperplace does not know PCI bus ids, so they are synthetic and consistent within the
  file; NCCL merges the file with what it detects, so the file constrains which GPUs and
  NICs are used and at what speed;
* ``nccl.env``: per node, ``CUDA_VISIBLE_DEVICES``, ``NCCL_TOPO_FILE`` and ``NCCL_IB_HCA``
  for the allocated GPUs and their NICs, and the cross-cluster socket settings.
"""

from __future__ import annotations

from typing import Any

from hyperplace.federation.problem import FederatedJob
from hyperplace.models.federation import FederatedJobPlan
from hyperplace.models.instance import Instance
from hyperplace.models.node import Node, NVLinkTopology

RENDEZVOUS_PORT = 29500
SM = {"V100": 70, "A100": 80, "H100": 90, "H200": 90, "B200": 100, "MI300X": 94}


def rank_table(job: FederatedJob, plan: FederatedJobPlan) -> list[dict[str, Any]]:
    """One row per GPU rank, Megatron order (tp innermost, then dp, then pp)."""
    D = job.replicas
    rows = []
    for sub in plan.sub_jobs:
        gpus_by_unit: dict[str, list] = {}
        # units are listed in the order the engine placed them; GPUs follow the same order
        cursor = 0
        for unit in sub.units:
            group = unit.partition("/")[0]
            pos = next(k for k, g in enumerate(job.stage_groups) if g.name == group)
            n = job.unit_gpus(pos)
            gpus_by_unit[unit] = sub.gpus[cursor:cursor + n]
            cursor += n
        layers = {s.position: (s.first_layer, s.last_layer) for s in sub.stages}
        for unit, gpus in gpus_by_unit.items():
            group, _, rep = unit.partition("/")
            pp = next(k for k, g in enumerate(job.stage_groups) if g.name == group)
            dp = int(rep) if rep.isdigit() else 0
            T = job.unit_gpus(pp)
            for tp, g in enumerate(gpus):
                rows.append({"rank": (pp * D + dp) * T + tp, "cluster": sub.cluster,
                             "node": g.node, "gpu": g.gpu, "pipelineRank": pp,
                             "dataParallelRank": dp, "tensorRank": tp,
                             "layers": list(layers.get(pp, (0, job.model.num_layers - 1)))})
    rows.sort(key=lambda r: r["rank"])
    per_node: dict[str, int] = {}
    for r in rows:
        r["localRank"] = per_node.get(r["node"], 0)
        per_node[r["node"]] = r["localRank"] + 1
    return rows


def launch_config(job: FederatedJob, plan: FederatedJobPlan) -> dict[str, Any]:
    rows = rank_table(job, plan)
    tp = job.unit_gpus(0)
    pp, dp = job.stages, job.replicas
    layers_per_stage = []
    for pos in range(pp):
        rng = next(r["layers"] for r in rows if r["pipelineRank"] == pos)
        layers_per_stage.append(rng[1] - rng[0] + 1)
    nodes = list(dict.fromkeys(r["node"] for r in rows))
    master = rows[0]["node"] if rows else ""
    megatron = [
        "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
        "--num-layers", str(job.model.num_layers),
        "--micro-batch-size", str(job.model.micro_batch_size),
        "--global-batch-size", str(job.model.micro_batch_size * job.microbatches * dp),
        "--seq-length", str(job.model.seq_length),
    ]
    if job.zero >= 1:
        megatron.append("--use-distributed-optimizer")
    if job.recompute:
        megatron += ["--recompute-granularity", "full", "--recompute-method", "uniform"]
    if pp > 1 and len(set(layers_per_stage)) > 1:
        megatron += ["--decoder-first-pipeline-num-layers", str(layers_per_stage[0]),
                     "--decoder-last-pipeline-num-layers", str(layers_per_stage[-1])]
    torchrun = []
    for i, node in enumerate(nodes):
        nproc = sum(1 for r in rows if r["node"] == node)
        torchrun.append({"node": node, "command": (
            f"torchrun --nnodes={len(nodes)} --nproc-per-node={nproc} --node-rank={i} "
            f"--rdzv-backend=c10d --rdzv-endpoint={master}:{RENDEZVOUS_PORT} "
            f"--rdzv-id={job.name} pretrain_gpt.py " + " ".join(megatron))})
    return {
        "job": job.name, "model": job.model.name, "worldSize": len(rows),
        "tensorParallel": tp, "pipelineParallel": pp, "dataParallel": dp,
        "pipelineLayers": layers_per_stage, "clusters": plan.clusters,
        "ranks": rows, "megatronArgs": megatron,
        "megatronPipelineLayers": {"stage": list(range(pp)), "numLayers": layers_per_stage},
        "torchrun": torchrun,
        "note": "ranks: Megatron order, tensor innermost, then data, then pipeline",
    }


def hostfile(rows: list[dict[str, Any]]) -> str:
    slots: dict[str, int] = {}
    for r in rows:
        slots[r["node"]] = slots.get(r["node"], 0) + 1
    return "".join(f"{node} slots={n}\n" for node, n in slots.items())


def nics_for(instance: Instance, node: Node, gpus: list[int]
             ) -> tuple[list[tuple[str, float]], bool]:
    """(name, Gb/s) of the NICs nearest the allocated GPUs; when the node lists no NIC, one
    NIC per GPU at the catalog's per-GPU rate (the DGX/HGX layout), flagged as assumed."""
    chosen = [nic for nic in node.nics if set(nic.gpus) & set(gpus)] or list(node.nics)
    if chosen:
        return [(nic.name, nic.gbps) for nic in chosen], False
    gbps = instance.catalog.get(node.gpu_type).nic_gbps
    return [(f"mlx5_{g}", gbps) for g in sorted(gpus)], True


def nccl_topology(instance: Instance, node_name: str, gpus: list[int]) -> str:
    """An NCCL topology XML for the allocated ``gpus`` of one node (see module docstring)."""
    _, node = instance.node_index[node_name]
    gtype = instance.catalog.get(node.gpu_type)
    sm = SM.get(gtype.family, 90)
    switch = node.nvlink == NVLinkTopology.NVSWITCH
    links = max(1, int(round(gtype.nvlink_gbps / max(gtype.nvlink_per_link_gbps, 1))))
    nics, assumed = nics_for(instance, node, gpus)
    lines = ['<system version="1">']
    if assumed:
        lines.append("  <!-- NICs assumed: the node lists none; "
                     "one per GPU at the catalog rate -->")
    lines.append('  <cpu numaid="0" arch="x86_64" vendor="GenuineIntel">')
    for k, g in enumerate(sorted(gpus)):
        bus = f"{0x10 + g:04x}:00:00.0"
        lines.append(f'    <pci busid="ffff:ff:{k + 1:02x}.0" class="0x060400" '
                     'link_speed="32.0 GT/s PCIe" link_width="16">')
        lines.append(f'      <pci busid="{bus}" class="0x030200" link_speed="32.0 GT/s PCIe" '
                     'link_width="16">')
        lines.append(f'        <gpu dev="{g}" sm="{sm}" rank="{k}" gdr="1">')
        if switch and gtype.nvlink_gbps > 0:
            lines.append(f'          <nvlink target="fffffff:ff:00.0" count="{links}" '
                         'tclass="0x068000"/>')
        lines.append("        </gpu>")
        lines.append("      </pci>")
        if k < len(nics):
            nic_name, speed = nics[k][0], int(nics[k][1] * 1000)
            lines.append(f'      <pci busid="{0x100 + g:04x}:00:00.0" class="0x020700" '
                         'link_speed="32.0 GT/s PCIe" link_width="16">')
            lines.append(f'        <nic><net name="{nic_name}" dev="{k}" speed="{speed}" '
                         'port="1" gdr="1"/></nic>')
            lines.append("      </pci>")
        lines.append("    </pci>")
    lines += ["  </cpu>", "</system>", ""]
    return "\n".join(lines)


def nccl_env(instance: Instance, rows: list[dict[str, Any]], clusters: list[str]) -> str:
    by_node: dict[str, list[int]] = {}
    for r in rows:
        by_node.setdefault(r["node"], []).append(r["gpu"])
    out = ["# NCCL environment per node (source the block of the node you launch on)"]
    for node, gpus in by_node.items():
        _, n = instance.node_index[node]
        nics, assumed = nics_for(instance, n, gpus)
        hcas = [name for name, _ in nics]
        out.append(f"## {node}" + ("  (NICs assumed: the node lists none)" if assumed else ""))
        out.append(f"CUDA_VISIBLE_DEVICES={','.join(str(g) for g in sorted(gpus))}")
        out.append(f"NCCL_TOPO_FILE=nccl-topo-{node}.xml")
        if hcas:
            out.append(f"NCCL_IB_HCA={','.join(hcas)}")
    if len(clusters) > 1:
        out.append("## all nodes: the job spans clusters over a WAN")
        out.append("NCCL_IB_TIMEOUT=22")
        out.append("NCCL_CROSS_NIC=1")
    return "\n".join(out) + "\n"
