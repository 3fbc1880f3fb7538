"""Sharing benchmark (#14): preemption victims and lost work, hyperplace vs Kueue-style and
Volcano-style rules, on built single-round instances.

Each instance: N nodes of 8 H100, leaves of L nodes, every GPU held by a running job
(1, 2, 4 or 8 GPUs on one node, or 16 on two nodes of a leaf), priorities low/normal,
checkpoint ages 0-3600 s, admitted in random order; one pending high-priority job that
does not fit without preemption (8 GPUs on one node, or 2 x 8 within a leaf). Every
hyperplace plan passes the checker (asserted); a peer's preemption "fits" when
hyperplace's exact placement of the preemptor alone (CP-SAT) places it after the peer's
victims are stopped.

Run: ``.venv/bin/python bench/bench_sharing.py`` (writes bench/results/sharing.md).
"""

from __future__ import annotations

import os
import platform
import random
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from hyperplace.baselines.preemption import kueue_style, volcano_style  # noqa: E402
from hyperplace.check import check  # noqa: E402
from hyperplace.models.instance import RunningJob  # noqa: E402
from hyperplace.solvers.preemption import solve_with_preemption  # noqa: E402
from placement_helpers import instance, job, node  # noqa: E402


def build(seed: int, n_nodes: int, per_leaf: int):
    rng = random.Random(seed)
    nodes, running = [], []
    k = 0
    i = 0
    while i < n_nodes:
        if rng.random() < 0.2 and i % per_leaf <= per_leaf - 2:  # a 16-GPU job on two nodes
            name = f"r{k}"
            k += 1
            nodes += [node(f"n{i}", allocated={g: name for g in range(8)}),
                      node(f"n{i + 1}", allocated={g: name for g in range(8)})]
            running.append((name, 16))
            i += 2
            continue
        alloc, g = {}, 0
        while g < 8:
            size = rng.choice([s for s in (1, 2, 4, 8) if s <= 8 - g])
            name = f"r{k}"
            k += 1
            alloc.update({x: name for x in range(g, g + size)})
            running.append((name, size))
            g += size
        nodes.append(node(f"n{i}", allocated=alloc))
        i += 1
    rng.shuffle(running)  # admission order
    infos = [RunningJob(name=n, priority=rng.choice([1, 1, 2]),
                        checkpoint_age_s=rng.choice([0, 60, 300, 900, 1800, 3600]))
             for n, _ in running]
    shape = rng.choice(["8", "2x8"])
    pending = job("hi", priority="high") if shape == "8" else \
        job("hi", replicas=2, dp_hop=2, priority="high")
    inst = instance(nodes, [pending], nodes_per_leaf=per_leaf)
    spec = inst.spec.model_copy(update={"running_jobs": infos})
    return inst.model_copy(update={"spec": spec}), shape, len(running)


def repair_rows() -> list[str]:
    """Jobs placed by the engine, then one GPU under each fails: GPUs moved by the minimal
    repair vs placing each hit job anew (``replace-all``); both plans checked."""
    from hyperplace.models.sharing import released
    from hyperplace.solvers.driver import solve_placement
    from hyperplace.solvers.repair import repair, repair_instance

    out = []
    for n_nodes, per_leaf, seed in ((8, 4, 1), (16, 4, 2), (16, 4, 3), (32, 8, 4)):
        rng = random.Random(seed)
        specs = [job(f"j{i}", replicas=rng.choice([2, 3, 4]), dp_hop=2)
                 for i in range(n_nodes // 4)]
        base = instance([node(f"n{i}") for i in range(n_nodes)], specs, nodes_per_leaf=per_leaf)
        plan = solve_placement(base, solver="cpsat", budget_s=20)
        hold = {(g.node, g.gpu): p.job for p in plan.placements for g in p.gpus}
        running = released(base.with_jobs([]), [], hold=hold)
        infos = [RunningJob(name=j, checkpoint_age_s=rng.choice([60, 600, 1800]))
                 for j in plan.admitted]
        running = running.model_copy(update={"spec": running.spec.model_copy(
            update={"running_jobs": infos})})
        placed = [s for s in specs if s.name in plan.admitted]
        failed = [(n, g) for n, g in (rng.choice([k for k, v in hold.items() if v == s.name])
                                      for s in placed)]
        res = {}
        for strategy in ("minimal", "replace-all"):
            t = time.perf_counter()
            r = repair(running, placed, failed, strategy=strategy, solver="cpsat", budget_s=10)
            bad = check(r.plan, repair_instance(running, placed, failed))
            assert bad == [], (strategy, bad[:3])
            res[strategy] = (r.gpus_moved, sum(j.placed for j in r.jobs),
                             sum(len(j.kept_units) for j in r.jobs), time.perf_counter() - t)
        lost = sum(len([1 for v in hold.values() if v == s.name]) *
                   next(i.checkpoint_age_s for i in infos if i.name == s.name) for s in placed)
        m, a = res["minimal"], res["replace-all"]
        out.append(f"| {n_nodes} | {per_leaf} | {seed} | {len(placed)} | {len(failed)} | "
                   f"{m[0]} ({m[2]} units kept) | {a[0]} | {m[1]} / {a[1]} | {lost:,.0f} | "
                   f"{m[3]:.1f} / {a[3]:.1f} |")
    return out


def main() -> None:
    rows = []
    totals = {k: [0, 0.0, 0, 0] for k in ("hyperplace", "kueue", "volcano")}
    for n_nodes, per_leaf in ((4, 2), (8, 4), (16, 4)):
        for seed in range(1, 5):
            inst, shape, n_run = build(seed * 100 + n_nodes, n_nodes, per_leaf)
            t = time.perf_counter()
            plan = solve_with_preemption(inst, preemption="lower-priority", solver="cpsat",
                                         budget_s=30)
            secs = time.perf_counter() - t
            assert check(plan, inst) == [], (n_nodes, seed)
            ours = (len(plan.preemptions), sum(p.lost_gpu_seconds for p in plan.preemptions),
                    "hi" in plan.admitted)
            kq = kueue_style(inst, inst.jobs[0])
            vo = volcano_style(inst, inst.jobs[0])
            cells = []
            for key, (n, lost, fits) in (("hyperplace", ours),
                                         ("kueue", (len(kq.victims), kq.lost_gpu_seconds, kq.fits)),
                                         ("volcano", (len(vo.victims), vo.lost_gpu_seconds, vo.fits))):
                tot = totals[key]
                tot[0] += n
                tot[1] += lost
                tot[2] += int(fits)
                tot[3] += int(n > 0 and not fits)
                cells.append(f"{n} / {lost:,.0f} / {'yes' if fits else 'no'}")
            rows.append(f"| {n_nodes} | {per_leaf} | {seed} | {n_run} | {shape} | "
                        + " | ".join(cells) + f" | {plan.status.value} | {secs:.1f} |")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    out = [
        "# Sharing benchmark: preemption",
        "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}",
        f"- machine: {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}; "
        "shared by up to 8 engineers, so wall times are noisy",
        "- command: `.venv/bin/python bench/bench_sharing.py`",
        "- hyperplace: `solve_with_preemption(preemption='lower-priority', solver='cpsat', "
        "budget_s=30)`, every plan checked (0 violations asserted)",
        "- cells: victims / lost GPU-seconds (GPUs x seconds since checkpoint) / preemptor "
        "placed whole afterwards",
        "",
        "| nodes | nodes per leaf | seed | running jobs | pending | hyperplace | Kueue-style | "
        "Volcano-style | status | solve s |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "| rule | victims | lost GPU-seconds | preemptor placed | stopped jobs for nothing "
        "(victims, preemptor still not placed) |",
        "|---|---|---|---|---|",
        *[f"| {k} | {v[0]} | {v[1]:,.0f} | {v[2]} of {len(rows)} | {v[3]} |"
          for k, v in totals.items()],
        "",
        "## Repair after failures: GPUs moved",
        "",
        "Running jobs (2-4 replicas of 8 GPUs within one leaf) placed by the engine; one GPU "
        "under each fails. Minimal repair keeps healthy units when a replacement fits within "
        "the hop limit; `replace-all` places each hit job anew. Work lost is the same for both "
        "(each job restarts from its checkpoint). Both plans checked.",
        "",
        "| nodes | nodes per leaf | seed | running jobs | failed GPUs | GPUs moved: minimal | "
        "replace-all | jobs re-placed: minimal / replace-all | lost GPU-s | s: minimal / replace-all |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *repair_rows(),
        "",
    ]
    path = ROOT / "bench" / "results" / "sharing.md"
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(out))
    os.replace(tmp, path)
    print("\n".join(out))


if __name__ == "__main__":
    main()
