"""Placement bench: the engine's solvers against Volcano-, Kueue-TAS- and Slurm-style rules.

Usage::

    .venv/bin/python bench/bench_placement.py [--quick] [--budget S] [--out bench/results/placement.md]

Every plan (engine or baseline) goes through the independent checker and the same metrics
(``hyperplace.metrics``). Baselines are NVLink- and link-speed-blind on purpose, so their
plans may break constraints; a job with any violation of its own is not *usefully*
admitted, and the ratio column compares usefully admitted priority-weighted demand with
the best baseline's. See bench/README.md for what each column means.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import multiprocessing
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hyperplace.baselines import BASELINES  # noqa: E402
from hyperplace.baselines.peer_cases import PEER_CASES, load_peer_case  # noqa: E402
from hyperplace.check import check  # noqa: E402
from hyperplace.metrics import PlanMetrics, plan_metrics  # noqa: E402
from hyperplace.models import Instance, PlacementPlan  # noqa: E402

ENGINE_SOLVERS = ("auto", "cpsat", "milp", "greedy")
MILP_MAX_GPUS = 1 << 30  # no cap: the driver itself falls back when a model is too large for the budget
GENERATED = ((1024, 100), (4096, 400), (16384, 2000))
GENERATED_TYPES = ["H100-80", "A100-80"]
GENERATED_FRAGMENTATION = 0.9  # busy clusters: the queue exceeds the free GPUs, so selection matters
GENERATED_SEED = 1
# multi-node gangs (Philly sizes x 8 GPUs) on a less busy cluster: topology and packing matter
GENERATED_LLM = ((1024, 40), (4096, 150), (16384, 500))
GENERATED_LLM_FRAGMENTATION = 0.3
SMALL_GPUS = 1024  # --quick: bundled and peer instances up to this size


@dataclass
class Row:
    solver: str
    plan: PlacementPlan | None
    metrics: PlanMetrics | None
    wall_s: float
    note: str = ""


def engine() -> Callable[..., PlacementPlan] | None:
    """The engine's entry point, or None while it is not there yet."""
    if importlib.util.find_spec("hyperplace.solvers.driver") is None:
        return None
    from hyperplace.solvers.driver import solve_placement

    return solve_placement


def instances(quick: bool) -> list[tuple[str, Callable[[], Instance]]]:
    """(name, loader) for the bundled, the peer-failure and the generated instances."""
    out: list[tuple[str, Callable[[], Instance]]] = []
    seen = set()
    try:
        from hyperplace.instances.registry import list_instances, load_instance

        for info in list_instances():
            if quick and info.gpus > SMALL_GPUS:
                continue
            seen.add(info.name)
            out.append((info.name, lambda n=info.name: load_instance(n)))
    except ImportError:
        print("note: hyperplace.instances.registry missing; bundled instances skipped")
    for name in PEER_CASES:
        if name not in seen:
            out.append((name, lambda n=name: load_peer_case(n)))
    if quick:
        return out
    try:
        from hyperplace.instances.generator import generate
    except ImportError:
        print("note: hyperplace.instances.generator missing; generated instances skipped")
        return out
    for gpus, jobs in GENERATED:
        name = f"generated-{gpus}g-{jobs}j"
        out.append((name, lambda g=gpus, j=jobs: generate(
            g, j, GENERATED_TYPES, GENERATED_FRAGMENTATION, GENERATED_SEED)))
    # foundation-model mix: Philly's size distribution read in 8-GPU nodes (size_scale=8)
    for gpus, jobs in GENERATED_LLM:
        name = f"generated-llm-{gpus}g-{jobs}j"
        out.append((name, lambda g=gpus, j=jobs: generate(
            g, j, GENERATED_TYPES, GENERATED_LLM_FRAGMENTATION, GENERATED_SEED, size_scale=8)))
    return out


_CHILD_JOB: Callable[[], PlacementPlan] | None = None


def _child(conn: "multiprocessing.connection.Connection") -> None:
    """Runs in a forked process: solve, send (wall seconds, plan or error text)."""
    assert _CHILD_JOB is not None
    start = time.perf_counter()
    try:
        plan: PlacementPlan | str = _CHILD_JOB()
    except Exception as exc:  # a crashing solver is a bench result, not a bench crash
        plan = f"error: {type(exc).__name__}: {exc}"
    conn.send((time.perf_counter() - start, plan))
    conn.close()


def _run_capped(run: Callable[[], PlacementPlan], cap_s: float
                ) -> tuple[float, PlacementPlan | str]:
    """Solve in a forked child so an engine that overruns its budget cannot stall the bench."""
    global _CHILD_JOB
    _CHILD_JOB = run
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(send,), daemon=True)
    start = time.perf_counter()
    proc.start()
    send.close()
    try:
        if recv.poll(cap_s):
            return recv.recv()
        return time.perf_counter() - start, f"timeout: no answer after {cap_s:.0f} s"
    except EOFError:
        return time.perf_counter() - start, f"error: solver process died (exit {proc.exitcode})"
    finally:
        if proc.is_alive():
            proc.terminate()
        proc.join(5)
        recv.close()


def run_one(solver: str, run: Callable[[], PlacementPlan], inst: Instance,
            cap_s: float | None = None) -> Row:
    """One plan, checked and measured; ``cap_s``: wall-clock cap (engine rows only)."""
    if cap_s is not None and hasattr(os, "fork"):
        wall, plan = _run_capped(run, cap_s)
    else:
        start = time.perf_counter()
        try:
            plan = run()
        except Exception as exc:  # a crashing baseline is a bench result too
            plan = f"error: {type(exc).__name__}: {exc}"
        wall = time.perf_counter() - start
    if isinstance(plan, str):
        return Row(solver, None, None, wall, plan)
    violations = check(plan, inst)
    return Row(solver, plan, plan_metrics(plan, inst, violations), wall)


def bench_instance(inst: Instance, budget: float, solve: Callable[..., PlacementPlan] | None,
                   cap_s: float) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    gpus = sum(n.gpu_count for c in inst.clusters for n in c.nodes)
    if solve is None:
        notes.append("engine rows skipped: hyperplace.solvers.driver is not importable yet")
    else:
        for solver in ENGINE_SOLVERS:
            if solver == "milp" and gpus > MILP_MAX_GPUS:
                notes.append(f"milp skipped: {gpus} GPUs > {MILP_MAX_GPUS} (model build does not "
                             f"fit a {budget:g} s budget)")
                continue
            rows.append(run_one(solver, lambda s=solver: solve(inst, solver=s, budget_s=budget,
                                                               seed=0), inst, cap_s))
    for name, baseline in BASELINES.items():
        rows.append(run_one(name, lambda b=baseline: b(inst), inst))
    return rows, notes


def _num(x: float | int | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, int) or float(x).is_integer():
        x = int(x)
        return f"{x:,}" if abs(x) < 10**9 else f"{x:.3e}"
    return f"{x:.{digits}f}"


HEADER = ("| solver | status | adm. weighted demand | useful weighted demand | jobs adm. | "
          "usefully adm. | GPUs | unit hops mean/max | job hops mean/max | free nodes / leaves "
          "| objective | bound | gap | wall s | violations | useful vs best baseline |")


def table(rows: list[Row]) -> list[str]:
    baseline_best = max((r.metrics.useful_weighted_demand for r in rows
                         if r.metrics and r.solver in BASELINES), default=0)
    columns = HEADER.count("|") - 1
    lines = [HEADER, "|" + "|".join("---" for _ in range(columns)) + "|"]
    for r in rows:
        if r.plan is None or r.metrics is None:
            # solver, note in the status column, blanks up to wall s, then violations, ratio
            lines.append(f"| {r.solver} | {r.note} |" + " |" * (columns - 5)
                         + f" {r.wall_s:.2f} | - | - |")
            continue
        m, p = r.metrics, r.plan
        ratio = (f"{m.useful_weighted_demand / baseline_best:.3f}" if baseline_best
                 else ("inf" if m.useful_weighted_demand else "-"))
        lines.append("| " + " | ".join([
            p.solver if p.solver == r.solver else f"{r.solver} ({p.solver})",
            str(p.status), _num(m.admitted_weighted_demand), _num(m.useful_weighted_demand),
            str(m.admitted_jobs), str(m.usefully_admitted_jobs), str(m.admitted_gpus),
            f"{_num(m.unit_hops_mean)}/{_num(m.unit_hops_max)}",
            f"{_num(m.job_hops_mean)}/{_num(m.job_hops_max)}",
            f"{m.whole_free_nodes} / {m.whole_free_leaf_domains}",
            _num(p.objective), _num(p.bound), _num(p.gap, 4), f"{r.wall_s:.2f}",
            str(m.violations), ratio]) + " |")
    return lines


def machine() -> str:
    model = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{os.cpu_count()} CPUs ({model}), Python {platform.python_version()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small instances only (< 1 min)")
    parser.add_argument("--budget", type=float, default=10.0, help="engine budget per solve, s")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "placement.md")
    parser.add_argument("--cap", type=float, default=None,
                        help="hard wall-clock cap per engine solve, s (default: 6 x budget + 30)")
    parser.add_argument("--only", default=None, help="run only instances whose name contains this")
    args = parser.parse_args(argv)
    if args.budget <= 0:
        parser.error("--budget: must be > 0")

    solve = engine()
    cap_s = args.cap if args.cap is not None else 6 * args.budget + 30
    started = dt.datetime.now().astimezone()
    out = [
        "# Placement bench",
        "",
        f"- date: {started:%Y-%m-%d %H:%M %Z}",
        f"- machine: {machine()}",
        f"- command: `bench/bench_placement.py{' --quick' if args.quick else ''} "
        f"--budget {args.budget:g}`; engine solves are cut off after {cap_s:g} s wall "
        "(a row says `timeout`)",
        f"- generated instances: types {', '.join(GENERATED_TYPES)}, fragmentation "
        f"{GENERATED_FRAGMENTATION}, seed {GENERATED_SEED}; generated-llm-*: job sizes x8 "
        f"(Philly sizes read in 8-GPU nodes), fragmentation {GENERATED_LLM_FRAGMENTATION}",
        "- useful = admitted jobs with no checker violation of their own; the last column is "
        "useful weighted demand / best baseline's useful weighted demand (see bench/README.md)",
        "",
    ]
    for name, load in instances(args.quick):
        if args.only and args.only not in name:
            continue
        t0 = time.perf_counter()
        inst = load()
        load_s = time.perf_counter() - t0
        free = sum(n.free_count for c in inst.clusters for n in c.nodes)
        gpus = sum(n.gpu_count for c in inst.clusters for n in c.nodes)
        title = (f"## {name}: {gpus:,} GPUs ({free:,} free), {len(inst.jobs)} pending jobs "
                 f"(loaded in {load_s:.1f} s)")
        print(title, flush=True)
        rows, notes = bench_instance(inst, args.budget, solve, cap_s)
        lines = table(rows)
        print("\n".join(lines))
        for note in notes:
            print(f"note: {note}")
        print(flush=True)
        out += [title, "", *lines, "", *(f"- {n}" for n in notes), ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(out) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
