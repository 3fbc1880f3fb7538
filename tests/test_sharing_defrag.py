"""Defragmentation by migration (#14): a move that frees a leaf for a waiting job, every
backend, every plan through the checker."""

from __future__ import annotations

import pytest

from hyperplace.check import check
from hyperplace.models.instance import RunningJob
from hyperplace.solvers.defrag import defrag, defrag_instance
from placement_helpers import instance, job, node


def _fragmented():
    # leaf 0: n0 (a: 4 GPUs), n1 (c: 4 GPUs); leaf 1: n2 (b: 4 GPUs), n3 free.
    # "big" needs 2 x 8 GPUs within one leaf: moving b (40 GPU-s lost) frees leaf 1, moving
    # a and c (4,800 GPU-s) would free leaf 0.
    nodes = [node("n0", allocated={g: "a" for g in range(4)}),
             node("n1", allocated={g: "c" for g in range(4)}),
             node("n2", allocated={g: "b" for g in range(4)}), node("n3")]
    inst = instance(nodes, [job("big", replicas=2, dp_hop=2)])
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name="a", checkpoint_age_s=600), RunningJob(name="b", checkpoint_age_s=10),
        RunningJob(name="c", checkpoint_age_s=600)]})
    specs = [job(n, tp=4) for n in ("a", "b", "c")]
    return inst.model_copy(update={"spec": spec}), specs


def test_defrag_moves_one_job_to_free_a_leaf_for_the_waiting_job(solver):
    inst, specs = _fragmented()
    result = defrag(inst, specs, "big", solver=solver)
    assert result.plan is not None, result.message
    assert [(m.job, m.gpus, m.lost_gpu_seconds) for m in result.migrations] == [("b", 4, 40)]
    moved = [m.job for m in result.migrations]
    assert check(result.plan, defrag_instance(inst, specs, moved, "big")) == []
    assert {g.node for p in result.plan.placements if p.job == "big" for g in p.gpus} == {"n2", "n3"}


def test_defrag_proposes_nothing_when_the_job_still_would_not_fit(solver):
    inst, specs = _fragmented()
    result = defrag(inst, specs[:1], "big", solver=solver)  # only a may move: no leaf frees
    assert result.plan is None and result.migrations == []


def test_defrag_refuses_bad_input():
    inst, specs = _fragmented()
    with pytest.raises(ValueError, match="not a pending job"):
        defrag(inst, specs, "nope")


def test_cli_defrag(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from hyperplace.cli import app

    inst, specs = _fragmented()
    path, jobs = tmp_path / "inst.yaml", tmp_path / "running.yaml"
    path.write_text(yaml.safe_dump(inst.to_doc()))
    jobs.write_text(yaml.safe_dump_all([s.to_doc() for s in specs]))
    runner = CliRunner()
    out = runner.invoke(app, ["defrag", "--instance", str(path), "--for", "big",
                              "--running", str(jobs), "--budget", "10"])
    assert out.exit_code == 0, out.output
    assert "migrations" in out.output and "n2" in out.output
    bad = runner.invoke(app, ["defrag", "--instance", str(path), "--for", "nope",
                              "--running", str(jobs)])
    assert bad.exit_code == 2 and "--for" in bad.output
