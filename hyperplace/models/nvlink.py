"""Multi-node NVLink domains: racks whose trays share one NVLink network (#24).

A GB200 or GB300 NVL72 rack is 18 compute trays of 4 GPUs joined by 9 NVLink switch trays:
every GPU of the rack reaches every other at the full per-GPU NVLink rate (1.8 TB/s,
bidirectional), across trays. A DGX H100 SuperPOD with the NVLink Switch System joins up
to 32 nodes (256 GPUs) the same way. Such a rack is an :class:`NVLinkDomain`: its member
nodes (the trays), the per-GPU NVLink bandwidth across them, the NVLink switch layer and
optional IMEX / partition limits. It is a level of the fabric *between the node and the
leaf*: a tray's leaf (:meth:`~hyperplace.models.fabric.Fabric.leaf_of`) is its NVLink
domain, the domain's trays hang off the InfiniBand/Ethernet leaves of the fabric as any
node does, so a cluster may hold trays in NVL72 racks under leaf/spine beside HGX nodes
under leaf/spine, trees of different depth in one fabric.

Rules that follow (the placement formulation and the checker implement them):

* a gang unit (TP or EP group) may span the trays of one NVLink domain at NVLink
  bandwidth; a unit with an NVLink floor that spans trays lies in one domain whose
  per-GPU bandwidth meets the floor (and, with ``partitionTrays``, in one partition);
* two trays of one domain are 0 fabric hops apart: the NVLink switch layer is the job's
  own interconnect, so ``maxHopCount: 0`` means "one node or one NVLink domain";
* ``spareTrays``: whole free trays the domain keeps for repairs (a failed tray is
  replaced inside the domain, so the job's NVLink group survives);
* slices (:mod:`hyperplace.models.slices`) of ``k`` trays must divide the trays a domain
  offers (its trays less its spare trays).

Sources: NVIDIA GB200 NVL72 (18 compute trays x 4 Blackwell GPUs, 9 NVLink switch trays,
130 TB/s NVLink in the rack, 1.8 TB/s per GPU), nvidia.com/en-us/data-center/gb200-nvl72/;
GB300 NVL72 (same NVLink 5 layout), nvidia.com/en-us/data-center/gb300-nvl72/; DGX H100
NVLink Switch System (up to 256 H100 in one NVLink domain, 900 GB/s per GPU).
"""

from __future__ import annotations

from pydantic import AliasChoices, Field, model_validator

from hyperplace.models.base import HPModel
from hyperplace.models.limits import MAX_GPU_FIGURE, Name

#: GPUs per compute tray of the rack-scale systems whose node is a tray (matched on the
#: node's ``gpuType``, case-insensitive, as a name or a name prefix such as ``GB200-...``).
TRAY_GPUS = {"gb200": 4, "gb300": 4}


def tray_gpus(gpu_type: str) -> int | None:
    """GPUs of one compute tray for a rack-scale GPU type (None: not a tray type)."""
    key = gpu_type.lower()
    for name, gpus in TRAY_GPUS.items():
        if key == name or key.startswith(name + "-"):
            return gpus
    return None


class NVLinkDomain(HPModel):
    """One NVLink domain spanning nodes (an NVL72 rack, an NVLink Switch System).

    ``gigabytesPerSecondPerGpu`` is the per-GPU NVLink rate between any two GPUs of the
    domain, bidirectional GB/s as the GPU type's ``nvlinkGigabytesPerSecond`` (GB200 NVL72:
    1800; the old key ``gbpsPerGpu`` is read with a warning); None takes
    the members' GPU type figure.
    """

    name: Name
    nodes: list[Name] = Field(min_length=1, max_length=4096,
                              description="member nodes (trays), each in one domain only")
    gbps_per_gpu: float | None = Field(
        default=None, ge=0, le=MAX_GPU_FIGURE, alias="gigabytesPerSecondPerGpu",
        validation_alias=AliasChoices("gigabytesPerSecondPerGpu", "gbps_per_gpu",
                                      "gbpsPerGpu"),  # gbpsPerGpu: the old key
        description="per-GPU NVLink GB/s (gigabytes) across the domain")
    system: str = Field(default="", description="e.g. GB200 NVL72")
    switch_trays: int = Field(default=0, ge=0, le=4096,
                              description="NVLink switch trays (the NVLink switch layer)")
    partition_trays: int | None = Field(
        default=None, gt=0, le=4096,
        description="NVLink partition / IMEX domain size in trays: a unit never spans two")
    spare_trays: int = Field(default=0, ge=0, le=4096,
                             description="whole free trays kept for repairs inside the domain")

    @model_validator(mode="after")
    def _members(self) -> "NVLinkDomain":
        seen: set[str] = set()
        for i, n in enumerate(self.nodes):
            if n in seen:
                raise ValueError(f"nodes[{i}]: node {n!r} is listed twice in NVLink domain "
                                 f"{self.name!r}")
            seen.add(n)
        if self.partition_trays is not None and len(self.nodes) % self.partition_trays:
            raise ValueError(f"partitionTrays: {self.partition_trays} does not divide the "
                             f"{len(self.nodes)} trays of NVLink domain {self.name!r}")
        if self.spare_trays >= len(self.nodes):
            raise ValueError(f"spareTrays: {self.spare_trays} spare trays leave none of the "
                             f"{len(self.nodes)} trays of NVLink domain {self.name!r} to use")
        return self

    @property
    def usable_trays(self) -> int:
        """Trays a slice or a unit may plan on: all but the spare trays."""
        return len(self.nodes) - self.spare_trays

    def partition_of(self, node: str) -> int:
        """Index of the NVLink partition holding ``node`` (0 without partitions)."""
        if self.partition_trays is None:
            return 0
        return self.nodes.index(node) // self.partition_trays


def check_domains(domains: list[NVLinkDomain], node_names: set[str],
                  gpu_counts: dict[str, tuple[str, int]], prefix: str) -> None:
    """Cluster-level rules of NVLink domains (raise ValueError naming the field).

    Every member is a node of the cluster and in one domain only; domain names are unique;
    a tray type (GB200, GB300) node has its tray's GPU count; members of one domain share
    a GPU count (trays of one rack are alike).
    """
    names: set[str] = set()
    owner: dict[str, str] = {}
    for i, d in enumerate(domains):
        where = f"{prefix}[{i}]"
        if d.name in names:
            raise ValueError(f"{where}.name: NVLink domain {d.name!r} is listed twice")
        names.add(d.name)
        counts = set()
        for k, n in enumerate(d.nodes):
            if n not in node_names:
                raise ValueError(f"{where}.nodes[{k}]: {n!r} is not a node of this cluster")
            if n in owner:
                raise ValueError(f"{where}.nodes[{k}]: node {n!r} is already in NVLink "
                                 f"domain {owner[n]!r}; a node is in one NVLink domain")
            owner[n] = d.name
            counts.add(gpu_counts[n][1])
        if len(counts) > 1:
            raise ValueError(f"{where}.nodes: trays of one NVLink domain have one GPU count, "
                             f"these have {sorted(counts)}")


def check_tray_nodes(gpu_counts: dict[str, tuple[str, int]], order: list[str]) -> None:
    """A node of a tray GPU type (GB200, GB300) has its tray's GPU count."""
    for i, name in enumerate(order):
        gpu_type, count = gpu_counts[name]
        want = tray_gpus(gpu_type)
        if want is not None and count != want:
            raise ValueError(f"nodes[{i}].gpuCount: a {gpu_type} node is one compute tray of "
                             f"{want} GPUs, not {count} (describe the rack as an NVLink "
                             "domain of trays under fabric.nvlinkDomains; importers take "
                             f"--gpus-per-node {want})")
