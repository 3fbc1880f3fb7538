"""Units cut into pieces at scale (#8 cases 2-3): does the piece model cost anything?

Usage::

    .venv/bin/python bench/bench_pieces.py [--sizes 4k,16k] [--root CHECKOUT] [-o FILE]

For each size, a generated round as in ``bench_scale`` (H100-80 + A100-80 SuperPOD, 90 % of
GPUs held by running jobs, seed 1), once as generated (its units all fit one node, so no
class is cut) and once with 20 high-priority jobs of 16-GPU TP units (NVLink >= 900,
``maxHopCount`` 1) added: 10 of 2 replicas (flexible: piece variables per unit) and 10 of 8
replicas (pooled: cut patterns). Per round: CPU seconds to build the problem and the model,
the model's variables, greedy's CPU and admitted jobs, then ``solve_placement(auto, budget
10 s)``: status, objective 1, its gap, admitted jobs (of them the 20 cut jobs), CPU and wall
seconds, and the independent checker's violations. ``--root`` imports hyperplace from
another checkout (to compare with the code before a change). CPU time is reported beside
wall time because the bench machine is shared.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

SIZES = {"4k": (4_096, 400), "16k": (16_384, 2_000)}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4k,16k")
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    ap.add_argument("-o", "--output", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(args.root))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchlib import machine

    from hyperplace.check import check
    from hyperplace.formulations.placement import PlacementProblem, build_model
    from hyperplace.instances.generator import generate, model_parallel_job
    from hyperplace.solvers.driver import solve_placement
    from hyperplace.solvers.heuristics.greedy import solve_greedy

    rows = []
    for label in args.sizes.split(","):
        gpus, jobs = SIZES[label]
        base = generate(gpus, jobs, ["H100-80", "A100-80"], 0.9, 1)
        cut = [model_parallel_job(f"cut-{i}", "m", replicas=2 if i % 2 else 8, tp=16,
                                  accelerator="H100", memory_gb=80, nvlink_gbps=900,
                                  tp_max_hops=1, dp_ib_gbps=None, priority="high")
               for i in range(20)]
        for name, extra in (("as generated", []), ("+20 cut jobs", cut)):
            inst = base.model_copy(update={"spec": base.spec.model_copy(
                update={"jobs": [*base.spec.jobs, *extra]})})
            t0 = _cpu()
            p = PlacementProblem(inst)
            pm = build_model(p)
            t1 = _cpu()
            a = solve_greedy(p)
            t2 = _cpu()
            wall = time.perf_counter()
            plan = solve_placement(inst, solver="auto", budget_s=10)
            wall = time.perf_counter() - wall
            t3 = _cpu()
            names = {j.job for j in plan.jobs}
            rows.append(f"| {label} | {name} | {t1 - t0:.2f} | {pm.lm.num_vars:,} | {t2 - t1:.2f} | "
                        f"{len(a.units)} | {plan.status} | {plan.objective:,.0f} | {plan.gap:.4f} | "
                        f"{len(names)} ({sum(1 for j in extra if j.name in names)}) | "
                        f"{t3 - t2:.1f} / {wall:.1f} | {len(check(plan, inst))} |")
            print(rows[-1], flush=True)
    head = [f"# Cut units at scale ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)", "",
            f"Machine: {machine()}, shared (load average {open('/proc/loadavg').read().split()[0]}).",
            f"Command: `python bench/bench_pieces.py --sizes {args.sizes}"
            + (f" --root {args.root}`" if args.root != Path(__file__).resolve().parent.parent else "`"), "",
            "| size | queue | problem+model CPU s | variables | greedy CPU s | greedy admitted | "
            "auto status | objective 1 | gap | admitted (cut jobs) | CPU / wall s | violations |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    text = "\n".join(head + rows) + "\n"
    if args.output:
        args.output.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
