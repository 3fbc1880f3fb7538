"""Priority weights and tiers: one GPU of a level outweighs every GPU of all lower levels."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from hyperplace.formulations.placement.phases import (
    MAX_PHASE_OBJECTIVE,
    demand_by_level,
    priority_phases,
    phase_weights,
)
from hyperplace.models.priority import priority_weights, weighted_demand


def test_weights_by_hand():
    # level 1: 10 GPUs pending, level 5: 4 pending, 8 free
    w = priority_weights([(1, 6), (5, 4), (1, 4)], free_gpus=8)
    assert w == {1: 1, 5: 1 + 1 * 8}  # level-1 demand capped by the free GPUs
    assert weighted_demand([(5, 4), (1, 2)], w) == 9 * 4 + 2


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(1, 16)), min_size=1, max_size=8),
       st.integers(1, 64))
def test_one_gpu_outweighs_all_lower_levels(demands, free):
    w = priority_weights(demands, free)
    per_level = demand_by_level(demands)
    for level in w:
        below = sum(w[q] * min(per_level[q], free) for q in w if q < level)
        assert w[level] > below


def test_many_levels_become_several_exact_tiers():
    demand = {level: 72 for level in range(1, 8)}
    tiers = priority_phases(demand, free_gpus=256)
    assert len(tiers) > 1
    assert [lvl for tier in tiers for lvl in tier] == [7, 6, 5, 4, 3, 2, 1]
    weights = phase_weights(demand, tiers, 256)
    for tier in tiers:
        assert sum(weights[q] * min(demand[q], 256) for q in tier) < MAX_PHASE_OBJECTIVE


def test_few_levels_are_one_tier():
    assert priority_phases({1: 8, 2: 8, 3: 8}, free_gpus=64) == [[3, 2, 1]]
