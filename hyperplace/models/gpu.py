"""GPU types: the catalog every placement and cost estimate starts from.

Figures come from ``hyperplace/data/gpu_specs.csv``: one row per type with the vendor
datasheet it is taken from (``source``), dense BF16 (FP16 where a type has no BF16), sparse
figures not used, and the names tools print for it (``aliases``: GPU Feature Discovery's
``nvidia.com/gpu.product`` values such as ``NVIDIA-H100-80GB-HBM3``, ``nvidia-smi`` names).
Rack-scale parts (GB200, GB300 NVL72) are per GPU, the rack's figure divided by 72. NVLink figures are the vendor's per-GPU
*bidirectional GB/s*; a pair of GPUs joined through an NVSwitch gets that full figure.
"""

from __future__ import annotations

import csv
import re
from functools import cache
from importlib import resources

from pydantic import AliasChoices, Field

from hyperplace.models.base import HPModel
from hyperplace.models.limits import MAX_GPU_FIGURE, Name

# Per-link NVLink bandwidth (GB/s, bidirectional) by NVLink generation: NV# in
# ``nvidia-smi topo -m`` counts bonded links, so pair bandwidth = links x this figure.
NVLINK_GBPS_PER_LINK = {2: 50.0, 3: 50.0, 4: 50.0, 5: 100.0}

# PCIe bandwidth (GB/s, bidirectional, x16) used for GPU pairs without NVLink.
PCIE_GBPS = {3: 32.0, 4: 64.0, 5: 128.0, 6: 256.0}


class GPUType(HPModel):
    """One GPU model as the engine sees it."""


    name: Name = Field(description="catalog name, e.g. H100-80")
    family: Name = Field(description="what acceptorType/tolerations match, e.g. H100")
    vendor: str = "nvidia"
    bf16_tflops: float = Field(gt=0, le=MAX_GPU_FIGURE, description="dense BF16 (FP16 for V100) peak TFLOPS")
    hbm_gb: float = Field(gt=0, le=MAX_GPU_FIGURE)
    hbm_tb_s: float = Field(gt=0, le=MAX_GPU_FIGURE)
    nvlink_gbps: float = Field(
        ge=0, le=MAX_GPU_FIGURE, alias="nvlinkGigabytesPerSecond", validation_alias=AliasChoices(
            "nvlinkGigabytesPerSecond", "nvlink_gbps", "nvlinkGbps"),  # nvlinkGbps: the old key
        description="per-GPU NVLink, bidirectional GB/s (gigabytes)")
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


#: Where the table came from (each row also names its own datasheet in ``source``).
_SRC = "vendor datasheets, hyperplace/data/gpu_specs.csv"


def _num(text: str) -> float:
    return float(text.split()[0])


@cache
def _spec_rows() -> list[dict[str, str]]:
    path = resources.files("hyperplace.data") / "gpu_specs.csv"
    with path.open() as fh:
        return list(csv.DictReader(fh))


@cache
def builtin_catalog() -> dict[str, GPUType]:
    """The built-in GPU types, one per row of the bundled spec table (its ``source`` column
    names the datasheet each figure comes from; ``notes`` says how a figure was derived)."""
    out: dict[str, GPUType] = {}
    for r in _spec_rows():
        out[r["name"]] = GPUType(
            name=r["name"],
            family=r["family"],
            vendor=r["vendor"],
            bf16_tflops=_num(r["bf16_dense_tflops"]),
            hbm_gb=_num(r["hbm_gb"]),
            hbm_tb_s=_num(r["hbm_tb_s"]),
            nvlink_gbps=_num(r["nvlink_gb_s_bidir"]),
            nvlink_generation=int(r["nvlink_generation"]) if r["nvlink_generation"] else None,
            pcie_generation=int(r["pcie_generation"]),
            nic_gbps=_num(r["typical_nic_gbps_per_gpu"]),
            mfu=float(r["mfu"]),
            cost_per_hour=float(r["relative_price"]),
            source=f"{r['source']}: {r['notes']}",
        )
    return out


def compute_capability(gpu: GPUType | str) -> float | None:
    """CUDA compute capability of a built-in type (``9.0`` for H100), None for AMD or a
    declared type."""
    name = gpu if isinstance(gpu, str) else gpu.name
    for r in _spec_rows():
        if r["name"] == name and r["compute_capability"]:
            return float(r["compute_capability"])
    return None


@cache
def _aliases() -> dict[str, str]:
    """Names people and tools write for a built-in type, lower-case: the table's
    ``aliases`` column (vendor product strings as GPU Feature Discovery's
    ``nvidia.com/gpu.product`` label and ``nvidia-smi`` print them, spaces and
    underscores read as dashes: ``NVIDIA-H100-80GB-HBM3``, ``NVIDIA-GB200``, ``Tesla-T4``)."""
    out: dict[str, str] = {}
    for r in _spec_rows():
        for alias in r["aliases"].split(";"):
            if alias.strip():
                out[normalize_product(alias)] = r["name"]
    return out


def gfd_product(gpu: GPUType | str) -> str | None:
    """The ``nvidia.com/gpu.product`` value GPU Feature Discovery sets on nodes of a built-in
    NVIDIA type (the table's ``gfd_product``: ``H100-80`` -> ``NVIDIA-H100-80GB-HBM3``), so
    written manifests select the nodes the cluster labels; None for AMD and declared types."""
    name = gpu if isinstance(gpu, str) else gpu.name
    return next((r["gfd_product"] or None for r in _spec_rows() if r["name"] == name), None)


def normalize_product(text: str) -> str:
    """``NVIDIA H100 80GB HBM3`` / ``NVIDIA_H100_80GB_HBM3`` -> ``nvidia-h100-80gb-hbm3``."""
    return "-".join(re.split(r"[\s_]+", text.strip().lower()))


def _strip_suffixes(key: str) -> list[str]:
    """Keys to try for a product string: itself, without the ``-SHARED`` (time-slicing) or
    ``-MIG-...`` suffix GFD appends, and without a vendor prefix."""
    keys = [key]
    for marker in ("-shared", "-mig-"):
        if marker in key:
            keys.append(key.split(marker)[0])
    for k in list(keys):
        for prefix in ("nvidia-", "tesla-", "amd-instinct-", "amd-"):
            if k.startswith(prefix):
                keys.append(k[len(prefix):])
    return keys


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
        key = normalize_product(name)
        for k in _strip_suffixes(key):
            for t in self._types.values():
                if t.name.lower() == k:
                    return t
            alias = _aliases().get(k)
            if alias and alias in self._types:
                return self._types[alias]
        return None

    def get(self, name: str) -> GPUType:
        t = self.find(name)
        if t is None:
            raise KeyError(f"unknown GPU type {name!r}; known: {', '.join(self._types)}")
        return t


def default_catalog() -> GPUCatalog:
    return GPUCatalog()
