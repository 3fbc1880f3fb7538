"""Trace loading, the job mapping rule, offered load, and `hyperplace simulate` input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli_run import run_main

from hyperplace.errors import InputError
from hyperplace.instances import load_instance
from hyperplace.sim.traces import MAX_ROWS, load_trace, repeat_rows
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
    # a repeated name failed in the replay as "arrivals[0].metadata.name: job 'a' is running"
    ("submit_time_s,duration_s,num_gpus,name\n0,5,1,a\n1,5,1,b\n2,5,1,a\n",
     "line 4: name: 'a' is line 2's name too"),
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
    (["--repeat", "0"], "--repeat"), (["--repeat", "101"], "--repeat"),
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
    # the engine's forecast accuracy is said, not only written to summary.json (newuser)
    from hyperplace.solvers.schedule import duration_words

    f = summary["policies"][0]["forecast"]
    flat = " ".join(out.split())
    assert (f"engine forecasts of {f['jobs']:,} jobs, scored on the {f['forecast_scored']}: "
            f"|planned - actual start| median {duration_words(f['median_abs_error_s'])}, p90 "
            f"{duration_words(f['p90_abs_error_s'])}") in flat
    assert "fifo forecasts" not in flat and summary["policies"][1].get("forecast") is None


OK_TRACE = "submit_time_s,duration_s,num_gpus\n0,100,8\n10,100,8\n"


@pytest.mark.parametrize("content, args, message", [
    # issue 21's bad-input list: each one line naming the file or option and the field
    ("submit_time_s,duration_s,num_gpus\n", [], "{trace}: the trace has no usable jobs"),
    ("submit_time_s,duration_s,num_gpus\n0,100,8\n5,100,100000\n", [],
     "{trace}: line 3: num_gpus: 100,000 GPUs, but the instance has 256 GPUs in one cluster"),
    ("submit_time_s,duration_s,num_gpus\n0,100,100000\n", ["--drop-unfit"],
     "{trace}: no job of the trace window fits the instance (line 2: num_gpus"),
    (OK_TRACE, ["--horizon", "0"], "--horizon: must be a positive number of hours"),
    (OK_TRACE, ["--window", "0:0"], "--window: END must be after START"),
    (OK_TRACE, ["--prediction-error", "-0.1"], "--prediction-error: must be a finite number"),
    (OK_TRACE, ["--prediction-error", "nan"], "--prediction-error: must be a finite number"),
    (OK_TRACE, ["--prediction-error", "inf"], "--prediction-error: must be a finite number"),
    (OK_TRACE, ["--policy", "engine-federated"],
     "mixed-a100-h100: spec.clusters: a federation policy needs at least 2 member clusters"),
])
def test_issue21_bad_input_is_one_line_exit_2(tmp_path: Path, capsys, content, args, message):
    trace = tmp_path / "t.csv"
    trace.write_text(content)
    code, _, err = run_cli(["simulate", "--trace", str(trace), "--load", "trace",
                            "--policy", "fifo", "--no-progress", *args], capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert message.format(trace=trace) in err and "Traceback" not in err


def test_drop_unfit_replays_the_rest_and_says_what_it_left_out(tmp_path: Path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time_s,duration_s,num_gpus,gpu_type\n0,100,8,\n"
                     "5,100,512,\n9,100,4,Z9000\n20,100,8,\n")
    with pytest.raises(InputError, match="line 3: num_gpus"):
        trace_jobs(load_trace(str(trace)), load_instance("mixed-a100-h100"))
    wl = trace_jobs(load_trace(str(trace)), load_instance("mixed-a100-h100"), drop_unfit=True)
    assert [j.name for j in wl.jobs] == ["job-00000", "job-00002", "job-00003"]
    assert wl.dropped_too_large == 1 and wl.unfit_example.startswith("line 3: num_gpus: 512")
    assert wl.dropped_constraints == 1 and wl.untyped_example == "line 4: gpu_type 'Z9000'"
    code, out, err = run_cli(["simulate", "--trace", str(trace), "--load", "trace",
                              "--policy", "fifo", "--no-progress", "--drop-unfit",
                              "-o", str(tmp_path / "out"), "--no-charts"], capsys)
    assert code == 0, err
    assert "3 jobs of t" in out
    flat = " ".join(out.split())
    assert "--drop-unfit: 1 job left out" in flat and "(first: line 3: num_gpus: 512" in flat
    assert "GPU-type constraint of 1 job names no type of the instance" in flat
    w = json.loads((tmp_path / "out" / "summary.json").read_text())["workload"]
    assert w["dropped_too_large"] == 1 and w["dropped_type_constraints"] == 1


def test_one_arrival_instant_has_no_offered_load_number(tmp_path: Path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time_s,duration_s,num_gpus\n0,100,8\n0,100,8\n")
    code, out, err = run_cli(["simulate", "--trace", str(trace), "--load", "trace",
                              "--policy", "fifo", "--no-progress"], capsys)
    assert code == 0, err
    assert "offered load - (all arrive at once" in " ".join(out.split()) and "inf" not in out
    assert "2 jobs of t over 0.0 min" in " ".join(out.split())  # not "over 0.0 h"


def test_a_binary_or_endless_trace_is_one_line(tmp_path: Path, capsys):
    binary = tmp_path / "t.csv"
    binary.write_bytes(b"submit_time_s,duration_s,num_gpus\n0,1,\xff\n")
    code, _, err = run_cli(["simulate", "--trace", str(binary), "--no-progress"], capsys)
    assert code == 2 and err == f"error: {binary}: not UTF-8 text: byte 38 (line 2) is invalid\n"
    code, _, err = run_cli(["simulate", "--trace", "/dev/zero", "--no-progress"], capsys)
    assert code == 2 and err.startswith("error: /dev/zero: file is larger than the input "
                                        "limit of 209,715,200 bytes")


def test_a_trace_over_its_limit_is_refused_by_its_size(tmp_path: Path, capsys):
    """A trace larger than MAX_BYTES (sparse: nothing read) is one line naming its size."""
    from hyperplace.sim import traces

    big = tmp_path / "big.csv"
    with big.open("wb") as fh:
        fh.truncate(traces.MAX_BYTES + 1)
    code, _, err = run_cli(["simulate", "--trace", str(big), "--no-progress"], capsys)
    assert code == 2 and err == (f"error: {big}: file is 209,715,201 bytes, larger than the "
                                 "input limit of 209,715,200 bytes\n")


def test_a_spreadsheets_byte_order_mark_and_crlf_are_read(tmp_path: Path):
    """Excel's "CSV UTF-8" starts with a BOM: it was read into the first column's name
    ("missing column submit_time_s (have: \\ufeffsubmit_time_s, ...)")."""
    trace = tmp_path / "excel.csv"
    trace.write_bytes(b"\xef\xbb\xbfsubmit_time_s,duration_s,num_gpus\r\n0,60,1\r\n5,90,2\r\n")
    t = load_trace(str(trace))
    assert [(r.submit_s, r.duration_s, r.gpus) for r in t.rows] == [(0, 60, 1), (5, 90, 2)]


def test_the_row_limit_is_checked_before_any_row_is_parsed(tmp_path: Path, capsys,
                                                           monkeypatch):
    """A trace over MAX_ROWS is refused for its size at once (a 3,000,000-row file took 46 s
    and 675 MB to be refused after parsing a million rows), not for a bad row."""
    from hyperplace.sim import traces

    monkeypatch.setattr(traces, "MAX_ROWS", 3)
    big = tmp_path / "big.csv"
    big.write_text("submit_time_s,duration_s,num_gpus\n0,abc,1\n" + "1,5,1\n" * 4)
    code, _, err = run_cli(["simulate", "--trace", str(big), "--no-progress"], capsys)
    assert code == 2 and err == f"error: {big}: more than 3 rows (the limit of a trace)\n"
    ok = tmp_path / "ok.csv"  # exactly at the limit: read
    ok.write_text("submit_time_s,duration_s,num_gpus\n" + "1,5,1\n" * 3)
    assert len(load_trace(str(ok)).rows) == 3


def test_summary_json_is_strict_json(tmp_path: Path, capsys):
    """One arrival instant offers an infinite load: summary.json said `Infinity`, which
    RFC 8259 JSON (jq, JSON.parse, Go's encoding/json) refuses; it is null now."""
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time_s,duration_s,num_gpus\n0,100,8\n0,100,8\n")
    code, _, err = run_cli(["simulate", "--trace", str(trace), "--load", "trace", "--policy",
                            "fifo", "--no-progress", "--no-charts", "-o", str(tmp_path / "o")],
                           capsys)
    assert code == 0, err

    def refuse(const):
        raise ValueError(f"not JSON: {const}")

    summary = json.loads((tmp_path / "o" / "summary.json").read_text(), parse_constant=refuse)
    assert summary["workload"]["offered_load"] is None


def test_a_repeated_trace_is_the_sample_back_to_back():
    """--repeat K: K copies, each shifted by the sample's span plus one mean gap, copies after
    the first named NAME~c (their per-name draws are their own); the first copy unchanged."""
    one = load_trace("philly", limit=50)
    three = load_trace("philly", limit=50, repeat=3)
    assert len(three.rows) == 150 and three.name == f"{one.name} x3"
    shift = one.span_s + one.span_s / 49
    assert three.rows[:50] == one.rows
    for c in (1, 2):
        for a, b in zip(one.rows, three.rows[50 * c:50 * (c + 1)]):
            assert b.name == f"{a.name}~{c}"
            assert b.submit_s == pytest.approx(a.submit_s + c * shift)
            assert (b.duration_s, b.gpus, b.gpu_types, b.model) == (a.duration_s, a.gpus,
                                                                   a.gpu_types, a.model)
    subs = [r.submit_s for r in three.rows]
    assert subs == sorted(subs) and three.span_s == pytest.approx(3 * one.span_s + 2 * shift
                                                                   - 2 * one.span_s)
    assert repeat_rows(one.rows, 1) == one.rows


def test_repeat_beyond_its_limits_is_refused_naming_repeat(monkeypatch):
    for bad in (0, -1, 101, True, 2.5):
        with pytest.raises(InputError, match="--repeat"):
            load_trace("philly", limit=5, repeat=bad)
    assert MAX_ROWS == 1_000_000  # the documented limit; a smaller one to test it
    monkeypatch.setattr("hyperplace.sim.traces.MAX_ROWS", 99)
    with pytest.raises(InputError, match="100 rows|more than 99 rows"):
        load_trace("philly", limit=50, repeat=2)
    assert len(load_trace("philly", limit=33, repeat=3).rows) == 99


def test_a_one_cluster_federation_file_is_named_by_its_path(tmp_path: Path, capsys):
    """seed-beijing-shanghai cut to one member and saved as fed1.yaml: the error named
    'seed-beijing-shanghai' (its metadata.name), not the file the user gave."""
    import yaml

    doc = load_instance("seed-beijing-shanghai").model_dump(mode="json", by_alias=True,
                                                            exclude_none=True)
    doc["spec"]["clusters"] = doc["spec"]["clusters"][:1]
    doc["spec"]["interClusterLinks"] = []
    fed1 = tmp_path / "fed1.yaml"
    fed1.write_text(yaml.safe_dump(doc))
    code, _, err = run_cli(["simulate", "-i", str(fed1), "-p", "engine-federated", "--jobs",
                            "5", "--no-progress"], capsys)
    assert code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {fed1}: spec.clusters: a federation policy needs at least 2 "
                          "member clusters (--policy engine-federated); this instance has 1")


def test_no_utilisation_is_a_dash_not_dash_percent(tmp_path: Path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time_s,duration_s,num_gpus\n0,100,8\n")
    code, out, err = run_cli(["simulate", "--trace", str(trace), "--load", "trace",
                              "--policy", "fifo", "--no-progress"], capsys)
    assert code == 0, err
    assert "-%" not in out and "fifo utilisation -, - jobs waiting" in " ".join(out.split())


def test_a_trace_in_milliseconds_gets_a_warning(tmp_path: Path, capsys):
    """Durations of 10 min to 10 h written in milliseconds replayed as jobs of months
    ('over 12,369.5 h', mean JCT 4,438 h) without a word; seconds get no warning."""
    ms = tmp_path / "ms.csv"
    ms.write_text("submit_time_s,duration_s,num_gpus\n0,600000,1\n60000,3600000,2\n"
                  "120000,36000000,4\n")
    code, _, err = run_cli(["simulate", "--trace", str(ms), "--load", "trace", "--policy",
                            "fifo", "--no-progress"], capsys)
    assert code == 0
    assert ("warning: duration_s: the median job runs 1,000 h (42 days), read as seconds; if "
            "the trace is in milliseconds") in err
    s = tmp_path / "s.csv"
    s.write_text("submit_time_s,duration_s,num_gpus\n0,600,1\n60,3600,2\n120,36000,4\n")
    code, _, err = run_cli(["simulate", "--trace", str(s), "--load", "trace", "--policy",
                            "fifo", "--no-progress"], capsys)
    assert code == 0 and "warning" not in err
