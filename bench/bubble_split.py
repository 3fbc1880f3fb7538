"""Where a replay's bubble GPU-hours come from: decided or undecided.

Usage::

    .venv/bin/python bench/bubble_split.py CELL POLICY[/ORDER]

``CELL`` names a cell of the over-time bench (``bench/results/simulate/<CELL>.json``: its trace,
repeat, load, seed and budget are replayed as the cell replays them); ``POLICY`` is ``engine``
or a peer with its node order (``kueue/fast-first``). Prints one JSON line (a repeated
trace is written under the system's temporary directory).

The bubble metric (:func:`hyperplace.sim.metrics.bubble_gpu_s`) counts every free GPU while a
waiting job fits by count. Each interval between the replay's samples is split: **undecided**
when only jobs that arrived after the last round boundary (a multiple of the 60 s round) fit:
they wait for the next round whatever the policy (the round granularity every policy of the
bench shares); **decided** when a job that was in the queue at that round fits and still waits
(the policy's own choice, or what it could not place). Measured 2026-12-02 (issue #21, sched's
note): Alibaba 2023 x2 at 0.8, Kueue 255.9 of 265.0 GPU-h undecided, the engine 252.9 of 435.9.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_simulate as B  # noqa: E402

from hyperplace.sim.simulator import SimConfig, simulate  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def split(run, round_s: float = 60.0) -> dict[str, float]:
    """Bubble, decided, undecided and idle GPU-hours of ``run`` within its arrival window."""
    t0 = min(r.job.submit_s for r in run.records)
    t1 = run.arrival_end_s
    recs = sorted((r.job.submit_s, r.first_start_s if r.first_start_s is not None
                   else float("inf"), r.job.gpus) for r in run.records)
    samples = run.samples
    total = decided = idle = 0.0
    for a, b in zip(samples, [*samples[1:], None]):
        lo, hi = max(a.time_s, t0), min(b.time_s if b is not None else t1, t1)
        if hi <= lo:
            continue
        idle += a.free * (hi - lo)
        if not (a.smallest_waiting and a.free >= a.smallest_waiting):
            continue
        total += a.free * (hi - lo)
        boundary = (a.time_s // round_s) * round_s
        if any(sub <= boundary and start > a.time_s and g <= a.free
               for sub, start, g in recs if sub <= boundary):
            decided += a.free * (hi - lo)
    return {"bubble_h": total / 3600, "decided_h": decided / 3600,
            "undecided_h": (total - decided) / 3600, "idle_h": idle / 3600}


def main(argv: list[str]) -> None:
    cell, policy = argv[0], argv[1]
    d = json.loads((ROOT / "bench" / "results" / "simulate" / f"{cell}.json").read_text())
    spec = {"trace": d["trace"], "workload": d["workload"], "instance": d["instance"],
            "jobs": d["jobs_limit"], "repeat": d["repeat"], "seed": d["seed"], "load": d["load"]}
    instance, wl, _ = B.workload(spec)
    name, _, order = policy.partition("/")
    inst = instance if not order else B.reorder_nodes(instance, order == "fast-first")
    cfg = SimConfig(round_s=60, budget_s=d["budget_s"], seed=d["seed"])
    run = simulate(inst, copy.deepcopy(wl.jobs), name, cfg)
    out = {k: round(v, 1) for k, v in split(run, cfg.round_s).items()}
    print(json.dumps({"cell": cell, "policy": policy, **out,
                      "util": round(B.summarize(run)["utilisation_in_window"], 3)}))


if __name__ == "__main__":
    main(sys.argv[1:])
