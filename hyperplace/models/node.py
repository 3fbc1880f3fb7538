"""Nodes: GPUs of one type, the NVLink graph between them, NICs, labels and GPU state."""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from itertools import combinations

from pydantic import AliasChoices, Field, model_validator

from hyperplace.models.base import HPModel
from hyperplace.models.limits import Name


class NVLinkTopology(StrEnum):
    """How a node's GPUs talk to each other.

    ``nvswitch``: every pair gets the GPU's full NVLink bandwidth (DGX A100/H100/B200).
    ``hybrid_cube_mesh``: the DGX-1 V100 pattern (1 or 2 bonded links per pair, some pairs
    only PCIe). ``pcie``: no NVLink. ``explicit``: the pairs are listed in ``nvlink_pairs``.
    """

    NVSWITCH = "nvswitch"
    HYBRID_CUBE_MESH = "hybrid_cube_mesh"
    PCIE = "pcie"
    EXPLICIT = "explicit"


# DGX-1 V100 hybrid cube mesh: bonded NVLink count per pair (shared/data/topology/
# dgx1_v100_nvlink_links.csv, from microsoft/msccl-tools). Pairs not listed are PCIe only.
DGX1_LINKS: dict[tuple[int, int], int] = {
    (0, 1): 2, (0, 2): 1, (0, 3): 1, (0, 4): 2, (1, 2): 1, (1, 3): 2, (1, 5): 1,
    (2, 3): 2, (2, 6): 2, (3, 7): 1, (4, 5): 2, (4, 6): 1, (4, 7): 1, (5, 6): 1,
    (5, 7): 2, (6, 7): 2,
}


class GPUPair(HPModel):
    """NVLink between two GPUs of a node, in gigabytes per second (``gigabytesPerSecond``;
    the old key ``gbps``, which read like a network's gigabits, is still read: the file
    readers say so, :func:`hyperplace.instances.registry.warn_renamed_keys`)."""

    a: int = Field(ge=0)
    b: int = Field(ge=0)
    gigabytes_per_second: float = Field(
        ge=0, alias="gigabytesPerSecond", validation_alias=AliasChoices(
            "gigabytesPerSecond", "gigabytes_per_second", "gbps"),  # gbps: the old key
        description="bidirectional GB/s between the pair")


class NIC(HPModel):

    name: Name
    gbps: float = Field(gt=0, description="line rate, Gb/s")
    gpus: list[int] = Field(default_factory=list, description="GPUs closest to this NIC")


class Node(HPModel):
    """A machine. GPU state is kept sparse: every GPU is free unless listed.

    ``allocated`` maps GPU index to the running job that holds it; ``faulty`` lists GPUs
    that must never be used.
    """


    name: Name
    gpu_type: Name
    gpu_count: int = Field(gt=0, le=72, strict=True)
    nvlink: NVLinkTopology = NVLinkTopology.NVSWITCH
    nvlink_gbps: float | None = Field(
        default=None, ge=0, alias="nvlinkGigabytesPerSecond", validation_alias=AliasChoices(
            "nvlinkGigabytesPerSecond", "nvlink_gbps", "nvlinkGbps"),  # nvlinkGbps: the old key
        description="per-pair GB/s (gigabytes) for nvswitch nodes; default: the GPU's")
    nvlink_pairs: list[GPUPair] = Field(default_factory=list, max_length=72 * 71 // 2,
                                        description="at most one entry per GPU pair")
    nics: list[NIC] = Field(default_factory=list)
    labels: dict[str, str] = Field(default_factory=dict)
    allocated: dict[int, Name] = Field(default_factory=dict)
    faulty: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_indices(self) -> "Node":
        if not (self.faulty or self.nvlink_pairs or self.nics):  # most nodes: a quick pass
            count = self.gpu_count
            for i in self.allocated:
                if not 0 <= i < count:
                    raise ValueError(f"allocated: GPU index {i} outside 0..{count - 1}")
            if self.nvlink == NVLinkTopology.HYBRID_CUBE_MESH and count != 8:
                raise ValueError("hybrid_cube_mesh needs gpu_count 8")
            return self
        for field, idxs in (("allocated", list(self.allocated)), ("faulty", self.faulty)):
            for i in idxs:
                if not 0 <= i < self.gpu_count:
                    raise ValueError(f"{field}: GPU index {i} outside 0..{self.gpu_count - 1}")
        if len(set(self.faulty)) != len(self.faulty):
            dup = next(i for i in self.faulty if self.faulty.count(i) > 1)
            raise ValueError(f"faulty: GPU {dup} is listed twice")
        both = sorted(set(self.faulty) & set(self.allocated))
        if both:
            raise ValueError(f"faulty: GPU {both[0]} is also allocated to "
                             f"{self.allocated[both[0]]!r}; a GPU is faulty or allocated, not both")
        if len(self.nvlink_pairs) > self.gpu_count * (self.gpu_count - 1) // 2:
            raise ValueError(f"nvlinkPairs: {len(self.nvlink_pairs)} pairs, but {self.gpu_count} "
                             f"GPUs have only {self.gpu_count * (self.gpu_count - 1) // 2}")
        nic_names: set[str] = set()
        for k, nic in enumerate(self.nics):
            if nic.name in nic_names:
                raise ValueError(f"nics[{k}].name: NIC {nic.name!r} is listed twice")
            nic_names.add(nic.name)
            bad = [g for g in nic.gpus if not 0 <= g < self.gpu_count]
            if bad:
                raise ValueError(f"nics[{k}].gpus: GPU index {bad[0]} outside "
                                 f"0..{self.gpu_count - 1}")
        seen_pairs: set[tuple[int, int]] = set()
        for k, p in enumerate(self.nvlink_pairs):
            if p.a >= self.gpu_count or p.b >= self.gpu_count or p.a == p.b:
                raise ValueError(f"nvlinkPairs[{k}]: bad pair ({p.a}, {p.b}) for GPUs "
                                 f"0..{self.gpu_count - 1}")
            key = (min(p.a, p.b), max(p.a, p.b))
            if key in seen_pairs:
                raise ValueError(f"nvlinkPairs[{k}]: pair ({p.a}, {p.b}) is listed twice")
            seen_pairs.add(key)
        if self.nvlink == NVLinkTopology.HYBRID_CUBE_MESH and self.gpu_count != 8:
            raise ValueError("hybrid_cube_mesh needs gpu_count 8")
        return self

    # ---- state -------------------------------------------------------------------
    @cached_property
    def free_gpus(self) -> tuple[int, ...]:
        if not self.allocated and not self.faulty:
            return tuple(range(self.gpu_count))
        busy = set(self.allocated) | set(self.faulty)
        return tuple(i for i in range(self.gpu_count) if i not in busy)

    @property
    def free_count(self) -> int:
        return len(self.free_gpus)

    @property
    def nic_gbps_per_gpu(self) -> float | None:
        if not self.nics:
            return None
        return sum(n.gbps for n in self.nics) / self.gpu_count

    # ---- NVLink graph ------------------------------------------------------------
    def pair_bandwidths(self, per_link_gbps: float, full_gbps: float, pcie_gbps: float
                        ) -> dict[tuple[int, int], float]:
        """GB/s for every unordered pair (i < j), given the GPU type's figures."""
        out: dict[tuple[int, int], float] = {}
        n = self.gpu_count
        if self.nvlink == NVLinkTopology.NVSWITCH:
            bw = self.nvlink_gbps if self.nvlink_gbps is not None else full_gbps
            return {(i, j): bw for i, j in combinations(range(n), 2)}
        for i, j in combinations(range(n), 2):
            out[(i, j)] = pcie_gbps
        if self.nvlink == NVLinkTopology.HYBRID_CUBE_MESH:
            for (i, j), links in DGX1_LINKS.items():
                out[(i, j)] = links * per_link_gbps
        elif self.nvlink == NVLinkTopology.EXPLICIT:
            for p in self.nvlink_pairs:
                out[(min(p.a, p.b), max(p.a, p.b))] = p.gigabytes_per_second
        return out

    @property
    def is_uniform(self) -> bool:
        """Every pair has the same bandwidth, so any subset of free GPUs is as good as any."""
        return self.nvlink in (NVLinkTopology.NVSWITCH, NVLinkTopology.PCIE)
