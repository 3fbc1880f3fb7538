"""The over-time benches' load search (hyperplace.benchkit.loads), on probes whose answer is
known: utilisation rising with the load up to a cap."""

from __future__ import annotations

import math

import pytest

from hyperplace.benchkit.loads import bracket_load


def _probe(slope: float, cap: float, calls: list[float]):
    def probe(load: float) -> tuple[float, dict]:
        calls.append(load)
        return min(cap, slope * load), ({"load_note": "no more"} if slope * load > cap else {})
    return probe


@pytest.mark.parametrize(("slope", "target"), [(0.7, 0.8), (0.9, 0.5), (0.3, 0.85)])
def test_the_lowest_probed_load_that_reaches_the_target_within_the_bisection(slope, target):
    calls: list[float] = []
    load, u, _ = bracket_load(_probe(slope, 1.0, calls), target, probes=6)
    exact = target / slope
    assert load is not None and u >= target and load >= exact - 1e-12
    # the bracket starts one x1.5 step wide and halves (in log) at each probe
    assert math.log(load / exact) <= math.log(1.5) / 2 ** 6 + 1e-12
    assert load == min(x for x in calls if slope * x >= target)


def test_a_target_the_jobs_cannot_offer_is_unreachable():
    load, u, facts = bracket_load(_probe(0.5, 0.6, []), 0.8, probes=4)
    assert load is None and u == 0.6 and facts["load_note"]
