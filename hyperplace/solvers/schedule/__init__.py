"""Solving the over-time schedule (:mod:`hyperplace.formulations.schedule`).

:func:`solve_schedule` builds one CP-SAT model of the pending *window* (the ``window`` jobs
first in list order: priority, then a reservation's start, then submit time): per job one
start variable, an optional fixed-size interval per capacity option sharing it, exactly one
option or "not inside the horizon"; a cumulative per pool over the intervals of its pool and
every pool inside it, running jobs as fixed intervals, and one over whole nodes for gangs;
the stratified objective of the
formulation. It is hinted with the list schedule below (which keeps the previous round's
reservations in their order: the warm start) and runs within the budget on one worker.

**Greedy (list scheduling).** Jobs in list order; each takes the option with the earliest
predicted completion on the capacity profile left by running jobs and the jobs before it
(every pool and all pools above it must have room over the whole run): conservative
backfilling over pools. **Warm start:** before that, each reservation of the previous round
is put back at its pool and start when it still fits there (in list order), so the hint
CP-SAT starts from keeps every reservation that can be kept, and the solver only returns
solutions at least as good, whose lateness stratum then cannot be worse. It is the fallback when CP-SAT finds nothing better within the budget
(status ``fallback``), the schedule of the jobs outside the window (placed around the model's
solution), and the forecast beyond the horizon (its profile runs ``GREEDY_SPAN`` horizons).

Status: ``optimal`` (CP-SAT proved the objective and the window held every job),
``feasible`` (CP-SAT's solution, not proven, or proven only for a window that did not hold
every job, which the notes then say; ``bound`` is the window's proven lower bound), ``fallback`` (the list schedule: CP-SAT had
no better solution in time), ``greedy`` (asked for). Jobs outside the window are always list
scheduled; ``modelled`` says how many were in the model.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hyperplace.formulations.schedule import ScheduleJob, ScheduleProblem
from hyperplace.solvers.params import cut_by_wall

GREEDY_SPAN = 4  # the list schedule's profile covers this many horizons (forecasts past H)
#: Seconds the CP-SAT model takes to build per job of the window: measured 2-6 ms on a
#: shared 2-core Xeon at load 5-14 (2026-12-02), kept at the top (a fixed estimate, so that
#: the cut depends on the budget left, not on what earlier solves in the process measured).
BUILD_S_PER_JOB = 6e-3
MIN_WINDOW = 10  # a window cut for time keeps this many jobs when 0.1 s is left


@dataclass
class Planned:
    """One job's place in the schedule: option index and start step (None: no start)."""

    job: str
    option: int | None
    start_step: int | None
    pool: int | None = None
    duration_steps: int = 0

    @property
    def end_step(self) -> int | None:
        return None if self.start_step is None else self.start_step + self.duration_steps


@dataclass
class ScheduleResult:
    problem: ScheduleProblem
    entries: dict[str, Planned]
    status: str
    objective: int
    bound: int | None
    solve_s: float
    modelled: int
    greedy_objective: int
    notes: list[str] = field(default_factory=list)

    def start_s(self, job: str) -> float | None:
        e = self.entries.get(job)
        if e is None or e.start_step is None:
            return None
        return self.problem.time_of(e.start_step)

    def starts_now(self) -> list[str]:
        return [n for n, e in self.entries.items() if e.start_step == 0]

    def in_model(self) -> dict[str, tuple[int, int] | None]:
        """The entries as the model sees them (starts past the horizon: not scheduled)."""
        H = self.problem.steps
        return {n: (e.option, e.start_step) if e.start_step is not None and e.start_step < H
                else None for n, e in self.entries.items()}


def list_order(problem: ScheduleProblem) -> list[ScheduleJob]:
    """Priority (highest first), then a reservation's start, then ``problem.order``:
    ``submit`` (submit time) or ``srpt`` (least predicted work first: GPU-seconds at the
    job's best option, divided by ``1 + wait / aging_s`` so that a large job's turn comes)."""
    aging = max(problem.aging_s, 1e-9)

    def key(j: ScheduleJob):
        r = problem.reservations.get(j.name)
        if problem.order == "srpt":
            rest = j.best_s * j.gpus / (1.0 + max(0.0, problem.now - j.submit_s) / aging)
        else:
            rest = j.submit_s
        return (-j.priority, r.start_s if r is not None else math.inf, rest, j.submit_s,
                j.name)
    return sorted(problem.jobs, key=key)


class Profile:
    """GPUs used per pool per step, over ``length`` steps (numpy arrays)."""

    def __init__(self, problem: ScheduleProblem, length: int):
        self.p = problem
        self.length = length
        self.cap = np.array([pl.capacity for pl in problem.pools], dtype=np.int64)
        self.used = np.zeros((len(problem.pools), length), dtype=np.int64)
        self.ncap = np.array([pl.whole_nodes for pl in problem.pools], dtype=np.int64)
        self.nused = np.zeros((len(problem.pools), length), dtype=np.int64)
        self.anc = [problem.ancestors(pl.id) for pl in problem.pools]
        for busy, into in ((problem.busy, self.used), (problem.node_busy, self.nused)):
            # running jobs: a difference array per pool (+g at 0, -g at the end), summed up
            agg: dict[tuple[int, int], int] = {}
            for b in busy:
                end = min(length, problem.busy_steps(b))
                if end > 0:
                    agg[(b.pool, end)] = agg.get((b.pool, end), 0) + b.gpus
            if not agg:
                continue
            delta = np.zeros((len(problem.pools), length + 1), dtype=np.int64)
            for (pool, end), g in agg.items():
                for a in self.anc[pool]:
                    delta[a, 0] += g
                    delta[a, end] -= g
            into += np.cumsum(delta, axis=1)[:, :length]

    def bad_steps(self, pool: int, demand: int, nodes: int = 0) -> np.ndarray:
        """Cumulative count of the steps at which ``pool`` (or a pool above it) lacks
        ``demand`` GPUs or ``nodes`` whole nodes (length + 1 entries, from 0)."""
        anc = self.anc[pool]
        free = (self.cap[anc][:, None] - self.used[anc]).min(axis=0)
        short = free < demand
        if nodes:
            nfree = (self.ncap[anc][:, None] - self.nused[anc]).min(axis=0)
            short |= nfree < nodes
        return np.concatenate([[0], np.cumsum(short)])

    def free_at_start(self, pool: int, demand: int, nodes: int = 0) -> bool:
        """Whether ``pool`` and every pool above it have ``demand`` GPUs and ``nodes`` whole
        nodes free at step 0."""
        anc = self.anc[pool]
        return bool((self.cap[anc] - self.used[anc, 0]).min() >= demand
                    and (self.ncap[anc] - self.nused[anc, 0]).min() >= nodes)

    def first_fit(self, bad: np.ndarray, dur: int, lo: int = 0) -> int | None:
        """The first start >= ``lo`` with no bad step in ``[start, start + dur)``."""
        if dur > self.length:
            return None
        win = bad[dur:] - bad[:-dur]  # bad steps in [s, s + dur)
        ok = np.flatnonzero(win[lo:] == 0)
        return int(ok[0]) + lo if ok.size else None

    def earliest(self, pool: int, demand: int, dur: int, lo: int = 0, nodes: int = 0
                 ) -> int | None:
        return self.first_fit(self.bad_steps(pool, demand, nodes), dur, lo)

    def take(self, pool: int, demand: int, start: int, dur: int, nodes: int = 0) -> None:
        self.used[self.anc[pool], start:start + dur] += demand
        if nodes:
            self.nused[self.anc[pool], start:start + dur] += nodes

    def book(self, result: ScheduleResult, skip: Callable[[str], bool], until: int
             ) -> Profile:
        """Books every entry of ``result`` that starts before step ``until`` (and is not
        ``skip``ped), its run cut at ``until``; returns the profile."""
        jobs = {j.name: j for j in self.p.jobs}
        for n, e in result.entries.items():
            if skip(n) or e.start_step is None or e.start_step >= until:
                continue
            j = jobs[n]
            o = j.options[e.option]
            self.take(o.pool, j.demand[o.pool], e.start_step,
                      min(e.duration_steps, until - e.start_step),
                      j.node_demand.get(o.pool, 0))
        return self


def _take(prof: Profile, problem: ScheduleProblem, j: ScheduleJob, k: int,
          s: int) -> Planned:
    """Book option ``k`` of ``j`` from step ``s`` in ``prof``; its :class:`Planned`."""
    o = j.options[k]
    d = problem.dur_steps(o, s)
    prof.take(o.pool, j.demand[o.pool], s, d, j.node_demand.get(o.pool, 0))
    return Planned(j.name, k, s, o.pool, d)


def _keep_reservation(prof: Profile, problem: ScheduleProblem, j: ScheduleJob
                      ) -> Planned | None:
    """``j`` at its reservation's pool and start when it still fits there (booked)."""
    r = problem.reservations.get(j.name)
    if r is None:
        return None
    k = next((i for i, o in enumerate(j.options) if o.pool == r.pool), None)
    if k is None:
        return None
    o, s = j.options[k], problem.reserved_step(j)
    if s >= problem.steps:
        return None
    d = problem.dur_steps(o, s)
    if prof.earliest(o.pool, j.demand[o.pool], d, lo=s,
                     nodes=j.node_demand.get(o.pool, 0)) != s:
        return None
    return _take(prof, problem, j, k, s)


def _best_option(prof: Profile, problem: ScheduleProblem, j: ScheduleJob
                 ) -> tuple[int, int] | None:
    """(option, start) of ``j`` with the least objective term (:meth:`ScheduleProblem.
    job_cost`: completion, plus waiting by ``wait_weight``) on ``prof``; ties: the lower
    tier, the earlier option. None: no option fits within the profile."""
    best: tuple[int, int, int, int] | None = None
    for k, o in enumerate(j.options):
        bad = prof.bad_steps(o.pool, j.demand[o.pool], j.node_demand.get(o.pool, 0))
        d = problem.dur_steps(o, 0)
        s = None if o.pool in j.not_now or d > prof.length or bad[d] else 0
        if s != 0:  # not now: from step 1, at the length of a later start
            d = problem.dur_steps(o, 1)
            s = prof.first_fit(bad, d, lo=1)
        if s is None:
            continue
        key = (problem.job_cost(s, s + d), problem.pools[o.pool].tier, k, s)
        if best is None or key < best:
            best = key
    return None if best is None else (best[2], best[3])


def list_schedule(problem: ScheduleProblem, jobs: list[ScheduleJob],
                  fixed: dict[str, Planned] | None = None, span: int = GREEDY_SPAN,
                  warm: bool = True) -> dict[str, Planned]:
    """List scheduling of ``jobs`` in the given order around ``fixed`` (module docstring);
    ``warm``: the reservations first, where they still fit."""
    longest = max((problem.dur_steps(o) for j in problem.jobs for o in j.options), default=1)
    prof = Profile(problem, span * problem.steps + longest + 1)
    by_name = {j.name: j for j in problem.jobs}
    out: dict[str, Planned] = {}
    for name, e in (fixed or {}).items():
        if e.start_step is not None:  # a fixed job left out of the horizon is list scheduled
            out[name] = _take(prof, problem, by_name[name], e.option, e.start_step)
    if warm:
        # the previous round's schedule first: each reservation at its pool and start
        # when it still fits there (in list order), the rest around them
        for j in jobs:
            got = None if j.name in out else _keep_reservation(prof, problem, j)
            if got is not None:
                out[j.name] = got
    for j in jobs:
        if j.name in out:
            continue
        best = _best_option(prof, problem, j)
        out[j.name] = (Planned(j.name, None, None) if best is None
                       else _take(prof, problem, j, *best))
    return out


def forecast_result(result: ScheduleResult, started=(), reserved: bool = False
                    ) -> ScheduleResult:
    """The round's start forecast: ``result`` with its entries replaced by a plain list
    schedule of the same problem (:func:`list_schedule`, list order, no CP-SAT, no kept
    reservations unless ``reserved``), the jobs in ``started`` fixed at step 0 (they start
    now). Only what the scheduler knows this round: the running jobs' expected ends and the
    queue's predicted run times; decisions never read it.

    Why not the schedule itself: the engine re-plans every unreserved job each round, so
    its CP-SAT solution (wait-weighted, around the kept reservations) is a worse guess of
    when a job will start than the list schedule of the same queue. Measured (median
    ``|forecast - actual start| / wait`` of the first forecast, jobs that waited 10 min or
    more; every round's forecast for the time-averaged figure; a logged replay scored
    offline, 2026-12-02, load 7-8, /work/notes/issue-21-forecast.md): fm 0.8 on
    mixed-a100-h100 0.68 -> 0.54 (time-averaged 0.56 -> 0.28), Alibaba 2023 x2 0.8
    0.492 -> 0.485 (0.33 -> 0.30). In-engine figures: beside the engine's use of it,
    :data:`hyperplace.sim.forecast.FORECAST_LIST`."""
    import dataclasses

    problem = result.problem
    view = problem if reserved else dataclasses.replace(problem, reservations={})
    fixed = {n: Planned(n, e.option, 0, e.pool, e.duration_steps) for n in started
             if (e := result.entries.get(n)) is not None and e.option is not None}
    entries = list_schedule(view, list_order(view), fixed=fixed, warm=reserved)
    return dataclasses.replace(result, entries=entries)


def _fill_option(prof: Profile, problem: ScheduleProblem, j: ScheduleJob, e: Planned,
                 margin: float) -> int | None:
    """The option :func:`fill_now` starts ``j`` on now (its planned entry ``e``), or None."""
    # cheap test first: an option whose pool lacks the room at step 0 cannot start now (the
    # same answer as the full test below; at 2,000 pending on a full cluster most jobs stop
    # here)
    if not any(prof.free_at_start(o.pool, j.demand[o.pool], j.node_demand.get(o.pool, 0))
               for o in j.options):
        return None
    limit = (math.inf if e.start_step is None or e.end_step is None
             else problem.job_cost(e.start_step, e.end_step) * (1.0 + margin))
    best: tuple[int, int] | None = None
    for k, o in enumerate(j.options):
        d = problem.dur_steps(o, 0)
        if o.pool in j.not_now or d > prof.length:
            continue
        cost = problem.job_cost(0, d)
        if cost > limit or (best is not None and cost >= best[0]):
            continue
        if prof.bad_steps(o.pool, j.demand[o.pool], j.node_demand.get(o.pool, 0))[d]:
            continue
        best = (cost, k)
    return None if best is None else best[1]


def fill_now(problem: ScheduleProblem, entries: dict[str, Planned], order: list[ScheduleJob],
             keep: set[str], margin: float = 0.0, reserved: bool = False
             ) -> tuple[dict[str, Planned], int]:
    """Work-conserving fill of ``entries`` (a schedule of every job, in list ``order``): the
    jobs it starts now and the planned starts of the jobs in ``keep`` (the reservations) stay;
    every other job, in list order, starts now on an option that has room from now over its
    whole run (around what stays and the jobs filled before it) when that costs it no more
    than its own planned start (:meth:`ScheduleProblem.job_cost`: its completion plus its
    waiting by ``wait_weight``, so "wait for a faster type" still wins by that margin); the
    jobs left are list scheduled around the result. Returns the new entries and how many
    jobs the fill started.

    Why: a planned start of a job without a reservation rests on predicted ends (lognormal
    error) and is re-planned next round anyway, while capacity idle now is lost for sure;
    the schedule's optimum may leave GPUs idle now for such a plan.

    ``reserved``: a job of ``keep`` planned later may start now too, by the same rule against
    its reserved term, around the other reservations (a reserved job may start earlier than
    its reservation, never later; the schedule keeps it in its pool only when that is
    cheaper); it is tried in list order like the others."""
    longest = max((problem.dur_steps(o) for j in problem.jobs for o in j.options), default=1)
    # a start now needs the profile over its run only (the longest run; what is booked
    # beyond it cannot block a start at step 0)
    prof = Profile(problem, longest + 1)
    by_name = {j.name: j for j in problem.jobs}
    fixed: dict[str, Planned] = {}
    for n, e in entries.items():
        if e.start_step is not None and (e.start_step == 0 or n in keep):
            fixed[n] = _take(prof, problem, by_name[n], e.option, e.start_step)
    filled = 0
    for j in order:
        e = entries.get(j.name)
        if not j.options or e is None:
            continue
        mine = fixed.get(j.name)
        if mine is not None:
            if not reserved or mine.start_step == 0:
                continue
            o = j.options[mine.option]  # its reservation, lifted while it tries now
            prof.take(o.pool, -j.demand[o.pool], mine.start_step, mine.duration_steps,
                      -j.node_demand.get(o.pool, 0))
        k = _fill_option(prof, problem, j, e, margin)
        if k is not None:
            fixed[j.name] = _take(prof, problem, j, k, 0)
            filled += 1
        elif mine is not None:
            fixed[j.name] = _take(prof, problem, j, mine.option, mine.start_step)
    if not filled:
        return entries, 0
    return list_schedule(problem, order, fixed=fixed), filled


class _Model:
    """The CP-SAT model of the window (module docstring), built job by job."""

    def __init__(self, problem: ScheduleProblem):
        from ortools.sat.python import cp_model

        self.p = problem
        self.H = problem.steps
        self.m = cp_model.CpModel()
        self.w = problem.int_weights()
        self.lw = problem.lateness_weights()
        self.gpus: dict[int, list[tuple[object, int]]] = {p.id: [] for p in problem.pools}
        self.nodes: dict[int, list[tuple[object, int]]] = {p.id: [] for p in problem.pools}
        self.anc = {p.id: problem.ancestors(p.id) for p in problem.pools}
        self.vars: dict[str, tuple[object, list[object], object]] = {}
        self.obj: list = []

    def _interval(self, j: ScheduleJob, k: int, start, now, end, x):
        """Option ``k``'s optional interval; its length is the longer one when it starts now
        (step 0 is short) and ``now`` says so."""
        m, o = self.m, j.options[k]
        d, d1 = self.p.dur_steps(o), self.p.dur_steps(o, 1)
        if d == d1:
            m.Add(end >= start + d).OnlyEnforceIf(x)
            return m.NewOptionalFixedSizeIntervalVar(start, d, x, f"i_{j.name}_{k}")
        size = m.NewIntVar(d1, d, f"d_{j.name}_{k}")
        m.Add(size == d1 + (d - d1) * now)
        ends = m.NewIntVar(0, self.H + d, f"f_{j.name}_{k}")
        m.Add(ends == start + size)
        m.Add(end >= ends).OnlyEnforceIf(x)
        return m.NewOptionalIntervalVar(start, size, ends, x, f"i_{j.name}_{k}")

    def job(self, j: ScheduleJob, hint: Planned | None) -> None:
        m, H = self.m, self.H
        durs = [self.p.dur_steps(o) for o in j.options]  # the longer (started now)
        start = m.NewIntVar(0, H - 1, f"s_{j.name}")
        end = m.NewIntVar(0, H + max(durs), f"e_{j.name}")
        out = m.NewBoolVar(f"u_{j.name}")
        now = m.NewBoolVar(f"now_{j.name}")  # starts at step 0 (the short one)
        m.Add(start == 0).OnlyEnforceIf(now)
        m.Add(start >= 1).OnlyEnforceIf(now.Not())
        xs = []
        for k, o in enumerate(j.options):
            x = m.NewBoolVar(f"x_{j.name}_{k}")
            if o.pool in j.not_now:
                m.Add(start >= 1).OnlyEnforceIf(x)
            iv = self._interval(j, k, start, now, end, x)
            for a in self.anc[o.pool]:
                self.gpus[a].append((iv, j.demand[o.pool]))
                if j.node_demand.get(o.pool, 0):
                    self.nodes[a].append((iv, j.node_demand[o.pool]))
            xs.append(x)
        m.AddExactlyOne([*xs, out])
        m.Add(end >= H + min(durs)).OnlyEnforceIf(out)
        m.Add(start == 0).OnlyEnforceIf(out)
        de, ds = self.p.coefs
        self.obj.append(self.w[j.name] * de * end)
        if ds:  # an unscheduled job waits the whole horizon (its start is 0 in the model)
            self.obj.append(self.w[j.name] * ds * (start + H * out))
        r = self.p.reserved_step(j)
        if r is not None:
            rtype, rend = self.p.reserved_type(j) or (None, 0)
            late = m.NewIntVar(0, H + max(durs), f"l_{j.name}")
            for k, o in enumerate(j.options):  # the start on its type, else the end
                m.Add(late >= (start if o.gpu_type == rtype else end) - (
                    r if o.gpu_type == rtype else rend)).OnlyEnforceIf(xs[k])
            m.Add(late >= H - r).OnlyEnforceIf(out)
            self.obj.append(self.lw[j.name] * late)
        self.vars[j.name] = (start, xs, out)
        if hint is not None:
            inside = hint.start_step is not None and hint.start_step < H
            m.AddHint(out, not inside)
            m.AddHint(start, hint.start_step if inside else 0)
            for k, x in enumerate(xs):
                m.AddHint(x, inside and hint.option == k)

    def capacity(self, users: dict[int, list[tuple[object, int]]], busy: list,
                 cap_of, tag: str) -> None:
        """One cumulative per pool over its users, running jobs as fixed intervals from now
        to their predicted ends (aggregated per end)."""
        held: dict[int, dict[int, int]] = {p.id: {} for p in self.p.pools}
        for b in busy:
            e = min(self.p.busy_steps(b), self.H + 1)
            for a in self.anc[b.pool] if e > 0 else ():
                held[a][e] = held[a].get(e, 0) + b.gpus
        for p in self.p.pools:
            if not users[p.id]:
                continue
            ivs = [iv for iv, _ in users[p.id]]
            dem = [d for _, d in users[p.id]]
            for e, g in sorted(held[p.id].items()):
                ivs.append(self.m.NewFixedSizeIntervalVar(0, e, f"{tag}_{p.id}_{e}"))
                dem.append(g)
            self.m.AddCumulative(ivs, dem, max(cap_of(p), sum(held[p.id].values())))

    def solution(self, solver, jobs: list[ScheduleJob]) -> dict[str, Planned]:
        got: dict[str, Planned] = {}
        for j in jobs:
            start, xs, out = self.vars[j.name]
            if solver.Value(out):
                got[j.name] = Planned(j.name, None, None)
                continue
            k = next(i for i, x in enumerate(xs) if solver.Value(x))
            o, at = j.options[k], solver.Value(start)
            got[j.name] = Planned(j.name, k, at, o.pool, self.p.dur_steps(o, at))
        return got


def _cpsat(problem: ScheduleProblem, jobs: list[ScheduleJob], hint: dict[str, Planned],
           deadline: float, seed: int, workers: int, work_s: float | None,
           clock: Callable[[], float]):
    """CP-SAT over ``jobs``; the search ends at ``deadline`` (a ``clock()`` value), and
    with ``work_s`` after that much deterministic time (then a search the wall deadline cut
    first returns status ``ceiling``: its solution depends on the machine's speed)."""
    from ortools.sat.python import cp_model

    model = _Model(problem)
    for j in jobs:
        model.job(j, hint.get(j.name))
    model.capacity(model.gpus, problem.busy, lambda p: p.capacity, "b")
    model.capacity(model.nodes, problem.node_busy, lambda p: p.whole_nodes, "nb")
    model.m.Minimize(sum(model.obj))
    solver = cp_model.CpSolver()
    left = deadline - clock()
    if left < 0.01:
        return None, None, "none" if work_s is None else "ceiling"
    solver.parameters.max_time_in_seconds = left
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    if work_s is not None:
        work_s = max(1e-3, work_s)
        solver.parameters.max_deterministic_time = work_s
    st = solver.Solve(model.m)
    if work_s is not None and st != cp_model.OPTIMAL and cut_by_wall(
            solver.wall_time, solver.deterministic_time, left, work_s):
        return None, None, "ceiling"  # cut by the wall ceiling, not by its work limit
    if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None, None, "none"
    bound = int(math.ceil(solver.BestObjectiveBound() - 1e-6))
    return (model.solution(solver, jobs), bound,
            "optimal" if st == cp_model.OPTIMAL else "feasible")


def _objective_of(problem: ScheduleProblem, entries: dict[str, Planned],
                  names: set[str]) -> int:
    H = problem.steps
    return problem.objective_value({n: (e.option, e.start_step) if e.start_step is not None
                                    and e.start_step < H else None
                                    for n, e in entries.items() if n in names}, names)


def _search(problem: ScheduleProblem, order: list[ScheduleJob], head: list[ScheduleJob],
            greedy: dict[str, Planned], greedy_s: float, end: float, budget_s: float,
            work_s: float | None, seed: int, workers: int, notes: list[str],
            clock: Callable[[], float]):
    """CP-SAT over the window ``head`` hinted with the list schedule ``greedy`` (the round
    ends at ``end``, a ``clock()`` value): (entries, status, bound, the window as
    searched, the list schedule's objective over it)."""
    # kept back: the list schedule around CP-SAT's solution (as long as the first one
    # took) and the objective's evaluation
    deadline = end - 1.2 * greedy_s - 0.01
    left = deadline - clock()
    if work_s is not None:  # no cut by the time left: the caller sizes the window
        deadline, left = end, budget_s
    # the model's build is outside CP-SAT's deadline: a window whose build would take
    # more than half of what is left is cut to fit (the rest is list scheduled)
    fit = int(0.5 * left / BUILD_S_PER_JOB) if work_s is None else len(head)
    if fit < len(head):
        fit = max(fit, MIN_WINDOW if left > 0.1 else 0)
        head = head[:max(0, fit)]
        notes.append(f"CP-SAT window cut to {len(head)} jobs (its build would not fit "
                     "in the budget)")
    names = {j.name for j in head}
    g_obj = _objective_of(problem, greedy, names)
    got, bound, st = None, None, "none"
    if left > 0.01 and head:
        got, bound, st = _cpsat(problem, head, greedy, deadline, seed, workers, work_s,
                                 clock)
    if got is None:
        notes.append("CP-SAT stopped by the wall ceiling before its work limit: the "
                     "list schedule" if st == "ceiling" else
                     "CP-SAT found no solution within the budget" if left > 0.01 and head
                     else "no budget left for CP-SAT after the list schedule")
        return greedy, "fallback", bound, head, g_obj
    c_obj = _objective_of(problem, got, names)
    if c_obj > g_obj:
        notes.append(f"CP-SAT's solution ({c_obj}) no better than the list schedule's "
                     f"({g_obj})")
        return greedy, "fallback", bound, head, g_obj
    return list_schedule(problem, order, fixed=got), st, bound, head, g_obj


def _fill(problem: ScheduleProblem, entries: dict[str, Planned], order: list[ScheduleJob],
          status: str, margin: float, spent: bool, notes: list[str], reserved: bool = False
          ) -> tuple[dict[str, Planned], str]:
    """The work-conserving fill of ``entries`` (:func:`fill_now`) unless the wall budget is
    ``spent``; with the status it leaves."""
    if spent:
        notes.append("no time left for the work-conserving fill")  # wall clock: the budget
        return entries, status
    entries, filled = fill_now(problem, entries, order, set(problem.reservations), margin,
                               reserved)
    if filled:
        notes.append(f"{filled} jobs started now by the work-conserving fill")
        if status == "optimal":  # the filled schedule is not the proven optimum
            status = "feasible"
    return entries, status


def solve_schedule(problem: ScheduleProblem, *, budget_s: float = 1.0, window: int = 200,
                   solver: str = "cpsat", seed: int = 0, workers: int = 1,
                   work_s: float | None = None, fill: float | None = None,
                   clock: Callable[[], float] | None = None,
                   fill_reserved: bool = False) -> ScheduleResult:
    """The schedule of every pending job of ``problem`` (module docstring).

    ``work_s``: limit CP-SAT by that much *deterministic* time (OR-Tools' work units; the
    engine's rate: :data:`hyperplace.sim.planning.WORK_PER_S`) instead of the wall clock, and
    do not cut the window by the time left (the caller sizes it): the schedule then does not
    depend on the machine's load. ``budget_s`` stays the wall ceiling: a search it cuts
    first is discarded for the list schedule (status ``fallback``, the note says "wall
    ceiling").

    ``fill``: then the work-conserving fill with that margin (:func:`fill_now`); under the
    wall clock only when the budget is not spent yet (the note says so); ``fill_reserved``:
    the fill may start reserved jobs now too (:func:`fill_now`'s ``reserved``).

    ``clock``: the wall clock every deadline of the round is read on, in seconds (None:
    ``time.perf_counter`` as it is when called; a test passes one that jumps, to reach the
    ceiling at a chosen point); CP-SAT's own time limit is the seconds this clock leaves
    it."""
    if solver not in ("cpsat", "greedy", "auto"):
        raise ValueError(f"schedule solver must be 'cpsat', 'greedy' or 'auto', got {solver!r}")
    clock = clock or time.perf_counter
    t0 = clock()
    order = list_order(problem)
    schedulable = [j for j in order if j.options]
    tg = clock()
    greedy = list_schedule(problem, order)
    greedy_s = clock() - tg
    head = schedulable[:window] if window > 0 else []
    names = {j.name for j in head}
    g_obj = _objective_of(problem, greedy, names)
    notes: list[str] = []
    status, bound, entries = "greedy", None, greedy
    if solver != "greedy" and head:
        entries, status, bound, head, g_obj = _search(
            problem, order, head, greedy, greedy_s, t0 + budget_s, budget_s, work_s, seed,
            workers, notes, clock)
        names = {j.name for j in head}
    if len(schedulable) > len(head):
        notes.append(f"{len(schedulable) - len(head)} jobs beyond the window of {window} "
                     "list scheduled around it")
        if status == "optimal":
            # proven for the window's jobs only: the schedule as a whole is not
            status = "feasible"
            notes.append(f"CP-SAT proved the window of {len(head)} jobs optimal")
    if fill is not None:
        entries, status = _fill(problem, entries, order, status, fill,
                                work_s is None and clock() - t0 > budget_s, notes,
                                fill_reserved)
    obj = _objective_of(problem, entries, names)
    if bound is not None and status == "fallback":
        bound = min(bound, obj)
    return ScheduleResult(problem=problem, entries=entries, status=status, objective=obj,
                          bound=bound, solve_s=clock() - t0, modelled=len(head),
                          greedy_objective=g_obj, notes=notes)


def duration_words(s: float) -> str:
    s = int(round(s))
    if s < 60:
        return f"{s}s"
    h, m = divmod(s // 60, 60)
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h" if d else f"{h}h{m:02d}m" if h else f"{m}m"


def forecasts(result: ScheduleResult, clock: float | None = None) -> list:
    """Per job of the problem its :class:`~hyperplace.models.plan.Forecast` (module docstring
    of the formulation): start window (seconds from now), pool, and a line to show.

    ``clock``: the wall-clock epoch seconds of the problem's ``now``; the line then says
    "about 14:20 UTC" too."""
    import datetime as _dt

    from hyperplace.models.plan import Forecast

    p = result.problem
    out = []
    for j in p.jobs:
        e = result.entries.get(j.name)
        if e is None or e.start_step is None:
            why = j.reason or (f"no start within {GREEDY_SPAN} horizons of "
                               f"{duration_words(p.horizon_s)}")
            out.append(Forecast(job=j.name, gpus=j.gpus, text=f"not planned: {why}"))
            continue
        pool = p.pools[e.pool]
        lo = p.time_of(e.start_step) - p.now
        hi = p.time_of(e.start_step + 1) - p.now
        where = (f"{j.gpus} {pool.gpu_type or 'GPUs of mixed types'}"
                 + (f" in {pool.level} {pool.domain}" if pool.domain else
                    f" in cluster {pool.cluster}"))
        if e.start_step == 0:
            when = "now"
        else:
            when = f"in {duration_words(lo)}-{duration_words(hi)}"
            if clock is not None:
                at = _dt.datetime.fromtimestamp(clock + lo, _dt.timezone.utc)
                when = f"about {at:%H:%M} UTC ({when})"
        out.append(Forecast(job=j.name, earliest_s=lo, latest_s=hi, gpus=j.gpus,
                            gpu_type=pool.gpu_type, domain=pool.domain, pool=pool.name,
                            starts_now=e.start_step == 0, text=f"{when}, {where}"))
    return out


def slots(result: ScheduleResult) -> list:
    """The schedule as :class:`~hyperplace.check.schedule.SlotView` rows for the checker."""
    from hyperplace.check.schedule import SlotView

    p = result.problem
    out = []
    for j in p.jobs:
        e = result.entries.get(j.name)
        if e is None:
            continue
        if e.start_step is None:
            out.append(SlotView(j.name, frozenset(), None, None, None))
            continue
        pool = p.pools[e.pool]
        out.append(SlotView(j.name, frozenset(pool.nodes), pool.gpu_type,
                            p.time_of(e.start_step),
                            p.time_of(e.start_step + e.duration_steps)))
    return out
