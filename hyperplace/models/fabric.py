"""The network between nodes: switches, links, hop counts, bottleneck bandwidth, domain tiers.

Hop count between two nodes is the number of switches on the shortest path: same leaf
switch = 1, leaf-spine-leaf = 3, through a core = 5; a node to itself = 0 (NVLink). So a
manifest's ``maxHopCount: 1`` means "on one leaf switch", as the seed intends.

Domains: sets of nodes pairwise within ``h`` hops (``h`` = 1, 3, 5, ...) are the
tier-``(h+1)/2`` domains, in the spirit of Volcano HyperNodes (tier 1 = closest). Every
domain's label is true: its nodes are pairwise within its radius, on any graph. On trees
(fat-trees, rail-optimised SuperPODs) "within h hops" is an equivalence and the domains
partition the nodes; they are computed in O(switches + links + nodes) from one multi-source
BFS (see ``_spanning_edges``). On other graphs (leaves joined in a line, a node cabled to two
leaves) the domains are the maximal sets of nodes pairwise within the radius and may overlap:
:meth:`Fabric.node_domains` lists all of a node's domains.
"""

from __future__ import annotations

from collections import deque
from functools import cached_property

from pydantic import BaseModel, Field, model_validator

from hyperplace.models.base import HPModel
from hyperplace.models.limits import Name
from hyperplace.models.nvlink import NVLinkDomain


class UnionFind:
    """Disjoint sets over integers (``uf[x]`` is x's root; ``union(a, b)``), path-halving.

    Written here rather than networkx's so that loading a tree fabric does not import
    networkx (and numpy through it), a quarter of a greedy-only command's start-up.
    """

    def __init__(self, elements: range):
        self.parent = list(elements)

    def __getitem__(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self[a], self[b]
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


class Switch(HPModel):

    name: Name
    tier: int = Field(default=1, ge=1, le=4, description="1 = leaf, 2 = spine, 3 = core")


class Link(HPModel):
    """A cable bundle between two endpoints (a node or a switch)."""


    a: Name
    b: Name
    gbps: float = Field(gt=0, description="per-link line rate, Gb/s")
    count: int = Field(default=1, ge=1, description="parallel links (rails, bonded cables)")
    latency_us: float = Field(default=1.0, ge=0)


class Fabric(HPModel):
    """A graph of switches and links. Nodes appear only as link endpoints."""


    kind: str = Field(default="explicit", description="how it was made, e.g. fat-tree-2")
    switches: list[Switch] = Field(default_factory=list)
    links: list[Link] = Field(default_factory=list)
    #: multi-node NVLink domains (NVL72 racks): the level between the node and its leaf
    nvlink_domains: list[NVLinkDomain] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> "Fabric":
        seen: set[str] = set()
        for i, s in enumerate(self.switches):
            if s.name in seen:
                raise ValueError(f"switches[{i}].name: duplicate switch {s.name!r}")
            seen.add(s.name)
        return self

    # ---- derived graph ---------------------------------------------------------
    @cached_property
    def switch_names(self) -> frozenset[str]:
        return frozenset(s.name for s in self.switches)

    @cached_property
    def _switch_adj(self) -> dict[str, dict[str, float]]:
        adj: dict[str, dict[str, float]] = {s: {} for s in self.switch_names}
        for link in self.links:
            if link.a in adj and link.b in adj:
                bw = link.gbps * link.count
                adj[link.a][link.b] = max(adj[link.a].get(link.b, 0.0), bw)
                adj[link.b][link.a] = max(adj[link.b].get(link.a, 0.0), bw)
        return adj

    @cached_property
    def attachments(self) -> dict[str, dict[str, float]]:
        """node -> {switch: Gb/s of the node's link to that switch (per link, not summed)}."""
        out: dict[str, dict[str, float]] = {}
        sw = self.switch_names
        for link in self.links:
            a, b = link.a, link.b
            a_sw, b_sw = a in sw, b in sw
            if a_sw == b_sw:
                continue  # switch-switch (or node-node) cabling: no attachment
            node, s = (b, a) if a_sw else (a, b)
            att = out.get(node)
            if att is None:
                out[node] = {s: link.gbps}
            elif link.gbps > att.get(s, 0.0):
                att[s] = link.gbps
            elif s not in att:
                att[s] = link.gbps
        return out

    def _bfs(self, source: str) -> tuple[dict[str, int], dict[str, float]]:
        """Switch-to-switch distances (edges) and the widest bandwidth among shortest paths."""
        dist = {source: 0}
        width = {source: float("inf")}
        queue = deque([source])
        adj = self._switch_adj
        while queue:
            u = queue.popleft()
            for v, bw in adj[u].items():
                w = min(width[u], bw)
                if v not in dist:
                    dist[v] = dist[u] + 1
                    width[v] = w
                    queue.append(v)
                elif dist[v] == dist[u] + 1 and w > width[v]:
                    width[v] = w
        return dist, width

    @cached_property
    def _bfs_cache(self) -> dict[str, tuple[dict[str, int], dict[str, float]]]:
        return {}

    def _from(self, switch: str) -> tuple[dict[str, int], dict[str, float]]:
        cache = self._bfs_cache
        if switch not in cache:
            cache[switch] = self._bfs(switch)
        return cache[switch]

    @cached_property
    def nvlink_index(self) -> dict[str, NVLinkDomain]:
        """Node -> the multi-node NVLink domain holding it (nodes of none left out)."""
        return {n: d for d in self.nvlink_domains for n in d.nodes}

    def nvlink_domain_of(self, node: str) -> NVLinkDomain | None:
        """The multi-node NVLink domain (NVL72 rack) holding ``node``, or None."""
        return self.nvlink_index.get(node) if self.nvlink_domains else None

    def path(self, u: str, v: str) -> tuple[int | None, float | None]:
        """(hop count, bottleneck Gb/s) between nodes ``u`` and ``v``; (None, None) if apart.

        Two trays of one NVLink domain are 0 hops apart with no fabric bottleneck, as two
        GPUs of one node are: the NVLink switch layer is the job's own interconnect."""
        if u == v:
            return 0, None
        if self.nvlink_domains:
            du = self.nvlink_index.get(u)
            if du is not None and du is self.nvlink_index.get(v) and \
                    du.partition_of(u) == du.partition_of(v):
                return 0, None
        au, av = self.attachments.get(u, {}), self.attachments.get(v, {})
        best_hops: int | None = None
        best_bw = 0.0
        for s1, bw1 in au.items():
            dist, width = self._from(s1)
            for s2, bw2 in av.items():
                if s2 not in dist:
                    continue
                hops = dist[s2] + 1
                bw = min(bw1, bw2, width[s2])
                if best_hops is None or hops < best_hops or (hops == best_hops and bw > best_bw):
                    best_hops, best_bw = hops, bw
        if best_hops is None:
            return None, None
        return best_hops, best_bw

    def hop_count(self, u: str, v: str) -> int | None:
        return self.path(u, v)[0]

    def bottleneck_gbps(self, u: str, v: str) -> float | None:
        return self.path(u, v)[1]

    # ---- domains ----------------------------------------------------------------
    @cached_property
    def _groups(self) -> tuple[list[frozenset[str]], dict[frozenset[str], list[str]]]:
        """Nodes grouped by the set of switches they attach to (a rail group or a leaf).

        Nodes of one group are interchangeable for every hop count: each domain holds a
        group whole or not at all, so domains are computed over groups, not nodes.
        """
        members: dict[frozenset[str], list[str]] = {}
        for node, att in self.attachments.items():
            members.setdefault(frozenset(att), []).append(node)
        keys = sorted(members, key=lambda k: sorted(k))
        return keys, members

    @cached_property
    def _switch_ids(self) -> tuple[dict[str, int], list[list[int]], list[int]]:
        """Switches as integers: (name -> id, adjacency lists, tier per id)."""
        names = sorted(self.switch_names)
        ids = {s: i for i, s in enumerate(names)}
        tier = {s.name: s.tier for s in self.switches}
        adj = [[ids[v] for v in self._switch_adj[s]] for s in names]
        return ids, adj, [tier[s] for s in names]

    def _group_switches(self, g: int) -> list[int]:
        ids = self._switch_ids[0]
        return [ids[s] for s in self._groups[0][g]]

    @cached_property
    def _spanning_edges(self) -> list[tuple[int, int, int]]:
        """(switch distance, group, group) edges of a minimum spanning forest of the groups.

        One multi-source BFS from every group at once labels each switch with its nearest
        group (its Voronoi cell); every switch link joining two cells gives a candidate pair
        at distance ``d(u) + 1 + d(v)``, and groups sharing a switch are at distance 0.
        A minimum spanning forest of those candidates is one of the complete group-distance
        graph (Mehlhorn, "A faster approximation algorithm for the Steiner problem in graphs",
        IPL 27, 1988), so for every threshold its components are exactly those of "joined by
        a chain of groups each within the threshold of the next". O(switches + links + nodes)
        instead of a BFS per group; hand-written because networkx has no multi-source BFS
        that returns the nearest source and a BFS over integer lists is several times faster
        than networkx's over its dict-of-dicts graph (measured at 65,536 GPUs).
        """
        keys, _ = self._groups
        _, adj, _ = self._switch_ids
        label = [-1] * len(adj)
        dist = [0] * len(adj)
        best: dict[tuple[int, int], int] = {}
        frontier: list[int] = []
        for g in range(len(keys)):
            for s in self._group_switches(g):
                if label[s] < 0:
                    label[s] = g
                    frontier.append(s)
                elif label[s] != g:
                    best[(min(label[s], g), max(label[s], g))] = 0
        while frontier:
            nxt = []
            for u in frontier:
                du = dist[u] + 1
                lu = label[u]
                for v in adj[u]:
                    if label[v] < 0:
                        label[v] = lu
                        dist[v] = du
                        nxt.append(v)
            frontier = nxt
        for u, nbrs in enumerate(adj):
            lu = label[u]
            if lu < 0:
                continue
            for v in nbrs:
                lv = label[v]
                if lv > lu:
                    w = dist[u] + 1 + dist[v]
                    if w < best.get((lu, lv), 1 << 30):
                        best[(lu, lv)] = w
        uf = UnionFind(range(len(keys)))
        out = []
        for (a, b), w in sorted(best.items(), key=lambda kv: (kv[1], kv[0])):
            if uf[a] != uf[b]:
                uf.union(a, b)
                out.append((w, a, b))
        return out

    def _components(self, radius: int) -> list[list[int]]:
        """Groups joined by chains of groups each within ``radius`` hops of the next."""
        keys, _ = self._groups
        uf = UnionFind(range(len(keys)))
        for w, a, b in self._spanning_edges:
            if w + 1 > radius:
                break
            uf.union(a, b)
        comps: dict[int, list[int]] = {}
        for g in range(len(keys)):
            comps.setdefault(uf[g], []).append(g)
        return list(comps.values())

    def _ball(self, sources: list[int], depth: int) -> dict[int, int]:
        """Switches within ``depth`` links of ``sources``, with their distance."""
        adj = self._switch_ids[1]
        seen = {s: 0 for s in sources}
        frontier = list(seen)
        for d in range(1, depth + 1):
            nxt = []
            for u in frontier:
                for v in adj[u]:
                    if v not in seen:
                        seen[v] = d
                        nxt.append(v)
            frontier = nxt
        return seen

    def _certified(self, comp: list[int], radius: int) -> bool:
        """True when every pair of groups of ``comp`` is provably within ``radius`` hops.

        The certificate is a centre: a switch within ``k`` links of every group when the
        switch distance allowed, ``radius - 1``, is ``2k`` (an edge for ``2k + 1``). On
        fat-trees and SuperPODs the spine or core above a domain is such a centre, found
        among the highest-tier switches near the first group. Without a certificate the
        caller measures every pair (exact, for small non-tree fabrics).
        """
        if len(comp) == 1:
            return True
        reach = radius - 1
        k = reach // 2
        tiers = self._switch_ids[2]
        near = self._ball(self._group_switches(comp[0]), k)
        top = sorted(near, key=lambda s: (-tiers[s], near[s], s))[:4]
        adj = self._switch_ids[1]
        centres = [[s] for s in top] if reach % 2 == 0 else \
            [[s, t] for s in top for t in adj[s][:8]]
        for centre in centres:
            ball = self._ball(centre, k)
            if all(any(s in ball for s in self._group_switches(g)) for g in comp):
                return True
        return False

    def _group_hops_exact(self, groups: list[int]) -> dict[tuple[int, int], int]:
        """Hop counts between every pair of ``groups`` (a BFS per group; small fabrics)."""
        adj = self._switch_ids[1]
        out: dict[tuple[int, int], int] = {}
        for i, a in enumerate(groups):
            dist = self._ball(self._group_switches(a), len(adj))
            for b in groups[i + 1:]:
                reach = [dist[s] for s in self._group_switches(b) if s in dist]
                if reach:
                    out[(a, b)] = min(reach) + 1
        return out

    @cached_property
    def _domain_tables(self) -> tuple[list[int], dict[int, list[list[int]]]]:
        """(radii, radius -> domains as lists of group indices).

        Where a chain component is not pairwise within the radius (a fabric that is not a
        tree: leaves joined in a line, a node cabled to two leaves), its domains are the
        maximal sets of groups pairwise within the radius (maximal cliques, networkx), which
        may overlap; the radii then include every hop count seen between its groups.
        """
        keys, _ = self._groups
        if not keys:
            return [], {}
        radii = sorted({1} | {w + 1 for w, _, _ in self._spanning_edges})
        loose: set[int] = set()
        certified: set[tuple[int, tuple[int, ...]]] = set()
        for r in radii:
            for comp in self._components(r):
                if self._certified(comp, r):
                    certified.add((r, tuple(sorted(comp))))
                else:
                    loose.update(comp)
        exact = self._group_hops_exact(sorted(loose)) if loose else {}
        radii = sorted(set(radii) | set(exact.values()))
        tables: dict[int, list[list[int]]] = {}
        for r in radii:
            doms: list[list[int]] = []
            for comp in self._components(r):
                # A certified component is one domain even when some of its groups were
                # loose at a smaller radius (their exact hops cover only loose pairs).
                if (r, tuple(sorted(comp))) in certified or not loose.intersection(comp):
                    doms.append(sorted(comp))
                    continue
                import networkx as nx  # non-tree fabrics only (see UnionFind)

                graph = nx.Graph()
                graph.add_nodes_from(comp)
                graph.add_edges_from(pair for pair, h in exact.items()
                                     if h <= r and pair[0] in graph and pair[1] in graph)
                doms += sorted(sorted(c) for c in nx.find_cliques(graph))
            tables[r] = doms
        return radii, tables

    @cached_property
    def radii(self) -> list[int]:
        """Hop radii (1, 3, 5, ...) that define the tiers of this fabric, lowest first."""
        return self._domain_tables[0]

    def is_partition(self, radius: int) -> bool:
        """True when the domains of ``radius`` do not overlap (always so on trees)."""
        return all(len(names) == 1 for names in self._domain_index(radius)[1].values())

    @cached_property
    def is_tree(self) -> bool:
        """True when the domains of every radius partition the nodes (trees, SuperPODs)."""
        return all(self.is_partition(r) for r in self.radii)

    def node_group_label(self, node: str) -> str | None:
        """``t1:<switches>``: the nodes cabled to exactly the same switches as ``node``.

        They are pairwise one hop apart and every domain holds them all or none, so on
        non-tree fabrics the placement model uses them where trees use leaf domains.
        """
        g = self._node_group.get(node)
        return None if g is None else "t1:" + "+".join(sorted(self._groups[0][g]))

    def leaf_of(self, node: str) -> str | None:
        """The node's leaf (None off the fabric): on trees its radius-1 domain; on other
        fabrics its switch group (:meth:`node_group_label`), since a leaf domain may be cut
        by a larger one there. The one definition of a leaf: the placement model's node
        views and the hot-spare rule (:mod:`hyperplace.models.sharing`) both use it.

        A tray of a multi-node NVLink domain has that domain as its leaf (``nvl:<name>``):
        the level between the node and the fabric's leaf, where hot spares are kept and
        whole racks are counted; in a partitioned domain (``partitionTrays``), its
        partition (``nvl:<name>#p<i>``), which a unit cannot leave."""
        if self.nvlink_domains and node in self.nvlink_index:
            d = self.nvlink_index[node]
            if d.partition_trays is not None and d.partition_trays < len(d.nodes):
                return nvlink_leaf(f"{d.name}#p{d.partition_of(node)}")
            return nvlink_leaf(d.name)
        return self.node_domain(node, 1) if self.is_tree else self.node_group_label(node)

    def domains(self, radius: int) -> dict[str, list[str]]:
        """Domain name -> nodes, for sets of nodes pairwise within ``radius`` hops.

        On trees the domains partition the nodes; on other graphs they are the maximal sets
        pairwise within the radius and may overlap (:meth:`node_domains`). Names are
        ``t<tier>:<first switch>`` (tier = (radius + 1) // 2; ``h<radius>:`` for an even
        radius, which only non-tree fabrics have), made unique with ``~2``, ``~3``.
        """
        return dict(self._domain_index(radius)[0])

    def _domain_index(self, radius: int
                      ) -> tuple[dict[str, list[str]], dict[int, list[str]], list[str], int]:
        """(domain name -> sorted nodes, group -> names of the domains holding it,
        names in table order, the table's radius (0: single groups))."""
        cache = self.__dict__.setdefault("_dom_cache", {})
        if radius in cache:
            return cache[radius]
        radii, tables = self._domain_tables
        fitting = [r for r in radii if r <= radius]
        keys, members = self._groups
        table = fitting[-1] if fitting else 0
        doms = tables[table] if fitting else [[g] for g in range(len(keys))]
        prefix = f"t{(radius + 1) // 2}:" if radius % 2 else f"h{radius}:"
        out: dict[str, list[str]] = {}
        of_group: dict[int, list[str]] = {}
        names: list[str] = []
        for idxs in doms:
            base = prefix + min(s for i in idxs for s in keys[i])
            name, k = base, 2
            while name in out:
                name, k = f"{base}~{k}", k + 1
            out[name] = sorted(n for i in idxs for n in members[keys[i]])
            names.append(name)
            for i in idxs:
                of_group.setdefault(i, []).append(name)
        cache[radius] = (out, of_group, names, table)
        return cache[radius]

    @cached_property
    def _canonical(self) -> dict[int, list[int]]:
        """Table radius -> for each group, the index of its canonical domain.

        Nested by construction: a group's canonical domain holds the whole of its canonical
        domain of the radius below, so nodes that share a label at one tier share it at every
        tier above (the model and greedy rely on this; on trees it is the only domain).
        """
        radii, tables = self._domain_tables
        groups = len(self._groups[0])
        out: dict[int, list[int]] = {}
        below: list[frozenset[int]] = [frozenset({g}) for g in range(groups)]
        for r in radii:
            doms = [frozenset(d) for d in tables[r]]
            holding: dict[int, list[int]] = {}
            for i, d in enumerate(doms):
                for g in d:
                    holding.setdefault(g, []).append(i)
            memo: dict[frozenset[int], int] = {}
            pick = []
            for g in range(groups):
                lower = below[g]
                if lower not in memo:
                    memo[lower] = next(i for i in holding[g] if lower <= doms[i])
                pick.append(memo[lower])
            out[r] = pick
            below = [doms[i] for i in pick]
        return out

    @cached_property
    def _node_group(self) -> dict[str, int]:
        keys, members = self._groups
        return {n: i for i, k in enumerate(keys) for n in members[k]}

    def node_domains(self, node: str, radius: int) -> list[str]:
        """Every domain of ``radius`` that holds ``node`` (one on trees)."""
        g = self._node_group.get(node)
        return [] if g is None else list(self._domain_index(radius)[1].get(g, []))

    def node_domain(self, node: str, radius: int) -> str | None:
        """The node's canonical domain of ``radius``: on non-tree fabrics one of several.

        Nodes given the same name are pairwise within the radius, so a label built from it
        is true, and canonical domains nest across radii; a placement may still use any of
        :meth:`node_domains`.
        """
        g = self._node_group.get(node)
        if g is None:
            return None
        _, _, names, table = self._domain_index(radius)
        return names[self._canonical[table][g]] if table else names[g]


def nvlink_leaf(domain: str) -> str:
    """The leaf label of an NVLink domain's trays (``nvl:<domain>``)."""
    return f"nvl:{domain}"


# ---- generators ------------------------------------------------------------------

_LINK_FIELDS = frozenset({"a", "b", "gbps", "count", "latency_us"})
# the setters of a pydantic model's slots, called directly (a third faster than
# object.__setattr__ by name, which looks each slot up again)
_SLOTS = BaseModel.__dict__
_SET_DICT = _SLOTS["__dict__"].__set__
_SET_FIELDS = _SLOTS["__pydantic_fields_set__"].__set__
_SET_EXTRA = _SLOTS["__pydantic_extra__"].__set__
_SET_PRIVATE = _SLOTS["__pydantic_private__"].__set__


def _link(a: str, b: str, gbps: float, count: int = 1, latency_us: float = 1.0,
          _new=object.__new__) -> Link:
    """A generated link, built without re-validating what the generator guarantees.

    Same object as ``Link.model_construct`` (all fields set, no validation) without its
    per-field Python loop: a 65,536-GPU SuperPOD has 349,000 links, and validating them
    took 1.6 s, ``model_construct`` 3.9 s, this 0.3 s.
    """
    obj = _new(Link)
    _SET_DICT(obj, {"a": a, "b": b, "gbps": float(gbps), "count": int(count),
                    "latency_us": float(latency_us)})
    _SET_FIELDS(obj, _LINK_FIELDS)
    _SET_EXTRA(obj, None)
    _SET_PRIVATE(obj, None)
    return obj


def _switch(name: str, tier: int) -> Switch:
    return Switch(name=name, tier=tier)


class _Cabling:
    """A generator's links, with the two tables every reader derives from them
    (:attr:`Fabric.attachments`, :attr:`Fabric._switch_adj`) filled as the links are made.

    The tables are what those properties compute from the links (same entries, same order),
    without a second pass over a few hundred thousand links: a 131,072-GPU SuperPOD has
    294,912, and deriving the tables from them took 0.5 s of CPU. ``node`` cables a node to
    a switch, ``uplink`` two switches.
    """

    def __init__(self) -> None:
        self.links: list[Link] = []
        self.att: dict[str, dict[str, float]] = {}
        self.adj: dict[str, dict[str, float]] = {}

    def node(self, node: str, switches: list[str], gbps: float) -> None:
        """``node`` cabled to each of ``switches`` at ``gbps``."""
        gbps = float(gbps)
        self.links += [_link(node, s, gbps) for s in switches]
        att = self.att.get(node)
        if att is None and len(set(switches)) == len(switches):
            self.att[node] = dict.fromkeys(switches, gbps)
            return
        for s in switches:
            if att is None:
                att = self.att[node] = {s: gbps}
            elif s not in att or gbps > att[s]:
                att[s] = gbps

    def uplink(self, a: str, b: str, gbps: float, count: int = 1,
               latency_us: float = 1.0) -> None:
        bw = float(gbps) * int(count)
        self.links.append(_link(a, b, gbps, count, latency_us))
        adj = self.adj
        row = adj.get(a)
        if row is None:
            adj[a] = {b: bw}
        elif b not in row or bw > row[b]:
            row[b] = bw
        row = adj.get(b)
        if row is None:
            adj[b] = {a: bw}
        elif a not in row or bw > row[a]:
            row[a] = bw

    def fabric(self, kind: str, switches: list[Switch]) -> Fabric:
        """The fabric, its tables filled (unless a node shares a switch's name: then the
        properties work them out from the links, as for any fabric)."""
        out = Fabric(kind=kind, switches=switches, links=self.links)
        names = out.switch_names
        if any(n in names for n in self.att) or any(n not in names for n in self.adj) or \
                any(s not in names for s in {s for att in self.att.values() for s in att}):
            return out
        out.__dict__["attachments"] = self.att
        out.__dict__["_switch_adj"] = {s: self.adj.get(s, {}) for s in names}
        return out


def fat_tree_two_tier(nodes: list[str], nodes_per_leaf: int, spines: int,
                      node_gbps: float = 400.0, uplink_gbps: float = 400.0,
                      uplinks_per_leaf_spine: int | None = None, prefix: str = "") -> Fabric:
    """Leaf/spine: each node on one leaf, every leaf to every spine (non-blocking by default)."""
    leaves = (len(nodes) + nodes_per_leaf - 1) // nodes_per_leaf
    switches = [_switch(name=f"{prefix}leaf{i:03d}", tier=1) for i in range(leaves)]
    switches += [_switch(name=f"{prefix}spine{i:02d}", tier=2) for i in range(spines)]
    cab = _Cabling()
    for i, n in enumerate(nodes):
        cab.node(n, [f"{prefix}leaf{i // nodes_per_leaf:03d}"], node_gbps)
    per = uplinks_per_leaf_spine or max(1, nodes_per_leaf // max(1, spines))
    for i in range(leaves):
        for j in range(spines):
            cab.uplink(f"{prefix}leaf{i:03d}", f"{prefix}spine{j:02d}", uplink_gbps, per)
    return cab.fabric("fat-tree-2", switches)


def fat_tree_three_tier(nodes: list[str], nodes_per_leaf: int, leaves_per_pod: int,
                        spines_per_pod: int, cores: int, node_gbps: float = 400.0,
                        uplink_gbps: float = 400.0, prefix: str = "") -> Fabric:
    """Leaf/spine pods joined by a core tier: hop counts 1 (leaf), 3 (pod), 5 (core)."""
    leaves = (len(nodes) + nodes_per_leaf - 1) // nodes_per_leaf
    pods = (leaves + leaves_per_pod - 1) // leaves_per_pod
    switches = [_switch(name=f"{prefix}leaf{i:03d}", tier=1) for i in range(leaves)]
    switches += [_switch(name=f"{prefix}p{p:02d}spine{s}", tier=2)
                 for p in range(pods) for s in range(spines_per_pod)]
    switches += [_switch(name=f"{prefix}core{c:02d}", tier=3) for c in range(cores)]
    cab = _Cabling()
    for i, n in enumerate(nodes):
        cab.node(n, [f"{prefix}leaf{i // nodes_per_leaf:03d}"], node_gbps)
    for i in range(leaves):
        p = i // leaves_per_pod
        for s in range(spines_per_pod):
            cab.uplink(f"{prefix}leaf{i:03d}", f"{prefix}p{p:02d}spine{s}", uplink_gbps,
                       max(1, nodes_per_leaf // spines_per_pod))
    for p in range(pods):
        for s in range(spines_per_pod):
            for c in range(cores):
                cab.uplink(f"{prefix}p{p:02d}spine{s}", f"{prefix}core{c:02d}", uplink_gbps,
                           latency_us=2.0)
    return cab.fabric("fat-tree-3", switches)


def superpod_switch_counts(sus: int) -> tuple[int, int]:
    """(spine, core) switch counts for ``sus`` scalable units, from the reference table.

    Read from ``superpod_b200_component_counts.csv`` (NVIDIA DGX SuperPOD B200 reference
    architecture, 2 to 64 SUs): the row with the smallest SU count >= ``sus`` gives the
    switches per SU, scaled to ``sus`` and rounded up to whole rails.
    """
    import csv
    from importlib import resources

    path = resources.files("hyperplace.data") / "topology" / \
        "superpod_b200_component_counts.csv"
    with path.open() as fh:
        rows = sorted((int(r["su_count"]), int(r["spine_switches"]), int(r["core_switches"]))
                      for r in csv.DictReader(fh))
    su, spines, cores = next((r for r in rows if r[0] >= sus), rows[-1])

    def scaled(count: int) -> int:
        return 8 * -(-count * sus // (su * 8)) if count else 0

    return scaled(spines), scaled(cores)


def superpod_rail_optimized(nodes: list[str], gpus_per_node: int = 8, nodes_per_su: int = 32,
                            nic_gbps: float = 400.0, sus_per_spine_group: int = 8,
                            prefix: str = "") -> Fabric:
    """NVIDIA DGX SuperPOD compute fabric: rail-optimised scalable units (SUs) of 32 nodes.

    Each SU has one leaf per rail (GPU i of every node in the SU -> the SU's rail-i leaf),
    so nodes of one SU are 1 hop apart on every rail. Spine and core counts follow the
    reference architecture (:func:`superpod_switch_counts`): up to 8 SUs a two-tier fabric
    whose rail-r leaves join every rail-r spine (3 hops between SUs); from 16 SUs a core tier
    joins spine groups of ``sus_per_spine_group`` SUs (5 hops between groups).

    A spine has as many core uplinks as leaf downlinks (non-blocking). With 8-GPU nodes up
    to the table's largest row (64 SUs) that reaches every core of its rail, as in the
    reference; where a rail has more cores than a spine has downlinks (beyond the table, or
    4-GPU nodes from 32 SUs), spine ``k`` of every group joins the ``k``-th run of that many
    cores of its rail (round robin). Two spine groups still meet at a core on every rail (5
    hops, the same bandwidth), and the spine-core cables grow with the SUs as the table's
    do, not with their square (512 SUs: 131,072 cables, not 1,048,576).
    """
    rails = gpus_per_node
    sus = (len(nodes) + nodes_per_su - 1) // nodes_per_su
    spine_total, core_total = superpod_switch_counts(sus)
    # a core joins spine groups when the reference table has one, or when the SUs outnumber
    # one spine group (small custom SUs)
    three_tier = core_total > 0 or sus > sus_per_spine_group
    groups = (sus + sus_per_spine_group - 1) // sus_per_spine_group if three_tier else 1
    spines_per_rail = max(1, spine_total // (rails * groups))
    cores_per_rail = max(1, core_total // rails) if three_tier else 0  # >= 1 core per rail
    leaf = [[f"{prefix}su{su:02d}-leaf{r}" for r in range(rails)] for su in range(sus)]
    spine = [[[f"{prefix}g{g}-spine{r}.{k}" for k in range(spines_per_rail)]
              for r in range(rails)] for g in range(groups)]
    core = [[f"{prefix}core{r}.{c}" for c in range(cores_per_rail)] for r in range(rails)]
    switches: list[Switch] = [_switch(name=name, tier=1) for row in leaf for name in row]
    switches += [_switch(name=name, tier=2) for g in spine for row in g for name in row]
    switches += [_switch(name=name, tier=3) for row in core for name in row]
    cab = _Cabling()
    for i, n in enumerate(nodes):
        cab.node(n, leaf[i // nodes_per_su], nic_gbps)
    uplinks = max(1, nodes_per_su // spines_per_rail)  # non-blocking: one uplink per downlink
    for su in range(sus):
        g = su // sus_per_spine_group if three_tier else 0
        for r in range(rails):
            for name in spine[g][r]:
                cab.uplink(leaf[su][r], name, nic_gbps, uplinks)
    if three_tier:
        down = nodes_per_su * min(sus, sus_per_spine_group) // spines_per_rail
        fan = min(cores_per_rail, max(1, down))  # cores each spine reaches
        per_core = max(1, down // fan)
        for g in range(groups):
            for r in range(rails):
                for k, name in enumerate(spine[g][r]):
                    start = k * fan
                    for c in range(fan):
                        cab.uplink(name, core[r][(start + c) % cores_per_rail], nic_gbps,
                                   per_core, 2.0)
    return cab.fabric("superpod-rail", switches)
