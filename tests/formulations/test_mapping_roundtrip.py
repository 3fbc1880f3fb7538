"""encode and decode, directly (#20): on random small rounds, greedy's assignment encoded as
model values satisfies the model, decodes to GPUs with no job dropped, and the decoded
assignment encodes back to the same values (encode o decode is the identity on what encode
writes); the plan of the decoded assignment passes the independent checker."""

from __future__ import annotations

from hypothesis import HealthCheck, assume, given, settings
from placement_helpers import rounds

from hyperplace.check import check
from hyperplace.formulations.mapping import decode, encode, to_plan
from hyperplace.formulations.placement import PlacementProblem, build_model
from hyperplace.models.result import SolveStats, SolveStatus
from hyperplace.solvers.heuristics.greedy import solve_greedy
from hyperplace.solvers.params import GreedyParams


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(rounds())
def test_decode_inverts_encode(inst):
    p = PlacementProblem(inst)
    greedy = solve_greedy(p, GreedyParams())
    pm = build_model(p)
    values = encode(pm, greedy)
    assume(values is not None and not pm.lm.violated(values))  # greedy's plan is in the model
    decoded = decode(pm, values)
    assert decoded.notes == {}
    assert set(decoded.units) == set(greedy.units)
    for j, units in decoded.units.items():  # each job's units, each whole, as many GPUs
        assert sorted(u.unit for u in units) == sorted(u.unit for u in greedy.units[j])
        assert sum(len(g) for u in units for _, g in u.pieces) == p.jobs[j].gpus
    again = encode(pm, decoded)
    assert again == values
    for o in pm.lm.objectives:
        assert pm.lm.evaluate(o.terms, again) == pm.lm.evaluate(o.terms, values)
    stats = SolveStats(status=SolveStatus.FEASIBLE, solver="roundtrip")
    assert check(to_plan(p, decoded, stats, {}), inst) == []
