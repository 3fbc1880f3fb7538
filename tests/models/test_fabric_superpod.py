"""The SuperPOD generator follows the reference architecture's switch counts, row by row."""

from __future__ import annotations

import csv
from collections import Counter
from importlib import resources

import pytest

from hyperplace.models.fabric import (
    Fabric,
    fat_tree_three_tier,
    fat_tree_two_tier,
    superpod_rail_optimized,
)

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


@pytest.mark.parametrize("make", [
    lambda names: superpod_rail_optimized(names, 8, 4, sus_per_spine_group=2),
    lambda names: superpod_rail_optimized(names),
    lambda names: fat_tree_two_tier(names, 4, 3),
    lambda names: fat_tree_three_tier(names, 4, 2, 2, 3),
])
def test_generated_tables_are_what_the_links_give(make):
    """A generator fills the attachment and switch tables as it cables (#25); they equal,
    entry for entry and in order, what the properties derive from its links."""
    gen = make([f"n{i:03d}" for i in range(70)])
    assert "attachments" in gen.__dict__ and "_switch_adj" in gen.__dict__
    derived = Fabric(kind=gen.kind, switches=gen.switches, links=gen.links)
    for table in ("attachments", "_switch_adj"):
        mine, theirs = getattr(gen, table), getattr(derived, table)
        assert mine == theirs
        assert list(mine) == list(theirs)
        assert all(list(mine[k]) == list(theirs[k]) for k in mine)


def test_generated_tables_left_to_the_links_when_a_node_is_named_like_a_switch():
    gen = fat_tree_two_tier(["n0", "leaf000", "n2"], 2, 1)
    assert "attachments" not in gen.__dict__
    derived = Fabric(kind=gen.kind, switches=gen.switches, links=gen.links)
    assert gen.attachments == derived.attachments and gen._switch_adj == derived._switch_adj
