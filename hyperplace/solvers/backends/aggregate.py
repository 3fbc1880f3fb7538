"""A valid bound on objective 1 from a small aggregated model: the round's LP relaxation
with its leaves folded and its jobs grouped by shape (HiGHS, a few thousand columns).

Why: the model's own LP relaxation (:mod:`.relax`) is a good bound, but at 131,072 GPUs
building the model alone takes 4-5 s, so a 10 s round never afforded it and the plan's gap
was the demand bound's (12.6 % at 131,072 GPUs / 16,384 jobs, where greedy's plan was
optimal). This model keeps what makes the demand bound loose, and drops what is costly:

* node classes that differ only by their leaf are one class (capacity rows summed over the
  leaves: the per-node rows of the model, :meth:`PlacementModelBuilder._capacity`, times the
  nodes of the class);
* jobs with the same unit classes, priority and eligibility are one shape whose ``run`` is
  a count (the model's bundles, extended to jobs of several pieces);
* each class of fixed pieces keeps its gang row per piece size (``count x pieces of that
  size per unit x run`` pieces), each cut class (flexible, pooled) only the GPUs it holds, on
  nodes with room for its smallest piece;
* hop limits, domains, a job being in one cluster, quotas and hot spares are left out.

Every constraint kept is implied by every valid plan (a plan's pieces, counted per folded
class and size, satisfy it), so the LP optimum bounds objective 1 from above. HiGHS's
optimum itself is exact only up to its tolerances (objective 1 is ~1e11-3e11 at 131,072
GPUs), so the bound is the dual bound of its row duals (:func:`.safebound.dual_bound`: valid
for any multipliers, its float arithmetic bounded), rounded down (:func:`.safebound.integer_bound`:
objective 1 is an integer).

Not used for rounds that preempt, migrate or repair (their objective 1 counts running
jobs; their node capacities depend on which ones stop).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field

from hyperplace.formulations.placement import PlacementProblem
from hyperplace.formulations.placement.views import JobView, NodeClass, UnitClass

__all__ = ["AggregateBound", "Columns", "SparseLp", "aggregate_bound", "one_cluster"]


@dataclass
class AggregateBound:
    """The bound and what it took: folded node classes, job shapes, LP columns and rows."""

    bound: float | None
    node_classes: int
    shapes: int
    columns: int
    rows: int
    seconds: float
    status: str = ""
    #: pending job index -> the cluster it goes to (``aggregate_bound(assign=True)``)
    assignment: dict[int, str] | None = None


@dataclass
class _Folded:
    """Node classes of the round that differ only by their leaf."""

    rep: NodeClass
    nodes: int = 0
    members: list[NodeClass] = field(default_factory=list)


def _fold_key(p: PlacementProblem, nc: NodeClass, by_leaf: bool) -> tuple[object, ...]:
    n = nc.rep
    if not nc.uniform:
        return ("n", nc.index)  # an exact GPU graph: its own class
    return ("u", n.cluster.name, n.gpu_type.name, n.node.gpu_count, len(n.free), n.fully_free,
            n.uniform_gbps, n.attach_gbps, p.restricted_to(n),
            n.leaf if by_leaf else None)


def _fold(p: PlacementProblem) -> list[_Folded]:
    # a multi-node NVLink domain (NVL72 trays) makes eligibility depend on where the node is
    by_leaf = any(uc.nvlink_bound for uc in p.classes)
    groups: dict[tuple[object, ...], _Folded] = {}
    for nc in p.node_classes:
        if nc.rep.stoppable:
            continue
        key = _fold_key(p, nc, by_leaf)
        g = groups.get(key)
        if g is None:
            g = groups[key] = _Folded(rep=nc)
        g.nodes += nc.multiplicity
        g.members.append(nc)
    return list(groups.values())


def _class_key(uc: UnitClass) -> tuple[object, ...]:
    return (uc.size, len(uc.units), tuple(uc.pieces), uc.piece_sizes, uc.patterns, uc.parts,
            uc.gpu_types, uc.min_memory_gb, uc.min_nvlink_gbps, uc.min_ib_gbps, uc.hop_limit,
            uc.nvlink_bound, uc.group_type)


def _shape_key(p: PlacementProblem, jv: JobView) -> tuple[object, ...]:
    """What the aggregated model reads of a job (its name, group names and hop limit
    between replicas aside: the model drops domains)."""
    return (jv.priority, jv.gpus, jv.queue, jv.min_ib_gbps, p.needs_fabric(jv),
            jv.allowed_nodes, tuple(_class_key(uc) for uc in jv.classes))


class SparseLp:
    """Columns with bounds and costs, rows as coordinate lists."""

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.cost: list[float] = []
        self.rows_lo: list[float] = []
        self.rows_hi: list[float] = []
        self.r: list[int] = []
        self.c: list[int] = []
        self.v: list[float] = []

    def col(self, lo: float, hi: float, cost: float = 0.0) -> int:
        self.lb.append(lo)
        self.ub.append(hi)
        self.cost.append(cost)
        return len(self.lb) - 1

    def row(self, terms: list[tuple[int, float]], lo: float, hi: float) -> None:
        if not terms:
            return
        i = len(self.rows_lo)
        self.rows_lo.append(lo)
        self.rows_hi.append(hi)
        for col, a in terms:
            self.r.append(i)
            self.c.append(col)
            self.v.append(a)

    def maximise(self, time_limit_s: float) -> tuple[float | None, str, list[float] | None]:
        """``max cost'x`` over the rows and bounds: (a proven upper bound on its optimum,
        HiGHS's status, its solution), by :func:`.safebound.highs_max` (its one rule for
        what is a bound)."""
        import numpy as np

        from hyperplace.solvers.backends.safebound import highs_max

        m = len(self.rows_lo)
        starts = np.zeros(0, dtype=np.int32)
        index, value = np.zeros(0, dtype=np.int32), np.zeros(0)
        if m:
            order = np.lexsort((np.asarray(self.c), np.asarray(self.r)))
            rows = np.asarray(self.r, dtype=np.int64)[order]
            starts = np.searchsorted(rows, np.arange(m)).astype(np.int32)
            index = np.asarray(self.c, dtype=np.int32)[order]
            value = np.asarray(self.v, dtype=np.float64)[order]
        return highs_max(self.cost, self.lb, self.ub, self.rows_lo, self.rows_hi, starts,
                         index, value, time_limit_s)


class Columns:
    """The aggregated model's columns over the node classes of one problem (one cluster's or
    several): :meth:`add` gives a job shape its ``run`` columns (one per cluster with room)
    with their piece columns and gang rows, :meth:`close` writes the capacity rows.

    ``weights``: objective 1's weight per priority (default the problem's own; a decomposed
    round passes the whole round's, whose parts each have their own)."""

    def __init__(self, lp: SparseLp, p: PlacementProblem,
                 weights: Mapping[float, int] | None = None) -> None:
        self.lp, self.p = lp, p
        self.weights = p.weights if weights is None else weights
        self.folded = _fold(p)
        self.cap: dict[int, list[tuple[int, int]]] = defaultdict(list)  # class -> (col, size)
        self.by_cluster: dict[str, list[int]] = defaultdict(list)
        for fi, g in enumerate(self.folded):
            self.by_cluster[g.rep.rep.cluster.name].append(fi)

    def add(self, jv: JobView, count: int) -> dict[str, tuple[int, float]]:
        """Columns of ``count`` jobs like ``jv`` (cluster -> its run column and room)."""
        p, lp, folded = self.p, self.lp, self.folded
        cols: dict[str, tuple[int, float]] = {}
        for cluster, indices in self.by_cluster.items():
            room = _room(p, jv, folded, indices)
            if room <= 0:
                continue
            run = lp.col(0, count, float(self.weights[jv.priority]) * jv.gpus)
            cols[cluster] = (run, room)
            for uc in jv.classes:
                _class_columns(p, lp, jv, uc, run, folded, indices, self.cap)
        return cols

    def close(self) -> None:
        _capacity_rows(self.lp, self.folded, self.cap)


def aggregate_bound(p: PlacementProblem, deadline: float | None = None, *,
                    assign: bool = False) -> AggregateBound:
    """An upper bound on objective 1 (priority-weighted admitted GPUs) of every valid plan of
    ``p``, from the aggregated model's LP relaxation (see the module docstring); ``bound`` is
    None when the round preempts, migrates or repairs, or HiGHS did not finish by
    ``deadline`` (a ``time.perf_counter()`` value).

    A job runs in one cluster: with several clusters each shape has a ``run`` column per
    cluster. ``assign``: also say which cluster each pending job goes to
    (:attr:`AggregateBound.assignment`, the LP's counts rounded down per shape, the rest to
    the cluster the LP gave most of the shape, else the one with most room for it), what a
    decomposition by cluster solves."""
    t0 = time.perf_counter()
    if p.stops_jobs is not None:  # preemption or migration (failure repair too)
        return AggregateBound(None, 0, 0, 0, 0, 0.0, "not for rounds with running jobs to stop")
    shapes: dict[tuple[object, ...], list[JobView]] = defaultdict(list)
    for jv in p.pending:
        if not jv.impossible and jv.migrant is None:
            shapes[_shape_key(p, jv)].append(jv)
    lp = SparseLp()
    columns = Columns(lp, p)
    runs: Runs = []
    for members in shapes.values():
        cols = columns.add(members[0], len(members))
        one_cluster(lp, [run for run, _ in cols.values()], len(members))
        runs.append((members, cols))
    columns.close()
    folded = len(columns.folded)
    left = math.inf if deadline is None else deadline - time.perf_counter()
    if left <= 0.01:
        return AggregateBound(None, folded, len(shapes), len(lp.lb), len(lp.rows_lo),
                              time.perf_counter() - t0, "no time left")
    value, status, x = lp.maximise(min(left, 60.0))
    from hyperplace.solvers.backends.safebound import integer_bound  # numpy: when it runs

    bound = None if value is None else integer_bound(value)
    found = AggregateBound(bound, folded, len(shapes), len(lp.lb), len(lp.rows_lo),
                           time.perf_counter() - t0, status)
    if assign:
        found.assignment = _assignment(runs, x)
    return found


def one_cluster(lp: SparseLp, runs: list[int], count: int) -> None:
    """A shape of ``count`` jobs runs at most that many over the clusters (``runs``: its run
    column in each): each job runs in one cluster."""
    if len(runs) > 1:
        lp.row([(run, 1.0) for run in runs], -math.inf, count)


Runs = list[tuple[list[JobView], dict[str, tuple[int, float]]]]


def _capacity_rows(lp: SparseLp, folded: list[_Folded], cap: dict[int, list[tuple[int, int]]]
                   ) -> None:
    """Per folded class, its GPUs (free per node x nodes) and, on uniform classes, the
    pieces of each size and larger that its nodes can hold."""
    for fi, terms in cap.items():
        g = folded[fi]
        f, m = g.rep.free_per_node, g.nodes
        if g.rep.uniform:
            for s in sorted({s for _, s in terms}, reverse=True):
                big = [(v, size) for v, size in terms if size >= s]
                if all(size % s == 0 for _, size in big):
                    lp.row([(v, float(size)) for v, size in big], -math.inf, m * s * (f // s))
                else:
                    lp.row([(v, 1.0) for v, _ in big], -math.inf, m * (f // s))
        lp.row([(v, float(size)) for v, size in terms], -math.inf, m * f)


def _room(p: PlacementProblem, jv: JobView, folded: list[_Folded], indices: list[int]) -> int:
    """Free GPUs of the cluster's folded classes where every unit class of the job may sit
    (0: the job cannot run in that cluster)."""
    total = 0
    for uc in jv.classes:
        mine = sum(folded[fi].nodes * len(folded[fi].rep.rep.free) for fi in indices
                   if p.node_eligible(jv, uc, folded[fi].rep.rep))
        if mine <= 0:
            return 0
        total += mine
    return total


def _assignment(runs: Runs,
                x: list[float] | None) -> dict[int, str]:
    out: dict[int, str] = {}
    for members, cols in runs:
        if not cols:
            continue
        amounts = {c: (x[col] if x is not None else 0.0) for c, (col, _) in cols.items()}
        queue = iter(members)
        for cluster, amount in sorted(amounts.items(), key=lambda t: -t[1]):
            for _ in range(int(math.floor(amount + 1e-6))):
                jv = next(queue, None)
                if jv is None:
                    break
                out[jv.index] = cluster
        best = max(cols, key=lambda c: (amounts[c], cols[c][1]))
        for jv in queue:
            out[jv.index] = best
    return out


def _class_columns(p: PlacementProblem, lp: SparseLp, jv: JobView, uc: UnitClass, run: int,
                   folded: list[_Folded], indices: list[int],
                   cap: dict[int, list[tuple[int, int]]]) -> None:
    """Piece columns of one unit class of a shape on the folded classes ``indices`` (of one
    cluster), and its gang rows: per piece size for fixed pieces, the GPUs held for a cut
    class."""
    sizes = uc.size_options
    smallest = min(sizes) if sizes else uc.size
    gang: dict[int, list[tuple[int, float]]] = defaultdict(list)
    gpus: list[tuple[int, float]] = []
    for fi in indices:
        g = folded[fi]
        rep = g.rep.rep
        if len(rep.free) < smallest or not p.node_eligible(jv, uc, rep):
            continue
        for size in sizes:
            if uc.flexible and size not in uc.sizes_on(rep):
                continue
            per_node = p.piece_capacity(uc, size, rep)
            if per_node <= 0:
                continue
            v = lp.col(0, per_node * g.nodes)
            cap[fi].append((v, size))
            gang[size].append((v, 1.0))
            gpus.append((v, float(size)))
    if uc.cut:
        # the GPUs of the class's units, in pieces of any of its sizes
        lp.row(gpus + [(run, -float(uc.count * uc.size))], 0.0, 0.0)
        return
    for size in sizes:
        per_unit = uc.pieces.count(size)
        lp.row(gang.get(size, []) + [(run, -float(uc.count * per_unit))], 0.0, 0.0)
