"""What-if sweeps: SQLite results, resume after kill -9, Ray equals local, bad sweep files."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from hyperplace.errors import InputError
from hyperplace.sim.whatif import comparable, load_sweep, run_sweep

SWEEP = {
    "base": {"instance": "dgx1-v100", "trace": "philly", "jobs": 60,
             "policy": "fifo", "load": 1.2, "round": 60},
    "grid": {"addNodes": [{"type": "V100-32", "count": 2}, {"type": "V100-32", "count": -2}],
             "policy": ["fifo", "kueue", "slurm"], "load": [0.8, 1.5]},
}


# a short window for the tests that only need a few quick scenarios (its 1.2 is more load
# than the window's jobs offer: replayed at their most, on the trace's own times)
SMALL = {"instance": "mixed-a100-h100", "trace": "philly", "window": [0, 1800],
         "policy": "fifo", "load": 1.2, "round": 60}


def write(tmp_path: Path, doc: dict, name: str = "sweep.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def done_count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=1) as con:
            return con.execute("SELECT COUNT(*) FROM scenarios").fetchone()[0]
    except sqlite3.OperationalError:
        return 0


def test_sweep_resumes_after_kill_9_and_loses_nothing(tmp_path: Path):
    sweep = write(tmp_path, SWEEP)
    out = tmp_path / "out"
    db = out / "sweep.sqlite"
    total = len(load_sweep(sweep).scenarios)
    cmd = [sys.executable, "-m", "hyperplace.cli", "whatif", str(sweep), "-o", str(out),
           "--workers", "1", "--no-progress", "--no-charts"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    while done_count(db) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # kill -9 the sweep and its workers
    proc.wait()
    before = done_count(db)
    assert 2 <= before < total, "the kill should land mid-sweep"
    with sqlite3.connect(db) as con:
        first = dict(con.execute("SELECT id, finished_at FROM scenarios").fetchall())
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    with sqlite3.connect(db) as con:
        rows = dict(con.execute("SELECT id, finished_at FROM scenarios").fetchall())
        statuses = {s for (s,) in con.execute("SELECT status FROM scenarios")}
    assert len(rows) == total and statuses == {"done"}
    assert all(rows[k] == v for k, v in first.items())  # finished ones were not run again
    assert (out / "report.md").read_text().count("\n| ") == total + 1  # header + rows


def test_failed_scenario_is_recorded_and_the_sweep_goes_on(tmp_path: Path):
    doc = {"base": SMALL,
           "grid": {"addNodes": [{"type": "H100-80", "count": -1}, {"type": "H100-80", "count": 1}]}}
    sweep = load_sweep(write(tmp_path, doc))
    # a scenario that fails when it runs (load_sweep refuses this removal up front since
    # the sweep file cannot ask for it; here it stands for any scenario's failure)
    sweep.scenarios[1] = {"id": "addNodes=H100-80-99",
                          "changes": {"addNodes": {"type": "H100-80", "count": -99}}}
    rows = run_sweep(sweep, tmp_path / "o", workers=1)
    status = {r["id"]: r["status"] for r in rows}
    assert status == {"base": "done", "addNodes=H100-80-99": "failed",
                      "addNodes=H100-80+1": "done"}
    assert "cannot remove 99" in next(r["error"] for r in rows if r["status"] == "failed")


def test_ray_backend_equals_local(tmp_path: Path):
    pytest.importorskip("ray")
    doc = {"base": SMALL,
           "grid": {"policy": ["kueue", "slurm"], "failures": [50000]}}
    sweep = load_sweep(write(tmp_path, doc))
    local = run_sweep(sweep, tmp_path / "local", backend="local", workers=1)
    ray_rows = run_sweep(sweep, tmp_path / "ray", backend="ray", workers=1)
    key = lambda r: r["id"]  # noqa: E731
    assert [comparable(r) for r in sorted(local, key=key)] == \
        [comparable(r) for r in sorted(ray_rows, key=key)]
    assert all(r["status"] == "done" for r in local) and len(local) == 3


@pytest.mark.parametrize("doc, where", [
    ({"base": {"instance": "nope"}}, "base.instance"),
    ({"base": {}, "grid": {"addNodes": [{"type": "Z900", "count": 2}]}}, "grid.addNodes[0]"),
    ({"base": {}, "grid": {"failSwitch": ["leaf999"]}}, "grid.failSwitch[0]: unknown switch"),
    ({"base": {}, "grid": {"policy": ["magic"]}}, "grid.policy[0]: unknown policy"),
    ({"base": {}, "grid": {"load": [-1]}}, "grid.load[0]"),
    ({"base": {"colour": 1}}, "base.colour: unknown field"),
    ({"base": {}, "grid": {"warp": [1]}}, "grid.warp: unknown change"),
    # #21 bad input, refused up front (every scenario failed with it before)
    ({"base": {"window": [0, 0]}}, "base.window: END must be after START"),
    ({"base": {"window": [5]}}, "base.window: must be [START, END]"),
    ({"base": {"jobs": 0}}, "base.jobs: must be a whole number >= 1"),
    ({"base": {"trace": "missing.csv"}}, "base.trace: "),
    ({"base": {"window": [1e9, None]}}, "base.trace: philly_sample.csv: no jobs submitted"),
    ({"base": {"predictionError": -1}}, "base.predictionError: must be a finite number >= 0"),
    # newuser: every scenario with it failed at its start ("ValueError: cannot remove ...")
    ({"base": {}, "grid": {"addNodes": [{"type": "H100-80", "count": -100}]}},
     "grid.addNodes[0]: cannot remove 100 H100-80 nodes: mixed has 16"),
    # as simulate --budget (0.001 was taken here and refused there)
    ({"base": {"budget": 0.001}}, "base.budget: must be a finite number >= 0.01"),
    ({"base": {}, "grid": {"budget": [0.5, 0.001]}}, "grid.budget[1]: must be a finite"),
    # simulate's options, by their sweep keys (a horizon of 0 was an unknown field)
    ({"base": {"repeat": 101}}, "base.repeat: must be a whole number from 1 to 100"),
    ({"base": {"repeat": 0}}, "base.repeat: must be a whole number from 1 to 100"),
    ({"base": {"horizon": 0}}, "base.horizon: must be a positive number of hours"),
    ({"base": {"horizon": float("nan")}}, "base.horizon: must be a positive number"),
    ({"base": {"horizon": 1e9}}, "base.horizon: must be a positive number of hours, at most"),
    ({"base": {"scheduleWindow": 0}}, "base.scheduleWindow: must be a whole number"),
    ({"base": {"scheduleObjective": "fast"}}, "base.scheduleObjective: use completion or"),
    ({"base": {"engineClock": "cpu"}}, "base.engineClock: use work or wall"),
    ({"base": {"preemption": "always"}}, "base.preemption: use never or"),
    ({"base": {"defrag": "yes"}}, "base.defrag: must be true or false"),
    ({"base": {"makeRoom": 1}}, "base.makeRoom: must be true or false"),
    ({"base": {"halfLife": -2}}, "base.halfLife: must be a finite, >= 0 number of hours"),
    ({"base": {"fairShareLevels": 5000}}, "base.fairShareLevels: must be a whole number"),
    ({"base": {"peerCadence": "60s"}}, "base.peerCadence: must be upstream or uniform"),
    ({"base": {}, "grid": {"peerCadence": ["upstream", "1s"]}},
     "grid.peerCadence[1]: must be upstream or uniform"),
])
def test_bad_sweep_file_names_file_and_field(tmp_path: Path, doc: dict, where: str):
    path = write(tmp_path, doc)
    with pytest.raises(InputError) as err:
        load_sweep(path)
    assert where in err.value.one_line() and err.value.source == str(path)


def test_a_trace_no_job_of_which_fits_the_base_instance_is_refused(tmp_path: Path):
    trace = tmp_path / "t.csv"
    trace.write_text("submit_time_s,duration_s,num_gpus\n0,100,100000\n")
    path = write(tmp_path, {"base": {"trace": str(trace)}})
    with pytest.raises(InputError) as err:
        load_sweep(path)
    assert err.value.path == "base.trace" and err.value.message.startswith(
        "no job of the trace window fits base.instance mixed-a100-h100 (line 2: num_gpus")


def test_bad_sweep_on_the_command_line(tmp_path: Path):
    path = write(tmp_path, {"base": {}, "grid": {"failSwitch": ["leaf999"]}})
    where = "grid.failSwitch[0]: unknown switch"
    proc = subprocess.run([sys.executable, "-m", "hyperplace.cli", "whatif", str(path),
                           "--no-progress"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"error: {path}: ")
    assert where in proc.stderr


def test_jobs_a_sweep_leaves_out_are_said_and_its_results_are_strict_json(tmp_path: Path,
                                                                           capsys):
    """A sweep drops a trace job no node set can hold (simulate refuses it): the command said
    nothing of it (only sweep.sqlite's workload did), and a trace whose jobs all arrive at
    once stored its offered load as `Infinity`, which strict JSON readers refuse."""
    import json

    from cli_run import run_main

    trace = tmp_path / "t.csv"
    trace.write_text("submit_time_s,duration_s,num_gpus\n0,600,8\n0,600,9999\n")
    path = write(tmp_path, {"base": {"trace": str(trace), "policy": "fifo"}})
    code = run_main(["whatif", str(path), "-o", str(tmp_path / "out"), "--workers", "1",
                     "--no-progress", "--no-charts"])
    err = " ".join(capsys.readouterr().err.split())
    assert code == 0
    assert ("base: 1 of 2 trace jobs left out: they cannot fit the instance (first: line 3: "
            "num_gpus: 9,999 GPUs") in err

    def refuse(const):
        raise ValueError(f"not JSON: {const}")

    with sqlite3.connect(tmp_path / "out" / "sweep.sqlite") as con:
        (text,) = con.execute("SELECT result FROM scenarios WHERE id='base'").fetchone()
    result = json.loads(text, parse_constant=refuse)
    assert result["workload"]["dropped_too_large"] == 1
    assert result["workload"]["offered_load"] is None


def test_a_federation_sweep_on_one_cluster_names_the_instance_as_given(tmp_path: Path):
    """The message named the instance's metadata.name (seed-beijing-shanghai for a file cut
    to one member), not base.instance as the sweep file gives it."""
    from hyperplace.fedsim import POLICIES
    from hyperplace.instances import load_instance

    doc = load_instance("seed-beijing-shanghai").model_dump(mode="json", by_alias=True,
                                                            exclude_none=True)
    doc["spec"]["clusters"] = doc["spec"]["clusters"][:1]
    doc["spec"]["interClusterLinks"] = []
    fed1 = write(tmp_path, doc, "fed1.yaml")
    path = write(tmp_path, {"base": {**SMALL, "instance": str(fed1)},
                            "grid": {"policy": ["karmada-aggregated"]}})
    with pytest.raises(InputError) as err:
        load_sweep(path, extra=POLICIES)
    assert err.value.one_line() == (f"{path}: grid.policy: a federation policy needs at least 2 "
                                    f"member clusters; base.instance {fed1} has 1 "
                                    "(spec.clusters)")


def test_a_sweeps_engine_options_reach_the_replay_as_simulates_flags_do(tmp_path, monkeypatch):
    """base.horizon, scheduleWindow, ... set the same SimConfig fields as simulate's flags
    (hyperplace.sim.options, one check for both), and base.repeat the replayed copies."""
    import hyperplace.sim.run as run
    from hyperplace.sim.options import engine_config
    from hyperplace.sim.whatif import run_scenario

    given = {"horizon": 6, "scheduleWindow": 50, "scheduleObjective": "completion",
             "engineClock": "wall", "preemption": "reclaim-within-cohort", "defrag": True,
             "halfLife": 2, "fairShareLevels": 3, "makeRoom": False}
    sweep = load_sweep(write(tmp_path, {"base": {**SMALL, **given, "repeat": 2}}))
    seen = {}

    def fake(instance, req, config, extra=None):
        seen["req"], seen["config"] = req, config
        return {"policies": [{"policy": "fifo"}], "workload": {}}, []

    monkeypatch.setattr(run, "run_simulation", fake)
    run_scenario(sweep.base, {})
    cfg = seen["config"]
    assert (cfg.horizon_s, cfg.schedule_window, cfg.schedule_objective, cfg.engine_clock,
            cfg.preemption, cfg.defrag, cfg.half_life_s, cfg.fair_share_levels,
            cfg.engine_make_room) == (
        6 * 3600.0, 50, "completion", "wall", "reclaim-within-cohort", True, 7200.0, 3, False)
    assert seen["req"].repeat == 2
    flags = engine_config({"--horizon": 6, "--schedule-window": 50,
                           "--schedule-objective": "completion", "--engine-clock": "wall",
                           "--preemption": "reclaim-within-cohort", "--defrag": True,
                           "--half-life": 2, "--fair-share-levels": 3,
                           "--make-room": False})
    assert flags == engine_config(given, by="key")


def test_a_sweeps_instance_file_is_read_relative_to_the_sweep_file(tmp_path: Path):
    """Like its trace: a sweep in another directory finds the instance file beside it."""
    from hyperplace.instances import load_instance

    sub = tmp_path / "sweeps"
    sub.mkdir()
    inst = load_instance("dgx1-v100")
    (sub / "mine.json").write_text(inst.model_dump_json(by_alias=True))
    sweep = load_sweep(write(sub, {"base": {**SMALL, "instance": "mine.json"}}))
    assert sweep.base["instance"] == str(sub / "mine.json")


def test_a_sweeps_peer_cadence_reaches_the_replay_and_names_its_results(tmp_path, monkeypatch):
    """review of R32: a sweep says how often the peers decide (default upstream, as
    simulate), and a sweep that does not say so is not the same sweep as before the
    cadence existed (its results are not resumed as upstream ones)."""
    import hashlib
    import json

    import hyperplace.sim.run as run
    from hyperplace.sim.whatif import run_scenario

    seen = []

    def fake(instance, req, config, extra=None):
        seen.append(config.cadence)
        return {"policies": [{"policy": "fifo"}], "workload": {}}, []

    monkeypatch.setattr(run, "run_simulation", fake)
    sweep = load_sweep(write(tmp_path, {"base": dict(SMALL),
                                        "grid": {"peerCadence": ["uniform"]}}))
    for sc in sweep.scenarios:
        run_scenario(sweep.base, sc["changes"])
    assert seen == ["upstream", "uniform"]
    old = hashlib.sha256(json.dumps([sweep.base, sweep.scenarios], sort_keys=True)
                         .encode()).hexdigest()[:16]
    assert sweep.digest != old
