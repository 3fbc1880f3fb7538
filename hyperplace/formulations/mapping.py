"""From solver values to GPUs and back: decode counts to concrete GPUs, encode plans as hints.

One :class:`Assignment` type is what every solver produces (greedy directly, CP-SAT and MILP
through :func:`decode`), and :func:`to_plan` turns it into the one result type, a
:class:`~hyperplace.models.plan.PlacementPlan`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from hyperplace.formulations.placement.decoded import Assignment, PlacedUnit
from hyperplace.formulations.placement.extensions import written_as
from hyperplace.formulations.placement import (
    DomainKey,
    JobView,
    NodeView,
    PlacementModel,
    PlacementProblem,
    UnitClass,
    radius_for,
)
from hyperplace.models.plan import (
    GPURef,
    PlacementPlan,
    TopologyAssignment,
    TopologyDomain,
)
from hyperplace.models.fabric import Fabric
from hyperplace.models.plan_builder import PlanBuilder
from hyperplace.models.result import SolveStats


#: A piece to pack: (GPUs, unit class, exact clique or None, flexible unit index or None).
Piece = tuple[int, int, "tuple[int, ...] | None", "int | None"]


@dataclass
class _Packing:
    """What first-fit decreasing has packed so far: free GPUs per node, pieces per unit
    class, flexible units' GPUs per node, and why a job's pieces did not pack."""

    remaining: dict[str, list[int]]
    placed: dict[int, list[tuple[NodeView, tuple[int, ...]]]] = field(
        default_factory=lambda: defaultdict(list))
    # flexible units: (class, unit index) -> GPUs per node
    flex: dict[tuple[int, int], dict[str, list[int]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    failed: dict[int, str] = field(default_factory=dict)

    def put(self, node: NodeView, uci: int, unit: int | None, gpus: tuple[int, ...]) -> None:
        if unit is None:
            self.placed[uci].append((node, gpus))
        else:
            self.flex[(uci, unit)][node.name].extend(gpus)


def decode(pm: PlacementModel, values: list[int]) -> Assignment:
    """Concrete GPUs from a solution: first-fit decreasing inside each folded node class."""
    p = pm.problem
    # bundles: the first x jobs of a bundle (queue order) run; their pieces are the leader's
    admitted: set[int] = set()
    for leader, v in pm.run.items():
        admitted.update(pm.bundles[leader][:values[v]])
    leaders = {leader for leader, v in pm.run.items() if values[v] > 0}
    stopped = {v for v, var in pm.stop.items() if values[var] > 0}
    pack = _Packing(_usable_gpus(p, stopped))
    for nci, items in _pieces_per_class(pm, values, leaders).items():
        _pack_class(p, nci, items, stopped, pack)
    _hand_out_bundles(pm, leaders, admitted, pack)
    out = Assignment()
    for j in sorted(admitted):
        if j in pack.failed:
            out.notes[j] = pack.failed[j]
            continue
        units = _job_units(pm, values, p.jobs[j], pack)
        if units is None:
            out.notes[j] = "pieces could not be grouped into units"
        else:
            out.units[j] = units
    for ext in p.extensions:  # hot spares (their rule on the packed units)
        ext.settle(out)
    # the stops kept: migration's settlement, or the stops preemption needs
    settled = (ext.settle_stopped(out, stopped) for ext in p.extensions)
    out.stopped = next((s for s in settled if s is not None), set())
    return out


def _usable_gpus(p: PlacementProblem, stopped: set[int]) -> dict[str, list[int]]:
    """Free GPUs per node, with those of stopped jobs (by whom: see _stoppable_node)."""
    remaining: dict[str, list[int]] = {n.name: list(n.free) for n in p.nodes}
    for n in p.nodes:
        if n.stoppable:
            remaining[n.name] = sorted(remaining[n.name] + [g for g, v in n.stoppable.items()
                                                            if v in stopped])
    return remaining


def _pieces_per_class(pm: PlacementModel, values: list[int], leaders: set[int]
                      ) -> dict[int, list[Piece]]:
    """The pieces the solution puts in each node class (running jobs' only)."""
    p = pm.problem
    per_class: dict[int, list[Piece]] = defaultdict(list)
    for pv in pm.pieces:
        x = values[pv.var]
        if x > 0 and p.classes[pv.uclass].job in leaders:
            per_class[pv.node_class].extend([(pv.piece, pv.uclass, pv.clique, pv.unit)] * x)
    return per_class


def _pack_class(p: PlacementProblem, nci: int, items: list[Piece], stopped: set[int],
                pack: _Packing) -> None:
    """One node class's pieces onto its nodes: cliques first (exact GPUs), then counts
    largest first."""
    nc = p.node_classes[nci]
    nodes = nc.nodes
    items.sort(key=lambda t: (t[2] is None, -t[0]))
    if nodes[0].stoppable and nodes[0].uniform_gbps is not None:
        _stoppable_node(p, nodes[0], items, stopped, pack.placed, pack.failed, pack.flex)
        return
    for size, uci, clique, unit in items:
        job = p.classes[uci].job
        if clique is not None:
            free = pack.remaining[nodes[0].name]
            if all(g in free for g in clique):
                for g in clique:
                    free.remove(g)
                pack.put(nodes[0], uci, unit, clique)
            else:
                pack.failed[job] = "clique already taken (inconsistent solution)"
            continue
        for node in _node_order(p, nodes, uci, unit, pack):
            free = pack.remaining[node.name]
            if len(free) >= size:
                gpus = tuple(free[:size])
                del free[:size]
                pack.put(node, uci, unit, gpus)
                break
        else:
            pack.failed[job] = (f"pieces of {size} GPUs did not pack into nodes with "
                                f"{nc.free_per_node} free (non-divisible sizes)")


def _node_order(p: PlacementProblem, nodes: list[NodeView], uci: int, unit: int | None,
                pack: _Packing) -> list[NodeView]:
    """Where to try a counted piece: a flexible unit's pieces go to a node it already uses
    when they fit there (or, when its pieces may not share a node, to the others)."""
    if unit is None or not pack.flex[(uci, unit)]:
        return nodes
    mine = pack.flex[(uci, unit)]
    if p.classes[uci].merges_on(nodes[0]):
        return sorted(nodes, key=lambda n: n.name not in mine)
    return [n for n in nodes if n.name not in mine]  # one piece per node for this unit


def _hand_out_bundles(pm: PlacementModel, leaders: set[int], admitted: set[int],
                      pack: _Packing) -> None:
    """The leader's pieces of a bundle to its admitted members, one piece each."""
    p = pm.problem
    for leader, members in pm.bundles.items():
        if len(members) > 1 and leader in leaders:
            lead_class = p.jobs[leader].classes[0].index
            pieces = pack.placed.pop(lead_class, [])
            running = [m for m in members if m in admitted]
            for m, piece in zip(running, pieces):
                pack.placed[p.jobs[m].classes[0].index] = [piece]
            if leader in pack.failed:
                for m in running:
                    pack.failed[m] = pack.failed[leader]


def _job_units(pm: PlacementModel, values: list[int], jv: JobView, pack: _Packing
               ) -> list[PlacedUnit] | None:
    """An admitted job's units from its classes' pieces; None when they do not group."""
    units: list[PlacedUnit] = []
    for uc in jv.classes:
        pieces = pack.placed.get(uc.index, [])
        got: list[PlacedUnit] | None
        if uc.parts:
            got = _whole_job_units(uc, pieces)
        elif uc.flexible:
            got = _flexible_units(uc, pack)
        elif not uc.multi_node:
            got = _single_node_units(uc, pieces)
        else:
            got = _multi_node_units(pm, values, uc, pieces)
        if got is None:
            return None
        units += got
    return units


def _whole_job_units(uc: UnitClass, pieces: list[tuple[NodeView, tuple[int, ...]]]
                     ) -> list[PlacedUnit]:
    """Every unit of a job that shares one node: its one piece cut into the units."""
    node, gpus = pieces[0]
    return [PlacedUnit(uc.index, u.name, [(node.name, grp)]) for u, grp in uc.split_whole(node, gpus)]


def _flexible_units(uc: UnitClass, pack: _Packing) -> list[PlacedUnit] | None:
    """Units whose pieces the model placed one by one: each whole, or None."""
    out = []
    for i, u in enumerate(uc.units):
        got = pack.flex.get((uc.index, i), {})
        if sum(len(g) for g in got.values()) != uc.size:
            return None
        out.append(PlacedUnit(uc.index, u.name, [
            (node, tuple(sorted(gpus))) for node, gpus in got.items()]))
    return out


def _single_node_units(uc: UnitClass, pieces: list[tuple[NodeView, tuple[int, ...]]]
                       ) -> list[PlacedUnit] | None:
    """Units of at most a node: one piece each, or None when the count is off."""
    if len(pieces) != uc.count:
        return None
    return [PlacedUnit(uc.index, u.name, [(node.name, gpus)])
            for u, (node, gpus) in zip(uc.units, pieces)]


def _multi_node_units(pm: PlacementModel, values: list[int], uc: UnitClass,
                      pieces: list[tuple[NodeView, tuple[int, ...]]]) -> list[PlacedUnit] | None:
    """Units larger than a node: pieces grouped by the unit's domain, then cut into units
    (the model's cut pattern counts when pooled, else the one pattern); None when they do
    not group."""
    p = pm.problem
    by_dom: dict[DomainKey | None, list[tuple[NodeView, tuple[int, ...]]]] = defaultdict(list)
    own = any(key[0] == uc.index and key[1] is not None for key in pm.pattern_vars)
    for node, gpus in pieces:
        key = p.domain(node, uc.hop_limit) if uc.hop_limit is not None and \
            (own or not uc.pooled) else None
        by_dom[key].append((node, gpus))
    names = iter(u.name for u in uc.units)
    out: list[PlacedUnit] = []
    for dom, plist in by_dom.items():
        plist.sort(key=lambda t: -len(t[1]))
        todo = _cut_patterns(pm, values, uc, dom if own else None) if uc.pooled else None
        while plist:
            if todo is not None and not todo:
                return None
            unit_pieces = []
            for size in (todo.pop(0) if todo is not None else uc.pieces):
                k = next((i for i, t in enumerate(plist) if len(t[1]) == size), None)
                if k is None:
                    return None
                node, gpus = plist.pop(k)
                unit_pieces.append((node.name, gpus))
            out.append(PlacedUnit(uc.index, next(names), unit_pieces))
    return out


def _cut_patterns(pm: PlacementModel, values: list[int], uc: UnitClass,
                  dom: DomainKey | None) -> list[tuple[int, ...]]:
    """The cut pattern of each pooled unit in ``dom``, as many of each as the model chose."""
    return [pat for k, pat in enumerate(uc.patterns)
            for _ in range(values[pm.pattern_vars[(uc.index, dom, k)]]
                           if (uc.index, dom, k) in pm.pattern_vars else 0)]


def _stoppable_node(p: PlacementProblem, node: NodeView,
                    items: list[tuple[int, int, tuple[int, ...] | None, int | None]],
                    stopped: set[int], placed: dict[int, list[tuple[NodeView, tuple[int, ...]]]],
                    failed: dict[int, str],
                    flex: dict[tuple[int, int], dict[str, list[int]]]) -> None:
    """GPUs for the pieces on a uniform node hosting stoppable jobs (preemption candidates,
    movers, broken jobs): each piece may use free GPUs and those of the stopped jobs whose
    GPUs its job may use. A min-cost flow from each job's signature to the pools (free GPUs
    cost nothing, a stopped job's cost 1) finds them; the model's Hall rows guarantee it
    exists."""
    import networkx as nx

    held = p.stoppable
    pools: dict[int | str, list[int]] = {"free": list(node.free)}
    for g, v in node.stoppable.items():
        if v in stopped:
            pools.setdefault(v, []).append(g)
    by_sig: dict[frozenset[int], list[tuple[int, int, int | None]]] = defaultdict(list)
    for size, uci, _, unit in items:
        job = p.classes[uci].job
        sig = frozenset(v for v in pools if isinstance(v, int) and job in held[v].allowed)
        by_sig[sig].append((size, uci, unit))
    graph = nx.DiGraph()
    for i, (sig, pieces) in enumerate(by_sig.items()):
        graph.add_edge("s", ("sig", i), capacity=sum(t[0] for t in pieces), weight=0)
        order: list[int | str] = ["free", *sorted(sig)]
        for pool in order:
            graph.add_edge(("sig", i), ("pool", pool), capacity=len(pools[pool]),
                           weight=0 if pool == "free" else 1)
    for pool, gpus in pools.items():
        graph.add_edge(("pool", pool), "t", capacity=len(gpus), weight=0)
    flow = nx.max_flow_min_cost(graph, "s", "t")
    taken = {pool: 0 for pool in pools}
    for i, (sig, pieces) in enumerate(by_sig.items()):
        mine: list[int] = []
        order = ["free", *sorted(sig)]
        for pool in order:
            k = flow[("sig", i)].get(("pool", pool), 0)
            mine += pools[pool][taken[pool]:taken[pool] + k]
            taken[pool] += k
        for size, uci, unit in pieces:
            if len(mine) < size:
                failed[p.classes[uci].job] = "GPUs of stopped jobs did not match (inconsistent solution)"
                continue
            if unit is None:
                placed[uci].append((node, tuple(sorted(mine[:size]))))
            else:  # a flexible unit's piece (see decode)
                flex[(uci, unit)][node.name].extend(mine[:size])
            del mine[:size]


@dataclass
class _HintIndex:
    """The model's piece variables by what they place, for writing a hint."""

    uniform: dict[tuple[int, int, int], int] = field(default_factory=dict)  # (class, size, nc)
    cliques: dict[tuple[int, int, tuple[int, ...]], int] = field(default_factory=dict)
    # flexible units: (class, unit index, node class) -> {size: var}; (.., clique) -> var
    flex_sizes: dict[tuple[int, int, int], dict[int, int]] = field(
        default_factory=lambda: defaultdict(dict))
    flex_cliques: dict[tuple[int, int, int, tuple[int, ...]], int] = field(default_factory=dict)
    class_of_node: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, pm: PlacementModel) -> _HintIndex:
        idx = cls(class_of_node={n.name: nc.index for nc in pm.problem.node_classes
                                 for n in nc.nodes})
        for pv in pm.pieces:
            if pv.unit is not None:
                if pv.clique is None:
                    idx.flex_sizes[(pv.uclass, pv.unit, pv.node_class)][pv.piece] = pv.var
                else:
                    idx.flex_cliques[(pv.uclass, pv.unit, pv.node_class, pv.clique)] = pv.var
            elif pv.clique is None:
                idx.uniform[(pv.uclass, pv.piece, pv.node_class)] = pv.var
            else:
                idx.cliques[(pv.uclass, pv.node_class, pv.clique)] = pv.var
        return idx

    def piece(self, primary: dict[int, int], model_class: int, node: str,
              gpus: tuple[int, ...]) -> None:
        """One piece of ``gpus`` on ``node``: counted on a uniform node class, the exact
        clique on another."""
        nci = self.class_of_node[node]
        key = (model_class, len(gpus), nci)
        if key in self.uniform:
            _count(primary, self.uniform[key])
        else:
            cv = self.cliques.get((model_class, nci, tuple(sorted(gpus))))
            if cv is not None:
                primary[cv] = 1


def _count(primary: dict[int, int], v: int, n: int = 1) -> None:
    primary[v] = primary.get(v, 0) + n


def encode(pm: PlacementModel, assignment: Assignment) -> list[int]:
    """A complete hint (auxiliaries too) for the model from an assignment (e.g. greedy's)."""
    p = pm.problem
    idx = _HintIndex.of(pm)
    primary: dict[int, int] = {pm.stop[v]: 1 for v in assignment.stopped}
    leader_of = {m: leader for leader, members in pm.bundles.items() for m in members}
    for j, units in assignment.units.items():
        if j not in leader_of:
            continue
        _count(primary, pm.run[leader_of[j]])
        for u in units:
            uc = p.classes[u.uclass]
            if uc.flexible and not uc.whole_job:
                _encode_flexible(pm, uc, u, idx.class_of_node, idx.flex_sizes,
                                 idx.flex_cliques, primary)
            elif not uc.whole_job:
                _encode_unit(pm, idx, primary, uc, u)
        whole = [u for u in units if p.classes[u.uclass].whole_job]
        if whole:  # whole-job piece: all units on one node
            gpus = tuple(sorted(g for u in whole for g in u.pieces[0][1]))
            idx.piece(primary, pm.class_alias.get(whole[0].uclass, whole[0].uclass),
                      whole[0].pieces[0][0], gpus)
        _encode_job_domain(pm, primary, j, units)
    return pm.complete(primary)


def _encode_unit(pm: PlacementModel, idx: _HintIndex, primary: dict[int, int], uc: UnitClass,
                 u: PlacedUnit) -> None:
    """One unit's pieces, and which cut pattern it took and in which domain (pooled), or
    the domain of its own hop limit (multi-node)."""
    p = pm.problem
    model_class = pm.class_alias.get(u.uclass, u.uclass)
    for node, gpus in u.pieces:
        idx.piece(primary, model_class, node, gpus)
    if uc.pooled:
        cut = tuple(sorted((len(g) for _, g in u.pieces), reverse=True))
        k = next((i for i, pat in enumerate(uc.patterns)
                  if tuple(sorted(pat, reverse=True)) == cut), None)
        if k is None:
            return
        doms: list[DomainKey | None] = [None]
        if uc.hop_limit is not None:
            doms.append(p.domain(p.node_by_name[u.pieces[0][0]], uc.hop_limit))
        for dom in doms:
            qv = pm.pattern_vars.get((u.uclass, dom, k))
            if qv is not None:
                _count(primary, qv)
    elif uc.multi_node and uc.hop_limit is not None:
        d = p.domain(p.node_by_name[u.pieces[0][0]], uc.hop_limit)
        yv = pm.unit_domain.get((u.uclass, d))
        if yv is not None:
            _count(primary, yv)


def _encode_job_domain(pm: PlacementModel, primary: dict[int, int], j: int,
                       units: list[PlacedUnit]) -> None:
    """The job's domain: one that holds all its nodes (several may, on non-tree fabrics)."""
    p = pm.problem
    common: set[DomainKey] | None = None
    for node in {nd for u in units for nd, _ in u.pieces}:
        ds = set(p.domains_of(p.node_by_name[node], p.jobs[j].hop_limit, job_level=True))
        common = ds if common is None else common & ds
    for d in sorted(common or ()):
        zv = pm.job_domain.get((j, d))
        if zv is not None:
            primary[zv] = 1
            break


def _encode_flexible(pm: PlacementModel, uc: UnitClass, u: PlacedUnit, class_of_node: dict[str, int],
                     flex_sizes: dict[tuple[int, int, int], dict[int, int]],
                     flex_cliques: dict[tuple[int, int, int, tuple[int, ...]], int],
                     primary: dict[int, int]) -> None:
    """Hint values of one flexible unit: its GPUs on each node as the model's pieces (the
    exact GPU set on a non-uniform node; on a uniform one the largest sizes first, e.g. 7
    GPUs as 4 + 2 + 1), and the domain of its own hop limit."""
    p = pm.problem
    i = next(k for k, unit in enumerate(uc.units) if unit.name == u.unit)
    per_node: dict[str, list[int]] = defaultdict(list)
    for node, gpus in u.pieces:
        per_node[node].extend(gpus)
    for node, on_node in per_node.items():
        nci = class_of_node[node]
        cv = flex_cliques.get((uc.index, i, nci, tuple(sorted(on_node))))
        if cv is not None:
            primary[cv] = 1
            continue
        left = len(on_node)
        for size, v in sorted(flex_sizes.get((uc.index, i, nci), {}).items(), reverse=True):
            take = min(left // size, pm.lm.ubs[v] - primary.get(v, 0))
            if take > 0:
                primary[v] = primary.get(v, 0) + take
                left -= take * size
    nodes = [p.node_by_name[node] for node in per_node]
    common: set[DomainKey] | None = None
    for n in nodes:
        ds = set(p.domains_of(n, uc.hop_limit))
        common = ds if common is None else common & ds
    for d in sorted(common or ()):
        yv = pm.flex_unit_domain.get((uc.index, i, d))
        if yv is not None:
            primary[yv] = 1
            break


# ---------------------------------------------------------------------------------------
# Assignment -> PlacementPlan
# ---------------------------------------------------------------------------------------

LEVELS = ["hyperplace.io/cluster", "hyperplace.io/spine-domain", "hyperplace.io/leaf-domain",
          "kubernetes.io/hostname"]


def _topology(p: PlacementProblem, units: list[PlacedUnit]) -> TopologyAssignment:
    from hyperplace.instances.writers import label_levels

    levels = label_levels(p.instance)
    if levels is not None:
        # the cluster's own topology labels (Kueue TAS, Topograph...): the levels a Kueue
        # Topology names, values as the nodes carry them (#23)
        by_label: dict[tuple[str, ...], int] = defaultdict(int)
        for u in units:
            for node, gpus in u.pieces:
                host = p.instance.node_index[node][1]
                by_label[tuple(host.labels.get(k) or (host.name if k == levels[-1] else "-")
                               for k in levels)] += len(gpus)
        return TopologyAssignment(levels=levels, domains=[
            TopologyDomain(values=list(k), count=c) for k, c in sorted(by_label.items())])
    levels_of = _job_domains(p, [node for u in units for node, _ in u.pieces])
    counts: dict[tuple[str, ...], int] = defaultdict(int)
    for u in units:
        for node, gpus in u.pieces:
            n = p.node_by_name[node]
            spine, leaf = levels_of[node]
            counts[(n.cluster.name, spine, leaf, node)] += len(gpus)
    return TopologyAssignment(levels=LEVELS, domains=[
        TopologyDomain(values=list(k), count=c) for k, c in sorted(counts.items())])


def _job_domains(p: PlacementProblem, nodes: list[str]) -> dict[str, tuple[str, str]]:
    """node -> (spine-domain, leaf-domain) values for one job's nodes.

    On trees the domains partition the nodes: each node's own. On fabrics whose domains
    overlap (a node cabled to two leaves) a node lies in several leaf domains, and its own
    (its switch group) would give two nodes one hop apart different leaf values. There the
    job's nodes are covered by the fewest true domains (:func:`_cover`): leaf domains
    (radius 1) first, then spine domains holding whole leaf groups, so a value always names
    nodes pairwise within its radius, leaf values nest in spine values, and nodes sharing
    a leaf get one value whenever one leaf domain holds them all."""
    out: dict[str, tuple[str, str]] = {}
    by_cluster: dict[str, list[NodeView]] = defaultdict(list)
    for name in dict.fromkeys(nodes):
        n = p.node_by_name[name]
        by_cluster[n.cluster.name].append(n)
    for views in by_cluster.values():
        net = views[0].cluster.network
        r = radius_for(views[0].cluster, 3)
        if net.is_tree or any(v.attach_gbps is None or net.nvlink_domain_of(v.name) is not None
                              for v in views):
            for v in views:
                out[v.name] = (p.domain(v, 3).label if v.attach_gbps is not None else "-",
                               v.leaf.label)
            continue
        names = [v.name for v in views]
        leaf = _cover(net, names, 1)
        groups: dict[str, list[str]] = defaultdict(list)
        for name in names:
            groups[leaf[name]].append(name)
        spine = _cover(net, names, r, list(groups.values())) if r else \
            {v.name: p.domain(v, 3).label for v in views}
        for name in names:
            out[name] = (spine[name], leaf[name])
    return out


def _cover(net: Fabric, nodes: list[str], radius: int, groups: list[list[str]] | None = None
           ) -> dict[str, str]:
    """node -> a domain of ``radius`` holding it: greedily the domain holding the most of the
    uncovered groups (each kept whole; default: single nodes), ties by name. Every group
    lies in some domain holding its first node (its nodes are pairwise within the radius,
    so a maximal such set holds them), so the loop ends."""
    todo = [list(g) for g in (groups or [[n] for n in nodes])]
    members = net.domains(radius)
    out: dict[str, str] = {}
    while todo:
        names = sorted({d for g in todo for d in net.node_domains(g[0], radius)})
        best, held = "", list[list[str]]()
        for d in names:
            inside = set(members[d])
            these = [g for g in todo if set(g) <= inside]
            if sum(len(g) for g in these) > sum(len(g) for g in held):
                best, held = d, these
        if not held:  # cannot happen (docstring); never loop
            raise AssertionError(f"no domain of radius {radius} holds {todo[0]}")
        for g in held:
            out.update(dict.fromkeys(g, best))
        todo = [g for g in todo if g not in held]
    return out


def to_plan(p: PlacementProblem, assignment: Assignment, stats: SolveStats,
            reasons: dict[int, list[str]], objective_terms: dict[str, float] | None = None,
            skipped: set[int] | None = None) -> PlacementPlan:
    """The plan document for an assignment, its statistics, reasons and objective terms
    (the one plan builder, :class:`~hyperplace.models.plan_builder.PlanBuilder`);
    ``skipped``: pending jobs whose per-job analysis did not fit in the budget."""
    b = PlanBuilder(p.instance)
    # what the families write (preemption: its stops and policy; migration: its moves)
    sections: dict[str, Any] = {"preemptions": [], "preemption_policy": None, "migrations": []}
    for ext in p.extensions:
        sections.update(ext.plan_sections(assignment))
    for j in sorted(assignment.units):
        jv = p.jobs[j]
        units = assignment.units[j]
        if jv.migrant is not None:  # a family may write a job of the round as another
            jv, units = written_as(p, j, units)
        b.place(jv.name, jv.priority,
                [(u.unit, [GPURef(node=node, gpu=g) for node, gpus in u.pieces for g in gpus])
                 for u in units],
                gpus=jv.gpus, topology=_topology(p, units))
    book = p.quotas
    for jv in p.pending:
        if jv.index not in assignment.units:
            never = book.active and book.inadmissible(jv.queue, p.types_for(jv.classes),
                                                      jv.gpus) is not None
            b.wait(jv.name, reasons.get(jv.index) or ["not admitted"],
                   analysed=not skipped or jv.index not in skipped, inadmissible=never)
    return b.build(
        "plan", status=stats.status, solver=stats.solver, objective=stats.objective,
        bound=stats.bound, gap=stats.gap, objective_gaps=stats.objective_gaps,
        runtime_s=round(stats.runtime_s, 4), budget_s=stats.budget_s,
        message=stats.message, objective_terms=objective_terms or {},
        **sections,
    )


def objective_terms(pm: PlacementModel, values: list[int]) -> dict[str, float]:
    """Every objective of the model evaluated on a full assignment, by name."""
    return {o.name: float(pm.lm.evaluate(o.terms, values)) for o in pm.lm.objectives}
