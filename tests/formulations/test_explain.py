"""Pending reasons: codes from the formulation, words from explain.py."""

from __future__ import annotations

import ast
import inspect

import pytest
from placement_helpers import instance, job, node

import hyperplace.formulations.explain as explain_module
from hyperplace.formulations.explain import explain, render_reason
from hyperplace.formulations.mapping import Assignment
from hyperplace.formulations.placement import PendingReason, PlacementProblem, ReasonCode


def test_every_reason_code_has_words():
    for code in ReasonCode:
        text = render_reason(PendingReason(code, gpus=16, available=8, required=800, group="tp"))
        assert text and "16" in text


def test_explain_does_not_import_a_solver():
    tree = ast.parse(inspect.getsource(explain_module))
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.startswith("hyperplace.solvers") for m in modules)


def test_static_reasons_without_a_probe():
    p = PlacementProblem(instance([node("a", "A100-80")], [
        job("h100-only", tp=8, accel="H100"), job("too-big", tp=8, replicas=2, accel="A100", nvlink=600),
        job("one-node", tp=16, tp_hop=0, accel="A100", nvlink=600)]))
    reasons = explain(p, Assignment())
    assert "the cluster has none" in reasons[0][0] and "A100-80 x8" in reasons[0][0]
    assert reasons[1] == ["group tp needs 16 A100 GPUs; 8 are free"]
    assert "maxHopCount 0 (one node)" in reasons[2][0]


@pytest.mark.parametrize("fits", [True, False])
def test_contention_needs_the_probe(fits):
    p = PlacementProblem(instance([node("n0")], [job("a", tp=8), job("b", tp=8)]))
    from hyperplace.formulations.mapping import PlacedUnit

    taken = Assignment(units={0: [PlacedUnit(0, "tp/0", [("n0", tuple(range(8)))])]})
    no_probe = explain(p, taken)
    assert "per-job analysis skipped" in no_probe[1][0]
    probed = explain(p, taken, fits_alone=lambda jv: fits)
    assert ("outranked by a" in probed[1][0]) if fits else probed[1][0].startswith("fragmented")
