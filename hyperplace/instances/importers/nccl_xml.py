"""NCCL topology XML (``NCCL_TOPO_FILE``, as shipped for Azure ND/NC and AWS p4d/p5) -> a
:class:`Node`.

Cloud vendors publish these files so NCCL sees the real PCIe tree inside a VM; they are the
closest thing to an authoritative machine description for cloud GPU nodes. They are also
*partial*: NCCL merges them with what it detects at run time, so a file may omit GPUs
(AWS p5), NVLinks (all but NCv4) or NIC line rates (all but NCv4). The importer reads what is
there and takes the rest from arguments, or from :data:`CLOUD_SHAPES` for the bundled files.

What is read:

* GPUs: ``<gpu>`` elements, and ``<pci>`` devices of PCI class 0x0300xx/0x0302xx (display /
  3D controller). Index = ``<gpu dev>`` when present, else the order of PCI bus ids (the
  order CUDA enumerates identical GPUs in under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``).
* GPU type: ``gpu_type`` if given; else the PCI device id (:data:`PCI_DEVICE_TYPES`, from
  the PCI ID repository); else the ``<gpu sm>`` compute capability (:func:`sm_families`:
  the catalog's ``compute_capability`` column; ``sm 90`` is H100, H200, GH200 or H20),
  taking the smallest of those types and saying so (``hyperplace.io/assumed: gpu-type``). A given type that contradicts the file's ``sm``
  is an error.
* NVLink: ``<nvlink target count tclass>`` under each ``<gpu>``. Links to an NVSwitch
  (``tclass`` 0x068000) make an ``nvswitch`` node whose pair bandwidth is the GPU's switch
  link count x per-link GB/s; links to another GPU (``tclass`` 0x030200) make explicit pairs
  at ``count x per-link``. A link whose target is the GPU's own bus id (the NCv4 file) names
  no peer and is ignored. Without any ``<nvlink>`` element the topology comes from
  ``nvlink`` or, failing that, from the GPU type: 8-GPU boards of NVLink generation 3+ are
  NVSwitch baseboards (HGX A100/H100/B200), 8 V100s are the hybrid cube mesh (HGX-1),
  anything else PCIe.
* NICs: every ``<net>`` (one per port) and every ``<pci>`` of class 0x0200xx (Ethernet, e.g.
  AWS EFA) or 0x0207xx (InfiniBand) that has no ``<net>`` inside. ``<net speed>`` is in
  **Mb/s** (NCCL's unit: 100000 = 100 Gb/s). A NIC's closest GPUs are the GPUs in the
  smallest enclosing subtree (same PCIe switch, else same CPU). A NIC without ``<net speed>``
  whose PCI id fixes its speed (:data:`PCI_NIC_GBPS`: AWS EFA 0xefa0 = 100 Gb/s, so a p4d's
  four adapters make 4 x 100 Gb/s) gets that speed unless ``nic_gbps`` is given.
* ``<pci>`` leaves without a class (the p5 file) are unknown devices to NCCL until it probes
  them; ``bare_pci_devices="nic"`` counts them as NICs when the vendor's notes say so.

Values not in the file and not given are taken from the catalog and listed in the node label
``hyperplace.io/assumed`` (e.g. ``nic-speed,nvlink``), so a reader can see what was guessed.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Literal

from hyperplace.errors import InputError, known_words
from hyperplace.instances.importers._source import Source, bundled, read_text
from hyperplace.instances.importers.kubernetes import BUS_IDS_LABEL
from hyperplace.models.gpu import GPUCatalog, GPUType, compute_capability, default_catalog
from hyperplace.models.node import NIC, GPUPair, Node, NVLinkTopology

ASSUMED_LABEL = "hyperplace.io/assumed"

# NVIDIA PCI device ids of the catalog's GPUs (PCI ID repository, pci-ids.ucw.cz, vendor 10de).
PCI_DEVICE_TYPES = {
    "0x1db1": "V100-16",   # GV100GL [Tesla V100 SXM2 16GB]
    "0x1db5": "V100-32",   # GV100GL [Tesla V100 SXM2 32GB]
    "0x20b0": "A100-40",   # GA100 [A100 SXM4 40GB]
    "0x20b2": "A100-80",   # GA100 [A100 SXM4 80GB]
    "0x20b5": "A100-80",   # GA100 [A100 PCIe 80GB]
    "0x2330": "H100-80",   # GH100 [H100 SXM5 80GB]
    "0x1eb8": "T4",        # TU104GL [Tesla T4]
    "0x2236": "A10",       # GA102GL [A10]
    "0x2237": "A10",       # GA102GL [A10G] (AWS g5; the A10's datasheet figures)
    "0x26b9": "L40S",      # AD102GL [L40S]
    "0x27b8": "L4",        # AD104GL [L4]
    "0x2335": "H200-141",  # GH100 [H200 SXM 141GB]
    "0x2329": "H20",       # GH100 [H20]
    "0x2901": "B200",      # GB100 [B200]
    "0x2941": "GB200",     # GB100 [HGX GB200]
    "0x31c2": "GB300",     # GB110 [GB300]
    "0x31c3": "GB300",     # GB110 [GB300]
}

# NIC speeds a PCI id fixes: AWS's Elastic Fabric Adapter (vendor 0x1d0f, device 0xefa0) is
# 100 Gb/s per adapter on p4d/p4de (aws.amazon.com/ec2/instance-types/p4: 400 Gb/s as 4 x 100).
PCI_NIC_GBPS = {("0x1d0f", "0xefa0"): 100.0}


def sm_families(sm: int, cat: GPUCatalog) -> set[str]:
    """Catalog families of CUDA compute capability ``sm`` (NCCL's ``<gpu sm="90">``):
    ``90`` -> H100, H200, GH200, H20 (the catalog's ``compute_capability`` column)."""
    return {t.family for t in cat if compute_capability(t) == sm / 10}

_GPU_CLASSES = ("0x0300", "0x0302")
_NIC_CLASSES = ("0x0200", "0x0207")
_BRIDGE_CLASS = "0x0604"
_NVSWITCH_TCLASS = "0x068000"
_GPU_TCLASS = "0x030200"


@dataclass
class _Gpu:
    busid: str
    dev: int | None = None
    sm: int | None = None
    device: str | None = None
    path: tuple[int, ...] = ()
    nvlinks: list[tuple[str, int, str]] = field(default_factory=list)  # target, count, tclass


@dataclass
class _Nic:
    name: str
    mbps: float | None
    path: tuple[int, ...]
    pci_gbps: float | None = None  # a speed the NIC's PCI id fixes (PCI_NIC_GBPS)


@dataclass(frozen=True)
class NcclTopology:
    """What the file says, before defaults fill the gaps."""

    gpus: list[_Gpu]
    nics: list[_Nic]
    has_nvlink_elements: bool


def _norm_class(value: str | None) -> str:
    return (value or "").strip().lower()


def _int_attr(el: ET.Element, attr: str, src: str, where: str) -> int | None:
    raw = el.get(attr)
    if raw is None or raw.strip() == "":
        return None
    try:
        return int(raw, 0)
    except ValueError:
        raise InputError(f"{where}: {attr}={raw!r} is not an integer", source=src) from None


def parse_nccl_xml(text: str, src: str, *,
                   bare_pci_devices: Literal["ignore", "nic"] = "ignore") -> NcclTopology:
    """Walk the XML tree; structural problems are InputErrors naming the file and element."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        line, col = exc.position
        raise InputError(f"malformed XML: line {line}, column {col + 1}: "
                         f"{str(exc).split(':')[0]}", source=src) from None
    if root.tag != "system":
        raise InputError(f"root element is <{root.tag}>, expected <system> (NCCL topology)",
                         source=src)
    gpus: dict[str, _Gpu] = {}
    nics: list[_Nic] = []
    has_nvlink = False

    def walk(el: ET.Element, path: tuple[int, ...]) -> None:
        nonlocal has_nvlink
        for k, child in enumerate(el):
            if not isinstance(child.tag, str):
                continue  # comments
            here = (*path, k)
            tag = child.tag
            if tag == "pci":
                busid = (child.get("busid") or "").lower()
                if not busid:
                    raise InputError("<pci> element without busid", source=src)
                cls = _norm_class(child.get("class"))
                kids = [c for c in child if isinstance(c.tag, str)]
                if cls.startswith(_GPU_CLASSES):
                    g = gpus.setdefault(busid, _Gpu(busid=busid))
                    g.device = (child.get("device") or "").lower() or None
                    g.path = path  # the GPU's switch/CPU is its enclosing subtree
                    walk(child, here)
                elif cls.startswith(_NIC_CLASSES) and not child.findall(".//net"):
                    ids = ((child.get("vendor") or "").lower(), (child.get("device") or "").lower())
                    nics.append(_Nic(name=f"pci-{busid}", mbps=None, path=path,
                                     pci_gbps=PCI_NIC_GBPS.get(ids)))
                elif cls == "" and not kids:
                    if bare_pci_devices == "nic":
                        nics.append(_Nic(name=f"pci-{busid}", mbps=None, path=path))
                elif cls and not cls.startswith((_BRIDGE_CLASS, *_NIC_CLASSES)) and not kids:
                    pass  # other devices (NVSwitch, storage) do not carry traffic we place
                else:
                    walk(child, here)
            elif tag == "gpu":
                parent_bus = (el.get("busid") or "").lower()
                if not parent_bus:
                    raise InputError("<gpu> element outside a <pci busid=...>", source=src)
                where = f"<gpu> in <pci busid={parent_bus!r}>"
                g = gpus.setdefault(parent_bus, _Gpu(busid=parent_bus, path=path[:-1]))
                g.dev = _int_attr(child, "dev", src, where)
                g.sm = _int_attr(child, "sm", src, where)
                for link in child.findall("nvlink"):
                    has_nvlink = True
                    count = _int_attr(link, "count", src, f"{where} <nvlink>")
                    target = (link.get("target") or "").lower()
                    if count is None or count <= 0 or not target:
                        raise InputError(f"{where}: <nvlink> needs a target and a count > 0",
                                         source=src)
                    g.nvlinks.append((target, count, _norm_class(link.get("tclass"))))
            elif tag == "net":
                speed = child.get("speed")
                name = child.get("name") or f"net{len(nics)}"
                mbps: float | None = None
                if speed not in (None, ""):
                    try:
                        mbps = float(speed)
                    except ValueError:
                        raise InputError(f"<net name={name!r}>: speed={speed!r} is not a number "
                                         "(Mb/s)", source=src) from None
                    if mbps <= 0:
                        raise InputError(f"<net name={name!r}>: speed must be > 0 Mb/s",
                                         source=src)
                nics.append(_Nic(name=name, mbps=mbps, path=path))
            else:
                walk(child, here)

    walk(root, ())
    return NcclTopology(gpus=list(gpus.values()), nics=nics, has_nvlink_elements=has_nvlink)


def _order_gpus(gpus: list[_Gpu], src: str) -> list[_Gpu]:
    devs = [g.dev for g in gpus]
    if all(d is not None for d in devs):
        ordered = sorted(gpus, key=lambda g: g.dev or 0)
        if [g.dev for g in ordered] != list(range(len(gpus))):
            raise InputError(f"<gpu dev> values {sorted(d for d in devs if d is not None)} are "
                             f"not 0..{len(gpus) - 1}", source=src)
        return ordered
    return sorted(gpus, key=lambda g: g.busid)


def _resolve_type(topo: NcclTopology, gpu_type: str | None, cat: GPUCatalog,
                  src: str) -> tuple[GPUType, bool]:
    """(type, guessed?)."""
    sms = {g.sm for g in topo.gpus if g.sm is not None}
    if len(sms) > 1:
        raise InputError(f"GPUs of several architectures (sm {sorted(sms)}) in one node",
                         source=src)
    families = sm_families(next(iter(sms)), cat) if sms else set()
    if gpu_type is not None:
        t = cat.find(gpu_type)
        if t is None:
            raise InputError(f"unknown GPU type {gpu_type!r} ({known_words(gpu_type, cat.names())})",
                             source=src)
        if families and compute_capability(t) is not None and t.family not in families:
            raise InputError(f"gpu_type {gpu_type!r} is {t.family} but the file's GPUs are "
                             f"sm {next(iter(sms))} ({', '.join(sorted(families))})",
                             source=src)
        return t, False
    devices = {g.device for g in topo.gpus if g.device}
    known = {PCI_DEVICE_TYPES[d] for d in devices if d in PCI_DEVICE_TYPES}
    if len(known) == 1:
        return cat.get(known.pop()), False
    if families:
        fam = sorted((t for t in cat if t.family in families and compute_capability(t)),
                     key=lambda t: (t.hbm_gb, t.name))
        if fam:
            return fam[0], True
    raise InputError("the file does not say which GPU it holds (no known PCI device id or "
                     "<gpu sm>); pass gpu_type", source=src)


def _closest_gpus(nic: _Nic, gpus: list[_Gpu]) -> list[int]:
    """GPUs in the smallest subtree that holds the NIC and any GPU."""
    for depth in range(len(nic.path), -1, -1):
        prefix = nic.path[:depth]
        near = [i for i, g in enumerate(gpus) if g.path[:depth] == prefix]
        if near and depth > 0:
            return near
    return []


def _default_name(src: str) -> str:
    stem = PurePath(src).stem.lower()
    return re.sub(r"[^a-z0-9-]+", "-", stem).strip("-") or "node"


def import_nccl_topology(
    source: Source,
    *,
    gpu_type: str | None = None,
    gpu_count: int | None = None,
    nic_gbps: float | None = None,
    nvlink: NVLinkTopology | None = None,
    bare_pci_devices: Literal["ignore", "nic"] = "ignore",
    name: str | None = None,
    catalog: GPUCatalog | None = None,
    labels: dict[str, str] | None = None,
) -> Node:
    """A node from an NCCL topology XML file (rules in the module docstring).

    ``gpu_count`` is needed only for files that list no GPU (AWS p5); if the file lists GPUs
    it must agree. ``nic_gbps`` is used for NICs whose ``<net speed>`` is absent.
    """
    text, src = read_text(source)
    topo = parse_nccl_xml(text, src, bare_pci_devices=bare_pci_devices)
    cat = catalog or default_catalog()
    gpus = _order_gpus(topo.gpus, src)
    assumed: list[str] = []
    if gpus and gpu_count is not None and gpu_count != len(gpus):
        raise InputError(f"gpu_count={gpu_count} given but the file lists {len(gpus)} GPUs",
                         source=src)
    count = len(gpus) or gpu_count
    if not count:
        raise InputError("the file lists no GPU (NCCL detects them at run time); pass gpu_count",
                         source=src)
    if not gpus and gpu_type is None:
        raise InputError("the file lists no GPU, so it cannot say which; pass gpu_type",
                         source=src)
    gtype, guessed = _resolve_type(topo, gpu_type, cat, src)
    if guessed:
        assumed.append("gpu-type")
    per_link = gtype.nvlink_per_link_gbps

    kind, pair_list, switch_gbps = _nvlink(topo, gpus, per_link, src)
    if kind is None:
        if nvlink is not None:
            kind = nvlink
        else:
            assumed.append("nvlink")
            if count == 8 and (gtype.nvlink_generation or 0) >= 3 and gtype.nvlink_gbps > 0:
                kind = NVLinkTopology.NVSWITCH
            elif count == 8 and gtype.family == "V100":
                kind = NVLinkTopology.HYBRID_CUBE_MESH
            else:
                kind = NVLinkTopology.PCIE
    elif nvlink is not None and nvlink != kind:
        raise InputError(f"nvlink={nvlink.value} given but the file's <nvlink> elements describe "
                         f"{kind.value}", source=src)

    node_nics: list[NIC] = []
    speed_assumed = False
    for nic in topo.nics:
        if nic.mbps is not None:
            gbps = nic.mbps / 1000.0
        elif nic.pci_gbps is not None and nic_gbps is None:
            gbps = nic.pci_gbps
        elif nic_gbps is not None:
            gbps = nic_gbps
        else:
            gbps = gtype.nic_gbps
            speed_assumed = True
        node_nics.append(NIC(name=nic.name, gbps=gbps, gpus=_closest_gpus(nic, gpus)))
    if speed_assumed:
        assumed.append("nic-speed")
    node_labels = dict(labels or {})
    if gpus:  # each GPU's PCI address, index order: the DRA driver publishes it (writers.py)
        node_labels.setdefault(BUS_IDS_LABEL, ",".join(g.busid for g in gpus))
    if assumed:
        node_labels[ASSUMED_LABEL] = ",".join(assumed)
    return Node(
        name=name or _default_name(src),
        gpu_type=gtype.name,
        gpu_count=count,
        nvlink=kind,
        nvlink_gbps=switch_gbps,
        nvlink_pairs=pair_list,
        nics=node_nics,
        labels=node_labels,
    )


def _nvlink(topo: NcclTopology, gpus: list[_Gpu], per_link: float, src: str
            ) -> tuple[NVLinkTopology | None, list[GPUPair], float | None]:
    """(kind or None when the file says nothing, explicit pairs, NVSwitch pair GB/s)."""
    if not topo.has_nvlink_elements:
        return None, [], None
    index = {g.busid: i for i, g in enumerate(gpus)}
    switch_links: list[int] = []
    pairs: dict[tuple[int, int], int] = {}
    for i, g in enumerate(gpus):
        to_switch = 0
        for target, count, tclass in g.nvlinks:
            if tclass == _NVSWITCH_TCLASS:
                to_switch += count
            elif target == g.busid:
                continue  # a link to itself names no peer
            elif tclass in (_GPU_TCLASS, "") and target in index:
                j = index[target]
                key = (min(i, j), max(i, j))
                if key in pairs and pairs[key] != count:
                    raise InputError(f"NVLink {g.busid} -> {target} has count {count} but the "
                                     f"reverse link has {pairs[key]}", source=src)
                pairs[key] = count
            elif tclass in (_GPU_TCLASS, ""):
                raise InputError(f"<gpu> at {g.busid}: <nvlink target={target!r}> names no GPU "
                                 "of this file", source=src)
        switch_links.append(to_switch)
    if any(switch_links):
        if pairs:
            raise InputError("GPUs link both to NVSwitches and directly to each other; "
                             "mixed NVLink topologies are not supported", source=src)
        return NVLinkTopology.NVSWITCH, [], min(switch_links) * per_link
    if pairs:
        return (NVLinkTopology.EXPLICIT,
                [GPUPair(a=i, b=j, gigabytes_per_second=c * per_link) for (i, j), c in sorted(pairs.items())],
                None)
    return NVLinkTopology.PCIE, [], None


@dataclass(frozen=True)
class CloudShape:
    """A bundled NCCL file plus the facts it leaves out, each from the vendor's page."""

    file: str
    instance_type: str
    gpu_type: str
    nic_gbps: float | None
    gpu_count: int | None = None
    bare_pci_devices: Literal["ignore", "nic"] = "ignore"
    source: str = ""


CLOUD_SHAPES: dict[str, CloudShape] = {
    "azure-ndv2": CloudShape(
        "azure_ndv2-topo.xml", "Standard_ND40rs_v2", "V100-32", 100.0,
        source="learn.microsoft.com/azure/virtual-machines/ndv2-series: 8x V100 32GB NVLink, "
               "100 Gb/s EDR InfiniBand"),
    "azure-ndv4": CloudShape(
        "azure_ndv4-topo.xml", "Standard_ND96asr_v4", "A100-40", 200.0,
        source="learn.microsoft.com/azure/virtual-machines/nda100-v4-series: 8x A100 40GB, "
               "NVLink 3.0, 8x 200 Gb/s HDR InfiniBand"),
    "azure-ndv5": CloudShape(
        "azure_ndv5-topo.xml", "Standard_ND96isr_H100_v5", "H100-80", 400.0,
        source="learn.microsoft.com/azure/virtual-machines/nd-h100-v5-series: 8x H100 80GB, "
               "NVLink 4.0, 8x 400 Gb/s NDR InfiniBand"),
    "azure-ncv4": CloudShape(
        "azure_ncv4-topo.xml", "Standard_NC96ads_A100_v4", "A100-80", None,
        source="learn.microsoft.com/azure/virtual-machines/nc-a100-v4-series: A100 80GB PCIe; "
               "NIC speed from the file"),
    "aws-p4d": CloudShape(
        "aws_p4d-24xl-topo.xml", "p4d.24xlarge", "A100-40", 100.0,
        source="aws.amazon.com/ec2/instance-types/p4: p4d.24xlarge 8x A100 40GB, 400 Gb/s EFA "
               "(4 NICs x 100 Gb/s)"),
    "aws-p4de": CloudShape(
        "aws_p4de-24xl-topo.xml", "p4de.24xlarge", "A100-80", 100.0,
        source="aws.amazon.com/ec2/instance-types/p4: p4de.24xlarge 8x A100 80GB, 400 Gb/s "
               "EFA (4 NICs x 100 Gb/s)"),
    "aws-p5": CloudShape(
        "aws_p5.48xl-topo.xml", "p5.48xlarge", "H100-80", 100.0, gpu_count=8, bare_pci_devices="nic",
        source="aws.amazon.com/ec2/instance-types/p5: p5.48xlarge 8x H100 80GB, 3200 Gb/s "
               "EFA (32 NICs x 100 Gb/s; the file's comment: 4 NICs per PCIe switch, GPUs "
               "not listed)"),
}


def import_cloud_shape(shape: str, *, name: str | None = None,
                       catalog: GPUCatalog | None = None) -> Node:
    """A node of a known cloud instance type from its bundled NCCL file and cited facts."""
    spec = CLOUD_SHAPES.get(shape)
    if spec is None:
        raise InputError(f"unknown cloud shape {shape!r}; known: {', '.join(CLOUD_SHAPES)}")
    return import_nccl_topology(
        bundled("topology", spec.file), gpu_type=spec.gpu_type, gpu_count=spec.gpu_count,
        nic_gbps=spec.nic_gbps, bare_pci_devices=spec.bare_pci_devices, name=name or shape,
        catalog=catalog, labels={"node.kubernetes.io/instance-type": spec.instance_type},
    )
