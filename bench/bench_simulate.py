"""Over-time bench: trace replay under contention, the engine against every peer.

Usage::

    .venv/bin/python bench/bench_simulate.py [--quick] [--targets 0.7,0.8,0.9]
        [--budget S] [--out bench/results/simulate.md]

Workloads: the bundled Philly and Alibaba 2023 samples and the foundation-model-shaped
workload (``fm``: AcmeTrace sizes on Philly's timing, large jobs long, small ones short), on
``mixed-a100-h100``, ``superpod-h100-4su`` and one federation (``seed-beijing-shanghai``,
replayed as one multi-cluster instance with one global queue).

**Loads.** For each workload and instance the bench searches the offered load
(``simulate --load``, :mod:`hyperplace.sim.workload`) at which the probe peer (Kueue
BestEffortFIFO, the cheapest of the strong peers) reaches each target utilisation within
the arrival window (bisection on the log of the load, replays cut at the last arrival);
the load found is then replayed to the end under every policy. A target the workload
cannot reach (too few jobs for the instance: the replay says "offer at most") is reported
as such, not run.

**Policies.** ``engine`` (the planning engine, :mod:`hyperplace.sim.planning`), and every
peer (``slurm`` backfill as a site configures it, ``kueue`` BestEffortFIFO, ``kueue-strict``,
``volcano``, ``fifo``) in both node orders (fastest GPU type listed first and last: suffix
``/fast-first``, ``/fast-last``), so no gain comes from a peer's unlucky node order. The
ratio row compares the engine with the best peer run per metric.

**Metrics** (:func:`hyperplace.sim.metrics.summarize`): mean, p50 and p99 JCT; mean wait;
mean bounded slowdown; bubble GPU-hours (free GPUs while a job that fits by count waits,
within the arrival window); utilisation within the arrival window; the engine's forecast
error (median absolute start error over the actual wait, for jobs that waited 10 min or
more); per-round solve p50/p99; and a lower bound: every job at its fastest speed, no
wait (JCT = work / best speed).

``--quick``: the Alibaba 2023 sample (1,318 jobs, short ones) and 150 fm jobs on
``mixed-a100-h100``, target 0.7 only, engine budget 0.2 s, 3 probes. (The first 400 Philly
jobs cannot load that instance beyond 0.60: Philly's jobs are long and small.)
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
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

FULL = [  # (label, trace, workload, instance, jobs)
    ("philly", "philly", "trace", "mixed-a100-h100", None),
    ("alibaba-2023", "alibaba-2023", "trace", "mixed-a100-h100", None),
    ("fm", "philly", "fm", "mixed-a100-h100", 600),
    ("philly", "philly", "trace", "superpod-h100-4su", None),
    ("alibaba-2023", "alibaba-2023", "trace", "superpod-h100-4su", None),
    ("fm", "philly", "fm", "superpod-h100-4su", 600),
    ("philly", "philly", "trace", "seed-beijing-shanghai", 600),
    ("fm", "philly", "fm", "seed-beijing-shanghai", 300),
]
QUICK = [("alibaba-2023", "alibaba-2023", "trace", "mixed-a100-h100", None),
         ("fm", "philly", "fm", "mixed-a100-h100", 150)]
PEERS = ("slurm", "kueue", "kueue-strict", "volcano", "fifo")
PROBE = "kueue"
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
    """The probe peer's utilisation within the arrival window at ``load`` (cut there)."""
    if load in cache:
        return cache[load]
    instance, wl, facts = workload(trace, shape, inst_name, jobs, load, seed)
    cfg = SimConfig(round_s=60, seed=seed, until_s=wl.jobs[-1].submit_s)
    row = summarize(simulate(reorder_nodes(instance, True), copy.deepcopy(wl.jobs), PROBE, cfg))
    cache[load] = (row["utilisation_in_window"] or 0.0, facts)
    return cache[load]


def find_load(trace, shape, inst_name, jobs, target, seed, cache, probes: int
              ) -> tuple[float | None, float, dict]:
    """The load at which the probe peer reaches ``target`` utilisation (None: unreachable)."""
    lo, hi = 0.3, 3.0
    u_hi, facts = probe_util(trace, shape, inst_name, jobs, hi, seed, cache)
    if facts.get("load_note") or u_hi < target:
        top = facts["offered_load"]
        u_top, f2 = probe_util(trace, shape, inst_name, jobs, top, seed, cache) \
            if not math.isclose(top, hi) else (u_hi, facts)
        if u_top < target:
            return None, u_top, f2
        hi = top
    best = (hi, u_hi)
    for _ in range(probes):
        mid = math.sqrt(lo * hi)
        u, _ = probe_util(trace, shape, inst_name, jobs, mid, seed, cache)
        if u >= target:
            hi, best = mid, (mid, u)
        else:
            lo = mid
    return best[0], best[1], facts


def lower_bound(instance, jobs) -> dict:
    sm = SpeedModel(instance)
    jct = sorted(j.work_s / max(sm.best_speed(j.manifest), 1e-9) for j in jobs)

    def pct(q):
        k = (len(jct) - 1) * q
        a, b = math.floor(k), math.ceil(k)
        return jct[a] + (jct[b] - jct[a]) * (k - a)
    return {"jct_mean_s": sum(jct) / len(jct), "jct_median_s": pct(0.5), "jct_p99_s": pct(0.99)}


def run_all(trace, shape, inst_name, jobs, load, budget, seed):
    instance, wl, facts = workload(trace, shape, inst_name, jobs, load, seed)
    cfg = SimConfig(round_s=60, budget_s=budget, seed=seed)
    plan = [("engine", instance, "engine")]
    orders = {"fast-first": reorder_nodes(instance, True),
              "fast-last": reorder_nodes(instance, False)}
    for p in PEERS:
        plan += [(p, inst, f"{p}/{o}") for o, inst in orders.items()]
    rows, runs = [], []
    for policy, inst, label in plan:
        t0 = time.perf_counter()
        run = simulate(inst, copy.deepcopy(wl.jobs), policy, cfg)
        row = summarize(run)
        row["policy"] = label
        row["wall_s"] = time.perf_counter() - t0
        row["load1"] = load1()
        rows.append(row)
        run.policy = label
        runs.append(run)
    return rows, runs, facts, lower_bound(instance, wl.jobs)


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


def ratios(rows) -> dict[str, float]:
    eng = rows[0]
    peers = rows[1:]
    out = {}
    for key in (*LOWER, "utilisation_in_window"):
        vals = [p[key] for p in peers if p[key] is not None]
        if not vals or eng[key] is None:
            continue
        best = max(vals) if key == "utilisation_in_window" else min(vals)
        if best > 0:
            out[key] = eng[key] / best
    return out


def charts(out_dir: Path, tag: str, runs) -> list[Path]:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    keep = [r for r in runs if r.policy == "engine" or r.policy.endswith("/fast-first")]
    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for run in keep:
        jct = sorted(r.jct_s / 3600 for r in run.records if r.jct_s is not None)
        if jct:
            ax.plot(jct, [(i + 1) / len(jct) for i in range(len(jct))], label=run.policy,
                    linewidth=1.2 if run.policy == "engine" else 0.8)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(tag, fontsize=8)
    ax.legend(fontsize=7)
    written.append(_save(fig, out_dir / f"{tag}-jct-cdf.png"))
    fig, ax = plt.subplots(figsize=(6, 4))
    sizes = [(1, 1), (2, 8), (9, 64), (65, 10 ** 9)]
    names = ["1", "2-8", "9-64", "65+"]
    width = 0.8 / max(len(keep), 1)
    for k, run in enumerate(keep):
        means = []
        for lo, hi in sizes:
            w = [r.queued_s / 3600 for r in run.records
                 if lo <= r.job.gpus <= hi and r.end_s is not None]
            means.append(sum(w) / len(w) if w else 0.0)
        ax.bar([i + k * width for i in range(len(sizes))], means, width, label=run.policy)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(sizes))], names)
    ax.set_xlabel("job size (GPUs)")
    ax.set_ylabel("mean wait (h)")
    ax.set_title(tag, fontsize=8)
    ax.legend(fontsize=7)
    written.append(_save(fig, out_dir / f"{tag}-wait-by-size.png"))
    fig, ax = plt.subplots(figsize=(6, 4))
    for run in keep:
        series = bubble_series(run)
        if series:
            ax.step([x for x, _ in series], [y for _, y in series], where="post",
                    label=run.policy, linewidth=0.8)
    ax.set_xlabel("time (h, arrival window)")
    ax.set_ylabel("bubble GPUs (free while a job that fits waits)")
    ax.set_title(tag, fontsize=8)
    ax.legend(fontsize=7)
    written.append(_save(fig, out_dir / f"{tag}-bubbles.png"))
    plt.close("all")
    return written


def _save(fig, path: Path) -> Path:
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".png")
    os.close(fd)
    fig.tight_layout()
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--targets", default=None, help="utilisations to reach (default "
                    "0.7,0.8,0.9; --quick: 0.7)")
    ap.add_argument("--budget", type=float, default=None, help="engine budget per round "
                    "(default 1 s; --quick: 0.2 s)")
    ap.add_argument("--probes", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="comma-separated label@instance to run")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    quick = args.quick
    targets = [float(x) for x in (args.targets or ("0.7" if quick else "0.7,0.8,0.9"))
               .split(",")]
    budget = args.budget if args.budget is not None else (0.2 if quick else 1.0)
    probes = args.probes if args.probes is not None else (3 if quick else 5)
    out = args.out or ROOT / "bench" / "results" / ("simulate-quick.md" if quick
                                                     else "simulate.md")
    chart_dir = out.parent / out.stem
    started = time.time()
    lines = [
        "# Over-time bench: replay under contention, engine vs every peer", "",
        f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; machine: "
        f"{os.cpu_count()} CPUs ({cpu_model()}), Python {platform.python_version()}, shared "
        f"with other engineers' jobs (1-min load average at start {load1()}; per row in "
        "the wall column)",
        f"- command: `bench/bench_simulate.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        f"- loads: the offered load at which {PROBE} (fast-first) reaches each target "
        f"utilisation within the arrival window ({probes} bisection probes); round 60 s; "
        f"engine budget {budget:g} s per round; predictions with the default lognormal error "
        "(sigma 0.5); times in hours; slowdown = mean bounded slowdown (10 s floor); bubble "
        "= GPU-hours free while a job that fits by count waits (arrival window); forecast "
        "err/wait = median |planned - actual start| / wait for jobs that waited >= 10 min "
        "(their count)", "",
    ]
    summary = ["## Summary: engine / best peer run", "",
               "| workload | instance | target util | load | jobs | mean JCT | p99 JCT | "
               "mean wait | slowdown | bubbles | util |", "|---|---|---|---|---|---|---|---|---"
               "|---|---|"]
    body: list[str] = []
    for label, trace, shape, inst, jobs in (QUICK if quick else FULL):
        if args.only and f"{label}@{inst}" not in args.only.split(","):
            continue
        cache: dict = {}
        for target in targets:
            load, reached, facts = find_load(trace, shape, inst, jobs, target, args.seed,
                                             cache, probes)
            head = f"## {label} on {inst}, target utilisation {target:g}"
            if load is None:
                body += [head, "", f"Not reachable: {PROBE} reaches at most "
                         f"{reached:.2f} within the arrival window "
                         f"({facts.get('load_note') or 'at the highest load probed'}).", ""]
                summary.append(f"| {label} | {inst} | {target:g} | - | {facts['jobs']} | "
                               f"unreachable (max {reached:.2f}) | | | | | |")
                print(head, "unreachable", round(reached, 3), flush=True)
                continue
            rows, runs, facts, lb = run_all(trace, shape, inst, jobs, load, budget, args.seed)
            r = ratios(rows)
            eng = rows[0]
            if eng["finished"] < eng["jobs"]:  # ratios over the finished jobs would flatter
                r = {}
                body += [f"**The engine finished {eng['finished']} of {eng['jobs']} jobs** (the "
                         "replay ended with jobs it never started): no ratio is given.", ""]
            body += [f"{head}: load {load:.3g} ({PROBE} {reached:.2f}), {facts['jobs']} jobs "
                     f"over {facts['arrival_window_s'] / 3600:.1f} h", "", *table(rows, lb), "",
                     "engine / best peer: " + ", ".join(f"{k} {v:.3f}" for k, v in r.items()),
                     ""]
            summary.append(
                f"| {label} | {inst} | {target:g} | {load:.3g} | {facts['jobs']} | "
                + (f"engine finished {eng['finished']}/{eng['jobs']} | | | | | |" if not r else
                   " | ".join(f"{r.get(k, float('nan')):.3f}" for k in (
                    "jct_mean_s", "jct_p99_s", "wait_mean_s", "bounded_slowdown_mean",
                    "bubble_gpu_hours", "utilisation_in_window")) + " |"))
            tag = f"{label}-{inst}-{target:g}"
            for p in charts(chart_dir, tag, runs):
                body.append(f"![{p.stem}]({chart_dir.name}/{p.name})")
            body.append("")
            print(head, {k: round(v, 3) for k, v in r.items()}, flush=True)
    text = "\n".join([*lines, *summary, "", *body,
                      f"Total bench wall time: {time.time() - started:.0f} s.", ""])
    write_atomic(out, text)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
