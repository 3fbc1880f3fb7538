"""Placement bench: the engine's solvers against the peers' rules (Volcano, Kueue, Slurm).

Usage::

    .venv/bin/python bench/bench_placement.py [--quick] [--budget S] [--seeds N] [--only NAME]

Every plan (engine or peer) goes through the independent checker and the same metrics
(``hyperplace.benchkit.metrics``). The peer rules (``hyperplace.baselines``) are re-implemented from
their source; Volcano and the kube-scheduler break ties at random, so those rules run over
``--seeds`` seeds and every peer figure is a mean with its range. Jobs that no placement
can satisfy (each solved alone on the emptied cluster) are removed before anyone is
measured and listed per instance: nobody is charged for them. See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import multiprocessing
import os
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hyperplace.baselines import BASELINES, RANDOMISED
from hyperplace.benchkit.peer_cases import PEER_CASES, load_peer_case
from hyperplace.check import Violation, check
from hyperplace.benchkit.metrics import PlanMetrics, plan_metrics
from hyperplace.models import Instance, PlacementPlan
from benchlib import machine

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
# GB200 NVL72 clusters (#24): (racks, jobs), half the trays busy, seed 1
GENERATED_NVL72 = ((64, 60), (128, 120), (512, 400))


@dataclass
class Row:
    solver: str
    plan: PlacementPlan | None
    metrics: PlanMetrics | None
    wall_s: float
    note: str = ""
    violations: list[Violation] | None = None
    seed: int | None = None

    @property
    def useful_gpus(self) -> int:
        """Admitted GPUs of jobs with no violation of their own requirements."""
        if self.plan is None:
            return 0
        bad = bad_jobs(self.violations or [])
        return sum(len(p.gpus) for p in self.plan.placements if p.job not in bad)

    @property
    def held_gpus(self) -> int:
        return int(self.plan.objective_terms.get("held_gpus", 0)) if self.plan else 0


def bad_jobs(violations: list[Violation]) -> set[str]:
    """Jobs placed in violation of their own requirements (priority inversion is not one)."""
    return {v.job for v in violations if v.job is not None and v.code != "priority-inversion"}


def violated(violations: list[Violation]) -> Counter[str]:
    """Requirement broken -> number of jobs placed breaking it."""
    seen = {(v.code, v.job) for v in violations
            if v.job is not None and v.code != "priority-inversion"}
    return Counter(code for code, _ in seen)


def engine() -> Callable[..., PlacementPlan] | None:
    """The engine's entry point, or None while it is not there yet."""
    if importlib.util.find_spec("hyperplace.solvers.driver") is None:
        return None
    from hyperplace.solvers.driver import solve_placement
    # the backends load lazily (CLI start-up); load them here, before the forked solves, so
    # that every engine row times the solve and not the import of OR-Tools or PuLP
    import hyperplace.solvers.backends.cpsat  # noqa: F401
    import hyperplace.solvers.backends.milp  # noqa: F401

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
    from hyperplace.instances.nvl72 import generate_nvl72

    for racks, jobs in GENERATED_NVL72:
        out.append((f"generated-nvl72-{racks}r-{jobs}j",
                    lambda r=racks, j=jobs: generate_nvl72(r, j, 0.5, GENERATED_SEED)))
    return out


NVL_HEADER = ("| solver / rule | jobs with a TP/EP unit across trays | ... in one NVLink domain "
              "| racks whole (before -> after) | racks keeping a whole free tray (before -> "
              "after) |")


def nvlink_table(rows: list[Row], peers: dict[str, list[Row]], inst: Instance) -> list[str]:
    """Per engine solver and peer rule (seed 0): what the plan does with the racks (#24)."""
    from hyperplace.benchkit.nvlink_metrics import nvlink_metrics

    out = [NVL_HEADER, "|---|---|---|---|---|"]
    for label, r in [*((r.solver, r) for r in rows),
                     *((name, runs[0]) for name, runs in peers.items() if runs)]:
        m = nvlink_metrics(r.plan, inst) if r.plan is not None else None
        if m is None:
            continue
        out.append(f"| {label} | {m.jobs_multi_tray} | {m.jobs_in_one_domain} | "
                   f"{m.racks_whole_before} -> {m.racks_whole_after} of {m.racks} | "
                   f"{m.racks_with_spare_before} -> {m.racks_with_spare_after} |")
    return out if len(out) > 2 else []


_CHILD_JOB: Callable[[], PlacementPlan] | None = None


def _child(conn: multiprocessing.connection.Connection) -> None:
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
    return Row(solver, plan, plan_metrics(plan, inst, violations), wall, violations=violations)


def _doc(instance: Instance) -> dict:
    doc = {"apiVersion": instance.api_version, "kind": instance.kind, **instance.to_doc()}
    doc["spec"]["jobs"] = [{"apiVersion": j.api_version, "kind": j.kind, **j.to_doc()}
                           for j in instance.jobs]
    return doc


def _with(instance: Instance, jobs: list[str], empty: bool = False) -> Instance:
    """The instance with only ``jobs`` pending (and every GPU freed when ``empty``)."""
    doc = _doc(instance)
    doc["spec"]["jobs"] = [j for j in doc["spec"]["jobs"] if j["metadata"]["name"] in jobs]
    if empty:
        for cluster in doc["spec"]["clusters"]:
            for node in cluster.get("nodes", []):
                node.pop("allocated", None)
    return Instance.model_validate(doc)


def impossible_jobs(inst: Instance, solve: Callable[..., PlacementPlan] | None,
                    pending: list[str], limit: int = 40) -> dict[str, str] | None:
    """Jobs no placement can satisfy: pending even alone on the emptied cluster.

    Checked for the engine's pending jobs only (a job the engine placed is possible), and
    only when there are at most ``limit`` of them (None: not checked).
    """
    if solve is None or len(pending) > limit:
        return None
    out = {}
    for name in pending:
        alone = _with(inst, [name], empty=True)
        plan = solve(alone, solver="auto", budget_s=5.0, seed=0)
        if not plan.admitted and plan.status == "optimal":
            out[name] = plan.pending[0].reasons[0] if plan.pending else "no placement"
    return out


def bench_instance(inst: Instance, budget: float, solve: Callable[..., PlacementPlan] | None,
                   cap_s: float, seeds: int) -> tuple[list[Row], dict[str, list[Row]], list[str]]:
    """Engine rows (one run each) and, per peer rule, one row per seed."""
    rows: list[Row] = []
    notes: list[str] = []
    gpus = sum(n.gpu_count for c in inst.clusters for n in c.nodes)
    if solve is None:
        notes.append("engine rows skipped: hyperplace.solvers.driver is not importable yet")
    else:
        for solver in ENGINE_SOLVERS:
            if solver == "milp" and gpus > MILP_MAX_GPUS:
                continue
            rows.append(run_one(solver, lambda s=solver: solve(inst, solver=s, budget_s=budget,
                                                               seed=0), inst, cap_s))
    peers: dict[str, list[Row]] = {}
    for name, baseline in BASELINES.items():
        runs = []
        for seed in (range(seeds) if name in RANDOMISED else range(1)):
            row = run_one(name, lambda b=baseline, sd=seed: b(inst, seed=sd), inst)
            row.seed = seed
            runs.append(row)
        peers[name] = runs
    return rows, peers, notes


def _num(x: float | None, digits: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, int) or float(x).is_integer():
        x = int(x)
        return f"{x:,}" if abs(x) < 10**9 else f"{x:.3e}"
    return f"{x:.{digits}f}"


def spread(values: list[float], digits: int = 1) -> str:
    """Mean, and the range over seeds when it is not a single value."""
    if not values:
        return "-"
    mean = statistics.fmean(values)
    lo, hi = min(values), max(values)
    if lo == hi:
        return _num(lo, digits)
    return f"{_num(mean, digits)} ({_num(lo, digits)}-{_num(hi, digits)})"


def ratio_text(engine: float | None, other: float) -> str:
    """engine / other to 3 decimals; ``(+)``/``(-)`` when it differs from 1 below that."""
    if engine is None:
        return "-"
    if other == 0:
        return "inf" if engine else "-"
    x = engine / other
    text = f"{x:.3f}"
    if text == "1.000" and engine != other:
        text += " (+)" if engine > other else " (-)"
    return text


def _weighted(r: Row) -> float:
    return float(r.metrics.useful_weighted_demand) if r.metrics else 0.0


def _violations_text(runs: list[Row]) -> str:
    """Requirement: jobs placed breaking it (mean over seeds when they differ)."""
    total: Counter[str] = Counter()
    for r in runs:
        total.update(violated(r.violations or []))
    if not total:
        return "none"
    n = len(runs)
    return ", ".join(f"{code} {_num(c / n, 1)}" for code, c in sorted(total.items()))


HEADER = ("| solver | seeds | status | useful weighted demand | engine `auto` / this (weighted) "
          "| admitted GPUs | useful GPUs | admitted jobs | useful jobs | jobs placed breaking "
          "their own requirements | GPUs held by partly bound jobs | gap | wall s |")


def table(rows: list[Row], peers: dict[str, list[Row]]) -> list[str]:
    """One line per engine solver and per peer rule (peer figures: mean (min-max) over seeds)."""
    auto = next((r for r in rows if r.solver == "auto" and r.metrics), None)
    columns = HEADER.count("|") - 1
    lines = [HEADER, "|" + "|".join("---" for _ in range(columns)) + "|"]

    def ratio(value: float) -> str:
        return ratio_text(_weighted(auto) if auto else None, value)

    for r in rows:
        if r.plan is None or r.metrics is None:
            lines.append(f"| {r.solver} | - | {r.note} |" + " - |" * (columns - 4)
                         + f" {r.wall_s:.2f} |")
            continue
        m, p = r.metrics, r.plan
        lines.append("| " + " | ".join([
            p.solver if p.solver == r.solver else f"{r.solver} ({p.solver})", "-",
            str(p.status), _num(m.useful_weighted_demand), ratio(_weighted(r)),
            str(m.admitted_gpus), str(r.useful_gpus), str(m.admitted_jobs),
            str(m.usefully_admitted_jobs), _violations_text([r]), str(r.held_gpus),
            _num(p.gap, 4), f"{r.wall_s:.2f}"]) + " |")
    for name, runs in peers.items():
        ok = [r for r in runs if r.metrics]
        if not ok:
            lines.append(f"| {name} | {len(runs)} | {runs[0].note} |" + " - |" * (columns - 4)
                         + f" {runs[0].wall_s:.2f} |")
            continue
        weighted = [_weighted(r) for r in ok]
        lines.append("| " + " | ".join([
            name, str(len(ok)), "feasible", spread(weighted, 0),
            ratio(statistics.fmean(weighted)),
            spread([r.metrics.admitted_gpus for r in ok]), spread([r.useful_gpus for r in ok]),
            spread([r.metrics.admitted_jobs for r in ok]),
            spread([r.metrics.usefully_admitted_jobs for r in ok]), _violations_text(ok),
            spread([r.held_gpus for r in ok]), "-",
            f"{statistics.fmean(r.wall_s for r in ok):.2f}"]) + " |")
    return lines


SUMMARY_HEADER = (
    "| instance | GPUs (free) / jobs | removed as impossible | engine `auto`: status, gap, "
    "wall s | engine useful GPUs / jobs | best peer rule (by mean useful weighted demand) | "
    "its useful GPUs | its useful jobs | its jobs breaking their requirements | weighted: "
    "engine / best peer mean |")


def summary_line(name: str, inst: Instance, removed: dict[str, str] | None, rows: list[Row],
                 peers: dict[str, list[Row]]) -> str:
    gpus = sum(n.gpu_count for c in inst.clusters for n in c.nodes)
    free = sum(n.free_count for c in inst.clusters for n in c.nodes)
    auto = next((r for r in rows if r.solver == "auto"), None)
    if auto is None or auto.metrics is None or auto.plan is None:
        engine, eng_useful, eng_w = (auto.note if auto else "-"), "-", None
    else:
        p = auto.plan
        engine = f"{p.status} ({p.solver}), {_num(p.gap, 4)}, {auto.wall_s:.2f}"
        eng_useful = f"{auto.useful_gpus} / {auto.metrics.usefully_admitted_jobs}"
        eng_w = _weighted(auto)
    scored = [(statistics.fmean(_weighted(r) for r in runs), name_, runs)
              for name_, runs in peers.items() if runs and all(r.metrics for r in runs)]
    if not scored:
        return f"| {name} | {gpus:,} ({free:,}) / {len(inst.jobs)} | - | {engine} | {eng_useful} | - | - | - | - | - |"
    best_w, best, runs = max(scored, key=lambda t: t[0])
    ratio = ratio_text(eng_w, best_w)
    gone = ("not checked" if removed is None else
            (", ".join(sorted(removed)) if removed else "none"))
    return (f"| {name} | {gpus:,} ({free:,}) / {len(inst.jobs)} | {gone} | {engine} | "
            f"{eng_useful} | {best} ({len(runs)} seed{'s' if len(runs) > 1 else ''}) | "
            f"{spread([r.useful_gpus for r in runs])} | "
            f"{spread([r.metrics.usefully_admitted_jobs for r in runs])} | "
            f"{_violations_text(runs)} | {ratio} |")




CONFIG_NOTES = [
    "- peer rules (`hyperplace/baselines/`, each rule cited to upstream file and line): "
    "`volcano-style` = Volcano allocate + network-topology-aware + binpack with "
    "`binpack.resources: nvidia.com/gpu` and `hypernode.binpack.resources: nvidia.com/gpu` "
    "(weight 1): the configuration this bench assumes for Volcano; `volcano-default` = the "
    "shipped volcano-scheduler.conf weights (GPUs unweighted, so every feasible node ties and "
    "the choice is random); `kueue-tas-style` = Kueue TAS (implied PodSets LeastFreeCapacity, "
    "required BestFit; TASProfileMixed on); `kueue-quota-style` = Kueue without TAS (quota "
    "only, pods bound one by one); `slurm-tree-style` = Slurm topology/tree with gres Links=. "
    "GPUs inside a node: NVIDIA's device plugin BestEffortPolicy for the Kubernetes rules, "
    "Slurm's gres selection for Slurm",
    "- weighted = priority-weighted admitted GPUs, sum of W[priority] x GPUs over admitted "
    "jobs with no violation of their own, W = the engine's lexicographic priority weights "
    "(`hyperplace/models/priority.py`: one GPU at a priority outweighs all lower-priority "
    "demand); the ratio column divides the engine's `auto` figure by the rule's mean; "
    "`1.000 (+)` / `(-)`: higher / lower by less than 0.05 % (e.g. more GPUs at a higher "
    "priority and fewer in total)",
    "- useful GPUs / jobs: admitted GPUs / jobs of jobs placed with no violation of their own "
    "requirements (the checker's codes are listed in the violations column: e.g. "
    "`nvlink-bandwidth` = GPUs of a unit not NVLink-connected as asked)",
]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--scale" in argv:  # the scale bench lives in bench_scale.py (its options follow)
        from bench_scale import main as scale_main

        return scale_main([a for a in argv if a != "--scale"])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small instances only (< 1 min)")
    parser.add_argument("--budget", type=float, default=10.0, help="engine budget per solve, s")
    parser.add_argument("--seeds", type=int, default=5,
                        help="seeds per randomised peer rule (Volcano, kube-scheduler)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "placement.md")
    parser.add_argument("--cap", type=float, default=None,
                        help="hard wall-clock cap per engine solve, s (default: 6 x budget + 30)")
    parser.add_argument("--only", default=None, help="run only instances whose name contains this")
    args = parser.parse_args(argv)
    if args.budget <= 0:
        parser.error("--budget: must be > 0")
    if args.seeds < 1:
        parser.error("--seeds: must be >= 1")

    solve = engine()
    cap_s = args.cap if args.cap is not None else 6 * args.budget + 30
    started = dt.datetime.now().astimezone()
    command = (f"bench/bench_placement.py{' --quick' if args.quick else ''} --budget "
               f"{args.budget:g} --seeds {args.seeds}" + (f" --only {args.only}" if args.only else ""))
    head = [
        "# Placement bench",
        "",
        f"- date: {started:%Y-%m-%d %H:%M %Z}",
        f"- machine: {machine()}; shared with other work while it ran, so wall times are noisy",
        f"- command: `{command}`; engine solves are cut off after {cap_s:g} s wall "
        "(a row says `timeout`)",
        f"- generated instances: types {', '.join(GENERATED_TYPES)}, fragmentation "
        f"{GENERATED_FRAGMENTATION}, seed {GENERATED_SEED}; generated-llm-*: job sizes x8 "
        f"(Philly sizes read in 8-GPU nodes), fragmentation {GENERATED_LLM_FRAGMENTATION}",
        "- generated-nvl72-*: `hyperplace.instances.nvl72.generate_nvl72(racks, jobs, 0.5, "
        f"{GENERATED_SEED})`: GB200 NVL72 racks (18 trays x 4 GPUs) two per leaf, half the "
        "trays busy, the NVL72 job mix (TP/EP 8-72 GPUs with the NVLink floor, Kueue slices, "
        "whole-rack jobs, one-tray fine-tunes); the table under each NVL72 instance says what "
        "each plan does with the racks (seed 0 for the randomised rules)",
        f"- randomised peer rules ({', '.join(sorted(RANDOMISED))}) run with seeds 0..{args.seeds - 1}; "
        "their figures are mean (min-max) over the seeds; the others are deterministic (1 run)",
        *CONFIG_NOTES,
        "- jobs no placement can satisfy (pending in the engine's proven-optimal plan of the job "
        "alone on the emptied cluster) are removed before anyone is measured and listed",
        "",
    ]
    summary = ["## Summary", "", SUMMARY_HEADER,
               "|" + "|".join("---" for _ in range(SUMMARY_HEADER.count("|") - 1)) + "|"]
    body: list[str] = []
    for name, load in instances(args.quick):
        if args.only and args.only not in name:
            continue
        t0 = time.perf_counter()
        inst = load()
        load_s = time.perf_counter() - t0
        removed: dict[str, str] | None = None
        if solve is not None and len(inst.jobs) <= 200:
            first = solve(inst, solver="auto", budget_s=args.budget, seed=0)
            removed = impossible_jobs(inst, solve, [p.job for p in first.pending])
        measured = inst
        if removed:
            measured = _with(inst, [j.name for j in inst.jobs if j.name not in removed])
        free = sum(n.free_count for c in inst.clusters for n in c.nodes)
        gpus = sum(n.gpu_count for c in inst.clusters for n in c.nodes)
        title = (f"## {name}: {gpus:,} GPUs ({free:,} free), {len(inst.jobs)} pending jobs "
                 f"(loaded in {load_s:.1f} s)")
        print(title, flush=True)
        rows, peers, notes = bench_instance(measured, args.budget, solve, cap_s, args.seeds)
        lines = table(rows, peers)
        racks = nvlink_table(rows, peers, measured)
        if racks:
            lines += ["", "NVLink domains (racks):", "", *racks]
        if removed:
            notes.insert(0, "removed as impossible for everyone (not counted for any row): "
                         + "; ".join(f"`{j}`: {why}" for j, why in sorted(removed.items())))
        print("\n".join(lines))
        for note in notes:
            print(f"note: {note}")
        print(flush=True)
        body += [title, "", *lines, "", *(f"- {n}" for n in notes), ""]
        summary.append(summary_line(name, measured, removed, rows, peers))
    text = "\n".join(head + summary + [""] + body) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, args.out)
    print("\n".join(summary))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
