"""What-if sweeps: a grid of changes to a base scenario, each result kept in SQLite.

A sweep file (YAML)::

    base:                       # one simulation: the same keys as `hyperplace simulate`
      instance: mixed-a100-h100 # a bundled name or an Instance file (relative to the file)
      trace: philly             # philly | alibaba-2023 | a CSV path (relative to the file)
      window: [0, 7200]         # seconds of the trace (optional)
      workload: trace           # trace | fm
      load: 1.0                 # or "trace"
      capacityChange: keep-rate # keep-rate (default) | keep-load: see below
      predictionError: 0.5      # sigma of the lognormal run-time prediction error
      policy: engine
      round: 60
      budget: 1.0
      failures: 0
      seed: 0
      federationSplit: true     # federation policies: jobs may split across member clusters
      peerCadence: upstream     # upstream (each peer as it ships) | uniform (every `round` s)
      jobs: 2000                # at most this many jobs of the window
      repeat: 1                 # the kept jobs replayed this many times back to back (1-100)
      horizon: 24               # engine options, as simulate's --horizon, --schedule-window,
      scheduleWindow: 200       #   --schedule-objective, --engine-clock, --preemption,
      scheduleObjective: slowdown  # --defrag, --half-life, --fair-share-levels, --make-room
      engineClock: work
      preemption: never
      defrag: false
      # makeRoom: false        # short jobs stop running ones (unset: on for engine, off for
                                #   engine-federated; true or false sets both; not with
                                #   queues, preemption or defrag: the round engine)
      halfLife: 0
      fairShareLevels: 4
    grid:                       # every combination is one scenario; the base always runs
      addNodes: [{type: H100-80, count: 4}, {type: A100-80, count: -4}]  # add / remove nodes
      failSwitch: [leaf001]     # a switch down for the whole run
      oversubscription: [2, 4]  # leaf downlink : uplink capacity (fat-tree fabrics)
      budget: [0.2, 5]
      policy: [fifo, slurm]
      load: [0.8, 1.2]
      failures: [1.0]
      federationSplit: [true, false]  # on a federation (engine-federated, karmada-*)

**Capacity changes and the load.** ``load`` is offered work over the *base* instance's
capacity. A scenario that changes capacity (``addNodes``) keeps the base's arrival rate by
default (``capacityChange: keep-rate``: the same jobs arrive at the same times on the
bigger or smaller instance, the question "what if we add nodes" asks, so adding nodes
lowers the load and waits); ``keep-load`` rescales the arrivals to the changed instance's
capacity instead (the same load on more GPUs: more jobs per hour). ``oversubscription`` and
``failSwitch`` change no capacity the load counts; the arrivals stay the base's.

Each scenario is one simulation under one policy. Its result (the metrics of
:func:`hyperplace.sim.metrics.summarize`, or its error) is written to ``sweep.sqlite`` in the
output directory the moment it finishes, in its own transaction: a sweep killed with
``kill -9`` and started again skips every scenario already recorded and loses none. A
scenario that fails is recorded with its error and the sweep goes on (a restart does not
retry it; delete its row to do so). ``report.md`` / ``report.csv`` compare every scenario
with the base.

Backends: ``local`` (a process pool of ``workers``) and ``ray`` (``ray.init`` on an existing
cluster by address, or a local one); both run :func:`run_scenario` on the same inputs.
Limits: at most :data:`MAX_SCENARIOS` scenarios per sweep.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import multiprocessing
import sqlite3
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from hyperplace.errors import InputError
from hyperplace.models import Instance, Node
from hyperplace.io import write_atomic
from hyperplace.sim.options import KEYS as ENGINE_KEYS
from hyperplace.sim.options import engine_config

MAX_SCENARIOS = 2000
MIN_BUDGET_S = 0.01  # an engine round's least budget, as `simulate --budget`
#: the base's keys: simulate's options (the engine's, :data:`hyperplace.sim.options.KEYS`,
#: by their camelCase names)
BASE_KEYS = {"instance", "trace", "window", "workload", "load", "policy", "round", "budget",
             "failures", "seed", "jobs", "repeat", "network", "solver", "capacityChange",
             "predictionError", "federationSplit", "peerCadence"} | ENGINE_KEYS
GRID_KEYS = {"addNodes", "failSwitch", "oversubscription", "budget", "policy", "load",
             "failures", "seed", "round", "federationSplit", "peerCadence"}
TIMING_KEYS = {"solve_p50_s", "solve_p99_s", "solve_max_s", "wall_s", "fallback_rounds",
               "seconds"}


@dataclass
class Sweep:
    source: str
    base: dict[str, Any]
    scenarios: list[dict[str, Any]]   # [{"id", "changes"}], the base first
    # policies built above sim by name (the federation's, hyperplace.fedsim.POLICIES)
    extra: dict[str, Callable] = field(default_factory=dict, compare=False)

    @property
    def digest(self) -> str:
        # the peers' cadence is part of what a stored result means: a sweep written before
        # it existed (every peer every `round` s) does not resume as an upstream one
        base = {"peerCadence": "upstream", **self.base}
        return hashlib.sha256(json.dumps([base, self.scenarios], sort_keys=True)
                              .encode()).hexdigest()[:16]


def scenario_id(changes: dict[str, Any]) -> str:
    if not changes:
        return "base"
    parts = []
    for k, v in sorted(changes.items()):
        if k == "addNodes":
            v = f"{v['type']}{'+' if v['count'] >= 0 else ''}{v['count']}"
        parts.append(f"{k}={v}")
    return ",".join(parts)


def load_sweep(path: str | Path, extra: Mapping[str, Callable] | None = None) -> Sweep:
    """Read and validate a sweep file (unknown keys, instances, GPU types, switches, ...).

    ``extra``: policies outside :mod:`hyperplace.sim.policies` by name (the federation's,
    ``hyperplace.fedsim.POLICIES``, which ``hyperplace whatif`` passes)."""
    from hyperplace.io import load_documents
    from hyperplace.sim.policies import canonical_policy as sim_policy

    outside = dict(extra or {})

    def canonical_policy(name: str) -> str:
        return name if name in outside else sim_policy(name)

    src = str(path)
    docs = load_documents(path)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise InputError("a sweep file is one mapping with 'base' and 'grid'", source=src)
    doc = docs[0]
    unknown = set(doc) - {"base", "grid"}
    if unknown:
        raise InputError("unknown field", source=src, path=sorted(unknown)[0])
    base = dict(doc.get("base") or {})
    for k in base:
        if k not in BASE_KEYS:
            raise InputError(f"unknown field (known: {', '.join(sorted(BASE_KEYS))})",
                             source=src, path=f"base.{k}")
    base.setdefault("instance", "mixed-a100-h100")
    base.setdefault("trace", "philly")
    base.setdefault("policy", "engine")
    trace = str(base["trace"])
    if trace not in ("philly", "alibaba-2023") and not Path(trace).is_absolute():
        base["trace"] = str(Path(src).resolve().parent / trace)
    inst = Path(str(base["instance"]))  # a file (not a bundled name): relative to the sweep
    if not inst.is_absolute() and (inst.suffix or len(inst.parts) > 1):
        base["instance"] = str(Path(src).resolve().parent / inst)
    instance = _instance(base["instance"], src, "base.instance")
    grid = doc.get("grid") or {}
    if not isinstance(grid, dict):
        raise InputError("must be a mapping of change -> list of values", source=src, path="grid")
    axes: list[tuple[str, list[Any]]] = []
    for key, values in grid.items():
        if key not in GRID_KEYS:
            raise InputError(f"unknown change (known: {', '.join(sorted(GRID_KEYS))})",
                             source=src, path=f"grid.{key}")
        if not isinstance(values, list) or not values:
            raise InputError("must be a non-empty list", source=src, path=f"grid.{key}")
        for i, v in enumerate(values):
            _check_value(key, v, instance, src, f"grid.{key}[{i}]", canonical_policy)
        axes.append((key, values))
    _check_value("policy", base["policy"], instance, src, "base.policy", canonical_policy)
    if str(base.get("capacityChange", "keep-rate")) not in ("keep-rate", "keep-load"):
        raise InputError("must be keep-rate or keep-load", source=src, path="base.capacityChange")
    pe = base.get("predictionError", 0.5)
    if not (_is_num(pe) and 0 <= float(pe) < math.inf):
        raise InputError("must be a finite number >= 0", source=src, path="base.predictionError")
    for key in ("budget", "load", "failures", "round", "peerCadence"):
        if key in base:
            _check_value(key, base[key], instance, src, f"base.{key}", canonical_policy)
    engine_config(base, by="key", source=src)
    _check_trace(base, src, instance)
    scenarios = [{"id": "base", "changes": {}}]
    names = [k for k, _ in axes]
    count = math.prod(len(v) for _, v in axes) if axes else 0
    if count + 1 > MAX_SCENARIOS:
        raise InputError(f"{count} scenarios; the limit is {MAX_SCENARIOS}", source=src,
                         path="grid")
    for combo in itertools.product(*(v for _, v in axes)) if axes else []:
        changes = dict(zip(names, combo))
        scenarios.append({"id": scenario_id(changes), "changes": changes})
    if "federationSplit" in base:
        _check_value("federationSplit", base["federationSplit"], instance, src,
                     "base.federationSplit", canonical_policy)
    _check_federation(base, axes, instance, outside, src)
    return Sweep(source=src, base=base, scenarios=scenarios, extra=outside)


def _check_trace(base: dict[str, Any], src: str, instance: Instance) -> None:
    """``window`` ([START, END] seconds, either null), ``jobs`` (>= 1) and the trace they
    select, read once up front: a window or trace with no job is one line naming the field,
    not a sweep whose every scenario fails."""
    from hyperplace.sim.traces import load_trace

    window = base.get("window")
    if window is not None:
        if not (isinstance(window, list) and len(window) == 2
                and all(v is None or (_is_num(v) and 0 <= float(v) < math.inf)
                        for v in window)):
            raise InputError("must be [START, END]: seconds from the trace's first job, "
                             "finite and >= 0 (either may be null)", source=src,
                             path="base.window")
        if None not in window and float(window[1]) <= float(window[0]):
            raise InputError(f"END must be after START, got {window}", source=src,
                             path="base.window")
    jobs = base.get("jobs")
    if jobs is not None and not (isinstance(jobs, int) and not isinstance(jobs, bool)
                                 and jobs >= 1):
        raise InputError(f"must be a whole number >= 1, got {jobs!r}", source=src,
                         path="base.jobs")
    repeat = base.get("repeat", 1)
    lo, hi = window if window is not None else (None, None)
    try:
        trace = load_trace(str(base["trace"]), start_s=lo, end_s=hi, limit=jobs, repeat=repeat)
    except InputError as exc:
        if exc.path == "--repeat":  # the copies asked (load_trace's limits)
            raise InputError(exc.message, source=src, path="base.repeat") from None
        raise InputError(exc.one_line(), source=src, path="base.trace") from None
    if str(base.get("workload", "trace")) == "trace":  # fm draws sizes that fit
        from hyperplace.sim.workload import trace_jobs

        wl = trace_jobs(trace, instance, drop_unfit=True)
        if not wl.jobs:
            raise InputError(f"no job of the trace window fits base.instance "
                             f"{instance.name} ({wl.unfit_example})", source=src,
                             path="base.trace")


def _check_federation(base: dict[str, Any], axes: list[tuple[str, list[Any]]],
                      instance: Instance, extra: Mapping[str, Callable], src: str) -> None:
    """A federation policy on an instance of one member cluster: refused up front."""
    names = [str(base["policy"])] + [str(v) for k, vals in axes if k == "policy" for v in vals]
    if any(n in extra for n in names) and len(instance.clusters) < 2:
        path = "base.policy" if str(base["policy"]) in extra else "grid.policy"
        raise InputError(f"a federation policy needs at least 2 member clusters; "
                         f"base.instance {base['instance']} has {len(instance.clusters)} "
                         "(spec.clusters)",
                         source=src, path=path)


def _instance(name: str, src: str, path: str) -> Instance:
    from hyperplace.instances import load_instance

    try:
        return load_instance(str(name))
    except InputError as exc:
        raise InputError(exc.message if exc.source in (None, name) else exc.one_line(),
                         source=src, path=path) from None


def _check_value(key: str, v: Any, instance: Instance, src: str, path: str,
                 canonical_policy: Callable[[str], str]) -> None:
    def bad(msg: str) -> InputError:
        return InputError(msg, source=src, path=path)

    if key == "policy":
        try:
            canonical_policy(str(v))
        except ValueError as exc:
            raise bad(str(exc)) from None
    elif key == "addNodes":
        if not isinstance(v, dict) or set(v) != {"type", "count"}:
            raise bad("expected {type: GPU type, count: +N to add or -N to remove}")
        if str(v["type"]) not in instance.catalog:
            raise bad(f"unknown GPU type {v['type']!r} (known: "
                      f"{', '.join(instance.catalog.names())})")
        if not isinstance(v["count"], int) or isinstance(v["count"], bool) or v["count"] == 0:
            raise bad("count must be a non-zero integer")
        # what apply_changes does to the first cluster, checked before any scenario runs
        # (a removal of more nodes than there are failed each scenario at its start)
        first = instance.clusters[0]
        if first.fabric.generator is None:
            raise bad(f"nodes are added to or removed from the first cluster, {first.name}, "
                      "whose fabric must be a generator (it lists its switches)")
        kind = instance.catalog.get(str(v["type"])).name
        have = sum(1 for n in first.nodes if instance.catalog.get(n.gpu_type).name == kind)
        if v["count"] < 0 and have < -v["count"]:
            raise bad(f"cannot remove {-v['count']} {kind} nodes: {first.name} has {have}")
    elif key == "failSwitch":
        switches = {s for c in instance.clusters for s in c.network.switch_names}
        if str(v) not in switches:
            raise bad(f"unknown switch {v!r} (e.g. {', '.join(sorted(switches)[:4])})")
    elif key == "load":
        if v != "trace" and not (_is_num(v) and 0 < float(v) < math.inf):
            raise bad("must be a positive number or 'trace'")
    elif key == "budget":  # as simulate --budget
        if not (_is_num(v) and MIN_BUDGET_S <= float(v) < math.inf):
            raise bad(f"must be a finite number >= {MIN_BUDGET_S:g} (seconds)")
    elif key == "oversubscription":
        if not (_is_num(v) and 0 < float(v) < math.inf):
            raise bad("must be a positive number")
    elif key in ("failures", "round"):
        if not (_is_num(v) and 0 <= float(v) < math.inf):
            raise bad("must be a number >= 0")
    elif key == "seed":
        if not isinstance(v, int) or isinstance(v, bool):
            raise bad("must be an integer")
    elif key == "federationSplit":
        if not isinstance(v, bool):
            raise bad("must be true or false")
    elif key == "peerCadence":
        if v not in ("upstream", "uniform"):
            raise bad(f"must be upstream or uniform, got {v!r}")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# ---- one scenario -------------------------------------------------------------------------

def apply_changes(instance: Instance, changes: dict[str, Any]) -> Instance:
    """The instance with nodes added or removed and the leaf oversubscription changed."""
    clusters = list(instance.clusters)
    add = changes.get("addNodes")
    if add:
        c = clusters[0]
        if c.fabric.generator is None:
            raise ValueError("addNodes needs a cluster whose fabric is a generator")
        gpu_type, count = add["type"], add["count"]
        nodes = list(c.nodes)
        like = [n for n in nodes if instance.catalog.get(n.gpu_type).name
                == instance.catalog.get(gpu_type).name]
        if count > 0:
            proto = like[0] if like else Node(name="x", gpu_type=gpu_type, gpu_count=8)
            names = {n.name for n in nodes}
            for i in range(count):
                k = i
                while f"whatif-{gpu_type.lower()}-{k:03d}" in names:
                    k += 1
                name = f"whatif-{gpu_type.lower()}-{k:03d}"
                names.add(name)
                nodes.append(proto.model_copy(update={"name": name, "allocated": {},
                                                      "faulty": []}))
        else:
            if len(like) < -count:
                raise ValueError(f"cannot remove {-count} {gpu_type} nodes: only {len(like)}")
            drop = {n.name for n in like[count:]}
            nodes = [n for n in nodes if n.name not in drop]
        clusters[0] = Instance_cluster(c, nodes)
    over = changes.get("oversubscription")
    if over:
        out = []
        for c in clusters:
            g = c.fabric.generator
            if g is None or g.type not in ("fat-tree-2", "fat-tree-3"):
                raise ValueError("oversubscription applies to fat-tree fabric generators only")
            spines = g.spines if g.type == "fat-tree-2" else g.spines_per_pod
            up = g.nodes_per_leaf * g.node_gbps / (spines * float(over))
            fabric = c.fabric.model_copy(update={"generator": g.model_copy(
                update={"uplink_gbps": up})})
            out.append(Instance_cluster(c, list(c.nodes), fabric))
        clusters = out
    if clusters == list(instance.clusters):
        return instance
    return Instance.model_validate(instance.model_copy(update={"spec": instance.spec.model_copy(
        update={"clusters": clusters})}).model_dump(by_alias=True))


def Instance_cluster(c, nodes, fabric=None):  # noqa: N802 - a small constructor helper
    data = c.model_dump(by_alias=True)
    data["nodes"] = [n.model_dump(by_alias=True) for n in nodes]
    if fabric is not None:
        data["fabric"] = fabric.model_dump(by_alias=True)
    return type(c).model_validate(data)


def run_scenario(base: dict[str, Any], changes: dict[str, Any],
                 extra: Mapping[str, Callable] | None = None) -> dict[str, Any]:
    """One scenario's metrics (one simulation under one policy); raises on failure.
    ``extra``: policies built above sim, by name (:func:`load_sweep`)."""
    from hyperplace.instances import load_instance
    from hyperplace.sim.run import SimRequest, run_simulation
    from hyperplace.sim.simulator import SimConfig

    t0 = time.perf_counter()
    p = dict(base, **{k: v for k, v in changes.items() if k not in ("addNodes", "failSwitch",
                                                                     "oversubscription")})
    base_instance = load_instance(str(base["instance"]))
    instance = apply_changes(base_instance, changes)
    window = p.get("window") or [None, None]
    keep_rate = str(p.get("capacityChange", "keep-rate")) == "keep-rate"
    req = SimRequest(trace=str(p.get("trace", "philly")), start_s=window[0], end_s=window[1],
                     limit=p.get("jobs"), repeat=int(p.get("repeat", 1)),
                     workload=p.get("workload", "trace"),
                     load=p.get("load", 1.0), policies=[str(p.get("policy", "engine"))],
                     prediction_error=float(p.get("predictionError", 0.5)),
                     drop_unfit=True,  # a scenario's capacity change may leave a job no room
                     load_reference=base_instance if keep_rate else None)
    config = SimConfig(round_s=float(p.get("round", 60)), budget_s=float(p.get("budget", 1.0)),
                       cadence=str(p.get("peerCadence", "upstream")),
                       failures=float(p.get("failures", 0.0)), seed=int(p.get("seed", 0)),
                       prediction_sigma=float(p.get("predictionError", 0.5)),
                       network=bool(p.get("network", True)), solver=str(p.get("solver", "auto")),
                       fail_switches=(str(changes["failSwitch"]),) if "failSwitch" in changes
                       else (), federation_split=bool(p.get("federationSplit", True)),
                       **engine_config(p, by="key"))
    summary, _ = run_simulation(instance, req, config, extra=extra)
    row = dict(summary["policies"][0])
    row["workload"] = summary["workload"]
    row["seconds"] = time.perf_counter() - t0
    return row


# ---- the store ----------------------------------------------------------------------------

class Store:
    """``sweep.sqlite``: one row per finished scenario, committed as it finishes."""

    def __init__(self, path: Path):
        self.path = path
        self.db = sqlite3.connect(path)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE IF NOT EXISTS scenarios (id TEXT PRIMARY KEY, "
                        "changes TEXT NOT NULL, status TEXT NOT NULL, result TEXT, error TEXT, "
                        "seconds REAL, finished_at REAL NOT NULL)")
        self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
        self.db.commit()

    def check_sweep(self, sweep: Sweep) -> None:
        row = self.db.execute("SELECT value FROM meta WHERE key='base'").fetchone()
        base = json.dumps(sweep.base, sort_keys=True)
        if row is None:
            with self.db:
                self.db.execute("INSERT INTO meta VALUES ('base', ?)", (base,))
        elif row[0] != base:
            raise InputError(f"{self.path} holds a sweep with a different base; use another "
                             "--out directory or delete it", source=sweep.source, path="base")

    def done(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT id FROM scenarios")}

    def record(self, sid: str, changes: dict[str, Any], result: dict[str, Any] | None,
               error: str | None, seconds: float) -> None:
        from hyperplace.sim.metrics import finite  # strict JSON: no Infinity, no NaN

        with self.db:
            self.db.execute("INSERT OR REPLACE INTO scenarios VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (sid, json.dumps(changes, sort_keys=True),
                             "done" if error is None else "failed",
                             json.dumps(finite(result), default=str, allow_nan=False)
                             if result is not None else None,
                             error, seconds, time.time()))

    def rows(self) -> list[dict[str, Any]]:
        out = []
        for sid, changes, status, result, error, seconds, finished in self.db.execute(
                "SELECT * FROM scenarios ORDER BY rowid"):
            out.append({"id": sid, "changes": json.loads(changes), "status": status,
                        "result": json.loads(result) if result else None, "error": error,
                        "seconds": seconds, "finished_at": finished})
        return out

    def close(self) -> None:
        self.db.close()


# ---- running a sweep ----------------------------------------------------------------------

def _run_safe(base: dict[str, Any], changes: dict[str, Any],
              extra: Mapping[str, Callable] | None = None) -> tuple[dict | None, str | None]:
    try:
        return run_scenario(base, changes, extra), None
    except Exception as exc:  # a failed scenario is recorded; the sweep goes on
        return None, f"{type(exc).__name__}: {exc}"


def run_sweep(sweep: Sweep, out: Path, *, backend: str = "local", workers: int = 2,
              ray_address: str | None = None,
              progress: Callable[[int, int, str], None] | None = None) -> list[dict[str, Any]]:
    """Run every scenario not yet in ``out/sweep.sqlite``; returns all rows."""
    out.mkdir(parents=True, exist_ok=True)
    store = Store(out / "sweep.sqlite")
    try:
        store.check_sweep(sweep)
        done = store.done()
        todo = [s for s in sweep.scenarios if s["id"] not in done]
        total = len(sweep.scenarios)
        finished = total - len(todo)
        if progress:
            progress(finished, total, "")

        def record(s: dict[str, Any], result: dict | None, error: str | None, secs: float):
            nonlocal finished
            store.record(s["id"], s["changes"], result, error, secs)
            finished += 1
            if progress:
                progress(finished, total, s["id"])

        if backend == "ray":
            _run_ray(sweep, todo, workers, ray_address, record)
        elif backend == "local":
            _run_local(sweep, todo, workers, record)
        else:
            raise InputError(f"unknown backend {backend!r}; use local or ray", path="--backend")
        return store.rows()
    finally:
        store.close()


def _run_local(sweep: Sweep, todo: list[dict[str, Any]], workers: int, record) -> None:
    if not todo:
        return
    # fresh interpreters (spawn), as Ray's workers and a new CLI process are: a forked
    # worker would inherit whatever the calling process had cached or set (a notebook, a
    # test session), and its scenarios could then differ from the same sweep elsewhere
    with ProcessPoolExecutor(max_workers=max(1, workers),
                             mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {}
        queue = list(todo)
        while queue or futures:
            while queue and len(futures) < max(1, workers):
                s = queue.pop(0)
                futures[pool.submit(_run_safe, sweep.base, s["changes"], sweep.extra)] = (
                    s, time.time())
            ready, _ = wait(list(futures), return_when=FIRST_COMPLETED)
            for f in ready:
                s, t0 = futures.pop(f)
                try:
                    result, error = f.result()
                except Exception as exc:  # the worker process died
                    result, error = None, f"{type(exc).__name__}: {exc}"
                record(s, result, error, time.time() - t0)


def _run_ray(sweep: Sweep, todo: list[dict[str, Any]], workers: int, address: str | None,
             record) -> None:
    try:
        import ray
    except ImportError:
        raise InputError("the ray backend needs ray: pip install 'hyperplace[ray]'",
                         path="--backend") from None
    if not todo:
        return
    started_here = not ray.is_initialized()
    if started_here:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "ignore_reinit_error": True}
        if address:
            kwargs["address"] = address
        else:
            kwargs["num_cpus"] = max(1, workers)
        ray.init(**kwargs)
    try:
        remote = ray.remote(num_cpus=1)(_run_safe)
        pending = {remote.remote(sweep.base, s["changes"], sweep.extra): (s, time.time())
                   for s in todo}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                s, t0 = pending.pop(ref)
                try:
                    result, error = ray.get(ref)
                except Exception as exc:
                    result, error = None, f"{type(exc).__name__}: {exc}"
                record(s, result, error, time.time() - t0)
    finally:
        if started_here:
            ray.shutdown()


# ---- the report ---------------------------------------------------------------------------

REPORT_METRICS = ("jct_mean_s", "jct_p99_s", "wait_mean_s", "bounded_slowdown_mean",
                  "makespan_s", "utilisation_in_window", "gpu_hours_lost_to_failures")


def report(rows: list[dict[str, Any]], out: Path, charts: bool = True) -> list[Path]:
    """report.md and report.csv: every scenario against the base (ratios)."""
    base = next((r for r in rows if r["id"] == "base" and r["status"] == "done"), None)
    lines = ["| scenario | status | " + " | ".join(REPORT_METRICS) + " |",
             "|---" * (len(REPORT_METRICS) + 2) + "|"]
    csv_rows = []
    for r in rows:
        res = r["result"] or {}
        cells = []
        row = {"scenario": r["id"], "status": r["status"], "error": r["error"] or ""}
        for m in REPORT_METRICS:
            v = res.get(m)
            b = base["result"].get(m) if base else None
            row[m] = v
            row[f"{m}_vs_base"] = (v / b) if (v is not None and b) else None
            if v is None:
                cells.append("-")
            elif b and r["id"] != "base":
                cells.append(f"{v:,.4g} (x{v / b:.3f})")
            else:
                cells.append(f"{v:,.4g}")
        status = r["status"] if r["status"] == "done" else f"failed: {r['error']}"
        lines.append(f"| {r['id']} | {status} | " + " | ".join(cells) + " |")
        csv_rows.append(row)
    from hyperplace.sim.metrics import to_csv

    written = [out / "report.md", out / "report.csv"]
    write_atomic(out / "report.md", "# what-if sweep: scenarios vs base\n\n"
                 + "\n".join(lines) + "\n")
    write_atomic(out / "report.csv", to_csv(csv_rows))
    if charts and base:
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            return written
        done = [r for r in rows if r["status"] == "done" and r["id"] != "base"
                and r["result"].get("jct_mean_s")]
        if done and base["result"].get("jct_mean_s"):
            fig, ax = plt.subplots(figsize=(7, 0.35 * len(done) + 1.5))
            ax.barh([r["id"] for r in done],
                    [r["result"]["jct_mean_s"] / base["result"]["jct_mean_s"] for r in done])
            ax.axvline(1.0, color="k", linewidth=0.8)
            ax.set_xlabel("mean JCT vs base")
            fig.tight_layout()
            fig.savefig(out / "report_jct.png", dpi=110)
            plt.close(fig)
            written.append(out / "report_jct.png")
    return written


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A result without wall-clock fields (for comparing backends)."""
    res = copy.deepcopy(row.get("result") or {})
    for k in TIMING_KEYS:
        res.pop(k, None)
    return {"id": row["id"], "status": row["status"], "result": res}
