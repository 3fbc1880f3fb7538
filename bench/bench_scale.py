"""Scale bench: the whole `hyperplace solve` command from 1,024 to 131,072 GPUs, cold and warm.

Usage::

    .venv/bin/python bench/bench_scale.py [--sizes 1k,4k,16k,32k,64k,131k] [--busy]
        [--fragmentation 0.9] [--budgets 0.2,0.5,1,2,5] [--sweep-sizes 1k,4k,16k]
    .venv/bin/python bench/bench_placement.py --scale [same options]

For every size, a generated instance (``hyperplace.instances.generator.generate``: H100-80 +
A100-80 SuperPOD, ``--fragmentation`` (default 0.9, so that the queue exceeds the free GPUs;
the issue's instances use 0.4) of GPUs held by running jobs, seed 1) is written as JSON once,
then:

* **cold**: ``hyperplace solve --instance FILE --budget B --format json -o PLAN`` in a fresh
  process; wall time of the whole command (start-up, reading, solving, writing), the plan's
  ``runtimeS``, status, solver, objective 1 and its gap, the other objectives' values, and
  the process's peak RSS (``wait4``). The plan goes through the independent checker (sizes
  up to ``--check-up-to`` GPUs; the checker is not part of the command).
* **warm**: in a fresh process, a :class:`~hyperplace.solvers.workflows.session.PlacementSession`
  solves the instance (cold, fabric built), commits the plan, applies a small change (5
  arrivals, 5 completions, a GPU and a node failing) and solves again; both solve times,
  and warm / cold.

Then a sweep of budgets (``--budgets`` at ``--sweep-sizes``) checks the plan's ``runtimeS``
against ``1.05 x budget + 0.05 s``. Then the growth exponent ``k`` of ``time ~ GPUs^k`` (least squares on logs) for the
command's wall time and for ``runtimeS``. The machine's load average is recorded per row:
the bench machine is shared, so timings are noisy. Results go to ``bench/results/scale.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

SIZES = {  # label -> (GPUs, pending jobs, budget s)
    "1k": (1_024, 100, 5.0),
    "4k": (4_096, 400, 5.0),
    "16k": (16_384, 2_000, 5.0),
    "32k": (32_768, 4_000, 10.0),
    "64k": (65_536, 8_000, 10.0),
    "131k": (131_072, 16_000, 10.0),
    # GB200 NVL72 (#24): 512 racks of 18 trays x 4 GPUs under leaf/spine, half the trays
    # busy, 400 jobs of the NVL72 mix (hyperplace.instances.nvl72.generate_nvl72)
    "nvl72-37k": (36_864, 400, 10.0),
}
NVL72_RACKS = {"nvl72-37k": 512}
TYPES = ["H100-80", "A100-80"]
FRAGMENTATION = 0.9  # 90 % held: the queue exceeds the free GPUs (the 0.4: --fragmentation)
SEED = 1
CACHE = Path(os.environ.get("HYPERPLACE_BENCH_CACHE", "/tmp/hyperplace-bench-scale"))
HYPERPLACE = str(Path(sys.executable).with_name("hyperplace"))


def instance_file(gpus: int, jobs: int, fragmentation: float = FRAGMENTATION,
                  moveable: bool = False) -> tuple[Path, float]:
    """The generated instance as JSON (made once), and how long generating it took
    (``moveable``: with :func:`with_movers`)."""
    from hyperplace.instances.generator import generate
    from hyperplace.instances.registry import render_instance

    CACHE.mkdir(parents=True, exist_ok=True)
    tag = "-moveable" if moveable else ""
    path = CACHE / f"gen-{gpus}g-{jobs}j-f{fragmentation}-s{SEED}{tag}.json"
    if path.exists():
        return path, float("nan")
    start = time.perf_counter()
    inst = generate(gpus, jobs, TYPES, fragmentation, SEED)
    if moveable:
        inst = with_movers(inst, SEED)
    text = render_instance(inst, "json")
    took = time.perf_counter() - start
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path, took


#: Checkpoint ages (s) of the running jobs of ``--moveable`` instances, drawn uniformly.
CHECKPOINT_AGES = (0, 60, 300, 900, 1800, 3600)


def nvl72_file(racks: int, jobs: int) -> tuple[Path, float]:
    """The generated NVL72 instance as JSON (made once), and how long generating it took."""
    from hyperplace.instances.nvl72 import generate_nvl72
    from hyperplace.instances.registry import render_instance

    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"nvl72-{racks}r-{jobs}j-s{SEED}.json"
    if path.exists():
        return path, float("nan")
    start = time.perf_counter()
    text = render_instance(generate_nvl72(racks, jobs, 0.5, SEED), "json")
    took = time.perf_counter() - start
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path, took


def with_movers(inst, seed: int):
    """``--moveable``: the generated instance with a manifest and a checkpoint age for every
    running job (``spec.runningJobs[].job``: a job of the GPUs it holds, pinned to its GPU
    family; whole nodes: 8-GPU TP groups x nodes, one leaf apart at most; fewer: one unit on
    one node), and, at the head of the queue, one high-priority 2 x 8-GPU job (DP
    ``maxHopCount: 2``) per 256 GPUs, pinned to a family in turn: fragmented leaves leave
    few whole free nodes, so some of them fit only when running jobs move."""
    import random
    from collections import defaultdict

    from hyperplace.instances.generator import model_parallel_job, small_job
    from hyperplace.models.instance import RunningJob

    rng = random.Random(f"hyperplace-movers-{seed}")
    held: dict[str, list[tuple[str, str]]] = defaultdict(list)  # job -> (node, family)
    for cluster in inst.spec.clusters:
        for n in cluster.nodes:
            family = n.gpu_type.split("-")[0]
            for job in dict.fromkeys(n.allocated.values()):
                held[job].append((n.name, family))
    by_node = {n.name: n for c in inst.spec.clusters for n in c.nodes}
    running = []
    for name, where in sorted(held.items()):
        family = where[0][1]
        gpus = sum(sum(1 for j in by_node[node].allocated.values() if j == name)
                   for node, _ in where)
        if gpus >= 8 and gpus % 8 == 0:
            manifest = model_parallel_job(name, "llama3-8b", replicas=gpus // 8,
                                          accelerator=family, memory_gb=None,
                                          dp_ib_gbps=None, dp_max_hops=2)
        else:
            manifest = small_job(name, "resnet50", gpus, accelerator=family)
        running.append(RunningJob(name=name, checkpoint_age_s=rng.choice(CHECKPOINT_AGES),
                                  job=manifest))
    families = sorted({t.split("-")[0] for t in TYPES})
    big = [model_parallel_job(f"big-{i:03d}", "llama3-70b", replicas=2,
                              accelerator=families[i % len(families)], memory_gb=None,
                              dp_ib_gbps=None, dp_max_hops=2, priority="high")
           for i in range(max(2, sum(n.gpu_count for n in by_node.values()) // 256))]
    spec = inst.spec.model_copy(update={"running_jobs": running, "jobs": big + inst.spec.jobs})
    return inst.model_copy(update={"spec": spec})


#: ``--nice N``: the solve process runs at this niceness (negative: favoured over the other
#: work on a shared machine, which then approximates an idle one; needs privileges).
NICE = 0


def _niced() -> None:
    if NICE:
        os.nice(NICE)


def run_command(path: Path, budget: float, solver: str, moveable: bool = False) -> dict:
    """`hyperplace solve` in a fresh process: wall time, peak RSS, the plan
    (``moveable``: with ``--running-moveable``)."""
    plan_path = path.with_name(path.stem + f"-plan-{solver}-b{budget:g}.json")
    if plan_path.exists():
        plan_path.unlink()
    cmd = [HYPERPLACE, "solve", "--instance", str(path), "--budget", str(budget),
           "--solver", solver, "--format", "json", "-o", str(plan_path)]
    if moveable:
        cmd.append("--running-moveable")
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=_niced if NICE else None)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    row = {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime,
           "rss_mb": usage.ru_maxrss / 1024, "load": max(load, os.getloadavg()[0]),
           "exit": proc.returncode, "plan": None, "error": err.strip()[-300:]}
    if proc.returncode == 0 and plan_path.exists():
        row["plan"] = json.loads(plan_path.read_text())
        row["plan_path"] = str(plan_path)
    return row


def check_plan(path: Path, plan_path: str) -> int:
    from hyperplace.check import check
    from hyperplace.instances import load_instance
    from hyperplace.io import load_documents, parse
    from hyperplace.models.plan import PlacementPlan

    plan = parse(PlacementPlan, load_documents(plan_path)[0])
    return len(check(plan, load_instance(str(path))))


def warm_child(path: str, budget: float) -> None:
    """Child process: a cold and a warm round through PlacementSession, then a cold solve of
    the warm round's instance for comparison (prints JSON: wall and CPU seconds of each
    round, statuses, objective 1 of the warm round and of the cold solve of the same state).
    """
    import random

    from hyperplace.instances import load_instance
    from hyperplace.instances.generator import generate
    from hyperplace.solvers.driver import solve_placement
    from hyperplace.solvers.workflows.session import PlacementSession, RoundDelta

    inst = load_instance(path)
    session = PlacementSession(inst)  # imports the backends once (not a round's cost)
    start, cpu = time.perf_counter(), time.process_time()
    plan = session.solve(budget)
    cold, cold_cpu = time.perf_counter() - start, time.process_time() - cpu
    session.commit(plan)
    rng = random.Random(SEED)
    extra = generate(64, 40, TYPES, 0.0, 7).jobs
    arrivals = [j.model_copy(update={"metadata": j.metadata.model_copy(
        update={"name": f"warm-{j.name}"})}) for j in rng.sample(extra, 5)]
    nodes = [n.name for c in session.instance.clusters for n in c.nodes]
    delta = RoundDelta(arrivals=arrivals, completions=rng.sample(sorted(session.running), 5),
                       failures=[(rng.choice(nodes), 0), rng.choice(nodes)])
    start, cpu = time.perf_counter(), time.process_time()
    session.apply(delta)
    plan2 = session.solve(budget)
    warm, warm_cpu = time.perf_counter() - start, time.process_time() - cpu
    same_state = solve_placement(session.instance, budget_s=budget)
    print(json.dumps({"cold": cold, "cold_cpu": cold_cpu, "cold_status": plan.status.value,
                      "warm": warm, "warm_cpu": warm_cpu, "warm_status": plan2.status.value,
                      "warm_solver": plan2.solver, "warm_objective": plan2.objective,
                      "cold_same_state_objective": same_state.objective,
                      "cold_same_state_status": same_state.status.value}))


def _warm_txt(warm: dict | None) -> str:
    """cold / warm seconds (wall, then CPU) and the ratios; = when the warm round's objective
    1 equals a cold solve of the same state."""
    if not warm:
        return "-"
    wall = f"{warm['cold']:.2f} / {warm['warm']:.2f} ({warm['warm'] / warm['cold']:.2f})"
    if "cold_cpu" not in warm:
        return wall
    cpu = (f"CPU {warm['cold_cpu']:.2f} / {warm['warm_cpu']:.2f} "
           f"({warm['warm_cpu'] / max(warm['cold_cpu'], 1e-9):.2f})")
    same = "=" if warm.get("warm_objective") == warm.get("cold_same_state_objective") else "!="
    return f"{wall}; {cpu}; obj 1 {same} cold"


def _moves_txt(plan: dict) -> str:
    """Migrations of a ``--moveable`` plan: jobs moved / GPUs moved / lost GPU-seconds, and
    how many of the 2 x 8-GPU jobs (``big-*``) it admits."""
    if not plan:
        return "-"
    moves = plan.get("migrations") or []
    big = sum(1 for j in plan.get("jobs", []) if j["job"].startswith("big-"))
    waiting = sum(1 for j in plan.get("pending", []) if j["job"].startswith("big-"))
    return (f"{len(moves)} / {sum(m.get('gpusMoved', 0) for m in moves)} / "
            f"{sum(m.get('lostGpuSeconds', 0) for m in moves):,.0f}; {big} of {big + waiting}")


def _gaps_txt(plan: dict) -> str:
    """Every objective's gap as the plan reports it (- where it has no valid bound)."""
    gaps = plan.get("objectiveGaps") or {}
    order = ["admitted_priority_demand", "admitted_jobs", "communication", "fragmentation",
             "policy"]
    return " / ".join(_f(gaps.get(k), 4) if gaps.get(k) is not None else "-" for k in order)


def run_warm(path: Path, budget: float) -> dict | None:
    out = subprocess.run([sys.executable, __file__, "--warm-child", str(path), str(budget)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def exponent(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of log(time) on log(GPUs)."""
    pts = [(math.log(x), math.log(y)) for x, y in points if y and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else None


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), Python {sys.version.split()[0]}"


def _f(x: float | None, digits: int = 2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma-separated: " + ", ".join(SIZES))
    parser.add_argument("--budget", type=float, default=None, help="override every size's budget")
    parser.add_argument("--solver", default="auto")
    parser.add_argument("--warm-up-to", type=int, default=16_384, help="warm rounds up to this many GPUs")
    parser.add_argument("--check-up-to", type=int, default=32_768, help="checker up to this many GPUs")
    parser.add_argument("--busy", action="store_true",
                        help="keep both cores busy with another process during the runs")
    parser.add_argument("--nice", type=int, default=0,
                        help="niceness of the solve processes (e.g. -10 on a shared machine: "
                        "the scheduler favours them over other work; recorded in the header)")
    parser.add_argument("--fragmentation", type=float, default=FRAGMENTATION,
                        help="share of GPUs held by running jobs in the generated instances")
    parser.add_argument("--budgets", default="0.2,0.5,1,2,5",
                        help="budgets of the runtimeS sweep (empty: no sweep)")
    parser.add_argument("--sweep-sizes", default="1k,4k,16k",
                        help="sizes of the runtimeS sweep (the promise holds up to 16k)")
    parser.add_argument("--moveable", action="store_true",
                        help="every running job gets a manifest and a checkpoint age, the queue "
                        "2 x 8-GPU jobs that fit only by migration, and solve runs with "
                        "--running-moveable (no warm rounds); default output "
                        "bench/results/scale-moveable.md")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--warm-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--large", action="store_true",
                        help="the largest fleets (#25, bench/bench_scale_large.py): 131k, 262k "
                        "and the 1M-GPU federation; writes its section of scale.md")
    parser.add_argument("--large-sizes", default="io,131k,262k,fed-1M",
                        help="with --large: io (generation/reading), 131k, 262k, fed-1M")
    parser.add_argument("--large-fragmentations", default="0.4,0.6,0.9")
    parser.add_argument("--large-budgets", default="5,10,30")
    parser.add_argument("--large-busy", action="store_true",
                        help="with --large: a --busy row at budget 10 (fragmentation 0.6)")
    parser.add_argument("--large-check", default="131k",
                        help="with --large: sizes whose fragmentation-0.6, budget-10 plan the "
                        "checker verifies (131k, 262k, fed-1M: minutes of CPU each)")
    parser.add_argument("--large-resume", action="store_true",
                        help="with --large: keep the rows a stopped run already measured")
    parser.add_argument("--large-rerun", action="store_true",
                        help="with --large-resume: measure the given rows again and replace "
                        "the kept ones (e.g. a quiet re-run of one row)")
    parser.add_argument("--no-large-warm", dest="large_warm", action="store_false",
                        help="with --large: no warm round at 131k")
    args = parser.parse_args(argv)
    if args.large:
        import bench_scale_large

        global NICE
        NICE = args.nice
        return bench_scale_large.run(args)
    if args.out is None:
        args.out = ROOT / "bench" / "results" / ("scale-moveable.md" if args.moveable
                                                 else "scale.md")
    if args.moveable:
        args.warm_up_to = 0  # PlacementSession rounds do not migrate
    NICE = args.nice
    if args.warm_child:
        warm_child(args.warm_child[0], float(args.warm_child[1]))
        return 0
    burner = None
    if args.busy:
        burner = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                  for _ in range(os.cpu_count() or 2)]
    rows = []
    try:
        for label in args.sizes.split(","):
            gpus, jobs, budget = SIZES[label]
            budget = args.budget or budget
            if label in NVL72_RACKS:
                if args.moveable:
                    continue
                path, gen_s = nvl72_file(NVL72_RACKS[label], jobs)
            else:
                path, gen_s = instance_file(gpus, jobs, args.fragmentation, args.moveable)
            r = run_command(path, budget, args.solver, args.moveable)
            r.update(label=label, gpus=gpus, jobs=jobs, budget=budget, gen_s=gen_s)
            if r["plan"] is not None and gpus <= args.check_up_to:
                r["violations"] = check_plan(path, r["plan_path"])
            if gpus <= args.warm_up_to:
                r["warm"] = run_warm(path, budget)
            rows.append(r)
            plan = r["plan"] or {}
            print(f"{label}: wall {r['wall']:.2f} s, CPU {r['cpu']:.2f} s (budget {budget:g}), runtimeS "
                  f"{plan.get('runtimeS', float('nan')):.2f}, {plan.get('status')}, "
                  f"{plan.get('solver')}, gap {plan.get('gap')}, {r['rss_mb']:.0f} MB, "
                  f"load {r['load']:.1f}, warm {r.get('warm')}", flush=True)
        sweep = []
        for label in [x for x in args.sweep_sizes.split(",") if x] if args.budgets else []:
            gpus, jobs, _ = SIZES[label]
            path, _ = instance_file(gpus, jobs, args.fragmentation, args.moveable)
            for budget in [float(b) for b in args.budgets.split(",")]:
                r = run_command(path, budget, args.solver, args.moveable)
                r.update(label=label, gpus=gpus, jobs=jobs, budget=budget)
                sweep.append(r)
                plan = r["plan"] or {}
                print(f"sweep {label} budget {budget:g}: runtimeS "
                      f"{plan.get('runtimeS', float('nan')):.3f}, wall {r['wall']:.2f} s, "
                      f"CPU {r['cpu']:.2f} s, {plan.get('status')}, load {r['load']:.1f}",
                      flush=True)
    finally:
        for b in burner or []:
            b.kill()
            b.wait()
    write(rows, args, argv, sweep)
    return 0


def runtime_limit(budget: float) -> float:
    """The documented promise on the plan's own ``runtimeS`` (budgets >= 0.2 s, up to 16k)."""
    return 1.05 * budget + 0.05


def write(rows: list[dict], args: argparse.Namespace, argv: list[str] | None,
          sweep: list[dict] | None = None) -> None:
    cmd = "bench/bench_scale.py " + " ".join(argv if argv is not None else sys.argv[1:])
    lines = [
        "# Placement at scale: the whole command, "
        + ("with migrations (`--running-moveable`)" if args.moveable else "cold and warm"),
        "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine()}; the load average (1 min, the larger of the start and the end "
        "of each run; below 1 on an otherwise idle 2-core machine) and the process's CPU time "
        "are in every row; on a loaded machine the "
        "CPU time is what the command costs, the wall time what it got"
        + ("; `--busy`: one extra CPU-bound process per core during the runs" if args.busy else "")
        + (f"; `--nice {args.nice}`: the solve processes ran at niceness {args.nice}, so the "
           "scheduler favoured them over other work (an approximation of an "
           "idle machine; warm rounds and the checker ran unfavoured)" if args.nice else ""),
        f"- command: `{cmd.strip()}`",
        f"- instances: `generate(gpus, jobs, {TYPES}, fragmentation={args.fragmentation}, "
        f"seed={SEED})` written as JSON (`nvl72-37k`: `generate_nvl72(512 racks, 400 jobs, "
        f"load 0.5, seed {SEED})`, GB200 NVL72 racks, #24); solver `{args.solver}`"
        + ("; `--moveable`: `with_movers` gives every running job a manifest (the GPUs it "
           "holds, its GPU family) and a checkpoint age (0-3600 s), and puts one high-priority "
           "2 x 8-GPU job (DP maxHopCount 2) per 256 GPUs at the head of the queue; "
           "`solve --running-moveable`" if args.moveable else ""),
        "- wall = the whole `hyperplace solve ... --format json -o plan.json` process "
        "(start-up, reading, solving, writing); CPU = that process's user + system CPU time "
        "(what the command costs whatever the load; CP-SAT's two workers count twice); "
        "runtimeS = the plan's own solve time; peak "
        "RSS of that process; violations = independent checker on the written plan",
        "- gap = objective 1 (priority-weighted admitted GPUs) against the plan's bound; gaps = "
        "every objective's gap as the plan reports it (objective 1 / admitted jobs / "
        "communication / fragmentation / policy; - = no valid bound for it); wall <= budget "
        "+ 1 s is the command's promise",
        ("- migrations: running jobs moved, their GPUs moved and the work they lose (GPUs x "
         "checkpoint age), and how many of the 2 x 8-GPU jobs are admitted; the driver "
         "limits the movers to 3,000 per second of the budget left after reading (least lost "
         "work first; the round "
         "is then a restriction, never `optimal`)" if args.moveable else
         "- warm = a PlacementSession in a fresh process: round 1 (cold), commit, 5 arrivals, 5 "
         "completions, a GPU and a node failing, round 2 (warm); wall and CPU seconds of each "
         "and warm / cold; `obj 1 = cold`: the warm round's objective 1 equals a cold solve of "
         "the same state"),
        "",
        "| size | GPUs / jobs | budget s | wall s | <= budget + 1 | CPU s | runtimeS | "
        "status (solver) | obj 1 gap | gaps | admitted | comm / frag / policy | peak RSS MB | "
        "violations | " + ("migrations: jobs / GPUs moved / lost GPU-s; 2x8 jobs admitted"
                           if args.moveable else "warm: cold s / warm s (ratio)") + " | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        plan = r["plan"] or {}
        terms = plan.get("objectiveTerms", {})
        warm_txt = _moves_txt(plan) if args.moveable else _warm_txt(r.get("warm"))
        status = (f"{plan.get('status')} ({plan.get('solver')})" if plan
                  else f"exit {r['exit']}: {r['error'][:80]}")
        lines.append(
            f"| {r['label']} | {r['gpus']:,} / {r['jobs']:,} | {r['budget']:g} | "
            f"{r['wall']:.2f} | {'yes' if r['wall'] <= r['budget'] + 1 else 'no'} | "
            f"{r['cpu']:.2f} | {_f(plan.get('runtimeS'))} | {status} | "
            f"{_f(plan.get('gap'), 4) if plan else '-'} | {_gaps_txt(plan) if plan else '-'} | "
            f"{len(plan.get('jobs', []))} | "
            f"{_f(terms.get('communication'), 0)} / {_f(terms.get('fragmentation'), 0)} / "
            f"{_f(terms.get('policy'), 0)} | {r['rss_mb']:.0f} | {r.get('violations', '-')} | "
            f"{warm_txt} | {r['load']:.1f} |")
    k_wall = exponent([(r["gpus"], r["wall"]) for r in rows])
    k_run = exponent([(r["gpus"], (r["plan"] or {}).get("runtimeS")) for r in rows])
    k_cpu = exponent([(r["gpus"], r["cpu"]) for r in rows])
    lines += ["", f"Growth exponent k in time ~ GPUs^k (least squares over the rows): "
              f"wall {_f(k_wall)}, CPU {_f(k_cpu)}, runtimeS {_f(k_run)}.", ""]
    if sweep:
        lines += [
            "## The plan's runtimeS against its budget",
            "",
            "Promise: `runtimeS <= 1.05 x budget + 0.05 s` for budgets >= 0.2 s up to 16,384 "
            "GPUs (the plan's own solve time; wall is the whole command, start-up and "
            "reading included, whose promise is budget + 1 s).",
            "",
            "| size | budget s | runtimeS | limit | holds | wall s | CPU s | status (solver) | "
            "obj 1 gap | load |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sweep:
            plan = r["plan"] or {}
            run = plan.get("runtimeS")
            limit = runtime_limit(r["budget"])
            holds = "-" if run is None else ("yes" if run <= limit else "no")
            status = (f"{plan.get('status')} ({plan.get('solver')})" if plan
                      else f"exit {r['exit']}: {r['error'][:80]}")
            if args.moveable:
                status += f"; moves {_moves_txt(plan)}"
            lines.append(
                f"| {r['label']} | {r['budget']:g} | {_f(run, 3)} | {limit:.3f} | {holds} | "
                f"{r['wall']:.2f} | {r['cpu']:.2f} | {status} | "
                f"{_f(plan.get('gap'), 4) if plan else '-'} | {r['load']:.1f} |")
        lines.append("")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text("\n".join(lines))
    os.replace(tmp, args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    raise SystemExit(main())
