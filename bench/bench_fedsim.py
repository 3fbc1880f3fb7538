"""Federation over time: the federation engine's global queue against Karmada's division.

Usage::

    .venv/bin/python bench/bench_fedsim.py [--jobs 300] [--targets 0.7,0.8,0.9] [--budget 1]
        [--workload fm] [--trace philly] [--load L] [--cells] [--out bench/results/fedsim.md]

One federation (``seed-beijing-shanghai``: 4 DGX B200 in Beijing, 4 DGX H100 in Shanghai,
100 Gb/s WAN), the foundation-model-shaped workload by default (multi-node jobs, half pinned
to the fastest family). For each target the offered load is searched (from 1.0 in steps of
x1.5 until bracketed, then ``--probes`` bisection steps on its log; replays cut at the last
arrival) until the **strongest federated peer** (the better of ``karmada-aggregated`` and
``karmada-dynamic``: Karmada's division with per-cluster queues, as Karmada ships it and as
an operator would switch it) reaches the target utilisation within the arrival window; the
load found is replayed to the end under

* ``engine-federated`` (the planning engine's schedule of the global queue, a split when it
  finishes a waiting job sooner) and ``engine-federated-whole`` (splits off: the planning
  engine alone);
* the **faithful peers**: ``karmada-aggregated``, ``karmada-dynamic``, ``karmada-static``
  (per-cluster queues, Kueue in each member) and ``karmada-aggregated-whole`` (spread
  constraint maxGroups 1);
* ``engine-federated-rounds``, the round federation engine it replaced (a baseline);
* **non-federated references** (``--references``, on by default): ``slurm``,
  ``kueue`` and ``volcano`` on ONE global queue over both member clusters (nodes fast-first),
  as if the two sites were one scheduler's partitions. No multi-cluster deployment
  runs that way (each member has its own control plane; Karmada is what joins them), so
  these rows are not the peer of a federation: they say what one global scheduler without
  splits would do, and the ratios against them are given separately.

Per policy: jobs finished, mean / p99 JCT, mean wait, mean bounded slowdown, utilisation
within the arrival window (GPUs held idle by Karmada parts waiting for their siblings count
as used, as Kubernetes counts them; the held GPU-hours are listed beside), splits started,
per-round solve p50/p99, wall and CPU seconds; the engine's ratios to the best Karmada row
per metric, and to the best of every row but the engines' (references included). Every
figure is printed with the 1-minute load average of the machine.

``--cells`` also writes each target as a cell of the over-time grid
(``bench/results/simulate/fm-seed-beijing-shanghai-<target>.json``, the format of
``bench/bench_simulate.py``, which assembles ``simulate.md`` from it): rows engine-federated
first, ``ratios`` against the best Karmada row, ``ratios_by_engine`` naming both bases.

:func:`bench_row` is the entry point other benches call.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.bench_simulate import (  # noqa: E402
    FED_BASELINE,
    FED_ENGINES,
    FED_PEERS,
    FED_PROBES,
    FED_REFERENCES,
    REFERENCE,
)
from hyperplace.benchkit.loads import bracket_load  # noqa: E402
from hyperplace.fedsim import POLICIES  # noqa: E402
from hyperplace.instances import load_instance  # noqa: E402
from hyperplace.io import write_atomic  # noqa: E402
from hyperplace.sim.metrics import summarize  # noqa: E402
from hyperplace.sim.run import SimRequest, build_workload  # noqa: E402
from hyperplace.sim.simulator import SimConfig, simulate  # noqa: E402
from hyperplace.sim.state import reorder_nodes  # noqa: E402

INSTANCE = "seed-beijing-shanghai"
# the over-time grid's federation cells replay the same (one definition: bench_simulate's)
PROBES = FED_PROBES
RUNS = tuple((name.removesuffix("-whole"), not name.endswith("-whole"))
             for name in (*FED_ENGINES, *FED_PEERS, FED_BASELINE))
REFERENCES = FED_REFERENCES  # one global queue, not federated
METRICS = ("jct_mean_s", "jct_p99_s", "wait_mean_s", "bounded_slowdown_mean")


def load1() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def _workload(trace, shape, jobs, load, seed):
    instance = load_instance(INSTANCE)
    wl, facts = build_workload(SimRequest(trace=trace, workload=shape, load=load, limit=jobs),
                               instance, seed)
    return instance, wl, facts


def _finish_row(run, label: str, t0: float, c0: float, instance=None) -> dict:
    row = summarize(run)
    row["policy"] = label
    row["notes"] = list(run.notes)
    try:  # the grid's chart series and work-normalised utilisation (bench_simulate's)
        from bench.bench_simulate import series, work_utilisation
        row["series"] = series(run)
        if instance is not None:
            row["util_work"] = work_utilisation(run, instance)
    except ImportError:
        pass
    row["wall_s"] = time.perf_counter() - t0
    row["cpu_s"] = time.process_time() - c0
    row["load1"] = load1()
    row["commit"] = _commit()
    return row


def run_policy(instance, jobs, name: str, split: bool, *, budget: float = 1.0, seed: int = 0,
               until_s: float | None = None, check: bool = False) -> dict:
    """One replay of ``jobs`` under a federation policy; its summary row (+ notes)."""
    cfg = SimConfig(round_s=60, budget_s=budget, seed=seed, federation_split=split,
                    until_s=until_s, check=check)
    t0, c0 = time.perf_counter(), time.process_time()
    pol = POLICIES[name](instance, cfg)
    run = simulate(instance, copy.deepcopy(jobs), pol, cfg)
    return _finish_row(run, pol.name, t0, c0, instance if until_s is None else None)


def run_reference(instance, jobs, name: str, *, budget: float = 1.0, seed: int = 0) -> dict:
    """A single-cluster policy on one global queue over every member (nodes fast-first; the
    row is named as in the over-time grid: ``engine``, ``<peer>/fast-first``)."""
    cfg = SimConfig(round_s=60, budget_s=budget, seed=seed)
    inst = instance if name == "engine" else reorder_nodes(instance, True)
    t0, c0 = time.perf_counter(), time.process_time()
    run = simulate(inst, copy.deepcopy(jobs), name, cfg)
    row = _finish_row(run, name if name == "engine" else f"{name}/fast-first", t0, c0,
                      instance)
    row["reference"] = REFERENCE
    return row


def is_reference(row: dict) -> bool:
    return "reference" in row


def find_load(trace, shape, jobs, target, seed, probes) -> tuple[float | None, float, dict]:
    """The offered load at which the strongest federated peer (the better of
    :data:`PROBES`) reaches ``target`` (None: unreachable)."""
    cache: dict[float, tuple[float, dict]] = {}

    def util(load: float) -> tuple[float, dict]:
        if load not in cache:
            instance, wl, facts = _workload(trace, shape, jobs, load, seed)
            best = 0.0
            for name in PROBES:
                row = run_policy(instance, wl.jobs, name, True, seed=seed,
                                 until_s=wl.jobs[-1].submit_s)
                best = max(best, row["utilisation_in_window"] or 0.0)
            cache[load] = (best, facts)
        return cache[load]

    return bracket_load(util, target, probes)


def _ratios(eng: dict, peers: list[dict], keys=METRICS) -> dict[str, float]:
    """``eng`` over the best of ``peers`` for ``keys`` and utilisation: the grid's rule
    (``bench_simulate.ratios``), one definition."""
    from bench.bench_simulate import ratios

    return {k: v for k, v in ratios([eng], eng["policy"], peers).items()
            if k in (*keys, "utilisation_in_window")}


def bench_row(trace: str = "philly", shape: str = "fm", jobs: int | None = 300,
              target: float = 0.7, *, budget: float = 1.0, seed: int = 0, probes: int = 3,
              load: float | None = None, references: bool = True,
              skip: tuple[str, ...] = ()) -> dict:
    """The federation row: the load where the strongest Karmada division reaches ``target``
    utilisation (or ``load`` as given), every policy replayed there, ratios."""
    util = None
    started = time.time()
    if load is None:
        load, util, facts = find_load(trace, shape, jobs, target, seed, probes)
        if load is None:
            return {"target": target, "reached": False, "probe_utilisation": util,
                    "facts": facts, "load1": load1(), "wall_s": time.time() - started}
    instance, wl, facts = _workload(trace, shape, jobs, load, seed)
    rows = []
    for name, split in RUNS:
        if f"{name}{'' if split else '-whole'}" in skip:
            continue
        rows.append(run_policy(instance, wl.jobs, name, split, budget=budget, seed=seed))
        print(f"  {rows[-1]['policy']}: wall {rows[-1]['wall_s']:.0f} s cpu "
              f"{rows[-1]['cpu_s']:.0f} s (load {rows[-1]['load1']})", flush=True)
    for name in REFERENCES if references else ():
        rows.append(run_reference(instance, wl.jobs, name, budget=budget, seed=seed))
        print(f"  {rows[-1]['policy']}: wall {rows[-1]['wall_s']:.0f} s cpu "
              f"{rows[-1]['cpu_s']:.0f} s (load {rows[-1]['load1']})", flush=True)
    from bench.bench_simulate import OTHERS

    karmada = [r for r in rows if r["policy"].startswith("karmada")]
    others = [r for r in rows if r["policy"] not in FED_ENGINES]
    ratios: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["policy"].startswith("engine-federated"):
            ratios[r["policy"]] = _ratios(r, karmada)
            ratios[f"{r['policy']} / best of every other row ({OTHERS})"] = _ratios(
                r, [o for o in others if o is not r])
    return {"target": target, "reached": True, "load": load, "probe_utilisation": util,
            "instance": INSTANCE, "trace": trace, "workload": shape, "jobs": len(wl.jobs),
            "jobs_limit": jobs, "offered_load": facts["offered_load"], "facts": facts,
            "rows": rows, "ratios": ratios, "load1": load1(), "seed": seed,
            "budget_s": budget, "probes": probes, "wall_s": time.time() - started,
            "lower_bound": _lower_bound(instance, wl.jobs)}


def _lower_bound(instance, jobs) -> dict:
    try:
        from bench.bench_simulate import lower_bound
    except ImportError:
        return {}
    return lower_bound(instance, jobs)


def write_cell(row: dict, started_load1: str, date: str) -> Path | None:
    """The row as a cell of the over-time grid (``bench/bench_simulate.py``'s format)."""
    from bench import bench_simulate as grid

    if not row.get("reached"):
        return None
    cell_dir = ROOT / "bench/results/simulate"
    rows = sorted(row["rows"], key=lambda r: r["policy"] != "engine-federated")
    # the grid's label: the workload's name, or the trace's for a plain trace replay
    # (bench_simulate.FULL: "fm", "philly")
    label = row["trace"] if row["workload"] == "trace" else row["workload"]
    cell = {"label": label, "trace": row["trace"], "workload": row["workload"],
            "instance": row["instance"], "jobs_limit": row["jobs_limit"],
            "target": row["target"], "budget_s": row["budget_s"], "probes": row["probes"],
            "probe_peers": list(PROBES), "seed": row["seed"], "date": date,
            "machine": f"{os.cpu_count()} CPUs ({grid.cpu_model()}), Python "
                       f"{platform.python_version()}",
            "commit": grid.head_commit(), "load1_start": started_load1, "load": row["load"],
            "probe_reached": row["probe_utilisation"], "facts": row["facts"], "rows": rows,
            "lower_bound": row["lower_bound"], "wall_s": row["wall_s"],
            "load1_end": load1(), "written_by": "bench/bench_fedsim.py --cells"}
    grid.finish(cell)  # the grid's ratios of a federation cell: one rule
    tag = grid.cell_tag(cell["label"], cell["instance"], cell["target"])
    cell["charts"] = [p.name for p in grid.charts(cell_dir, tag, rows)]
    grid.save_cell(cell, cell_dir)
    return cell_dir / f"{tag}.json"


def _fmt(v, scale=1.0, digits=2) -> str:
    return "-" if v is None else f"{v / scale:,.{digits}f}"


def _held(notes: list[str]) -> str:
    for n in notes:
        if "GPU-hours held idle" in n:
            return n.split(" GPU-hours held idle")[0].rsplit(", ", 1)[-1]
    return "-"


def _splits(notes: list[str]) -> str:
    for n in notes:
        if "job start(s) split" in n:
            return n.split(": ", 1)[1].split(" job start(s)")[0]
        if "over several member" in n:
            return n.split("division(s), ")[1].split(" over several")[0]
    return "-"


def table(row: dict) -> list[str]:
    if not row.get("reached"):
        return [f"target {row['target']}: not reached (the better of {', '.join(PROBES)} "
                f"reaches {row['probe_utilisation']:.2f} at the most the workload offers)", ""]
    how = (f"{' or '.join(PROBES)} reached {_fmt(row['probe_utilisation'])} within the "
           "arrival window" if row["probe_utilisation"] is not None else "load as given")
    target = f"{row['target']:.2f}" if row["target"] else "none"
    out = [f"### {row['workload']} on {row['instance']}: {row['jobs']} jobs, target "
           f"{target}, offered load {row['load']:.3g} ({how})", "",
           "| policy | done | JCT mean h | JCT p99 h | wait mean h | slowdown | util (window) "
           "| splits | held GPU-h | solve p50/p99 s | wall s | CPU s | load1 |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in row["rows"]:
        out.append(f"| {r['policy']} | {r['finished']}/{r['jobs']} | "
                   f"{_fmt(r['jct_mean_s'], 3600)} | {_fmt(r['jct_p99_s'], 3600)} | "
                   f"{_fmt(r['wait_mean_s'], 3600)} | {_fmt(r['bounded_slowdown_mean'])} | "
                   f"{_fmt(r['utilisation_in_window'])} | {_splits(r['notes'])} | "
                   f"{_held(r['notes'])} | {_fmt(r['solve_p50_s'], 1, 3)}/"
                   f"{_fmt(r['solve_p99_s'], 1, 3)} | {r['wall_s']:.0f} | "
                   f"{r.get('cpu_s', 0):.0f} | {r['load1']} |")
    out.append("")
    for name, entry in row["ratios"].items():
        label = name if " / " in name else f"{name} / best Karmada row"
        out.append(f"{label}: " + ", ".join(
            f"{k.removesuffix('_s')} {v:.3f}" for k, v in entry.items()))
    splits = [n for r in row["rows"] if r["policy"] == "engine-federated"
              for n in r["notes"][1:]]
    if splits:
        out += ["", "engine-federated's split starts (first five):", "",
                *(f"- {n}" for n in splits)]
    out.append("")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="philly")
    ap.add_argument("--workload", default="fm")
    ap.add_argument("--jobs", type=int, default=300)
    ap.add_argument("--targets", default="0.7,0.8,0.9")
    ap.add_argument("--load", default=None,
                    help="skip the search: these loads (comma-separated), one row each")
    ap.add_argument("--budget", type=float, default=1.0)
    ap.add_argument("--probes", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-references", action="store_true",
                    help="leave out the one-global-queue reference rows")
    ap.add_argument("--skip", default="",
                    help="policies to leave out (comma-separated), e.g. karmada-static: the "
                         "weakest division (3.6x the best Karmada row's mean JCT at 0.7) and "
                         "the slowest replay at 0.8+ (every part it splits blindly holds "
                         "GPUs and times out, and each timeout wakes a round)")
    ap.add_argument("--cells", action="store_true",
                    help="also write each target as a cell of the over-time grid")
    ap.add_argument("--out", type=Path, default=ROOT / "bench/results/fedsim.md")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    start_load = load1()
    date = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
    lines = ["# Federation over time: engine-federated vs Karmada's division", "",
             f"{date}, {platform.node()}, {os.cpu_count()} CPUs, load average at start "
             f"{start_load}; per-round engine budget {args.budget} s; commit "
             f"{_commit()}", "",
             "command: `python bench/" + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
             + "`", "",
             "Peers: the Karmada rows are the faithful peers of a federation (each member its "
             "own queue and scheduler, Karmada dividing replicas; karmada-io/karmada f8fdd02, "
             "cited in hyperplace/fedsim/karmada.py). The rows engine, slurm/, kueue/ and "
             "volcano/ run ONE global queue over both sites: non-federated references: one scheduler over both sites' nodes, which no "
             "multi-cluster deployment runs; their ratios are listed apart. Loads: the "
             f"better of {' and '.join(PROBES)} reaches the target within the arrival window.",
             ""]
    loads = [float(x) for x in args.load.split(",")] if args.load else None
    targets = [float(t) for t in args.targets.split(",")]
    for k, target in enumerate(loads or targets):
        row = bench_row(args.trace, args.workload, args.jobs,
                        target if loads is None else 0.0, budget=args.budget, seed=args.seed,
                        probes=args.probes, load=target if loads else None,
                        references=not args.no_references,
                        skip=tuple(x for x in args.skip.split(",") if x))
        part = table(row)
        print("\n".join(part), flush=True)
        lines += part
        if args.cells and loads is None:
            path = write_cell(row, start_load, date)
            if path is not None:
                print(f"wrote {path}", flush=True)
        write_atomic(args.out, "\n".join(lines) + "\n")  # each target as it finishes
    lines.append(f"total {time.perf_counter() - t0:.0f} s, load average at the end {load1()}")
    write_atomic(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}")


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
