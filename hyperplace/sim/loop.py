"""The round loop: state across scheduling rounds, independent of any clock.

:class:`RoundLoop` is what a controller would run in production: it is told what happened
(a job arrived, finished, failed; a GPU, node or switch went down or came back) with the
time it happened, and asked to run a round at a time of the caller's choosing. It never
reads a clock itself; the simulator (:mod:`hyperplace.sim.simulator`) is one caller, a
controller reacting to cluster events would be another.

The state itself (GPUs, failures, the queue, usage history) is the one round state,
:class:`~hyperplace.solvers.workflows.session.RoundState` (as :class:`~hyperplace.sim.state.ClusterState`):
every event is a :class:`~hyperplace.solvers.workflows.session.RoundDelta` applied to it and
every round's starts are a commit; the loop keeps what only a replay needs (each job's work,
checkpoints, speed and record).

A round builds the current :class:`~hyperplace.models.Instance` (running jobs hold their
GPUs, failed hardware is ``faulty``), asks the policy, optionally runs the independent
checker on the plan (``check=True``: every round's state and plan are checked, as the tests
do), and starts the chosen jobs. Running jobs keep their GPUs. Every start is also held to
the job's own placement rules (:class:`~hyperplace.check.JobRules`: hop and bandwidth
limits, types, memory), checked or not: a rule it breaks is recorded on the job
(``JobRecord.rule_breaks``, the metrics' ``rule_breaks``). A peer whose upstream cannot
express a rule (:attr:`~hyperplace.sim.policies.Policy.tolerated`: Slurm's ``--switches``
after ``max_switch_wait``) breaks it in a checked replay without failing it; any other
violation fails it.

With declared queues (the instance's ``spec.queues``), every round's instance lists the
running jobs with their queues (``spec.runningJobs``: quotas and fair share count them) and,
with a ``half_life_s``, each queue's decayed GPU-hours so far (``spec.queueUsage``; see
:mod:`hyperplace.models.usage`): GPUs held between two events accrue to
their job's queue, and the history decays with the half-life, so a queue that got less over
recent rounds is preferred by the fair-share objective.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hyperplace.check import JobRules, Violation, check
from hyperplace.models.usage import QueueUsage
from hyperplace.models import Instance
from hyperplace.sim.jobs import JobRecord, SimJob
from hyperplace.sim.policies import Decision, Policy, Running, RoundView
from hyperplace.sim.speed import SpeedModel
from hyperplace.sim.state import GPU, ClusterState
from hyperplace.solvers.workflows.session import RoundDelta


@dataclass
class Started:
    job: SimJob
    gpus: list[GPU]
    speed: float
    end_s: float


@dataclass
class RoundResult:
    now: float
    started: list[Started]
    decision: Decision
    violations: list[Violation] = field(default_factory=list)


def _close_piece(rec: JobRecord, now: float) -> None:
    """The job's running piece (:attr:`JobRecord.pieces`) ends ``now``."""
    if rec.pieces and rec.pieces[-1][1] is None:
        start, _, speed = rec.pieces[-1]
        rec.pieces[-1] = (start, now, speed)


class CheckFailed(AssertionError):
    """A round's plan broke a rule of the independent checker (``check=True``)."""


class RoundLoop:
    """Cluster state, queue and running jobs across rounds (see the module docstring)."""

    def __init__(self, instance: Instance, policy: Policy, speed: SpeedModel | None = None, *,
                 check: bool = False, half_life_s: float | None = None):
        self.state = ClusterState(instance, half_life_s=half_life_s)
        self.state.on_accrue = self._count_gpu_seconds
        # GPU-seconds each queue held (no decay), in all and within ``window`` (the arrival
        # window, set by the simulator): what the metrics report per queue
        self.gpu_seconds: dict[str, float] = {}
        self.gpu_seconds_in_window: dict[str, float] = {}
        self.window: tuple[float, float] | None = None
        self.policy = policy
        self.speed = speed or SpeedModel(self.state.base)
        self.check = check
        self.running: dict[str, Running] = {}
        self.records: dict[str, JobRecord] = {}
        self.rounds = 0
        self.rules = JobRules(self.state.base)  # every start's own rules (rule_breaks)

    @property
    def queue(self) -> dict[str, SimJob]:
        """The pending jobs in queue order (the round state's queue)."""
        return self.state.queue

    @property
    def usage(self) -> QueueUsage:
        return self.state.usage

    # ---- usage ------------------------------------------------------------------------
    def queue_of(self, job: SimJob) -> str:
        """The queue the round sees for ``job`` (its manifest's label; ``default`` without
        declared queues)."""
        return self.state.base.queue_of(job.manifest)

    def accrue(self, now: float) -> None:
        """GPUs held since the last event count towards their queues (the round state does
        this before anything changes who holds what)."""
        self.state.accrue(now)

    def _count_gpu_seconds(self, last: float | None, now: float, held: dict[str, float]) -> None:
        """The metrics' GPU-seconds per queue, in all and within the arrival window."""
        if last is not None and now > last:
            lo, hi = self.window if self.window is not None else (last, now)
            inside = max(0.0, min(now, hi) - max(last, lo))
            for q, g in held.items():
                self.gpu_seconds[q] = self.gpu_seconds.get(q, 0.0) + g * (now - last)
                if inside > 0:
                    self.gpu_seconds_in_window[q] = \
                        self.gpu_seconds_in_window.get(q, 0.0) + g * inside

    # ---- events -----------------------------------------------------------------------
    def submit(self, job: SimJob, now: float) -> None:
        job.queue = self.queue_of(job)
        rec = self.records.setdefault(job.name, JobRecord(job=job))
        rec.queued_since = now
        self.state.apply(RoundDelta(arrivals=[job]), now_s=now)

    def remaining_work(self, name: str, now: float) -> float:
        rec = self.records[name]
        r = self.running.get(name)
        done = rec.done_work_s
        if r is not None:
            done += (now - r.start_s) * r.speed
        return max(0.0, rec.job.work_s - done)

    def predicted_remaining(self, name: str, now: float) -> float:
        """Remaining work as a scheduler predicts it: predicted work minus what was done
        (a job past its prediction is predicted to need one more minute at its speed)."""
        rec = self.records[name]
        r = self.running.get(name)
        done = rec.done_work_s
        speed = 1.0
        if r is not None:
            done += (now - r.start_s) * r.speed
            speed = r.speed
        return max(60.0 * speed, rec.job.predicted_s - done)

    def finish(self, name: str, now: float) -> None:
        """The job ended (its work is done): release its GPUs."""
        self.state.apply(RoundDelta(completions=[name]), now_s=now)
        r = self.running.pop(name)
        rec = self.records[name]
        rec.run_s += now - r.start_s
        rec.done_work_s = rec.job.work_s
        rec.end_s = now
        _close_piece(rec, now)

    def interrupt(self, name: str, now: float, *, cause: str = "failure") -> float:
        """A failure (``cause``: or a ``preemption``, a ``migration``) stopped the job: keep
        the work up to its last checkpoint, re-queue it.

        Returns the GPU-seconds of work lost.
        """
        self.state.apply(RoundDelta(interruptions=[name]), now_s=now)
        return self._stopped(name, now, cause)

    def _stopped(self, name: str, now: float, cause: str = "failure") -> float:
        """The record of a job the round state has just interrupted (and re-queued)."""
        r = self.running.pop(name)
        rec = self.records[name]
        elapsed = now - r.start_s
        ckpt = rec.job.checkpoint_s
        saved_wall = (elapsed // ckpt) * ckpt if ckpt > 0 else 0.0
        rec.done_work_s = min(rec.job.work_s, rec.done_work_s + saved_wall * r.speed)
        lost = (elapsed - saved_wall) * len(r.gpus)
        if cause == "preemption":
            rec.lost_preempted_gpu_s += lost
            rec.preemptions += 1
        elif cause == "migration":
            rec.lost_migrated_gpu_s += lost
            rec.migrations += 1
        else:
            rec.lost_gpu_s += lost
            rec.restarts += 1
        rec.run_s += elapsed
        rec.queued_since = now
        _close_piece(rec, now)
        return lost

    def _hit(self, delta: RoundDelta, now: float) -> list[str]:
        # the state may also free GPUs a policy holds for a job not running yet (a
        # federation member's part waiting for its siblings, hyperplace.fedsim.karmada):
        # the state released them; the policy sees that at its next round
        hit = [name for name in self.state.apply(delta, now_s=now) if name in self.running]
        for name in hit:
            self._stopped(name, now)
        return hit

    def fail_gpus(self, gpus: list[GPU], now: float) -> list[str]:
        """GPUs failed: mark them, interrupt the jobs on them; returns the jobs hit."""
        return self._hit(RoundDelta(failures=list(gpus)), now)

    def fail_nodes(self, nodes: list[str], now: float) -> list[str]:
        return self._hit(RoundDelta(node_failures=list(nodes)), now)

    def fail_switch(self, switch: str, now: float) -> list[str]:
        return self._hit(RoundDelta(switch_failures=[switch]), now)

    def repair(self, *, gpus: list[GPU] = (), nodes: list[str] = (),
               switches: list[str] = ()) -> None:
        """GPUs, hosts or switches back in service (a repair takes no time of its own)."""
        self.state.apply(RoundDelta(recoveries=list(gpus), node_repairs=list(nodes),
                                    switch_repairs=list(switches)))

    def crash_jobs(self, names: list[str], now: float) -> list[str]:
        """A software fault (no hardware down): the jobs restart from their checkpoints."""
        return self._hit(RoundDelta(interruptions=[n for n in names if n in self.running]), now)

    # ---- a round ----------------------------------------------------------------------
    def view(self, now: float) -> RoundView:
        return RoundView(now=now, state=self.state, queue=list(self.queue.values()),
                         running=self.running, speed=self.speed,
                         remaining_work={n: self.predicted_remaining(n, now)
                                         for n in self.queue})

    def run_round(self, now: float, *, fill: bool = False) -> RoundResult:
        """Ask the policy, check its plan if asked to, start the jobs it chose.

        ``fill``: ask a policy that fills between its rounds (``fills_between_rounds``, its
        ``fill_between(view)``: the planning engine) for that fill instead of a round."""
        self.rounds += 1
        self.accrue(now)
        self.state.set_queue_usage(self.usage.snapshot())
        view = self.view(now)
        decision = self.policy.fill_between(view) if fill else self.policy.decide(view)
        violations: list[Violation] = []
        if self.check:
            violations = check(decision.plan, decision.instance)
            sched = getattr(self.policy, "schedule_violations", None)
            if sched is not None:  # the over-time schedule's own checker (sim.planning)
                violations = [*violations, *sched(now)]
            # a rule the peer's upstream cannot express is counted below, not a failure
            violations = [v for v in violations if not self.policy.tolerates(
                v.code, self.queue.get(v.job or ""), now)]
            if violations:
                raise CheckFailed(f"round at t={now:g} ({self.policy.name}): "
                                  + "; ".join(str(v) for v in violations[:5]))
        for name in decision.preempted:  # stopped so that this round's plan fits
            if name in self.running:
                self.interrupt(name, now, cause="preemption")
        for name in decision.migrated:  # checkpointed; restarts below on its new GPUs
            if name in self.running:
                self.interrupt(name, now, cause="migration")
        self.state.commit({name: [g for unit in units.values() for g in unit]
                           for name, units in decision.starts.items()}, now_s=now,
                          path="decision")
        started = []
        for name, units in decision.starts.items():
            job = self.state.started[name]
            gpus = [g for unit in units.values() for g in unit]
            speed = self.speed.speed(job.manifest, units)
            rec = self.records[name]
            if rec.first_start_s is None:
                rec.first_start_s = now
            if rec.queued_since is not None:
                rec.queued_s += now - rec.queued_since
                rec.queued_since = None
            rec.pieces.append((now, None, speed))
            rec.rule_breaks.update(v.code for v in self.rules.start_violations(job.manifest,
                                                                                units))
            work = self.remaining_work(name, now)
            end = now + work / speed  # the true end (the replay's clock; no policy sees it)
            guess = self.predicted_remaining(name, now) / speed
            limit_end = now + getattr(self.policy, "limit", lambda j, s: guess)(job, self.speed)
            self.running[name] = Running(job=job, start_s=now, speed=speed, gpus=gpus,
                                         predicted_end_s=now + guess, limit_end_s=limit_end)
            started.append(Started(job=job, gpus=gpus, speed=speed, end_s=end))
        return RoundResult(now=now, started=started, decision=decision, violations=violations)
