"""Scheduling policies for rounds: the engine and the peers' queueing disciplines.

Every policy answers one question per round: given the cluster state, the waiting queue
(in submit order; a job re-queued after a failure keeps its place) and the running jobs,
which waiting jobs start now and on which GPUs. Running jobs keep their GPUs.

Peers, each with its own per-job placement rule (:mod:`hyperplace.sim.peers`) and its
*queueing discipline* re-implemented from source:

* ``fifo``: plain FIFO, head-of-line blocking: jobs start in order until the first that does
  not fit; placement by Slurm's tree rule (first fit on the lowest switch that holds the job).
* ``kueue-strict`` (Kueue ``StrictFIFO``): the head blocks; a workload that does not fit is
  requeued *immediately* into the heap (kubernetes-sigs/kueue
  ``pkg/cache/queue/cluster_queue.go`` ``RequeueIfNotPresent``, lines 826-830: StrictFIFO
  requeues with ``immediate``), so it stays the head and nothing behind it is admitted
  (``apis/kueue/v1beta1/clusterqueue_types.go`` lines 165-170: "Older workloads that can't be
  admitted will block admitting newer workloads even if they fit").
* ``kueue`` (Kueue ``BestEffortFIFO``): a workload that does not fit goes to
  ``inadmissibleWorkloads`` and the next one is tried (``cluster_queue.go``
  ``requeueIfNotPresent``, line 550 on; types lines 171-175: "older workloads that can't be
  admitted will not block admitting newer workloads that fit"); inadmissible workloads come
  back when the cluster changes (``QueueInadmissibleWorkloads``), i.e. the next round here.
  Placement by Kueue TAS's rule.
* ``volcano``: the ``allocate`` action pops jobs by priority then creation time
  (volcano-sh/volcano ``pkg/scheduler/framework/session_plugins.go`` ``JobOrderFn``, lines
  737-749), places each gang or discards its statement and goes on to the next job
  (``pkg/scheduler/actions/allocate/allocate.go`` lines 286-330, ``stmt.Discard()`` at 429:
  no head-of-line blocking, no reservation). The ``backfill`` action then places only
  BestEffort tasks (``pkg/scheduler/actions/backfill/backfill.go`` line 141: ``if
  !task.BestEffort { continue }``); a GPU job requests resources, so it is a no-op here.
  Placement by Volcano's HyperNode tier walk with binpack.
* ``volcano-proportion``: Volcano's ``allocate`` with the ``proportion`` plugin, the queue-aware
  discipline (volcano-sh/volcano at commit ed72c7c): each session every queue's *deserved*
  GPUs are the cluster's GPUs shared by weight among queues, capped by what each requests
  (allocated + pending) and raised to its guarantee
  (``pkg/scheduler/plugins/proportion/proportion.go`` lines 199-266: a weighted water-fill);
  queues are visited lowest ``share = allocated / deserved`` first (``QueueOrderFn``, lines
  268-286; ``helpers.Share``, ``pkg/scheduler/api/helpers/helpers.go`` line 80), a queue with
  ``deserved <= allocated`` is skipped (``AddOverusedFn``, lines 321-333; ``allocate.go``
  line 294), one job is popped per visit (priority, then creation time) and placed only if
  ``allocated + its GPUs <= deserved`` (``queueAllocatable``, lines 335-357), and the queue
  goes back with its share updated (``allocate.go`` line 366). Placement by Volcano's
  HyperNode tier walk with binpack. It has no memory across sessions: the share is of
  what runs now. Declared quotas (nominal + borrowing within a cohort, the same
  :class:`~hyperplace.formulations.placement.quotas.QuotaBook` rows the engine's model has)
  are kept too: a placement that would break one is undone and the job waits, so both
  keep the operator's quotas. The other peers are queue-unaware.
* ``slurm``: the backfill scheduler (SchedMD/slurm ``src/plugins/sched/backfill/backfill.c``
  at commit 284c3b9) as a competent site configures it: jobs in **multifactor priority**
  order (age, job size and fair share, equal weights, :meth:`SlurmBackfill.priority`,
  ``src/plugins/priority/multifactor/priority_multifactor.c`` L2151-2215, L630-646); each
  job that cannot start now gets a reservation at its earliest start time on the nodes it
  would get then (``_add_reservation`` at line 3851), as long as that time is inside
  ``bf_window``, set to **at least the longest time limit** of the round (the slurm.conf
  man page's advice; the default is one day, line 104; later jobs get none, lines
  3700-3716); a reservation holds **whole nodes** (the node bitmap is removed from the
  window's availability, ``bit_and_not`` at line 4233); a later job starts now only if it
  fits on what is free *and* not reserved over its whole run (``_test_resv_overlap``, line
  3722). Running jobs are expected to end at their start plus their time limit
  (``_set_slot_time``, lines 1973-1977); at most ``bf_max_job_test`` = 500 jobs are tried
  per cycle (line 116). The user's time limit is the job's *predicted* run time on the
  slowest GPU type it accepts times :data:`SLURM_OVERESTIMATE` (users over-estimate:
  Tsafrir, Etsion and Feitelson, "Backfilling using system-generated predictions rather
  than user runtime estimates", IEEE TPDS 2007, report most estimates several times the
  actual run time; 2.0 is our documented choice). A job that overruns its limit is
  expected to end one ``bf_resolution`` (60 s, line 103) from now; it is not killed.
  Placement by Slurm's tree rule, with ``max_switch_wait`` (300 s) for ``--switches``.
* ``slurm-default`` (a named weaker variant, not in the default comparisons): the same
  backfill as shipped: ``bf_window`` one day, first come first served, reservations of
  only the GPUs a job needs.

**Cadence** (``SimConfig.cadence``, default ``upstream``): each peer decides as often as it
does upstream: Kueue (and ``kueue-strict``, ``fifo``) at every event (:data:`KUEUE_CADENCE_S`),
Volcano every second (:data:`VOLCANO_CADENCE_S`), Slurm's backfill cycle every 30 s
(:data:`SLURM_BACKFILL_S`) with its main scheduler at every submission and job end
(:meth:`SlurmBackfill.fill_between`: priority order, stopping at the first job that cannot
start). ``uniform`` puts every policy on the replay's ``round_s`` (60 s), as every replay
before 2026-12-03 did (but for :meth:`SlurmBackfill.wake_s`; review R32: 60 s rounds gave
Kueue 265 bubble GPU-hours on Alibaba x2 at 0.8, 13 at 1 s, 0.4 at every event).

The queue policies (``fifo``, ``kueue``, ``kueue-strict``, ``volcano``) walk the queue in
priority order, then submit time: Kueue's ``baseCompareFunc`` (kubernetes-sigs/kueue at
ff69552 ``pkg/cache/queue/cluster_queue.go`` L857-870: effective priority, then the queue
order timestamp) and Volcano's ``JobOrderFn`` (``session_plugins.go`` L737).

The engine (``engine``): the pending window (the ``window`` highest-priority jobs) solved at
once by :func:`~hyperplace.solvers.driver.solve_placement` within the round's budget. The
queue discipline enters as priorities, which the engine honours strictly (it never leaves a
job out so that lower-priority jobs can run in its place): one level per ``aging_s``
waited, plus a short-job bonus from the predicted run time (shortest predicted job first,
:class:`EnginePolicy`), and an EASY-style reservation for the longest-waiting job that does not fit
(:func:`drain_for_head`). Predicted run times are the simulation's speed
model applied to the job's work, the figure a controller would take from the cost model or
the user. With ``wait=True`` (``engine-wait``) the engine may also hold a job back when its
predicted completion is earlier by waiting for faster GPUs (:func:`hold_for_faster`).
"""

from __future__ import annotations

import bisect
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from hyperplace.baselines.common import FreeState, JobOutcome, build_plan
from hyperplace.models import Instance, PlacementPlan, TrainingJob
from hyperplace.models.plan import GPURef
from hyperplace.sim.jobs import SimJob
from hyperplace.sim.peers import PeerPlacer
from hyperplace.sim.speed import SpeedModel
from hyperplace.sim.state import GPU, ClusterState
from hyperplace.solvers.driver import solve_placement
from hyperplace.solvers.workflows.session import preload_backends
from hyperplace.solvers.heuristics.warm import WarmStart

SLURM_OVERESTIMATE = 2.0
BF_RESOLUTION_S = 60.0
BF_WINDOW_S = 24 * 3600.0
BF_MAX_JOB_TEST = 500
#: bytes of free-count keys :meth:`SlurmBackfill._outcome`'s memo holds before it starts
#: afresh (two bytes per node a job accepts: 256 B a key on 128 nodes, 32 KB on 16,384)
OUTCOME_CACHE_BYTES = 64 * 2 ** 20
# Slurm multifactor priority as a site configures it (priority/multifactor): age, job size
# and fair share, equal weights; PriorityMaxAge is Slurm's default, 7 days
PRIORITY_WEIGHT_AGE = 1000
PRIORITY_WEIGHT_JOB_SIZE = 1000
PRIORITY_WEIGHT_FAIRSHARE = 1000
PRIORITY_MAX_AGE_S = 7 * 24 * 3600.0
# predicted run times under which the engine's short-job bonus adds one priority level each
SHORT_THRESHOLDS_S = (3600.0, 6 * 3600.0, 24 * 3600.0)

PEER_POLICIES = ("fifo", "kueue-strict", "kueue", "volcano", "volcano-proportion", "slurm")
# weaker configurations, kept as named variants only (not in the default comparisons):
# slurm-default = backfill as configured out of the box (bf_window one day, first come
# first served, reservations of only the GPUs the job needs)
PEER_VARIANTS = ("slurm-default",)
POLICIES = ("engine", "engine-rounds", "engine-wait", *PEER_POLICIES, *PEER_VARIANTS)
ALIASES = {"fifo-firstfit": "fifo", "kueue-style": "kueue", "kueue-besteffort": "kueue",
           "kueue-strictfifo": "kueue-strict", "volcano-style": "volcano",
           "slurm-style": "slurm", "slurm-backfill": "slurm", "proportion": "volcano-proportion"}


def canonical_policy(name: str) -> str:
    key = ALIASES.get(name, name)
    if key not in POLICIES:
        raise ValueError(f"unknown policy {name!r}; use one of "
                         f"{', '.join([*POLICIES, *ALIASES])}")
    return key


@dataclass
class Running:
    job: SimJob
    start_s: float
    speed: float
    gpus: list[GPU]
    predicted_end_s: float
    limit_end_s: float


@dataclass
class RoundView:
    """What a policy sees in a round."""

    now: float
    state: ClusterState
    queue: list[SimJob]
    running: dict[str, Running]
    speed: SpeedModel
    remaining_work: dict[str, float]  # predicted (what a scheduler knows), not the true work


@dataclass
class Decision:
    starts: dict[str, dict[str, list[GPU]]]
    instance: Instance
    plan: PlacementPlan
    solve_s: float
    fallback: bool = False
    held: list[str] = field(default_factory=list)
    status: str = ""
    preempted: list[str] = field(default_factory=list)  # running jobs the plan stops
    migrated: list[str] = field(default_factory=list)  # running jobs it moves (in ``starts``)


# ---- cadence: how often each peer decides, as upstream runs it ---------------------------
# (SimConfig.cadence "upstream", the default; "uniform": every policy at the replay's round_s)
#: Kueue admits as workloads come: its scheduler is one loop over the queues' heads,
#: restarted at once after each cycle (kubernetes-sigs/kueue at ff69552
#: ``pkg/scheduler/scheduler.go`` L226 ``wait.UntilWithBackoff(ctx, s.schedule)``): a round at
#: every event (0)
KUEUE_CADENCE_S = 0.0
#: Volcano opens a session every ``--schedule-period``, one second by default
#: (volcano-sh/volcano at ed72c7c ``cmd/scheduler/app/options/options.go`` L37
#: ``defaultSchedulerPeriod = time.Second``)
VOLCANO_CADENCE_S = 1.0
#: Slurm's backfill cycle runs every ``bf_interval``, 30 s by default (SchedMD/slurm at
#: 284c3b9 ``src/plugins/sched/backfill/backfill.c`` L102 ``BACKFILL_INTERVAL 30``); its main
#: scheduler runs at every submission and job end besides (:meth:`SlurmBackfill.fill_between`)
SLURM_BACKFILL_S = 30.0


class Policy:
    name = "policy"
    #: seconds between this policy's rounds as upstream runs it (0: at every event; None:
    #: the replay's ``round_s``, the engine's)
    cadence_s: float | None = None
    #: also asked ``fill_between(view)`` at every event between its rounds
    fills_between_rounds = False
    #: checker codes of job rules this policy's upstream cannot express, so its starts may
    #: break them: a checked replay counts them (``JobRecord.rule_breaks``) instead of
    #: failing; every other rule still fails it
    tolerated: frozenset[str] = frozenset()

    def tolerates(self, code: str, job: SimJob | None, now: float) -> bool:
        """Whether a checked replay lets this policy's start of ``job`` break the checker
        rule ``code`` (a peer: its placement rule's :meth:`PeerPlacer.tolerates`)."""
        if code not in self.tolerated:
            return False
        placer = getattr(self, "placer", None)
        if isinstance(placer, PeerPlacer) and job is not None:
            return placer.tolerates(code, job.manifest, now - job.submit_s)
        return True

    def decide(self, view: RoundView) -> Decision:  # pragma: no cover - interface
        raise NotImplementedError


# ---- peers -------------------------------------------------------------------------------

def _plan(view: RoundView, solver: str, jobs: list[SimJob],
          starts: dict[str, dict[str, list[GPURef]]], runtime: float) -> tuple[Instance, PlacementPlan]:
    instance = view.state.instance([j.manifest for j in jobs])
    outcomes = {name: JobOutcome(units=units) for name, units in starts.items()}
    for j in jobs:
        outcomes.setdefault(j.name, JobOutcome(reasons=[f"{solver}: waiting in the queue"]))
    return instance, build_plan(instance, solver, outcomes, runtime)


def _as_gpus(units: dict[str, list[GPURef]]) -> dict[str, list[GPU]]:
    return {u: [(g.node, g.gpu) for g in gpus] for u, gpus in units.items()}


class QueuePolicy(Policy):
    """FIFO, Kueue StrictFIFO / BestEffortFIFO and Volcano allocate: one job at a time."""

    def __init__(self, name: str, instance: Instance, rule: str, blocking: bool, seed: int = 0):
        self.name = name
        self.placer = PeerPlacer(instance, rule, seed)
        self.tolerated = self.placer.tolerated
        self.blocking = blocking
        # fifo, kueue and kueue-strict decide at every event, volcano every second
        self.cadence_s = VOLCANO_CADENCE_S if rule == "volcano" else KUEUE_CADENCE_S

    def decide(self, view: RoundView) -> Decision:
        t0 = time.perf_counter()
        fs = self.placer.state(view.state.instance([j.manifest for j in view.queue]))
        fs.waited_s = {j.name: view.now - j.submit_s for j in view.queue}
        starts: dict[str, dict[str, list[GPURef]]] = {}
        # priority, then creation (submit) time: Kueue's queue order
        # (pkg/cache/queue/cluster_queue.go queueOrderingFunc), Volcano's JobOrderFn
        for job in sorted(view.queue, key=lambda j: (-j.manifest.priority, j.submit_s)):
            # a job that cannot fit by count is not asked (Kueue's rule: 255,687 place calls,
            # 40 of 44 s, of a 2,469-round replay at every event; decisions identical)
            got = (None if self.placer.cannot_fit(job.name, job.manifest, fs, job.gpus)
                   else self.placer.place(job.manifest, fs))
            if got is not None:
                starts[job.name] = got
            elif self.blocking:
                break
        solve_s = time.perf_counter() - t0
        inst, plan = _plan(view, self.name, view.queue, starts, solve_s)
        return Decision({k: _as_gpus(v) for k, v in starts.items()}, inst, plan, solve_s)


class ProportionPolicy(Policy):
    """Volcano ``allocate`` with the ``proportion`` plugin's queue order (module docstring)."""

    name = "volcano-proportion"
    cadence_s = VOLCANO_CADENCE_S

    def __init__(self, instance: Instance, seed: int = 0):
        self.placer = PeerPlacer(instance, "volcano", seed)
        self.tolerated = self.placer.tolerated

    def decide(self, view: RoundView) -> Decision:
        from hyperplace.formulations.placement.quotas import build_quota_book, water_fill

        t0 = time.perf_counter()
        round_instance = view.state.instance([j.manifest for j in view.queue])
        fs = self.placer.state(round_instance)
        book = build_quota_book(round_instance, [], {})
        admitted: dict[tuple[str, str], float] = {}
        qs = view.state.base.queue_set
        allocated: dict[str, float] = {}
        for r in view.running.values():
            allocated[r.job.queue] = allocated.get(r.job.queue, 0) + len(r.gpus)
        pending: dict[str, list[SimJob]] = {}
        for j in sorted(view.queue, key=lambda j: (-j.manifest.priority, j.submit_s)):
            pending.setdefault(j.queue, []).append(j)
        names = sorted(set(allocated) | set(pending))
        weight = {q: (qs.queues[q].weight if qs is not None and q in qs.queues else 1.0)
                  for q in names}
        guarantee = {q: (sum(x.nominal for x in qs.queues[q].quotas.values())
                         if qs is not None and q in qs.queues else 0.0) for q in names}
        request = {q: allocated.get(q, 0) + sum(j.gpus for j in pending.get(q, []))
                   for q in names}
        total = view.state.total_gpus - view.state.down_count()
        deserved = water_fill(total, request, weight)
        deserved = {q: max(deserved.get(q, 0.0), min(guarantee[q], request[q])) for q in names}

        def share(q: str) -> float:
            d, a = deserved[q], allocated.get(q, 0.0)
            return (0.0 if a == 0 else 1.0) if d == 0 else a / d

        starts: dict[str, dict[str, list[GPURef]]] = {}
        live = [q for q in names if pending.get(q)]
        while live:
            q = min(live, key=lambda x: (share(x), x))
            if deserved[q] <= allocated.get(q, 0.0) or not pending[q]:
                live.remove(q)  # overused, or nothing left to try
                continue
            job = pending[q].pop(0)
            if allocated.get(q, 0.0) + job.gpus <= deserved[q] + 1e-9:
                got = self.placer.place(job.manifest, fs)
                if got is not None and book.active:
                    new = dict(admitted)
                    for gpus in got.values():
                        for g in gpus:
                            gpu_type = view.state.nodes[g.node].gpu_type
                            for k, n in book.usage(q, gpu_type, 1).items():
                                new[k] = new.get(k, 0.0) + n
                    if not book.allows(new):  # over a quota: undo, the job waits
                        for gpus in got.values():
                            for g in gpus:
                                fs.release(g.node, [g.gpu])
                        got = None
                    else:
                        admitted = new
                if got is not None:
                    starts[job.name] = got
                    allocated[q] = allocated.get(q, 0.0) + job.gpus
        solve_s = time.perf_counter() - t0
        inst, plan = _plan(view, self.name, view.queue, starts, solve_s)
        return Decision({k: _as_gpus(v) for k, v in starts.items()}, inst, plan, solve_s)


def user_time_limit(job: SimJob, speed: SpeedModel, factor: float = SLURM_OVERESTIMATE) -> float:
    """The time limit a user would give Slurm: slowest accepted type's predicted run time x
    factor (the job's predicted work, as every policy sees it)."""
    return factor * job.predicted_s / max(speed.slowest_speed(job.manifest), 1e-9)


def _switch_limited(job: TrainingJob) -> bool:
    """Whether a hop limit of the job may become a ``--switches=1`` constraint (a superset of
    :func:`hyperplace.baselines.slurm.job_switch_limit` at most 1)."""
    hops = [job.between_replicas.max_hop_count, *(u.max_hop_count for u in job.units())]
    return any(h is not None and h <= 1 for h in hops)


class SlurmBackfill(Policy):
    """Slurm's backfill scheduler over node-level GPU counts (see the module docstring)."""

    name = "slurm"
    cadence_s = SLURM_BACKFILL_S  # the backfill cycle; the main scheduler at every event
    fills_between_rounds = True

    def __init__(self, instance: Instance, factor: float = SLURM_OVERESTIMATE,
                 window_s: float | None = None, max_job_test: int = BF_MAX_JOB_TEST,
                 seed: int = 0, multifactor: bool = True, whole_nodes: bool = True,
                 name: str = "slurm"):
        self.name = name
        self.placer = PeerPlacer(instance, "slurm", seed)
        self.tolerated = self.placer.tolerated
        self.factor = factor
        self.window_s = window_s  # None: at least the longest time limit (Slurm's advice)
        self.max_job_test = max_job_test
        self.multifactor = multifactor
        self.whole_nodes = whole_nodes
        self._limits: dict[str, float] = {}
        self._switch_due: list[float] = []  # when waiting --switches jobs may cross leaves
        self._switch_limited: dict[str, bool] = {}  # job name -> _switch_limited
        # the tree rule's outcome on given free counts (:meth:`_outcome`), kept across cycles
        self._shapes: dict[str, tuple] = {}
        self._outcomes: dict[tuple, dict[str, int] | None] = {}
        self._outcome_bytes = 0

    def eligible(self, job: SimJob) -> tuple[str, ...]:
        """Nodes of a GPU type the job accepts (its placement depends on their counts only)."""
        return self.placer.accepted_nodes(job.name, job.manifest)

    def priority(self, view: RoundView, job: SimJob) -> float:
        """Slurm's multifactor priority (``priority_multifactor.c`` L2151-2215, weights
        applied L630-646): ``W_age x min(age / PriorityMaxAge, 1) + W_size x GPUs /
        cluster GPUs`` (PriorityFavorSmall=NO: larger jobs rank higher, as by default)
        ``+ W_fairshare x F`` with ``F = 2 ** (-usage share / weight share)`` of the job's
        queue (its account) over the decayed usage history; one account: F is the same for
        every job. The manifest's priority class ranks first (a partition's PriorityTier)."""
        age = min(max(0.0, view.now - job.submit_s) / PRIORITY_MAX_AGE_S, 1.0)
        size = job.gpus / max(view.state.total_gpus, 1)
        fs = self._fair_share(view).get(job.queue, 1.0)
        return (PRIORITY_WEIGHT_AGE * age + PRIORITY_WEIGHT_JOB_SIZE * size
                + PRIORITY_WEIGHT_FAIRSHARE * fs)

    def _fair_share(self, view: RoundView) -> dict[str, float]:
        usage = view.state.queue_usage
        qs = view.state.base.queue_set
        if not usage or qs is None:
            return {}
        from hyperplace.models.usage import fair_share_factors

        weights = {q.name: q.weight for q in qs.queues.values()}
        for q in (*usage, *(j.queue for j in view.queue)):
            weights.setdefault(q, 1.0)
        return fair_share_factors(usage, weights)

    def ordered(self, view: RoundView) -> list[SimJob]:
        """The queue in Slurm's order: priority class, then multifactor priority, then
        submit time (``slurm-default``: first come first served)."""
        if not self.multifactor:
            return sorted(view.queue, key=lambda j: (-j.manifest.priority, j.submit_s))
        return sorted(view.queue, key=lambda j: (-j.manifest.priority,
                                                 -self.priority(view, j), j.submit_s))

    def wake_s(self, now: float) -> float | None:
        """When a waiting ``--switches`` job's ``max_switch_wait`` runs out (it may then run
        across leaves): Slurm's backfill cycle runs every 30 s whatever happens, so it starts
        the job at the next cycle after that, with no event to trigger a round here (the
        simulator rounds the time up to the cadence). None: no such job waits."""
        due = [t for t in self._switch_due if t > now]
        return min(due) if due else None

    def _note_switch_waits(self, view: RoundView) -> None:
        from hyperplace.baselines.slurm import MAX_SWITCH_WAIT_S

        limited = self._switch_limited
        for j in view.queue:  # once per job: this runs at every event
            if j.name not in limited:
                limited[j.name] = _switch_limited(j.manifest)
        self._switch_due = [j.submit_s + MAX_SWITCH_WAIT_S for j in view.queue
                            if view.now - j.submit_s < MAX_SWITCH_WAIT_S and limited[j.name]]

    def fill_between(self, view: RoundView) -> Decision:
        """Slurm's main scheduler between backfill cycles: ``schedule()`` runs at every
        submission and job end (SchedMD/slurm at 284c3b9 ``src/slurmctld/proc_req.c`` L3987
        ``queue_job_scheduler()`` in ``_slurm_rpc_submit_batch_job``; L2049 ``schedule(false)``
        in ``_slurm_rpc_epilog_complete``, L2051 queued instead in defer mode); it starts
        jobs in priority order on what is free now until the first that cannot start, which
        marks its partition ``PART_FLAG_SCHED_FAILED`` so that no later job of the
        partition starts (``src/slurmctld/job_scheduler.c`` L2075-2087; one partition here).
        It makes no reservations: the backfill cycle makes them afresh."""
        t0 = time.perf_counter()
        self._note_switch_waits(view)
        fs = self.placer.state(view.state.instance([j.manifest for j in view.queue]))
        fs.waited_s = {j.name: view.now - j.submit_s for j in view.queue}
        starts: dict[str, dict[str, list[GPURef]]] = {}
        for job in self.ordered(view):
            got = (None if self.placer.cannot_fit(job.name, job.manifest, fs, job.gpus)
                   else self.placer.place(job.manifest, fs))
            if got is None:
                break
            starts[job.name] = got
        solve_s = time.perf_counter() - t0
        inst, plan = _plan(view, self.name, view.queue, starts, solve_s)
        return Decision({k: _as_gpus(v) for k, v in starts.items()}, inst, plan, solve_s,
                        status="main")

    def _shape(self, job: SimJob, waited_s: float) -> tuple:
        """What the tree rule reads of a job besides the free counts
        (:func:`hyperplace.baselines.slurm.place_job`): its units' sizes, type selectors,
        memory and hop limits in order, the between-replica limit, and whether
        ``max_switch_wait`` has run out; the units' NVLink, IB and slice requests too, which
        the rule does not read (kept so that the key never depends on what it reads today).
        Per job name: a job's units do not change while it waits."""
        from hyperplace.baselines.slurm import MAX_SWITCH_WAIT_S

        shape = self._shapes.get(job.name)
        if shape is None:
            m = job.manifest
            shape = self._shapes[job.name] = (
                tuple((u.gpus, u.gpu_types, u.min_memory_gb, u.min_nvlink_gbps,
                       u.min_ib_gbps, u.max_hop_count, u.slice_pods) for u in m.units()),
                m.between_replicas.max_hop_count)
        return (*shape, waited_s >= MAX_SWITCH_WAIT_S)

    def _outcome(self, key: tuple[tuple, bytes],
                 place: Callable[[], dict[str, list[GPURef]] | None]
                 ) -> tuple[dict[str, int] | None, dict[str, list[GPURef]] | None]:
        """The nodes (node -> GPUs) the tree rule gives a job of this shape on these free
        counts of the nodes it accepts (``key``: :meth:`_shape` and the counts), or None if
        it cannot place the job, and the rule's answer when ``place()`` had to be asked (the
        pair was new; else None). The rule draws nothing at random and reads only the
        counts (its choice of leaves and nodes, :mod:`hyperplace.baselines.slurm`), so the
        answer is the same in every cycle: 80 % of a backfill cycle's placements on 8,000
        Philly jobs on the SuperPOD were pairs seen before, 90 % of them failures."""
        if key in self._outcomes:
            return self._outcomes[key], None
        got = place()
        per = _per_node(got) if got is not None else None
        if self._outcome_bytes + len(key[1]) > OUTCOME_CACHE_BYTES:
            self._outcomes.clear()
            self._outcome_bytes = 0
        self._outcomes[key] = per
        self._outcome_bytes += len(key[1])
        return per, got

    def _place_at(self, job: SimJob, now: bool, counts: np.ndarray, nodes: list[str],
                  free_now: dict[str, list[int]], base: FreeState, waited: dict[str, float]
                  ) -> dict[str, list[GPURef]] | None:
        """The tree rule on ``counts`` GPUs per node (in ``nodes`` order): now, the lowest
        of the GPUs free now; later, any as many."""
        have = dict(zip(nodes, counts.tolist()))
        if now:
            free = {n: free_now[n][:have[n]] for n in free_now}
        else:
            free = {n: list(range(have[n])) for n in free_now}
        fs = self.placer.state_from(base, free)
        fs.waited_s = waited
        return self.placer.place(job.manifest, fs)

    def limit(self, job: SimJob, speed: SpeedModel) -> float:
        if job.name not in self._limits:
            self._limits[job.name] = job.limit_s or user_time_limit(job, speed, self.factor)
        return self._limits[job.name]

    def decide(self, view: RoundView) -> Decision:
        t0 = time.perf_counter()
        self._note_switch_waits(view)
        now = view.now
        state = view.state
        round_instance = state.instance([j.manifest for j in view.queue])
        free_now = {n: state.free_gpus(n) for n in state.nodes}
        # releases: node -> [(time, GPUs freed)] from running jobs' expected ends
        releases: dict[str, list[tuple[float, int]]] = {n: [] for n in state.nodes}
        times: set[float] = set()
        for r in view.running.values():
            end = max(r.limit_end_s, now + BF_RESOLUTION_S)
            per: dict[str, int] = {}
            for n, _ in r.gpus:
                per[n] = per.get(n, 0) + 1
            for n, k in per.items():
                if not state.node_down(n):
                    releases[n].append((end, k))
            times.add(end)
        reservations: list[tuple[float, float, dict[str, int]]] = []
        starts: dict[str, dict[str, list[GPURef]]] = {}
        tried = 0
        queue = self.ordered(view)
        window_s = self.window_s
        if window_s is None:  # bf_window >= the longest time limit (slurm.conf(5))
            limits = [self.limit(j, view.speed) for j in queue]
            limits += [r.limit_end_s - now for r in view.running.values()]
            window_s = max([BF_WINDOW_S, *limits])
        waited = {j.name: now - j.submit_s for j in queue}
        base = self.placer.state(round_instance)
        board = _Board(list(free_now), free_now, releases)
        # the candidate start times after now: running jobs' and started jobs' expected
        # ends and reservations' ends within the window, sorted (kept as they come)
        later = sorted(t for t in times if now < t <= now + window_s)
        seen = set(later)

        def add_time(t: float) -> None:
            if now < t <= now + window_s and t not in seen:
                seen.add(t)
                bisect.insort(later, t)
        tries: np.ndarray | None = None  # now, then the sorted start times; None after a change
        for job in queue:
            if tried >= self.max_job_test:
                break
            tried += 1
            limit = self.limit(job, view.speed)
            if tries is None:
                tries = np.array([now, *later], dtype=np.float64)
            elig = board.rows(self.eligible(job))
            shape = self._shape(job, waited[job.name])
            # a time whose upper bound on the accepted nodes' counts cannot hold the job
            # cannot by its counts either (_Board.may_hold): skipped without them
            for t in board.may_hold(tries, elig, job.gpus):
                counts = np.maximum(board.counts(t, t + limit), 0)
                # the tree rule's choice depends only on the counts of the nodes the job
                # accepts (_outcome): skip a time whose counts cannot hold it
                mine = counts[elig]
                if int(mine.sum()) < job.gpus:
                    continue
                per, got = self._outcome(
                    (shape, mine.astype(np.uint16).tobytes()),
                    lambda: self._place_at(job, t == now, counts, board.nodes, free_now,
                                           base, waited))
                if per is None:
                    continue
                tries = None
                if t == now:
                    if got is None:  # the outcome was known: the GPUs it takes now
                        got = self._place_at(job, True, counts, board.nodes, free_now, base,
                                             waited)
                        if got is None or _per_node(got) != per:
                            raise AssertionError(
                                f"slurm backfill: {job.name}'s remembered placement on "
                                f"these counts is not the tree rule's now")
                    starts[job.name] = got
                    for n in per:
                        taken = {g.gpu for gpus in got.values() for g in gpus if g.node == n}
                        free_now[n] = [i for i in free_now[n] if i not in taken]
                    for n, k in per.items():
                        releases[n].append((now + limit, k))
                        board.take_now(n, len(free_now[n]), now + limit, k)
                    add_time(now + limit)
                else:
                    if self.whole_nodes:  # backfill reserves nodes (backfill.c L4233-4236)
                        per = {n: state.nodes[n].gpu_count for n in per}
                    reservations.append((t, t + limit, per))
                    board.reserve(t, t + limit, per)
                    add_time(t + limit)
                break
        solve_s = time.perf_counter() - t0
        inst, plan = _plan(view, self.name, view.queue, starts, solve_s)
        return Decision({k: _as_gpus(v) for k, v in starts.items()}, inst, plan, solve_s)

    @staticmethod
    def _free_over(t0: float, t1: float, free_now: dict[str, list[int]],
                   releases: dict[str, list[tuple[float, int]]],
                   reservations: list[tuple[float, float, dict[str, int]]]) -> dict[str, int]:
        """GPUs per node free and unreserved over all of [t0, t1)."""
        out: dict[str, int] = {}
        # per node, the reservations active in [t0, t1) that hold some of its GPUs
        held: dict[str, list[tuple[float, float, int]]] = {}
        for r0, r1, per in reservations:
            if r0 < t1 and r1 > t0:
                for n, k in per.items():
                    held.setdefault(n, []).append((r0, r1, k))
        for n, free in free_now.items():
            base = len(free) + sum(k for t, k in releases[n] if t <= t0)
            mine = held.get(n)
            if not mine:
                out[n] = base
                continue
            # the most reserved at once: at t0 or where one of them starts
            points = {t0, *(r0 for r0, _, _ in mine if r0 > t0)}
            out[n] = base - max(sum(k for r0, r1, k in mine if r0 <= p < r1) for p in points)
        return out


def _per_node(got: dict[str, list[GPURef]]) -> dict[str, int]:
    """GPUs per node of a placement (unit -> GPUs)."""
    per: dict[str, int] = {}
    for gpus in got.values():
        for g in gpus:
            per[g.node] = per.get(g.node, 0) + 1
    return per


class _Board:
    """One backfill cycle's free-and-unreserved GPUs per node over a span of time.

    The counts of :meth:`SlurmBackfill._free_over`, kept as arrays: a node's count over
    ``[t0, t1)`` is its free GPUs now plus what running jobs release at or before ``t0``,
    minus the most that reservations hold on it at any one time in ``[t0, t1)``. The held
    GPUs are a step function that rises only where a reservation starts, so its maximum
    over ``[t0, t1)`` is its value at ``t0`` or at a breakpoint inside. Both tables are
    rebuilt only after a start or a reservation changed them (the reference walked every
    reservation and release of every node for every candidate time of every job: 90 % of a
    Slurm replay's CPU on the fm workload).
    """

    def __init__(self, nodes: list[str], free_now: dict[str, list[int]],
                 releases: dict[str, list[tuple[float, int]]]):
        self.nodes = nodes
        self.index = {n: i for i, n in enumerate(nodes)}
        self.free = np.array([len(free_now[n]) for n in nodes], dtype=np.int64)
        self._rel = [(t, self.index[n], k) for n, lst in releases.items() for t, k in lst]
        # reservations as columns (start, end, node, GPUs): the table is rebuilt from them
        # after each reservation, without zipping a list of tuples each time
        self._res: tuple[list[float], list[float], list[int], list[int]] = ([], [], [], [])
        self._rel_table: tuple[np.ndarray, np.ndarray] | None = None
        self._res_table: tuple[np.ndarray, np.ndarray] | None = None
        # per set of rows: the start times it was asked about and their upper sums, a prefix
        # (:meth:`may_hold`; cleared when the board changes)
        self._sums: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}

    def rows(self, names: tuple[str, ...]) -> np.ndarray:
        return np.array([self.index[n] for n in names], dtype=np.int64)

    def take_now(self, node: str, free_left: int, end: float, k: int) -> None:
        """A start now: the node keeps ``free_left`` free GPUs and gets ``k`` back at ``end``."""
        i = self.index[node]
        self.free[i] = free_left
        self._rel.append((end, i, k))
        self._rel_table = None
        self._sums.clear()

    def reserve(self, t0: float, t1: float, per: dict[str, int]) -> None:
        for n, k in per.items():
            for col, v in zip(self._res, (t0, t1, self.index[n], k)):
                col.append(v)
        self._res_table = None
        self._sums.clear()

    def _releases(self) -> tuple[np.ndarray, np.ndarray]:
        if self._rel_table is None:
            at, node, k = (np.array(c) for c in zip(*self._rel)) if self._rel else (
                np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
            times = np.unique(at.astype(np.float64))
            step = np.zeros((len(self.nodes), len(times) + 1), dtype=np.int64)
            np.add.at(step, (node.astype(np.int64), np.searchsorted(times, at) + 1),
                      k.astype(np.int64))
            # released[:, j]: GPUs back by the j-th release time (column 0: none yet)
            self._rel_table = (times, np.cumsum(step, axis=1))
        return self._rel_table

    def _reservations(self) -> tuple[np.ndarray, np.ndarray]:
        if self._res_table is None:
            r0, r1 = (np.array(c, dtype=np.float64) for c in self._res[:2])
            node, k = (np.array(c, dtype=np.int64) for c in self._res[2:])
            points = np.unique(np.concatenate([r0, r1]).astype(np.float64))
            step = np.zeros((len(self.nodes), len(points) + 1), dtype=np.int64)
            node, k = node.astype(np.int64), k.astype(np.int64)
            np.add.at(step, (node, np.searchsorted(points, r0)), k)
            np.add.at(step, (node, np.searchsorted(points, r1)), -k)
            # held[:, b]: GPUs held on [points[b], points[b + 1])
            self._res_table = (points, np.cumsum(step[:, :len(points)], axis=1))
        return self._res_table

    def upper_sums(self, starts: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """For each start time ``t0``: an upper bound on ``sum(max(counts(t0, t1)[rows],
        0))`` for every ``t1 > t0``, all at once: a node's free GPUs now plus those released
        by ``t0``, minus what reservations hold on it at ``t0`` itself (``counts`` takes the
        most they hold anywhere in ``[t0, t1)``, at least that). The backfill loop skips a
        time whose bound is below the job's GPUs: its exact counts could not hold the job
        either (the counts of 1M candidate times were 60 % of a Slurm replay's CPU on fm)."""
        times, released = self._releases()
        # gathered at (rows, columns) at once: released[rows] would copy every column
        out = self.free[rows][:, None] + released[
            rows[:, None], np.searchsorted(times, starts, side="right")[None, :]]
        if self._res[0]:
            points, held = self._reservations()
            lo = np.searchsorted(points, starts, side="right") - 1  # the step holding t0
            at = held[rows[:, None], np.maximum(lo, 0)[None, :]]
            out = out - np.where(lo >= 0, at, 0)
        return np.maximum(out, 0).sum(axis=0)

    def may_hold(self, starts: np.ndarray, rows: np.ndarray, gpus: int,
                 first: int = 64) -> Iterator[float]:
        """The times of ``starts``, in order, whose :meth:`upper_sums` over ``rows`` is at
        least ``gpus``: bounded in chunks that double from ``first``, so a job whose time is
        among the first pays for few of them (the board must not change while it is read:
        the backfill loop stops at a job's first start or reservation). The bounds do not
        depend on the job: they are kept per set of ``rows`` until the board changes, so the
        next job that accepts the same nodes reads them (on one GPU type every job does:
        the bounds were 40 % of a Slurm replay's CPU on 8,000 Philly jobs on the SuperPOD)."""
        key = rows.tobytes()
        kept = self._sums.get(key)
        if kept is None or kept[0] is not starts:
            kept = self._sums[key] = (starts, np.zeros(0, dtype=np.int64))
        i, step = 0, first
        while i < len(starts):
            end = min(len(starts), i + step)
            sums = kept[1]
            if len(sums) < end:  # the bounds of the next times, appended to the prefix
                sums = np.concatenate([sums, self.upper_sums(starts[len(sums):end], rows)])
                kept = self._sums[key] = (starts, sums)
            chunk = starts[i:end]
            yield from chunk[sums[i:end] >= gpus].tolist()
            i = end
            step *= 2

    def counts(self, t0: float, t1: float) -> np.ndarray:
        """Per node (in ``nodes`` order): GPUs free and unreserved over all of [t0, t1)."""
        times, released = self._releases()
        out = self.free + released[:, int(np.searchsorted(times, t0, side="right"))]
        if not self._res[0]:
            return out
        points, held = self._reservations()
        lo = int(np.searchsorted(points, t0, side="right")) - 1  # the step holding t0
        hi = int(np.searchsorted(points, t1, side="left"))  # breakpoints before t1
        if hi <= max(lo, 0):
            return out  # before every reservation, or no breakpoint in [t0, t1)
        most = held[:, max(lo, 0):hi].max(axis=1)
        return out - (most if lo >= 0 else np.maximum(most, 0))


# ---- the engine ----------------------------------------------------------------------------

def _with_priority(job: TrainingJob, priority: int) -> TrainingJob:
    if job.priority == priority:
        return job
    return job.model_copy(update={"spec": job.spec.model_copy(update={"priority": priority})})


class EnginePolicy(Policy):
    """The placement engine over the pending window, once per round (module docstring).

    Queue discipline, expressed as the priorities the engine honours strictly:
    ``priority = manifest priority + one per aging_s waited + short-job bonus`` where the
    bonus (``order="sjf"``) is one per threshold in :data:`SHORT_THRESHOLDS_S` the job's
    predicted remaining run time (remaining work / its fastest type's speed) is under:
    shortest predicted job first, with aging so no job waits for ever. ``order="fifo"``
    drops the bonus. With ``drain_after_s`` (default 0: always), the longest-waiting job
    that has waited that long and still does not fit gets an EASY-style reservation: jobs
    admitted this round that would end after its predicted start (from running jobs'
    predicted ends) and use GPUs it needs, beyond the spare ones, are held back and the
    round is solved again without them. Without it, a long small job admitted onto the last
    free GPUs of a type can hold back a whole-type gang for days (measured: the bench's
    foundation-model workload, mean JCT 3.2x the best peer's with it off).

    With queues and a usage history (``SimConfig.half_life_s``), ``fair_share_levels`` adds
    ``round(fair_share_levels * F)`` levels to each job, ``F`` being its queue's Slurm
    fair-share factor ``2 ** (-usage share / weight share)``
    (:func:`~hyperplace.models.usage.fair_share_factors`), as Slurm's
    multifactor priority adds ``PriorityWeightFairshare * F`` to the age term
    (SchedMD/slurm ``src/plugins/priority/multifactor/priority_multifactor.c``, lines
    630-646 at commit 284c3b9). Without it, aging alone orders the queues: a flood's older
    jobs outrank every other queue's, and the fair-share objective, which comes after
    priority, has nothing left to decide (measured: ``bench_sharing.py --over-time``).

    ``preemption="reclaim-within-cohort"`` lets a round stop running jobs of a queue that
    borrows beyond its nominal quota so that a queue under its own quota gets it back (Kueue's
    ``reclaimWithinCohort``; decided inside the one model, :mod:`hyperplace.solvers.workflows.preemption`),
    the victims losing their work since their last checkpoint. Running jobs are listed at no
    lower a priority than the round's highest pending job, so aging alone never makes a job
    stop another: only reclaiming does.

    ``defrag=True`` solves each round with :func:`hyperplace.solvers.workflows.defrag.solve_with_migration`:
    running jobs (listed with their manifests) may be checkpointed and restarted elsewhere,
    decided in the round's one solve (migrations are decisions of the placement model): only
    when that admits more pending demand, least lost work first; a migrated job loses its
    work since its last checkpoint and restarts at once on its new GPUs.
    """

    def __init__(self, *, solver: str = "auto", budget_s: float = 1.0, window: int = 64,
                 aging_s: float = 3600.0, wait: bool = False, wait_margin: float = 0.05,
                 seed: int = 0, order: str = "sjf", drain_after_s: float | None = 0.0,
                 fair_share_levels: int = 0, preemption: str = "never", defrag: bool = False):
        self.name = "engine-wait" if wait else "engine-rounds"
        self.solver = solver
        self.budget_s = budget_s
        self.window = window
        self.aging_s = aging_s
        self.wait = wait
        self.wait_margin = wait_margin
        self.seed = seed
        self.order = order
        self.drain_after_s = drain_after_s
        self.fair_share_levels = fair_share_levels
        if preemption not in ("never", "reclaim-within-cohort"):
            raise ValueError(f"the simulated engine preempts only to reclaim quota: "
                             f"'never' or 'reclaim-within-cohort', got {preemption!r}")
        self.preemption = preemption
        self.defrag = defrag
        self._fs_cache: tuple[tuple, dict[str, int]] | None = None
        # rounds are not cold starts: each solve reuses the previous one's problem views and
        # starts from its placements that still hold (hyperplace.solvers.heuristics.warm)
        self._warm = WarmStart()
        preload_backends(solver)

    def _priority(self, view: RoundView, j: SimJob) -> int:
        waited = max(0.0, view.now - j.submit_s)
        bump = min(1000, int(waited // self.aging_s)) if self.aging_s > 0 else 0
        bonus = 0
        if self.order == "sjf":
            run = (view.remaining_work.get(j.name, j.predicted_s)
                   / view.speed.best_speed(j.manifest))
            bonus = sum(run < t for t in SHORT_THRESHOLDS_S)
        return j.manifest.priority + bump + bonus + self._fair_share_bonus(view).get(j.queue, 0)

    def _fair_share_bonus(self, view: RoundView) -> dict[str, int]:
        """Priority levels per queue from Slurm's fair-share factor of the usage history."""
        usage = view.state.queue_usage
        qs = view.state.base.queue_set
        if not self.fair_share_levels or not usage or qs is None:
            return {}
        key = tuple(sorted(usage.items()))
        if self._fs_cache is None or self._fs_cache[0] != key:
            from hyperplace.models.usage import fair_share_factors

            weights = {q.name: q.weight for q in qs.queues.values()}
            for q in (*usage, *(j.queue for j in view.queue)):
                weights.setdefault(q, 1.0)
            factor = fair_share_factors(usage, weights)
            self._fs_cache = (key, {q: int(round(self.fair_share_levels * f))
                                    for q, f in factor.items()})
        return self._fs_cache[1]

    def _ordered(self, view: RoundView) -> list[SimJob]:
        """The pending window: the highest-priority jobs first (queue order on ties)."""
        ranked = sorted(view.queue, key=lambda j: -self._priority(view, j))
        return ranked[:self.window]

    def _solve(self, view: RoundView, jobs: list[SimJob]) -> tuple[Instance, PlacementPlan]:
        manifests = [_with_priority(j.manifest, self._priority(view, j)) for j in jobs]
        if self.preemption != "never" or self.defrag:
            self._list_running(view, max((m.priority for m in manifests), default=0),
                               manifests=self.defrag)
        instance = view.state.instance(manifests)
        if self.defrag:
            from hyperplace.solvers.workflows.defrag import solve_with_migration

            plan = solve_with_migration(instance, solver=self.solver, budget_s=self.budget_s,
                                        seed=self.seed, workers=1)
            return instance, plan
        plan = solve_placement(instance, solver=self.solver, budget_s=self.budget_s,
                               seed=self.seed, workers=1, warm=self._warm,
                               preemption=self.preemption)
        return instance, plan

    @staticmethod
    def _list_running(view: RoundView, top: int, manifests: bool = False) -> None:
        """Running jobs with their queue, checkpoint age (as :meth:`RoundLoop.interrupt`
        counts lost work), a priority no lower than ``top`` (see the class docstring) and,
        for migrations, their manifests."""
        from hyperplace.models.instance import RunningJob

        for name, r in view.running.items():
            elapsed = max(0.0, view.now - r.start_s)
            ckpt = r.job.checkpoint_s
            age = elapsed - (elapsed // ckpt) * ckpt if ckpt > 0 else elapsed
            view.state.set_running_info(RunningJob(
                name=name, queue=r.job.queue, checkpoint_age_s=age,
                priority=min(1_000_000, max(r.job.manifest.priority, top)),
                job=r.job.manifest if manifests else None))

    def decide(self, view: RoundView) -> Decision:
        t0 = time.perf_counter()
        jobs = self._ordered(view)
        by_name = {j.name: j for j in jobs}
        instance, plan = self._solve(view, jobs)
        first = (instance, plan)
        fallback = plan.status.value == "fallback"
        starts = _starts(plan)
        held: list[str] = []
        for _ in range(4):
            more: list[str] = []
            new = {n: u for n, u in starts.items() if n in by_name}  # not migrated jobs
            if self.wait and new:
                more += hold_for_faster(view, new, by_name, self.wait_margin)
            if self.drain_after_s is not None:
                more += [n for n in drain_for_head(view, new, by_name, self.drain_after_s)
                         if n not in more]
            if not more:
                break
            held += more
            keep = [j for j in jobs if j.name not in held]
            instance, plan = self._solve(view, keep)
            fallback = fallback or plan.status.value == "fallback"
            starts = _starts(plan)
        if held and not starts and not view.running:
            # holding everything with nothing running would wait for nothing
            instance, plan = first
            starts, held = _starts(plan), []
        solve_s = time.perf_counter() - t0
        return Decision(starts, instance, plan, solve_s, fallback=fallback, held=held,
                        status=plan.status.value,
                        preempted=[p.job for p in plan.preemptions],
                        migrated=[m.job for m in plan.migrations])


def _eligible_nodes(view: RoundView, job: TrainingJob) -> list[str]:
    catalog = view.state.base.catalog
    selectors = {u.gpu_types for u in job.units()}
    return [n for n, node in view.state.nodes.items()
            if not view.state.node_down(n)
            and all(sel is None or catalog.get(node.gpu_type).matches(sel) for sel in selectors)]


def drain_for_head(view: RoundView, starts: dict[str, dict[str, list[GPU]]],
                   jobs: dict[str, SimJob], after_s: float) -> list[str]:
    """Admitted jobs that would delay the longest-waiting job (EASY reservation).

    The head is the multi-node job waiting longest, if at least ``after_s``, that is not
    admitted (a job of one node's GPUs or fewer starts as soon as any node frees up: it
    needs no reservation, and reserving for it held the Alibaba bench's small, type-pinned
    jobs back for nothing: mean JCT 3.1x the best peer's). Its
    shadow time is when enough GPUs it accepts are free (free now plus running jobs'
    releases at their predicted ends); spare GPUs at that time may be used by anyone.
    An admitted job is held when it ends after the shadow time and needs more of the
    head's GPUs than are spare.
    """
    node_gpus = max((n.gpu_count for n in view.state.nodes.values()), default=8)
    waiting = [j for j in view.queue if j.name not in starts and j.gpus > node_gpus
               and view.now - j.submit_s >= after_s]
    if not waiting:
        return []
    head = min(waiting, key=lambda j: j.submit_s)
    nodes = set(_eligible_nodes(view, head.manifest))
    have = sum(len(view.state.free_gpus(n)) for n in nodes)
    ends = sorted((r.predicted_end_s, sum(1 for n, _ in r.gpus if n in nodes))
                  for r in view.running.values())
    shadow = view.now if have >= head.gpus else None
    for end, k in ends:
        if shadow is not None:
            break
        have += k
        if have >= head.gpus:
            shadow = end
    if shadow is None or shadow <= view.now:
        return []  # no release to wait for, or the head is blocked by more than counts
    spare = have - head.gpus
    out = []
    for name, units in starts.items():
        job = jobs[name]
        used = sum(1 for gpus in units.values() for n, _ in gpus if n in nodes)
        if not used:
            continue
        speed = view.speed.speed(job.manifest, units)
        end = view.now + view.remaining_work.get(name, job.predicted_s) / speed
        if end <= shadow:
            continue
        if used <= spare:
            spare -= used
            continue
        out.append(name)
    return out


def _starts(plan: PlacementPlan) -> dict[str, dict[str, list[GPU]]]:
    out: dict[str, dict[str, list[GPU]]] = {}
    for p in plan.placements:
        out.setdefault(p.job, {})[p.unit] = [(g.node, g.gpu) for g in p.gpus]
    return out


def hold_for_faster(view: RoundView, starts: dict[str, dict[str, list[GPU]]],
                    jobs: dict[str, SimJob], margin: float) -> list[str]:
    """Jobs whose predicted completion is earlier if they wait for the fastest GPU type.

    For an admitted job on GPUs slower than the fastest type it accepts: completion now =
    now + remaining work / speed of this placement; completion by waiting = the first time
    enough GPUs of the fastest accepted type are free (free now plus those running jobs
    release at their predicted ends; queued jobs ahead are ignored, so the estimate is
    optimistic) + remaining work / that type's speed. Hold when waiting wins by more than
    ``margin`` (relative).
    """
    held = []
    state = view.state
    catalog = state.base.catalog
    for name, units in starts.items():
        job = jobs[name]
        now_speed = view.speed.speed(job.manifest, units)
        best = view.speed.best_speed(job.manifest)
        if now_speed >= best * (1 - 1e-9):
            continue
        fast = [n for n, node in state.nodes.items()
                if math.isclose(view.speed.gpu_speed(node.gpu_type, job.manifest), best)
                and all(u.gpu_types is None or catalog.get(node.gpu_type).matches(u.gpu_types)
                        for u in job.manifest.units()[:1])]
        fast_set = set(fast)
        have = sum(len(state.free_gpus(n)) for n in fast)
        ends = sorted((r.predicted_end_s, sum(1 for n, _ in r.gpus if n in fast_set))
                      for r in view.running.values())
        t_free = view.now if have >= job.gpus else None
        for end, k in ends:
            if t_free is not None:
                break
            have += k
            if have >= job.gpus:
                t_free = end
        if t_free is None or t_free <= view.now:
            continue  # nothing to wait for, or the engine had reasons not to use free ones
        work = view.remaining_work.get(name, job.predicted_s)
        finish_now = view.now + work / now_speed
        finish_wait = t_free + work / best
        if finish_wait < view.now + (finish_now - view.now) * (1 - margin):
            held.append(name)
    return held


def engine_plans_ahead(instance: Instance, preemption: str = "never",
                       defrag: bool = False) -> bool:
    """Whether ``engine`` is the planning engine here (else the round engine: declared
    queues, reclaim preemption or migrations are the round engine's alone)."""
    return not (instance.spec.queues or preemption != "never" or defrag)


def make_policy(name: str, instance: Instance, *, budget_s: float = 1.0, solver: str = "auto",
                window: int = 64, aging_s: float = 3600.0, seed: int = 0,
                slurm_factor: float = SLURM_OVERESTIMATE, fair_share_levels: int = 0,
                preemption: str = "never", defrag: bool = False,
                schedule: dict | None = None) -> Policy:
    """A policy by name (aliases accepted: ``fifo-firstfit``, ``kueue-style``, ...)."""
    key = canonical_policy(name)
    if key == "engine" and engine_plans_ahead(instance, preemption, defrag):
        from hyperplace.sim.planning import PlanningEngine

        return PlanningEngine(solver=solver, budget_s=budget_s, seed=seed, **(schedule or {}))
    if key in ("engine", "engine-rounds", "engine-wait"):
        # with declared queues, preemption or migrations ``engine`` is the round engine: the
        # schedule models neither quotas nor fair share nor stops (hyperplace.sim.planning)
        pol = EnginePolicy(solver=solver, budget_s=budget_s, window=window, aging_s=aging_s,
                           wait=key == "engine-wait", seed=seed,
                           fair_share_levels=fair_share_levels, preemption=preemption,
                           defrag=defrag)
        if key == "engine":
            pol.name = "engine"
        return pol
    if key == "slurm":
        return SlurmBackfill(instance, factor=slurm_factor, seed=seed)
    if key == "slurm-default":
        return SlurmBackfill(instance, factor=slurm_factor, seed=seed, window_s=BF_WINDOW_S,
                             multifactor=False, whole_nodes=False, name="slurm-default")
    if key == "volcano-proportion":
        return ProportionPolicy(instance, seed)
    rule, blocking = {"fifo": ("slurm", True), "kueue-strict": ("kueue", True),
                      "kueue": ("kueue", False), "volcano": ("volcano", False)}[key]
    return QueuePolicy(key, instance, rule, blocking, seed)
