"""The SuperPOD generator follows the reference architecture's switch counts, row by row."""

from __future__ import annotations

import csv
from collections import Counter
from importlib import resources

import pytest

from hyperplace.models.fabric import superpod_rail_optimized

ROWS = list(csv.DictReader(
    (resources.files("hyperplace.data") / "topology"
     / "superpod_b200_component_counts.csv").open()))


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['su_count']}SU")
def test_switch_counts_match_the_reference_table(row):
    nodes = [f"n{i:05d}" for i in range(int(row["node_count"]))]
    fabric = superpod_rail_optimized(nodes)
    tiers = Counter(s.tier for s in fabric.switches)
    assert tiers[1] == int(row["leaf_switches"])
    assert tiers[2] == int(row["spine_switches"])
    assert tiers[3] == int(row["core_switches"])
    node_links = sum(1 for link in fabric.links if link.a in set(nodes))
    assert node_links == int(row["cables_node_leaf"])
    # same SU: one leaf apart on every rail; across SUs 3 hops (5 through a core)
    assert fabric.hop_count(nodes[0], nodes[1]) == 1
    far = fabric.hop_count(nodes[0], nodes[-1])
    assert far == (5 if int(row["core_switches"]) else 3)
