"""Event-driven replay: arrivals, rounds, completions, failures and repairs over time.

The simulator owns the clock and drives a :class:`~hyperplace.sim.loop.RoundLoop`. Rounds
run at multiples of the policy's cadence (``SimConfig.cadence``: a peer's upstream one, the
engine's ``round_s``; 0: at the event) after something changed (a job arrived or ended, hardware
failed or came back) while jobs wait; a round with nothing new to decide is skipped (every
policy here decides the same on the same state). Events at the same instant apply in the
order repair, completion, failure, arrival, round.

The replay ends when every job has finished, or when it cannot go on (jobs wait, nothing
runs, nothing is due to arrive or be repaired, and the last round started nothing): those
jobs are reported as unfinished.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Callable

from hyperplace.models import Instance
from hyperplace.sim.failures import Failure, FailureStream
from hyperplace.sim.jobs import JobRecord, SimJob
from hyperplace.sim.loop import RoundLoop
from hyperplace.sim.policies import Policy, make_policy
from hyperplace.sim.speed import SpeedModel

REPAIR, FINISH, FAIL, ARRIVE, ROUND = range(5)
CADENCES = ("upstream", "uniform")


@dataclass
class SimConfig:
    """Knobs of one replay (every policy of a run shares them)."""

    round_s: float = 60.0
    # how often each policy decides: ``upstream`` (the default) each peer at its upstream
    # cadence (``Policy.cadence_s``: Kueue at every event, Volcano every second, Slurm's
    # backfill every 30 s with its main scheduler at every event; hyperplace.sim.policies)
    # and the engine every ``round_s``; ``uniform``: every policy every ``round_s`` (the
    # replays before 2026-12-03, but for the round a waiting ``--switches`` job now gets
    # when its ``max_switch_wait`` runs out: SlurmBackfill.wake_s)
    cadence: str = "upstream"
    budget_s: float = 1.0
    failures: float = 0.0
    seed: int = 0
    network: bool = True
    check: bool = False
    solver: str = "auto"
    window: int = 64
    aging_s: float = 3600.0
    slurm_factor: float = 2.0
    fail_switches: tuple[str, ...] = ()
    # fair-share history: per-queue GPU-hours decay with this half-life (None: no history,
    # the plain per-round fair share); matters only with declared queues
    half_life_s: float | None = None
    # with a history: priority levels the engine adds per queue, round(levels x Slurm's
    # fair-share factor) (EnginePolicy); 0: the history only steers the fair-share objective
    fair_share_levels: int = 4
    # the engine may stop borrowers' jobs so a queue gets its nominal quota back
    # ("reclaim-within-cohort"; the peers never preempt)
    preemption: str = "never"
    # the engine may migrate running jobs so that a job the plain round leaves out fits
    defrag: bool = False
    # the planning engine's schedule (hyperplace.sim.planning): horizon, jobs in the CP-SAT
    # model per round, objective (slowdown | completion), time step (None: horizon / 288)
    horizon_s: float = 24 * 3600.0
    schedule_window: int = 200
    schedule_objective: str = "slowdown"  # hyperplace.sim.planning.OBJECTIVE (measured)
    step_s: float | None = None
    # the planning engine's belief about its run-time predictions: the sigma of their
    # lognormal error (the workload's ``prediction_error``; 0: exact), for the expected end
    # of a running job given that it still runs (hyperplace.sim.planning.residual_s)
    prediction_sigma: float = 0.5
    # stop the replay at this time (None: when every job has finished); jobs not finished
    # by then count as unfinished, metrics within the arrival window are unaffected when it
    # is at or after the last arrival
    until_s: float | None = None
    # federation policies (hyperplace.fedsim): jobs may be split across member clusters
    # (``simulate --federation-split``, the what-if axis ``federationSplit``)
    federation_split: bool = True
    # the planning engine's budget clock (hyperplace.sim.planning.CLOCKS): ``work`` limits its
    # schedule search by deterministic work (a replay does not depend on the machine's load;
    # the wall budget stays a ceiling), ``wall`` by the wall clock as the service does
    engine_clock: str = "work"
    # the planning engine's forecasts learn from realised starts
    # (hyperplace.sim.forecast.StartCorrection; False, the default: the schedule's planned
    # starts)
    engine_forecast_correction: bool = False
    # the planning engine's forecasts are calibrated on the replay's realised starts, with a
    # start window (hyperplace.sim.forecast.StartCalibration; False: the schedule's planned
    # starts as they are; the correction above, when on, replaces it)
    engine_forecast_calibration: bool = True
    # the planning engine's fill may start reserved jobs now (hyperplace.sim.planning.
    # FILL_RESERVED; False: reserved jobs wait for their reservation)
    engine_fill_reserved: bool = True
    # jobs smaller than a node leave whole the free nodes the schedule's gangs need
    # (hyperplace.sim.planning.WHOLE_NODES_KEPT; None: that default)
    engine_keep_whole: bool | str | None = None
    # the quantile of running jobs' remaining run time the planning engine expects them to
    # end at (hyperplace.sim.planning.END_QUANTILE; None: that default)
    engine_end_quantile: float | None = None
    # when the planning engine expects a busy node whole again: the latest of its jobs'
    # expected ends, or the expected end of the last of them (hyperplace.sim.planning.
    # NODE_END: latest | last; None: that default)
    engine_node_end: str | None = None
    # a waiting job whose run is short against its planned wait may stop running jobs to
    # start now (hyperplace.sim.planning.MAKE_ROOM; None: that default)
    engine_make_room: bool | None = None
    # make_room's guard on whom it stops: their stops' cost at most this share of their
    # predicted work (hyperplace.sim.planning.ROOM_SHARE; None: that default, the count rule)
    engine_room_share: float | None = None
    # make_room's forecasts shown only while they have mostly been kept
    # (hyperplace.sim.planning.ROOM_PROMISES; None: that default, off)
    engine_room_promises: bool | None = None
    # what the planning engine's fill between rounds keeps of the last round's plan
    # (hyperplace.sim.planning.FILL_KEEPS: plan | gangs | reservations; None: that default)
    engine_fill_keeps: str | None = None
    # the planning engine reserves at once the planned starts of gangs of at least this many
    # whole nodes (the others once they have waited; hyperplace.sim.planning.RESERVE_NODES;
    # None: that default)
    engine_reserve_nodes: int | None = None
    # the planning engine's horizon stretches to the forecast start of a job that has
    # waited and was forecast past it (hyperplace.sim.planning.STRETCH_HORIZON, off: measured)
    engine_stretch_horizon: bool = False


@dataclass
class RoundStat:
    time_s: float
    solve_s: float
    started: int
    queued: int
    fallback: bool
    status: str
    held: int


@dataclass
class Sample:
    time_s: float
    busy: int
    free: int
    down: int
    queued: int
    smallest_waiting: int = 0  # GPUs of the smallest waiting job (0: none waits)


@dataclass
class PolicyRun:
    """Everything one policy's replay produced (metrics are computed from it)."""

    policy: str
    records: list[JobRecord]
    rounds: list[RoundStat]
    samples: list[Sample]
    failures: list[tuple[Failure, list[str]]]
    total_gpus: int
    arrival_end_s: float
    unfinished: int = 0
    notes: list[str] = field(default_factory=list)
    queue_gpu_s: dict[str, float] = field(default_factory=dict)  # GPU-seconds held per queue
    queue_gpu_s_in_window: dict[str, float] = field(default_factory=dict)  # ... while arriving
    queue_weights: dict[str, float] = field(default_factory=dict)  # declared fair-share weights
    cadence_s: float | None = None  # seconds between its rounds (0: at every event)
    between: bool = False  # also asked to fill at every event between its rounds


#: PlanningEngine keyword -> the SimConfig field that sets it, passed always (the field's
#: default is the replay's) ...
_PLANNING_ALWAYS = {"horizon_s": "horizon_s", "window": "schedule_window",
                    "objective": "schedule_objective", "step_s": "step_s",
                    "round_s": "round_s", "prediction_sigma": "prediction_sigma",
                    "clock": "engine_clock",
                    "forecast_correction": "engine_forecast_correction",
                    "forecast_calibration": "engine_forecast_calibration",
                    "fill_reserved": "engine_fill_reserved",
                    "stretch_horizon": "engine_stretch_horizon"}
#: ... and only when set (None: the engine's own default, defined once, in planning.py)
_PLANNING_IF_SET = {"keep_whole": "engine_keep_whole", "end_quantile": "engine_end_quantile",
                    "make_room": "engine_make_room", "room_promises": "engine_room_promises",
                    "room_share": "engine_room_share", "reserve_nodes": "engine_reserve_nodes",
                    "node_end": "engine_node_end", "fill_keeps": "engine_fill_keeps"}


def planning_settings(config: SimConfig) -> dict:
    """The :class:`~hyperplace.sim.planning.PlanningEngine` keywords a replay's config sets
    (``engine``'s, and ``engine-federated``'s schedule): :data:`_PLANNING_ALWAYS`, and the
    fields of :data:`_PLANNING_IF_SET` that are not None."""
    keeps = config.engine_fill_keeps
    if keeps is not None and keeps not in ("plan", "gangs", "reservations"):
        raise ValueError(f"engine_fill_keeps: use plan, gangs or reservations, got {keeps!r}")
    out = {kw: getattr(config, f) for kw, f in _PLANNING_ALWAYS.items()}
    out.update({kw: v for kw, f in _PLANNING_IF_SET.items()
                if (v := getattr(config, f)) is not None})
    return out


def simulate(instance: Instance, jobs: list[SimJob], policy: str | Policy, config: SimConfig,
             progress: Callable[[int, int], None] | None = None) -> PolicyRun:
    """Replay ``jobs`` on ``instance`` under ``policy`` (see the module docstring).

    ``policy`` is a name of :mod:`hyperplace.sim.policies` or a :class:`Policy` built by
    the caller (the federation's, :mod:`hyperplace.fedsim`). Such a policy may bring its own
    speed model (``speed_model(instance, network)``: a split job's speed is the federation
    pricing's), ask for a round at a time nothing else triggers one (``wake_s(now)``: a
    held part's timeout) and add notes to the run (``notes()``)."""
    pol = policy if isinstance(policy, Policy) else make_policy(
        policy, instance, budget_s=config.budget_s, solver=config.solver,
        window=config.window, aging_s=config.aging_s, seed=config.seed,
        slurm_factor=config.slurm_factor, fair_share_levels=config.fair_share_levels,
        preemption=config.preemption, defrag=config.defrag,
        schedule=planning_settings(config))
    if config.cadence not in CADENCES:
        raise ValueError(f"cadence: use {' or '.join(CADENCES)}, got {config.cadence!r}")
    own = getattr(pol, "cadence_s", None)
    round_s = own if config.cadence == "upstream" and own is not None else config.round_s
    loop = RoundLoop(instance, pol, check=config.check, half_life_s=config.half_life_s)
    own_speed = getattr(pol, "speed_model", None)
    loop.speed = (own_speed(loop.state.base, config.network) if own_speed is not None
                  else SpeedModel(loop.state.base, network=config.network))
    wake = getattr(pol, "wake_s", None)
    # a policy that fills between its rounds (``fills_between_rounds``: the planning engine,
    # hyperplace.sim.planning.FILL_EVENTS) is also asked to fill (RoundLoop.run_round's
    # ``fill``) at every event that leaves jobs waiting, at the event's time; so is Slurm
    # (its main scheduler, hyperplace.sim.policies.SlurmBackfill.fill_between). No other
    # policy is: their replays are as before. A peer's fill (Slurm's main scheduler) is part
    # of its upstream cadence: ``uniform`` replays it at round_s only.
    between = (bool(getattr(pol, "fills_between_rounds", False)) and round_s > 0
               and (own is None or config.cadence == "upstream"))
    fill_due: float | None = None
    if jobs:
        loop.window = (min(j.submit_s for j in jobs), max(j.submit_s for j in jobs))
    for sw in config.fail_switches:
        loop.fail_switch(sw, 0.0)
    all_gpus = [(n, i) for n, node in loop.state.nodes.items() for i in range(node.gpu_count)]
    stream = FailureStream(all_gpus, config.failures, config.seed)
    events: list[tuple[float, int, int, object]] = []
    seq = 0

    def push(t: float, kind: int, payload: object) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, kind, seq, payload))

    for job in jobs:
        push(job.submit_s, ARRIVE, job)
    first = stream.next()
    if first is not None:
        push(first.time_s, FAIL, first)
    arrivals_left = len(jobs)
    repairs_left = 0
    round_due: float | None = None
    wakes: set[float] = set()  # rounds a policy asked for (wake_s)
    dirty = False
    last_round_started = True
    rounds: list[RoundStat] = []
    samples: list[Sample] = []
    failures: list[tuple[Failure, list[str]]] = []
    finished = 0
    total = len(jobs)

    def sample(t: float) -> None:
        s = Sample(t, loop.state.busy_count(), loop.state.free_count(), loop.state.down_count(),
                   len(loop.queue), min((j.gpus for j in loop.queue.values()), default=0))
        if samples and samples[-1].time_s == t:
            samples[-1] = s
        elif not samples or (samples[-1].busy, samples[-1].free, samples[-1].down,
                             samples[-1].queued, samples[-1].smallest_waiting) != (
                                 s.busy, s.free, s.down, s.queued, s.smallest_waiting):
            samples.append(s)

    while events:
        t, kind, _, payload = heapq.heappop(events)
        if finished == total:
            break
        if config.until_s is not None and t > config.until_s:
            sample(config.until_s)
            break
        if kind == ARRIVE:
            arrivals_left -= 1
            loop.submit(payload, t)
            dirty = True
        elif kind == FINISH:
            name, token = payload
            if loop.running.get(name) is not token:
                continue  # interrupted since (the attempt the event was pushed for is gone)
            loop.finish(name, t)
            finished += 1
            dirty = True
            if progress:
                progress(finished, total)
        elif kind == FAIL:
            f = payload
            hit = _apply_failure(loop, f, t)
            failures.append((f, hit))
            if f.scope != "software":
                repairs_left += 1
                push(t + f.repair_s, REPAIR, f)
            dirty = dirty or bool(hit) or f.scope != "software"
            nxt = stream.next()
            if nxt is not None:
                push(nxt.time_s, FAIL, nxt)
        elif kind == REPAIR:
            _apply_repair(loop, payload)
            repairs_left -= 1
            dirty = True
        elif kind == ROUND:
            fill = payload == "fill"
            if t == round_due and not fill:
                round_due = None
            if not fill:
                wakes.discard(t)
            if loop.queue:
                result = loop.run_round(t, fill=fill)
                d = result.decision
                rounds.append(RoundStat(t, d.solve_s, len(result.started), len(loop.queue),
                                        d.fallback, d.status, len(d.held)))
                for s in result.started:
                    # the attempt itself, not its id(): a restarted job's new attempt may
                    # reuse a freed attempt's address, and the old attempt's FINISH would then
                    # end it early (results depending on the process's allocation history)
                    push(s.end_s, FINISH, (s.job.name, loop.running[s.job.name]))
                _record_forecasts(loop, result, t)
                last_round_started = bool(result.started)
                due = wake(t) if wake is not None else None
                if due is not None and due > t:
                    due = math.ceil(due / round_s) * round_s if round_s > 0 else due
                    if due not in wakes and due != round_due:
                        wakes.add(due)
                        push(due, ROUND, None)
            dirty = False
        sample(t)
        if dirty and loop.queue and round_due is None:
            round_due = math.ceil(t / round_s) * round_s if round_s > 0 else t
            if round_due not in wakes:  # else the round a policy asked for serves
                push(round_due, ROUND, None)
        if between and dirty and loop.queue and kind != ROUND and round_due != t \
                and fill_due != t:
            fill_due = t  # the fill between rounds, after every event at this instant
            push(t, ROUND, "fill")
        if (not loop.running and loop.queue and arrivals_left == 0 and repairs_left == 0
                and round_due is None and not wakes and not last_round_started):
            break  # nothing can change any more
        if finished == total:
            break
    records = [loop.records[j.name] for j in jobs if j.name in loop.records]
    unfinished = sum(1 for r in records if r.end_s is None) + (len(jobs) - len(records))
    arrival_end = jobs[-1].submit_s if jobs else 0.0
    qs = instance.queue_set
    weights = {q.name: q.weight for q in qs.queues.values()} if qs is not None else {}
    for rec in records:
        weights.setdefault(rec.job.queue, 1.0)
    return PolicyRun(policy=pol.name, records=records, rounds=rounds, samples=samples,
                     failures=failures, total_gpus=loop.state.total_gpus,
                     arrival_end_s=arrival_end, unfinished=unfinished,
                     notes=list(getattr(pol, "notes", lambda: [])()),
                     queue_gpu_s=dict(loop.gpu_seconds),
                     queue_gpu_s_in_window=dict(loop.gpu_seconds_in_window),
                     queue_weights=weights, cadence_s=round_s, between=between)


def _record_forecasts(loop: RoundLoop, result, t: float) -> None:
    """A policy with a schedule (``forecasts()``): each job's first forecast is kept, to
    be compared with its actual start (a job started in its first round: forecast now),
    and every round's forecast of a waiting job while it changes (``JobRecord.forecasts``,
    with the start window of ``forecast_windows()`` when the policy has one); a policy that
    corrects its schedule's planned starts (``corrects_forecasts``) gives the uncorrected
    ones (``raw_forecasts()``), kept beside."""
    get = getattr(loop.policy, "forecasts", None)
    if get is None:
        return
    fc = get()
    windows_of = getattr(loop.policy, "forecast_windows", None)
    windows = windows_of() if windows_of is not None else {}
    raw_of = getattr(loop.policy, "raw_forecasts", None) if getattr(
        loop.policy, "corrects_forecasts", False) else None
    raw = raw_of() if raw_of is not None else {}
    for s in result.started:
        rec = loop.records[s.job.name]
        if rec.forecast_at_s is None:
            rec.forecast_start_s, rec.forecast_at_s = t, t
            rec.forecast_pool = fc.get(s.job.name, (t, ""))[1]
            rec.forecasts.append((t, t, t, t))
            if raw_of is not None:
                rec.raw_forecast_start_s = t
    for name in loop.queue:
        rec = loop.records[name]
        if name not in fc:
            continue
        start = fc[name][0]
        lo, hi = windows.get(name, (None, None))
        entry = (t, start, lo, hi)
        if not rec.forecasts or rec.forecasts[-1][1:] != entry[1:]:
            rec.forecasts.append(entry)
        if rec.forecast_at_s is None:
            rec.forecast_start_s, rec.forecast_pool = fc[name]
            rec.forecast_at_s = t
            rec.raw_forecast_start_s = raw.get(name, (None, ""))[0]


def _apply_failure(loop: RoundLoop, f: Failure, t: float) -> list[str]:
    state = loop.state
    if f.scope == "gpu":
        if f.gpu in state.failed_gpus.get(f.node, set()) or state.node_down(f.node):
            return []
        return loop.fail_gpus([(f.node, f.gpu)], t)
    if f.scope == "host":
        if f.node in state.failed_nodes:
            return []
        return loop.fail_nodes([f.node], t)
    if f.scope == "switch":
        switches = sorted(state.switches_of.get(f.node, ()))
        if not switches or switches[0] in state.failed_switches:
            return []
        return loop.fail_switch(switches[0], t)
    return loop.crash_jobs(sorted(state.jobs_on([(f.node, f.gpu)])), t)


def _apply_repair(loop: RoundLoop, f: Failure) -> None:
    if f.scope == "gpu":
        loop.repair(gpus=[(f.node, f.gpu)])
    elif f.scope == "host":
        loop.repair(nodes=[f.node])
    elif f.scope == "switch":
        switches = sorted(loop.state.switches_of.get(f.node, ()))
        if switches:
            loop.repair(switches=switches[:1])
