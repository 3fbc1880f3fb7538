"""Over-time bench: trace replay under the engine and the peers' queueing disciplines.

Usage::

    .venv/bin/python bench/bench_simulate.py [--hours H] [--loads 0.5,0.8,1.0,1.2]
        [--failures RATE] [--budget S] [--out bench/results/simulate.md]

Workloads (each at every offered load, failures off; and at load 1.0 with failures on):

* Philly sample on ``mixed-a100-h100`` and on ``superpod-h100-4su``;
* Alibaba 2023 sample on its own inventory (``alibaba-2023``);
* the foundation-model-shaped workload (``--workload fm``: AcmeTrace sizes on Philly's
  timing) on both ``mixed-a100-h100`` and ``superpod-h100-4su``.

Policies: ``engine``; the peers ``slurm`` (backfill), ``kueue`` (BestEffortFIFO),
``volcano`` (allocate) each run twice, with the nodes listed fastest GPU type first and
last (suffix ``/fast-first``, ``/fast-last``), so no gain comes from a peer's unlucky node
order; ``fifo`` once (fast first). The engine's ratio is to the best peer run.

The default run keeps to a few minutes on 2 cores by replaying short windows of each trace
(``--hours``: 3 h of Philly, 8x that of the sparser Alibaba sample); the windows are stated
in the output. Scale is not the point here; per-round solve times at scale are in
``bench/results/placement.md``.
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

from hyperplace.instances import load_instance  # noqa: E402
from hyperplace.sim.metrics import summarize, write_atomic  # noqa: E402
from hyperplace.sim.run import SimRequest, build_workload  # noqa: E402
from hyperplace.sim.simulator import SimConfig, simulate  # noqa: E402
from hyperplace.sim.state import reorder_nodes  # noqa: E402

WORKLOADS = [  # (label, trace, instance, workload, window factor)
    ("philly", "philly", "mixed-a100-h100", "trace", 1),
    ("philly", "philly", "superpod-h100-4su", "trace", 1),
    ("alibaba-2023", "alibaba-2023", "alibaba-2023", "trace", 8),
    ("fm", "philly", "mixed-a100-h100", "fm", 1),
    ("fm", "philly", "superpod-h100-4su", "fm", 1),
]
PEERS = ("slurm", "kueue", "volcano")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_config(trace: str, inst_name: str, workload: str, hours: float, load: float,
               failures: float, budget: float, seed: int) -> list[dict]:
    instance = load_instance(inst_name)
    req = SimRequest(trace=trace, end_s=hours * 3600, workload=workload, load=load)
    wl, facts = build_workload(req, instance, seed)
    cfg = SimConfig(round_s=60, budget_s=budget, failures=failures, seed=seed)
    fast_first = reorder_nodes(instance, True)
    fast_last = reorder_nodes(instance, False)
    rows = []
    plan = [("engine", instance, "engine")]
    for p in PEERS:
        plan += [(p, fast_first, f"{p}/fast-first"), (p, fast_last, f"{p}/fast-last")]
    plan.append(("fifo", fast_first, "fifo/fast-first"))
    for policy, inst, label in plan:
        t0 = time.perf_counter()
        run = simulate(inst, copy.deepcopy(wl.jobs), policy, cfg)
        row = summarize(run)
        row["policy"] = label
        row["wall_s"] = time.perf_counter() - t0
        row["jobs_in_window"] = facts["jobs"]
        rows.append(row)
    return rows


def fmt(v: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if v is None else f"{v / scale:,.{digits}f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hours", type=float, default=3.0)
    ap.add_argument("--loads", default="0.5,0.8,1.0,1.2")
    ap.add_argument("--failures", type=float, default=50.0,
                    help="failure rate (x Meta's Llama 3 rate) for the failures-on runs")
    ap.add_argument("--budget", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="comma-separated workload labels to run")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "simulate.md")
    args = ap.parse_args(argv)
    loads = [float(x) for x in args.loads.split(",")]
    started = time.time()
    lines = [
        "# Over-time bench: trace replay, engine vs the peers' queueing disciplines", "",
        f"- date: {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- machine: {os.cpu_count()} CPUs ({cpu_model()}), Python {platform.python_version()};"
        " shared with other engineers' jobs, so wall times are noisy",
        f"- command: `bench/bench_simulate.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        f"- windows: the first {args.hours:g} h of Philly, {8 * args.hours:g} h of Alibaba 2023 "
        f"(then rescaled to each offered load); round 60 s; engine budget {args.budget:g} s per "
        f"round; failures-on runs at {args.failures:g}x Meta's Llama 3 rate (a short window "
        "at 1x sees almost none)",
        "- JCT and wait in hours; slowdown = mean bounded slowdown (10 s floor); util = GPU "
        "utilisation within the arrival window; idle = mean GPUs free while jobs wait; "
        "ratio = engine / best peer run (lower is better for JCT and slowdown)", "",
    ]
    summary_rows = []
    for label, trace, inst, workload, factor in WORKLOADS:
        if args.only and label not in args.only.split(","):
            continue
        for load, failures in [*((x, 0.0) for x in loads), (1.0, args.failures)]:
            rows = run_config(trace, inst, workload, args.hours * factor, load, failures,
                              args.budget, args.seed)
            head = (f"## {label} on {inst}, load {load:g}, failures "
                    f"{'off' if not failures else f'{failures:g}x'} "
                    f"({rows[0]['jobs_in_window']} jobs)")
            lines += [head, "",
                      "| policy | done | JCT mean | JCT p99 | wait mean | slowdown | makespan "
                      "| util | idle | lost GPU-h | solve p50/p99/max s | wall s |",
                      "|---|---|---|---|---|---|---|---|---|---|---|---|"]
            for r in rows:
                lines.append(
                    f"| {r['policy']} | {r['finished']}/{r['jobs']} | {fmt(r['jct_mean_s'], 3600)}"
                    f" | {fmt(r['jct_p99_s'], 3600)} | {fmt(r['wait_mean_s'], 3600)} | "
                    f"{fmt(r['bounded_slowdown_mean'])} | {fmt(r['makespan_s'], 3600)} | "
                    f"{fmt(r['utilisation_in_window'], 0.01, 1)}% | "
                    f"{fmt(r['free_unusable_gpus_mean'], 1, 1)} | "
                    f"{fmt(r['gpu_hours_lost_to_failures'], 1, 1)} | "
                    f"{fmt(r['solve_p50_s'], 1, 3)}/{fmt(r['solve_p99_s'], 1, 3)}/"
                    f"{fmt(r['solve_max_s'], 1, 3)} | {r['wall_s']:.1f} |")
            eng = rows[0]
            peers = rows[1:]
            ratio = {}
            for key in ("jct_mean_s", "jct_p99_s", "bounded_slowdown_mean",
                        "utilisation_in_window"):
                vals = [p[key] for p in peers if p[key]]
                if vals and eng[key]:
                    best = max(vals) if key == "utilisation_in_window" else min(vals)
                    ratio[key] = eng[key] / best
            lines += ["", "engine / best peer: " + ", ".join(
                f"{k} {v:.3f}" for k, v in ratio.items()), ""]
            summary_rows.append((label, inst, load, failures, ratio, eng["finished"],
                                 eng["jobs"]))
            print(head, {k: round(v, 3) for k, v in ratio.items()}, flush=True)
    lines[6:6] = ["## Summary: engine / best peer run", "",
                  "| workload | instance | load | failures | mean JCT | p99 JCT | mean slowdown"
                  " | utilisation |", "|---|---|---|---|---|---|---|---|"] + [
        f"| {lab} | {inst} | {load:g} | {'off' if not f else f'{f:g}x'} | "
        f"{r.get('jct_mean_s', float('nan')):.3f} | {r.get('jct_p99_s', float('nan')):.3f} | "
        f"{r.get('bounded_slowdown_mean', float('nan')):.3f} | "
        f"{r.get('utilisation_in_window', float('nan')):.3f} |"
        for lab, inst, load, f, r, _, _ in summary_rows] + [
        "", f"Total bench wall time: {time.time() - started:.0f} s.", ""]
    write_atomic(args.out, "\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
