"""Which GPUs of a node a pod gets: NVIDIA's device plugin (Kubernetes) and Slurm's gres.

A scheduler that counts GPUs per node only decides *how many* GPUs of *which node*; the
GPU indices are chosen later, on the node, by the component that owns the devices. The
two peers differ there, and on nodes whose GPUs are not all equally linked (DGX-1 V100
hybrid cube mesh, explicit NVLink pairs) the choice decides whether a 4-GPU pod gets an
NVLink clique. Both choices are re-implemented from their source below; the pair data they
read is the node's NVLink link count per pair (``Node.nvlink`` / ``Node.nvlink_pairs``)
plus the PCIe relation the usual 8-GPU board has.

Device plugin (Volcano and Kueue baselines): NVIDIA/go-gpuallocator
``gpuallocator/besteffort_policy.go`` (commit 876e7b7), ``bestEffortPolicy.Allocate``:

* L53-67: enumerate every partition of the available GPUs into sets of ``size``
  (``iterateGPUPartitions``, L215-296: the list is padded with empty slots to a multiple of
  ``size``; a set holds either all padding or none, L279-282; sets are generated with the
  first remaining device first, so a partition is never visited twice), keep the partition
  with the highest total score, the first one met on ties (``score > bestScore``).
* L82-94: from that partition return its highest-scoring set without padding, the first
  on ties.
* L304-374 ``calculateGPUPairScore``: 100 points per NVLink between the pair; the PCIe
  relation adds 50 for one PCIe switch (``P2PLinkSingleSwitch``), 20 for the same CPU
  (``P2PLinkSameCPU``), 10 across CPUs (``P2PLinkCrossCPU``). The set score sums its
  pairs (L378-386).

PCIe relation assumed (the DGX-1 / HGX board: GPUs ``2i`` and ``2i+1`` share a PCIe
switch, the first half of the GPUs hangs off CPU 0, the second off CPU 1). On NVSwitch
boards NVML reports no GPU-to-GPU NVLink (the links end at the switches), so only the PCIe
part scores there; every subset is NVLink-equivalent on such nodes anyway.

Slurm gres (Slurm baseline): SchedMD/slurm ``src/plugins/select/cons_tres/
gres_select_filter.c`` (commit 284c3b9), ``_set_node_bits`` (L1106-1190, ``--gres=gpu:N``
per node) calls ``_pick_gres_topo`` (L613-657) with the ``Links=`` matrix of gres.conf
(``AutoDetect=nvml`` fills it with NVLink counts; ``src/interfaces/gres.c``
``_links_str2array`` L3807-3840):

* L1131-1138: candidates start in index order, link totals at zero.
* L638-655: walk the candidates in order, skip GPUs already selected or allocated, take
  the first; then add the taken GPU's links to every other free GPU's total
  (``_update_and_sort_by_links`` L595-611), re-sort the candidates by that total and
  restart the walk (``i = 0`` followed by the loop's ``i++``, so the walk resumes at the
  second candidate).
* L590-593 ``_compare_gres_by_links`` returns ``a - b``: ``qsort`` orders the candidates
  by *ascending* link total, although the comment at L607 says "most linked". We follow
  the code, not the comment: after the first GPU, Slurm takes the free GPU with the
  fewest links to those already chosen (ties in index order, as glibc's merge sort keeps
  them for small arrays).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from itertools import combinations

from hyperplace.models import GPUCatalog, Node
from hyperplace.models.node import DGX1_LINKS, NVLinkTopology

# go-gpuallocator besteffort_policy.go L322-335: PCIe relation and NVLink points
NVLINK_POINTS = 100
PCIE_SAME_SWITCH = 50
PCIE_SAME_CPU = 20
PCIE_CROSS_CPU = 10

GpuChooser = Callable[[Node, tuple[int, ...], int], list[int]]


def nvlink_counts(node: Node, catalog: GPUCatalog | None = None) -> dict[tuple[int, int], int]:
    """NVLink links per GPU pair (i < j) as NVML reports them: 0 where there is none.

    NVSwitch and PCIe boards report no GPU-to-GPU links; the DGX-1 hybrid cube mesh has 1
    or 2 bonded links per connected pair; explicit pairs are converted from GB/s with the
    GPU type's per-link figure (one link when that figure is unknown).
    """
    if node.nvlink == NVLinkTopology.HYBRID_CUBE_MESH:
        return dict(DGX1_LINKS)
    if node.nvlink == NVLinkTopology.EXPLICIT:
        per_link = None
        if catalog is not None:
            per_link = catalog.get(node.gpu_type).nvlink_per_link_gbps
        out: dict[tuple[int, int], int] = {}
        for p in node.nvlink_pairs:
            links = max(1, round(p.gigabytes_per_second / per_link)) if per_link else 1
            out[(min(p.a, p.b), max(p.a, p.b))] = links
        return out
    return {}


def pcie_points(a: int, b: int, gpu_count: int) -> int:
    """The PCIe part of go-gpuallocator's pair score on the usual two-socket board."""
    if a // 2 == b // 2:
        return PCIE_SAME_SWITCH
    half = max(1, gpu_count // 2)
    return PCIE_SAME_CPU if a // half == b // half else PCIE_CROSS_CPU


def _pair_table(node: Node, catalog: GPUCatalog | None) -> tuple[tuple[int, ...], ...]:
    links = nvlink_counts(node, catalog)
    n = node.gpu_count
    table = [[0] * n for _ in range(n)]
    for a, b in combinations(range(n), 2):
        score = NVLINK_POINTS * links.get((a, b), 0) + pcie_points(a, b, n)
        table[a][b] = table[b][a] = score
    return tuple(tuple(row) for row in table)


@lru_cache(maxsize=65536)
def _best_effort(pairs: tuple[tuple[int, ...], ...], available: tuple[int, ...], size: int
                 ) -> tuple[int, ...]:
    """go-gpuallocator ``bestEffortPolicy.Allocate`` with no required devices.

    Padding slots are negative numbers here (``nil`` in Go); a set holds all of them or
    none, so removing a set from the list removes every padding slot or none, as Go's
    pointer comparison does.
    """
    if size <= 0 or len(available) < size:
        return ()
    if size == 1:  # L224-230: each device alone; all score 0, the first wins
        return (available[0],)

    def set_score(gpus: tuple[int, ...]) -> int:
        real = [g for g in gpus if g >= 0]
        return sum(pairs[a][b] for a, b in combinations(real, 2))

    padding = (-len(available)) % size
    padded = tuple(available) + tuple(-1 - k for k in range(padding))
    best: list[tuple[int, ...]] | None = None
    best_score = 0

    def iterate(devices: tuple[int, ...], accum: list[tuple[int, ...]]) -> None:
        nonlocal best, best_score
        if size == len(devices):
            partition = accum + [devices]
            score = sum(set_score(s) for s in partition)
            if best is None or score > best_score:  # L63: the first of equal scores stays
                best, best_score = partition, score
            return
        first = devices[0]
        for tail in combinations(devices[1:], size - 1):  # iterateGPUSets, index order
            chosen = (first, *tail)
            pads = sum(1 for g in chosen if g < 0)
            if pads not in (0, padding):  # L279-282
                continue
            remaining = tuple(d for d in devices if d not in chosen)
            iterate(remaining, accum + [chosen])

    iterate(padded, [])
    assert best is not None
    full = [s for s in best if all(g >= 0 for g in s)]
    top = max(full, key=set_score)  # max keeps the first of equal scores (L85-91)
    return tuple(top)


def device_plugin_choice(node: Node, free: tuple[int, ...], size: int,
                         catalog: GPUCatalog | None = None) -> list[int]:
    """The ``size`` GPUs NVIDIA's device plugin hands a pod (BestEffortPolicy).

    Parameters
    ----------
    node
        The node (its NVLink layout decides the pair scores).
    free
        Free GPU indices, ascending (the order the plugin lists available devices).
    size
        GPUs the pod asks for; ``size <= len(free)``.
    catalog
        GPU catalog, needed only for ``explicit`` NVLink pairs.
    """
    if node.is_uniform and node.gpu_count > 8:
        return list(free[:size])  # no NVLink differences; keep large boards cheap
    return list(_best_effort(_pair_table(node, catalog), tuple(free), size))


def slurm_gres_choice(node: Node, free: tuple[int, ...], size: int,
                      catalog: GPUCatalog | None = None) -> list[int]:
    """The ``size`` GPUs Slurm's cons_tres gres selection takes (``_pick_gres_topo``)."""
    links = nvlink_counts(node, catalog)
    if not links:
        return list(free[:size])  # no Links= data: index order (L639 with sorted_gres NULL)
    n = node.gpu_count
    free_set = set(free)
    totals = [0] * n
    order = list(range(n))
    chosen: list[int] = []
    i = 0
    while i < n and len(chosen) < size:
        g = order[i]
        if g in chosen or g not in free_set:
            i += 1
            continue
        chosen.append(g)
        for other in range(n):
            if other == g or other not in free_set:
                continue
            totals[other] += links.get((min(g, other), max(g, other)), 0)
        order.sort(key=lambda x: totals[x])  # ascending, as the comparator at L590-593
        i = 1  # ``i = 0`` then the for-loop's ``i++``
    return sorted(chosen)


def lowest_index_choice(node: Node, free: tuple[int, ...], size: int,
                        catalog: GPUCatalog | None = None) -> list[int]:
    """The first ``size`` free GPUs: a device manager with no topology at all."""
    return list(free[:size])


CHOOSERS: dict[str, Callable[..., list[int]]] = {
    "device-plugin": device_plugin_choice,
    "slurm-gres": slurm_gres_choice,
    "lowest-index": lowest_index_choice,
}
