"""Over-time bench: trace replay under contention, the engine against every peer.

Usage::

    .venv/bin/python bench/bench_simulate.py [--quick] [--targets 0.7,0.8,0.9]
        [--only LABEL@INSTANCE,...] [--budget S] [--workers N] [--cache DIR] [--fresh]
        [--assemble]

Workloads (:data:`FULL`): the bundled Philly and Alibaba 2023 samples and the
foundation-model-shaped workload (``fm``: AcmeTrace sizes on Philly's timing, large jobs
long, small ones short), on ``mixed-a100-h100`` (256 GPUs), ``superpod-h100-4su`` (1,024)
and one federation (``seed-beijing-shanghai``).

**Federation cells** (run only with ``--federation``) are fedsim's
(``bench/bench_fedsim.py``, which can also write them): the load is the one at which the
better of Karmada's aggregated and dynamic divisions (nodes as listed) reaches the target,
and the cell replays ``engine-federated`` (the planning engine's schedule of the global
queue, splits when they finish a job sooner) and ``engine-federated-whole`` (splits off),
Karmada's divisions (``aggregated``, ``dynamic``, ``static``, ``aggregated-whole``:
per-cluster queues, the faithful peers of a federated deployment), the round federation
engine it replaced (``engine-federated-rounds``, a baseline) and, as references only, Slurm,
Kueue and Volcano on one global queue over every member (:func:`federation_plan`). Its ratios are
``engine-federated`` over the best Karmada row; ``ratios_by_engine`` also gives them
against every other row, references included. Each replay is cached like every other.

**Repeated samples** (the ``repeat`` column of :data:`FULL`). Utilisation is measured
within the arrival window, and every replay starts from an empty cluster, so the first
part of the window is a ramp-up: at the 1 h floor on arrivals
(:data:`hyperplace.sim.workload.MIN_WINDOW_S`) the Alibaba sample's 1,318 jobs (1,439
GPUs asked, on 256 GPUs) fill the instance from the second fifth of the window (0.95-0.99
busy) but the first fifth runs at 0.38, so the peers reach at most 0.85 whatever the load
(measured 2026-12-02 04:09, Kueue and Volcano). On the 1,024-GPU SuperPOD the samples ask
for too few GPUs altogether (Philly 2,674, Alibaba 1,439: at most 0.52 / 0.28 of load 1.0
over 1 h). Neither is fragmentation, topology or the bisection's cap. A row with
``repeat = K`` replays the sample K times back to back (copy ``c``'s submit times shifted
by ``c`` x the sample's span plus one mean gap; job names of copies after the first get
``~c``, so their model draws and prediction errors are their own, seeded as ever): the
same jobs and arrival pattern, K times as long, so the ramp-up is 1/K of the window. K is
chosen so that the jobs ask about 10 times the instance's GPUs or more (Alibaba x2 on
256 GPUs, Philly x4 and Alibaba x8 on 1,024). The cell says which (``repeat``). A target
still out of reach after that is reported unreachable with what the probes reached.

**Job limits**: each row replays the first N jobs of its trace (the ``jobs`` column, None:
all; fm is capped at 400 jobs: its 128-1,024-GPU gangs run for days) before repeating.

**Loads.** For each workload, instance and target the bench searches the offered load
(``simulate --load``, :mod:`hyperplace.sim.workload`) at which the *strongest probe peer*
reaches the target utilisation within the arrival window: the probe is the better of
Kueue BestEffortFIFO and Volcano allocate (nodes fast-first), the strongest peers by
utilisation in every earlier run; probe replays are cut at the last arrival; loads probed
from 1.0 in steps of x1.5 until the target is bracketed, then ``--probes`` bisection steps
on the log of the load (default 2), the lowest probed load that reached the target is kept
(:func:`find_load`). The load found is then replayed to the end under every policy; the
table gives the utilisation each really reached.

**Policies.** ``engine`` (the planning engine, :mod:`hyperplace.sim.planning`), and every
peer (``slurm`` backfill as a site configures it, ``kueue`` BestEffortFIFO, ``kueue-strict``,
``volcano``, ``fifo``) in both node orders (fastest GPU type listed first and last: suffix
``/fast-first``, ``/fast-last``), so no gain comes from a peer's unlucky node order (on an
instance of one GPU type both orders list the nodes alike: the two rows are one replay,
the second marked ``same_replay_as``). The
ratio row compares the engine with the best peer run per metric (the best faithful peer:
the weaker named variants such as ``slurm-default`` are not in the grid).

**Cadence** (review R32; ``SimConfig.cadence = "upstream"``, :mod:`hyperplace.sim.policies`):
every peer decides as often as it does upstream, cited there: Kueue, ``kueue-strict`` and
``fifo`` at every event, Volcano every second, Slurm's backfill every 30 s with its main
scheduler at every submission and job end; the engine every 60 s (``round_s``) with its fill
at every event between rounds. Each row says its ``cadence_s`` and ``fills_at_events``.
Cells before 2026-12-03 replayed every peer every 60 s (their rows have no ``cadence_s``);
that cost Kueue 265 -> 13 bubble GPU-hours on Alibaba x2 at 0.8 (R32's measurement).

**Metrics** (:func:`hyperplace.sim.metrics.summarize`): mean, p50 and p99 JCT; mean wait;
mean bounded slowdown; bubble GPU-hours (free GPUs while a job that fits by count waits,
within the arrival window); utilisation within the arrival window (busy GPU-seconds over
GPUs x window, the issue's metric); **work-normalised utilisation** (:func:`work_utilisation`,
``util_work``: the work done within the window at each job's mean speed over the instance,
over GPUs x window: the same work counts the same whether it ran on A100 or H100, so a
policy that puts work on faster GPUs is not shown as idler for it); the engine's forecast
error (median absolute start error over the actual wait, for jobs that waited 10 min or
more); per-round solve p50/p99; and a lower bound: every job at its fastest speed, no
wait (JCT = work / best speed).

**Speed: a cache and parallel replays.** Every replay (probe or full) is one task run in
a fresh process (``--workers N`` at once; default 1). Its row is cached in ``--cache``
(default ``bench/results/simulate-cache/``, not committed) under the replay's inputs
(trace, repeat, jobs, workload, instance, node order, load, policy, budget, seed, and the
source of this bench's replay functions), together with the sha256 of every ``hyperplace``
module the replay's process had imported and of every file in ``hyperplace/data``, and the
versions of the solver packages. A cached row is used only when all of those are
byte-identical now; the row keeps the commit it was computed at. Peer replays never import
the engine's modules (``sim/planning.py``, ``sim/forecast.py``, ``solvers/schedule``,
``formulations/schedule``; tests/sim/test_bench_simulate.py checks it in a fresh process),
so an engine change re-runs only the engine rows; ``--fresh`` ignores the cache. Other
changes to code the peers import (the checker, the round state) re-run them too; with
``--stale-peers`` a peer row whose imported files changed is used anyway and the report
lists, for each such row, the commit it was computed at and the files that differ.

**Results.** Each cell (workload, instance, target) is written on its own as
``bench/results/simulate/<cell>.json`` (with its charts beside it) the moment it finishes;
``--assemble`` (and every run at its end) rebuilds ``bench/results/simulate.md`` from the
cells present, with date, machine, load average, wall and CPU time per replay, the commit
of every row and whether it is on ``main``, and says which cells did not run. A cell is a
JSON object: ``label, trace, workload, instance, jobs_limit, repeat, target, budget_s,
load`` (None: unreachable), ``probe_reached, facts, rows`` (one per policy: the keys of
``summarize`` plus ``policy, util_work, series, wall_s, cpu_s, load1, commit``),
``lower_bound, ratios, commit, date, machine``.

``--quick``: the Alibaba 2023 sample (1,318 jobs, once) on ``mixed-a100-h100``, target 0.8
only, engine budget 0.2 s, 3 probes, into ``bench/results/simulate-quick/``.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import functools
import hashlib
import importlib.metadata
import inspect
import json
import math
import multiprocessing
import os
import platform
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hyperplace.benchkit.loads import bracket_load  # noqa: E402
from hyperplace.instances import load_instance  # noqa: E402
from hyperplace.io import write_atomic  # noqa: E402
from hyperplace.sim.metrics import (  # noqa: E402
    SLOWDOWN_FLOOR_S,
    bubble_series,
    rule_break_line,
    save_figure,
    summarize,
)
from hyperplace.sim.run import SimRequest, build_workload  # noqa: E402
from hyperplace.sim.simulator import SimConfig, simulate  # noqa: E402
from hyperplace.sim.speed import SpeedModel  # noqa: E402
from hyperplace.sim.state import reorder_nodes  # noqa: E402

# (label, trace, workload, instance, jobs, repeat): jobs = the first N jobs of the trace
# (None: all), repeat = the sample replayed K times back to back (module docstring: why).
FULL = [
    ("philly", "philly", "trace", "mixed-a100-h100", None, 1),
    ("alibaba-2023", "alibaba-2023", "trace", "mixed-a100-h100", None, 2),
    ("fm", "philly", "fm", "mixed-a100-h100", 400, 1),
    ("philly", "philly", "trace", "superpod-h100-4su", None, 4),
    ("alibaba-2023", "alibaba-2023", "trace", "superpod-h100-4su", None, 8),
    ("fm", "philly", "fm", "superpod-h100-4su", 400, 1),
    ("philly", "philly", "trace", "seed-beijing-shanghai", 600, 1),
    ("fm", "philly", "fm", "seed-beijing-shanghai", 300, 1),
]
QUICK = [("alibaba-2023", "alibaba-2023", "trace", "mixed-a100-h100", None, 1)]
PEERS = ("slurm", "kueue", "kueue-strict", "volcano", "fifo")
PROBES = ("kueue", "volcano")
ORDERS = ("fast-first", "fast-last")
ENGINES = ("engine", "engine-federated", "engine-federated-whole", "engine-federated-rounds")
# A federation cell (module docstring, "Federation cells"): fedsim's rows and probes, one
# definition (bench/bench_fedsim.py's RUNS, PROBES and REFERENCES are these), each replay
# cached like every other. Not imported from bench_fedsim: a replay's process imports this
# module, and fedsim's imports would enter every peer row's code hashes.
FED_ENGINES = ("engine-federated", "engine-federated-whole")
FED_PEERS = ("karmada-aggregated", "karmada-dynamic", "karmada-static",
             "karmada-aggregated-whole")
FED_PROBES = ("karmada-aggregated", "karmada-dynamic")
FED_REFERENCES = ("slurm", "kueue", "volcano")
# the round federation engine that engine-federated replaced (a baseline row, not a peer;
# the planning engine on one global queue, the reference row before, is
# engine-federated-whole itself)
FED_BASELINE = "engine-federated-rounds"
REFERENCE = "one global queue over every member (not a federated deployment)"
LOWER = ("jct_mean_s", "jct_median_s", "jct_p99_s", "wait_mean_s", "bounded_slowdown_mean",
         "bubble_gpu_hours")
HIGHER = ("utilisation_in_window", "util_work")
SOLVER_PACKAGES = ("ortools", "highspy", "pulp", "numpy", "networkx", "pydantic")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load1() -> str:
    try:
        return Path("/proc/loadavg").read_text().split()[0]
    except OSError:
        return "?"


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=False)


def head_commit() -> str:
    """HEAD's short id, with ``+dirty`` when the package or the bench differ from it."""
    sha = git("rev-parse", "--short", "HEAD").stdout.strip() or "?"
    dirty = git("status", "--porcelain", "--", "hyperplace", "bench/bench_simulate.py").stdout
    return sha + ("+dirty" if dirty.strip() else "")


def on_main(commit: str) -> bool:
    """Whether ``commit`` (a clean one) is on the branch ``main``."""
    if not commit or "+" in commit or commit == "?":
        return False
    return git("merge-base", "--is-ancestor", commit, "main").returncode == 0


# ---- the workload ------------------------------------------------------------------------

def workload(spec: dict):
    instance = load_instance(spec["instance"])
    # the sample (its first ``jobs``) replayed ``repeat`` times back to back: the library's
    # --repeat (hyperplace.sim.traces.repeat_rows)
    req = SimRequest(trace=spec["trace"], workload=spec["workload"], load=spec["load"],
                     limit=spec["jobs"], repeat=spec["repeat"])
    wl, facts = build_workload(req, instance, spec["seed"])
    facts["trace"] = spec["trace"] + (f" x{spec['repeat']}" if spec["repeat"] > 1 else "")
    return instance, wl, facts


def work_utilisation(run, instance) -> float | None:
    """Work-normalised utilisation within the arrival window ``[t0, t1]``: for each job,
    its GPUs x the time it ran inside the window x its speed there / its mean speed over
    the instance (``capacity_j / GPUs``, :meth:`SpeedModel.capacity`, the offered load's
    denominator), summed and divided by GPUs x window. A job on a type faster than its
    mean counts more than its busy GPU-seconds, on a slower one less, so the same work
    gives the same figure wherever it ran (the issue's ``utilisation_in_window`` counts
    busy GPU-seconds: the same work on faster GPUs shows less of it). It equals the
    busy-GPU utilisation when every type runs the job at one speed (a placement the network
    slows counts as less work). A job that ran in pieces (failures, preemption, migration:
    :attr:`~hyperplace.sim.jobs.JobRecord.pieces`) counts each piece at its own speed, work
    later lost to a stop included (those GPUs were busy with it, as the busy-GPU figure
    counts them)."""
    sm = SpeedModel(instance)
    t0 = min((r.job.submit_s for r in run.records), default=0.0)
    t1 = run.arrival_end_s
    if t1 <= t0:
        return None
    gpus = sum(sm.type_counts.values())
    done = 0.0
    for r in run.records:
        per_speed = r.job.gpus * gpus / max(sm.capacity(r.job.manifest), 1e-9)
        for start, end, speed in r.pieces:
            lo, hi = max(start, t0), min(t1 if end is None else end, t1)
            if hi > lo:
                done += (hi - lo) * speed * per_speed
    return done / (run.total_gpus * (t1 - t0))


def lower_bound(instance, jobs) -> dict:
    sm = SpeedModel(instance)
    jct = sorted(j.work_s / max(sm.best_speed(j.manifest), 1e-9) for j in jobs)

    def pct(q):
        k = (len(jct) - 1) * q
        a, b = math.floor(k), math.ceil(k)
        return jct[a] + (jct[b] - jct[a]) * (k - a)
    return {"jct_mean_s": sum(jct) / len(jct), "jct_median_s": pct(0.5), "jct_p99_s": pct(0.99)}


def slowdown_floor(instance, jobs) -> float:
    """The mean bounded slowdown no policy can go below on these jobs: each at its fastest
    speed, no wait, by the metric's own rule (:func:`hyperplace.sim.metrics.summarize`:
    ``max(1, JCT / max(work, 10 s))``). A job that some GPU type runs faster than the
    reference speed scores 1 at that speed with no wait, so the floor is about 1."""
    sm = SpeedModel(instance)
    return sum(max(1.0, j.work_s / max(sm.best_speed(j.manifest), 1e-9)
                   / max(j.work_s, SLOWDOWN_FLOOR_S)) for j in jobs) / len(jobs)


def with_slowdown_floor(cell: dict, cell_dir: Path) -> None:
    """Adds the slowdown floor to a finished cell's ``lower_bound`` (computed at assembly,
    not in the cached replays: it reads only the workload), after checking that the
    workload rebuilt from the cell's spec is the cell's (its JCT bound equal)."""
    lb = cell.get("lower_bound")
    if not cell.get("rows") or not lb or "bounded_slowdown_mean" in lb:
        return
    spec = {"trace": cell["trace"], "jobs": cell["jobs_limit"], "repeat": cell["repeat"],
            "workload": cell["workload"], "instance": cell["instance"],
            "load": cell["load"], "seed": cell["seed"]}
    instance, wl, _ = workload(spec)
    again = lower_bound(instance, wl.jobs)["jct_mean_s"]
    if not math.isclose(again, lb["jct_mean_s"], rel_tol=1e-9):
        print(f"{tag_of(cell)}: its workload rebuilt today has another JCT bound "
              f"({again:.1f} s, the cell {lb['jct_mean_s']:.1f} s): no slowdown floor added")
        return
    lb["bounded_slowdown_mean"] = slowdown_floor(instance, wl.jobs)
    save_cell(cell, cell_dir)


SIZES = [(1, 1), (2, 8), (9, 64), (65, 10 ** 9)]
SIZE_NAMES = ["1", "2-8", "9-64", "65+"]


def series(run) -> dict:
    """What the charts draw, kept in the cell's JSON: sorted JCTs (h), mean wait by job
    size (h), bubble GPUs over the arrival window."""
    waits = []
    for lo, hi in SIZES:
        w = [r.queued_s / 3600 for r in run.records
             if lo <= r.job.gpus <= hi and r.end_s is not None]
        waits.append(sum(w) / len(w) if w else None)
    return {"jct_h": sorted(round(r.jct_s / 3600, 5) for r in run.records
                            if r.jct_s is not None),
            "wait_by_size_h": waits,
            "bubbles": [(round(x, 4), round(y, 3)) for x, y in bubble_series(run)]}


def federation_policies() -> dict:
    """fedsim's federation-over-time policies (``hyperplace.fedsim.POLICIES``)."""
    try:
        from hyperplace.fedsim import POLICIES as FED
    except ImportError:
        return {}
    return dict(FED)


# ---- one replay, in a fresh process --------------------------------------------------------

def replay(spec: dict, cache_dir: str) -> dict:
    """One replay of ``spec`` (trace, jobs, repeat, workload, instance, load, seed, policy,
    order: ``as-is`` | ``fast-first`` | ``fast-last``, budget, until: ``end`` | ``arrivals``):
    its row, the workload's facts, the lower bound, and the code it ran."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    instance, wl, facts = workload(spec)
    inst = instance if spec["order"] == "as-is" else reorder_nodes(
        instance, spec["order"] == "fast-first")
    # the engine's round 60 s unless --engine-sim says round_s (--engine-sim may set any
    # SimConfig field, these included)
    cfg = SimConfig(**{"round_s": 60, "budget_s": spec["budget"], "seed": spec["seed"],
                       "until_s": wl.jobs[-1].submit_s if spec["until"] == "arrivals" else None,
                       **spec.get("sim", {})})
    fed = federation_policies() if spec["policy"] not in PEERS + ("engine",) else {}
    pol = fed[spec["policy"]](inst, cfg) if spec["policy"] in fed else spec["policy"]
    run = simulate(inst, copy.deepcopy(wl.jobs), pol, cfg)
    row = summarize(run)
    row["policy"] = spec["policy"] + ("" if spec["order"] == "as-is" else f"/{spec['order']}")
    row["util_work"] = work_utilisation(run, instance)
    row["ceiling_cuts"] = ceiling_cuts(run.notes)
    row["place_cuts"] = place_cuts(run.notes)
    if spec["until"] == "end":
        row["series"] = series(run)
    row["cpu_s"] = time.process_time() - cpu0
    row["wall_s"] = time.perf_counter() - wall0
    row["load1"] = load1()
    row["commit"] = head_commit()
    row["date"] = f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC"
    return {"row": row, "facts": facts, "code": code_hashes(loaded_files()),
            "lower_bound": lower_bound(instance, wl.jobs) if spec["until"] == "end" else None}


CEILING_NOTE = re.compile(r"wall ceiling [0-9.e+-]+ s, hit in (\d+) rounds")
PLACE_CUT_NOTE = re.compile(r"placement solves cut by the wall clock: (\d+)")


def ceiling_cuts(notes: list[str]) -> int | None:
    """The rounds whose schedule search the wall ceiling of the engine's work clock cut
    (:meth:`hyperplace.sim.planning.PlanningEngine.notes`): a row with any is not
    deterministic (those rounds fell back to the list schedule at this machine's load).
    None: no such count (a peer, or the engine on the wall clock)."""
    hits = [int(m.group(1)) for n in notes if (m := CEILING_NOTE.search(n))]
    return sum(hits) if hits else None


def place_cuts(notes: list[str]) -> int | None:
    """The engine's placement solves the wall clock cut before their deterministic limit
    (``PLACE_CEILING_S``, the same notes): a row with any is not deterministic either. None:
    not recorded (a peer, the wall clock, or a row from before 2026-12-06)."""
    hits = [int(m.group(1)) for n in notes if (m := PLACE_CUT_NOTE.search(n))]
    return sum(hits) if hits else None


def loaded_files() -> list[str]:
    """The package files this process imported, and every data file (relative to ROOT)."""
    pkg = ROOT / "hyperplace"
    out = set()
    for name, mod in list(sys.modules.items()):
        f = getattr(mod, "__file__", None)
        if name.startswith("hyperplace") and f and Path(f).resolve().is_relative_to(pkg):
            out.add(str(Path(f).resolve().relative_to(ROOT)))
    out |= {str(p.relative_to(ROOT)) for p in (pkg / "data").rglob("*") if p.is_file()}
    return sorted(out)


def code_hashes(files: list[str]) -> dict[str, str]:
    out = {f: hashlib.sha256((ROOT / f).read_bytes()).hexdigest() if (ROOT / f).exists()
           else "missing" for f in files}
    for p in SOLVER_PACKAGES:
        try:
            out[f"package:{p}"] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            out[f"package:{p}"] = "absent"
    out["python"] = platform.python_version()
    return out


HARNESS = hashlib.sha256("".join(inspect.getsource(f) for f in (
    workload, work_utilisation, lower_bound, series, ceiling_cuts, place_cuts, replay))
    .encode()
).hexdigest()[:16]


class Runner:
    """Replays through the cache and a pool of fresh processes (module docstring)."""

    def __init__(self, workers: int, cache_dir: Path, fresh: bool, stale_peers: bool = False,
                 engines_only: bool = False):
        self.cache_dir = cache_dir
        self.fresh = fresh
        self.stale_peers = stale_peers
        self.cache_only = workers == 0
        self.engines_only = engines_only  # peers (and probes) from the cache only
        self.pool = ProcessPoolExecutor(max(1, workers),
                                        mp_context=multiprocessing.get_context("spawn"),
                                        max_tasks_per_child=1)
        self.lock = threading.Lock()
        self.inflight: dict[str, object] = {}
        self.stats = {"cached": 0, "run": 0, "cpu_s": 0.0}

    def key(self, spec: dict) -> str:
        return hashlib.sha256(json.dumps({**spec, "harness": HARNESS}, sort_keys=True)
                              .encode()).hexdigest()[:24]

    def cached(self, key: str, spec: dict) -> dict | None:
        """The cached replay of ``key`` if every file it imported is unchanged; with
        ``stale_peers`` a peer's row also when some changed, marked with the files
        (``stale_files``: the report lists them)."""
        path = self.cache_dir / f"{key}.json"
        if self.fresh or not path.exists():
            return None
        entry = json.loads(path.read_text())
        code = entry["code"]
        files = [f for f in code if not f.startswith(("package:", "python"))]
        now = code_hashes(files)
        data = ROOT / "hyperplace" / "data"
        diff = sorted({f for f in code if now.get(f) != code[f]}
                      | ({str(p.relative_to(ROOT)) for p in data.rglob("*") if p.is_file()}
                         - set(files)))
        if not diff:
            return entry
        if self.stale_peers and spec["policy"] not in ENGINES:
            return {**entry, "row": {**entry["row"], "stale_files": diff}}
        return None

    def run(self, spec: dict) -> dict | None:
        key = self.key(spec)
        with self.lock:
            entry = self.cached(key, spec)
            if entry is not None:
                self.stats["cached"] += 1
                return entry
            if self.cache_only or (self.engines_only and spec["policy"] not in ENGINES):
                return None  # --from-cache / --engines-only: a replay not cached is missing
            fut = self.inflight.get(key)
            if fut is None:
                fut = self.pool.submit(replay, spec, str(self.cache_dir))
                self.inflight[key] = fut
        entry = fut.result()  # type: ignore[attr-defined]
        with self.lock:
            if key in self.inflight:
                del self.inflight[key]
                entry["spec"] = spec
                self.cache_dir.mkdir(parents=True, exist_ok=True)
                write_atomic(self.cache_dir / f"{key}.json", json.dumps(entry, default=str))
                self.stats["run"] += 1
                self.stats["cpu_s"] += entry["row"]["cpu_s"]
                r = entry["row"]
                print(f"  {spec['label']}@{spec['instance']} load {spec['load']:.3g} "
                      f"{r['policy']}{' (probe)' if spec['until'] == 'arrivals' else ''}: "
                      f"{r['finished']}/{r['jobs']} util {r['utilisation_in_window'] or 0:.3f}"
                      f" cpu {r['cpu_s']:.0f} s wall {r['wall_s']:.0f} s (load {r['load1']})",
                      flush=True)
        return entry

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)


def base_spec(entry, seed: int, budget: float) -> dict:
    label, trace, shape, inst, jobs, repeat = entry
    return {"label": label, "trace": trace, "workload": shape, "instance": inst,
            "jobs": jobs, "repeat": repeat, "seed": seed, "budget": budget}


@functools.lru_cache(maxsize=None)
def federated(instance: str) -> bool:
    """Whether the bundled instance ``instance`` is a federation (several member clusters)."""
    return len(load_instance(instance).clusters) > 1


def probe_peers(instance: str) -> tuple[tuple[str, ...], str]:
    """The probe peers and their node order: Kueue and Volcano with fast GPUs first, on a
    federation Karmada's two divisions as listed (fedsim's: the strongest federated peers)."""
    return (FED_PROBES, "as-is") if federated(instance) else (PROBES, "fast-first")


def probe_util(runner: Runner, base: dict, load: float) -> tuple[float, dict]:
    """The best probe peer's utilisation within the arrival window at ``load`` (replays
    cut at the last arrival; the probes of one load run side by side)."""
    names, order = probe_peers(base["instance"])
    specs = [{**base, "load": load, "policy": p, "order": order, "until": "arrivals"}
             for p in names]
    with ThreadPoolExecutor(len(specs)) as threads:
        got = list(threads.map(runner.run, specs))
    if any(g is None for g in got):
        raise LookupError(f"probe at load {load:g} not in the cache")
    return max(g["row"]["utilisation_in_window"] or 0.0 for g in got), got[0]["facts"]


def find_load(runner: Runner, base: dict, target: float, probes: int
              ) -> tuple[float | None, float, dict]:
    """The load at which the best probe peer reaches ``target`` (None: unreachable).

    Loads are probed from 1.0 in steps of x1.5 (up while the target is not reached, down
    while it is, so the bracket is one step wide), then ``probes`` bisection steps on the
    log of the load; the lowest probed load that reached the target is kept. High loads
    are probed only when needed (a queue of thousands of jobs makes each replay slow); a
    load the jobs cannot offer (the workload's ``load_note``) ends the search."""
    def probe(x: float) -> tuple[float, dict]:
        return probe_util(runner, base, round(x, 6))

    load, u, facts = bracket_load(probe, target, probes)
    return (None if load is None else round(load, 6)), u, facts


def cell_plan(base: dict, load: float, peers, federation: bool,
              engine_sim: dict | None = None) -> list[dict]:
    """Every replay of a cell: the engine (nodes as listed, with the ``SimConfig`` fields of
    ``engine_sim``: ``--engine-sim``) and each peer in both orders; on a federation
    fedsim's rows (:func:`federation_plan`)."""
    full = {**base, "load": load, "until": "end"}
    eng = {**full, **({"sim": engine_sim} if engine_sim else {})}
    if federation:
        return federation_plan(full, eng, peers)
    plan = [{**eng, "policy": "engine", "order": "as-is"}]
    for p in list(peers or PEERS):
        plan += [{**full, "policy": p, "order": o} for o in ORDERS]
    return plan


def federation_plan(full: dict, eng: dict, peers) -> list[dict]:
    """A federation cell's replays, fedsim's set (bench/bench_fedsim.py): the federated
    engine with and without splits first, then the faithful peers (Karmada's divisions,
    each member its own queue, as listed), the round federation engine it replaced
    (:data:`FED_BASELINE`), then the references on one global queue over every member:
    ``peers`` (default Slurm, Kueue and Volcano) with fast GPUs first."""
    plan = [{**eng, "policy": name, "order": "as-is"} for name in FED_ENGINES]
    plan += [{**full, "policy": name, "order": "as-is"} for name in FED_PEERS]
    plan.append({**eng, "policy": FED_BASELINE, "order": "as-is"})
    plan += [{**full, "policy": p, "order": "fast-first"} for p in (peers or FED_REFERENCES)]
    return plan


def run_cell(runner: Runner, entry, target: float, args, budget: float, probes: int,
             cell_dir: Path) -> dict:
    """One (workload, instance, target) cell: find the load, replay every policy, write
    the cell's JSON and charts; returns the cell."""
    started, cpu_before = time.time(), runner.stats["cpu_s"]
    base = base_spec(entry, args.seed, budget)
    label, trace, shape, inst, jobs, repeat = entry
    cell = {"label": label, "trace": trace, "workload": shape, "instance": inst,
            "jobs_limit": jobs, "repeat": repeat, "target": target, "budget_s": budget,
            "probes": probes, "probe_peers": list(probe_peers(inst)[0]), "seed": args.seed,
            "date": f"{dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC",
            "machine": f"{os.cpu_count()} CPUs ({cpu_model()}), Python "
                       f"{platform.python_version()}",
            "commit": head_commit(), "load1_start": load1(), "workers": args.workers,
            "engine_sim": args.engine_sim}
    old = earlier_cell(args.peers_from_cells, cell) if args.peers_from_cells else None
    if old is not None and old.get("load") is None:
        return old  # unreachable when it was searched; not searched again
    try:
        load, reached, facts = ((old["load"], old["probe_reached"], old["facts"]) if old
                                else find_load(runner, base, target, probes))
    except LookupError as exc:  # --from-cache: the search did not finish
        print(f"{label}@{inst} {target:g}: {exc}", flush=True)
        return cell
    cell.update(load=load, probe_reached=reached, facts=facts)
    if load is None and args.prefetch:
        return cell
    if load is not None:
        federation = federated(inst)
        plan = cell_plan(base, load, args.peers, federation, args.engine_sim)
        if args.prefetch:  # the peers' replays into the cache only; no cell
            plan = [p for p in plan if p["policy"] not in ENGINES]
        with ThreadPoolExecutor(len(plan)) as threads:
            got = list(threads.map(earlier_rows(runner, old), plan))
        if args.prefetch:
            return cell
        missing = [p["policy"] + ("" if p["order"] == "as-is" else f"/{p['order']}")
                   for p, g in zip(plan, got) if g is None]
        if got[0] is None:  # --from-cache without the engine row: no cell
            print(f"{label}@{inst} {target:g}: the engine row is not in the cache", flush=True)
            return cell
        got = [g for g in got if g is not None]
        cell.update(rows=[g["row"] for g in got], facts=got[0]["facts"],
                    lower_bound=got[0]["lower_bound"], missing_rows=missing)
        if federation:
            for row in cell["rows"]:
                if not row["policy"].startswith(("engine-federated", "karmada")):
                    row["reference"] = REFERENCE
        finish(cell)
    cell["wall_s"] = time.time() - started
    cell["cpu_s_run_here"] = runner.stats["cpu_s"] - cpu_before
    cell["load1_end"] = load1()
    save_cell(cell, cell_dir)
    print(summary_row(cell), flush=True)
    return cell


def earlier_cell(cell_dir: Path, cell: dict) -> dict | None:
    """``--peers-from-cells DIR``: the cell of the same workload, instance and target as
    ``cell`` in ``DIR``, if it has a load and rows (or was unreachable)."""
    path = Path(cell_dir) / f"{tag_of(cell)}.json"
    if not path.exists():
        return None
    old = json.loads(path.read_text())
    return old if old.get("load") is None or old.get("rows") else None


@functools.lru_cache(maxsize=None)
def orders_alike(instance: str) -> bool:
    """Whether both node orders of the bundled instance ``instance`` list every cluster's
    nodes alike (one GPU type: :func:`~hyperplace.sim.state.reorder_nodes` sorts stably by
    speed), so that a peer's two rows are one replay."""
    inst = load_instance(instance)
    first, last = reorder_nodes(inst, True), reorder_nodes(inst, False)
    return all([n.name for n in a.nodes] == [n.name for n in b.nodes]
               for a, b in zip(first.clusters, last.clusters))


def one_replay(runner: Runner, spec: dict) -> dict | None:
    """``runner.run(spec)``; a ``fast-last`` spec on an instance whose two orders are alike
    (:func:`orders_alike`) is the ``fast-first`` replay, its row relabelled and marked
    ``same_replay_as`` (the two specs share one cache entry and one process)."""
    if spec["order"] != "fast-last" or not orders_alike(spec["instance"]):
        return runner.run(spec)
    got = runner.run({**spec, "order": "fast-first"})
    if got is None:
        return None
    return {**got, "row": {**got["row"], "policy": f"{spec['policy']}/fast-last",
                           "same_replay_as": f"{spec['policy']}/fast-first"}}


def earlier_rows(runner: Runner, old: dict | None):
    """What a cell's replay is: through the runner (:func:`one_replay`), or with
    ``--peers-from-cells`` for a peer the earlier cell's row (kept with its own commit and
    marked ``from_cell``) when it has one; the engines' rows and the peer rows the earlier
    cell lacks (its ``missing_rows``) are replayed."""
    by_policy = {r["policy"]: r for r in (old or {}).get("rows", [])}

    def run(spec: dict) -> dict | None:
        name = spec["policy"] + ("" if spec["order"] == "as-is" else f"/{spec['order']}")
        row = by_policy.get(name)
        if old is None or spec["policy"] in ENGINES or row is None:
            return one_replay(runner, spec)
        return {"row": {**row, "from_cell": old["date"]}, "facts": old["facts"],
                "lower_bound": old.get("lower_bound")}
    return run


def finish(cell: dict) -> None:
    """Ratios of a cell from its rows (its charts: :func:`draw_charts`, main thread). On a
    federation against the best Karmada row, as fedsim's cells (bench/bench_fedsim.py
    ``write_cell``): ``engine-federated`` is the cell's engine, the rows on one global queue
    are references, and ``ratios_by_engine`` also gives the ratios against every other row
    but the engines', references included."""
    rows = cell["rows"]
    if not federated(cell["instance"]):
        cell["ratios"] = ratios(rows)
        cell["ratios_by_engine"] = {r["policy"]: ratios(rows, r["policy"]) for r in rows
                                    if r["policy"] in ENGINES}
        return
    karmada = faithful_peers(cell)
    others = [r for r in rows if r["policy"] not in FED_ENGINES]
    cell["ratios"] = ratios(rows, rows[0]["policy"], karmada)
    cell["ratios_basis"] = (f"{rows[0]['policy']} / best Karmada row (the faithful federated "
                            "peers); ratios_by_engine also against every row but the "
                            "federated engines' (" + OTHERS + ")")
    by: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["policy"] in ENGINES:
            name = r["policy"] + (" (one global queue, a reference)" if r.get("reference")
                                  else "")
            by[f"{name} (vs best Karmada row)"] = ratios(rows, r["policy"], karmada)
            if not r.get("reference"):
                by[f"{name} (vs best of every other row: {OTHERS})"] = ratios(
                    rows, r["policy"], [o for o in others if o is not r])
    cell["ratios_by_engine"] = by


OTHERS = ("Karmada's, the round federation engine's (engine-federated-rounds) and the "
          "one-global-queue references")


def faithful_peers(cell: dict) -> list[dict]:
    """The rows a cell's engine is compared with: every peer row; on a federation the
    Karmada rows only (the peers of a federated deployment; the rows on one global queue
    are references)."""
    rows = cell["rows"]
    if federated(cell["instance"]):
        return [r for r in rows if r["policy"].startswith("karmada")]
    return [r for r in rows if r["policy"] not in ENGINES]


def draw_charts(cell: dict, cell_dir: Path) -> None:
    """A finished cell's charts, drawn and saved with the cell. Call it from the main
    thread only: pyplot's figures are global state, and cells finish in worker threads."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("draw_charts: pyplot is not thread-safe; call it from the main "
                           "thread")
    if not cell.get("rows"):
        return
    cell["charts"] = [p.name for p in charts(cell_dir, tag_of(cell), cell["rows"])]
    save_cell(cell, cell_dir)


def tag_of(cell: dict) -> str:
    return cell_tag(cell["label"], cell["instance"], cell["target"])


def cell_tag(label: str, inst: str, target: float) -> str:
    return f"{label}-{inst}-{target:g}"


def save_cell(cell: dict, cell_dir: Path) -> None:
    cell_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(cell_dir / f"{tag_of(cell)}.json", json.dumps(cell, indent=1, default=str))


def ratios(rows, engine: str = "engine", peers: list[dict] | None = None
           ) -> dict[str, float]:
    """``engine``'s row over the best of ``peers`` per metric (default every non-engine
    row)."""
    eng = next(r for r in rows if r["policy"] == engine)
    if peers is None:
        peers = [r for r in rows if r["policy"] not in ENGINES]
    out = {}
    for key in (*LOWER, *HIGHER):
        best = best_peer(peers, key)
        if best is None or eng.get(key) is None:
            continue
        if best > 0:
            out[key] = eng[key] / best
    return out


def best_peer(peers: list[dict], key: str) -> float | None:
    """The best of the peers' figures for ``key`` (the highest for utilisation, else the
    lowest): what a ratio divides by; None when no peer has it."""
    vals = [p[key] for p in peers if p.get(key) is not None]
    if not vals:
        return None
    return max(vals) if key in HIGHER else min(vals)


# ---- report --------------------------------------------------------------------------------

def fmt(v, scale=1.0, digits=2) -> str:
    return "-" if v is None else f"{v / scale:,.{digits}f}"


def cuts(row) -> str:
    """A row's rounds cut by the work clock's wall ceiling (``ceiling_cuts``), and its
    placement solves the wall cut when any (``place_cuts``): ``0`` is a deterministic row;
    more is not (``load-dependent``); ``-`` not recorded."""
    n = row.get("ceiling_cuts")
    if n is None:
        return "-"
    of = f"{n} of {row.get('rounds', '?')}"
    if row.get("place_cuts"):
        of += f" (+{row['place_cuts']} placement solves)"
    return f"{of} (load-dependent)" if n or row.get("place_cuts") else of


def forecast_ratio(row) -> str:
    f = row.get("forecast") or {}
    v = f.get("long_wait_median_error_over_wait")
    return "-" if v is None else f"{v:.2f} ({f.get('long_wait_jobs', 0)})"


def table(rows, lb) -> list[str]:
    out = ["| policy | done | JCT mean | p50 | p99 | wait mean | slowdown | bubble GPU-h | "
           "util | util (work) | forecast err/wait | solve p50/p99 s | rounds cut by the "
           "ceiling | wall / CPU s (load) | commit |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r['policy']} | {r['finished']}/{r['jobs']} | {fmt(r['jct_mean_s'], 3600)} | "
            f"{fmt(r['jct_median_s'], 3600)} | {fmt(r['jct_p99_s'], 3600)} | "
            f"{fmt(r['wait_mean_s'], 3600)} | {fmt(r['bounded_slowdown_mean'])} | "
            f"{fmt(r['bubble_gpu_hours'], 1, 1)} | {fmt(r['utilisation_in_window'], 0.01, 1)}% "
            f"| {fmt(r.get('util_work'), 0.01, 1)}% | "
            f"{forecast_ratio(r)} | {fmt(r['solve_p50_s'], 1, 3)}/{fmt(r['solve_p99_s'], 1, 3)} "
            f"| {cuts(r)} | {r['wall_s']:.0f} / {fmt(r.get('cpu_s'), 1, 0)} ({r['load1']}) "
            f"| {r.get('commit', '?')}{'*' if r.get('stale_files') else ''}"
            f"{'+' if r.get('from_cell') else ''} |")
    out.append(f"| lower bound (fastest type, no wait) | | {fmt(lb['jct_mean_s'], 3600)} | "
               f"{fmt(lb['jct_median_s'], 3600)} | {fmt(lb['jct_p99_s'], 3600)} | 0.00 | "
               f"{fmt(lb.get('bounded_slowdown_mean', 1.0))} | | | | | | | | |")
    return out


def charts(out_dir: Path, tag: str, rows) -> list[Path]:
    """JCT CDF, mean wait by job size and bubbles over time (engine rows and every peer
    with fast GPUs first), drawn from the rows' series; none without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    keep = [r for r in rows if r.get("series") and (
        r["policy"] in ENGINES or r["policy"].endswith("/fast-first")
        or r["policy"] in FED_PEERS[:3])]
    written = []
    fig, ax = plt.subplots(figsize=(6, 4))
    for row in keep:
        jct = row["series"]["jct_h"]
        if jct:
            ax.plot(jct, [(i + 1) / len(jct) for i in range(len(jct))], label=row["policy"],
                    linewidth=1.4 if row["policy"] in ENGINES else 0.8)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title(tag, fontsize=8)
    ax.legend(fontsize=7)
    written.append(save_figure(fig, out_dir / f"{tag}-jct-cdf.png", dpi=100))
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.8 / max(len(keep), 1)
    for k, row in enumerate(keep):
        means = [m or 0.0 for m in row["series"]["wait_by_size_h"]]
        ax.bar([i + k * width for i in range(len(SIZES))], means, width, label=row["policy"])
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(SIZES))], SIZE_NAMES)
    ax.set_xlabel("job size (GPUs)")
    ax.set_ylabel("mean wait (h)")
    ax.set_title(tag, fontsize=8)
    ax.legend(fontsize=7)
    written.append(save_figure(fig, out_dir / f"{tag}-wait-by-size.png", dpi=100))
    fig, ax = plt.subplots(figsize=(6, 4))
    for row in keep:
        pts = row["series"]["bubbles"]
        if pts:
            ax.step([x for x, _ in pts], [y for _, y in pts], where="post",
                    label=row["policy"], linewidth=1.2 if row["policy"] in ENGINES else 0.8)
    ax.set_xlabel("time (h, arrival window)")
    ax.set_ylabel("bubble GPUs (free while a job that fits waits)")
    ax.set_title(tag, fontsize=8)
    ax.legend(fontsize=7)
    written.append(save_figure(fig, out_dir / f"{tag}-bubbles.png", dpi=100))
    plt.close("all")
    return written


RATIO_KEYS = ("jct_mean_s", "jct_p99_s", "wait_mean_s", "bounded_slowdown_mean",
              "bubble_gpu_hours", "utilisation_in_window", "util_work")
# the goals at 0.8 and above, engine / best peer (util: at least)
GOALS = {"jct_mean_s": 0.85, "jct_p99_s": 1.0, "wait_mean_s": 0.6,
         "bounded_slowdown_mean": 0.7, "bubble_gpu_hours": 0.7, "utilisation_in_window": 1.0}
GOAL_NAMES = {"jct_mean_s": "JCT <= 0.85x", "jct_p99_s": "p99 <= 1x",
              "wait_mean_s": "wait <= 0.6x", "bounded_slowdown_mean": "slowdown <= 0.7x",
              "bubble_gpu_hours": "bubbles <= 0.7x", "utilisation_in_window": "util >= 1x"}


def goals(cell: dict) -> tuple[list[str], list[str]]:
    """The issue's goals this cell's engine meets and misses (forecast goal included). A
    missed goal below the floor (the cell's lower bound over the best peer's figure: every
    job at its fastest speed, no wait) says so: no policy could meet it."""
    met, missed = [], []
    r = cell.get("ratios") or {}
    lb = cell.get("lower_bound") or {}
    peers = faithful_peers(cell) if cell.get("rows") else []
    for key, limit in GOALS.items():
        if key not in r:
            continue
        ok = r[key] >= limit if key == "utilisation_in_window" else r[key] <= limit
        text = f"{GOAL_NAMES[key]} ({r[key]:.2f})"
        best = best_peer(peers, key)
        if not ok and key not in HIGHER and lb.get(key) is not None and best:
            floor = lb[key] / best
            if floor > limit:
                text = (f"{GOAL_NAMES[key]} ({r[key]:.2f}; the goal is below the floor "
                        f"{floor:.2f}: out of reach of any policy)")
        (met if ok else missed).append(text)
    f = (cell["rows"][0].get("forecast") or {}).get("long_wait_median_error_over_wait")
    if f is not None:
        (met if f <= 0.2 else missed).append(f"forecast err/wait <= 0.2 ({f:.2f})")
    return met, missed


def summary_row(cell: dict) -> str:
    rep = f" x{cell['repeat']}" if cell.get("repeat", 1) > 1 else ""
    head = f"| {cell['label']}{rep} | {cell['instance']} | {cell['target']:g} | "
    facts = cell.get("facts") or {}
    if cell.get("load") is None:
        return (head + f"- | {facts.get('jobs', '-')} | unreachable (the probe peers reach "
                f"at most {cell['probe_reached']:.2f}) | | | | | | | | | | | |")
    eng = cell["rows"][0]  # the cell's engine: engine, on a federation engine-federated
    peers = faithful_peers(cell)
    best_util = max((r["utilisation_in_window"] or 0 for r in peers), default=None)
    best_work = max((r.get("util_work") or 0 for r in peers), default=None)
    lead = head + f"{cell['load']:.3g} | {facts['jobs']} | "
    tail = (f" | {fmt(best_util)} / {fmt(best_work)} | {forecast_ratio(eng)} | "
            f"{cuts(eng)} | {peer_cadence(cell)} |")
    if not peers:
        tail += " no peer row |"
    if cell.get("missing_rows"):
        tail += f" missing: {', '.join(cell['missing_rows'])} |"
    if eng["finished"] < eng["jobs"]:
        return lead + f"engine finished {eng['finished']}/{eng['jobs']} | | | | | | |" + tail
    r = cell["ratios"]
    return lead + " | ".join(f"{r[k]:.3f}" if k in r else "-" for k in RATIO_KEYS) + tail


def peer_cadence(cell: dict) -> str:
    """How often the cell's peers decided: ``upstream`` (each its own, every row says its
    ``cadence_s``), ``60 s`` (cells before 2026-12-03: every policy every round_s) or
    ``mixed``."""
    peers = [r for r in cell.get("rows", []) if not r["policy"].startswith("engine")]
    # a row at its own cadence: one the replay's 60 s round did not set (before 2026-12-03
    # rows had no cadence_s; a uniform replay gives every peer 60 and no fill)
    own = [r.get("cadence_s") not in (None, 60.0) or bool(r.get("fills_at_events"))
           for r in peers]
    if own and all(own):
        return "upstream"
    return "60 s" if not any(own) else "mixed"


def commits_of(cell: dict) -> set[str]:
    return {cell["commit"], *(r.get("commit", "?") for r in cell.get("rows", []))}


def assemble(cells: list[dict], grid, targets, out: Path, cell_dir: Path, command: str
             ) -> None:
    """``simulate.md`` from the cells present (missing cells are listed as not run)."""
    for c in cells:
        with_slowdown_floor(c, cell_dir)
    by_tag = {tag_of(c): c for c in cells}
    loads = sorted({c["load1_start"] for c in cells} | {c["load1_end"] for c in cells},
                   key=lambda x: float(x) if x.replace(".", "", 1).isdigit() else 0)
    dates = sorted(c["date"] for c in cells)
    commits = sorted(set().union(*(commits_of(c) for c in cells))) if cells else []
    off_main = [c for c in commits if not on_main(c)]
    cpu = sum(r.get("cpu_s") or 0 for c in cells for r in c.get("rows", []))
    lines = [
        "# Over-time bench: replay under contention, engine vs every peer", "",
        f"- cells run {dates[0] if dates else '-'} to {dates[-1] if dates else '-'}; machine: "
        f"{cells[0]['machine'] if cells else '-'}, shared with other engineers' jobs "
        f"(1-min load average {loads[0] if loads else '?'}-{loads[-1] if loads else '?'} at "
        "cell starts and ends; per replay in the wall column); CPU time of the full replays "
        f"shown: {cpu / 60:,.0f} min (probes not included)",
        f"- commits of the rows: {', '.join(commits) or '-'}"
        + (f" (NOT on main: {', '.join(off_main)})" if off_main else " (all on main)")
        + "; a row's commit is the one it was computed at; rows taken from the cache are "
        "re-used only while every file their replay imported is byte-identical "
        "(bench/bench_simulate.py docstring)",
        f"- command: `{command}`; each cell's JSON in `{os.path.relpath(cell_dir, ROOT)}/`",
        "- loads: the offered load at which the better of "
        f"{' and '.join(PROBES)} (fast-first) reaches each target utilisation within the "
        f"arrival window (bisection; on the federation the better of {' and '.join(FED_PROBES)}"
        ", and the engine there is engine-federated against the best Karmada row: the rows "
        "on one global queue are references); the engine's round 60 s with its fill at every "
        "event; peers at their upstream cadence where the last column says `upstream` (Kueue "
        "at every event, Volcano every 1 s, Slurm's backfill every 30 s and its main scheduler "
        "at every submission and end; `60 s`: every peer every 60 s, the cells before "
        "2026-12-03, review R32); predictions with the default lognormal "
        "error (sigma 0.5); times in hours; slowdown = mean bounded slowdown (10 s floor); "
        "bubble = GPU-hours free while a job that fits by count waits (arrival window); "
        "util = busy GPU-seconds / (GPUs x window), the issue's metric; util (work) = work "
        "done in the window at each job's mean speed over the instance / (GPUs x window) "
        "(the same work counts the same on any GPU type); forecast err/wait = median "
        "|planned - actual start| / wait for jobs that waited >= 10 min (their count); "
        "`x K` after a workload: the sample replayed K times back to back", "",
        "## Summary: engine / best peer run (ratios; below 1 is the engine ahead, for "
        "utilisation above 1)", "",
        "| workload | instance | target util | load | jobs | mean JCT | p99 JCT | mean wait | "
        "slowdown | bubbles | util | util (work) | best peer util / util (work) | "
        "engine forecast err/wait | engine rounds cut by the ceiling | peers decide |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    body: list[str] = []
    missing = []
    goal_lines = []
    for label, _trace, _shape, inst, _jobs, _rep in grid:
        for target in targets:
            cell = by_tag.get(cell_tag(label, inst, target))
            if cell is None:
                missing.append(f"{label} on {inst} at {target:g}")
                continue
            lines.append(summary_row(cell))
            body += cell_section(cell, cell_dir, out)
            if target >= 0.8:
                name = f"{label} on {inst} at {target:g}"
                if cell.get("load") is None:
                    goal_lines.append(f"- {name}: unreachable (probe peers at most "
                                      f"{cell['probe_reached']:.2f}); no goal measured")
                elif "ratios" in cell:
                    met, miss = goals(cell)
                    gone = cell.get("missing_rows")
                    eng = cell["rows"][0]
                    goal_lines.append(f"- {name}: met {', '.join(met) or 'none'}; "
                                      f"NOT met {', '.join(miss) or 'none'}" + (
                                          f" (against the peer rows present: "
                                          f"{', '.join(gone)} did not finish)" if gone else "")
                                      + (f"; the engine row is load-dependent: the wall "
                                         f"ceiling cut {eng['ceiling_cuts']} of "
                                         f"{eng.get('rounds', '?')} rounds"
                                         if eng.get("ceiling_cuts") else "")
                                      + (f"; {eng['place_cuts']} placement solves of the "
                                         "engine row were cut by the wall clock (load-"
                                         "dependent)" if eng.get("place_cuts") else ""))
    if missing:
        lines += ["", "Not run (no result in the cell directory): " + "; ".join(missing) + "."]
    if goal_lines:
        lines += ["", "## The issue's goals at 0.8 and 0.9 (engine / best peer run)", "",
                  *goal_lines]
    text = "\n".join([*lines, "", *body])
    write_atomic(out, text + "\n")
    print(f"wrote {out}")


def cell_section(cell: dict, cell_dir: Path, out: Path) -> list[str]:
    head = f"## {cell['label']} on {cell['instance']}, target utilisation {cell['target']:g}"
    facts = cell.get("facts") or {}
    limit = "all" if cell["jobs_limit"] is None else f"the first {cell['jobs_limit']}"
    rep = cell.get("repeat", 1)
    limit += f", repeated {rep} times back to back" if rep > 1 else ""
    if cell.get("load") is None:
        return [head, "", f"Not reachable with {limit} jobs: the probe peers reach at most "
                f"{cell['probe_reached']:.2f} within the arrival window "
                f"({facts.get('load_note') or 'at the highest load probed'}); "
                f"{cell['date']}, commit {cell['commit']}.", ""]
    out_lines = [f"{head}: load {cell['load']:.3g} (probe {cell['probe_reached']:.2f}), "
                 f"{facts['jobs']} jobs ({limit} of the trace) over "
                 f"{facts['arrival_window_s'] / 3600:.1f} h; {cell['date']}, "
                 f"commit {cell['commit']}, engine budget {cell['budget_s']:g} s"
                 + "".join(f", engine {k}={v}" for k, v in (cell.get("engine_sim") or {})
                           .items())
                 + (", cell wall "
                    f"{cell['wall_s']:.0f} s ({cell.get('workers', 1)} worker(s))"
                    if cell.get("cpu_s_run_here", 1) else
                    ", assembled from cached replays (each row's own wall and CPU time "
                    "below)"),
                 "", *table(cell["rows"], cell["lower_bound"]), ""]
    eng = cell["rows"][0]
    if eng["finished"] < eng["jobs"]:
        out_lines += [f"**The engine finished {eng['finished']} of {eng['jobs']} jobs** (the "
                      "replay ended with jobs it never started): no ratio is given.", ""]
    else:
        for name, r in (cell.get("ratios_by_engine") or {"engine": cell["ratios"]}).items():
            out_lines += [f"{name}{'' if ' (vs ' in name else ' / best peer'}: " + ", ".join(
                f"{k} {v:.3f}" for k, v in r.items()), ""]
    breaks = rule_break_line(cell["rows"])
    if breaks:
        out_lines += [breaks[0].upper() + breaks[1:] + ".", ""]
    if cell.get("missing_rows"):
        out_lines += ["Rows not finished when the cell was assembled (`--from-cache`; not "
                      "compared): " + ", ".join(cell["missing_rows"]) + ".", ""]
    out_lines += stale_note(cell)
    alike = [f"{r['policy']} is {r['same_replay_as']}'s" for r in cell["rows"]
             if r.get("same_replay_as")]
    if alike:
        out_lines += ["One replay, two rows (one GPU type: both node orders list the nodes "
                      "alike): " + "; ".join(alike) + ".", ""]
    earlier = sorted({(r["from_cell"], r.get("commit", "?")) for r in cell["rows"]
                      if r.get("from_cell")})
    if earlier:
        out_lines += ["\\+ taken from this cell as it was computed earlier "
                      "(`--peers-from-cells`; load and probe as then, only the engine rows "
                      "and the rows the earlier cell lacked replayed): " + "; ".join(f"computed {d}, commit {c}" for d, c in earlier)
                      + ". The files these rows imported may differ at the cell's commit "
                      "(not recorded in a cell); a file list above for such a row (*) is the "
                      "earlier cell's, against that cell's commit.", ""]
    rel = os.path.relpath(cell_dir, out.parent)
    out_lines += [f"![{Path(c).stem}]({rel}/{c})" for c in cell.get("charts", [])]
    return [*out_lines, ""]


def stale_note(cell: dict) -> list[str]:
    """The footnote of the rows marked ``*`` (``--stale-peers``): which rows, at which
    commit, and the files they imported that differ at the cell's commit, each list once
    for the rows that share it (a row per group, not the whole list per row)."""
    groups: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for r in cell["rows"]:
        if r.get("stale_files"):
            key = (r.get("commit", "?"), tuple(r["stale_files"]))
            groups.setdefault(key, []).append(r["policy"])
    if not groups:
        return []
    out = [f"\\* computed at an earlier commit (`--stale-peers`); the files these rows "
           f"imported that differ at the cell's commit {cell['commit']}:", ""]
    for (commit, files), policies in groups.items():
        out.append(f"- {len(policies)} row(s) at {commit} ({', '.join(policies)}): "
                   f"{len(files)} file(s): {', '.join(files)}")
    return [*out, ""]


def load_cells(cell_dir: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(cell_dir.glob("*.json"))]


def engine_sim_arg(text: str | None) -> dict:
    """``--engine-sim KEY=VALUE,...``: SimConfig fields (values JSON, else strings)."""
    out: dict = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in SimConfig.__dataclass_fields__:
            _bad_input(f"--engine-sim: {part!r} is not KEY=VALUE with KEY a SimConfig field")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    # a value the engine refuses is refused here, before any replay (not in a worker later)
    from hyperplace.sim.planning import PlanningEngine
    from hyperplace.sim.simulator import planning_settings

    try:
        PlanningEngine(**planning_settings(SimConfig(**out)))
    except (TypeError, ValueError) as exc:
        _bad_input(f"--engine-sim: {exc}")
    return out


def _bad_input(message: str) -> None:
    """One line on stderr and exit 2 (the CLI's rule for bad input)."""
    print(message, file=sys.stderr)
    raise SystemExit(2)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--targets", default=None, help="utilisations to reach (default "
                    "0.7,0.8,0.9; --quick: 0.8)")
    ap.add_argument("--budget", type=float, default=None, help="engine budget per round "
                    "(default 1 s; --quick: 0.2 s)")
    ap.add_argument("--probes", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=None, help="comma-separated label@instance to run")
    ap.add_argument("--peers", default=None, help="comma-separated peers (default all)")
    ap.add_argument("--workers", type=int, default=1, help="replays at once, each in a "
                    "fresh process (default 1)")
    ap.add_argument("--from-cache", action="store_true", help="run nothing: cells from the "
                    "cached replays only (rows not cached are listed as missing)")
    ap.add_argument("--cache", type=Path, default=None, help="the replay cache (default "
                    "bench/results/simulate-cache/)")
    ap.add_argument("--fresh", action="store_true", help="ignore cached rows")
    ap.add_argument("--stale-peers", action="store_true", help="use a cached peer row even "
                    "when files it imported changed since (the report lists the files for "
                    "each such row); engine rows are always re-run when their code changed")
    ap.add_argument("--federation", action="store_true", help="also run the federation "
                    "cells (fedsim's: bench/bench_fedsim.py)")
    ap.add_argument("--engines-only", action="store_true", help="run only the engine rows; "
                    "probes and peer rows come from the cache (those not there are listed "
                    "as missing): the peers can be prefetched by another run meanwhile")
    ap.add_argument("--prefetch", action="store_true", help="probes and peer replays only, "
                    "into the cache (no cell is written): the engine rows come later")
    ap.add_argument("--engine-sim", default=None, help="SimConfig fields for the engine "
                    "rows only, as KEY=VALUE,... (values as JSON, e.g. a deterministic "
                    "budget); they are part of the engine rows' cache key and the cell says "
                    "them")
    ap.add_argument("--peers-from-cells", type=Path, default=None, help="take each cell's load "
                    "and peer rows from the cell of the same tag in this directory (rows keep "
                    "their commit, marked +) and replay only the engine rows and the peer "
                    "rows that cell lacks")
    ap.add_argument("--assemble", action="store_true", help="only rebuild the report from "
                    "the cells present")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    args.peers = args.peers.split(",") if args.peers else None
    args.engine_sim = engine_sim_arg(args.engine_sim)
    quick = args.quick
    targets = [float(x) for x in (args.targets or ("0.8" if quick else "0.7,0.8,0.9"))
               .split(",")]
    budget = args.budget if args.budget is not None else (0.2 if quick else 1.0)
    probes = args.probes if args.probes is not None else (3 if quick else 2)
    out = args.out or ROOT / "bench" / "results" / ("simulate-quick.md" if quick
                                                     else "simulate.md")
    cell_dir = out.parent / out.stem
    cache_dir = args.cache or ROOT / "bench" / "results" / "simulate-cache"
    grid = QUICK if quick else FULL
    command = "bench/bench_simulate.py " + " ".join(argv if argv is not None else sys.argv[1:])
    if not args.assemble:
        todo = [e for e in grid if (not args.only or f"{e[0]}@{e[3]}" in args.only.split(","))
                and (args.federation or len(load_instance(e[3]).clusters) == 1)]
        runner = Runner(0 if args.from_cache else args.workers, cache_dir, args.fresh,
                        args.stale_peers, args.engines_only)
        t0 = time.time()
        try:
            def do(entry):
                return [run_cell(runner, entry, target, args, budget, probes, cell_dir)
                        for target in targets]
            with ThreadPoolExecutor(max(1, len(todo))) as threads:
                for f in as_completed([threads.submit(do, e) for e in todo]):
                    for cell in f.result():  # charts here: the main thread
                        draw_charts(cell, cell_dir)
        finally:
            runner.close()
        print(f"grid: {runner.stats['run']} replays run ({runner.stats['cpu_s'] / 60:.1f} "
              f"CPU-min in workers), {runner.stats['cached']} from the cache; wall "
              f"{(time.time() - t0) / 60:.1f} min; load {load1()}", flush=True)
    all_targets = sorted({*targets, *(c["target"] for c in load_cells(cell_dir))})
    assemble(load_cells(cell_dir), FULL if not quick else grid, all_targets, out, cell_dir,
             command)


if __name__ == "__main__":
    main()
