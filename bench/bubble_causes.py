"""Why the GPUs of a replay's bubbles sat free: the bench's bubble GPU-hours broken down.

Usage::

    .venv/bin/python bench/bubble_causes.py CELL.json [POLICY ...]

Replays ``POLICY`` (default: the cell's engine) on the cell's own workload and load
(``bench/results/simulate/<cell>.json``, as :mod:`bench_simulate` replays it: seed 0, engine
budget 1 s, the engine's round 60 s, every peer at its upstream cadence) and prints its bubble
GPU-hours (the bench's measure, :func:`hyperplace.sim.metrics.bubble_gpu_s`: every free GPU
while the smallest waiting job fits by count, within the arrival window) split by cause.
After every round or fill (the loop's ``run_round``, its starts applied) it records the free
GPUs per node, each waiting job and whether it fits by count on the free GPUs of the types
it accepts, and what the policy holds: the engine's reservations (``_reserved``) and the
starts its last round planned later (``_plan`` and the schedule's later starts). Each
stretch of the bubble measure is charged to the record before it:

* ``type``: no waiting job fits by count on the free GPUs of the types it accepts (the free
  GPUs are of other types: every policy pays this);
* ``reserved``: every job that fits so holds a reservation of the engine;
* ``planned``: every such job is reserved or planned to start later (waiting for another
  pool, typically a faster type, or behind a reservation);
* ``other``: some job that fits so is neither (per-node fit, topology rules, gangs).

Measured 2026-12-03 (main 79b5547's cells; bench/results/simulate.md says where): see the
README's over-time section.
"""

from __future__ import annotations

import bisect
import copy
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_simulate as B  # noqa: E402

from hyperplace.sim import loop as L  # noqa: E402
from hyperplace.sim.metrics import bubble_gpu_s  # noqa: E402
from hyperplace.sim.peers import PeerPlacer  # noqa: E402
from hyperplace.sim.simulator import SimConfig, simulate  # noqa: E402

CAUSES = ("type", "reserved", "planned", "other")


def causes(instance, jobs, policy: str, config: SimConfig) -> tuple[dict[str, float], float]:
    """GPU-seconds of bubbles by cause (:data:`CAUSES`) and the bench's total for one replay
    (the causes add up to the total)."""
    elig = PeerPlacer(instance, "kueue")  # nodes of the types a job accepts
    records: list[tuple[float, list[tuple[str, bool]], set[str], set[str]]] = []
    orig = L.RoundLoop.run_round

    def run_round(lp, now, **kw):
        res = orig(lp, now, **kw)
        st = lp.state
        free = {n: len(st.free_gpus(n)) for n in st.nodes if not st.node_down(n)}
        pol = lp.policy
        reserved = set(getattr(pol, "_reserved", None) or {})
        planned = set(getattr(pol, "_plan", None) or {})
        last = getattr(pol, "last", None)
        if last is not None:
            planned |= {n for n, e in last.entries.items() if e.start_step}
        waiting = [(j.name, sum(free.get(n, 0) for n in elig.accepted_nodes(j.name, j.manifest))
                    >= j.gpus) for j in lp.queue.values()]
        records.append((now, waiting, reserved, planned))
        return res

    L.RoundLoop.run_round = run_round
    try:
        run = simulate(instance, jobs, policy, config)
    finally:
        L.RoundLoop.run_round = orig
    t0 = min(r.job.submit_s for r in run.records)
    t1 = run.arrival_end_s
    times = [r[0] for r in records]
    out = dict.fromkeys(CAUSES, 0.0)
    samples = run.samples
    for a, b in zip(samples, [*samples[1:], None]):
        s, e = max(a.time_s, t0), min(b.time_s if b is not None else t1, t1)
        if e <= s or not a.smallest_waiting or a.free < a.smallest_waiting:
            continue
        g = a.free * (e - s)
        i = bisect.bisect_right(times, a.time_s) - 1
        fits = [n for n, f in records[i][1] if f] if i >= 0 else None
        if fits is None:
            out["other"] += g
        elif not fits:
            out["type"] += g
        elif all(n in records[i][2] for n in fits):
            out["reserved"] += g
        elif all(n in records[i][2] or n in records[i][3] for n in fits):
            out["planned"] += g
        else:
            out["other"] += g
    return out, bubble_gpu_s(run, t0, t1)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args:
        raise SystemExit(__doc__.split("\n\n")[1])
    cell = json.loads(Path(args[0]).read_text())
    spec = {"trace": cell["trace"], "workload": cell["workload"], "instance": cell["instance"],
            "jobs": cell["jobs_limit"], "repeat": cell.get("repeat", 1), "load": cell["load"],
            "seed": cell.get("seed", 0)}
    instance, wl, _facts = B.workload(spec)
    for policy in args[1:] or ["engine"]:
        name, _, order = policy.partition("/")
        inst = instance if not order else B.reorder_nodes(instance, order == "fast-first")
        cfg = SimConfig(round_s=60, budget_s=cell["budget_s"], seed=spec["seed"])
        got, total = causes(inst, copy.deepcopy(wl.jobs), name, cfg)
        print(f"{policy}: bubbles {total / 3600:,.1f} GPU-h: " + ", ".join(
            f"{k} {v / 3600:,.1f}" for k, v in got.items()), flush=True)


if __name__ == "__main__":
    main()
