"""Pricing bench: what it costs to price every job of a large instance with THE speed
model when jobs name no parallelism (the planner's best, memoised) against the default rule.

For the generated 16k and 131k instances of bench_scale (16,000 pending jobs at 131k, H100
and A100 types): each job on each GPU type through ``type_speed`` (what the simulator, the
over-time schedule and the federation's pricing ask), cold (a fresh process: every distinct
(model, type, GPUs) planned once) and warm (the same calls again: dictionary look-ups).
Prints one line per scale with the distinct keys, plans made, fallbacks to the default rule,
seconds cold and warm, and the machine's load.

    .venv/bin/python bench/bench_pricing.py [--sizes 16k,131k]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="16k,131k")
    args = ap.parse_args()
    from bench.bench_scale import SIZES, instance_file
    from hyperplace.costmodel import speed as S
    from hyperplace.instances.registry import load_instance

    for label in args.sizes.split(","):
        gpus, jobs, _ = SIZES[label]
        path, _ = instance_file(gpus, jobs)
        inst = load_instance(path)
        types = sorted({inst.catalog.get(n.gpu_type).name for c in inst.clusters
                        for n in c.nodes})
        work = [(j.spec.model, j.total_gpus, j.spec.parallelism) for j in inst.jobs]
        for rule, par in (("planner", None), ("default rule", S.DEFAULT_RULE)):
            S.clear_caches()
            began = time.perf_counter()
            for model, n, declared in work:
                for t in types:
                    S.type_speed(model, t, n, catalog=inst.catalog,
                                 parallelism=declared if declared is not None else par)
            cold = time.perf_counter() - began
            began = time.perf_counter()
            for model, n, declared in work:
                for t in types:
                    S.type_speed(model, t, n, catalog=inst.catalog,
                                 parallelism=declared if declared is not None else par)
            warm = time.perf_counter() - began
            keys = len({(m, n) for m, n, _ in work}) * len(types)
            print(f"{label}: {len(work)} jobs x {len(types)} types, {keys} distinct keys, "
                  f"{rule}: plans {S.planner_stats['plans']} (fallbacks "
                  f"{S.planner_stats['fallbacks']}), cold {cold:.2f} s, warm {warm * 1e3:.1f} ms"
                  f" | load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
