"""Dump every plan the engine makes on the bundled, peer and a few generated instances as
JSON without run-time fields, to prove a restructuring leaves plans identical.

Usage::

    .venv/bin/python bench/dump_plans.py OUT_DIR [--quick]
    diff -r BEFORE_DIR AFTER_DIR

Each file is ``solve(...).to_doc()`` (what ``hyperplace solve --format json`` writes) minus
``runtimeS`` and ``message`` (timing-dependent), one per (instance, solver). CP-SAT runs with
one worker so that its answer is deterministic.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hyperplace.benchkit.peer_cases import PEER_CASES, load_peer_case  # noqa: E402
from hyperplace.instances.generator import generate  # noqa: E402
from hyperplace.instances.registry import list_instances, load_instance  # noqa: E402
from hyperplace.solvers.driver import solve_placement  # noqa: E402

RUNTIME_FIELDS = ("runtimeS", "message")
GENERATED = [  # (gpus, jobs, fragmentation, size_scale)
    (256, 30, 0.5, 1), (512, 60, 0.9, 1), (1024, 40, 0.3, 8), (1024, 100, 0.9, 1)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--quick", action="store_true", help="skip instances above 2,000 GPUs")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cases = [(i.name, lambda n=i.name: load_instance(n), i.gpus) for i in list_instances()]
    cases += [(n, lambda n=n: load_peer_case(n), 0) for n in PEER_CASES]
    cases += [(f"gen-{g}g-{j}j-f{f}-x{s}",
               lambda g=g, j=j, f=f, s=s: generate(g, j, ["H100-80", "A100-80"], f, 1,
                                                   size_scale=s), g)
              for g, j, f, s in GENERATED]
    for name, load, gpus in cases:
        if args.quick and gpus > 2000:
            continue
        inst = load()
        for solver in ("greedy", "auto", "cpsat", "milp"):
            doc = solve_placement(inst, solver=solver, budget_s=20, seed=0, workers=1).to_doc()
            for key in RUNTIME_FIELDS:
                doc.pop(key, None)
            (args.out / f"{name}.{solver}.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
            print(name, solver, doc["status"], doc.get("objective"), flush=True)


if __name__ == "__main__":
    main()
