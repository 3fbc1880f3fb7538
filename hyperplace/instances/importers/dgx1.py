"""A GPU-pair NVLink link-count matrix (the DGX-1 V100 hybrid cube mesh) -> a :class:`Node`.

The DGX-1's 8 V100s each have 6 NVLinks spread over 4 neighbours, some pairs bonded twice,
some not linked at all. Which pairs get two links decides whether a 4-GPU tensor-parallel
group runs at 100 or 50 GB/s per pair, so the matrix is imported as it is written rather than
assumed. Format (``dgx1_v100_nvlink_links.csv``, from microsoft/msccl-tools): a header
``gpu,gpu0,...,gpuN-1`` and one row per GPU with the link count to every other GPU; the
matrix must be square, symmetric, with zeros on the diagonal.

Pair bandwidth = links x the GPU's per-link figure (V100, NVLink 2: 50 GB/s), so 2-link pairs
get twice the 1-link figure; pairs with 0 links are not listed and fall back to PCIe in
:meth:`Node.pair_bandwidths`.
"""

from __future__ import annotations

import csv
import io

from hyperplace.errors import InputError, known_words
from hyperplace.instances.importers._source import Source, read_text
from hyperplace.models.gpu import GPUCatalog, default_catalog
from hyperplace.models.node import GPUPair, Node, NVLinkTopology


def read_link_matrix(source: Source) -> tuple[int, dict[tuple[int, int], int]]:
    """(GPU count, link count per unordered GPU pair ``(i, j)``, ``i < j``, with links)."""
    text, src = read_text(source)
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    header = [c.strip() for c in rows[0]]
    n = len(header) - 1
    if n < 2 or header[1:] != [f"gpu{i}" for i in range(n)]:
        raise InputError(f"line 1: header must be gpu,gpu0,...,gpuN-1, got {','.join(header)}",
                         source=src)
    body = rows[1:]
    if len(body) != n:
        raise InputError(f"matrix has {n} GPU columns but {len(body)} rows", source=src)
    matrix: list[list[int]] = []
    for i, row in enumerate(body):
        line = i + 2
        if len(row) != n + 1:
            raise InputError(f"line {line}: row has {len(row) - 1} link columns, the header "
                             f"has {n}", source=src)
        if row[0].strip() != f"gpu{i}":
            raise InputError(f"line {line}: expected row gpu{i}, got {row[0].strip()!r}",
                             source=src)
        values: list[int] = []
        for j, cell in enumerate(row[1:]):
            try:
                v = int(cell)
            except ValueError:
                raise InputError(f"line {line}: gpu{i}-gpu{j}: link count {cell.strip()!r} "
                                 "is not an integer", source=src) from None
            if v < 0:
                raise InputError(f"line {line}: gpu{i}-gpu{j}: negative link count {v}",
                                 source=src)
            values.append(v)
        if values[i] != 0:
            raise InputError(f"line {line}: gpu{i} to itself must be 0, got {values[i]}",
                             source=src)
        matrix.append(values)
    out: dict[tuple[int, int], int] = {}
    for i in range(n):
        for j in range(i + 1, n):
            if matrix[i][j] != matrix[j][i]:
                raise InputError(f"gpu{i}-gpu{j} has {matrix[i][j]} links but gpu{j}-gpu{i} has "
                                 f"{matrix[j][i]}: the matrix must be symmetric", source=src)
            if matrix[i][j]:
                out[(i, j)] = matrix[i][j]
    return n, out


def import_nvlink_link_matrix(
    source: Source,
    *,
    name: str = "dgx1-v100",
    gpu_type: str = "V100-32",
    catalog: GPUCatalog | None = None,
    labels: dict[str, str] | None = None,
) -> Node:
    """A node whose NVLink pairs are the matrix's, at links x per-link GB/s of ``gpu_type``."""
    gpus, links = read_link_matrix(source)
    cat = catalog or default_catalog()
    gtype = cat.find(gpu_type)
    if gtype is None:
        raise InputError(f"unknown GPU type {gpu_type!r} ({known_words(gpu_type, cat.names())})")
    per_link = gtype.nvlink_per_link_gbps
    return Node(
        name=name,
        gpu_type=gtype.name,
        gpu_count=gpus,
        nvlink=NVLinkTopology.EXPLICIT if links else NVLinkTopology.PCIE,
        nvlink_pairs=[GPUPair(a=i, b=j, gigabytes_per_second=k * per_link) for (i, j), k in sorted(links.items())],
        labels=dict(labels or {}),
    )
