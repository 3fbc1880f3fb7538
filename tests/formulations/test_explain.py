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


def test_the_largest_free_set_is_looked_for_once_per_kind_of_node(monkeypatch):
    """largest_piece reads a node's pair rate, GPU count and free count: of 64 nodes alike
    but for their leaf it asks one per free count, and says what asking all of them says
    (the same largest set, on the same first node)."""
    nodes = [node(f"n{i:02d}", allocated={g: f"r{i}" for g in range(i % 3 + 1)})
             for i in range(64)]
    inst = instance(nodes, [job("big", tp=8), job("slow", tp=8, nvlink=400)], nodes_per_leaf=4)
    p = PlacementProblem(inst)
    asked: list[str] = []
    real = PlacementProblem.gpus_eligible

    def spy(self, uc, n):
        asked.append(n.name)
        return real(self, uc, n)

    monkeypatch.setattr(PlacementProblem, "gpus_eligible", spy)
    fewer = explain(p, Assignment())
    assert len(asked) == 3 * 2  # 3 free counts, 2 job shapes
    monkeypatch.setattr(explain_module._Facts, "distinct",
                        lambda self, t: self.nodes_by_type[t])
    asked.clear()
    every = explain(PlacementProblem(inst), Assignment())
    assert len(asked) == 64 * 2
    assert fewer == every
    assert any("the largest such free set is 7 GPUs on node n00" in r
               for r in fewer[p.jobs[0].index])
