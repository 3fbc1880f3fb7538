"""Over-time bench: trace replay under contention, the engine against every peer.

Usage::

    .venv/bin/python bench/bench_simulate.py [--quick] [--targets 0.7,0.8,0.9]
        [--only LABEL@INSTANCE,...] [--budget S] [--assemble]

Workloads (:data:`FULL`): the bundled Philly and Alibaba 2023 samples and the
foundation-model-shaped workload (``fm``: AcmeTrace sizes on Philly's timing, large jobs
long, small ones short), on ``mixed-a100-h100``, ``superpod-h100-4su`` and one federation
(``seed-beijing-shanghai``, replayed as one multi-cluster instance with one global queue;
the federation replay with splits across clusters and Karmada's division is fedtime's
``hyperplace.sim`` work: rows for it are added when it lands).

**Job limits** (so the grid runs in bounded time on 2 shared cores): each row replays the
first N jobs of its trace (the ``jobs`` column of :data:`FULL`, documented there with the
reason); a row a trace cannot load (its jobs ask fewer GPUs than the instance has, or only
as a burst: the replay says "offer at most") is reported unreachable after the probes, not
run.

**Loads.** For each workload, instance and target the bench searches the offered load
(``simulate --load``, :mod:`hyperplace.sim.workload`) at which the *strongest probe peer*
reaches the target utilisation within the arrival window: the probe is the better of
Kueue BestEffortFIFO and Volcano allocate (nodes fast-first), the strongest peers by
utilisation in every earlier run (Slurm's backfill is slower to replay and reached
less); replays cut at the last arrival; loads probed from 1.0 in steps of x1.5 until the
target is bracketed, then ``--probes`` bisection steps on the log of the load (default 2),
the lowest probed load that reached the target is kept (:func:`find_load`). The load found is then replayed to the end under every
policy; the table gives the utilisation each really reached.

**Policies.** ``engine`` (the planning engine, :mod:`hyperplace.sim.planning`), and every
peer (``slurm`` backfill as a site configures it, ``kueue`` BestEffortFIFO, ``kueue-strict``,
``volcano``, ``fifo``) in both node orders (fastest GPU type listed first and last: suffix
``/fast-first``, ``/fast-last``), so no gain comes from a peer's unlucky node order. The
ratio row compares the engine with the best peer run per metric (the best faithful peer:
the weaker named variants such as ``slurm-default`` are not in the grid).

**Metrics** (:func:`hyperplace.sim.metrics.summarize`): mean, p50 and p99 JCT; mean wait;
mean bounded slowdown; bubble GPU-hours (free GPUs while a job that fits by count waits,
within the arrival window); utilisation within the arrival window; the engine's forecast
error (median absolute start error over the actual wait, for jobs that waited 10 min or
more); per-round solve p50/p99; and a lower bound: every job at its fastest speed, no
wait (JCT = work / best speed).

**Results.** Each cell (workload, instance, target) is written on its own as
``bench/results/simulate/<cell>.json`` (with its charts beside it) the moment it finishes,
so a grid can run in pieces (``--only``) and in parallel; ``--assemble`` (and every run at
its end) rebuilds ``bench/results/simulate.md`` from the cells present, with date, machine,
load average and wall time per replay, and says which cells did not run.

``--quick``: the Alibaba 2023 sample (1,318 jobs, mostly short) on ``mixed-a100-h100``,
target 0.8 only, engine budget 0.2 s, 3 probes, into ``bench/results/simulate-quick/``
(about 5 minutes at load average 10 on 2 cores).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hyperplace.instances import load_instance  # noqa: E402
from hyperplace.io import write_atomic  # noqa: E402
from hyperplace.sim.metrics import bubble_series, summarize  # noqa: E402
from hyperplace.sim.run import SimRequest, build_workload  # noqa: E402
from hyperplace.sim.simulator import SimConfig, simulate  # noqa: E402
from hyperplace.sim.speed import SpeedModel  # noqa: E402
from hyperplace.sim.state import reorder_nodes  # noqa: E402

# (label, trace, workload, instance, jobs): jobs = the first N jobs of the trace (None: all).
# Limits: a replay of every peer and the engine must stay within minutes on 2 shared cores;
# Philly's and Alibaba's whole samples (2,000 and 1,318 jobs) on 256 GPUs are kept whole,
# fm jobs are capped at 400 (its 128-1,024-GPU gangs run for days: each replay is long).
FULL = [
    ("philly", "philly", "trace", "mixed-a100-h100", None),
    ("alibaba-2023", "alibaba-2023", "trace", "mixed-a100-h100", None),
    ("fm", "philly", "fm", "mixed-a100-h100", 400),
    ("philly", "philly", "trace", "superpod-h100-4su", None),
    ("alibaba-2023", "alibaba-2023", "trace", "superpod-h100-4su", None),
    ("fm", "philly", "fm", "superpod-h100-4su", 400),
    ("philly", "philly", "trace", "seed-beijing-shanghai", 600),
    ("fm", "philly", "fm", "seed-beijing-shanghai", 300),
]
QUICK = [("alibaba-2023", "alibaba-2023", "trace", "mixed-a100-h100", None)]
PEERS = ("slurm", "kueue", "kueue-strict", "volcano", "fifo")
PROBES = ("kueue", "volcano")
LOWER = ("jct_mean_s", "jct_median_s", "jct_p99_s", "wait_mean_s", "bounded_slowdown_mean",
         "bubble_gpu_hours")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load1() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def workload(trace: str, shape: str, inst_name: str, jobs: int | None, load: float,
             seed: int):
    instance = load_instance(inst_name)
    req = SimRequest(trace=trace, workload=shape, load=load, limit=jobs)
    wl, facts = build_workload(req, instance, seed)
    return instance, wl, facts


def probe_util(trace, shape, inst_name, jobs, load, seed, cache) -> tuple[float, dict]:
    """The best probe peer's utilisation within the arrival window at ``load`` (replays
    cut at the last arrival)."""
    if load in cache:
        return cache[load]
    instance, wl, facts = workload(trace, shape, inst_name, jobs, load, seed)
    cfg = SimConfig(round_s=60, seed=seed, until_s=wl.jobs[-1].submit_s)
    ordered = reorder_nodes(instance, True)
    best = 0.0
    for peer in PROBES:
        row = summarize(simulate(ordered, copy.deepcopy(wl.jobs), peer, cfg))
        best = max(best, row["utilisation_in_window"] or 0.0)
    cache[load] = (best, facts)
    return cache[load]


def find_load(trace, shape, inst_name, jobs, target, seed, cache, probes: int
              ) -> tuple[float | None, float, dict]:
    """The load at which the best probe peer reaches ``target`` (None: unreachable).

    Loads are probed from 1.0 in steps of x1.5 (up while the target is not reached, down
    while it is, so the bracket is one step wide), then ``probes`` bisection steps on the
    log of the load; the lowest probed load that reached the target is kept. High loads
    are probed only when needed (a queue of thousands of jobs makes each replay slow)."""
    def probe(x: float) -> tuple[float, dict]:
        return probe_util(trace, shape, inst_name, jobs, x, seed, cache)

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


def lower_bound(instance, jobs) -> dict:
    sm = SpeedModel(instance)
    jct = sorted(j.work_s / max(sm.best_speed(j.manifest), 1e-9) for j in jobs)

    def pct(q):
        k = (len(jct) - 1) * q
        a, b = math.floor(k), math.ceil(k)
        return jct[a] + (jct[b] - jct[a]) * (k - a)
    return {"jct_mean_s": sum(jct) / len(jct), "jct_median_s": pct(0.5), "jct_p99_s": pct(0.99)}


SIZES = [(1, 1), (2, 8), (9, 64), (65, 10 ** 9)]
SIZE_NAMES = ["1", "2-8", "9-64", "65+"]


def series(run) -> dict:
    """What the charts draw, kept in the cell's JSON: sorted JCTs (h), mean wait by job
    size (h), bubble GPUs over the arrival window."""
    waits = []
    for lo, hi in SIZES:
        w = [r.queued_s / 3600 for r in run.records
             if lo <= r.job.gpus <= hi and r.end_s is not None]
        waits.append(sum(w) / len(w) if w else None)
    return {"jct_h": sorted(round(r.jct_s / 3600, 5) for r in run.records
                            if r.jct_s is not None),
            "wait_by_size_h": waits,
            "bubbles": [(round(x, 4), round(y, 3)) for x, y in bubble_series(run)]}


def run_all(trace, shape, inst_name, jobs, load, budget, seed, peers=None, only=None):
    """Every policy's replay at ``load`` (``only``: just these policy labels)."""
    instance, wl, facts = workload(trace, shape, inst_name, jobs, load, seed)
    cfg = SimConfig(round_s=60, budget_s=budget, seed=seed)
    plan = [("engine", instance, "engine")]
    orders = {"fast-first": reorder_nodes(instance, True),
              "fast-last": reorder_nodes(instance, False)}
    for p in peers or PEERS:
        plan += [(p, inst, f"{p}/{o}") for o, inst in orders.items()]
    fed = federation_policies() if len(instance.clusters) > 1 else {}
    for name in fed:
        if name.startswith("engine"):
            plan.insert(1, (name, instance, name))
        else:
            plan += [(name, inst, f"{name}/{o}") for o, inst in orders.items()]
    rows = []
    for policy, inst, label in plan:
        if only is not None and label not in only:
            continue
        t0 = time.perf_counter()
        pol = fed[policy](inst, cfg) if policy in fed else policy
        run = simulate(inst, copy.deepcopy(wl.jobs), pol, cfg)
        row = summarize(run)
        row["policy"] = label
        row["wall_s"] = time.perf_counter() - t0
        row["load1"] = load1()
        row["series"] = series(run)
        rows.append(row)
        print(f"  {label}: {row['finished']}/{row['jobs']} util "
              f"{row['utilisation_in_window'] or 0:.3f} wall {row['wall_s']:.0f} s "
              f"(load {row['load1']})", flush=True)
    return rows, facts, lower_bound(instance, wl.jobs)


def federation_policies() -> dict:
    """fedtime's federation-over-time policies (``hyperplace.fedsim.POLICIES``: the
    federated engine with splits, Karmada's divisions with per-cluster queues), when that
    package is present."""
    try:
        from hyperplace.fedsim import POLICIES as FED
    except ImportError:
        return {}
    return dict(FED)


ENGINES = ("engine", "engine-federated")


def fmt(v, scale=1.0, digits=2) -> str:
    return "-" if v is None else f"{v / scale:,.{digits}f}"


def forecast_ratio(row) -> str:
    f = row.get("forecast") or {}
    v = f.get("long_wait_median_error_over_wait")
    return "-" if v is None else f"{v:.2f} ({f.get('long_wait_jobs', 0)})"


def table(rows, lb) -> list[str]:
    out = ["| policy | done | JCT mean | p50 | p99 | wait mean | slowdown | bubble GPU-h | "
           "util | forecast err/wait | solve p50/p99 s | wall s (load) |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['policy']} | {r['finished']}/{r['jobs']} | {fmt(r['jct_mean_s'], 3600)} | "
            f"{fmt(r['jct_median_s'], 3600)} | {fmt(r['jct_p99_s'], 3600)} | "
            f"{fmt(r['wait_mean_s'], 3600)} | {fmt(r['bounded_slowdown_mean'])} | "
            f"{fmt(r['bubble_gpu_hours'], 1, 1)} | {fmt(r['utilisation_in_window'], 0.01, 1)}% | "
            f"{forecast_ratio(r)} | {fmt(r['solve_p50_s'], 1, 3)}/{fmt(r['solve_p99_s'], 1, 3)} "
            f"| {r['wall_s']:.0f} ({r['load1']}) |")
    out.append(f"| lower bound (fastest type, no wait) | | {fmt(lb['jct_mean_s'], 3600)} | "
               f"{fmt(lb['jct_median_s'], 3600)} | {fmt(lb['jct_p99_s'], 3600)} | 0.00 | 1.00 "
               "| | | | | |")
    return out


def ratios(rows, engine: str = "engine") -> dict[str, float]:
    """``engine``'s row over the best peer run per metric (peers: every non-engine row)."""
    eng = next(r for r in rows if r["policy"] == engine)
    peers = [r for r in rows if r["policy"] not in ENGINES]
    out = {}
    for key in (*LOWER, "utilisation_in_window"):
        vals = [p[key] for p in peers if p[key] is not None]
        if not vals or eng[key] is None:
            continue
        best = max(vals) if key == "utilisation_in_window" else min(vals)
        if best > 0:
            out[key] = eng[key] / best
    return out


def charts(out_dir: Path, tag: str, rows) -> list[Path]:
    """JCT CDF, mean wait by job size and bubbles over time (engine rows and every peer
    with fast GPUs first), drawn from the rows' series; none without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    keep = [r for r in rows if r.get("series") and (
        r["policy"] in ENGINES or r["policy"].endswith("/fast-first"))]
    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for row in keep:
        jct = row["series"]["jct_h"]
        if jct:
            ax.plot(jct, [(i + 1) / len(jct) for i in range(len(jct))], label=row["policy"],
                    linewidth=1.4 if row["policy"] in ENGINES else 0.8)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(tag, fontsize=8)
    ax.legend(fontsize=7)
    written.append(_save(fig, out_dir / f"{tag}-jct-cdf.png"))
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / max(len(keep), 1)
    for k, row in enumerate(keep):
        means = [m or 0.0 for m in row["series"]["wait_by_size_h"]]
        ax.bar([i + k * width for i in range(len(SIZES))], means, width, label=row["policy"])
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(SIZES))], SIZE_NAMES)
    ax.set_xlabel("job size (GPUs)")
    ax.set_ylabel("mean wait (h)")
    ax.set_title(tag, fontsize=8)
    ax.legend(fontsize=7)
    written.append(_save(fig, out_dir / f"{tag}-wait-by-size.png"))
    fig, ax = plt.subplots(figsize=(6, 4))
    for row in keep:
        pts = row["series"]["bubbles"]
        if pts:
            ax.step([x for x, _ in pts], [y for _, y in pts], where="post",
                    label=row["policy"], linewidth=1.2 if row["policy"] in ENGINES else 0.8)
    ax.set_xlabel("time (h, arrival window)")
    ax.set_ylabel("bubble GPUs (free while a job that fits waits)")
    ax.set_title(tag, fontsize=8)
    ax.legend(fontsize=7)
    written.append(_save(fig, out_dir / f"{tag}-bubbles.png"))
    plt.close("all")
    return written


def _save(fig, path: Path) -> Path:
    from hyperplace.sim.metrics import save_figure

    return save_figure(fig, path, dpi=100)


def cell_tag(label: str, inst: str, target: float) -> str:
    return f"{label}-{inst}-{target:g}"


def run_cell(label, trace, shape, inst, jobs, target, args, budget, probes, cache,
             cell_dir: Path) -> dict:
    """One (workload, instance, target) cell: find the load, replay every policy, write
    the cell's JSON and charts; returns the cell."""
    started = time.time()
    cell = {"label": label, "trace": trace, "workload": shape, "instance": inst,
            "jobs_limit": jobs, "target": target, "budget_s": budget, "probes": probes,
            "probe_peers": list(PROBES), "seed": args.seed,
            "date": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
            "machine": f"{os.cpu_count()} CPUs ({cpu_model()}), Python "
                       f"{platform.python_version()}",
            "commit": _commit(), "load1_start": load1()}
    load, reached, facts = find_load(trace, shape, inst, jobs, target, args.seed, cache,
                                     probes)
    cell.update(load=load, probe_reached=reached, facts=facts)
    if load is not None:
        rows, facts, lb = run_all(trace, shape, inst, jobs, load, budget, args.seed,
                                  args.peers)
        cell.update(rows=rows, facts=facts, lower_bound=lb)
        finish(cell, cell_dir)
    cell["wall_s"] = time.time() - started
    cell["load1_end"] = load1()
    save_cell(cell, cell_dir)
    return cell


def finish(cell: dict, cell_dir: Path) -> None:
    """Ratios and charts of a cell from its rows."""
    rows = cell["rows"]
    cell["ratios"] = ratios(rows)
    cell["ratios_by_engine"] = {r["policy"]: ratios(rows, r["policy"]) for r in rows
                                if r["policy"] in ENGINES}
    tag = cell_tag(cell["label"], cell["instance"], cell["target"])
    cell["charts"] = [p.name for p in charts(cell_dir, tag, rows)]


def save_cell(cell: dict, cell_dir: Path) -> None:
    cell_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(cell_dir / f"{cell_tag(cell['label'], cell['instance'], cell['target'])}.json",
                 json.dumps(cell, indent=1, default=str))


def rerun_engines(cell: dict, budget: float, cell_dir: Path) -> dict:
    """Replay only the engine rows of a cell at its load (the peers' rows are kept): the
    engine changes more often than the peers."""
    if cell.get("load") is None:
        return cell
    started = time.time()
    labels = [r["policy"] for r in cell["rows"] if r["policy"] in ENGINES]
    new, _, _ = run_all(cell["trace"], cell["workload"], cell["instance"], cell["jobs_limit"],
                        cell["load"], budget, cell["seed"], only=set(labels))
    fresh = {r["policy"]: r for r in new}
    cell["rows"] = [fresh.get(r["policy"], r) for r in cell["rows"]]
    cell["engine_rerun"] = {"date": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
                            "commit": _commit(), "budget_s": budget,
                            "wall_s": time.time() - started, "load1": load1()}
    finish(cell, cell_dir)
    save_cell(cell, cell_dir)
    return cell


def _commit() -> str:
    try:
        import subprocess

        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "?"


RATIO_KEYS = ("jct_mean_s", "jct_p99_s", "wait_mean_s", "bounded_slowdown_mean",
              "bubble_gpu_hours", "utilisation_in_window")


def summary_row(cell: dict) -> str:
    head = (f"| {cell['label']} | {cell['instance']} | {cell['target']:g} | ")
    facts = cell.get("facts") or {}
    if cell.get("load") is None:
        return (head + f"- | {facts.get('jobs', '-')} | unreachable (the probe peers reach "
                f"at most {cell['probe_reached']:.2f}) | | | | | | | |")
    rows = cell["rows"]
    eng = rows[0]
    best_util = max((r["utilisation_in_window"] or 0) for r in rows
                    if r["policy"] not in ENGINES)
    lead = head + f"{cell['load']:.3g} | {facts['jobs']} | "
    if eng["finished"] < eng["jobs"]:
        return lead + (f"engine finished {eng['finished']}/{eng['jobs']} | | | | | | "
                       f"{best_util:.2f} | {forecast_ratio(eng)} |")
    r = cell["ratios"]
    return lead + " | ".join(f"{r.get(k, float('nan')):.3f}" for k in RATIO_KEYS) + \
        f" | {best_util:.2f} | {forecast_ratio(eng)} |"


def assemble(cells: list[dict], grid, targets, out: Path, cell_dir: Path, command: str
             ) -> None:
    """``simulate.md`` from the cells present (missing cells are listed as not run)."""
    by_tag = {cell_tag(c["label"], c["instance"], c["target"]): c for c in cells}
    loads = sorted({c["load1_start"] for c in cells} | {c["load1_end"] for c in cells},
                   key=lambda x: float(x) if x.replace(".", "", 1).isdigit() else 0)
    dates = sorted(c["date"] for c in cells)
    lines = [
        "# Over-time bench: replay under contention, engine vs every peer", "",
        f"- cells run {dates[0] if dates else '-'} to {dates[-1] if dates else '-'}; machine: "
        f"{cells[0]['machine'] if cells else '-'}, shared with 7 other engineers' jobs "
        f"(1-min load average {loads[0] if loads else '?'}-{loads[-1] if loads else '?'} at "
        "cell starts and ends; per replay in the wall column); commits "
        f"{', '.join(sorted({c['commit'] for c in cells}))}",
        f"- command: `{command}`; each cell's JSON in `{os.path.relpath(cell_dir, ROOT)}/`",
        "- loads: the offered load at which the better of "
        f"{' and '.join(PROBES)} (fast-first) reaches each target utilisation within the "
        "arrival window (bisection); round 60 s; predictions with the default lognormal "
        "error (sigma 0.5); times in hours; slowdown = mean bounded slowdown (10 s floor); "
        "bubble = GPU-hours free while a job that fits by count waits (arrival window); "
        "forecast err/wait = median |planned - actual start| / wait for jobs that waited "
        ">= 10 min (their count)", "",
        "## Summary: engine / best peer run (ratios; below 1 is the engine ahead, for "
        "utilisation above 1)", "",
        "| workload | instance | target util | load | jobs | mean JCT | p99 JCT | mean wait | "
        "slowdown | bubbles | util | best peer util | engine forecast err/wait |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    body: list[str] = []
    missing = []
    for label, _trace, _shape, inst, _jobs in grid:
        for target in targets:
            cell = by_tag.get(cell_tag(label, inst, target))
            if cell is None:
                missing.append(f"{label} on {inst} at {target:g}")
                continue
            lines.append(summary_row(cell))
            body += cell_section(cell, cell_dir, out)
    if missing:
        lines += ["", "Not run (no result in the cell directory): " + "; ".join(missing) + "."]
    text = "\n".join([*lines, "", *body])
    write_atomic(out, text + "\n")
    print(f"wrote {out}")


def cell_section(cell: dict, cell_dir: Path, out: Path) -> list[str]:
    head = f"## {cell['label']} on {cell['instance']}, target utilisation {cell['target']:g}"
    facts = cell.get("facts") or {}
    limit = "all" if cell["jobs_limit"] is None else f"the first {cell['jobs_limit']}"
    if cell.get("load") is None:
        return [head, "", f"Not reachable with {limit} jobs: the probe peers reach at most "
                f"{cell['probe_reached']:.2f} within the arrival window "
                f"({facts.get('load_note') or 'at the highest load probed'}). Probes took "
                f"{cell['wall_s']:.0f} s.", ""]
    out_lines = [f"{head}: load {cell['load']:.3g} (probe {cell['probe_reached']:.2f}), "
                 f"{facts['jobs']} jobs ({limit} of the trace) over "
                 f"{facts['arrival_window_s'] / 3600:.1f} h; {cell['date']}, commit "
                 f"{cell['commit']}, engine budget {cell['budget_s']:g} s, cell wall "
                 f"{cell['wall_s']:.0f} s" + (
                     f"; engine rows re-run {cell['engine_rerun']['date']} at commit "
                     f"{cell['engine_rerun']['commit']}" if cell.get("engine_rerun") else ""),
                 "", *table(cell["rows"], cell["lower_bound"]), ""]
    eng = cell["rows"][0]
    if eng["finished"] < eng["jobs"]:
        out_lines += [f"**The engine finished {eng['finished']} of {eng['jobs']} jobs** (the "
                      "replay ended with jobs it never started): no ratio is given.", ""]
    else:
        for name, r in (cell.get("ratios_by_engine") or {"engine": cell["ratios"]}).items():
            out_lines += [f"{name} / best peer: " + ", ".join(
                f"{k} {v:.3f}" for k, v in r.items()), ""]
    rel = os.path.relpath(cell_dir, out.parent)
    out_lines += [f"![{Path(c).stem}]({rel}/{c})" for c in cell.get("charts", [])]
    return [*out_lines, ""]


def load_cells(cell_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(cell_dir.glob("*.json"))]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--targets", default=None, help="utilisations to reach (default "
                    "0.7,0.8,0.9; --quick: 0.8)")
    ap.add_argument("--budget", type=float, default=None, help="engine budget per round "
                    "(default 1 s; --quick: 0.2 s)")
    ap.add_argument("--probes", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="comma-separated label@instance to run")
    ap.add_argument("--peers", default=None, help="comma-separated peers (default all)")
    ap.add_argument("--assemble", action="store_true", help="only rebuild the report from "
                    "the cells present")
    ap.add_argument("--engine-only", action="store_true", help="re-run only the engine rows "
                    "of the cells present (their loads and peer rows kept)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    args.peers = args.peers.split(",") if args.peers else None
    quick = args.quick
    targets = [float(x) for x in (args.targets or ("0.8" if quick else "0.7,0.8,0.9"))
               .split(",")]
    budget = args.budget if args.budget is not None else (0.2 if quick else 1.0)
    probes = args.probes if args.probes is not None else 2
    out = args.out or ROOT / "bench" / "results" / ("simulate-quick.md" if quick
                                                     else "simulate.md")
    cell_dir = out.parent / out.stem
    grid = QUICK if quick else FULL
    command = "bench/bench_simulate.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.engine_only:
        for cell in load_cells(cell_dir):
            if args.only and f"{cell['label']}@{cell['instance']}" not in args.only.split(","):
                continue
            if cell["target"] not in targets:
                continue
            print(f"## engine rows of {cell['label']} on {cell['instance']} at "
                  f"{cell['target']:g}", flush=True)
            print(summary_row(rerun_engines(cell, budget, cell_dir)), flush=True)
    elif not args.assemble:
        for label, trace, shape, inst, jobs in grid:
            if args.only and f"{label}@{inst}" not in args.only.split(","):
                continue
            cache: dict = {}
            for target in targets:
                print(f"## {label} on {inst}, target {target:g}", flush=True)
                cell = run_cell(label, trace, shape, inst, jobs, target, args, budget, probes,
                                cache, cell_dir)
                print(summary_row(cell), flush=True)
    all_targets = sorted({*targets, *(c["target"] for c in load_cells(cell_dir))})
    assemble(load_cells(cell_dir), grid, all_targets, out, cell_dir, command)


if __name__ == "__main__":
    main()
