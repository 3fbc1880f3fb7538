"""One call from a trace and an instance to every policy's metrics (used by the CLI and
what-if sweeps)."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, Mapping

from hyperplace.errors import InputError
from hyperplace.models import Instance
from hyperplace.sim.metrics import summarize
from hyperplace.sim.policies import Policy, canonical_policy
from hyperplace.sim.simulator import PolicyRun, SimConfig, simulate
from hyperplace.sim.speed import SpeedModel
from hyperplace.sim.traces import load_trace
from hyperplace.sim.workload import (
    PREDICTION_SIGMA,
    Workload,
    foundation_model_jobs,
    offered_load,
    scale_to_load,
    trace_jobs,
    with_predictions,
)

WORKLOADS = ("trace", "fm")


@dataclass
class SimRequest:
    """What to replay: trace, window, workload shape and offered load."""

    trace: str = "philly"
    start_s: float | None = None
    end_s: float | None = None
    limit: int | None = None
    # the kept jobs replayed this many times back to back (hyperplace.sim.traces.repeat_rows)
    repeat: int = 1
    workload: str = "trace"
    load: float | str = 1.0
    policies: list[str] = field(default_factory=lambda: ["engine", "fifo"])
    # sigma of the lognormal prediction error (hyperplace.sim.workload); 0: exact
    prediction_error: float = PREDICTION_SIGMA
    # a trace row that cannot fit the empty instance: refused (False) or dropped and counted
    drop_unfit: bool = False
    # the instance the load is relative to (None: the replayed one). A what-if that changes
    # capacity passes its base instance here to keep the arrival rate (see whatif)
    load_reference: Instance | None = field(default=None, repr=False, compare=False)


def build_workload(req: SimRequest, instance: Instance, seed: int) -> tuple[Workload, dict]:
    """The jobs to replay (mapped, filtered, load-scaled) and facts about them."""
    trace = load_trace(req.trace, start_s=req.start_s, end_s=req.end_s, limit=req.limit,
                       repeat=req.repeat)
    if not math.isfinite(req.prediction_error) or req.prediction_error < 0:
        raise InputError(f"must be a finite number >= 0, got {req.prediction_error}",
                         path="--prediction-error")
    if req.workload == "fm":
        wl = foundation_model_jobs(trace, instance, seed)
    elif req.workload == "trace":
        wl = trace_jobs(trace, instance, seed, drop_unfit=req.drop_unfit)
    else:
        raise InputError(f"--workload: unknown workload {req.workload!r}; use one of "
                         f"{', '.join(WORKLOADS)}")
    if not wl.jobs:
        example = f" ({wl.unfit_example})" if wl.unfit_example else ""
        raise InputError(f"no job of the trace window fits the instance{example}",
                         source=req.trace)
    with_predictions(wl.jobs, req.prediction_error, seed)
    gpus = sum(n.gpu_count for c in instance.clusters for n in c.nodes)
    speed = SpeedModel(instance)
    ref = SpeedModel(req.load_reference) if req.load_reference is not None else speed
    own = offered_load(wl.jobs, speed)
    note = None
    if req.load != "trace":
        note = scale_to_load(wl.jobs, ref, float(req.load))
    facts = {"trace": trace.name, "trace_jobs": len(trace.rows), "jobs": len(wl.jobs),
             "skipped_in_trace": wl.trace_skipped, "dropped_too_large": wl.dropped_too_large,
             "dropped_type_constraints": wl.dropped_constraints,
             "dropped_example": wl.unfit_example,
             "dropped_type_example": wl.untyped_example,
             "trace_offered_load": own, "offered_load": offered_load(wl.jobs, speed),
             "prediction_error_sigma": req.prediction_error, "load_note": note,
             "arrival_window_s": wl.jobs[-1].submit_s - wl.jobs[0].submit_s,
             "instance_gpus": gpus}
    return wl, facts


#: A policy built by a layer above sim (the federation's, :data:`hyperplace.fedsim.POLICIES`):
#: name -> factory(instance, config).
PolicyFactory = Callable[[Instance, SimConfig], Policy]


def run_simulation(instance: Instance, req: SimRequest, config: SimConfig,
                   progress: Callable[[str, int, int], None] | None = None,
                   extra: Mapping[str, PolicyFactory] | None = None,
                   ) -> tuple[dict[str, Any], list[PolicyRun]]:
    """Replay the request's workload under each policy; the summary and the raw runs.

    ``extra``: policies outside :mod:`hyperplace.sim.policies` by name (the federation's);
    they are built here, once per replay, so a bad instance is refused before any replay."""
    extra = extra or {}
    policies = [p if p in extra else canonical_policy(p) for p in req.policies]
    built = {p: extra[p](instance, config) for p in policies if p in extra}
    wl, facts = build_workload(req, instance, config.seed)
    runs: list[PolicyRun] = []
    rows = []
    for name in policies:
        jobs = copy.deepcopy(wl.jobs)
        t0 = time.perf_counter()
        cb = (lambda done, total, _n=name: progress(_n, done, total)) if progress else None
        run = simulate(instance, jobs, built.get(name, name), config, progress=cb)
        row = summarize(run)
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
        runs.append(run)
    request = {f.name: copy.copy(getattr(req, f.name)) for f in fields(req)
               if f.name != "load_reference"}
    summary = {"instance": instance.name, "request": request, "config": asdict(config),
               "workload": facts, "policies": rows, "ratios": ratios(rows)}
    notes = {run.policy: list(run.notes) for run in runs if run.notes}
    if notes:  # what a policy reports of itself (the federation's splits, held GPUs)
        summary["notes"] = notes
    return summary, runs


def ratios(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each engine policy's mean JCT, p99 JCT and mean bounded slowdown over the best peer's."""
    peers = [r for r in rows if not r["policy"].startswith("engine")]
    out: dict[str, Any] = {}
    for r in rows:
        if not r["policy"].startswith("engine") or not peers:
            continue
        entry = {}
        for key in ("jct_mean_s", "jct_p99_s", "bounded_slowdown_mean", "wait_mean_s"):
            vals = [p[key] for p in peers if p[key] is not None]
            if vals and r[key] is not None and min(vals) > 0:
                best = min(vals)
                entry[key] = {"ratio": r[key] / best,
                              "best_peer": next(p["policy"] for p in peers if p[key] == best)}
        util = [p["utilisation_in_window"] for p in peers if p["utilisation_in_window"]]
        if util and r["utilisation_in_window"]:
            entry["utilisation_in_window"] = {"ratio": r["utilisation_in_window"] / max(util)}
        out[r["policy"]] = entry
    return out
