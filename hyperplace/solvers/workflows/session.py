"""The round state: one cluster (or federation) carried from round to round.

A scheduler (the over-time simulator, the service, a controller) runs many rounds on one
cluster whose state changes a little between them: a few jobs arrive, a few finish, a GPU,
a node or a switch fails. :class:`RoundState` is the one implementation of that state: which
GPUs run which job, which are down, the pending queue, the running jobs' queues and the
queues' usage history. Events change it through :meth:`RoundState.apply` (a
:class:`RoundDelta`: arrivals, completions, interruptions, failures, repairs, withdrawals,
allocations) and a round's starts through :meth:`RoundState.commit`; the low-level
``allocate``/``release`` (and ``fail_*``/``repair_*``, which ``apply`` uses) remain public for a
round's trial placements, made and undone within one decision (the over-time schedule's
pinning, ``hyperplace.sim.planning``). It gives each round its
:class:`~hyperplace.models.instance.Instance` on demand (:meth:`RoundState.instance`). The
simulator's loop (:class:`hyperplace.sim.loop.RoundLoop`) and the service's PATCH and apply
paths (``hyperplace.service.state``, which translates its JSON to a delta at the edge) drive
it; :class:`PlacementSession` is a round state with a solver.

A :class:`PlacementSession` keeps the state in place of re-reading the files every round:

* the fabric (switch graph, hop counts, domains of every tier) is built once per cluster and
  shared by every later round, since nodes keep their names and cables between rounds;
* unchanged nodes are the same objects from round to round (nothing is validated
  again), so caches keyed on them stay warm;
* the previous round's problem and plan are handed to the next round
  (:class:`~hyperplace.solvers.heuristics.warm.WarmStart`): views of unchanged nodes (pair bandwidths,
  link rates, leaves, NVLink cliques) and jobs (unit classes, reasons) are reused rather than
  derived again, and the previous placements still valid (a round solved again without a
  commit) start the next round: its fallback and the exact backend's hint;
* the exact backends' libraries (OR-Tools, HiGHS) are imported when the session is created,
  not inside the first round that picks each (importing OR-Tools costs about 0.5 s, which a
  round's budget should not pay);
* the previous round's plan is kept for the next round (:attr:`PlacementSession.last_plan`).

Usage::

    session = PlacementSession(instance, solver="auto")
    plan = session.solve(budget_s=5)          # round 1 (cold: builds the fabric)
    session.commit(plan)                       # admitted jobs start: GPUs taken, queue shrinks
    interrupted = session.apply(RoundDelta(
        arrivals=[job_a, job_b],               # TrainingJobs joining the queue
        completions=["job-17"],                # running jobs that finished: GPUs free again
        failures=[("node-0042", 3), "node-0107"],  # a GPU, or a whole node, fails
    ))                                         # jobs hit by a failure go back to the queue
    plan = session.solve(budget_s=5)           # round 2 (warm)

Every plan comes from :func:`~hyperplace.solvers.driver.solve_placement` on the session's
current instance, so it carries the same promises (checker-valid, status, bound, gap, within
the budget); :attr:`PlacementSession.instance` is that instance, for the checker.

**Usage history** (``half_life_s``): a round state can remember which queue got the GPUs
over past rounds, with Slurm's decay (:class:`~hyperplace.models.usage.QueueUsage`, the one
implementation of the rule): the GPUs each queue holds between two events count towards it,
the total halves every ``half_life_s`` seconds, and a round's instance carries the result as
``spec.queueUsage``, so a queue that got less over recent rounds is preferred by the
fair-share objective (a queue whose jobs never win a round's tie does not wait for ever).
The state has no clock of its own that it trusts: :meth:`~RoundState.apply`,
:meth:`~RoundState.commit` and :meth:`~RoundState.accrue` take the time of the event as
``now_s`` (seconds, any origin; a simulation passes its own times); without it they read the
injected ``clock`` (default ``time.time`` as it is at the call, for a controller running rounds in real time). A
time earlier than the last one accrues nothing. A starting instance's own
``spec.queueUsage`` is the history at the first call. Without ``half_life_s`` the instance's
``spec.queueUsage`` (if any) is left as given. The history accrues before every change of
who holds which GPUs (a delta that frees or takes GPUs, a commit) and whenever a caller asks
(:meth:`~RoundState.accrue`: a round; :class:`PlacementSession` also at every call).

With declared queues (``spec.queues``), committing a plan lists its jobs in
``spec.runningJobs`` with their queue and priority (quotas and fair share count them under
their queue in later rounds); a job that completes or is interrupted leaves that list.

Running jobs are tracked by the GPUs they hold (``Node.allocated`` maps a GPU to its job),
so a state can start from any instance: jobs running in it when the state starts can
complete like the ones it committed. A job hit by a failure loses all its GPUs; if the state
started it (it knows its queue entry), it returns to the queue (``requeue``: at the end, in
an order of the caller's, or not at all).
"""

from __future__ import annotations

import gc
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hyperplace.errors import ConflictError, InputError
from hyperplace.models.instance import Instance, RunningJob
from hyperplace.models.job import TrainingJob
from hyperplace.models.node import Node
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.usage import DEFAULT_QUEUE, QueueUsage, known_queue_usage
from hyperplace.solvers.heuristics.warm import WarmStart

__all__ = ["GPU", "PlacementSession", "RoundDelta", "RoundState", "fresh_node", "usage_at"]

GPU = tuple[str, int]
#: a failed or repaired GPU set: a node name (every GPU of it), (node, GPU) or (node, [GPUs])
GPUItem = str | tuple[str, int] | tuple[str, list[int]]


@dataclass(frozen=True)
class RoundDelta:
    """What changed since the last round (applied in the order of the fields below).

    Attributes
    ----------
    withdrawals : list of str
        Pending jobs removed from the queue (cancelled by their owner).
    completions : list of str
        Running jobs that finished; their GPUs become free.
    interruptions : list of str
        Running jobs stopped without a hardware fault (a crash, a preemption, a migration):
        their GPUs become free, and they return to the queue as a failure's jobs do.
    failures : list of str, (str, int) or (str, list of int)
        A node name (every GPU of it fails), a (node, GPU index) pair or a node and a list
        of GPU indices. A failed GPU is marked faulty; a job holding it is interrupted and
        loses all its GPUs.
    node_failures, switch_failures : list of str
        Hosts (or the nodes attached to a switch) down as a whole, kept apart from their
        GPUs' own faults (repairing the host does not repair a GPU that failed on its own).
    recoveries : same form as ``failures``
        Faulty GPUs (or every faulty GPU of a node) that are back in service.
    node_repairs, switch_repairs : list of str
        Hosts and switches back.
    allocations : list of (job, list of (node, GPU))
        Jobs started elsewhere (or as a plan says): their GPUs become theirs (a GPU already
        theirs stays), and a pending one leaves the queue.
    arrivals : list
        Queue entries (TrainingJobs, or what the state's queue holds) joining the end of
        the pending queue (names must be new).
    """

    arrivals: list[Any] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)
    failures: list[GPUItem] = field(default_factory=list)
    recoveries: list[GPUItem] = field(default_factory=list)
    withdrawals: list[str] = field(default_factory=list)
    allocations: list[tuple[str, list[GPU]]] = field(default_factory=list)
    interruptions: list[str] = field(default_factory=list)
    node_failures: list[str] = field(default_factory=list)
    node_repairs: list[str] = field(default_factory=list)
    switch_failures: list[str] = field(default_factory=list)
    switch_repairs: list[str] = field(default_factory=list)


def fresh_node(node: Node, allocated: dict[int, str], faulty: list[int]) -> Node:
    """A copy of ``node`` with new state (no stale cached properties carried over)."""
    data = {k: v for k, v in node.__dict__.items() if k in Node.model_fields}
    data["allocated"] = allocated
    data["faulty"] = faulty
    return Node.model_construct(**data)


def _manifest(item: Any) -> TrainingJob:
    return item


def _name(item: Any) -> Any:
    return item.name


@dataclass
class _Checked:
    """A delta's items after their checks: what each step of the change needs."""

    failed: dict[str, list[int]]
    healed: dict[str, list[int]]
    done: set[str]
    interrupted: list[str]
    takes: list[tuple[str, list[GPU]]]
    arrivals: list[tuple[Any, Any]]


class RoundState:
    """GPU ownership, failures, the pending queue and usage history, updated in place.

    Parameters
    ----------
    instance : Instance, optional
        The clusters (nodes, fabric, GPU types) and, with ``fresh=False`` (the default), the
        state at the start: running jobs in ``allocated``, faulty GPUs, ``spec.runningJobs``,
        the queue and ``spec.queueUsage``. ``fresh=True`` starts with every GPU free and an
        empty queue (the simulator's replays). Without an instance, ``gpus`` (node name ->
        GPU count), ``allocated``, ``faulty`` and ``queue`` give the state (a stored
        document's, in the service); :meth:`instance` then has nothing to build.
    half_life_s : float, optional
        Keep per-queue usage history with this half-life (see the module docstring).
    usage_in_instance : bool
        Round instances carry the history as ``spec.queueUsage`` even without declared
        queues (with declared queues they always do).
    requeue : "end", a key function or None
        Where an interrupted job the state started goes: the end of the queue, the queue
        sorted by ``requeue(entry)`` (stable), or nowhere (the caller resubmits it).
    manifest, name : callables
        A queue entry's TrainingJob and name (default: the entry is a TrainingJob).
    clock : callable
        The time of a call that gives no ``now_s`` (None, the default: ``time.time`` as it
        is at that call, not as it was when this module was imported).
    usage : QueueUsage, optional
        The usage history to carry on (a stored one: :func:`usage_at` of what
        :meth:`history` wrote); default a new one with ``half_life_s`` that starts from the
        instance's ``spec.queueUsage``.
    running : RunningJob entries
        Queues and priorities of the running jobs of a state given without an instance (a
        stored document's ``spec.runningJobs``).
    """

    def __init__(self, instance: Instance | None = None, *, fresh: bool = False,
                 half_life_s: float | None = None, usage_in_instance: bool = False,
                 requeue: str | Callable[[Any], Any] | None = "end",
                 manifest: Callable[[Any], TrainingJob] = _manifest,
                 name: Callable[[Any], Any] = _name, clock: Callable[[], float] | None = None,
                 gpus: Mapping[str, int] | None = None,
                 allocated: Mapping[str, Mapping[int, str]] | None = None,
                 faulty: Mapping[str, Iterable[int]] | None = None,
                 queue: Iterable[Any] = (), usage: QueueUsage | None = None,
                 running: Iterable[RunningJob] = ()):
        self.requeue = requeue
        self.manifest = manifest
        self.name_of = name
        self._clock = clock
        self.usage_in_instance = usage_in_instance
        self.base: Instance | None = None
        self.nodes: dict[str, Node] = {}
        self.cluster_of: dict[str, str] = {}
        self.switches_of: dict[str, set[str]] = {}
        self.running_info: dict[str, RunningJob] = {r.name: r for r in running}
        self.queue_usage: dict[str, float] = {}
        start_usage: dict[str, float] = {}
        if instance is not None:
            self._take_instance(instance)
            if not fresh:  # the running jobs' entries are the state's own from here on
                self.base = self.base.model_copy(update={"spec": self.base.spec.model_copy(
                    update={"running_jobs": []})})
                gpus = {n: node.gpu_count for n, node in self.nodes.items()}
                nodes = [n for c in instance.clusters for n in c.nodes]
                allocated = {n.name: n.allocated for n in nodes}
                faulty = {n.name: n.faulty for n in nodes}
                queue = instance.jobs
                self.running_info = {r.name: r for r in instance.spec.running_jobs}
                start_usage = dict(instance.spec.queue_usage)
                self.queue_usage = dict(start_usage)
        if gpus is None:
            gpus = {n: node.gpu_count for n, node in self.nodes.items()}
        self.gpus: dict[str, int] = dict(gpus)
        self.owner: dict[str, dict[int, str]] = {n: dict((allocated or {}).get(n, {}))
                                                 for n in self.gpus}
        self.failed_gpus: dict[str, set[int]] = defaultdict(set)
        for n, bad in (faulty or {}).items():
            if bad:
                self.failed_gpus[n] = set(bad)
        self.failed_nodes: set[str] = set()
        self.failed_switches: set[str] = set()
        self.jobs: dict[str, list[GPU]] = {}
        for n, own in self.owner.items():
            for g, job in own.items():
                self.jobs.setdefault(job, []).append((n, g))
        self.queue: dict[Any, Any] = {}
        for item in queue:
            key = self.name_of(item)
            self.queue[object() if key is None else key] = item
        self.started: dict[str, Any] = {}  # queue entries of the jobs this state started
        self.usage = QueueUsage(half_life_s or None, start_usage) if usage is None else usage
        #: called as ``on_accrue(last_s, now_s, held)`` before the history moves (metrics)
        self.on_accrue: Callable[[float | None, float, dict[str, float]], None] | None = None
        self.version = 0
        self._cache: tuple[int, tuple[Any, ...], Instance] | None = None
        self._nodes: dict[str, Node] = {}  # the last round's node objects
        #: nodes whose GPU state changed since the last round's instance (None: any may)
        self._touched: set[str] | None = None

    def _take_instance(self, instance: Instance) -> None:
        """The clusters of ``instance`` with every GPU free and no queue: the base every
        round's instance is a copy of (the fabric, built once, is shared)."""
        clusters = []
        for c in instance.clusters:
            nodes = [fresh_node(n, {}, []) for n in c.nodes]
            clusters.append(c.model_copy(update={"nodes": nodes}))
            # the fabric depends only on node names: keep the cached one if present
            if "network" in c.__dict__:
                clusters[-1].__dict__["network"] = c.__dict__["network"]
            clusters[-1].__dict__.pop("node_by_name", None)
        self.base = instance.model_copy(update={"spec": instance.spec.model_copy(
            update={"clusters": clusters, "jobs": []})})
        for key in ("node_index", "federation", "running_job_info"):
            self.base.__dict__.pop(key, None)
        self.nodes = {n.name: n for c in self.base.clusters for n in c.nodes}
        self.cluster_of = {n.name: c.name for c in self.base.clusters for n in c.nodes}
        for c in self.base.clusters:
            for node, sw in c.network.attachments.items():
                self.switches_of[node] = set(sw)

    @property
    def clock(self) -> Callable[[], float]:
        """The clock of a call that gives no ``now_s``: the injected one, else
        ``time.time`` as it is now."""
        return self._clock or time.time

    @clock.setter
    def clock(self, clock: Callable[[], float] | None) -> None:
        self._clock = clock

    # ---- queries ---------------------------------------------------------------
    @property
    def total_gpus(self) -> int:
        return sum(self.gpus.values())

    def node_down(self, node: str) -> bool:
        return node in self.failed_nodes or bool(self.switches_of.get(node, set())
                                                 & self.failed_switches)

    def unusable(self, node: str) -> set[int]:
        if self.node_down(node):
            return set(range(self.gpus[node]))
        return set(self.failed_gpus.get(node, ()))

    def free_gpus(self, node: str) -> list[int]:
        bad = self.unusable(node)
        own = self.owner[node]
        return [i for i in range(self.gpus[node]) if i not in bad and i not in own]

    def healthy(self) -> bool:
        """Nothing failed: no node, switch or GPU is down."""
        return not (self.failed_nodes or self.failed_switches
                    or any(self.failed_gpus.values()))

    def free_count(self) -> int:
        if self.healthy():  # O(nodes) per call instead of a list per node (the replay's
            return self.total_gpus - self.busy_count()  # sample after every event)
        return sum(len(self.free_gpus(n)) for n in self.gpus)

    def busy_count(self) -> int:
        return sum(len(o) for o in self.owner.values())

    def down_count(self) -> int:
        if self.healthy():
            return 0
        return sum(len(self.unusable(n)) for n in self.gpus)

    def switch_nodes(self, switch: str) -> list[str]:
        return [n for n, sws in self.switches_of.items() if switch in sws]

    def switches(self) -> set[str]:
        return {s for sws in self.switches_of.values() for s in sws}

    def jobs_on(self, gpus: Iterable[GPU]) -> set[str]:
        return {self.owner[n][i] for n, i in gpus if i in self.owner.get(n, {})}

    def jobs_on_nodes(self, nodes: Iterable[str]) -> set[str]:
        return {j for n in nodes for j in self.owner[n].values()}

    def pending(self) -> list[Any]:
        return list(self.queue.values())

    def held_by_queue(self) -> dict[str, float]:
        """GPUs each queue holds: a running job's count towards its ``spec.runningJobs``
        queue (``default`` when it is not listed), in the order the jobs started."""
        held: dict[str, float] = {}
        for job, gpus in self.jobs.items():
            info = self.running_info.get(job)
            q = info.queue if info is not None else DEFAULT_QUEUE
            held[q] = held.get(q, 0) + len(gpus)
        return held

    # ---- usage history -----------------------------------------------------------
    def now(self, now_s: float | None = None) -> float:
        return self.clock() if now_s is None else float(now_s)

    def accrue(self, now_s: float | None = None) -> dict[str, float]:
        """Bring the usage history to ``now_s`` (default: ``clock()``): the GPUs each queue
        has held since the last call count towards it and the whole history decays (see
        :meth:`QueueUsage.advance`); returns the decayed GPU-hours per queue."""
        now = self.now(now_s)
        if not self.usage.enabled and self.on_accrue is None:
            self.usage.advance(now, {})  # no history kept: only its time moves (and no
            return self.usage.snapshot()  # scan of every running job: 16,384 at 131k)
        held = self.held_by_queue()
        if self.on_accrue is not None:
            self.on_accrue(self.usage.time_s, now, held)
        self.usage.advance(now, held)
        return self.usage.snapshot()

    def history(self) -> dict[str, Any]:
        """The usage history as a store keeps it: :meth:`QueueUsage.to_doc` (the decayed
        GPU-hours as of ``timeS``) and ``heldGpus``, the GPUs each queue holds now, which
        accrue until the next change; :func:`usage_at` reads it back."""
        held = {q: int(g) for q, g in sorted(self.held_by_queue().items()) if g > 0}
        return {**self.usage.to_doc(), "heldGpus": held}

    def set_queue_usage(self, usage: dict[str, float]) -> None:
        """What round instances carry as ``spec.queueUsage`` (see ``usage_in_instance``)."""
        if usage != self.queue_usage:
            self.queue_usage = dict(usage)
            self.version += 1

    # ---- low-level updates (a round's trial placements use these too) --------------
    def _touch(self, nodes: Iterable[str]) -> None:
        """These nodes' GPU state changed: the next round's instance copies them afresh
        (:meth:`_round_node`); the others stay the previous round's objects unlooked-at."""
        if self._touched is not None:
            self._touched.update(nodes)

    def allocate(self, job: str, gpus: list[GPU]) -> None:
        for node, i in gpus:
            if i in self.owner[node] or i in self.unusable(node):
                raise ValueError(f"GPU {node}:{i} is not free for {job}")
        for node, i in gpus:
            self.owner[node][i] = job
        self.jobs[job] = list(gpus)
        self._touch(node for node, _ in gpus)
        self.version += 1

    def set_running_info(self, info: RunningJob) -> None:
        """Queue and priority of a running job, for the rounds' quotas and fair share."""
        self.running_info[info.name] = info
        self.version += 1

    def release(self, job: str) -> list[GPU]:
        self.running_info.pop(job, None)
        gpus = self.jobs.pop(job, [])
        for node, i in gpus:
            if self.owner[node].get(i) == job:
                del self.owner[node][i]
        self._touch(node for node, _ in gpus)
        self.version += 1
        return gpus

    def fail_gpu(self, node: str, gpu: int) -> None:
        self.failed_gpus[node].add(gpu)
        self._touch((node,))
        self.version += 1

    def repair_gpu(self, node: str, gpu: int) -> None:
        self.failed_gpus[node].discard(gpu)
        self._touch((node,))
        self.version += 1

    def fail_node(self, node: str) -> None:
        self.failed_nodes.add(node)
        self._touch((node,))
        self.version += 1

    def repair_node(self, node: str) -> None:
        self.failed_nodes.discard(node)
        self._touch((node,))
        self.version += 1

    def fail_switch(self, switch: str) -> list[str]:
        self.failed_switches.add(switch)
        self._touched = None  # every node behind it: looked at again
        self.version += 1
        return self.switch_nodes(switch)

    def repair_switch(self, switch: str) -> None:
        self.failed_switches.discard(switch)
        self._touched = None
        self.version += 1

    # ---- deltas and commits --------------------------------------------------------
    def apply(self, delta: RoundDelta, *, now_s: float | None = None) -> list[str]:
        """Apply what changed; returns the running jobs it interrupted (``interruptions``
        in their order, then the jobs a failure hit, by name).

        Every item is checked against the state before anything changes (an
        :class:`~hyperplace.errors.InputError` naming the field, or a
        :class:`~hyperplace.errors.ConflictError` for a job already queued or a GPU another
        job holds), so a refused delta leaves the state as it was. With usage history, a
        delta that frees or takes GPUs happens at ``now_s`` (default ``clock()``): GPUs
        freed now count towards their queue up to then.
        """
        checked = self._checked(delta)
        if checked.done or checked.interrupted or checked.takes:
            self.accrue(now_s)
        self._change(delta, checked)
        return checked.interrupted

    def _checked(self, delta: RoundDelta) -> "_Checked":
        """Every item of ``delta`` checked against the state (nothing changes yet)."""
        failed = self._gpu_items(delta.failures, "failures")
        healed = self._gpu_items(delta.recoveries, "recoveries")
        self._check_jobs(delta)
        self._check_names(delta)
        done = set(delta.completions)
        hit = self.jobs_on((n, g) for n, gs in failed.items() for g in gs)
        hit |= self.jobs_on_nodes(delta.node_failures)
        hit |= self.jobs_on_nodes(n for sw in delta.switch_failures for n in self.switch_nodes(sw))
        first = list(dict.fromkeys(j for j in delta.interruptions if j not in done))
        interrupted = first + sorted(hit - done - set(first))
        freed = done | set(interrupted)
        takes = [(job, self._check_take(job, gpus, f"allocations[{i}]", freed, failed, healed))
                 for i, (job, gpus) in enumerate(delta.allocations)]
        return _Checked(failed, healed, done, interrupted, takes,
                        self._checked_arrivals(delta, freed))

    def _change(self, delta: RoundDelta, c: "_Checked") -> None:
        """Apply a checked delta, in the order of :class:`RoundDelta`'s fields."""
        for name in delta.withdrawals:
            self.queue.pop(name, None)
        for name in c.done:
            self.release(name)
            self.started.pop(name, None)
        for node, gpus in c.failed.items():
            for g in gpus:
                self.fail_gpu(node, g)
        for node in delta.node_failures:
            self.fail_node(node)
        for sw in delta.switch_failures:
            self.fail_switch(sw)
        for name in c.interrupted:
            self.release(name)
            self._requeue(name)
        for node, gpus in c.healed.items():
            for g in gpus:
                self.repair_gpu(node, g)
        for node in delta.node_repairs:
            self.repair_node(node)
        for sw in delta.switch_repairs:
            self.repair_switch(sw)
        for job, gpus in c.takes:
            self._take(job, gpus)
        for key, item in c.arrivals:
            self.queue[key] = item

    def commit(self, starts: Mapping[str, list[GPU]], *, now_s: float | None = None,
               path: str = "starts") -> None:
        """Start pending jobs on their GPUs (a round's plan): each leaves the queue and holds
        its GPUs; with declared queues it is listed in ``spec.runningJobs`` under its queue.
        Every job must be pending and every GPU free (an error naming ``path`` otherwise)."""
        for name in sorted(set(starts) - self.queue.keys()):
            raise InputError(f"job {name!r} is not in the pending queue", path=f"{path}.jobs")
        for name, gpus in starts.items():
            for node, g in gpus:
                if node not in self.gpus or g in self.owner[node] or g in self.unusable(node):
                    raise InputError(f"GPU {g} of node {node} is not free",
                                     path=f"{path}.placements")
        if starts:
            self.accrue(now_s)
        for name, gpus in starts.items():
            self._take(name, list(gpus))

    def _take(self, job: str, gpus: list[GPU]) -> None:
        """``job`` holds ``gpus`` too (checked); a pending job leaves the queue."""
        new = [(n, g) for n, g in gpus if self.owner[n].get(g) != job]
        for node, g in new:
            self.owner[node][g] = job
        self._touch(node for node, _ in new)
        self.jobs.setdefault(job, []).extend(new)
        item = self.queue.pop(job, None)
        if item is not None:
            self.started[job] = item
            if self.base is not None and self.base.spec.queues:
                manifest = self.manifest(item)
                self.running_info[job] = RunningJob.started(manifest, self.base.queue_of(manifest))
        self.version += 1

    def _requeue(self, name: str) -> None:
        item = self.started.pop(name, None)
        if item is None or self.requeue is None or name in self.queue:
            return
        self.queue[name] = item
        if callable(self.requeue):  # keep the caller's order (a stable sort)
            self.queue = dict(sorted(self.queue.items(), key=lambda kv: self.requeue(kv[1])))

    # ---- checks ------------------------------------------------------------------------
    def _check_jobs(self, delta: RoundDelta) -> None:
        for i, name in enumerate(delta.withdrawals):
            if name not in self.queue:
                raise InputError(f"job {name!r} is not pending", path=f"withdrawals[{i}]")
        for fld in ("completions", "interruptions"):
            for i, name in enumerate(getattr(delta, fld)):
                if name not in self.jobs:
                    raise InputError(f"job {name!r} is not running", path=f"{fld}[{i}]")

    def _check_names(self, delta: RoundDelta) -> None:
        switches = self.switches() if delta.switch_failures or delta.switch_repairs else set()
        for fld, names, known in (("node_failures", delta.node_failures, self.gpus),
                                  ("node_repairs", delta.node_repairs, self.gpus),
                                  ("switch_failures", delta.switch_failures, switches),
                                  ("switch_repairs", delta.switch_repairs, switches)):
            for i, name in enumerate(names):
                if name not in known:
                    raise InputError(f"unknown {fld.split('_')[0]} {name!r}", path=f"{fld}[{i}]")

    def _gpu_items(self, items: Iterable[GPUItem], fld: str) -> dict[str, list[int]]:
        """node -> GPU indices of ``failures`` or ``recoveries`` (checked)."""
        out: dict[str, list[int]] = {}
        for i, item in enumerate(items):
            path = f"{fld}[{i}]"
            if isinstance(item, str):
                node, gpus, where = item, None, None
            else:
                try:
                    node, gpus = item
                except (TypeError, ValueError):
                    raise InputError(f"expected a node name or a (node, GPU) pair, got {item!r}",
                                     path=path) from None
                where = "gpu" if isinstance(gpus, int) else "gpus"
                gpus = [gpus] if isinstance(gpus, int) else gpus
            if node not in self.gpus:
                raise InputError(f"unknown node {node!r}", path=f"{path}.node"
                                 if where else path)
            count = self.gpus[node]
            if gpus is None:
                gpus = range(count)
            got = out.setdefault(node, [])
            for k, g in enumerate(gpus):
                if not isinstance(g, int) or not 0 <= g < count:
                    sub = f"{path}.gpu" if where == "gpu" else f"{path}.gpus[{k}]"
                    raise InputError(f"node {node!r} has no GPU {g} (it has GPUs 0..{count - 1})",
                                     path=sub)
                if g not in got:
                    got.append(g)
        return out

    def _check_take(self, job: str, gpus: list[GPU], path: str, freed: set[str] = frozenset(),
                    failed: Mapping[str, list[int]] | None = None,
                    healed: Mapping[str, list[int]] | None = None) -> list[GPU]:
        """``gpus`` for ``job``, checked against the state after the delta's earlier fields
        (``freed`` jobs hold nothing, ``failed`` GPUs are down, ``healed`` ones back)."""
        failed, healed = failed or {}, healed or {}
        for k, (node, g) in enumerate(gpus):
            where = f"{path}.gpus[{k}]"
            if node not in self.gpus:
                raise InputError(f"unknown node {node!r}", path=f"{where}.node")
            if not 0 <= g < self.gpus[node]:
                raise InputError(f"node {node!r} has no GPU {g} "
                                 f"(it has GPUs 0..{self.gpus[node] - 1})", path=where)
            held = self.owner[node].get(g)
            if held in freed:
                held = None
            if held is not None and held != job:
                raise ConflictError(f"GPU {node}/{g} is held by {held!r}", path=where)
            down = self.node_down(node) or g in failed.get(node, ()) or (
                g in self.failed_gpus.get(node, ()) and g not in healed.get(node, ()))
            if held is None and down:
                raise InputError(f"GPU {node}/{g} is faulty", path=where)
        return list(gpus)

    def _checked_arrivals(self, delta: RoundDelta, freed: set[str]) -> list[tuple[Any, Any]]:
        """(queue key, entry) of each arrival: not pending (after the withdrawals), not
        running (unless this delta frees it). An entry without a name is kept for the
        caller's own validation (the service's documents)."""
        if not delta.arrivals:
            return []
        gone = set(delta.withdrawals) | {job for job, _ in delta.allocations}
        added: set[Any] = set()
        out = []
        for i, item in enumerate(delta.arrivals):
            name = self.name_of(item)
            path = f"arrivals[{i}].metadata.name"
            if name is None:
                out.append((object(), item))
                continue
            if name in added or (name in self.queue and name not in gone):
                raise ConflictError(f"job {name!r} is already pending", path=path)
            if name in self.jobs and name not in freed:
                raise InputError(f"job {name!r} is running", path=path)
            added.add(name)
            out.append((name, item))
        return out

    # ---- the instance a round sees ---------------------------------------------
    def _round_node(self, base: Node) -> Node:
        """The node as a round sees it: the previous round's object when its GPU state did
        not change (so the next round's problem reuses its view), else a fresh copy."""
        owner, down = self.owner[base.name], sorted(self.unusable(base.name))
        last = self._nodes.get(base.name)
        if last is not None and last.allocated == owner and last.faulty == down:
            return last
        node = fresh_node(base, dict(owner), down)
        self._nodes[base.name] = node
        return node

    def instance(self, pending: list[TrainingJob] | None = None) -> Instance:
        """The current state with ``pending`` as the queue (default: the state's queue),
        cached while nothing changes."""
        if self.base is None:
            raise ValueError("this round state was built without an instance")
        if pending is None:
            pending = [self.manifest(item) for item in self.queue.values()]
        # the same manifests (the objects, not their names: a policy may pass a job with an
        # aged priority under the same name) in the same state give the same instance
        key = tuple(pending)
        if self._cache and self._cache[0] == self.version and len(self._cache[1]) == len(key) \
                and all(a is b for a, b in zip(self._cache[1], key)):
            return self._cache[2]
        clusters = []
        touched, last = self._touched, self._nodes
        for c in self.base.clusters:
            # a round costs what changed: the nodes untouched since the last instance are
            # its objects, not compared again (16,384 comparisons a round at 131,072 GPUs)
            nodes = [self._round_node(n) if touched is None or n.name in touched or
                     n.name not in last else last[n.name] for n in c.nodes]
            copy = c.model_copy(update={"nodes": nodes})
            copy.__dict__["network"] = c.network
            copy.__dict__.pop("node_by_name", None)
            clusters.append(copy)
        update: dict = {"clusters": clusters, "jobs": list(pending)}
        if self.base.spec.queues or self.running_info:
            update["running_jobs"] = [self.running_info[j] for j in sorted(self.running_info)]
        if self.base.spec.queues or self.usage_in_instance:
            update["queue_usage"] = dict(self.queue_usage)
        inst = self.base.model_copy(update={"spec": self.base.spec.model_copy(update=update)})
        inst.__dict__["catalog"] = self.base.catalog
        for k in ("node_index", "federation", "running_job_info"):
            inst.__dict__.pop(k, None)
        self._cache = (self.version, key, inst)
        self._touched = set()
        return inst


def usage_at(history: Mapping[str, Any] | None, half_life_s: float | None,
             now_s: float) -> QueueUsage:
    """The usage history :meth:`RoundState.history` wrote (None: none yet), under
    ``half_life_s``, brought to ``now_s``: the GPUs it records as held accrue since its
    ``timeS`` and everything decays (:meth:`QueueUsage.advance`)."""
    history = history or {}
    usage = QueueUsage.from_doc(half_life_s, history)
    usage.advance(now_s, {str(q): float(g) for q, g in (history.get("heldGpus") or {}).items()})
    return usage


class PlacementSession:
    """One cluster (or federation) across scheduling rounds: a :class:`RoundState` and the
    solver that plans its rounds.

    Parameters
    ----------
    instance : Instance
        The state at the start: clusters (with running jobs in ``allocated``) and the queue.
    solver, policy, seed, workers :
        Passed to :func:`~hyperplace.solvers.driver.solve_placement` every round.
    requeue_interrupted : bool
        Put a committed job whose GPUs failed back at the end of the queue (default True).
    half_life_s : float, optional
        Keep per-queue usage history with this half-life in seconds (Slurm's
        ``PriorityDecayHalfLife``); None (the default) or 0 keeps none.
    clock : callable
        The time of a call that gives no ``now_s`` (None, the default: ``time.time`` as it
        is at that call, not as it was when this module was imported).
    """

    def __init__(self, instance: Instance, *, solver: str = "auto", policy: str = "performance",
                 seed: int = 0, workers: int = 2, requeue_interrupted: bool = True,
                 half_life_s: float | None = None, clock: Callable[[], float] | None = None):
        self.state = RoundState(instance, half_life_s=half_life_s, clock=clock,
                                usage_in_instance=bool(half_life_s),
                                requeue="end" if requeue_interrupted else None)
        self.solver = solver
        self.policy = policy
        self.seed = seed
        self.workers = workers
        self.last_plan: PlacementPlan | None = None
        self.rounds = 0
        self.warm = WarmStart()
        preload_backends(solver)

    # ---- state ------------------------------------------------------------------------
    @property
    def instance(self) -> Instance:
        """The current round's instance (cluster state and pending queue)."""
        return self.state.instance()

    @property
    def usage(self) -> QueueUsage:
        return self.state.usage

    @property
    def clock(self) -> Callable[[], float]:
        return self.state.clock

    @property
    def running(self) -> dict[str, dict[str, list[int]]]:
        """Running job -> node -> the GPU indices it holds."""
        held: dict[str, dict[str, list[int]]] = {}
        for job, gpus in self.state.jobs.items():
            per = held.setdefault(job, {})
            for node, g in gpus:
                per.setdefault(node, []).append(g)
        return held

    @property
    def pending(self) -> list[TrainingJob]:
        return self.state.pending()

    def accrue(self, now_s: float | None = None) -> dict[str, float]:
        """Bring the usage history to ``now_s`` (default: ``clock()``); returns the decayed
        GPU-hours per queue (see :meth:`RoundState.accrue`). Called by :meth:`solve`,
        :meth:`commit` and :meth:`apply` before they change anything."""
        if not self.usage.enabled:
            return {}
        return self.state.accrue(now_s)

    # ---- rounds -----------------------------------------------------------------------
    def solve(self, budget_s: float = 10.0, *, deadline: float | None = None,
              now_s: float | None = None) -> PlacementPlan:
        """Solve the current round within ``budget_s`` seconds (see ``solve_placement``).

        ``deadline`` (a ``time.perf_counter()`` value), when given and earlier, ends the
        round sooner: the budget becomes what is left of it. With usage history, the round
        happens at ``now_s`` (default: ``clock()``) and its instance carries the history
        brought to that time as ``spec.queueUsage``.
        """
        from hyperplace.solvers.driver import solve_placement

        # the budget runs from this call: building the round's instance from the state
        # (0.9 s of wall at 131,072 GPUs under load) is inside it, not before it
        end = time.perf_counter() + max(0.0, budget_s)
        if deadline is not None:
            budget_s = max(0.0, min(budget_s, deadline - time.perf_counter()))
        deadline = end if deadline is None else min(deadline, end)
        if self.usage.enabled:
            base = self.state.base
            self.state.set_queue_usage(known_queue_usage(
                base.queue_set if base is not None else None, self.accrue(now_s)))
        # the round's time is a budget: Python's cyclic collector, passing over the whole
        # fleet's heap (every node, view and link), runs after it, not inside it (as the
        # ``solve`` command's, ``solve_decomposed``'s and ``sim.planning``'s rounds): at
        # 131,072 GPUs one full pass inside a warm round was about 1 s of its CPU
        enabled = gc.isenabled()
        gc.disable()
        try:
            plan = solve_placement(self.instance, solver=self.solver, budget_s=budget_s,
                                   policy=self.policy, seed=self.seed, workers=self.workers,
                                   warm=self.warm, deadline=deadline)
        finally:
            if enabled:
                gc.enable()
        self.last_plan = plan
        self.rounds += 1
        return plan

    def commit(self, plan: PlacementPlan, *, now_s: float | None = None) -> None:
        """Start the plan's admitted jobs: their GPUs become allocated to them and they
        leave the queue. The plan must come from this session's current instance. With
        usage history they start at ``now_s`` (default: ``clock()``)."""
        starts: dict[str, list[GPU]] = {name: [] for name in sorted({j.job for j in plan.jobs})}
        for pl in plan.placements:
            starts.setdefault(pl.job, []).extend((g.node, g.gpu) for g in pl.gpus)
        now = self.state.now(now_s)
        self.accrue(now)
        self.state.commit(starts, now_s=now, path="plan")

    def apply(self, delta: RoundDelta, *, now_s: float | None = None) -> list[str]:
        """Apply what changed since the last round (:meth:`RoundState.apply`); returns the
        jobs a failure interrupted. With usage history the changes happen at ``now_s``
        (default: ``clock()``): GPUs freed now count towards their queue up to then."""
        now = self.state.now(now_s)
        self.accrue(now)
        return self.state.apply(delta, now_s=now)


def preload_backends(solver: str) -> None:
    """Import the exact backends ``solver`` may use, once per process (a long-lived caller
    such as a session or a simulation, so that no round's budget pays for the import)."""
    if solver in ("auto", "cpsat"):
        import hyperplace.solvers.backends.cpsat  # noqa: F401
    if solver in ("auto", "milp"):
        import hyperplace.solvers.backends.milp  # noqa: F401
