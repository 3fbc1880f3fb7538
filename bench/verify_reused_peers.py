"""Re-replay peer rows of committed over-time cells on today's code and compare.

``bench_simulate.py --peers-from-cells`` reuses each cell's peer rows (computed at an older
commit) beside engine rows replayed today. This checks that the reuse compares the same
work: each named peer row is replayed now from the cell's own spec (trace, jobs, repeat,
workload, instance, load, seed, node order, budget) and its headline metrics must equal the
stored ones exactly (the peers' replays are deterministic). Usage::

    .venv/bin/python bench/verify_reused_peers.py bench/results/simulate/CELL.json \\
        kueue/fast-first slurm/fast-first ...

Prints one line per row: ``identical`` or the metrics that differ; exits 1 on a difference.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_simulate as grid  # noqa: E402

KEYS = ("jct_mean_s", "jct_p99_s", "wait_mean_s", "bounded_slowdown_mean",
        "bubble_gpu_hours", "utilisation_in_window", "finished")


def main(argv: list[str]) -> int:
    cell = json.loads(Path(argv[0]).read_text())
    bad = 0
    with tempfile.TemporaryDirectory() as cache:
        for pol in argv[1:]:
            name, order = pol.split("/")
            spec = {"trace": cell["trace"], "jobs": cell["jobs_limit"], "repeat": cell["repeat"],
                    "workload": cell["workload"], "instance": cell["instance"],
                    "load": cell["load"], "seed": cell["seed"], "policy": name, "order": order,
                    "budget": cell["budget_s"], "until": "end"}
            now = grid.replay(spec, cache)["row"]
            old = next(r for r in cell["rows"] if r["policy"] == pol)
            diff = [(k, old.get(k), now.get(k)) for k in KEYS if old.get(k) != now.get(k)]
            bad += bool(diff)
            print(f"{cell['label']} {cell['target']} {pol} (stored at {old.get('commit')}): "
                  f"{'identical' if not diff else diff}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
