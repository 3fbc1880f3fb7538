"""Hot spares (#14): whole free nodes each leaf keeps free for repairs, an operator setting.

With ``hot_spares = N`` the placements of a round may open (use GPUs of) at most
``W(L) - min(N, W(L))`` of the ``W(L)`` whole free nodes of each leaf ``L`` (a node is whole
free when none of its GPUs is held or faulty; the leaf is
:meth:`~hyperplace.models.fabric.Network.leaf_of`, the node views' leaf; nodes off the
fabric are in no leaf and keep no spares). Which nodes stay spare is the round's choice:
the model counts the whole free nodes it opens per node class
(:meth:`HotSpares.rows`), greedy
keeps a counter per leaf (:class:`SpareCounter`, the family's opening rule that greedy's
free-GPU state keeps), and the mapping back drops a job when its pieces packed into more
whole free nodes than the model counted (:meth:`HotSpares.opened_over`). Repairs of running
jobs may use the spares: they are solved without the setting.

The family is a round extension (:class:`HotSpares`, :mod:`.extensions`): it owns the
allowance per leaf, the model's rows, the mapping back's settlement, greedy's counter and
the words of its reason (:meth:`HotSpares.held_back_reason`); the probe that finds whose
spares hold a job back is greedy's (:mod:`hyperplace.solvers.heuristics.families`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from functools import cached_property
from typing import TYPE_CHECKING

from hyperplace.formulations.placement.domains import DomainKey
from hyperplace.formulations.placement.extensions import RoundExtension
from hyperplace.formulations.placement.nvlink import domain_of as nvlink_domain_of
from hyperplace.formulations.placement.views import NodeView

if TYPE_CHECKING:
    from hyperplace.formulations.placement.decoded import Assignment
    from hyperplace.formulations.placement.model import PlacementModelBuilder
    from hyperplace.formulations.placement.problem import PlacementProblem

Terms = list[tuple[int, int]]


class HotSpares(RoundExtension):
    """Whole free nodes each leaf keeps for repairs (see the module docstring): at most
    ``allowance[leaf]`` of a leaf's whole free nodes may be opened by the round."""

    name = "hot spares"

    def __init__(self, p: PlacementProblem, allowance: dict[DomainKey, int]):
        self.p = p
        #: leaf -> whole free nodes the round may open there (:func:`spare_allowance`)
        self.allowance = allowance

    @classmethod
    def of(cls, p: PlacementProblem) -> HotSpares | None:
        """The extension when some leaf keeps spares (``hot_spares``, or an NVLink domain's
        ``spareTrays``); never in a repair round (repairs may use the spares: what they
        are for)."""
        if p.repairing:
            return None
        allowance = spare_allowance(p.nodes, p.hot_spares)
        return cls(p, allowance) if allowance else None

    def rows(self, b: PlacementModelBuilder) -> None:
        """Per leaf with whole free nodes, those the round opens <= ``W - min(N, W)``
        (which ones stay spare is the model's choice).

        Opened nodes are counted per whole free node class by ``used[c]``
        (:meth:`PlacementModelBuilder.nodes_used`): on a uniform class of ``m`` nodes of
        ``f`` GPUs, ``f x used >= GPUs of its pieces`` and, unless the piece sizes divide
        each other and ``f``, per size ``s`` ``floor(f / s) x used >= pieces of size >=
        s``. Every such row is a lower bound on the nodes any packing needs, so the rows
        cut no valid plan; with sizes that divide each other and the node (1, 2, 4, 8 on
        8-GPU nodes) the mapping's first-fit decreasing fills nodes one after another
        (every node's free count stays a multiple of the piece size being placed, so a node
        is opened only when the ones before it are full) and uses exactly ``ceil(GPUs /
        f)``, the count. Otherwise a packing may need more nodes than counted: the mapping
        then drops a job (:meth:`settle`; the plan stays valid and says so). On a
        non-uniform node (its own class) ``used`` is the OR of its GPU-set variables."""
        per_leaf: dict[DomainKey, Terms] = defaultdict(list)
        for nc in self.p.node_classes:
            leaf = spare_leaf(nc.rep)
            if leaf is None or leaf not in self.allowance:
                continue
            u = b.nodes_used(nc)
            if u is not None:
                per_leaf[leaf].append((u, 1))
        for leaf, used in sorted(per_leaf.items()):
            b.lm.add(used, hi=self.allowance[leaf], name=f"spares[{leaf}]")

    def settle(self, a: Assignment) -> None:
        """Drop jobs (lowest priority, then smallest, first) while some leaf has more of
        its whole free nodes opened than its hot spares allow (pieces whose sizes do not
        divide each other may pack into more nodes than the model counted, see
        :meth:`rows`); each dropped job gets a note."""
        p = self.p
        while True:
            over = set(self.opened_over(
                {node for units in a.units.values() for u in units for node, _ in u.pieces}))
            if not over:
                return
            on_over = [j for j, units in a.units.items()
                       if any(spare_leaf(p.node_by_name[node]) in over
                              for u in units for node, _ in u.pieces)]
            j = min(on_over, key=lambda j: (p.jobs[j].priority, p.jobs[j].gpus, -j))
            del a.units[j]
            a.notes[j] = ("its pieces packed into more whole free nodes than leaf "
                          f"{sorted(over)[0]} may open with its hot spares kept")

    def opened_over(self, used: Iterable[str]) -> dict[DomainKey, set[str]]:
        """Leaf -> the whole free nodes among ``used`` (node names) in it, for the leaves
        where those are more than the round may open (empty: the rule holds)."""
        return {leaf: nodes for leaf, nodes in opened_whole_nodes(self.p.node_by_name,
                                                                  used).items()
                if len(nodes) > self.allowance.get(leaf, 0)}

    def opening_rule(self) -> SpareCounter:
        """Greedy's counter: whole free nodes each leaf may still open."""
        return SpareCounter(self.allowance)

    @cached_property
    def _whole(self) -> dict[DomainKey, int]:
        return whole_free_counts(self.p.nodes)

    def held_back_reason(self, leaves: list[DomainKey]) -> str:
        """The reason of a job that would fit on what the plan leaves free but for the
        spares of ``leaves`` (the first three are named)."""
        declared = declared_spares(self.p.nodes)
        return "held back by the hot-spare rule: " + "; ".join(
            spare_words(leaf, self.p.hot_spares, self._whole[leaf], declared.get(leaf, 0))
            for leaf in leaves[:3])


class SpareCounter:
    """Greedy's side of the rule: per leaf, the whole free nodes a piece may still open
    (the allowance, kept up to date as nodes are opened and given back)."""

    def __init__(self, allowance: dict[DomainKey, int]):
        self.left = dict(allowance)

    def may_open(self, leaf: DomainKey) -> bool:
        """A piece may open a whole free node of ``leaf`` (its hot spares stay free)."""
        return self.left.get(leaf, 1) > 0

    def moved(self, leaf: DomainKey, whole_now: bool) -> None:
        """A whole free node of ``leaf`` was opened, or is whole free again."""
        if leaf in self.left:
            self.left[leaf] += 1 if whole_now else -1


def spare_leaf(n: NodeView) -> DomainKey | None:
    """The leaf whose spares node ``n`` counts toward: its leaf when the node is whole free
    and on the fabric, else None."""
    return n.leaf if n.fully_free and not n.leaf.is_single_node else None


def whole_free_counts(nodes: Iterable[NodeView]) -> dict[DomainKey, int]:
    """Leaf -> its whole free nodes (leaves without any left out)."""
    whole: dict[DomainKey, int] = defaultdict(int)
    for n in nodes:
        leaf = spare_leaf(n)
        if leaf is not None:
            whole[leaf] += 1
    return dict(whole)


def declared_spares(nodes: Iterable[NodeView]) -> dict[DomainKey, int]:
    """Leaf -> spare trays its NVLink domain declares (``spareTrays``, #24), where some."""
    out: dict[DomainKey, int] = {}
    for n in nodes:
        d = nvlink_domain_of(n)
        if d is not None and d.spare_trays and not n.leaf.is_single_node:
            out[n.leaf] = d.spare_trays
    return out


def spare_allowance(nodes: Iterable[NodeView], hot_spares: int) -> dict[DomainKey, int]:
    """Leaf -> whole free nodes the round's placements may open there,
    ``W - min(max(hot_spares, spare trays), W)`` (empty without spares); an NVLink
    domain's ``spareTrays`` holds with or without ``hot_spares``."""
    nodes = list(nodes)
    declared = declared_spares(nodes)
    if hot_spares <= 0 and not declared:
        return {}
    return {leaf: w - min(max(hot_spares, declared.get(leaf, 0)), w)
            for leaf, w in whole_free_counts(nodes).items()}


def opened_whole_nodes(nodes_by_name: dict[str, NodeView], used: Iterable[str]
                       ) -> dict[DomainKey, set[str]]:
    """Leaf -> the whole free nodes among ``used`` (node names) in it."""
    out: dict[DomainKey, set[str]] = defaultdict(set)
    for name in used:
        n = nodes_by_name[name]
        leaf = spare_leaf(n)
        if leaf is not None:
            out[leaf].add(name)
    return out


def spare_words(leaf: DomainKey, hot_spares: int, whole: int, declared: int = 0) -> str:
    """How an explanation names a leaf's spares: ``leaf c/t1:leaf0 keeps 1 hot spare node
    for repairs (of 3 whole free)``; an NVLink domain's ``rack r07 keeps 2 whole free
    trays for repairs inside its NVLink domain (...; spareTrays 2)``; a number asked for by
    the round (``hot_spares``) reads ``1 asked``."""
    keep = min(max(hot_spares, declared), whole)
    why = f"spareTrays {declared}" if declared > hot_spares else f"{hot_spares} asked"
    rack = leaf.fabric_domain or ""
    if rack.startswith("nvl:"):
        return (f"rack {rack[4:]} keeps {keep} whole free tray{'s' if keep != 1 else ''} for "
                f"repairs inside its NVLink domain (of {whole} whole free; {why})")
    return (f"leaf {leaf} keeps {keep} hot spare node{'s' if keep != 1 else ''} for repairs "
            f"(of {whole} whole free; {why})")
