"""Scheduling rounds that are not cold starts: a session carries one cluster from round to round.

A scheduler (the over-time simulator, the service) runs many rounds on one cluster whose state
changes a little between them: a few jobs arrive, a few finish, a GPU or a node fails. Solving
every round from the files would rebuild what did not change. A :class:`PlacementSession`
keeps the current :class:`~hyperplace.models.instance.Instance` (cluster state and pending
queue) and applies changes to it in place of re-reading it:

* the fabric (switch graph, hop counts, domains of every tier) is built once per cluster and
  shared by every later round, since nodes keep their names and cables between rounds;
* unchanged nodes and jobs are the same objects from round to round (nothing is validated
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

**Usage history** (``half_life_s``): as the simulator does, a session can remember which
queue got the GPUs over past rounds, with Slurm's decay
(:class:`~hyperplace.models.usage.QueueUsage`, the one implementation of the
rule): the GPUs each queue holds between two calls count towards it, the total halves every
``half_life_s`` seconds, and every round's instance carries the result as
``spec.queueUsage``, so a queue that got less over recent rounds is preferred by the
fair-share objective (a queue whose jobs never win a round's tie does not wait for ever).
The session has no clock of its own that it trusts: :meth:`~PlacementSession.solve`,
:meth:`~PlacementSession.commit` and :meth:`~PlacementSession.apply` take the time of the
event as ``now_s`` (seconds, any origin; a simulation passes its own times); without it the
session reads ``clock`` (default ``time.time``, for a controller running rounds in real
time). A time earlier than the last one accrues nothing. A starting instance's own
``spec.queueUsage`` is the history at the first call. Without ``half_life_s`` the instance's
``spec.queueUsage`` (if any) is left as given.

With declared queues (``spec.queues``), committing a plan lists its jobs in
``spec.runningJobs`` with their queue and priority (quotas and fair share count them under
their queue in later rounds); a job that completes or is interrupted leaves that list.

Running jobs are tracked by the GPUs they hold (``Node.allocated`` maps a GPU to its job),
so a session can start from any instance: jobs running in it when the session starts can
complete like the ones the session committed. A job hit by a failure loses all its GPUs; if
the session committed it (it knows its manifest), it returns to the queue (at the end, as a
new arrival would) unless ``requeue_interrupted`` is False.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property

from hyperplace.errors import InputError
from hyperplace.models.usage import (
    QueueUsage,
    held_gpus_by_queue,
    with_queue_usage,
)
from hyperplace.models.cluster import Cluster
from hyperplace.models.instance import Instance, RunningJob
from hyperplace.models.job import TrainingJob
from hyperplace.models.node import Node
from hyperplace.models.plan import PlacementPlan
from hyperplace.solvers.heuristics.warm import WarmStart

__all__ = ["PlacementSession", "RoundDelta"]


@dataclass(frozen=True)
class RoundDelta:
    """What changed since the last round.

    Attributes
    ----------
    arrivals : list of TrainingJob
        Jobs joining the end of the pending queue (names must be new).
    completions : list of str
        Running jobs that finished; their GPUs become free.
    failures : list of str or (str, int)
        A node name (every GPU of it fails) or a (node, GPU index) pair. A failed GPU is
        marked faulty; a job holding it is interrupted and loses all its GPUs.
    recoveries : list of str or (str, int)
        Faulty GPUs (or every faulty GPU of a node) that are back in service.
    withdrawals : list of str
        Pending jobs removed from the queue (cancelled by their owner).
    """

    arrivals: list[TrainingJob] = field(default_factory=list)
    completions: list[str] = field(default_factory=list)
    failures: list[str | tuple[str, int]] = field(default_factory=list)
    recoveries: list[str | tuple[str, int]] = field(default_factory=list)
    withdrawals: list[str] = field(default_factory=list)


class PlacementSession:
    """One cluster (or federation) across scheduling rounds.

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
        The time of a call that gives no ``now_s`` (default ``time.time``).
    """

    def __init__(self, instance: Instance, *, solver: str = "auto", policy: str = "performance",
                 seed: int = 0, workers: int = 2, requeue_interrupted: bool = True,
                 half_life_s: float | None = None, clock: Callable[[], float] = time.time):
        self._instance = instance
        self.solver = solver
        self.policy = policy
        self.seed = seed
        self.workers = workers
        self.requeue_interrupted = requeue_interrupted
        self.last_plan: PlacementPlan | None = None
        self.rounds = 0
        self._manifests: dict[str, TrainingJob] = {}  # committed jobs, for requeueing
        self._holdings: dict[str, dict[str, list[int]]] | None = None  # job -> node -> GPUs
        self.warm = WarmStart()
        self.usage = QueueUsage(half_life_s or None, dict(instance.spec.queue_usage))
        self.clock = clock
        preload_backends(solver)

    # ---- state ------------------------------------------------------------------------
    @property
    def instance(self) -> Instance:
        """The current round's instance (cluster state and pending queue)."""
        return self._instance

    @property
    def running(self) -> dict[str, dict[str, list[int]]]:
        """Running job -> node -> the GPU indices it holds."""
        if self._holdings is None:
            held: dict[str, dict[str, list[int]]] = {}
            for c in self._instance.clusters:
                for n in c.nodes:
                    for gpu, job in n.allocated.items():
                        held.setdefault(job, {}).setdefault(n.name, []).append(gpu)
            self._holdings = held
        return self._holdings

    @property
    def pending(self) -> list[TrainingJob]:
        return list(self._instance.jobs)

    def accrue(self, now_s: float | None = None) -> dict[str, float]:
        """Bring the usage history to ``now_s`` (default: ``clock()``): the GPUs each queue
        has held since the last call count towards it, and the whole history decays (see
        :meth:`QueueUsage.advance`); returns the decayed GPU-hours per queue. Called by
        :meth:`solve`, :meth:`commit` and :meth:`apply` before they change anything."""
        if not self.usage.enabled:
            return {}
        now = self.clock() if now_s is None else float(now_s)
        self.usage.advance(now, held_gpus_by_queue(self._instance))
        return self.usage.snapshot()

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

        if self.usage.enabled:
            self._instance = with_queue_usage(self._instance, self.accrue(now_s))

        if deadline is not None:
            budget_s = max(0.0, min(budget_s, deadline - time.perf_counter()))
        plan = solve_placement(self._instance, solver=self.solver, budget_s=budget_s,
                               policy=self.policy, seed=self.seed, workers=self.workers,
                               warm=self.warm)
        self.last_plan = plan
        self.rounds += 1
        return plan

    def commit(self, plan: PlacementPlan, *, now_s: float | None = None) -> None:
        """Start the plan's admitted jobs: their GPUs become allocated to them and they
        leave the queue. The plan must come from this session's current instance. With
        usage history they start at ``now_s`` (default: ``clock()``)."""
        admitted = {j.job for j in plan.jobs}
        queue = {j.name: j for j in self._instance.jobs}
        unknown = admitted - queue.keys()
        if unknown:
            raise InputError(f"job {sorted(unknown)[0]!r} is not in the pending queue",
                             path="plan.jobs")
        take: dict[str, dict[int, str]] = {}
        for pl in plan.placements:
            for g in pl.gpus:
                take.setdefault(g.node, {})[g.gpu] = pl.job

        def change(n: Node) -> Node:
            got = take.get(n.name)
            if not got:
                return n
            busy = set(n.allocated) | set(n.faulty)
            clash = busy.intersection(got)
            if clash:
                raise InputError(f"GPU {min(clash)} of node {n.name} is not free",
                                 path="plan.placements")
            return _copy(n, {"allocated": {**n.allocated, **got}})

        running_jobs = None
        if self._instance.queue_set is not None and admitted:
            inst = self._instance
            running_jobs = [*inst.spec.running_jobs, *(
                RunningJob.started(queue[name], inst.queue_of(queue[name]))
                for name in sorted(admitted))]
        self.accrue(now_s)
        self._replace(change, [j for j in self._instance.jobs if j.name not in admitted],
                      running_jobs=running_jobs)
        for name in admitted:
            self._manifests[name] = queue[name]
            if self._holdings is not None:
                self._holdings[name] = {}
        if self._holdings is not None:
            for node, got in take.items():
                for gpu, job in got.items():
                    self._holdings[job].setdefault(node, []).append(gpu)

    def apply(self, delta: RoundDelta, *, now_s: float | None = None) -> list[str]:
        """Apply what changed since the last round; returns the jobs a failure interrupted.
        With usage history the changes happen at ``now_s`` (default: ``clock()``): GPUs
        freed now count towards their queue up to then."""
        queue = list(self._instance.jobs)
        names = {j.name for j in queue}
        running = self.running
        withdrawn, done, failed, healed, nodes = self._checked(delta, names, running)
        interrupted = sorted({job for node, gpus in failed.items()
                              for gpu, job in nodes[node].allocated.items()
                              if gpus is None or gpu in gpus} - done)
        freed = done | set(interrupted)

        def change(n: Node) -> Node:
            return _changed_node(n, freed, failed, healed)

        new_queue = self._next_queue(delta, queue, withdrawn, interrupted, freed, running)
        nodes_touched = set(failed) | set(healed) | {
            node for job in freed for node in running.get(job, {})}
        listed = self._instance.spec.running_jobs
        running_jobs = [r for r in listed if r.name not in freed] \
            if any(r.name in freed for r in listed) else None
        self.accrue(now_s)
        self._replace(change, new_queue, only=nodes_touched, running_jobs=running_jobs)
        if self._holdings is not None:
            for job in freed:
                self._holdings.pop(job, None)
        return interrupted

    # ---- helpers ----------------------------------------------------------------------
    def _next_queue(self, delta: RoundDelta, queue: list[TrainingJob], withdrawn: set[str],
                    interrupted: list[str], freed: set[str],
                    running: dict[str, dict[str, list[int]]]) -> list[TrainingJob]:
        """The pending queue after the delta: without the withdrawn jobs, with the
        interrupted ones requeued (when asked) and the arrivals (checked: not pending, not
        running)."""
        names = {j.name for j in queue}
        new_queue = [j for j in queue if j.name not in withdrawn]
        for name in interrupted:
            if self.requeue_interrupted and name in self._manifests and name not in names:
                new_queue.append(self._manifests[name])
        for job in delta.arrivals:
            if job.name in names or any(j.name == job.name for j in new_queue):
                raise InputError(f"job {job.name!r} is already pending", path="arrivals")
            if job.name in running and job.name not in freed:
                raise InputError(f"job {job.name!r} is running", path="arrivals")
            new_queue.append(job)
        return new_queue

    def _checked(self, delta: RoundDelta, names: set[str], running: dict[str, dict[str, list[int]]]
                 ) -> tuple[set[str], set[str], dict[str, set[int] | None],
                            dict[str, set[int] | None], dict[str, Node]]:
        """The delta's withdrawals, completions, failures and recoveries, each checked
        against the round (InputError naming the field otherwise), and the nodes by name."""
        withdrawn = set(delta.withdrawals)
        missing = withdrawn - names
        if missing:
            raise InputError(f"job {sorted(missing)[0]!r} is not pending", path="withdrawals")
        done = set(delta.completions)
        missing = done - running.keys()
        if missing:
            raise InputError(f"job {sorted(missing)[0]!r} is not running", path="completions")
        failed = _by_node(delta.failures, "failures")
        healed = _by_node(delta.recoveries, "recoveries")
        nodes = {n.name: n for c in self._instance.clusters for n in c.nodes}
        for path, spec in (("failures", failed), ("recoveries", healed)):
            for node, gpus in spec.items():
                if node not in nodes:
                    raise InputError(f"unknown node {node!r}", path=path)
                bad = [g for g in gpus or () if not 0 <= g < nodes[node].gpu_count]
                if bad:
                    raise InputError(f"node {node!r} has no GPU {bad[0]}", path=path)
        return withdrawn, done, failed, healed, nodes

    def _replace(self, change, jobs: list[TrainingJob], only: set[str] | None = None,
                 running_jobs: list[RunningJob] | None = None) -> None:
        """A new instance with nodes passed through ``change`` and ``jobs`` as the queue
        (and ``running_jobs`` as ``spec.runningJobs`` when given).

        Clusters are copied, not rebuilt, so the cached fabric (``Cluster.network``) carries
        over; unchanged nodes stay the same objects. Nothing is validated again: every change
        here keeps the instance valid by construction (checked above).
        """
        clusters: list[Cluster] = []
        for c in self._instance.clusters:
            if only is not None and not any(n.name in only for n in c.nodes):
                new_nodes = c.nodes
            else:
                new_nodes = [change(n) for n in c.nodes]
            if all(a is b for a, b in zip(new_nodes, c.nodes)):
                clusters.append(c)
                continue
            # node objects changed; the fabric (same names, same cables) did not
            clusters.append(_copy(c, {"nodes": new_nodes}, keep=("network",)))
        update: dict = {"clusters": clusters, "jobs": jobs}
        if running_jobs is not None:
            update["running_jobs"] = running_jobs
        spec = self._instance.spec.model_copy(update=update)
        self._instance = _copy(self._instance, {"spec": spec}, keep=("catalog", "queue_set"))


def preload_backends(solver: str) -> None:
    """Import the exact backends ``solver`` may use, once per process (a long-lived caller
    such as a session or a simulation, so that no round's budget pays for the import)."""
    if solver in ("auto", "cpsat"):
        import hyperplace.solvers.backends.cpsat  # noqa: F401
    if solver in ("auto", "milp"):
        import hyperplace.solvers.backends.milp  # noqa: F401


def _changed_node(n: Node, freed: set[str], failed: dict[str, set[int] | None],
                  healed: dict[str, set[int] | None]) -> Node:
    """``n`` without the GPUs of ``freed`` jobs, with its failed GPUs faulty and its
    recovered ones back (None: the whole node)."""
    update: dict = {}
    if freed and any(job in freed for job in n.allocated.values()):
        update["allocated"] = {g: j for g, j in n.allocated.items() if j not in freed}
    if n.name in failed or n.name in healed:
        faulty = set(n.faulty)
        gone = failed.get(n.name, ())
        faulty |= set(range(n.gpu_count)) if gone is None else set(gone)
        back = healed.get(n.name, ())
        faulty -= set(range(n.gpu_count)) if back is None else set(back)
        update["faulty"] = sorted(faulty)
    return _copy(n, update) if update else n


def _copy(model, update: dict, keep: tuple[str, ...] = ()):
    """``model_copy`` that drops the copied ``cached_property`` values (they describe the
    old fields), except those in ``keep`` that do not depend on the updated fields."""
    out = model.model_copy(update=update)
    for name in [k for k in out.__dict__ if k not in type(out).model_fields and k not in keep]:
        if isinstance(getattr(type(out), name, None), cached_property):
            del out.__dict__[name]
    return out


def _by_node(items: Iterable[str | tuple[str, int]], path: str) -> dict[str, set[int] | None]:
    """node -> GPU indices (None = every GPU of the node)."""
    out: dict[str, set[int] | None] = {}
    for item in items:
        if isinstance(item, str):
            out[item] = None
            continue
        try:
            node, gpu = item
            gpu = int(gpu)
        except (TypeError, ValueError):
            raise InputError(f"expected a node name or a (node, GPU) pair, got {item!r}",
                             path=path) from None
        cur = out.setdefault(node, set())
        if cur is not None:
            cur.add(gpu)
    return out
