"""Reading, generation, problem building and checking at the largest fleets (#25), in CPU
seconds per million GPUs.

Usage::

    .venv/bin/python bench/bench_read.py [--sizes 131k,262k] [--no-check] [--label NAME]
        [--out bench/results/scale.md] [--json FILE]

For each size, in a fresh process: ``generate(gpus, jobs, ['H100-80', 'A100-80'], 0.6,
seed=1)`` (the single-cluster instance of ``bench_scale.py --large``), written as JSON and as
YAML, then each step timed on its own (``time.process_time``: this process's CPU, whatever
the machine's load): generating; reading the JSON text (``io.load_documents``) and the YAML
text; validating the documents into an ``Instance``; building the clusters' fabrics with
their domain tables; building the ``PlacementProblem``; greedy's plan (only so that the
checker has a plan of every admitted job to check: not timed as a step of reading); the
independent checker on that plan. The cyclic collector is off, as in a command's own
process (``commands.solve.pause_collector``). The load average (1 min) before and after
each size is reported beside it.

The section goes into ``--out`` between ``<!-- read:begin -->`` and ``<!-- read:end -->``
(the rest of the file is kept); ``--json`` keeps the raw rows, and ``--merge FILE`` adds rows
measured by another run (another commit, ``--label``) to the table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SIZES = {"131k": (131_072, 16_384), "262k": (262_144, 32_768)}
TYPES = ["H100-80", "A100-80"]
BEGIN, END = "<!-- read:begin -->", "<!-- read:end -->"
STEPS = ("generate", "read JSON", "read YAML", "validate", "fabric", "problem", "check")


def child(label: str, check: bool) -> dict:
    """One size in this process: the CPU seconds of each step."""
    gc.disable()
    from hyperplace.check import check as check_plan
    from hyperplace.formulations.placement.problem import PlacementProblem
    from hyperplace.instances.generator import generate
    from hyperplace.instances.registry import instance_from_documents, render_instance
    from hyperplace.io import load_documents
    from hyperplace.solvers.driver import solve_placement

    gpus, jobs = SIZES[label]
    out: dict = {"size": label, "gpus": gpus, "jobs": jobs, "load": [os.getloadavg()[0]]}

    def timed(step: str, fn):
        start = time.process_time()
        result = fn()
        out[step] = time.process_time() - start
        return result

    inst = timed("generate", lambda: generate(gpus, jobs, TYPES, 0.6, 1))
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for fmt in ("json", "yaml"):
            paths[fmt] = Path(tmp) / f"inst.{fmt}"
            paths[fmt].write_text(render_instance(inst, fmt))
        out["mb"] = paths["json"].stat().st_size / 1e6
        timed("read YAML", lambda: load_documents(paths["yaml"]))
        docs = timed("read JSON", lambda: load_documents(paths["json"]))
    loaded = timed("validate", lambda: instance_from_documents(docs, "bench"))
    timed("fabric", lambda: [c.network.radii for c in loaded.clusters])
    timed("problem", lambda: PlacementProblem(loaded, "performance"))
    if check:
        plan = solve_placement(loaded, solver="greedy", budget_s=600)
        out["admitted"] = len(plan.jobs)
        violations = timed("check", lambda: check_plan(plan, loaded))
        out["violations"] = len(violations)
    out["load"].append(os.getloadavg()[0])
    return out


def commit() -> str:
    try:
        return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def table(rows: list[dict]) -> list[str]:
    head = "| run | size | GPUs / jobs | " + " | ".join(f"{s} s (per M GPUs)" for s in STEPS) \
        + " | read + validate + fabric + problem s (per M) | load |"
    lines = [head, "|" + "---|" * (len(STEPS) + 5)]
    for r in rows:
        m = 1_048_576 / r["gpus"]
        cells = [f"{r[s]:.2f} ({r[s] * m:.1f})" if s in r else "-" for s in STEPS]
        core = sum(r[s] for s in ("read JSON", "validate", "fabric", "problem"))
        lines.append(f"| {r['label']} | {r['size']} | {r['gpus']:,} / {r['jobs']:,} | "
                     + " | ".join(cells) + f" | {core:.2f} ({core * m:.1f}) | "
                     f"{min(r['load']):.1f}-{max(r['load']):.1f} |")
    return lines


def write(path: Path, rows: list[dict], cmd: str) -> None:
    from hyperplace.io import write_atomic

    started = datetime.now(timezone.utc)
    section = [BEGIN, "## Reading, generation, problem building and checking (#25)", "",
               f"- date: {started:%Y-%m-%d %H:%M} UTC; 2 CPUs shared by 8 engineers: CPU "
               "seconds of this process (`time.process_time`), whatever the load (given per "
               "row, 1-min average before and after)",
               f"- command: `{cmd}`",
               "- instance: `generate(gpus, jobs, ['H100-80', 'A100-80'], 0.6, seed=1)` (the "
               "single cluster of `bench_scale.py --large`), written as JSON and YAML; each "
               "step alone: generate; `load_documents` of the JSON and of the YAML text; "
               "validating the documents into an Instance; the fabric with its domain "
               "tables; the PlacementProblem; the independent checker on greedy's plan of "
               "that instance (greedy not counted)", ""]
    section += table(rows) + ["", END]
    text = path.read_text() if path.exists() else "# Placement at scale\n"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + "\n".join(section) + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + "\n".join(section) + "\n"
    write_atomic(path, text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="131k,262k")
    ap.add_argument("--no-check", dest="check", action="store_false")
    ap.add_argument("--label", default=None, help="the run's name in the table (commit id)")
    ap.add_argument("--out", type=Path, default=None, help="results file to write into")
    ap.add_argument("--json", type=Path, default=None, help="keep the raw rows here")
    ap.add_argument("--merge", type=Path, action="append", default=[],
                    help="raw rows of another run (--json) to put in the table first")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.check)), flush=True)
        return
    label = args.label or commit()
    rows = [r for f in args.merge for r in json.loads(f.read_text())]
    for size in [s for s in args.sizes.split(",") if s]:
        cmd = [sys.executable, __file__, "--child", size] + ([] if args.check else ["--no-check"])
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(done.stderr[-2000:])
        row = json.loads(done.stdout.strip().splitlines()[-1])
        row["label"] = label
        rows.append(row)
        print(table([row])[-1], flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    if args.out:
        write(args.out, rows, "bench/bench_read.py " + " ".join(
            a for a in sys.argv[1:] if not a.startswith("--merge") and not a.endswith(".json")))


if __name__ == "__main__":
    main()
