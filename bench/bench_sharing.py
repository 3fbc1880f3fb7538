"""Sharing benchmark (#14), one section of bench/results/sharing.md per function, each
rewritten on its own (``--section NAME``; the others are kept as they are).

``preemption``: victims and lost work, hyperplace vs Kueue-style and Volcano-style rules,
on built single-round instances. ``repair``: GPUs moved by the minimal repair against
placing each hit job anew and against re-placing every running job from scratch, with and
without hot spares (:func:`repair_section`). ``defrag``: the largest free domain and lost
work of whole-cluster defragmentation and of ``defrag --for`` on fragmented rounds
(:func:`defrag_section`). ``spares``: hot spares chosen by the model against the designated
last nodes of each leaf (:func:`spares_section`).

Preemption instances: N nodes of 8 H100, leaves of L nodes, every GPU held by a running job
(1, 2, 4 or 8 GPUs on one node, or 16 on two nodes of a leaf), priorities low/normal,
checkpoint ages 0-3600 s, admitted in random order; one pending high-priority job that
does not fit without preemption (8 GPUs on one node, or 2 x 8 within a leaf). Every
hyperplace plan passes the checker (asserted); a peer's preemption "fits" when
hyperplace's exact placement of the preemptor alone (CP-SAT) places it after the peer's
victims are stopped.

Run: ``.venv/bin/python bench/bench_sharing.py [--section preemption|repair|defrag|spares]``.

Over time (``--over-time``, :func:`over_time`): three queues share 32 GPUs while one floods
them; hyperplace with and without the fair-share history against the peers' queueing rules,
per queue (Jain's index of weighted GPU-hours, longest wait, mean JCT, GPU-hours lost). It
writes only its own marked section of bench/results/sharing.md.
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

from hyperplace.baselines.preemption import (  # noqa: E402
    kueue_classical_style,
    kueue_style,
    volcano_style,
)
from hyperplace.check import check  # noqa: E402
from hyperplace.models.instance import RunningJob  # noqa: E402
from hyperplace.solvers.workflows.preemption import solve_with_preemption  # noqa: E402
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


def _running_round(seed: int, n_nodes: int, per_leaf: int, hot_spares: int = 0):
    """Jobs of 2-4 replicas x 8 GPUs (replicas within one leaf) placed by the engine (with
    ``hot_spares`` whole free nodes kept per leaf), then made running jobs with their
    manifests and checkpoint ages; one GPU under each fails."""
    from hyperplace.models.sharing import released
    from hyperplace.solvers.driver import solve_placement

    rng = random.Random(seed)
    specs = [job(f"j{i}", replicas=rng.choice([2, 3, 4]), dp_hop=2) for i in range(n_nodes // 4)]
    base = instance([node(f"n{i}") for i in range(n_nodes)], specs, nodes_per_leaf=per_leaf)
    plan = solve_placement(base, solver="cpsat", budget_s=20, hot_spares=hot_spares)
    hold = {(g.node, g.gpu): p.job for p in plan.placements for g in p.gpus}
    running = released(base.with_jobs([]), [], hold=hold)
    by_name = {s.name: s for s in specs}
    infos = [RunningJob(name=j, checkpoint_age_s=rng.choice([60, 600, 1800]), job=by_name[j])
             for j in plan.admitted]
    running = running.model_copy(update={"spec": running.spec.model_copy(
        update={"running_jobs": infos})})
    failed = [rng.choice([k for k, v in hold.items() if v == name]) for name in plan.admitted]
    return running, failed


def repair_section() -> list[str]:
    """GPUs moved by the minimal repair vs placing each hit job anew (``replace-all``) vs
    re-placing every running job from scratch (``replace-everything``); with and without
    hot spares."""
    from collections import Counter

    from hyperplace.solvers.workflows.repair import repair, repair_instance

    rows, spare_rows = [], []
    cpu0 = time.process_time()
    for n_nodes, per_leaf, seed in ((8, 4, 1), (16, 4, 2), (16, 4, 3), (32, 8, 4), (32, 8, 5),
                                    (64, 8, 6), (64, 8, 7)):
        running, failed = _running_round(seed, n_nodes, per_leaf)
        state = repair_instance(running, failed)
        res = {}
        for strategy in ("minimal", "replace-all", "replace-everything"):
            t = time.perf_counter()
            r = repair(running, failed, strategy=strategy, solver="cpsat", budget_s=10)
            codes = Counter(v.code for v in check(r.plan, state))
            if strategy != "replace-everything":
                assert not codes, (strategy, codes)
            res[strategy] = (r.gpus_moved, sum(j.placed for j in r.jobs),
                             sum(len(j.kept_units) for j in r.jobs), time.perf_counter() - t,
                             sum(j.lost_gpu_seconds for j in r.jobs if j.placed), codes)
        m, a, e = res["minimal"], res["replace-all"], res["replace-everything"]
        flagged = ", ".join(f"{c} {k}" for k, c in sorted(e[5].items())) or "none"
        rows.append(f"| {n_nodes} | {per_leaf} | {seed} | {len(failed)} | "
                    f"{m[1]} / {a[1]} / {e[1]} | {m[0]} / {a[0]} / {e[0]} | {m[2]} | "
                    f"{m[4]:,.0f} / {a[4]:,.0f} / {e[4]:,.0f} | {flagged} | "
                    f"{m[3]:.1f} / {a[3]:.1f} / {e[3]:.1f} |")
        for spares in (0, 1):
            running, failed = _running_round(seed, n_nodes, per_leaf, hot_spares=spares)
            t = time.perf_counter()
            r = repair(running, failed, solver="cpsat", budget_s=10, hot_spares=spares)
            assert check(r.plan, repair_instance(running, failed)) == []
            spare_rows.append(
                f"| {n_nodes} | {per_leaf} | {seed} | {spares} | {len(running.running_manifests)} | "
                f"{sum(len(j.kept_units) for j in r.jobs)} of "
                f"{sum(len(j.kept_units) + len(j.moved_units) for j in r.jobs)} | "
                f"{r.gpus_moved} | {sum(j.placed for j in r.jobs)} of {len(r.jobs)} | "
                f"{time.perf_counter() - t:.1f} |")
    cpu = time.process_time() - cpu0
    return [
        "## Repair after failures: GPUs moved",
        "",
        *_header("repair", f"CPU time of the section: {cpu:.0f} s"),
        "Running jobs (2-4 replicas of 8 GPUs, replicas within one leaf) placed by the engine; "
        "one GPU under each fails. `minimal` keeps healthy units when a replacement fits "
        "within the hop limit; `replace-all` places each hit job anew, whole; "
        "`replace-everything` releases every running job and places them all from scratch in "
        "one round (same formulation, CP-SAT). Work lost counts every moved job's GPUs x "
        "checkpoint age (a hit job restarts from its checkpoint whatever the strategy; a "
        "healthy job moved by `replace-everything` loses its work too). `minimal` and "
        "`replace-all` plans checked (0 violations asserted); the checker's verdict on the "
        "`replace-everything` plans is shown (`gpu-allocated`: a job the from-scratch round "
        "did not place again keeps its GPUs in the plan, which a plan cannot stop, so others "
        "collide with it; `migrate-unneeded`: a healthy job moved for nothing). Every running "
        "job is hit (one failed GPU each), so a job not repaired stops: GPUs moved only "
        "compare where the same jobs run again.",
        "",
        "| nodes | nodes per leaf | seed | running jobs, all hit | running again: minimal / "
        "replace-all / replace-everything | GPUs moved: minimal / replace-all / "
        "replace-everything | units kept by minimal | lost GPU-s: minimal / replace-all / "
        "replace-everything | checker on replace-everything | s: minimal / replace-all / "
        "replace-everything |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Hot spares: the same rounds placed with `--hot-spares 0` and `1` (one whole free "
        "node kept per leaf; fewer jobs may be placed), then the minimal repair, which may use "
        "the spares.",
        "",
        "| nodes | nodes per leaf | seed | hot spares | running jobs | units kept | GPUs moved "
        "| jobs repaired | s |",
        "|---|---|---|---|---|---|---|---|---|",
        *spare_rows,
        "",
    ]


def _header(section: str, extra: str = "") -> list[str]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                if ln.startswith("model name")), platform.processor())
    return [f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}",
            f"- machine: {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}; "
            "shared by up to 4 engineers, so wall times are noisy" + (f"; {extra}" if extra else ""),
            f"- command: `.venv/bin/python bench/bench_sharing.py --section {section}`", ""]


def write_section(lines: list[str]) -> None:
    """Replace (or append) the section whose ``## `` title is ``lines[0]`` in
    bench/results/sharing.md, keeping every other section as it is; the file is written
    whole (temp file + rename)."""
    path = ROOT / "bench" / "results" / "sharing.md"
    old = path.read_text().splitlines() if path.exists() else []
    title = lines[0]
    if title in old:
        i = old.index(title)
        j = next((k for k in range(i + 1, len(old))
                  if old[k].startswith(("## ", "<!-- "))), len(old))  # another's section
        new = old[:i] + lines + old[j:]
    else:
        new = old + ([""] if old and old[-1] else []) + lines
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(new).rstrip("\n") + "\n")
    os.replace(tmp, path)
    print("\n".join(lines))


def larger_rows() -> list[str]:
    """Larger rounds: the built clusters at 64 and 256 nodes, 8 and 16 pending jobs (2-16
    GPUs, normal or high priority, replicas within a leaf), greedy's heuristic against the
    exact model (``solver='auto'``, 10 s budget); every plan checked."""
    out = []
    for n_nodes, per_leaf, n_jobs in ((64, 8, 8), (256, 16, 16)):
        inst, _, n_run = build(7 * 100 + n_nodes, n_nodes, per_leaf)
        rng = random.Random(n_nodes)
        inst = inst.with_jobs([job(f"hi{i}", tp=rng.choice([2, 4, 8]),
                                   replicas=rng.choice([1, 1, 2]), dp_hop=2,
                                   priority=rng.choice(["normal", "high"]))
                               for i in range(n_jobs)])
        cells = []
        for solver in ("greedy", "auto"):
            t, c = time.perf_counter(), time.process_time()
            plan = solve_with_preemption(inst, preemption="lower-priority", solver=solver,
                                         budget_s=10)
            secs, cpu = time.perf_counter() - t, time.process_time() - c
            assert check(plan, inst) == [], (n_nodes, solver)
            cells.append(f"{len(plan.admitted)} / {len(plan.preemptions)} / "
                         f"{sum(p.lost_gpu_seconds for p in plan.preemptions):,.0f} / "
                         f"{plan.status.value} / {secs:.1f} / {cpu:.1f}")
        out.append(f"| {n_nodes} | {n_run} | {n_jobs} | " + " | ".join(cells) + " |")
    return out


def _stopped_by_priority(inst, victims) -> tuple[int, int]:
    """GPUs stopped of priority 1 (low) and 2 (normal): the bench's running jobs' levels."""
    from hyperplace.models.sharing import running_gpus

    held, info = running_gpus(inst), inst.running_job_info
    low = sum(len(held[v]) for v in victims if info[v].priority == 1)
    return low, sum(len(held[v]) for v in victims) - low


def preemption_section() -> list[str]:
    rows = []
    keys = ("hyperplace", "hyperplace greedy", "kueue", "kueue without TAS", "volcano")
    totals = {k: [0, 0.0, 0, 0, 0, 0] for k in keys}
    for n_nodes, per_leaf in ((4, 2), (8, 4), (16, 4)):
        for seed in range(1, 5):
            inst, shape, n_run = build(seed * 100 + n_nodes, n_nodes, per_leaf)
            t, c = time.perf_counter(), time.process_time()
            plan = solve_with_preemption(inst, preemption="lower-priority", solver="cpsat",
                                         budget_s=30)
            secs, cpu = time.perf_counter() - t, time.process_time() - c
            assert check(plan, inst) == [], (n_nodes, seed)
            greedy = solve_with_preemption(inst, preemption="lower-priority", solver="greedy",
                                           budget_s=30)
            assert check(greedy, inst) == [], (n_nodes, seed, "greedy")
            kq = kueue_style(inst, inst.jobs[0])
            kc = kueue_classical_style(inst, inst.jobs[0])
            vo = volcano_style(inst, inst.jobs[0])
            cells = []
            for key, victims, lost, fits in (
                    ("hyperplace", [p.job for p in plan.preemptions],
                     sum(p.lost_gpu_seconds for p in plan.preemptions), "hi" in plan.admitted),
                    ("hyperplace greedy", [p.job for p in greedy.preemptions],
                     sum(p.lost_gpu_seconds for p in greedy.preemptions), "hi" in greedy.admitted),
                    ("kueue", kq.victims, kq.lost_gpu_seconds, kq.fits),
                    ("kueue without TAS", kc.victims, kc.lost_gpu_seconds, kc.fits),
                    ("volcano", vo.victims, vo.lost_gpu_seconds, vo.fits)):
                low, normal = _stopped_by_priority(inst, victims)
                tot = totals[key]
                tot[0] += len(victims)
                tot[1] += lost
                tot[2] += int(fits)
                tot[3] += int(bool(victims) and not fits)
                tot[4] += low
                tot[5] += normal
                cells.append(f"{len(victims)} / {lost:,.0f} / {'yes' if fits else 'no'} / "
                             f"{low}+{normal}")
            rows.append(f"| {n_nodes} | {per_leaf} | {seed} | {n_run} | {shape} | "
                        + " | ".join(cells) + f" | {plan.status.value} | {secs:.1f} / {cpu:.1f} |")
    return [
        "## Preemption: victims and lost work",
        "",
        *_header("preemption"),
        "- hyperplace: `solve_with_preemption(preemption='lower-priority', solver='cpsat', "
        "budget_s=30)` (victims decided inside the one placement model) and `solver='greedy'` "
        "(greedy's victim-set heuristic), every plan checked (0 violations asserted)",
        "- cells: victims / lost GPU-seconds (GPUs x seconds since checkpoint) / preemptor "
        "placed whole afterwards / GPUs stopped of low + normal priority",
        "- objective order with preemption: admitted and kept-running GPUs per priority level "
        "(a running job counts just above its priority), then lost work, then victims; so a "
        "low-priority victim goes before a normal one, and within a level fewer GPUs stopped "
        "come before less lost work",
        "- solve s: wall / CPU seconds of the CP-SAT solve (CPU counts both solver threads)",
        "",
        "| nodes | nodes per leaf | seed | running jobs | pending | hyperplace (CP-SAT) | "
        "hyperplace greedy | Kueue-style (TAS) | Kueue without TAS | Volcano-style | status | "
        "solve s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "| rule | victims | lost GPU-seconds | preemptor placed | stopped jobs for nothing "
        "(victims, preemptor still not placed) | GPUs stopped: low + normal |",
        "|---|---|---|---|---|---|",
        *[f"| {k} | {v[0]} | {v[1]:,.0f} | {v[2]} of {len(rows)} | {v[3]} | {v[4]} + {v[5]} |"
          for k, v in totals.items()],
        "",
        "### Larger rounds",
        "",
        "The same built clusters at 64 and 256 nodes (every GPU busy), with 8 and 16 pending "
        "jobs of 2-16 GPUs (normal or high priority; replicas within a leaf): greedy's "
        "heuristic against the exact model (`solver='auto'`, budget 10 s). Cells: admitted / "
        "victims / lost GPU-seconds / status / wall s / CPU s.",
        "",
        "| nodes | running jobs | pending | greedy | exact (auto) |",
        "|---|---|---|---|---|",
        *larger_rows(),
        "",
    ]


def _fragmented_round(seed: int, n_nodes: int, per_leaf: int):
    """N nodes of 8 H100, each 40-90 % held by running jobs of 1, 2 or 4 GPUs (all with
    manifests, checkpoint ages 0-1800 s), a few nodes whole free; a pending job of 2 x 8
    GPUs within one leaf that does not fit as it is."""
    rng = random.Random(seed)
    nodes, infos = [], []
    for i in range(n_nodes):
        alloc: dict[int, str] = {}
        if rng.random() > 0.1:
            target, g = rng.choice([4, 5, 6, 7]), 0
            while g < target:
                size = rng.choice([s for s in (1, 2, 4) if g + s <= 8])
                name = f"r{len(infos)}"
                alloc.update({x: name for x in range(g, g + size)})
                infos.append(RunningJob(name=name, checkpoint_age_s=rng.choice([0, 60, 300, 900, 1800]),
                                        job=job(name, tp=size)))
                g += size
        nodes.append(node(f"n{i}", allocated=alloc))
    inst = instance(nodes, [job("big", replicas=2, dp_hop=2, priority="high")],
                    nodes_per_leaf=per_leaf)
    return inst.model_copy(update={"spec": inst.spec.model_copy(update={"running_jobs": infos})})


def defrag_section() -> list[str]:
    """Whole-cluster defrag (largest free domain per GPU type within --max-moves) and
    defrag --for a waiting 2 x 8 job, on fragmented built rounds; every plan checked."""
    import resource

    from hyperplace.models.sharing import largest_free_domains
    from hyperplace.solvers.workflows.defrag import defrag, defrag_cluster

    rows, for_rows = [], []
    cpu_all = time.process_time()
    for n_nodes, per_leaf, seed in ((16, 4, 1), (16, 4, 2), (32, 8, 3), (32, 8, 4), (64, 8, 5)):
        inst = _fragmented_round(seed, n_nodes, per_leaf)
        before = sum(largest_free_domains(inst).values())
        idle = inst.with_jobs([])
        for moves in (2, 4, 8):
            cells = []
            for solver in ("cpsat", "greedy"):
                cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
                t = time.perf_counter()
                r = defrag_cluster(idle, max_moves=moves, solver=solver, budget_s=10)
                wall = time.perf_counter() - t
                cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
                assert check(r.plan, idle) == [], (n_nodes, seed, moves, solver)
                after = r.plan.objective_terms["largest_free_domain_gpus"]
                cells.append(f"{after:g} | {r.plan.status.value} | {len(r.migrations)} | "
                             f"{sum(m.lost_gpu_seconds for m in r.migrations):,.0f} | "
                             f"{wall:.1f} / {cpu:.1f}")
            rows.append(f"| {n_nodes} | {per_leaf} | {seed} | {len(inst.running_manifests)} | "
                        f"{moves} | {before:g} | " + " | ".join(cells) + " |")
        for moves in (2, 4):
            cells = []
            for solver in ("cpsat", "greedy"):
                t = time.perf_counter()
                d = defrag(inst, "big", max_moves=moves, solver=solver, budget_s=10)
                assert check(d.plan, inst) == [], (n_nodes, seed, "for", moves, solver)
                cells.append(f"{'yes' if 'big' in d.plan.admitted else 'no'} | "
                             f"{d.plan.status.value} | {len(d.migrations)} | "
                             f"{sum(m.lost_gpu_seconds for m in d.migrations):,.0f} | "
                             f"{time.perf_counter() - t:.1f}")
            for_rows.append(f"| {n_nodes} | {per_leaf} | {seed} | {moves} | "
                            + " | ".join(cells) + " |")
    cpu = time.process_time() - cpu_all
    return [
        "## Defragmentation: largest free domain and lost work",
        "",
        *_header("defrag", f"CPU time of the section: {cpu:.0f} s"),
        "Fragmented rounds: N nodes of 8 H100, each 40-90 % held by running jobs of 1, 2 or 4 "
        "GPUs (all with manifests; checkpoint ages 0-1800 s), about 10 % of nodes whole free. "
        "Largest free domain = GPUs of whole free nodes of one type in one leaf, summed over "
        "types (here one type). `defrag_cluster` (no `--for`) and `defrag --for big` (a 2 x 8 "
        "job within one leaf), budget 10 s; every plan checked (0 violations "
        "asserted).",
        "",
        "Whole-cluster defrag: one solve of the placement model with the largest free domain as "
        "its first objective (exact: CP-SAT), beside the search around the model with greedy "
        "placements (`defrag_cluster(solver='greedy')`), same rounds, same run.",
        "",
        "| nodes | nodes per leaf | seed | running jobs | max moves | largest free domain "
        "before | exact: after | status | migrations | lost GPU-s | wall / CPU s | search: "
        "after | status | migrations | lost GPU-s | wall / CPU s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "`defrag --for big`: one solve of the placement model with the migrations as its "
        "decisions (exact: CP-SAT), beside greedy's migration heuristic (the budget's floor "
        "and CP-SAT's hint), same rounds, same run.",
        "",
        "| nodes | nodes per leaf | seed | max moves | exact: big placed | status | migrations "
        "| lost GPU-s | s | greedy: big placed | status | migrations | lost GPU-s | s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *for_rows,
        "",
    ]


def _spares_round(seed: int, n_nodes: int, per_leaf: int):
    """A mixed round: H100 nodes with every fourth (at random) an A100, a third of the nodes
    partly used; pending 8-GPU H100 jobs, 8-GPU A100 jobs, 4-GPU jobs of any type and 2 x 8
    H100 jobs within a leaf, about one GPU asked per GPU there is."""
    rng = random.Random(seed)
    nodes = []
    for i in range(n_nodes):
        kind = "A100-80" if rng.random() < 0.25 else "H100-80"
        used = rng.choice([2, 4]) if rng.random() < 0.33 else 0
        nodes.append(node(f"n{i}", gpu_type=kind, allocated={g: f"run{i}" for g in range(used)}))
    jobs = []
    for i in range(n_nodes):
        kind = rng.choice(["h8", "h8", "a8", "any4", "h2x8"])
        if kind == "h8":
            jobs.append(job(f"h{i}"))
        elif kind == "a8":
            jobs.append(job(f"a{i}", accel="A100", nvlink=600))
        elif kind == "any4":
            jobs.append(job(f"s{i}", tp=4, accel=None, nvlink=0))
        else:
            jobs.append(job(f"p{i}", replicas=2, dp_hop=2))
    return instance(nodes, jobs, nodes_per_leaf=per_leaf)


def _designated(inst, spares: int):
    """The rule this replaced: the last ``spares`` whole free nodes of every leaf (cluster
    order) kept out of reach before solving."""
    from hyperplace.models.sharing import leaves, released

    hidden = {(n.name, g) for c in inst.clusters for members in leaves(c).values()
              for n in [m for m in members if not m.allocated and not m.faulty][-spares:]
              for g in range(n.gpu_count)}
    return released(inst, [], reserve=hidden)


def spares_section() -> list[str]:
    """Hot spares chosen by the model against the designated last nodes of each leaf: GPUs
    and jobs admitted, status, on mixed rounds."""
    from hyperplace.solvers.driver import solve_placement

    rows = []
    cpu0 = time.process_time()
    totals = [0, 0]
    for n_nodes, per_leaf, seed in ((16, 4, 1), (16, 4, 2), (16, 4, 3), (32, 4, 4),
                                    (32, 4, 5), (32, 8, 6), (64, 8, 7), (64, 8, 8)):
        inst = _spares_round(seed, n_nodes, per_leaf)
        for spares in (1, 2):
            out = []
            for name, solved_on, kw in (("designated", _designated(inst, spares), {}),
                                        ("chosen", inst, {"hot_spares": spares})):
                t, c = time.perf_counter(), time.process_time()
                plan = solve_placement(solved_on, solver="cpsat", budget_s=10, **kw)
                wall, cpu = time.perf_counter() - t, time.process_time() - c
                plan = plan.model_copy(update={"hot_spares": spares})
                bad = [v.code for v in check(plan, inst)]
                if name == "chosen":
                    assert not bad, bad
                gpus = sum(len(u.gpus) for u in plan.placements)
                out.append((gpus, len(plan.admitted), plan.status.value, wall, cpu, bad))
            d, ch = out
            totals[0] += d[0]
            totals[1] += ch[0]
            flagged = ", ".join(sorted(set(d[5]))) or "none"
            rows.append(f"| {n_nodes} | {per_leaf} | {seed} | {len(inst.jobs)} | {spares} | "
                        f"{d[0]} / {ch[0]} | {d[1]} / {ch[1]} | {d[2]} / {ch[2]} | {flagged} | "
                        f"{d[3]:.1f} ({d[4]:.1f}) / {ch[3]:.1f} ({ch[4]:.1f}) |")
    cpu = time.process_time() - cpu0
    return [
        "## Hot spares: chosen by the model vs designated nodes",
        "",
        *_header("spares", f"CPU time of the section: {cpu:.0f} s"),
        "Mixed rounds (`_spares_round`: H100 nodes, about a quarter A100, a third partly used; "
        "pending 8-GPU H100, 8-GPU A100, 4-GPU any-type and 2 x 8 H100 jobs), CP-SAT, 10 s "
        "budget. *designated*: the rule hot spares replaced, the last N whole free nodes of "
        "each leaf kept out of reach before solving; *chosen*: `solve_placement(hot_spares=N)`, "
        "the spare rule a constraint of the model. Both plans checked against the round with "
        "`hotSpares: N` (0 violations asserted for *chosen*; the checker's verdict on "
        "*designated* shown). Time: wall (CPU) seconds of the solve.",
        "",
        f"Total admitted GPUs over the rows: designated {totals[0]}, chosen {totals[1]}.",
        "",
        "| nodes | nodes per leaf | seed | pending jobs | hot spares | admitted GPUs: "
        "designated / chosen | admitted jobs | status | checker on designated | s (CPU) |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


SECTIONS = {"preemption": preemption_section, "repair": repair_section,
            "defrag": defrag_section, "spares": spares_section}


def main() -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--section", action="append", choices=sorted(SECTIONS),
                    help="run only this section (repeatable); the others stay as they are")
    for name in ap.parse_args().section or list(SECTIONS):
        write_section(SECTIONS[name]())


# ---- over time: queues sharing a cluster while one floods it -----------------------------

OVER_TIME_BEGIN = "<!-- over-time: bench_sharing.py --over-time writes this section -->"
OVER_TIME_END = "<!-- /over-time -->"


def flood_workload(inst):
    """Three queues on 32 H100 GPUs: ``flood`` (weight 1) submits 48 one-node jobs of 4 GPUs
    in the first 10 minutes, ``team-b`` (weight 2) an 8-GPU job every 15 minutes, ``team-c``
    (weight 1) a 16-GPU (two-node) job every 40 minutes, all of one hour's work at reference
    speed (A100; about 0.4 h on H100), over 2 hours of arrivals."""
    from hyperplace.instances.generator import model_parallel_job, small_job
    from hyperplace.sim.jobs import SimJob
    from hyperplace.models.instance import in_queue

    rows = [(i * 12.5, f"flood-{i:02d}", 4, "flood") for i in range(48)]
    rows += [(300 + i * 900, f"b-{i}", 8, "team-b") for i in range(8)]
    rows += [(600 + i * 2400, f"c-{i}", 16, "team-c") for i in range(3)]
    jobs = []
    for t, name, gpus, queue in sorted(rows):
        manifest = (small_job(name, "m", gpus) if gpus <= 8 else
                    model_parallel_job(name, "m", replicas=gpus // 8, memory_gb=None,
                                       dp_ib_gbps=None))
        manifest, q = in_queue(manifest, queue, inst)
        jobs.append(SimJob(name=name, submit_s=t, work_s=3600.0, gpus=gpus, manifest=manifest,
                           queue=q))
    return jobs


def flood_instance(nominal: dict[str, int] | None = None):
    from hyperplace.models import Cluster, FabricGenerator, FabricSpec, Instance, InstanceSpec, Node
    from hyperplace.models.job import ObjectMeta

    nodes = [Node(name=f"h{i}", gpu_type="H100-80", gpu_count=8) for i in range(4)]
    cluster = Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=FabricGenerator(
        type="fat-tree-2", nodes_per_leaf=2, spines=2)))
    queues = []
    for name, weight in (("flood", 1), ("team-b", 2), ("team-c", 1)):
        queues.append({"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue",
                       "metadata": {"name": name},
                       "spec": {"cohort": "org", "fairSharing": {"weight": weight},
                                "resourceGroups": [{"coveredResources": ["nvidia.com/gpu"],
                                                    "flavors": [{"name": "h100", "resources": [
                                                        {"name": "nvidia.com/gpu",
                                                         "nominalQuota": (nominal or {}).get(
                                                             name, 32)}]}]}]}})
    inst = Instance(metadata=ObjectMeta(name="flood-32"), spec=InstanceSpec(clusters=[cluster]))
    return inst.with_queues(queues)


def over_time(budget_s: float = 0.5) -> list[str]:
    """Replay the flood under hyperplace with and without decay and the peers' rules; every
    round's plan checked. Returns the section's markdown lines."""
    import resource

    from hyperplace.sim.loop import CheckFailed
    from hyperplace.sim.metrics import summarize
    from hyperplace.sim.simulator import SimConfig, simulate

    quota = {"flood": 8, "team-b": 16, "team-c": 8}
    plain_inst = flood_instance()
    quota_inst = flood_instance(quota)
    quota_c16_inst = flood_instance({"flood": 8, "team-b": 8, "team-c": 16})
    # (label, policy, half-life s, aging s, fair-share priority levels, quotas (False, True
    # for 8/16/8, or "8/8/16"), preemption)
    runs = [("hyperplace, half-life 1 h (fair-share levels 4)", "engine", 3600.0, 3600.0, 4,
             False, "never"),
            ("hyperplace, half-life 1 h, defrag (migrations allowed)", "engine", 3600.0, 3600.0,
             4, False, "defrag"),
            ("hyperplace, half-life 1 h, history in the objective only", "engine", 3600.0,
             3600.0, 0, False, "never"),
            ("hyperplace, per-round fair share only", "engine", None, 3600.0, 0, False, "never"),
            ("hyperplace, half-life 1 h, no aging", "engine", 3600.0, 0.0, 4, False, "never"),
            ("hyperplace, per-round only, no aging", "engine", None, 0.0, 0, False, "never"),
            ("Volcano-style (proportion)", "volcano-proportion", None, 0.0, 0, False, "never"),
            ("Kueue-style (BestEffortFIFO, one queue order)", "kueue", None, 0.0, 0, False,
             "never"),
            ("Slurm-style (backfill, no fair-share factor)", "slurm", None, 0.0, 0, False,
             "never"),
            ("quotas 8/16/8: hyperplace, half-life 1 h, reclaim-within-cohort", "engine",
             3600.0, 3600.0, 4, True, "reclaim-within-cohort"),
            ("quotas 8/16/8: hyperplace, half-life 1 h, no preemption", "engine", 3600.0,
             3600.0, 4, True, "never"),
            ("quotas 8/16/8: Volcano-style (proportion, guarantee = nominal)",
             "volcano-proportion", None, 0.0, 0, True, "never"),
            ("quotas 8/8/16: hyperplace, half-life 1 h, reclaim-within-cohort", "engine",
             3600.0, 3600.0, 4, "8/8/16", "reclaim-within-cohort"),
            ("quotas 8/8/16: hyperplace, half-life 1 h, no preemption", "engine", 3600.0,
             3600.0, 4, "8/8/16", "never")]
    rows = []
    for label, policy, half_life, aging_s, levels, quotas, preemption in runs:
        inst = quota_c16_inst if quotas == "8/8/16" else quota_inst if quotas else plain_inst
        config = SimConfig(round_s=60.0, budget_s=budget_s, solver="auto", check=True,
                           half_life_s=half_life, aging_s=aging_s, fair_share_levels=levels,
                           preemption="never" if preemption == "defrag" else preemption,
                           defrag=preemption == "defrag")
        cpu0 = resource.getrusage(resource.RUSAGE_SELF).ru_utime
        t0 = time.perf_counter()
        try:
            run = simulate(inst, flood_workload(inst), policy, config)
        except CheckFailed as exc:  # reported, not hidden: the row says what the checker found
            rows.append(f"| {label} | checker violation: {str(exc)[:300]} | | | | | | |")
            print(rows[-1], flush=True)
            continue
        wall = time.perf_counter() - t0
        cpu = resource.getrusage(resource.RUSAGE_SELF).ru_utime - cpu0
        m = summarize(run)
        q = m["queues"]
        order = ("flood", "team-b", "team-c")
        cell = lambda key, scale: " / ".join(  # noqa: E731
            "-" if q[x][key] is None else f"{q[x][key] / scale:.2f}" for x in order)
        lost = sum(q[x]["gpu_hours_lost_to_failures"] + q[x]["gpu_hours_lost_to_preemption"]
                   + q[x]["gpu_hours_lost_to_migration"] for x in order)
        moves = sum(q[x]["preemptions"] + q[x]["migrations"] for x in order)
        rows.append(f"| {label} | {m['jain_index']:.3f} | "
                    + " / ".join(f"{q[x]['gpu_hours_in_window']:.1f}" for x in order)
                    + f" | {cell('wait_max_s', 3600)} | {cell('jct_mean_s', 3600)} | "
                    f"{lost:.1f} ({moves}) | {m['finished']}/{m['jobs']} | {wall:.0f} / {cpu:.0f} |")
        print(rows[-1], flush=True)
    return [
        OVER_TIME_BEGIN,
        "## Over time: three queues, one floods the cluster",
        "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {_commit()}",
        f"- machine: {os.cpu_count()} CPUs ({_cpu()}), Python {platform.python_version()}; "
        "shared by up to 4 engineers, so wall times are noisy (CPU time given beside them)",
        "- command: `.venv/bin/python bench/bench_sharing.py --over-time`",
        "- workload (`flood_workload`): 32 H100 (4 nodes, 2 per leaf); Kueue ClusterQueues in "
        "one cohort, weights flood 1 / team-b 2 / team-c 1, nominal 32 each (quotas do not "
        "bind: fair share alone decides); `flood` submits 48 x 4 GPUs in the first 10 min, "
        "team-b 8 x 8 GPUs every 15 min, team-c 3 x 16 GPUs every 40 min; 1 h of work each at "
        "reference speed; rounds every 60 s, engine budget "
        f"{budget_s:g} s per round (solver auto), aging (one priority level per hour waited) "
        "and reservation as shipped unless the row says otherwise; fair-share levels: the "
        "engine adds round(levels x Slurm's fair-share factor) priority levels per queue; every "
        "round's state and plan checked (`SimConfig(check=True)`); no failures injected",
        "- quotas 8/16/8 rows: nominal quotas flood 8, team-b 16, team-c 8 (borrowing in the "
        "cohort unlimited); with `reclaim-within-cohort` the engine may stop jobs of a queue "
        "above its nominal quota so that a queue under its own gets it back (victims lose the "
        "work since their last checkpoint, every 30 min); the peers never preempt; "
        "quotas 8/8/16 rows: flood 8, team-b 8, team-c 16 (team-c's 16-GPU jobs then fit "
        "its guarantee)",
        "- Jain: over GPU-hours within the arrival window divided by weight (1 = GPU-hours in "
        "proportion to weight); per-queue cells are flood / team-b / team-c",
        "- defrag row: each round solved by `solvers.workflows.defrag.solve_with_migration` (running jobs "
        "may be checkpointed and restarted elsewhere, decided in the round's one solve: only "
        "when that admits more pending demand; `SimConfig(defrag=True)`); the peers do not "
        "migrate",
        "",
        "| policy | Jain (weighted) | GPU-h in window | longest wait h | mean JCT h | "
        "GPU-h lost (failures + preemption + migration; jobs stopped) | finished | "
        "wall / CPU s |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        OVER_TIME_END,
    ]


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip()


def _cpu() -> str:
    return next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                 if ln.startswith("model name")), platform.processor())


def write_over_time(lines: list[str]) -> None:
    """Replace (or append) the over-time section of sharing.md, leaving the rest as it is."""
    path = ROOT / "bench" / "results" / "sharing.md"
    text = path.read_text() if path.exists() else ""
    section = "\n".join(lines) + "\n"
    if OVER_TIME_BEGIN in text and OVER_TIME_END in text:
        head, rest = text.split(OVER_TIME_BEGIN, 1)
        tail = rest.split(OVER_TIME_END, 1)[1].lstrip("\n")
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    if "--over-time" in sys.argv[1:]:
        write_over_time(over_time())
    else:
        main()
