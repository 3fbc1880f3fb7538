"""GPU types: the catalog every placement and cost estimate starts from.

Figures come from ``hyperplace/data/gpu_specs.csv`` (a copy of the shared vendor-datasheet
table, dense BF16, sparse figures not used). NVLink figures are the vendor's per-GPU
*bidirectional GB/s*; a pair of GPUs joined through an NVSwitch gets that full figure.
"""

from __future__ import annotations

import csv
from functools import cache
from importlib import resources

from pydantic import Field

from hyperplace.models.base import HPModel
from hyperplace.models.limits import MAX_GPU_FIGURE, Name

# Per-link NVLink bandwidth (GB/s, bidirectional) by NVLink generation: NV# in
# ``nvidia-smi topo -m`` counts bonded links, so pair bandwidth = links x this figure.
NVLINK_GBPS_PER_LINK = {2: 50.0, 3: 50.0, 4: 50.0, 5: 100.0}

# PCIe bandwidth (GB/s, bidirectional, x16) used for GPU pairs without NVLink.
PCIE_GBPS = {3: 32.0, 4: 64.0, 5: 128.0}


class GPUType(HPModel):
    """One GPU model as the engine sees it."""


    name: Name = Field(description="catalog name, e.g. H100-80")
    family: Name = Field(description="what acceptorType/tolerations match, e.g. H100")
    vendor: str = "nvidia"
    bf16_tflops: float = Field(gt=0, le=MAX_GPU_FIGURE, description="dense BF16 (FP16 for V100) peak TFLOPS")
    hbm_gb: float = Field(gt=0, le=MAX_GPU_FIGURE)
    hbm_tb_s: float = Field(gt=0, le=MAX_GPU_FIGURE)
    nvlink_gbps: float = Field(ge=0, le=MAX_GPU_FIGURE, description="per-GPU NVLink, bidirectional GB/s")
    nvlink_generation: int | None = Field(default=None, ge=1)
    pcie_generation: int = Field(default=4, ge=3, le=6)
    nic_gbps: float = Field(gt=0, le=MAX_GPU_FIGURE, description="typical NIC Gb/s per GPU")
    mfu: float = Field(default=0.40, gt=0, le=1, description="model-FLOPs utilisation to plan with")
    cost_per_hour: float = Field(default=1.0, ge=0, le=MAX_GPU_FIGURE, description="relative price, for --policy cost")
    source: str = ""

    @property
    def nvlink_per_link_gbps(self) -> float:
        return NVLINK_GBPS_PER_LINK.get(self.nvlink_generation or 4, 50.0)

    @property
    def pcie_gbps(self) -> float:
        return PCIE_GBPS.get(self.pcie_generation, 64.0)

    def matches(self, selector: str) -> bool:
        """True when ``selector`` names this type: ``H100``, ``h100-80``, ``a100|h100`` (any
        of), ``a100|h100&h100`` (every ``&``-part must match: the intersection a job's
        acceleratorType and gpu-type toleration make together)."""
        return all(self._matches_any(part) for part in selector.split("&"))

    def _matches_any(self, selector: str) -> bool:
        for alt in selector.split("|"):
            key = alt.strip().lower()
            if key and key in (self.name.lower(), self.family.lower()):
                return True
        return False


def unknown_alternative(selector: str, types: "GPUCatalog | list[GPUType]") -> str | None:
    """The first ``|``-alternative of ``selector`` that names none of ``types`` by the
    engine's rule (:meth:`GPUType.matches`), or None: a typo told apart from a known type
    that a cluster merely lacks."""
    for alt in selector.split("|"):
        if alt.strip() and not any(t.matches(alt) for t in types):
            return alt.strip()
    return None


_SRC = "NVIDIA/AMD datasheets via shared/data/hardware/gpu_specs.csv"

# (name, family, csv row, hbm override, nvlink gen, pcie gen, mfu, price, tflops override)
_ROWS = [
    ("V100-16", "V100", "V100-SXM2", 16, 2, 3, 0.45, 0.9, 125.0),
    ("V100-32", "V100", "V100-SXM2", 32, 2, 3, 0.45, 1.0, 125.0),
    ("A100-40", "A100", "A100-40GB", None, 3, 4, 0.48, 1.6, None),
    ("A100-80", "A100", "A100-80GB", None, 3, 4, 0.48, 2.0, None),
    ("H100-80", "H100", "H100", None, 4, 5, 0.42, 4.0, None),
    ("H200-141", "H200", "H200", None, 4, 5, 0.42, 5.0, None),
    ("B200", "B200", "B200", 180, 5, 5, 0.40, 7.5, None),
    ("MI300X", "MI300X", "MI300X", 192, None, 5, 0.35, 4.5, None),
]


def _num(text: str) -> float:
    return float(text.split()[0])


@cache
def builtin_catalog() -> dict[str, GPUType]:
    """The built-in GPU types, read from the bundled spec table (with its provenance)."""
    path = resources.files("hyperplace.data") / "gpu_specs.csv"
    with path.open() as fh:
        rows = {r["gpu"]: r for r in csv.DictReader(fh)}
    out: dict[str, GPUType] = {}
    for name, family, key, hbm, gen, pcie, mfu, price, tflops in _ROWS:
        r = rows[key]
        out[name] = GPUType(
            name=name,
            family=family,
            vendor="amd" if family == "MI300X" else "nvidia",
            bf16_tflops=tflops or _num(r["bf16_dense_tflops"]),
            hbm_gb=hbm or _num(r["hbm_gb"]),
            hbm_tb_s=_num(r["hbm_tb_s"]),
            nvlink_gbps=_num(r["nvlink_gb_s_bidir"]),
            nvlink_generation=gen,
            pcie_generation=pcie,
            nic_gbps=_num(r["typical_nic_gbps_per_gpu"]),
            mfu=mfu,
            cost_per_hour=price,
            source=f"{_SRC}: {r['notes']}",
        )
    return out


# Names people write for the same type.
_ALIASES = {
    "v100": "V100-32", "v100-sxm2": "V100-32", "v100m32": "V100-32", "v100-16gb": "V100-16",
    "v100-32gb": "V100-32", "a100": "A100-80", "a100-40gb": "A100-40", "a100-80gb": "A100-80",
    "a100-sxm4-80gb": "A100-80", "a100-sxm4-40gb": "A100-40", "h100": "H100-80",
    "h100-sxm": "H100-80", "h100-80gb": "H100-80", "h200": "H200-141", "h200-141gb": "H200-141",
    "b200-180": "B200", "mi300": "MI300X", "gh-96": "H100-80", "gh200": "H100-80",
}


class GPUCatalog:
    """Built-in GPU types plus any a user declares; looks names up leniently."""

    def __init__(self, extra: list[GPUType] | None = None):
        self._types = dict(builtin_catalog())
        for t in extra or []:
            self._types[t.name] = t

    def __contains__(self, name: str) -> bool:
        return self.find(name) is not None

    def __iter__(self):
        return iter(self._types.values())

    def names(self) -> list[str]:
        return list(self._types)

    def find(self, name: str) -> GPUType | None:
        if name in self._types:
            return self._types[name]
        key = name.strip().lower()
        for t in self._types.values():
            if t.name.lower() == key:
                return t
        alias = _ALIASES.get(key)
        return self._types.get(alias) if alias else None

    def get(self, name: str) -> GPUType:
        t = self.find(name)
        if t is None:
            raise KeyError(f"unknown GPU type {name!r}; known: {', '.join(self._types)}")
        return t


def default_catalog() -> GPUCatalog:
    return GPUCatalog()
