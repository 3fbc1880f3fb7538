"""What a GPU type can do, as the fitted cost model sees it: peaks by precision, memory
bandwidth, and the measured intra-node (NVLink) bandwidth curves.

Peaks come from the catalog (vendor datasheets, ``hyperplace/data/gpu_specs.csv``); the
non-tensor FP32 peaks below from the same datasheets (V100 SXM2 15.7, A100 19.5, H100 SXM 67,
H200 67, B200 80, MI300X 163.4 TFLOPS). Intra-node all-reduce bandwidth is Sailor's fit
(``hyperplace/data/sailor_intra_node_bandwidths.json``, measured with NCCL on V100, A100 and
GH200 nodes): ``GB/s = c0·x² + c1·x + c2``, ``x = log2(bytes per GPU / 1e6)``, capped at the
measured peak. A type with no curve borrows the nearest measured type's curve scaled by the
ratio of their NVLink figures, and says so.
"""

from __future__ import annotations

import json
import math
from functools import cache
from importlib import resources

from hyperplace.models.gpu import GPUCatalog, GPUType, default_catalog

FP32_TFLOPS = {"V100": 15.7, "A100": 19.5, "H100": 67.0, "H200": 67.0, "B200": 80.0,
               "MI300X": 163.4}
PRECISIONS = ("bf16", "fp16", "fp32", "fp8")
# Sailor's GPU names -> catalog names (GH-96 is a GH200 superchip: its GPU is an H100).
SAILOR_GPU = {"V100-16": "V100-16", "A100-40": "A100-40", "A100-80": "A100-80",
              "GH-96": "H100-80"}
MIN_BW = 1e9  # bytes/s: the fitted quadratic is not used below this


def peak_flops(gpu: GPUType, precision: str = "bf16") -> float:
    """Dense peak FLOP/s at a precision (V100 has no BF16: its FP16 tensor peak is used)."""
    if precision == "fp32":
        return FP32_TFLOPS.get(gpu.family, gpu.bf16_tflops / 8) * 1e12
    if precision == "fp8":  # dense FP8 tensor peak: twice BF16 on Hopper, Blackwell, MI300
        return 2.0 * gpu.bf16_tflops * 1e12
    return gpu.bf16_tflops * 1e12


def memory_bandwidth(gpu: GPUType) -> float:
    """HBM bytes/s."""
    return gpu.hbm_tb_s * 1e12


def element_bytes(precision: str) -> int:
    return 4 if precision == "fp32" else 2


@cache
def _intra_curves() -> dict[tuple[str, int], tuple[list[float], float]]:
    path = resources.files("hyperplace.data") / "sailor_intra_node_bandwidths.json"
    with path.open() as fh:
        raw = json.load(fh)
    out = {}
    for sailor_name, by_tp in raw.items():
        name = SAILOR_GPU.get(sailor_name)
        if name is None:
            continue  # RTX cards: not in the catalog
        for tp, (coeffs, peak) in by_tp.items():
            out[(name, int(tp))] = (list(coeffs), float(peak))
    return out


def measured_intra_types() -> list[str]:
    return sorted({name for name, _ in _intra_curves()})


def nearest_measured(gpu: GPUType, measured: list[str],
                     catalog: GPUCatalog | None = None) -> str:
    """The measured type closest in peak FLOPs, then in memory bandwidth (log distance)."""
    catalog = catalog or default_catalog()
    if gpu.name in measured:
        return gpu.name

    def distance(name: str) -> tuple[float, float]:
        other = catalog.get(name)
        return (abs(math.log(other.bf16_tflops / gpu.bf16_tflops)),
                abs(math.log(other.hbm_tb_s / gpu.hbm_tb_s)))

    return min(measured, key=distance)


def intra_node_bandwidth(gpu: GPUType, tp: int, nbytes: float,
                         catalog: GPUCatalog | None = None) -> tuple[float, str]:
    """Bytes/s of a TP all-reduce of ``nbytes`` over ``tp`` GPUs in one node, and the source.

    Curves exist for TP 2 and 4; TP 8 uses the TP-4 curve (Sailor measured no 8-GPU A100/H100
    node), which the source names.
    """
    curves = _intra_curves()
    source = gpu.name
    scale = 1.0
    if not any(name == gpu.name for name, _ in curves):
        source = nearest_measured(gpu, measured_intra_types(), catalog)
        ref = (catalog or default_catalog()).get(source)
        # a type without NVLink (L4, T4, L40S...) reduces over PCIe
        scale = (gpu.nvlink_gbps or gpu.pcie_gbps) / (ref.nvlink_gbps or ref.pcie_gbps)
    degrees = sorted(d for name, d in curves if name == source)
    degree = min(degrees, key=lambda d: (abs(math.log(d / tp)), -d))
    coeffs, peak = curves[(source, degree)]
    x = math.log2(max(nbytes / tp, 1.0) / 1e6)
    gbs = sum(c * x ** (len(coeffs) - 1 - i) for i, c in enumerate(coeffs))
    bw = min(max(gbs * 1e9, MIN_BW), peak) * scale
    label = f"measured {source} TP{degree}"
    if source != gpu.name:
        ref = (catalog or default_catalog()).get(source)
        label = (f"{source} TP{degree} curve scaled by NVLink {gpu.nvlink_gbps:g}/"
                 f"{ref.nvlink_gbps:g}" if gpu.nvlink_gbps else
                 f"{source} TP{degree} curve scaled by PCIe Gen{gpu.pcie_generation} "
                 f"{gpu.pcie_gbps:g}/{ref.nvlink_gbps or ref.pcie_gbps:g} (no NVLink)")
    elif degree != tp:
        label += f" (for TP{tp})"
    return bw, label
