"""Trace loading, the job mapping rule, offered load, and `hyperplace simulate` input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import run_main

from hyperplace.errors import InputError
from hyperplace.instances import load_instance
from hyperplace.sim.traces import load_trace
from hyperplace.sim.workload import (
    FM_SIZE_WEIGHTS,
    foundation_model_jobs,
    offered_load,
    scale_to_load,
    trace_jobs,
)


def run_cli(args: list[str], capsys) -> tuple[int, str, str]:
    code = run_main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_builtin_traces_load_in_submit_order():
    philly = load_trace("philly")
    assert len(philly.rows) == 2000 and philly.rows[0].submit_s == 0
    assert all(a.submit_s <= b.submit_s for a, b in zip(philly.rows, philly.rows[1:]))
    ali = load_trace("alibaba-2023")
    assert ali.rows and ali.skipped > 0  # CPU-only and fractional-GPU pods left out
    assert any(r.gpu_types for r in ali.rows)
    window = load_trace("philly", start_s=3600, end_s=7200)
    assert window.rows[0].submit_s == 0 and window.rows[-1].submit_s < 3600


def test_mapping_rule_and_load_scaling():
    inst = load_instance("mixed-a100-h100")
    wl = trace_jobs(load_trace("philly", end_s=12 * 3600), inst)
    for j in wl.jobs:
        units = j.manifest.units()
        if j.gpus <= 8:
            assert len(units) == 1 and units[0].gpus == j.gpus
        else:
            assert all(u.gpus == 8 for u in units) and j.gpus % 8 == 0
    from hyperplace.sim.workload import MODEL_DRAW

    sizes = {m: top for top, choices in MODEL_DRAW for m, _ in choices}
    for j in wl.jobs:  # every job got a model its size can train (first row that has it)
        rows = [top for top, choices in MODEL_DRAW if j.manifest.spec.model in dict(choices)]
        assert rows and j.manifest.spec.model in sizes
    full = trace_jobs(load_trace("philly"), inst)
    scale_to_load(full.jobs, inst, 0.8)
    assert offered_load(full.jobs, inst) == pytest.approx(0.8)
    ali = trace_jobs(load_trace("alibaba-2023", limit=300), load_instance("alibaba-2023"))
    assert any(j.manifest.spec.tolerations for j in ali.jobs)


def test_foundation_model_workload_matches_acmetrace_mean_and_is_seeded():
    mean = sum(s * w for s, w in FM_SIZE_WEIGHTS.items())
    assert sum(FM_SIZE_WEIGHTS.values()) == pytest.approx(1.0)
    assert abs(mean - 26.8) < 0.5 and max(FM_SIZE_WEIGHTS) == 1024
    inst = load_instance("superpod-h100-4su")
    trace = load_trace("philly", end_s=24 * 3600)
    a = foundation_model_jobs(trace, inst, seed=4)
    b = foundation_model_jobs(trace, inst, seed=4)
    assert [j.manifest for j in a.jobs] == [j.manifest for j in b.jobs]
    assert any(j.gpus >= 64 for j in a.jobs)
    assert any(len({u.group for u in j.manifest.units()}) > 1 for j in a.jobs)  # PP stages


@pytest.mark.parametrize("content, message", [
    ("submit_time_s,num_gpus\n0,1\n", "line 1: missing column duration_s"),
    ("submit_time_s,duration_s,num_gpus\n0,10,1\n5,-3,1\n", "line 3: duration_s: must be >= 0"),
    ("submit_time_s,duration_s,num_gpus\n0,nan,1\n", "line 2: duration_s: must be finite"),
    ("submit_time_s,duration_s,num_gpus\n0,inf,1\n", "line 2: duration_s: must be finite"),
    ("submit_time_s,duration_s,num_gpus\n10,5,1\n4,5,1\n",
     "line 3: submit time 4 is earlier than line 2's 10"),
    ("submit_time_s,duration_s,num_gpus\n0,5,0\n", "line 2: num_gpus: must be >= 1"),
    ("submit_time_s,duration_s,num_gpus\n0,5,abc\n", "line 2: num_gpus: not a number"),
])
def test_bad_trace_is_one_line_exit_2(tmp_path: Path, capsys, content: str, message: str):
    bad = tmp_path / "bad.csv"
    bad.write_text(content)
    with pytest.raises(InputError):
        load_trace(str(bad))
    code, _, err = run_cli(["simulate", "--trace", str(bad), "--policy", "fifo",
                            "--no-progress"], capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"error: {bad}: ") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--load", "-1"], "--load"), (["--load", "lots"], "--load"),
    (["--policy", "magic"], "unknown policy"), (["--window", "5:1"], "--window"),
    (["--instance", "nope"], "nope"), (["--trace", "missing.csv"], "no such trace file"),
])
def test_bad_options_are_one_line_exit_2(capsys, args, message):
    code, _, err = run_cli(["simulate", "--no-progress", *args], capsys)
    assert code == 2 and err.count("\n") == 1 and message in err


def test_simulate_cli_writes_outputs(tmp_path: Path, capsys):
    code, out, _ = run_cli(["simulate", "--window", "0:3600", "--policy", "engine",
                            "--policy", "fifo-firstfit", "--budget", "0.5", "--load", "trace",
                            "--no-progress", "--no-charts", "-o", str(tmp_path)], capsys)
    assert code == 0, out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [p["policy"] for p in summary["policies"]] == ["engine", "fifo"]
    w = summary["workload"]
    assert w["offered_load"] == pytest.approx(w["trace_offered_load"]) and w["offered_load"] > 0
    assert "reached within the arrival window" in out
    for name in ("policies.csv", "jobs.csv", "timeline.csv", "rounds.csv"):
        assert (tmp_path / name).stat().st_size > 0
    assert "engine vs best peer" in out
