"""How much the over-time bench's figures move with the workload's seed.

Usage::

    .venv/bin/python bench/seed_spread.py [--out bench/results/simulate-seeds.md]

Reads the bench's cells (``bench/results/simulate/*.json``: seed 0) and the same cells
replayed with other seeds (``bench/results/simulate-seeds/seed<N>/*.json``, written by
``bench/bench_simulate.py --seed N --out bench/results/simulate-seeds/seed<N>/simulate.md``:
the seed draws the workload's models and the prediction errors; the load is searched again
per seed, so every seed's peers reach the same target utilisation) and writes, per cell
present in more than one seed, the engine / best faithful peer ratio of each goal per seed,
their range, and in how many seeds each of the issue's goals is met. Nothing is replayed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_simulate as B  # noqa: E402

ROOT = Path(__file__).resolve().parent / "results"
KEYS = ("jct_mean_s", "jct_p99_s", "wait_mean_s", "bounded_slowdown_mean",
        "bubble_gpu_hours", "utilisation_in_window")
SHORT = {"jct_mean_s": "JCT", "jct_p99_s": "p99", "wait_mean_s": "wait",
         "bounded_slowdown_mean": "slowdown", "bubble_gpu_hours": "bubbles",
         "utilisation_in_window": "util"}


def cells() -> dict[str, dict[int, dict]]:
    """Cell tag -> seed -> cell (only cells with a load: reachable)."""
    out: dict[str, dict[int, dict]] = {}
    dirs = [(0, ROOT / "simulate")] + sorted(
        (int(d.name[4:]), d) for d in (ROOT / "simulate-seeds").glob("seed*")
        if d.name[4:].isdigit())
    for seed, d in dirs:
        for f in sorted(d.glob("*.json")):
            cell = json.loads(f.read_text())
            if cell.get("load") is None or not cell.get("ratios"):
                continue
            out.setdefault(f.stem, {})[seed] = cell
    return {t: s for t, s in out.items() if len(s) > 1}


def met(key: str, value: float) -> bool:
    limit = B.GOALS[key]
    return value >= limit if key == "utilisation_in_window" else value <= limit


def forecast(cell: dict) -> float | None:
    return (cell["rows"][0].get("forecast") or {}).get("long_wait_median_error_over_wait")


def report(found: dict[str, dict[int, dict]]) -> str:
    lines = ["# Over-time bench: the spread over workload seeds", "",
             "Engine / best faithful peer per goal (the bench's ratios; forecast: the "
             "engine's median error / wait, goal 0.2), per seed of the workload (0: the "
             "bench's cells, `bench/results/simulate/`; others: `bench/results/"
             "simulate-seeds/seed<N>/`, the same command with `--seed N`). Written by "
             "`bench/seed_spread.py` from the cells; nothing is replayed.", "",
             "| cell | seed | load | " + " | ".join(SHORT[k] for k in KEYS)
             + " | forecast | engine commit |",
             "|" + "---|" * (len(KEYS) + 5)]
    summary = []
    for tag, seeds in sorted(found.items()):
        for seed, cell in sorted(seeds.items()):
            r, fc = cell["ratios"], forecast(cell)
            ratios = " | ".join(f"{r[k]:.3f}" if r.get(k) is not None else "-" for k in KEYS)
            shown = "-" if fc is None else f"{fc:.2f}"
            lines.append(f"| {tag} | {seed} | {cell['load']:.3f} | {ratios} | {shown} | "
                         f"{cell['rows'][0].get('commit', '-')} |")
        parts = []
        for k in KEYS:
            vals = [c["ratios"][k] for c in seeds.values() if c["ratios"].get(k) is not None]
            if vals:
                parts.append(f"{SHORT[k]} {min(vals):.3f}-{max(vals):.3f} (goal met in "
                             f"{sum(met(k, v) for v in vals)} of {len(vals)})")
        fcs = [f for c in seeds.values() if (f := forecast(c)) is not None]
        if fcs:
            parts.append(f"forecast {min(fcs):.2f}-{max(fcs):.2f} (met in "
                         f"{sum(f <= 0.2 for f in fcs)} of {len(fcs)})")
        summary.append(f"- {tag} over seeds {', '.join(map(str, sorted(seeds)))}: "
                       + "; ".join(parts))
    return "\n".join([*lines, "", *summary, ""])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=str(ROOT / "simulate-seeds.md"))
    args = ap.parse_args(argv)
    found = cells()
    if not found:
        print("no cell is present in more than one seed", file=sys.stderr)
        return 1
    text = report(found)
    out = Path(args.out)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(out)  # whole or not at all
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
