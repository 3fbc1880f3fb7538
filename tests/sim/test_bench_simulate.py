"""The over-time bench's own pieces (bench/bench_simulate.py): the work-normalised
utilisation and the repeated sample. The bench's figures themselves live in bench/results."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from hyperplace.instances import load_instance
from hyperplace.sim.metrics import summarize
from hyperplace.sim.run import SimRequest, build_workload
from hyperplace.sim.simulator import SimConfig, simulate
from hyperplace.sim.speed import SpeedModel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_simulate",
                                                  ROOT / "bench" / "bench_simulate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(records, gpus, t1):
    return SimpleNamespace(records=records, arrival_end_s=t1, total_gpus=gpus)


def _record(job, start, speed, work):
    end = start + work / speed
    return SimpleNamespace(job=job, first_start_s=start, end_s=end,
                           pieces=[(start, end, speed)])


def test_the_same_work_counts_the_same_on_any_gpu_type(bench):
    inst = load_instance("mixed-a100-h100")
    wl, _ = build_workload(SimRequest(trace="philly", limit=40, load=1.0), inst, 0)
    job = next(j for j in wl.jobs if j.gpus == 8)
    sm = SpeedModel(inst)
    fast, slow = sm.best_speed(job.manifest), sm.slowest_speed(job.manifest)
    assert fast > slow  # the instance has two types that run it at different speeds
    job.submit_s = 0.0
    work = 600.0
    t1 = 10 * work / slow  # both runs end inside the window
    total = sum(sm.type_counts.values())
    on_fast = bench.work_utilisation(_run([_record(job, 0.0, fast, work)], total, t1), inst)
    on_slow = bench.work_utilisation(_run([_record(job, 0.0, slow, work)], total, t1), inst)
    assert on_fast == pytest.approx(on_slow, rel=1e-9)
    # the busy-GPU figure is not invariant: the slow run holds its GPUs fast / slow as long
    busy_fast, busy_slow = job.gpus * work / fast, job.gpus * work / slow
    assert busy_slow / busy_fast == pytest.approx(fast / slow)
    # and the work figure is the work at the job's mean speed over the instance
    mean = sm.capacity(job.manifest) / total
    assert on_fast == pytest.approx(job.gpus * work / mean / (total * t1))


def test_work_utilisation_is_the_busy_utilisation_on_one_gpu_type(bench):
    inst = load_instance("superpod-h100-4su")
    wl, _ = build_workload(SimRequest(trace="philly", limit=120, load=1.0), inst, 0)
    run = simulate(inst, wl.jobs, "kueue", SimConfig(network=False))
    row = summarize(run)
    assert row["utilisation_in_window"] > 0
    assert bench.work_utilisation(run, inst) == pytest.approx(row["utilisation_in_window"],
                                                              rel=1e-6)


def test_a_job_run_in_pieces_counts_each_piece_at_its_own_speed(bench):
    """A job stopped and run again elsewhere (make_room's victims, a failure) counts each
    piece at the speed it ran at; a piece still running counts to the window's end."""
    inst = load_instance("mixed-a100-h100")
    wl, _ = build_workload(SimRequest(trace="philly", limit=40, load=1.0), inst, 0)
    job = next(j for j in wl.jobs if j.gpus == 8)
    sm = SpeedModel(inst)
    fast, slow = sm.best_speed(job.manifest), sm.slowest_speed(job.manifest)
    job.submit_s, t1 = 0.0, 10_000.0
    total = sum(sm.type_counts.values())
    rec = _record(job, 0.0, slow, 100.0 * slow)
    rec.pieces = [(0.0, 100.0, slow), (400.0, 900.0, fast), (9_000.0, None, slow)]
    mean = sm.capacity(job.manifest) / total
    want = job.gpus * (100.0 * slow + 500.0 * fast + 1_000.0 * slow) / mean / (total * t1)
    assert bench.work_utilisation(_run([rec], total, t1), inst) == pytest.approx(want)
    # one piece's figure is what the same job run whole at that speed gives
    one = _record(job, 400.0, fast, 500.0 * fast)
    assert bench.work_utilisation(_run([one], total, t1), inst) == pytest.approx(
        job.gpus * 500.0 * fast / mean / (total * t1))


def test_a_cells_repeated_sample_is_the_librarys_repeat(bench):
    """A cell with ``repeat = K`` replays the sample K times back to back through the
    library's --repeat (hyperplace.sim.traces.repeat_rows, tested there): K times the jobs,
    every name its own, the facts saying which."""
    spec = {"trace": "alibaba-2023", "jobs": None, "workload": "trace",
            "instance": "mixed-a100-h100", "load": 0.8, "seed": 0}
    _, one, _ = bench.workload({**spec, "repeat": 1})
    _, three, facts = bench.workload({**spec, "repeat": 3})
    assert len(three.jobs) == 3 * len(one.jobs)
    assert len({j.manifest.name for j in three.jobs}) == 3 * len(one.jobs)
    assert facts["trace"] == "alibaba-2023 x3"


def test_stale_rows_list_their_changed_files_once_per_group(bench):
    files = ["hyperplace/a.py", "hyperplace/b.py"]
    rows = [{"policy": "engine", "commit": "c2"},
            {"policy": "slurm/fast-first", "commit": "c1", "stale_files": files},
            {"policy": "kueue/fast-first", "commit": "c1", "stale_files": files},
            {"policy": "volcano/fast-first", "commit": "c0", "stale_files": files[:1]},
            {"policy": "fifo/fast-first", "commit": "c2"}]
    text = "\n".join(bench.stale_note({"commit": "c2", "rows": rows}))
    assert text.count("hyperplace/b.py") == 1  # once for the two rows at c1
    assert "2 row(s) at c1 (slurm/fast-first, kueue/fast-first): 2 file(s)" in text
    assert "1 row(s) at c0 (volcano/fast-first): 1 file(s): hyperplace/a.py" in text
    assert "fifo" not in text and "engine" not in text
    assert bench.stale_note({"commit": "c2", "rows": rows[:1]}) == []


def test_engines_only_runs_no_peer_replay(bench, tmp_path):
    """``--engines-only``: a peer row or probe that is not cached is missing (None), never
    run; the engine's would be run."""
    runner = bench.Runner(1, tmp_path, fresh=False, engines_only=True)
    try:
        spec = {"label": "x", "policy": "kueue", "order": "fast-first", "until": "arrivals"}
        assert runner.run(spec) is None
        assert runner.stats["run"] == 0 and not runner.inflight
    finally:
        runner.close()


def test_the_ceiling_cut_count_is_the_engines_own(bench):
    """An engine row records the rounds the work clock's wall ceiling cut (they make the row
    depend on the machine's load), read from the engine's own note; peers and the wall
    clock have none."""
    from hyperplace.sim.planning import PlanningEngine

    eng = PlanningEngine(budget_s=0.2, clock="work")
    eng.ceiling_hits = 7
    assert bench.ceiling_cuts(eng.notes()) == 7
    eng.ceiling_hits = 0
    assert bench.ceiling_cuts(eng.notes()) == 0
    assert bench.ceiling_cuts(PlanningEngine(budget_s=0.2, clock="wall").notes()) is None
    assert bench.ceiling_cuts([]) is None
    # a real replay's row carries it (an int for the engine under the work clock)
    inst = load_instance("mixed-a100-h100")
    wl, _ = build_workload(SimRequest(trace="philly", limit=12, load=1.0), inst, 0)
    pol = PlanningEngine(budget_s=0.2, clock="work")
    run = simulate(inst, wl.jobs, pol, SimConfig(budget_s=0.2))
    assert bench.ceiling_cuts(run.notes) == pol.ceiling_hits
    peer = simulate(inst, wl.jobs, "kueue", SimConfig())
    assert bench.ceiling_cuts(peer.notes) is None
    # the placement solves the wall clock cut: counted apart, shown beside the rounds
    assert bench.place_cuts(run.notes) == pol.place_cuts
    assert bench.place_cuts(peer.notes) is None
    eng.place_cuts = 2
    assert bench.place_cuts(eng.notes()) == 2
    assert bench.cuts({"ceiling_cuts": 0, "rounds": 9, "place_cuts": 2}) == \
        "0 of 9 (+2 placement solves) (load-dependent)"
    assert bench.cuts({"ceiling_cuts": 0, "rounds": 9, "place_cuts": 0}) == "0 of 9"


def _cell(bench, rows):
    return {"label": "x", "instance": "mixed-a100-h100", "target": 0.8, "load": 1.2,
            "facts": {"jobs": 3}, "rows": rows, "ratios": bench.ratios(rows)}


def _row(policy, jct, util, cuts=None):
    return {"policy": policy, "finished": 3, "jobs": 3, "rounds": 40, "jct_mean_s": jct,
            "jct_p99_s": jct, "wait_mean_s": 1.0, "bounded_slowdown_mean": 1.0,
            "bubble_gpu_hours": 1.0, "utilisation_in_window": util, "util_work": util,
            "ceiling_cuts": cuts}


def test_a_summary_row_without_peer_rows_says_so(bench):
    """A cell whose peer rows are all missing (``--engines-only`` before the prefetch) is
    still reported, as such, not a crash on max() of nothing."""
    line = bench.summary_row(_cell(bench, [_row("engine", 10.0, 0.8, cuts=0)]))
    assert "no peer row" in line and "0 of 40" in line
    line = bench.summary_row(_cell(bench, [_row("engine", 10.0, 0.8, cuts=3),
                                    _row("kueue/fast-first", 20.0, 0.9)]))
    assert "| 0.500 |" in line and "0.90 / 0.90" in line
    assert "3 of 40 (load-dependent)" in line and "no peer row" not in line


def test_a_missed_goal_below_the_floor_says_no_policy_can_meet_it(bench):
    """A goal no policy can meet (the lower bound over the best peer's figure is above the
    goal's ratio) is reported as such: a mean bounded slowdown is at least 1, so against a
    peer at 1.3 the 0.7x goal is out of reach; at 3.0 it is not."""
    def cell(peer_slowdown, engine_slowdown):
        eng, peer = _row("engine", 10.0, 0.8), _row("kueue/fast-first", 20.0, 0.9)
        eng["bounded_slowdown_mean"], peer["bounded_slowdown_mean"] = (
            engine_slowdown, peer_slowdown)
        c = _cell(bench, [eng, peer])
        c["lower_bound"] = {"jct_mean_s": 5.0, "jct_p99_s": 5.0, "bounded_slowdown_mean": 1.0}
        return c

    _, missed = bench.goals(cell(1.3, 1.1))
    assert ("slowdown <= 0.7x (0.85; the goal is below the floor 0.77: out of reach of any "
            "policy)") in missed
    _, missed = bench.goals(cell(3.0, 2.4))
    assert "slowdown <= 0.7x (0.80)" in missed  # reachable: a plain miss
    met, _ = bench.goals(cell(3.0, 1.5))
    assert "slowdown <= 0.7x (0.50)" in met


def test_the_slowdown_floor_is_the_metrics_own_rule(bench):
    """The floor is the replay's bounded slowdown of every job at its fastest speed with no
    wait (a replay on an empty cluster whose jobs never meet reaches it)."""
    inst = load_instance("mixed-a100-h100")
    wl, _ = build_workload(SimRequest(trace="philly", limit=30, load=1.0), inst, 0)
    floor = bench.slowdown_floor(inst, wl.jobs)
    assert floor >= 1.0
    for j in wl.jobs:  # far apart: nothing waits, each job on its fastest type
        j.submit_s = float(wl.jobs.index(j)) * 10 ** 7
    run = simulate(inst, wl.jobs, "kueue", SimConfig(round_s=60, prediction_sigma=0.0))
    assert summarize(run)["bounded_slowdown_mean"] >= floor - 1e-9


def test_charts_are_drawn_in_the_main_thread_only(bench, tmp_path):
    """pyplot from the cells' worker threads crashed report assembly: draw_charts refuses
    off the main thread, and in it writes the three charts beside the cell."""
    import threading

    rows = [{**_row(p, 10.0, 0.8), "series": {"jct_h": [0.1, 0.5, 2.0],
                                               "wait_by_size_h": [0.1, None, 0.3, 0.0],
                                               "bubbles": [(0.0, 4.0), (1.0, 0.0)]}}
            for p in ("engine", "kueue/fast-first")]
    cell = _cell(bench, rows)
    errors = []

    def off_main():
        try:
            bench.draw_charts(cell, tmp_path)
        except RuntimeError as exc:
            errors.append(exc)
    t = threading.Thread(target=off_main)
    t.start()
    t.join()
    assert errors and "charts" not in cell and not list(tmp_path.glob("*.png"))
    bench.draw_charts(cell, tmp_path)
    assert sorted(cell["charts"]) == sorted(f"x-mixed-a100-h100-0.8-{k}.png"
                                            for k in ("jct-cdf", "wait-by-size", "bubbles"))
    assert all((tmp_path / c).stat().st_size > 0 for c in cell["charts"])
    assert (tmp_path / "x-mixed-a100-h100-0.8.json").exists()


ENGINE_MODULES = ("hyperplace.sim.planning", "hyperplace.sim.forecast",
                  "hyperplace.formulations.schedule", "hyperplace.solvers.schedule")


@pytest.mark.parametrize("instance, policy", [("mixed-a100-h100", "slurm"),
                                              ("seed-beijing-shanghai", "karmada-aggregated")])
def test_a_peer_replay_imports_none_of_the_engines_modules(instance, policy, tmp_path):
    # the bench's cache keys a row on every file its replay imported (module docstring): a
    # peer replay that imports the engine's modules is re-run by every engine change
    code = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from bench import bench_simulate as b
spec = {{"label": "philly", "trace": "philly", "workload": "trace", "instance": {instance!r},
        "jobs": 30, "repeat": 1, "seed": 0, "budget": 1.0, "load": 1.0, "policy": {policy!r},
        "order": "fast-first", "until": "end"}}
entry = b.replay(spec, sys.argv[1])
assert entry["row"]["finished"] == 30, entry["row"]["finished"]
print(",".join(m for m in {ENGINE_MODULES!r} if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)],
                         capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


def test_a_federation_cell_compares_engine_federated_with_karmada_only(bench):
    """On a federation the faithful peers are Karmada's divisions (per-cluster queues); the
    rows on one global queue are references and never the ratio's base."""
    def row(policy, jct, **kw):
        return {"policy": policy, "jct_mean_s": jct, "utilisation_in_window": 0.5, **kw}
    rows = [row("engine-federated", 50.0), row("engine-federated-whole", 60.0),
            row("karmada-aggregated", 100.0), row("karmada-dynamic", 80.0),
            row("engine", 30.0, reference=bench.REFERENCE),
            row("slurm/fast-first", 40.0, reference=bench.REFERENCE)]
    cell = {"instance": "seed-beijing-shanghai", "rows": rows}
    bench.finish(cell)
    assert cell["ratios"]["jct_mean_s"] == pytest.approx(50 / 80)
    by = cell["ratios_by_engine"]
    # every other row: Karmada's and the references, the planning engine's (30) among them
    assert by[f"engine-federated (vs best of every other row: {bench.OTHERS})"][
        "jct_mean_s"] == pytest.approx(50 / 30)
    assert by["engine (one global queue, a reference) (vs best Karmada row)"][
        "jct_mean_s"] == pytest.approx(30 / 80)
    assert [r["policy"] for r in bench.faithful_peers(cell)] == ["karmada-aggregated",
                                                                 "karmada-dynamic"]
    # a single-cluster cell: every non-engine row is a peer
    single = {"instance": "mixed-a100-h100", "rows": [row("engine", 50.0),
                                                      row("slurm/fast-first", 40.0)]}
    bench.finish(single)
    assert single["ratios"]["jct_mean_s"] == pytest.approx(50 / 40)


def test_a_federation_cell_plans_fedsims_rows(bench):
    assert bench.probe_peers("seed-beijing-shanghai") == (bench.FED_PROBES, "as-is")
    assert bench.probe_peers("mixed-a100-h100") == (bench.PROBES, "fast-first")
    plan = bench.cell_plan({"instance": "seed-beijing-shanghai"}, 1.0, None, True)
    names = [(p["policy"], p["order"]) for p in plan]
    assert names[:2] == [("engine-federated", "as-is"), ("engine-federated-whole", "as-is")]
    assert {n for n, _ in names} >= {"karmada-aggregated", "karmada-dynamic", "karmada-static",
                                     "engine-federated-rounds", "slurm", "kueue", "volcano"}
    assert all(p["until"] == "end" and p["load"] == 1.0 for p in plan)


def test_fedsims_cells_take_the_grids_ratios(bench, monkeypatch, tmp_path):
    """bench_fedsim writes a federation cell with the grid's rule (one definition), its rows
    the grid's federation rows."""
    import bench.bench_fedsim as fedsim
    import bench.bench_simulate as grid

    assert [n + ("" if split else "-whole") for n, split in fedsim.RUNS] == [
        *grid.FED_ENGINES, *grid.FED_PEERS, grid.FED_BASELINE]
    assert fedsim.PROBES == grid.FED_PROBES
    saved = []
    monkeypatch.setattr(fedsim, "ROOT", tmp_path)
    monkeypatch.setattr(grid, "save_cell", lambda cell, d: saved.append(cell))
    monkeypatch.setattr(grid, "charts", lambda d, tag, rows: [])
    rows = [{"policy": "karmada-dynamic", "jct_mean_s": 80.0, "utilisation_in_window": 0.6},
            {"policy": "engine-federated", "jct_mean_s": 40.0, "utilisation_in_window": 0.5},
            {"policy": "engine", "jct_mean_s": 30.0, "utilisation_in_window": 0.4,
             "reference": grid.REFERENCE}]
    fedsim.write_cell({"reached": True, "rows": rows, "trace": "philly", "workload": "trace",
                       "instance": "seed-beijing-shanghai", "jobs_limit": 60, "target": 0.8,
                       "budget_s": 1.0, "probes": 2, "seed": 0, "load": 1.0,
                       "probe_utilisation": 0.81, "facts": {}, "lower_bound": {},
                       "wall_s": 1.0}, "1.0", "today")
    cell = saved[0]
    assert cell["rows"][0]["policy"] == "engine-federated"
    assert cell["ratios"] == pytest.approx({"jct_mean_s": 0.5,
                                            "utilisation_in_window": 0.5 / 0.6})
    assert cell["ratios_by_engine"]["engine (one global queue, a reference) (vs best Karmada "
                                    "row)"]["jct_mean_s"] == pytest.approx(30 / 80)


def test_peers_from_cells_replays_the_engine_rows_and_the_missing_peers(bench, tmp_path):
    """``--peers-from-cells``: a peer's row is the earlier cell's (its commit kept, marked),
    a peer row the earlier cell lacks is replayed, and so are the engine rows."""
    old = {"label": "fm", "instance": "mixed-a100-h100", "target": 0.8, "load": 3.38,
           "date": "2026-12-02 13:00 UTC", "facts": {"jobs": 3}, "lower_bound": {},
           "rows": [{"policy": "engine", "commit": "old"},
                    {"policy": "slurm/fast-first", "commit": "c63"}]}
    (tmp_path / "fm-mixed-a100-h100-0.8.json").write_text(bench.json.dumps(old))
    got = bench.earlier_cell(tmp_path, {"label": "fm", "instance": "mixed-a100-h100",
                                        "target": 0.8})
    assert got["load"] == 3.38
    assert bench.earlier_cell(tmp_path, {"label": "fm", "instance": "mixed-a100-h100",
                                         "target": 0.9}) is None
    ran = []

    class Runner:
        def run(self, spec):
            ran.append((spec["policy"], spec["order"]))
            return {"row": {"policy": f"{spec['policy']}/{spec['order']}", "commit": "new"}}
    run = bench.earlier_rows(Runner(), got)
    base = {"instance": "mixed-a100-h100"}
    assert run({**base, "policy": "engine", "order": "as-is"})["row"]["commit"] == "new"
    peer = run({**base, "policy": "slurm", "order": "fast-first"})["row"]
    assert peer["commit"] == "c63" and peer["from_cell"] == old["date"]
    lacked = run({**base, "policy": "slurm", "order": "fast-last"})["row"]
    assert lacked == {"policy": "slurm/fast-last", "commit": "new"}
    assert ran == [("engine", "as-is"), ("slurm", "fast-last")]


def test_alike_node_orders_are_one_replay(bench):
    """On one GPU type both node orders list the nodes alike: a peer's fast-last row is its
    fast-first replay, relabelled and marked; on mixed types both are replayed."""
    assert bench.orders_alike("superpod-h100-4su")
    assert not bench.orders_alike("mixed-a100-h100")
    ran = []

    class Runner:
        def run(self, spec):
            ran.append((spec["instance"], spec["order"]))
            return {"row": {"policy": f"kueue/{spec['order']}", "jobs": 5}}
    last = bench.one_replay(Runner(), {"instance": "superpod-h100-4su", "policy": "kueue",
                                       "order": "fast-last"})["row"]
    assert last == {"policy": "kueue/fast-last", "jobs": 5,
                    "same_replay_as": "kueue/fast-first"}
    mixed = bench.one_replay(Runner(), {"instance": "mixed-a100-h100", "policy": "kueue",
                                        "order": "fast-last"})["row"]
    assert mixed == {"policy": "kueue/fast-last", "jobs": 5}
    assert ran == [("superpod-h100-4su", "fast-first"), ("mixed-a100-h100", "fast-last")]


def test_bubble_causes_add_up_to_the_bench_measure_and_a_peer_holds_nothing():
    import copy

    from bench import bubble_causes as bc
    from hyperplace.instances import load_instance
    from hyperplace.sim.run import SimRequest, build_workload
    from hyperplace.sim.simulator import SimConfig

    inst = load_instance("mixed-a100-h100")
    wl, _ = build_workload(SimRequest(trace="philly", workload="trace", load=1.5, limit=150),
                           inst, 0)
    for policy in ("engine", "kueue"):
        got, total = bc.causes(inst, copy.deepcopy(wl.jobs), policy, SimConfig(budget_s=0.2))
        assert set(got) == set(bc.CAUSES)
        assert sum(got.values()) == pytest.approx(total, rel=1e-9, abs=1e-6)
        if policy == "kueue":  # a peer has neither reservations nor a plan
            assert got["reserved"] == got["planned"] == 0.0
    # the loop is itself again
    from hyperplace.sim import loop
    assert loop.RoundLoop.run_round.__name__ == "run_round"
    assert loop.RoundLoop.run_round.__qualname__ == "RoundLoop.run_round"


def test_engine_sim_sets_the_engines_round_and_any_simconfig_field(tmp_path):
    # review: --engine-sim round_s=30 was a TypeError (the replay passed round_s itself)
    from bench import bench_simulate as b

    spec = {"label": "philly", "trace": "philly", "workload": "trace",
            "instance": "mixed-a100-h100", "jobs": 20, "repeat": 1, "seed": 0, "budget": 0.2,
            "load": 1.0, "policy": "engine", "order": "as-is", "until": "arrivals",
            "sim": {"round_s": 30, "seed": 1}}
    row = b.replay(spec, str(tmp_path))["row"]
    assert row["cadence_s"] == 30 and row["finished"] <= 20


def test_engine_sim_refuses_a_value_the_engine_refuses_before_any_replay(bench, capsys):
    """``--engine-sim``: an unknown field or a value the planning engine refuses is one line
    and exit 2 at parse time, not a worker's traceback after the probes."""
    assert bench.engine_sim_arg("engine_end_quantile=0.7") == {"engine_end_quantile": 0.7}
    for bad, word in (("engine_end_quantile=2", "end_quantile"),
                      ('engine_keep_whole="gangs"', "keep_whole"), ("nofield=1", "nofield")):
        with pytest.raises(SystemExit) as exc:
            bench.engine_sim_arg(bad)
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("--engine-sim:") and word in err and "\n" not in err
