"""Hot spares (#14): whole free nodes each leaf keeps free for repairs, an operator setting.

With ``hot_spares = N`` the placements of a round may open (use GPUs of) at most
``W(L) - min(N, W(L))`` of the ``W(L)`` whole free nodes of each leaf ``L`` (a node is whole
free when none of its GPUs is held or faulty; the leaf is
:meth:`~hyperplace.models.fabric.Network.leaf_of`, the node views' leaf; nodes off the
fabric are in no leaf and keep no spares). Which nodes stay spare is the round's choice:
the model counts the whole free nodes it opens per node class
(:meth:`~hyperplace.formulations.placement.model.PlacementModelBuilder._hot_spares`), greedy
keeps a counter per leaf (``solvers.heuristics.greedy.State``), and the mapping back drops a job when
its pieces packed into more whole free nodes than the model counted
(:func:`opened_whole_nodes`). Repairs of running jobs may use the spares: they are solved
without the setting.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from hyperplace.formulations.placement.domains import DomainKey
from hyperplace.formulations.placement.nvlink import domain_of as nvlink_domain_of
from hyperplace.formulations.placement.views import NodeView


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
