"""Views of nodes, jobs and units that the model, greedy and the explanations share.

A view holds what the formulation derives from a domain object once (free GPUs, pair
bandwidths, the node's domain keys; a job's unit classes and piece sizes) so that no
backend recomputes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import combinations, islice

from hyperplace.formulations.placement.domains import DomainKey
from hyperplace.formulations.placement.reasons import PendingReason
from hyperplace.models.cliques import largest_clique
from hyperplace.models.cluster import Cluster
from hyperplace.models.gpu import GPUType
from hyperplace.models.job import GangUnit, GroupType, TrainingJob
from hyperplace.models.node import Node

#: Display name of the unit class that holds a whole job on one node (used in model
#: variable names only; code asks :attr:`UnitClass.whole_job`).
WHOLE_JOB_GROUP = "(whole job)"


@dataclass
class NodeView:
    """A node as the formulation sees it: free GPUs, pair bandwidths, its leaf.

    ``uniform_gbps`` is the pair bandwidth when every pair has the same one (NVSwitch,
    PCIe), None otherwise (DGX-1 hybrid cube mesh, explicit pairs); ``attach_gbps`` the
    slowest link from the node into the fabric (None off the fabric); ``leaf`` its radius-1
    domain (the node itself when it is not on a fabric).
    """

    index: int
    node: Node
    cluster: Cluster
    gpu_type: GPUType
    free: tuple[int, ...]
    pair_gbps: dict[tuple[int, int], float]
    uniform_gbps: float | None
    attach_gbps: float | None
    leaf: DomainKey
    max_cliques: int = 5000
    #: GPUs held by running jobs the round may stop (preemption candidates, movers, broken
    #: jobs): GPU -> stoppable job index (:attr:`PlacementProblem.stoppable
    #: <hyperplace.formulations.placement.problem.PlacementProblem.stoppable>`); empty when
    #: the round stops none
    stoppable: dict[int, int] = field(default_factory=dict)
    #: some enumeration of GPU sets on this node stopped at ``max_cliques`` (the model and
    #: greedy then see only those sets: a restriction the plan's status must admit)
    cliques_capped: bool = False
    clique_cache: dict[tuple[object, ...], list[tuple[int, ...]]] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        """The node's name."""
        return self.node.name

    @property
    def fully_free(self) -> bool:
        """Every GPU of the node is free."""
        return len(self.free) == self.node.gpu_count

    @property
    def reachable(self) -> tuple[int, ...]:
        """Free GPUs and GPUs of running jobs the round may stop, in order."""
        if not self.stoppable:
            return self.free
        return tuple(sorted((*self.free, *self.stoppable)))

    def bw(self, a: int, b: int) -> float:
        """GB/s between GPUs ``a`` and ``b``."""
        return self.pair_gbps[(a, b) if a < b else (b, a)]

    def partition(self, combo: tuple[int, ...], parts: tuple[int, ...], min_gbps: float
                  ) -> list[tuple[int, ...]] | None:
        """Split ``combo`` into cliques of the sizes in ``parts`` (every pair >= ``min_gbps``).

        Returns
        -------
        list of tuple or None
            One clique per part, or None when no such split exists.
        """
        if not combo:
            return [] if not parts else None
        g, rest = combo[0], combo[1:]
        for p in sorted(set(parts)):
            left = list(parts)
            left.remove(p)
            for mates in combinations(rest, p - 1):
                group = (g, *mates)
                if all(self.bw(a, b) >= min_gbps for a, b in combinations(group, 2)):
                    remaining = tuple(x for x in rest if x not in mates)
                    tail = self.partition(remaining, tuple(left), min_gbps)
                    if tail is not None:
                        return [group, *tail]
        return None

    def cliques(self, size: int, min_gbps: float, gpus: tuple[int, ...] | None = None,
                parts: tuple[int, ...] | None = None) -> list[tuple[int, ...]]:
        """Sets of ``size`` GPUs of ``gpus`` (default: the free ones) whose every pair has at
        least ``min_gbps``; with ``parts``, sets that split into cliques of those sizes
        (units sharing one node). At most ``max_cliques`` of them.

        Cached per (size, floor, parts, pool): the model, greedy and the explanations ask
        the same questions many times.
        """
        pool = self.free if gpus is None else gpus
        key = (size, min_gbps, parts, pool)
        cached = self.clique_cache.get(key)
        if cached is not None:
            return cached
        if size == 1 or (min_gbps <= 0 and not parts):
            out = list(islice(combinations(pool, size), self.max_cliques))
        else:
            def qualifies(combo: tuple[int, ...]) -> bool:
                if parts and len(parts) > 1:
                    return self.partition(combo, parts, min_gbps) is not None
                return all(self.bw(a, b) >= min_gbps for a, b in combinations(combo, 2))

            out = list(islice(filter(qualifies, combinations(pool, size)), self.max_cliques))
        if len(out) >= self.max_cliques:
            self.cliques_capped = True
        self.clique_cache[key] = out
        return out

    def max_disjoint(self, size: int, min_gbps: float, gpus: tuple[int, ...] | None = None,
                     parts: tuple[int, ...] | None = None) -> int:
        """Most disjoint pieces of ``size`` GPUs (each a clique at ``min_gbps``) in ``gpus``."""
        pool = self.free if gpus is None else gpus
        if self.uniform_gbps is not None:
            needs_links = size > 1 and (not parts or max(parts) > 1)
            return len(pool) // size if (not needs_links or self.uniform_gbps >= min_gbps) else 0
        best = 0

        def grow(avail: tuple[int, ...], count: int) -> None:
            nonlocal best
            best = max(best, count)
            if count + len(avail) // size <= best:
                return
            found = self.cliques(size, min_gbps, avail, parts)
            if not found:
                return
            first = found[0][0]
            for c in found:
                if c[0] != first:
                    break
                grow(tuple(g for g in avail if g not in c), count + 1)
            grow(tuple(g for g in avail if g != first), count)

        grow(pool, 0)
        return best

    def largest_clique(self, min_gbps: float) -> int:
        """Most free GPUs whose every pair has at least ``min_gbps`` (see :func:`largest_clique`)."""
        if self.uniform_gbps is not None:
            return len(self.free) if (self.uniform_gbps >= min_gbps or len(self.free) <= 1) \
                else min(1, len(self.free))
        return largest_clique(self.free, lambda a, b: self.bw(a, b) >= min_gbps)


def cut_patterns(size: int, node_gpus: int) -> tuple[tuple[int, ...], ...]:
    """Ways a pooled unit of ``size`` GPUs may be cut, fewest pieces first: pieces of a
    node (``node_gpus``), then of half, a quarter... of it (powers of two), each time
    ``size // t`` pieces of ``t`` and the remainder, down to pieces of one GPU
    (16 on 8-GPU nodes: 8+8, 4x4, 2x8, 1x16; 12: 8+4, 4x3, 2x6, 1x12)."""
    steps = [node_gpus] + [1 << i for i in range(node_gpus.bit_length() - 1, -1, -1)
                           if (1 << i) < node_gpus]
    out: list[tuple[int, ...]] = []
    for t in steps:
        t = min(t, size)
        full, rest = divmod(size, t)
        pat = (t,) * full + ((rest,) if rest else ())
        if pat not in out:
            out.append(pat)
    return tuple(out)


@dataclass
class UnitClass:
    """Identical units of one job (one resource group over its replicas), or, with
    ``parts``, every unit of a job that must share one node (a whole-job piece)."""

    index: int
    job: int
    group: str
    group_type: GroupType
    units: list[GangUnit]
    size: int
    pieces: list[int]  # piece sizes of one unit, largest first
    hop_limit: int | None  # for multi-piece units; None = the job's domain
    gpu_types: str | None
    min_memory_gb: float
    min_nvlink_gbps: float
    min_ib_gbps: float
    parts: tuple[int, ...] | None = None  # whole-job piece: the unit sizes sharing the node
    # flexible pieces: each unit is cut into pieces of any of these sizes (see below)
    piece_sizes: tuple[int, ...] = ()
    # pooled classes: the cut patterns a unit may take (``pieces`` is the first), see below
    patterns: tuple[tuple[int, ...], ...] = ()
    #: every unit lies in one multi-node NVLink domain (``hop_limit`` 0 on trays), see
    #: :mod:`~hyperplace.formulations.placement.nvlink`
    nvlink_bound: bool = False

    @property
    def whole_job(self) -> bool:
        """This class is one piece holding every unit of the job on one node."""
        return self.parts is not None

    @property
    def count(self) -> int:
        """How many times the piece pattern is placed (a whole-job piece: once)."""
        return 1 if self.parts else len(self.units)

    @property
    def flexible(self) -> bool:
        """Each unit is cut into pieces of sizes chosen by the solver (``piece_sizes``),
        one set of piece variables per unit, instead of the fixed pattern ``pieces``.

        Why per unit: a class of several units placed as pooled counts of pieces of
        several sizes is only separable into units under extra conditions (a multiset of
        8s and 4s summing to 2 x 12 may be 8 + 8 + 8); with each unit's own pieces summing
        to its size, every solution is a set of units by construction, and a unit with
        its own tighter hop limit picks its own domain. The price is variables per unit,
        so classes of more than ``ModelParams.flexible_max_units`` units keep the fixed
        node-sized pattern (see ``PlacementProblem._add_group_classes``).
        """
        return bool(self.piece_sizes)

    @property
    def multi_node(self) -> bool:
        """A unit of this class may be cut into several pieces on several nodes."""
        return len(self.pieces) > 1 or self.flexible or len(self.patterns) > 1

    @property
    def pooled(self) -> bool:
        """A class of many units that may span nodes, whose pieces the model counts per
        size for all units together: each unit takes one of a few cut ``patterns``.

        Why patterns: pooled counts of pieces of several sizes are separable into units
        only if the model says how many units take which multiset (8 + 8 + 8 is 24 GPUs
        but not two units of 12); a variable per pattern (and per pattern and domain of the
        unit's own hop limit) says exactly that, so every solution is a set of units. The
        patterns (:func:`cut_patterns`) are the node-sized one and the same with pieces of
        half, a quarter... of a node, so a unit can still be cut on partly used nodes; a
        unit may hold several pieces of one node, so only nodes where their union is a
        clique at the floor are eligible (:meth:`stacks_on`).
        """
        return len(self.patterns) > 1

    @property
    def cut(self) -> bool:
        """The solver chooses how a unit is cut (flexible or pooled)."""
        return self.flexible or self.pooled

    @property
    def max_pieces(self) -> int:
        """Most pieces one unit can be cut into."""
        if self.flexible:
            return self.size
        return max((len(pat) for pat in self.patterns), default=len(self.pieces)) or 1

    @property
    def size_options(self) -> tuple[int, ...]:
        """Every piece size the model may use for this class, ascending."""
        if self.piece_sizes:
            return self.piece_sizes
        return tuple(sorted({s for pat in (self.patterns or (tuple(self.pieces),)) for s in pat}))

    def stacks_on(self, node: NodeView) -> bool:
        """Several pieces of one unit may share ``node``: no NVLink floor, or a uniform node
        meeting it."""
        return self.min_nvlink_gbps <= 0 or self.merges_on(node)

    def merges_on(self, node: NodeView) -> bool:
        """Several pieces of one unit may share ``node`` (a uniform node whose pairs meet the
        unit's NVLink floor: their union is still a clique). Otherwise a unit holds at most
        one piece there: an exact GPU set, or one GPU on a uniform node below the floor."""
        return node.uniform_gbps is not None and (
            self.min_nvlink_gbps <= 0 or node.uniform_gbps >= self.min_nvlink_gbps)

    def sizes_on(self, node: NodeView) -> tuple[int, ...]:
        """Piece sizes of a flexible unit on ``node``, ascending.

        On a node whose GPU pairs are all alike (NVSwitch, PCIe) a unit may hold several
        pieces of one node (their union is still a clique), so powers of two (any GPU
        count on the node is a sum of them), the node's whole free count and the fixed
        pattern's sizes suffice, and capacity rows stay exact for the common sizes. On
        other nodes (DGX-1, explicit matrices) a unit holds at most one piece per node, an
        exact GPU set of any size that is a clique at the floor; on a uniform node below
        the floor, one GPU (a piece of one GPU has no pair to check).
        """
        top = min(self.size, len(node.reachable))
        if node.uniform_gbps is None:
            return tuple(s for s in self.piece_sizes if s <= top)
        if not self.merges_on(node):
            return (1,) if top >= 1 else ()
        out = {s for s in self.piece_sizes if s <= top and (s & (s - 1)) == 0}
        out.update(s for s in self.pieces if s <= top)
        if top in self.piece_sizes:
            out.add(top)
        return tuple(sorted(out))

    def split_whole(self, node: NodeView, gpus: tuple[int, ...]
                    ) -> list[tuple[GangUnit, tuple[int, ...]]]:
        """The GPUs of a whole-job piece, handed to its units so each unit is a clique."""
        groups = node.partition(tuple(sorted(gpus)), self.parts or (len(gpus),),
                                self.min_nvlink_gbps) or []
        out = []
        for u in sorted(self.units, key=lambda u: -u.gpus):
            k = next(i for i, grp in enumerate(groups) if len(grp) == u.gpus)
            out.append((u, groups.pop(k)))
        return out


@dataclass
class JobView:
    """A pending job: its unit classes, hop limit between replicas, and, when it cannot run
    at all, why (``impossible``, reason codes found before solving)."""

    index: int
    job: TrainingJob
    priority: int
    gpus: int
    hop_limit: int | None  # between replicas; None = anywhere in one cluster
    min_ib_gbps: float
    classes: list[UnitClass] = field(default_factory=list)
    impossible: list[PendingReason] = field(default_factory=list)
    queue: str = "default"  # the queue whose quotas its GPUs count against
    #: a running job's manifest (its copy, placed when it migrates): the mover's stoppable
    #: job index (:mod:`~hyperplace.formulations.placement.migration`); None for a pending job
    migrant: int | None = None
    #: a repair in part: the only nodes it may use (None: any)
    allowed_nodes: frozenset[str] | None = None

    @property
    def name(self) -> str:
        """The job's name."""
        return self.job.name

    @property
    def num_pieces(self) -> int:
        """Pieces (node-level parts) the job is placed as; for flexible units the most
        there can be (one GPU each)."""
        return sum(c.max_pieces * c.count for c in self.classes)

    @property
    def traffic_class(self) -> str:
        """``"tp"`` with a multi-node TP unit, ``"ep"`` with a multi-node EP unit, ``"pp"``
        with a PP group, else ``"dp"``."""
        if any(c.multi_node and c.group_type == GroupType.TENSOR_PARALLEL for c in self.classes):
            return "tp"
        if any(c.multi_node and c.group_type == GroupType.EXPERT_PARALLEL for c in self.classes):
            return "ep"  # MoE all-to-all (#24): kept in few NVLink domains, as TP
        if any(c.group_type == GroupType.PIPELINE_PARALLEL for c in self.classes):
            return "pp"
        return "dp"


@dataclass
class NodeClass:
    """Interchangeable nodes (or one node, when its GPU graph is not uniform)."""

    index: int
    nodes: list[NodeView]
    leaf: DomainKey

    @property
    def rep(self) -> NodeView:
        """The first node, representative of the class."""
        return self.nodes[0]

    @property
    def multiplicity(self) -> int:
        """How many nodes the class holds."""
        return len(self.nodes)

    @property
    def free_per_node(self) -> int:
        """Free GPUs on each node of the class."""
        return len(self.rep.free)

    @property
    def uniform(self) -> bool:
        """Every GPU pair of the class's nodes has the same bandwidth."""
        return self.rep.uniform_gbps is not None
