"""The load search of the over-time benches (bench/bench_simulate.py, bench/bench_fedsim.py):
the lowest offered load at which the best probe peer reaches a target utilisation."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["bracket_load"]


def bracket_load(probe: Callable[[float], tuple[float, dict]], target: float, probes: int
                 ) -> tuple[float | None, float, dict]:
    """``(load, utilisation, facts)`` at which ``probe(load) -> (utilisation, facts)``
    reaches ``target``; ``load`` None when it cannot (the workload's ``load_note`` says the
    jobs offer no more, or the load passed 10).

    Loads are probed from 1.0 in steps of x1.5 (up while the target is not reached, down
    while it is, so the bracket is one step wide), then ``probes`` bisection steps on the
    log of the load; the lowest probed load that reached the target is kept."""
    load = 1.0
    u, facts = probe(load)
    if u >= target:
        hi, hi_u = load, u
        while load > 0.2:
            load /= 1.5
            u, _ = probe(load)
            if u < target:
                break
            hi, hi_u = load, u
        lo = load
    else:
        while u < target:
            if facts.get("load_note") or load > 10:  # the jobs offer no more than this
                return None, u, facts
            lo = load
            load *= 1.5
            u, facts = probe(load)
        hi, hi_u = load, u
    for _ in range(probes):
        mid = math.sqrt(lo * hi)
        u, _ = probe(mid)
        if u >= target:
            hi, hi_u = mid, u
        else:
            lo = mid
    return hi, hi_u, facts
