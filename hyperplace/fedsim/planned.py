"""The federation engine over time (``engine-federated``): the planning engine's schedule of
one global queue over every member cluster, and a split across members for a job that the
schedule leaves waiting when splitting finishes it sooner.

Each round:

1. :class:`~hyperplace.sim.planning.PlanningEngine` (the single-cluster engine, policy
   ``engine``) plans the global queue: its pools are per member cluster (a job's options
   are whole in one member), so the schedule decides *which member and when* for every
   job, with reservations, the fill between rounds and the placement of what starts now
   exactly as on one cluster;
2. then the **split pass** (``split=True``): the first :data:`SPLIT_TRIES` multi-node jobs
   in the schedule's list order that it leaves waiting (planned later, or not at all: no
   member holds them whole) are offered, one at a time, to a federation round
   (:func:`hyperplace.federation.federate`: pipeline stages or data-parallel replicas over
   the members, priced by the layer-split cost model, every member's part verified by the
   placement engine) on **only the GPUs the schedule leaves free over the split's run**:
   per member and per pool directly under its root, no more whole nodes than the rest of the
   schedule (its starts now, its reservations and planned later starts) leaves there over
   that run (:func:`~hyperplace.sim.planning.pool_allowance`, the rule the engine's own
   placement follows). A proposed split starts only if its predicted completion, ``now +
   remaining / split speed`` (:func:`~hyperplace.fedsim.common.split_speed`), is earlier
   than the schedule's own planned completion of the job whole (its planned start plus its
   planned run on that option; never when it is not planned), and only if the split's GPUs
   keep every other entry of the schedule feasible at its pool and time over the split's
   own run (priced after the round: a split is slower than the whole job on its best
   type): the GPUs and whole nodes of every pool of the laminar tree at every step,
   :meth:`FederatedEngine._fits_schedule`; the allowance above only narrows what the round
   is offered. At most one split starts a round.

   Under the work clock (the replays' default) the pass tries its :data:`SPLIT_TRIES` jobs
   whatever the wall time; the federation round itself has wall-clock deadlines (its
   budget, the round's), which a one-job round meets by proof on the bench's instances, so
   a replay depends on the machine's load only if one of them runs out.

``split=False`` (``engine-federated-whole``, ``simulate --no-federation-split``) is step 1
alone: the planning engine on the global queue.

Why this engine and not the federation round alone (:class:`~hyperplace.fedsim.engine.
RoundFederatedEngine`, kept as the baseline ``engine-federated-rounds``): measured on the
bench's federation cells (seed-beijing-shanghai, Karmada's divisions at every event, main
a7e942a), the round engine lost to Karmada on the Philly sample at 0.8 (mean JCT 1.89x, wait
2.41x) while the planning engine on one global queue had JCT 0.495x and wait 0.270x; the
round engine decides nothing about *when* (no schedule, one reservation).

A split job holds its GPUs in every member it spans until it ends; the next round's schedule
sees it as a running job on those GPUs to its predicted end. Every round's member-cluster
plans of a split go through the independent checker (``schedule_violations``, with the
schedule's own checker).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter

import numpy as np

from hyperplace.check import Violation
from hyperplace.federation import federate
from hyperplace.federation.asplaced import sub_job_name
from hyperplace.federation.problem import FederationProblem
from hyperplace.fedsim.common import (
    SplitPricing,
    require_federation,
    split_speed,
    violations,
)
from hyperplace.fedsim.engine import MAX_SLOWDOWN, MAX_SPLIT_NOTES, SplitRecord, checked_part, \
    split_parts
from hyperplace.models import Instance
from hyperplace.sim.planning import PlanningEngine, masked_instance, pool_allowance
from hyperplace.sim.policies import Decision, RoundView

#: Jobs offered to the split pass a round (each is one federation round of one job).
SPLIT_TRIES = 2
GPU = tuple[str, int]


#: ``make_room`` (hyperplace.sim.planning.MAKE_ROOM, on for ``engine``) is off here unless the
#: replay sets it (``SimConfig.engine_make_room``): measured on the federation's cells it
#: loses (figures beside MAKE_ROOM).
FEDERATED_MAKE_ROOM = False


class FederatedEngine(SplitPricing, PlanningEngine):
    """``engine-federated`` (``engine-federated-whole`` with splits off); module docstring.
    ``planning``: the :class:`~hyperplace.sim.planning.PlanningEngine` keywords (the
    replay's schedule settings, as for ``engine``)."""

    def __init__(self, instance: Instance, *, budget_s: float = 1.0, split: bool = True,
                 solver: str = "auto", seed: int = 0, planning: dict | None = None):
        require_federation(instance)
        super().__init__(solver=solver, budget_s=budget_s, seed=seed,
                         **{"make_room": FEDERATED_MAKE_ROOM, **(planning or {})})
        self.instance = instance
        self.name = "engine-federated" if split else "engine-federated-whole"
        self.split_on = split
        self.fed_solver = solver if solver in ("auto", "cpsat", "greedy") else "auto"
        self.init_pricing(instance)
        self.node_max = max(n.gpu_count for c in instance.clusters for n in c.nodes)
        self.stats = {"priced_as_default": 0, "rounds": 0, "splits_started": 0,
                      "splits_refused": 0, "splits_tried": 0, "splits_outside_allowance": 0}

    # ---- hooks the simulator reads -----------------------------------------------------
    def schedule_violations(self, now: float) -> list[Violation]:
        return [*super().schedule_violations(now), *violations(self._checks)]

    def notes(self) -> list[str]:
        s = self.stats
        head = (f"{self.name}: the planning engine on one global queue over the member "
                f"clusters, {s['rounds']} rounds")
        if self.split_on:
            head += (f"; {s['splits_started']} job start(s) split across member clusters, "
                     f"{s['splits_refused']} proposed split(s) refused (the schedule's whole "
                     f"start finishes sooner), {s['splits_outside_allowance']} outside what "
                     f"the schedule leaves free over their run, {s['splits_tried']} offered; "
                     f"{s['priced_as_default']} job(s) priced as the default model for their "
                     "GPU count (the drawn model does not fit their memory)")
        more = len(self.splits) - MAX_SPLIT_NOTES
        return [head, *super().notes(), *(r.describe() for r in self.splits[:MAX_SPLIT_NOTES]),
                *([f"... and {more} more split(s)"] if more > 0 else [])]

    # ---- a round ----------------------------------------------------------------------
    def _decide(self, view: RoundView, between: bool = False) -> Decision:
        self._checks = []
        decision = super()._decide(view, between)
        if between:
            return decision
        self.stats["rounds"] += 1
        if not self.split_on or self.last is None:
            return decision
        return self._split_pass(view, decision)

    def _split_pass(self, view: RoundView, decision: Decision) -> Decision:
        from hyperplace.solvers.schedule import list_order

        assert self.fs is not None, "the simulator builds the speed model first"
        t0 = time.perf_counter()
        result = self.last
        problem = result.problem
        by_name = {j.name: j for j in view.queue}
        tried = 0
        state = view.state
        taken = []
        try:
            for n, units in decision.starts.items():
                # a start on stopped jobs' GPUs (make_room) holds only its free ones here:
                # the stopped jobs' GPUs are still theirs in the state until the round ends
                state.allocate(n, [g for u in units.values() for g in u
                                   if g[1] in state.free_gpus(g[0])])
                taken.append(n)
            for sj in list_order(problem):
                if tried >= SPLIT_TRIES or (self.clock != "work" and
                                            time.perf_counter() - t0 > self.budget_s):
                    break
                e = result.entries.get(sj.name)
                if sj.name in decision.starts or sj.gpus <= self.node_max or e is None \
                        or e.start_step == 0:
                    continue
                job = by_name[sj.name]
                rem = view.remaining_work.get(job.name, job.predicted_s)
                if e.start_step is None or e.option is None:
                    whole_end = math.inf
                else:
                    whole_end = result.start_s(sj.name) + sj.options[e.option].duration_s
                free = {nd: state.free_gpus(nd) for nd in state.nodes}
                if sum(len(g) for g in free.values()) < job.gpus:
                    continue
                tried += 1
                self.stats["splits_tried"] += 1
                got = self._try_split(view, job, sj, rem, whole_end, e, free, decision)
                if got is not None:
                    decision = self._with_split(view, decision, job.name, got)
                    break
        finally:
            for n in taken:
                state.release(n)
        return dataclasses.replace(decision,
                                   solve_s=decision.solve_s + time.perf_counter() - t0)

    def _fits_schedule(self, name: str, gpus: list[GPU], length: int, decision: Decision
                       ) -> bool:
        """Whether every other entry of the round's schedule still fits at its pool and
        time with the split holding ``gpus`` over steps ``[0, length)``: the GPUs and whole
        nodes of every pool, checked on the laminar pool tree at every step (the exact test;
        :meth:`_allowed` only narrows what the federation round is offered). Jobs the round
        started outside the schedule (the idle-cluster placement) hold their GPUs over the
        whole span. A pool the schedule already over-fills (a job the placement held, counted
        by the schedule) may not be over-filled more."""
        from hyperplace.formulations.schedule import leaf_pool_of
        from hyperplace.solvers.schedule import Profile

        result = self.last
        problem = result.problem
        leaf = leaf_pool_of(problem.pools)
        scheduled_now = set(result.starts_now())

        def per_pool(held: list[GPU]) -> tuple[Counter, Counter]:
            # GPUs and nodes per leaf pool (a node in no pool has no usable GPU the
            # schedule plans on: nothing to count)
            on = [(leaf[nd], nd) for nd, _ in held if nd in leaf]
            return Counter(p for p, _ in on), Counter(p for p, _ in set(on))

        extra: dict[int, list[int]] = {}
        for n, units in decision.starts.items():
            if n in scheduled_now:
                continue
            g_by, n_by = per_pool([g for u in units.values() for g in u])
            for pid in g_by:
                e = extra.setdefault(pid, [0, 0])
                e[0] += g_by[pid]
                e[1] += n_by[pid]

        def profile(with_split: bool) -> Profile:
            prof = Profile(problem, length + 1)
            add = {pid: list(v) for pid, v in extra.items()}
            if with_split:
                g_by, n_by = per_pool(gpus)
                for pid in g_by:
                    e = add.setdefault(pid, [0, 0])
                    e[0] += g_by[pid]
                    e[1] += n_by[pid]
            for pid, (g, k) in add.items():
                prof.take(pid, g, 0, length, k)
            return prof.book(result, lambda n: n == name, length)

        def over(prof: Profile):
            return (np.maximum(0, prof.used - prof.cap[:, None]),
                    np.maximum(0, prof.nused - prof.ncap[:, None]))

        (bu, bn), (wu, wn) = over(profile(False)), over(profile(True))
        return bool((wu <= bu).all() and (wn <= bn).all())

    def _allowed(self, problem, name: str, length: int, free: dict[str, list[int]]
                 ) -> dict[str, set[int] | None]:
        """Per node the GPUs the rest of the schedule leaves free over ``length`` steps in
        every member cluster (whole nodes: a split's parts are gangs)."""
        state_sizes = {nd: len(free.get(nd, ())) for nd in free}
        sizes = {nd: self.instance.node_index[nd][1].gpu_count for nd in free}
        allowed: dict[str, set[int] | None] = {}
        for pool in problem.pools:
            if pool.parent is not None:
                continue
            got = pool_allowance(problem, self.last, [name], pool.id, True, free, sizes,
                                 length=length)
            allowed.update({nd: (set(range(sizes[nd])) if v is None and state_sizes[nd] ==
                                 sizes[nd] else (set() if v is None else v))
                            for nd, v in got.items()})
        return allowed

    def _try_split(self, view: RoundView, job, sj, rem: float, whole_end: float,
                   entry, free: dict[str, list[int]], decision: Decision):
        """One federation round of ``job`` on what the schedule leaves free: (unit -> GPUs,
        speed, record, checks) of a split that finishes sooner than the schedule's plan, or
        None."""
        problem = self.last.problem
        name = sj.name
        # the allowance over the job's planned run (a split runs at most as fast): checked
        # exactly over the split's own run once it is priced (_fits_schedule)
        guess = max(entry.duration_steps, 1) if entry.start_step is not None else \
            (max(1, math.ceil(sj.best_s / problem.step_s)) if math.isfinite(sj.best_s) else 1)
        allowed = self._allowed(problem, name, guess, free)
        if sum(len(v or ()) for v in allowed.values()) < job.gpus:
            return None
        fjob = dataclasses.replace(self.priced_form(job.manifest), max_domains=None)
        got = self._federated(view, job, fjob, allowed)
        if got is None:
            return None
        jp, placements, by_cluster = got
        speed, _ = split_speed(self.fs, self.pricer, fjob, job.manifest, by_cluster,
                               jp.predicted.step_time_s)
        t_split = rem / speed if speed > 0 else math.inf
        if not view.now + t_split < whole_end:
            self.stats["splits_refused"] += 1
            return None
        length = max(1, math.ceil((t_split + view.now - problem.origin) / problem.step_s))
        gpus = [g for units in by_cluster.values() for gs in units.values() for g in gs]
        if not self._fits_schedule(name, gpus, length, decision):
            self.stats["splits_outside_allowance"] += 1
            return None
        started = {sub_job_name(fjob, cl) for cl in by_cluster}
        checks = [checked_part(self.name, cl, cp, started) for cl, cp in
                  sorted(placements.items()) if cl in by_cluster]
        record = SplitRecord(job=name, at_s=view.now, shape=str(jp.shape),
                             parts=split_parts(jp), predicted_split_s=t_split,
                             predicted_whole_s=whole_end - view.now)
        units = {f"{cl}:{u}": g for cl, us in by_cluster.items() for u, g in us.items()}
        return units, speed, record, checks

    def _federated(self, view: RoundView, job, fjob, allowed: dict[str, set[int] | None]):
        """One federation round of ``job`` alone on the ``allowed`` GPUs: (its planned job,
        the members' placements, cluster -> unit -> GPUs) when it splits, else None."""
        inst = masked_instance(view.state.instance([job.manifest]), allowed)
        placements: dict = {}
        plan = federate(FederationProblem(instance=inst, jobs=[fjob], max_slowdown=MAX_SLOWDOWN),
                        budget_s=self.budget_s, solver=self.fed_solver, seed=self.seed,
                        placements_out=placements, pricer=self.pricer, compare=False)
        jp = next((p for p in plan.jobs if p.job == fjob.name), None)
        if jp is None or len(jp.clusters) < 2:
            return None
        by_cluster: dict[str, dict[str, list[GPU]]] = {}
        for cl in jp.clusters:
            sub = sub_job_name(fjob, cl)
            for p in placements[cl].plan.placements:
                if p.job == sub:
                    by_cluster.setdefault(cl, {})[p.unit] = [(g.node, g.gpu) for g in p.gpus]
        return jp, placements, by_cluster

    def _with_split(self, view: RoundView, decision: Decision, name: str, got) -> Decision:
        """``decision`` with the split start of ``name`` added."""
        units, speed, record, checks = got
        self.fs.split[name] = speed
        self.splits.append(record)
        self.stats["splits_started"] += 1
        self._checks = checks
        self._reserved.pop(name, None)
        self._plan.pop(name, None)
        self._fill_started.append((view.now, name))  # the calibration learns it next round
        self._shown.pop(name, None)  # it has started: no forecast is shown for it
        self._windows.pop(name, None)
        plan = decision.plan
        pending = [p.model_copy(update={"reasons": [
            "started across the member clusters: see the per-cluster plans"]})
            if p.job == name else p for p in plan.pending]
        plan = plan.model_copy(update={"pending": pending,
                                       "forecasts": [f for f in plan.forecasts
                                                     if f.job != name]})
        return dataclasses.replace(decision, starts={**decision.starts, name: units},
                                   plan=plan)
