"""Fabric domains are true on every graph: each domain's nodes are pairwise within its radius,
and on graphs that are not trees the domains are all the maximal such sets.

The oracle is independent of the domain code: hop counts from :meth:`Fabric.hop_count` (a BFS
per switch, widest shortest path) and maximal cliques of the node-level "within r hops" graph.
"""

from __future__ import annotations

import itertools

import networkx as nx
import pytest
from placement_helpers import line_instance
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperplace.models.fabric import Fabric, Link, Switch, fat_tree_three_tier, fat_tree_two_tier


def _fabric(switches: list[str], switch_links: list[tuple[str, str]],
            attach: dict[str, list[str]]) -> Fabric:
    links = [Link(a=a, b=b, gbps=400) for a, b in switch_links]
    links += [Link(a=n, b=s, gbps=400) for n, ss in attach.items() for s in ss]
    return Fabric(switches=[Switch(name=s) for s in switches], links=links)


def line_of_four_leaves() -> Fabric:
    """Four leaves joined in a line, two nodes on each, and node ``x`` cabled to L1 and L2."""
    attach = {f"n{i}{k}": [f"L{i}"] for i in range(1, 5) for k in "ab"}
    attach["x"] = ["L1", "L2"]
    return _fabric(["L1", "L2", "L3", "L4"], [("L1", "L2"), ("L2", "L3"), ("L3", "L4")], attach)


def _oracle(fabric: Fabric, nodes: list[str], radius: int) -> set[frozenset[str]]:
    graph = nx.Graph()
    graph.add_nodes_from(nodes)
    for a, b in itertools.combinations(nodes, 2):
        h = fabric.hop_count(a, b)
        if h is not None and h <= radius:
            graph.add_edge(a, b)
    return {frozenset(c) for c in nx.find_cliques(graph)}


def _assert_exact(fabric: Fabric) -> None:
    nodes = sorted(fabric.attachments)
    hops = {fabric.hop_count(a, b) for a, b in itertools.combinations(nodes, 2)} - {None}
    assert set(fabric.radii) == hops | {1} if nodes else fabric.radii == []
    for radius in sorted(hops | {1, 2, 3, 5}):
        doms = fabric.domains(radius)
        got = {frozenset(ns) for ns in doms.values()}
        assert got == _oracle(fabric, nodes, radius), radius
        for name, members in doms.items():
            for a, b in itertools.combinations(members, 2):
                assert fabric.hop_count(a, b) <= radius, (radius, name, a, b)
            for n in members:
                assert name in fabric.node_domains(n, radius)
        for n in nodes:
            assert fabric.node_domain(n, radius) in fabric.node_domains(n, radius)
        assert fabric.is_partition(radius) == (sum(map(len, got)) == len(nodes))
    # canonical labels nest: nodes sharing one at a radius share it at every larger radius
    radii = sorted(hops | {1})
    for low, high in zip(radii, radii[1:]):
        for a, b in itertools.combinations(nodes, 2):
            if fabric.node_domain(a, low) == fabric.node_domain(b, low):
                assert fabric.node_domain(a, high) == fabric.node_domain(b, high)


def test_line_of_leaves_has_overlapping_true_domains():
    fabric = line_of_four_leaves()
    assert fabric.radii == [1, 2, 3, 4]
    # hop <= 2: consecutive leaf pairs (not all four leaves, as joining transitively says)
    two = {frozenset(ns) for ns in fabric.domains(2).values()}
    assert frozenset({"n1a", "n1b", "n2a", "n2b", "x"}) in two
    assert frozenset({"n2a", "n2b", "n3a", "n3b", "x"}) in two
    assert not any({"n1a", "n3a"} <= d for d in two)
    # hop <= 1: the dual-homed node is in both leaf domains, the leaves stay apart
    one = {frozenset(ns) for ns in fabric.domains(1).values()}
    assert one == {frozenset({"n1a", "n1b", "x"}), frozenset({"n2a", "n2b", "x"}),
                   frozenset({"n3a", "n3b"}), frozenset({"n4a", "n4b"})}
    assert not fabric.is_partition(1) and not fabric.is_partition(2)
    assert len(fabric.node_domains("x", 1)) == 2
    _assert_exact(fabric)


def test_tree_fabrics_partition_and_keep_their_names():
    nodes = [f"n{i:02d}" for i in range(24)]
    two = fat_tree_two_tier(nodes, nodes_per_leaf=4, spines=2)
    assert two.radii == [1, 3]
    assert sorted(two.domains(1)) == [f"t1:leaf{i:03d}" for i in range(6)]
    assert list(two.domains(3)) == ["t2:leaf000"]
    three = fat_tree_three_tier(nodes, nodes_per_leaf=2, leaves_per_pod=3, spines_per_pod=2,
                                cores=2)
    assert three.radii == [1, 3, 5]
    assert len(three.domains(3)) == 4 and all(three.is_partition(r) for r in (1, 3, 5))
    _assert_exact(two)
    _assert_exact(three)


def test_disconnected_fabric_keeps_islands_apart():
    fabric = _fabric(["A", "B"], [], {"a1": ["A"], "a2": ["A"], "b1": ["B"]})
    assert fabric.radii == [1]
    assert {frozenset(v) for v in fabric.domains(5).values()} == {
        frozenset({"a1", "a2"}), frozenset({"b1"})}


@st.composite
def random_fabrics(draw) -> Fabric:
    k = draw(st.integers(2, 6))
    switches = [f"s{i}" for i in range(k)]
    # a random connected switch graph: a random tree plus extra edges
    edges = {(f"s{draw(st.integers(0, i - 1))}", f"s{i}") for i in range(1, k)}
    for a, b in draw(st.lists(st.tuples(st.integers(0, k - 1), st.integers(0, k - 1)),
                              max_size=4)):
        if a != b:
            edges.add((f"s{min(a, b)}", f"s{max(a, b)}"))
    attach = {}
    for i in range(draw(st.integers(1, 7))):
        first = draw(st.integers(0, k - 1))
        second = draw(st.one_of(st.none(), st.integers(0, k - 1)))
        attach[f"n{i}"] = sorted({f"s{first}"} | ({f"s{second}"} if second is not None else set()))
    return _fabric(switches, sorted(edges), attach)


@settings(max_examples=60, deadline=None)
@given(random_fabrics())
def test_random_graphs_give_all_maximal_sets_within_each_radius(fabric):
    _assert_exact(fabric)


# ---- every backend on a fabric that is not a tree (issue #8, case 1) ------------------

SOLVERS = ["greedy", "cpsat", "milp", "auto"]


@pytest.mark.parametrize("solver", SOLVERS)
@pytest.mark.parametrize("hops", [1, 2])
def test_line_of_leaves_plans_keep_the_hop_limit(solver, hops):
    from placement_helpers import job

    from hyperplace.check import check
    from hyperplace.solvers.driver import solve_placement

    jobs = [job("hi", tp=8, replicas=2, dp_hop=hops, priority="high"),
            job("mid", tp=8, replicas=2, dp_hop=hops), job("lo", tp=8, priority="low")]
    inst = line_instance(jobs, dual_homed=True)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert "hi" in {j.job for j in plan.jobs}
    fabric = inst.clusters[0].network
    by_label: dict[tuple[int, str], set[str]] = {}
    for j in plan.jobs:  # the plan's domain labels are true: same label, within the radius
        for d in j.topology_assignment.domains:
            by_label.setdefault((3, d.values[1]), set()).add(d.values[3])
            by_label.setdefault((1, d.values[2]), set()).add(d.values[3])
    for (radius, _), nodes in by_label.items():
        for a, b in itertools.combinations(sorted(nodes), 2):
            assert fabric.hop_count(a, b) <= radius
    # and consistent (#23): nodes of a job one hop apart (dual-homed x beside n1 or n2) share
    # one leaf value, not their switch groups' (t1:L1+L2 vs t1:L1); leaves nest in spines
    for j in plan.jobs:
        nodes = [d.values[3] for d in j.topology_assignment.domains]
        if all(fabric.hop_count(a, b) <= 1 for a, b in itertools.combinations(nodes, 2)):
            assert len({d.values[2] for d in j.topology_assignment.domains}) == 1, j
        spine_of = {}
        for d in j.topology_assignment.domains:
            assert spine_of.setdefault(d.values[2], d.values[1]) == d.values[1]
    if hops == 1:
        (hi,) = [j for j in plan.jobs if j.job == "hi"]
        assert "x" in hi.node_names and len({d.values[2] for d in hi.topology_assignment.domains}) == 1


@pytest.mark.parametrize("solver", SOLVERS)
def test_line_of_leaves_uses_overlapping_domains(solver):
    from placement_helpers import job

    from hyperplace.check import check
    from hyperplace.solvers.driver import solve_placement

    jobs = [job("a", tp=8, replicas=2, dp_hop=2), job("b", tp=8, replicas=2, dp_hop=2)]
    inst = line_instance(jobs, dual_homed=False)
    plan = solve_placement(inst, solver=solver, budget_s=10)
    assert check(plan, inst) == []
    assert {j.job for j in plan.jobs} == {"a", "b"}
