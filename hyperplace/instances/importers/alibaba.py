"""Alibaba GPU cluster traces -> clusters and a pending queue.

Two real heterogeneous fleets, so the engine is measured on the mix of GPU types production
clusters have, not on a synthetic one:

* ``cluster-trace-gpu-v2023`` (``openb_node_list_all_node.csv``: sn, cpu_milli, memory_mib,
  gpu, model) and its pods (``openb_pod_list_gpuspec33.csv``), from the ATC'23 paper
  "Beware of Fragmentation" (alibaba/clusterdata).
* ``cluster-trace-gpu-v2020`` PAI machine spec (machine, gpu_type, cap_cpu, cap_mem,
  cap_gpu), from the NSDI'22 paper "MLaaS in the Wild" (alibaba/clusterdata, CC-BY-4.0).

GPU models map to catalog types where the catalog has them (:data:`MODEL_TO_TYPE`): V100M16 ->
V100-16, V100M32 -> V100-32, the 2020 trace's plain ``V100`` -> V100-16 (the trace names
the 32 GB part V100M32), T4 -> T4 and A10 -> A10 (the catalog's datasheet rows,
``hyperplace/data/gpu_specs.csv``). The others get a declared :class:`GPUType`
(:data:`TRACE_GPU_TYPES`) returned beside the cluster, with figures and sources in each
type's ``source``:

* P100 (the 2-GPU nodes: PCIe cards): NVIDIA datasheet figures; it has no BF16, so its FP16
  half-precision figure stands in (as the catalog does for V100).
* MISC (2020): "GPUs of older generations, e.g. K40m, K80, M60" (trace README): the
  element-wise minimum of those three datasheets, FP32 since they have no fast FP16.
* G1, G2, G3 (2023): "undisclosed internal GPU codes" (trace README). Placeholders with the
  catalog's V100-16 figures so estimates stay in the fleet's range; declare a GPUType of the
  same name to override.

Assumptions, because the traces carry no topology: every node is PCIe-only inside (no NVLink
figures in the trace; a job that needs NVLink bandwidth will not be placed on these nodes),
and the network is a generated non-blocking two-tier fat-tree (:func:`trace_fabric`) of
:data:`ASSUMED_NODE_GBPS` per node, with nodes ordered by GPU model and name so one leaf
holds one server model, as racks usually do. CPU-only nodes are skipped; how many is kept
in the cluster label ``hyperplace.io/cpu-only-nodes-skipped``.

Pods -> jobs (:func:`import_alibaba_gpu2023_pods`): a pod asking for whole GPUs (num_gpu >= 1,
gpu_milli == 1000) becomes one single-group job (DataParallel, gpusPerGroup = num_gpu,
replicaCount 1); its gpu_spec becomes a ``gpu-type`` toleration listing the mapped types.
QoS -> priority (:data:`QOS_PRIORITY`): LS (latency-sensitive) and Guaranteed -> high,
Burstable -> normal, BE (best effort) -> low, following Kubernetes' QoS order with Alibaba's
LS class on top. Fractional-GPU pods are GPU sharing, not training gangs, and are left out.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from pydantic import ValidationError

from hyperplace.errors import InputError, from_validation_error
from hyperplace.instances.importers._source import Source, read_text
from hyperplace.models.cluster import Cluster, FabricGenerator, FabricSpec
from hyperplace.models.gpu import GPUType, builtin_catalog
from hyperplace.models.job import (
    GroupType,
    ObjectMeta,
    ResourceGroup,
    Toleration,
    TrainingJob,
    TrainingJobSpec,
)
from hyperplace.models.node import Node, NVLinkTopology

# Node line rate for the generated fabric. The traces say nothing about the network; 100 Gb/s
# Ethernet per GPU server is an assumption, not a trace figure.
ASSUMED_NODE_GBPS = 100.0
SKIPPED_LABEL = "hyperplace.io/cpu-only-nodes-skipped"
TRACE_MODEL_LABEL = "hyperplace.io/trace-gpu-model"

MODEL_TO_TYPE = {
    "V100M16": "V100-16",
    "V100M32": "V100-32",
    "V100": "V100-16",
    "T4": "T4",
    "A10": "A10",
}

_TRACE = "alibaba/clusterdata cluster-trace-gpu-v2023 / -v2020 README"


def _v100_placeholder(name: str) -> GPUType:
    v = builtin_catalog()["V100-16"]
    return GPUType(
        name=name, family=name, bf16_tflops=v.bf16_tflops, hbm_gb=v.hbm_gb, hbm_tb_s=v.hbm_tb_s,
        nvlink_gbps=0.0, pcie_generation=3, nic_gbps=ASSUMED_NODE_GBPS / 8, mfu=v.mfu,
        cost_per_hour=v.cost_per_hour,
        source=f"placeholder: {name} is an undisclosed internal GPU code ({_TRACE}); "
               "V100-16 figures used",
    )


# Declared types for models the catalog lacks. nic_gbps = ASSUMED_NODE_GBPS shared by the GPUs
# of the type's usual node (P100: 2, MISC/G*: 8 in the traces). cost_per_hour is a
# rough relative price in the catalog's units (V100-16 = 0.9), used only by --policy cost.
TRACE_GPU_TYPES: dict[str, GPUType] = {
    "P100": GPUType(
        name="P100", family="P100", bf16_tflops=18.7, hbm_gb=16.0, hbm_tb_s=0.732,
        nvlink_gbps=0.0, pcie_generation=3, nic_gbps=ASSUMED_NODE_GBPS / 2, mfu=0.35,
        cost_per_hour=0.45,
        source="NVIDIA Tesla P100 PCIe datasheet: 18.7 TFLOPS FP16 (no BF16, no tensor cores), "
               "16 GB HBM2, 732 GB/s, PCIe Gen3; 2-GPU nodes in the traces, so the PCIe card"),
    "MISC": GPUType(
        name="MISC", family="MISC", bf16_tflops=4.29, hbm_gb=8.0, hbm_tb_s=0.16, nvlink_gbps=0.0,
        pcie_generation=3, nic_gbps=ASSUMED_NODE_GBPS / 8, mfu=0.30, cost_per_hour=0.2,
        source="PAI 2020 MISC = older GPUs, e.g. K40m, K80, M60 (trace README); element-wise "
               "minimum of NVIDIA datasheets: K40m 4.29 TFLOPS FP32 / 12 GB / 288 GB/s, K80 per "
               "GPU 4.37 / 12 GB / 240 GB/s, M60 per GPU 4.8 / 8 GB / 160 GB/s"),
    "G1": _v100_placeholder("G1"),
    "G2": _v100_placeholder("G2"),
    "G3": _v100_placeholder("G3"),
}

QOS_PRIORITY = {"LS": "high", "Guaranteed": "high", "Burstable": "normal", "BE": "low"}


def map_model(model: str) -> str | None:
    """The hyperplace type name for a trace GPU model, or None if unknown."""
    if model in MODEL_TO_TYPE:
        return MODEL_TO_TYPE[model]
    if model in TRACE_GPU_TYPES:
        return model
    return None


def _rows(source: Source, columns: Iterable[str]) -> tuple[list[tuple[int, dict[str, str]]], str]:
    text, src = read_text(source)
    reader = csv.DictReader(io.StringIO(text))
    want = list(columns)
    missing = [c for c in want if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"line 1: missing column {missing[0]!r} (expected {', '.join(want)})",
                         source=src)
    rows = []
    for k, row in enumerate(reader):
        if None in row or any(row.get(c) is None for c in want):
            raise InputError(f"line {k + 2}: expected {len(reader.fieldnames or [])} columns",
                             source=src)
        rows.append((k + 2, row))
    return rows, src


def _int(row: dict[str, str], col: str, line: int, src: str) -> int:
    raw = row[col].strip()
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"line {line}: {col}={raw!r} is not a number", source=src) from None
    if value != int(value) or value < 0:
        raise InputError(f"line {line}: {col}={raw!r} must be a whole number >= 0", source=src)
    return int(value)


def trace_fabric(nodes_per_leaf: int = 32, spines: int = 8) -> FabricSpec:
    """The assumed network: a non-blocking leaf/spine fat-tree at ASSUMED_NODE_GBPS."""
    return FabricSpec(generator=FabricGenerator(
        type="fat-tree-2", nodes_per_leaf=nodes_per_leaf, spines=spines,
        node_gbps=ASSUMED_NODE_GBPS, uplink_gbps=ASSUMED_NODE_GBPS))


def _cluster(name: str, entries: list[tuple[str, str, int, str]], skipped: int, src: str,
             nodes_per_leaf: int, spines: int) -> tuple[Cluster, list[GPUType]]:
    """entries: (node name, hyperplace type, GPUs, trace model)."""
    entries = sorted(entries, key=lambda e: (e[3], e[0]))
    try:
        nodes = [Node(name=n, gpu_type=t, gpu_count=g, nvlink=NVLinkTopology.PCIE,
                      labels={TRACE_MODEL_LABEL: m}) for n, t, g, m in entries]
        cluster = Cluster(name=name, labels={SKIPPED_LABEL: str(skipped)}, nodes=nodes,
                          fabric=trace_fabric(nodes_per_leaf, spines))
    except ValidationError as exc:
        raise from_validation_error(exc, source=src) from None
    used = {t for _, t, _, _ in entries}
    return cluster, [TRACE_GPU_TYPES[t] for t in TRACE_GPU_TYPES if t in used]


def _import_fleet(source: Source, *, name: str, nodes_per_leaf: int, spines: int,
                  columns: tuple[str, ...], node_col: str, gpu_col: str, model_col: str,
                  what: str) -> tuple[Cluster, list[GPUType]]:
    """One machine list (a row per machine: its name, GPU count and GPU model) -> cluster."""
    rows, src = _rows(source, columns)
    entries: list[tuple[str, str, int, str]] = []
    skipped = 0
    for line, row in rows:
        gpus = _int(row, gpu_col, line, src)
        model = row[model_col].strip()
        node = row[node_col].strip()
        if not node:
            raise InputError(f"line {line}: {node_col} ({what} name) is empty", source=src)
        if gpus == 0:
            skipped += 1
            continue
        gtype = map_model(model)
        if gtype is None:
            raise InputError(f"line {line}: {what} {node}: unknown GPU model {model!r} with "
                             f"{gpus} GPUs (known: {', '.join([*MODEL_TO_TYPE, *TRACE_GPU_TYPES])})",
                             source=src)
        entries.append((node, gtype, gpus, model))
    if not entries:
        raise InputError(f"no GPU {what} in the file", source=src)
    return _cluster(name, entries, skipped, src, nodes_per_leaf, spines)


def import_alibaba_gpu2023_nodes(source: Source, *, name: str = "alibaba-gpu2023",
                                 nodes_per_leaf: int = 32, spines: int = 8
                                 ) -> tuple[Cluster, list[GPUType]]:
    """(cluster, GPU types it uses that the catalog lacks) from the 2023 node list."""
    return _import_fleet(source, name=name, nodes_per_leaf=nodes_per_leaf, spines=spines,
                         columns=("sn", "cpu_milli", "memory_mib", "gpu", "model"),
                         node_col="sn", gpu_col="gpu", model_col="model", what="node")


def import_alibaba_pai2020_machines(source: Source, *, name: str = "alibaba-pai2020",
                                    nodes_per_leaf: int = 32, spines: int = 8
                                    ) -> tuple[Cluster, list[GPUType]]:
    """(cluster, GPU types it uses that the catalog lacks) from the PAI 2020 machine spec."""
    return _import_fleet(source, name=name, nodes_per_leaf=nodes_per_leaf, spines=spines,
                         columns=("machine", "gpu_type", "cap_cpu", "cap_mem", "cap_gpu"),
                         node_col="machine", gpu_col="cap_gpu", model_col="gpu_type",
                         what="machine")


def import_alibaba_gpu2023_pods(source: Source, *, limit: int | None = None,
                                phases: Iterable[str] | None = None) -> list[TrainingJob]:
    """Whole-GPU pods of the 2023 trace as single-group jobs, in file (creation) order.

    ``limit`` caps the number of jobs; ``phases`` keeps only pods in those ``pod_phase``s.
    The pod's creation time and duration are kept as annotations for replay.
    """
    rows, src = _rows(source, ("name", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
                               "creation_time", "duration_s"))
    keep = set(phases) if phases is not None else None
    jobs: list[TrainingJob] = []
    for line, row in rows:
        if limit is not None and len(jobs) >= limit:
            break
        gpus = _int(row, "num_gpu", line, src)
        milli = _int(row, "gpu_milli", line, src)
        if gpus < 1 or milli != 1000:
            continue
        if keep is not None and row["pod_phase"].strip() not in keep:
            continue
        qos = row["qos"].strip()
        if qos not in QOS_PRIORITY:
            raise InputError(f"line {line}: unknown qos {qos!r} (expected "
                             f"{', '.join(QOS_PRIORITY)})", source=src)
        spec_types: list[str] = []
        for token in row["gpu_spec"].split("|"):
            token = token.strip()
            if not token or token.lower() == "nan":
                continue
            mapped = map_model(token)
            if mapped is None:
                raise InputError(f"line {line}: gpu_spec names unknown GPU model {token!r}",
                                 source=src)
            if mapped not in spec_types:
                spec_types.append(mapped)
        annotations = {"hyperplace.io/trace-creation-time-s": row["creation_time"].strip(),
                       "hyperplace.io/trace-qos": qos,
                       "hyperplace.io/trace-pod-phase": row["pod_phase"].strip()}
        if row["duration_s"].strip():
            annotations["hyperplace.io/trace-duration-s"] = row["duration_s"].strip()
        try:
            jobs.append(TrainingJob(
                metadata=ObjectMeta(name=row["name"].strip(), annotations=annotations),
                spec=TrainingJobSpec(
                    model="unknown",
                    replica_count=1,
                    resource_groups=[ResourceGroup(name="workers", type=GroupType.DATA_PARALLEL,
                                                   gpus_per_group=gpus)],
                    priority=QOS_PRIORITY[qos],
                    tolerations=([Toleration(key="gpu-type", operator="Equal",
                                             value="|".join(spec_types))] if spec_types else []),
                ),
            ))
        except ValidationError as exc:
            err = from_validation_error(exc)
            raise InputError(f"line {line}: {err.path or 'pod'}: {err.message}",
                             source=src) from None
    return jobs

