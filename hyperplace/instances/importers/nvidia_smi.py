"""``nvidia-smi topo -m`` output -> a :class:`Node` with its NVLink pairs and NICs.

The matrix is what an operator can paste from any GPU server, so it is the cheapest way to
describe a real node exactly. What each cell means (nvidia-smi's own legend):

* ``NV#``: the pair is joined by # bonded NVLinks. The pair's bandwidth is
  ``# x per-link GB/s`` of the GPU's NVLink generation (``GPUType.nvlink_per_link_gbps``):
  A100 ``NV12`` -> 12 x 50 = 600 GB/s, H100 ``NV18`` -> 18 x 50 = 900 GB/s, DGX-1 V100
  ``NV1``/``NV2`` -> 50/100 GB/s. On NVSwitch systems every pair shows the GPU's full link
  count, which is why the same rule gives the vendor's full per-GPU figure there.
* ``PIX`` (one PCIe switch), ``PXB`` (several PCIe switches), ``PHB`` (through the host
  bridge), ``NODE`` (across host bridges in one NUMA node), ``SYS``/``SOC`` (across the
  inter-socket link): PCIe paths. GPU pairs without NVLink are left out of ``nvlink_pairs``,
  so :meth:`Node.pair_bandwidths` gives them the GPU type's PCIe figure.

NIC columns (``mlx5_*``, or ``NIC#`` with a ``NIC Legend`` in newer drivers) become
:class:`NIC`s. A NIC's closest GPUs are those at its shortest PCIe distance (PIX before PXB
before PHB before NODE); a NIC that reaches every GPU only through ``SYS`` (storage or
management ports) gets no closest GPU. The matrix carries no line rate, so NICs get
``nic_gbps`` if given, else the GPU type's typical per-GPU NIC speed from the catalog.

GPU type: pass ``gpu_type``. Without it the type is guessed from the NVLink count per GPU
(the common pair count on NVSwitch nodes, the row sum on meshes) as the catalog type whose
full NVLink figure equals that many links of its generation. Several types can match (NV18
fits H100, H200 and B200); the guess then takes the oldest, smallest one, so a guessed node
never promises memory or bandwidth it may lack. What was not in the matrix is listed in the
node label ``hyperplace.io/assumed`` (``gpu-type``, ``nic-speed``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import Literal

from hyperplace.errors import InputError, known_words
from hyperplace.instances.importers._source import Source, read_text
from hyperplace.models.gpu import GPUCatalog, GPUType, default_catalog
from hyperplace.models.node import NIC, GPUPair, Node, NVLinkTopology

# PCIe path kinds, closest first. SOC is the pre-2018 spelling of SYS.
PCIE_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}
# A NIC sharing a PCIe switch tree with a GPU is the one GPUDirect RDMA uses for it.
GPU_ATTACHED_RANKS = (PCIE_RANK["PIX"], PCIE_RANK["PXB"])
_NV = re.compile(r"^NV(\d+)$")
_GPU = re.compile(r"^GPU(\d+)$")
_NIC = re.compile(r"^(mlx\d+_\d+|NIC\d+|ib\w*|hfi\w*|bnxt\w*)$")
_LEGEND_NIC = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
# Terminal styling nvidia-smi prints around the header (ESC[4m ... ESC[0m), also as the
# residue left when the ESC byte is lost in a paste ("[4mGPU0").
_ANSI = re.compile(r"\x1b?\[[0-9;]*m")
# Bonded interfaces (mlx5_bond_0: the host's storage/management bond) never carry GPU traffic.
_BOND_NIC = re.compile(r"bond", re.I)
# Product names printed beside the matrix: nvidia-smi's table ("|   0  NVIDIA H100 80GB HBM3
# On  |") and the "GPU 0,1,...: NVIDIA H200" lines of environment dumps (sglang, vLLM).
_SMI_ROW = re.compile(r"^\|\s+\d+\s+((?:NVIDIA|Tesla|Quadro)\b.*?)\s+(?:On|Off)\s+\|")
_ENV_ROW = re.compile(r"^GPU\s+[\d,\s]+:\s+((?:NVIDIA|Tesla)\b.*?)\s*$")
ASSUMED_LABEL = "hyperplace.io/assumed"


@dataclass(frozen=True)
class TopoMatrix:
    """The parsed matrix before it becomes a node: cells by (GPU row, column name)."""

    gpus: int
    nic_columns: list[str]
    nic_names: dict[str, str]
    nv_links: dict[tuple[int, int], int]
    nic_rank: dict[str, list[int]]  # NIC column -> PCIe rank from each GPU
    products: tuple[str, ...] = ()  # GPU product names printed beside the matrix


def _split(line: str) -> list[str]:
    if "\t" in line:
        return [c.strip() for c in line.split("\t")]
    # Space-aligned copies (pasted from a terminal): the affinity headers contain spaces.
    for phrase in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID"):
        line = line.replace(phrase, phrase.replace(" ", "_"))
    return [""] + line.split() if line[:1].isspace() else line.split()


def parse_matrix(text: str, name: str) -> TopoMatrix:
    """Read the matrix; every structural problem is an InputError naming file, line and cell."""
    lines = [_ANSI.sub("", raw) for raw in text.splitlines()]
    products: list[str] = []
    for raw in lines:
        m = _SMI_ROW.match(raw.strip()) or _ENV_ROW.match(raw.strip())
        if m and m.group(1).strip() not in products:
            products.append(m.group(1).strip())
    header: list[str] | None = None
    header_line = 0
    rows: dict[int, tuple[int, list[str]]] = {}
    nic_names: dict[str, str] = {}
    in_legend = False
    for lineno, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("Legend") or stripped.startswith("NIC Legend"):
            in_legend = True
            continue
        if in_legend:
            m = _LEGEND_NIC.match(line)
            if m:
                nic_names[m.group(1)] = m.group(2)
            continue
        cells = _split(line)
        if header is None:
            # the header is the first line that starts with GPU0; what comes before it (a
            # "$ nvidia-smi topo -m" prompt, the nvidia-smi table, an environment dump) is
            # not the matrix
            body = cells[1:] if cells and cells[0] == "" else cells
            if body[:1] != ["GPU0"]:
                continue
            header = body
            header_line = lineno
            continue
        label = cells[0]
        m = _GPU.match(label)
        if not m:
            continue  # NIC-to-NIC rows of newer drivers: not needed for placement
        values = cells[1:]
        topo_cols = sum(1 for c in header if _GPU.match(c) or _NIC.match(c))
        if len(values) < topo_cols:
            raise InputError(f"line {lineno}: row {label} has {len(values)} columns, the header "
                             f"(line {header_line}) has {topo_cols} GPU and NIC columns",
                             source=name)
        # the affinity columns after them vary: current drivers leave the "GPU NUMA ID"
        # cell's tab pair empty (18 cells under 17 headers on an 8-GPU, 6-NIC node)
        idx = int(m.group(1))
        if idx in rows:
            raise InputError(f"line {lineno}: row {label} appears twice", source=name)
        rows[idx] = (lineno, values)
    if header is None:
        raise InputError("no nvidia-smi topology matrix found (a header row starting GPU0 "
                         "GPU1 ...)", source=name)
    gpu_cols = [c for c in header if _GPU.match(c)]
    nic_cols = [c for c in header if _NIC.match(c)]
    n = len(gpu_cols)
    if gpu_cols != [f"GPU{i}" for i in range(n)]:
        raise InputError(f"line {header_line}: GPU columns must be GPU0..GPU{n - 1} in order, "
                         f"got {' '.join(gpu_cols)}", source=name)
    if sorted(rows) != list(range(n)):
        missing = sorted(set(range(n)) - set(rows))
        raise InputError(f"matrix has {n} GPU columns but rows for GPUs {sorted(rows)}"
                         + (f" (missing GPU{missing[0]})" if missing else ""), source=name)
    col = {c: i for i, c in enumerate(header)}
    nv: dict[tuple[int, int], int] = {}
    nic_rank: dict[str, list[int]] = {c: [] for c in nic_cols}
    for i in range(n):
        lineno, values = rows[i]
        for j in range(n):
            cell = values[col[f"GPU{j}"]]
            if i == j:
                if cell != "X":
                    raise InputError(f"line {lineno}: GPU{i} to itself must be X, got {cell!r}",
                                     source=name)
                continue
            m = _NV.match(cell)
            if m:
                links = int(m.group(1))
                if links <= 0:
                    raise InputError(f"line {lineno}: GPU{i}-GPU{j}: {cell} has no links",
                                     source=name)
                nv[(i, j)] = links
            elif cell not in PCIE_RANK:
                raise InputError(f"line {lineno}: GPU{i}-GPU{j}: unknown path {cell!r} "
                                 f"(expected X, NV#, {', '.join(PCIE_RANK)})", source=name)
        for c in nic_cols:
            cell = values[col[c]]
            if cell not in PCIE_RANK:
                raise InputError(f"line {lineno}: GPU{i}-{c}: unknown path {cell!r} "
                                 f"(expected {', '.join(PCIE_RANK)})", source=name)
            nic_rank[c].append(PCIE_RANK[cell])
    pairs: dict[tuple[int, int], int] = {}
    for (i, j), links in nv.items():
        if nv.get((j, i)) != links:
            raise InputError(f"GPU{i}-GPU{j} is NV{links} but GPU{j}-GPU{i} is "
                             f"{'NV' + str(nv[(j, i)]) if (j, i) in nv else 'not NVLink'}",
                             source=name)
        if i < j:
            pairs[(i, j)] = links
    return TopoMatrix(gpus=n, nic_columns=nic_cols, nic_names=nic_names, nv_links=pairs,
                      nic_rank=nic_rank, products=tuple(products))


def links_per_gpu(nv_links: dict[tuple[int, int], int], gpus: int) -> int:
    """NVLinks of one GPU: the pair count if every pair shows the same (NVSwitch), else the
    largest row sum (a mesh such as the DGX-1's, where links are split across neighbours)."""
    if not nv_links:
        return 0
    counts = set(nv_links.values())
    if len(nv_links) == gpus * (gpus - 1) // 2 and len(counts) == 1:
        return counts.pop()
    row = [0] * gpus
    for (i, j), links in nv_links.items():
        row[i] += links
        row[j] += links
    return max(row)


def guess_gpu_type(links: int, catalog: GPUCatalog) -> list[GPUType]:
    """Catalog types whose full NVLink figure is ``links`` links of their generation, the most
    conservative (oldest generation, least memory, least compute) first."""
    fits = [t for t in catalog
            if t.nvlink_gbps > 0 and t.nvlink_generation
            and round(t.nvlink_gbps / t.nvlink_per_link_gbps) == links]
    return sorted(fits, key=lambda t: (t.nvlink_generation or 0, t.hbm_gb, t.bf16_tflops))


def _default_name(name: str) -> str:
    stem = PurePath(name).stem.lower()
    return re.sub(r"[^a-z0-9-]+", "-", stem).strip("-") or "node"


def import_nvidia_smi_topo(
    source: Source,
    *,
    gpu_type: str | None = None,
    name: str | None = None,
    nic_gbps: float | None = None,
    nics: Literal["all", "gpu-attached", "compute"] = "compute",
    catalog: GPUCatalog | None = None,
    labels: dict[str, str] | None = None,
) -> Node:
    """A node from ``nvidia-smi topo -m`` text (see the module docstring for the rules).

    ``nics="compute"`` (the default) keeps the compute rails: NICs at PIX/PXB of some GPU
    (the ones GPUDirect RDMA uses), never a bond (``mlx5_bond_0``); when no NIC is
    GPU-attached, every NIC that is not a bond. Storage and management ports left out would
    otherwise inflate the per-GPU NIC figure; they are listed in the node label
    ``hyperplace.io/other-nics``. ``"gpu-attached"`` is the first rule without the fallback,
    ``"all"`` keeps every NIC.
    """
    text, src = read_text(source)
    matrix = parse_matrix(text, src)
    cat = catalog or default_catalog()
    node_labels = dict(labels or {})
    assumed: list[str] = []
    printed = [t for t in (cat.find(p) for p in matrix.products) if t is not None]
    if gpu_type is not None:
        gtype = cat.find(gpu_type)
        if gtype is None:
            raise InputError(f"unknown GPU type {gpu_type!r} ({known_words(gpu_type, cat.names())})",
                             source=src)
    elif len({t.name for t in printed}) == 1:
        gtype = printed[0]  # the product name printed with the matrix (nvidia-smi, env dump)
    elif matrix.products and not printed:
        raise InputError(f"GPU product {matrix.products[0]!r} printed with the matrix is not a "
                         f"known GPU type (known: {', '.join(cat.names())}); pass gpu_type",
                         source=src)
    else:
        links = links_per_gpu(matrix.nv_links, matrix.gpus)
        if links == 0:
            raise InputError("no NVLink in the matrix, so the GPU type cannot be guessed; "
                             "pass gpu_type", source=src)
        fits = guess_gpu_type(links, cat)
        if not fits:
            raise InputError(f"no catalog GPU type has {links} NVLinks per GPU; pass gpu_type",
                             source=src)
        gtype = fits[0]
        assumed.append("gpu-type")
    per_link = gtype.nvlink_per_link_gbps
    pairs = [GPUPair(a=i, b=j, gigabytes_per_second=links * per_link)
             for (i, j), links in sorted(matrix.nv_links.items())]
    node_nics: list[NIC] = []
    others: list[str] = []
    attached = [c for c in matrix.nic_columns if min(matrix.nic_rank[c]) in GPU_ATTACHED_RANKS
                and not _BOND_NIC.search(matrix.nic_names.get(c, c))]
    for col in matrix.nic_columns:
        ranks = matrix.nic_rank[col]
        best = min(ranks)
        nic_name = matrix.nic_names.get(col, col)
        keep = (nics == "all" or col in attached
                or (nics == "compute" and not attached and not _BOND_NIC.search(nic_name)))
        if not keep:
            others.append(nic_name)
            continue
        closest = [g for g, r in enumerate(ranks) if r == best] if best < PCIE_RANK["SYS"] else []
        node_nics.append(NIC(name=nic_name,
                             gbps=nic_gbps if nic_gbps is not None else gtype.nic_gbps,
                             gpus=closest))
    if others:
        node_labels["hyperplace.io/other-nics"] = ",".join(others)
    if node_nics and nic_gbps is None:
        assumed.append("nic-speed")
    if assumed:
        node_labels[ASSUMED_LABEL] = ",".join(assumed)
    return Node(
        name=name or _default_name(src),
        gpu_type=gtype.name,
        gpu_count=matrix.gpus,
        nvlink=NVLinkTopology.EXPLICIT if pairs else NVLinkTopology.PCIE,
        nvlink_pairs=pairs,
        nics=node_nics,
        labels=node_labels,
    )

