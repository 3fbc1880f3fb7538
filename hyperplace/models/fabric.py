"""The network between nodes: switches, links, hop counts, bottleneck bandwidth, domain tiers.

Hop count between two nodes is the number of switches on the shortest path: same leaf
switch = 1, leaf-spine-leaf = 3, through a core = 5; a node to itself = 0 (NVLink). So a
manifest's ``maxHopCount: 1`` means "on one leaf switch", as the seed intends.

Domains: the nodes whose pairwise hop count is at most ``h`` (``h`` = 1, 3, 5, ...) form the
tier-``(h+1)/2`` domains, in the spirit of Volcano HyperNodes (tier 1 = closest). On tree
fabrics (fat-trees, rail-optimised SuperPODs) "hop <= h" is an equivalence, so these
domains are exact; for arbitrary explicit graphs they are the transitive closure and the
checker still verifies every pair.
"""

from __future__ import annotations

from collections import deque
from functools import cached_property

from pydantic import Field, model_validator

from hyperplace.models.base import HPModel


class Switch(HPModel):

    name: str = Field(min_length=1)
    tier: int = Field(default=1, ge=1, le=4, description="1 = leaf, 2 = spine, 3 = core")


class Link(HPModel):
    """A cable bundle between two endpoints (a node or a switch)."""


    a: str
    b: str
    gbps: float = Field(gt=0, description="per-link line rate, Gb/s")
    count: int = Field(default=1, ge=1, description="parallel links (rails, bonded cables)")
    latency_us: float = Field(default=1.0, ge=0)


class Fabric(HPModel):
    """A graph of switches and links. Nodes appear only as link endpoints."""


    kind: str = Field(default="explicit", description="how it was made, e.g. fat-tree-2")
    switches: list[Switch] = Field(default_factory=list)
    links: list[Link] = Field(default_factory=list)

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
            for node, s in ((link.a, link.b), (link.b, link.a)):
                if s in sw and node not in sw:
                    out.setdefault(node, {})[s] = max(out.get(node, {}).get(s, 0.0), link.gbps)
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

    def path(self, u: str, v: str) -> tuple[int | None, float | None]:
        """(hop count, bottleneck Gb/s) between nodes ``u`` and ``v``; (None, None) if apart."""
        if u == v:
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
        """Nodes grouped by the set of switches they attach to (a rail group or a leaf)."""
        members: dict[frozenset[str], list[str]] = {}
        for node, att in self.attachments.items():
            members.setdefault(frozenset(att), []).append(node)
        keys = sorted(members, key=lambda k: sorted(k))
        return keys, members

    def _group_dist(self, a: frozenset[str]) -> dict[str, int]:
        """Switch distances from the nearest switch of group ``a`` (one multi-source BFS)."""
        cache = self.__dict__.setdefault("_group_dist_cache", {})
        if a not in cache:
            dist = {s: 0 for s in a}
            queue = deque(a)
            adj = self._switch_adj
            while queue:
                u = queue.popleft()
                for v in adj[u]:
                    if v not in dist:
                        dist[v] = dist[u] + 1
                        queue.append(v)
            cache[a] = dist
        return cache[a]

    def _group_hops(self, a: frozenset[str], b: frozenset[str]) -> int | None:
        if a == b:
            return 1
        dist = self._group_dist(a)
        reach = [dist[s] for s in b if s in dist]
        return min(reach) + 1 if reach else None

    @cached_property
    def radii(self) -> list[int]:
        """Hop radii (1, 3, 5, ...) that define the tiers of this fabric, lowest first."""
        keys, _ = self._groups
        if not keys:
            return []
        seen = {1}
        rep = keys[0]
        for other in keys:
            h = self._group_hops(rep, other)
            if h is not None:
                seen.add(h)
        # also probe from one group per distinct first-level neighbourhood
        for other in keys[1:]:
            h = self._group_hops(keys[-1], other)
            if h is not None:
                seen.add(h)
        return sorted(seen)

    def domains(self, radius: int) -> dict[str, list[str]]:
        """Domain name -> nodes, for nodes pairwise within ``radius`` hops (tree fabrics)."""
        return dict(self._domains_cache(radius))

    def _domains_cache(self, radius: int) -> dict[str, list[str]]:
        cache = self.__dict__.setdefault("_dom_cache", {})
        if radius in cache:
            return cache[radius]
        keys, members = self._groups
        parent = list(range(len(keys)))

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i in range(len(keys)):
            for j in range(i + 1, len(keys)):
                if find(i) == find(j):
                    continue
                h = self._group_hops(keys[i], keys[j])
                if h is not None and h <= radius:
                    parent[find(j)] = find(i)
        by_root: dict[int, list[int]] = {}
        for i in range(len(keys)):
            by_root.setdefault(find(i), []).append(i)
        out: dict[str, list[str]] = {}
        for idxs in by_root.values():
            switches = sorted(s for i in idxs for s in keys[i])
            nodes = sorted(n for i in idxs for n in members[keys[i]])
            out[f"t{(radius + 1) // 2}:{switches[0]}"] = nodes
        cache[radius] = out
        return out

    def node_domain(self, node: str, radius: int) -> str | None:
        cache = self.__dict__.setdefault("_node_dom_cache", {})
        if radius not in cache:
            cache[radius] = {n: d for d, ns in self._domains_cache(radius).items() for n in ns}
        return cache[radius].get(node)


# ---- generators ------------------------------------------------------------------

def fat_tree_two_tier(nodes: list[str], nodes_per_leaf: int, spines: int,
                      node_gbps: float = 400.0, uplink_gbps: float = 400.0,
                      uplinks_per_leaf_spine: int | None = None, prefix: str = "") -> Fabric:
    """Leaf/spine: each node on one leaf, every leaf to every spine (non-blocking by default)."""
    leaves = (len(nodes) + nodes_per_leaf - 1) // nodes_per_leaf
    switches = [Switch(name=f"{prefix}leaf{i:03d}", tier=1) for i in range(leaves)]
    switches += [Switch(name=f"{prefix}spine{i:02d}", tier=2) for i in range(spines)]
    links = [Link(a=n, b=f"{prefix}leaf{i // nodes_per_leaf:03d}", gbps=node_gbps)
             for i, n in enumerate(nodes)]
    per = uplinks_per_leaf_spine or max(1, nodes_per_leaf // max(1, spines))
    links += [Link(a=f"{prefix}leaf{i:03d}", b=f"{prefix}spine{j:02d}", gbps=uplink_gbps, count=per)
              for i in range(leaves) for j in range(spines)]
    return Fabric(kind="fat-tree-2", switches=switches, links=links)


def fat_tree_three_tier(nodes: list[str], nodes_per_leaf: int, leaves_per_pod: int,
                        spines_per_pod: int, cores: int, node_gbps: float = 400.0,
                        uplink_gbps: float = 400.0, prefix: str = "") -> Fabric:
    """Leaf/spine pods joined by a core tier: hop counts 1 (leaf), 3 (pod), 5 (core)."""
    leaves = (len(nodes) + nodes_per_leaf - 1) // nodes_per_leaf
    pods = (leaves + leaves_per_pod - 1) // leaves_per_pod
    switches = [Switch(name=f"{prefix}leaf{i:03d}", tier=1) for i in range(leaves)]
    switches += [Switch(name=f"{prefix}p{p:02d}spine{s}", tier=2)
                 for p in range(pods) for s in range(spines_per_pod)]
    switches += [Switch(name=f"{prefix}core{c:02d}", tier=3) for c in range(cores)]
    links = [Link(a=n, b=f"{prefix}leaf{i // nodes_per_leaf:03d}", gbps=node_gbps)
             for i, n in enumerate(nodes)]
    for i in range(leaves):
        p = i // leaves_per_pod
        links += [Link(a=f"{prefix}leaf{i:03d}", b=f"{prefix}p{p:02d}spine{s}", gbps=uplink_gbps,
                       count=max(1, nodes_per_leaf // spines_per_pod))
                  for s in range(spines_per_pod)]
    for p in range(pods):
        for s in range(spines_per_pod):
            links += [Link(a=f"{prefix}p{p:02d}spine{s}", b=f"{prefix}core{c:02d}", gbps=uplink_gbps,
                           latency_us=2.0) for c in range(cores)]
    return Fabric(kind="fat-tree-3", switches=switches, links=links)


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
    switches: list[Switch] = []
    links: list[Link] = []
    for su in range(sus):
        for r in range(rails):
            switches.append(Switch(name=f"{prefix}su{su:02d}-leaf{r}", tier=1))
    for g in range(groups):
        for r in range(rails):
            for k in range(spines_per_rail):
                switches.append(Switch(name=f"{prefix}g{g}-spine{r}.{k}", tier=2))
    for r in range(rails):
        for c in range(cores_per_rail):
            switches.append(Switch(name=f"{prefix}core{r}.{c}", tier=3))
    for i, n in enumerate(nodes):
        su = i // nodes_per_su
        links += [Link(a=n, b=f"{prefix}su{su:02d}-leaf{r}", gbps=nic_gbps) for r in range(rails)]
    uplinks = max(1, nodes_per_su // spines_per_rail)  # non-blocking: one uplink per downlink
    for su in range(sus):
        g = su // sus_per_spine_group if three_tier else 0
        links += [Link(a=f"{prefix}su{su:02d}-leaf{r}", b=f"{prefix}g{g}-spine{r}.{k}",
                       gbps=nic_gbps, count=uplinks)
                  for r in range(rails) for k in range(spines_per_rail)]
    if three_tier:
        down = nodes_per_su * min(sus, sus_per_spine_group) // spines_per_rail
        per_core = max(1, down // cores_per_rail)
        for g in range(groups):
            links += [Link(a=f"{prefix}g{g}-spine{r}.{k}", b=f"{prefix}core{r}.{c}", gbps=nic_gbps,
                           count=per_core, latency_us=2.0)
                      for r in range(rails) for k in range(spines_per_rail)
                      for c in range(cores_per_rail)]
    return Fabric(kind="superpod-rail", switches=switches, links=links)
