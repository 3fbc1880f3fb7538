"""The largest fleets (#25): 131,072 and 262,144 GPUs in one cluster, and a federation of 16
clusters of 65,536 GPUs (1,048,576 GPUs, one queue of 100,000 jobs), at fragmentation 0.4,
0.6 and 0.9 and budgets 5, 10 and 30 s; `--busy` rows, warm rounds at 131k, generation and
reading per million GPUs. Run through ``bench/bench_scale.py --large`` (same options).

* 131k / 262k rows: the whole ``hyperplace solve --instance FILE --budget B --format json
  -o PLAN`` command in a fresh process (bench_scale.run_command): wall, CPU, peak RSS, the
  plan's status, solver, gap of every objective; the checker on the budget-10 plans.
* federation rows: the instance is generated in memory (its JSON is above the 64 MiB input
  limit) in a fresh process, then ``solvers.decompose.solve_decomposed`` solves it once per
  budget in that process (the round's wall and CPU from the loaded instance to the plan:
  the library's budget; generation, and building the clusters' fabrics as loading an
  instance does, are reported apart); peak RSS is the process's so far; with fed-1M in
  ``--large-check`` the checker verifies every plan whole (every cluster's part as placed);
  with ``--large-busy`` a budget-10 row at fragmentation 0.6 while one CPU-bound process per
  core runs.
* load: the 1-minute load average, the larger of the start and the end of each row.

The section it writes goes into ``bench/results/scale.md`` between the markers
``<!-- large:begin -->`` and ``<!-- large:end -->`` (the rest of the file is kept).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import bench_scale as bs  # noqa: E402

from hyperplace.io import write_atomic  # noqa: E402

SINGLE = {"131k": (131_072, 16_384), "262k": (262_144, 32_768)}
FED = ("fed-1M", 16, 65_536, 100_000)
FRAGMENTATIONS = (0.4, 0.6, 0.9)
BUDGETS = (5.0, 10.0, 30.0)
BEGIN, END = "<!-- large:begin -->", "<!-- large:end -->"


def load() -> float:
    return os.getloadavg()[0]


def fed_child(frag: float, budgets: list[float], check_at: float, busy: bool = False) -> None:
    """Child process: generate the federation, solve it once per budget, print JSON lines."""
    from hyperplace.instances.generator import generate_federation

    _, clusters, per, jobs = FED
    t, c, l0 = time.perf_counter(), time.process_time(), load()
    inst = generate_federation(clusters, per, jobs, bs.TYPES, frag, bs.SEED)
    gen_wall, gen_cpu = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    for cluster in inst.clusters:  # the fabrics, as a loaded instance's: not a round's cost
        _ = cluster.network
    print(json.dumps({"kind": "gen", "wall": gen_wall, "cpu": gen_cpu,
                      "fabric_wall": time.perf_counter() - t,
                      "fabric_cpu": time.process_time() - c, "load": max(l0, load()),
                      "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}),
          flush=True)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(os.cpu_count() or 2)] if busy else []
    try:
        _fed_rounds(inst, budgets, check_at, busy)
    finally:
        for b in burners:
            b.kill()
            b.wait()


def _fed_rounds(inst, budgets: list[float], check_at: float, busy: bool) -> None:
    from hyperplace.solvers.decompose import solve_decomposed

    for budget in budgets:
        parts: list = []
        t, c, l0 = time.perf_counter(), time.process_time(), load()
        plan = solve_decomposed(inst, budget_s=budget, parts_out=parts)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        row = {"kind": "solve", "busy": busy, "budget": budget, "wall": wall, "cpu": cpu,
               "load": max(l0, load()),
               "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
               "plan": {"status": plan.status.value, "solver": plan.solver,
                        "gap": plan.gap, "objectiveGaps": plan.objective_gaps,
                        "runtimeS": plan.runtime_s, "jobs": len(plan.jobs),
                        "pending": len(plan.pending), "message": plan.message[:600]},
               "parts": [{"cluster": p.cluster, "jobs": len(p.jobs), "need": p.need_s,
                          "est": p.est_s, "budget": p.budget_s, "build": p.build_s,
                          "solve": p.solve_s, "status": p.status, "admitted": p.admitted}
                         for p in parts]}
        if check_at == 0 or budget == check_at:
            from hyperplace.check import check

            t = time.perf_counter()
            row["violations"] = len(check(plan, inst))
            row["check_s"] = time.perf_counter() - t
        print(json.dumps(row), flush=True)


def io_child() -> None:
    """Child process: generation, writing and reading speed at 131k and 262k GPUs."""
    from hyperplace.instances.generator import generate
    from hyperplace.instances.registry import load_instance, render_instance

    for label, (gpus, jobs) in SINGLE.items():
        l0 = load()
        c = time.process_time()
        inst = generate(gpus, jobs, bs.TYPES, 0.6, bs.SEED)
        gen = time.process_time() - c
        c = time.process_time()
        text = render_instance(inst, "json")
        render = time.process_time() - c
        path = bs.CACHE / f"io-{label}.json"
        write_atomic(path, text)
        c = time.process_time()
        load_instance(str(path))
        read = time.process_time() - c
        path.unlink()
        print(json.dumps({"label": label, "gpus": gpus, "jobs": jobs, "gen": gen,
                          "render": render, "read": read, "mb": len(text) / 1e6,
                          "load": max(l0, load())}), flush=True)


def _child(args: list[str]) -> list[dict]:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                         preexec_fn=bs._niced if bs.NICE else None)
    rows = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    if out.returncode != 0:
        rows.append({"kind": "error", "error": out.stderr.strip()[-400:]})
    return rows


def run(args) -> int:
    bs.NICE = args.nice  # bench_scale runs as __main__: this is the imported copy
    sizes = [s for s in args.large_sizes.split(",") if s]
    frags = [float(f) for f in args.large_fragmentations.split(",")]
    budgets = [float(b) for b in args.large_budgets.split(",")]
    rows: list[dict] = []
    fed: list[dict] = []
    extra: dict = {}
    started = datetime.now(timezone.utc)
    done_path = bs.CACHE / "large-partial.json"  # rows kept across restarts (--large-resume)
    done = json.loads(done_path.read_text()) if args.large_resume and done_path.exists() \
        else {"rows": [], "fed": [], "extra": {}}

    def merged() -> tuple[list[dict], list[dict]]:
        """This run's rows, and the kept rows it did not measure."""
        keys = {(r["label"], r["frag"], r["budget"]) for r in rows}
        out = [r for r in done["rows"] if (r["label"], r["frag"], r["budget"]) not in keys]
        order = {"131k": 0, "131k --busy": 1, "262k": 2, "262k --busy": 3}
        out = sorted(out + rows, key=lambda r: (order.get(r["label"], 9), r["frag"],
                                                r["budget"]))
        frags = {g.get("frag") for g in fed}
        both = [g for g in done["fed"] if g.get("frag") not in frags] + fed
        both.sort(key=lambda g: (g.get("frag", 0), g.get("kind") != "gen", g.get("budget", 0)))
        return out, both

    def keep() -> None:
        out, both = merged()
        write_atomic(done_path, json.dumps({"rows": out, "fed": both, "extra": extra},
                                           default=str))

    def known(label: str, frag: float, budget: float) -> dict | None:
        if args.large_rerun:  # measure again, replacing the kept row
            return None
        return next((r for r in done["rows"] if (r["label"], r["frag"], r["budget"]) ==
                     (label, frag, budget)), None)

    extra.update(done["extra"])
    if "io" in sizes and "io" not in extra:
        extra["io"] = _child(["--io-child"])
        print("io", extra["io"], flush=True)
    for label in [s for s in sizes if s in SINGLE]:
        gpus, jobs = SINGLE[label]
        for frag in frags:
            path, _ = bs.instance_file(gpus, jobs, frag)
            for budget in budgets:
                old = known(label, frag, budget)
                if old is not None:
                    rows.append(old)
                    continue
                r = bs.run_command(path, budget, "auto")
                r.update(label=label, gpus=gpus, jobs=jobs, budget=budget, frag=frag)
                if r["plan"] is not None and budget == 10.0 and frag == 0.6 and \
                        label in args.large_check.split(","):
                    t = time.perf_counter()
                    r["violations"] = bs.check_plan(path, r["plan_path"])
                    r["check_s"] = time.perf_counter() - t
                _summarise(r)
                rows.append(r)
                keep()
                print(_line(r), flush=True)
            if label == "131k" and frag == 0.6 and args.large_warm and "warm" not in extra:
                extra["warm"] = bs.run_warm(path, 10.0)
                extra["warm_load"] = load()
                keep()
                print("warm", extra["warm"], flush=True)
            busy = known(label + " --busy", frag, 10.0)
            if busy is not None:
                rows.append(busy)
            elif args.large_busy and frag == 0.6:
                burner = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                          for _ in range(os.cpu_count() or 2)]
                try:
                    r = bs.run_command(path, 10.0, "auto")
                finally:
                    for b in burner:
                        b.kill()
                        b.wait()
                r.update(label=label + " --busy", gpus=gpus, jobs=jobs, budget=10.0, frag=frag)
                _summarise(r)
                rows.append(r)
                keep()
                print(_line(r), flush=True)
    if "fed-1M" in sizes:
        for frag in frags:
            old_fed = [g for g in done["fed"] if g.get("frag") == frag and g.get("kind") != "error"]
            if any(g.get("kind") == "solve" for g in old_fed):
                fed += old_fed
                continue
            check_at = 0.0 if "fed-1M" in args.large_check.split(",") else -1.0  # 0: all
            got = _child(["--fed-child", str(frag), ",".join(map(str, budgets)), str(check_at)])
            if args.large_busy and frag == 0.6:  # the --busy row: budget 10, both cores busy
                got += [g for g in _child(["--fed-child", str(frag), "10", "-1", "busy"])
                        if g.get("kind") != "gen"]
            for g in got:
                g["frag"] = frag
            fed += got
            keep()
            print("fed", frag, [(g.get("kind"), g.get("budget"), g.get("wall"),
                                 (g.get("plan") or {}).get("status"), g.get("error"))
                                for g in got], flush=True)
    if args.large_resume:  # the kept rows this run did not measure stay in the table
        rows, fed = merged()
        keep()
    write(rows, fed, extra, args, started)
    return 0


def _summarise(r: dict) -> None:
    """Keep what the tables show of a plan (a 262k plan is 30 MB)."""
    path = r.pop("plan_path", None)
    plan = r["plan"]
    if plan is not None:
        r["plan"] = {k: plan.get(k) for k in ("status", "solver", "gap", "objectiveGaps",
                                              "runtimeS", "message")}
        r["plan"]["admitted"] = len(plan.get("jobs", []))
        r["plan_file"] = path  # kept for a later `hyperplace check`


def _line(r: dict) -> str:
    plan = r["plan"] or {}
    return (f"{r['label']} f{r['frag']} b{r['budget']:g}: wall {r['wall']:.2f} CPU "
            f"{r['cpu']:.2f} {plan.get('status')} {plan.get('solver')} gap {plan.get('gap')} "
            f"{r['rss_mb']:.0f} MB load {r['load']:.1f}")


def _table(rows: list[dict]) -> list[str]:
    out = ["| size | GPUs / jobs | frag | budget s | wall s | <= budget + 1 | CPU s | runtimeS "
           "| status (solver) | obj 1 gap | gaps | admitted | peak RSS MB (KB/GPU, KB/job) | "
           "violations | load |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        plan = r["plan"] or {}
        status = (f"{plan.get('status')} ({plan.get('solver')})" if plan
                  else f"exit {r['exit']}: {r['error'][:80]}")
        out.append(
            f"| {r['label']} | {r['gpus']:,} / {r['jobs']:,} | {r['frag']:g} | {r['budget']:g} | "
            f"{r['wall']:.2f} | {'yes' if r['wall'] <= r['budget'] + 1 else 'no'} | "
            f"{r['cpu']:.2f} | {bs._f(plan.get('runtimeS'))} | {status} | "
            f"{bs._f(plan.get('gap'), 4) if plan else '-'} | "
            f"{bs._gaps_txt(plan) if plan else '-'} | {plan.get('admitted', '-')} | "
            f"{r['rss_mb']:.0f} ({r['rss_mb'] * 1024 / r['gpus']:.1f}, "
            f"{r['rss_mb'] * 1024 / r['jobs']:.1f}) | {r.get('violations', '-')} | "
            f"{r['load']:.1f} |")
    return out


def _fed_table(fed: list[dict]) -> list[str]:
    _, clusters, per, jobs = FED
    gpus = clusters * per
    out = ["| frag | budget s | round wall s | <= budget + 1 | CPU s | status (solver) | "
           "obj 1 gap | admitted / pending | clusters solved | budget split (cluster: "
           "estimated need s -> share s, build s, status; first 3 served) | "
           "peak RSS MB (KB/GPU, KB/job) | violations (check s) | load |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for g in fed:
        if g.get("kind") == "gen":
            fabric = (f"; fabrics {g['fabric_cpu']:.2f} CPU s" if "fabric_cpu" in g else "")
            out.append(f"| {g['frag']:g} | generation{fabric} | {g['wall']:.2f} | - | "
                       f"{g['cpu']:.2f} | - | - | - | - | - | {g['rss_mb']:.0f} | - | "
                       f"{g['load']:.1f} |")
            continue
        if g.get("kind") == "error":
            out.append(f"| {g['frag']:g} | - | - | - | - | error: {g['error'][:120]} | - | - | "
                       "- | - | - | - | - |")
            continue
        plan = g["plan"]
        split = "; ".join(f"{p['cluster']}: {p.get('est', p['need']):.2f} -> "
                          f"{p['budget']:.2f}, {p.get('build', 0):.2f}, {p['status']}"
                          for p in g["parts"][:3])
        solved = sum(1 for p in g["parts"] if p["status"] != "unbuilt")
        viol = (f"{g['violations']} ({g['check_s']:.0f})" if "violations" in g else "-")
        out.append(
            f"| {g['frag']:g} | {g['budget']:g}{' --busy' if g.get('busy') else ''} | "
            f"{g['wall']:.2f} | "
            f"{'yes' if g['wall'] <= g['budget'] + 1 else 'no'} | {g['cpu']:.2f} | "
            f"{plan['status']} ({plan['solver']}) | {bs._f(plan['gap'], 4)} | "
            f"{plan['jobs']:,} / {plan['pending']:,} | {solved} / {len(g['parts'])} | "
            f"{split} | {g['rss_mb']:.0f} "
            f"({g['rss_mb'] * 1024 / gpus:.1f}, {g['rss_mb'] * 1024 / jobs:.1f}) | {viol} | "
            f"{g['load']:.1f} |")
    return out


def write(rows: list[dict], fed: list[dict], extra: dict, args, started) -> None:
    cmd = "bench/bench_scale.py " + " ".join(sys.argv[1:])
    lines = [BEGIN, "## The largest fleets (#25)", "",
             f"- date: {started:%Y-%m-%d %H:%M}-{datetime.now(timezone.utc):%H:%M} UTC; machine: "
             f"{bs.machine()}, shared by 8 engineers: the load average is in every row, and "
             "the CPU time is what a run cost whatever the load (wall = what it got)"
             + (f"; the solve processes ran at niceness {bs.NICE} (`--nice`), which the "
                "kernel's autogroup scheduling applies only within the bench's own session: "
                "it did not favour them over the other engineers' sessions" if bs.NICE else ""),
             f"- command: `{cmd.strip()}`",
             f"- single cluster: `generate(gpus, jobs, {bs.TYPES}, fragmentation, seed="
             f"{bs.SEED})` as JSON, the whole `hyperplace solve` command (start-up, reading, "
             "solving, writing), solver auto; the independent checker (not part of the command) on the "
             f"plans of fragmentation 0.6, budget 10 of: {args.large_check}",
             f"- federation: `generate_federation(16, 65536, 100000, {bs.TYPES}, "
             f"fragmentation, seed={bs.SEED})` in memory, `solve_decomposed` from the loaded "
             "instance (the library's budget; the file would be above the 64 MiB input "
             "limit; the clusters' fabrics built after generation, as loading does), one process "
             "per fragmentation, budgets in turn (peak RSS is the process's so far); the "
             "checker on every whole plan when fed-1M is in --large-check; `--busy`: one "
             "CPU-bound process per core during that round", ""]
    lines += _table(rows) + [""]
    if fed:
        lines += ["### Federation: 16 clusters x 65,536 GPUs, 100,000 jobs", ""]
        lines += _fed_table(fed) + [""]
    warm = extra.get("warm")
    if warm:
        lines += [f"Warm round at 131k (fragmentation 0.6, budget 10, PlacementSession: 5 "
                  f"arrivals, 5 completions, a GPU and a node failing): {bs._warm_txt(warm)} "
                  f"(goal: warm <= 0.1 x cold); load {extra.get('warm_load', 0):.1f}.", ""]
    if extra.get("io"):
        lines += ["Generation, writing and reading (CPU seconds; per million GPUs = the "
                  "figure x 1,048,576 / GPUs):", "",
                  "| size | generate s (per M GPUs) | render JSON s (per M) | read s (per M) "
                  "| file MB | load |", "|---|---|---|---|---|---|"]
        for x in extra["io"]:
            if "gpus" not in x:
                continue
            m = 1_048_576 / x["gpus"]
            lines.append(f"| {x['label']} | {x['gen']:.2f} ({x['gen'] * m:.1f}) | "
                         f"{x['render']:.2f} ({x['render'] * m:.1f}) | {x['read']:.2f} "
                         f"({x['read'] * m:.1f}) | {x['mb']:.1f} | {x['load']:.1f} |")
        lines.append("")
    lines.append(END)
    out = ROOT / "bench" / "results" / "scale.md"
    text = out.read_text() if out.exists() else "# Placement at scale\n"
    block = "\n".join(lines)
    if BEGIN in text and END in text:
        a, b = text.index(BEGIN), text.index(END) + len(END)
        text = text[:a] + block + text[b:]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    write_atomic(out, text)
    write_atomic(bs.CACHE / "large-rows.json", json.dumps({"rows": rows, "fed": fed,
                                                            "extra": extra}, default=str))
    print(f"wrote {out}")


if __name__ == "__main__":
    if sys.argv[1] == "--fed-child":
        fed_child(float(sys.argv[2]), [float(b) for b in sys.argv[3].split(",")],
                  float(sys.argv[4]), busy=len(sys.argv) > 5 and sys.argv[5] == "busy")
    elif sys.argv[1] == "--io-child":
        io_child()
