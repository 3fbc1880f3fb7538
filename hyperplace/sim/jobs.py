"""Jobs of a simulation: a training-job manifest plus the facts a replay needs.

A :class:`SimJob` carries its manifest (what a scheduler sees), its submit time, and its
*work*: the seconds it runs at reference speed (1.0 = the reference GPU type, all nodes on
one leaf switch; see :mod:`hyperplace.sim.speed`). Its run time in a simulation is the work
divided by the speed of the placement it gets, so topology and GPU type show in completion
times. ``checkpoint_s`` is how often it saves progress (work lost on a failure is the work
since the last checkpoint); ``limit_s`` is the time limit a user would give Slurm.
``predicted_work_s`` is the only work figure a scheduler sees (the cost model's prediction,
with the replay's prediction error, :func:`hyperplace.sim.workload.with_predictions`;
``None``: exact, the work itself).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hyperplace.models import TrainingJob

# Checkpoint every 30 minutes unless a job says otherwise: an assumption (the Llama 3 report
# gives no interval; hourly or faster checkpoints are the common practice it describes as
# needed to survive its interruption rate).
DEFAULT_CHECKPOINT_S = 1800.0


@dataclass
class SimJob:
    """One job of a replay (mutable run-time bookkeeping lives in :class:`JobRecord`)."""

    name: str
    submit_s: float
    work_s: float
    gpus: int
    manifest: TrainingJob
    checkpoint_s: float = DEFAULT_CHECKPOINT_S
    limit_s: float | None = None
    source: str = ""
    queue: str = "default"  # the queue its GPUs count against (its manifest's label says so)
    predicted_work_s: float | None = None  # what schedulers see (None: the true work)

    @property
    def predicted_s(self) -> float:
        """The predicted work (the true work when no prediction was set)."""
        return self.work_s if self.predicted_work_s is None else self.predicted_work_s


@dataclass
class JobRecord:
    """What happened to one job in one simulation (filled in by the simulator)."""

    job: SimJob
    first_start_s: float | None = None
    end_s: float | None = None
    done_work_s: float = 0.0          # work completed and safe (checkpointed or finished)
    queued_s: float = 0.0             # total time spent waiting (all waits, requeues included)
    run_s: float = 0.0                # wall time spent running (including work later lost)
    restarts: int = 0
    lost_gpu_s: float = 0.0           # GPU-seconds of work lost to failures
    lost_preempted_gpu_s: float = 0.0  # GPU-seconds of work lost to preemption
    preemptions: int = 0
    lost_migrated_gpu_s: float = 0.0  # GPU-seconds of work lost to migrations (defrag)
    migrations: int = 0
    #: each piece it ran in, oldest first: (start, end or None while it runs, speed): a job
    #: stopped by a failure, a preemption or a migration runs in more than one
    pieces: list[tuple[float, float | None, float]] = field(default_factory=list)
    #: checker codes of the job's own placement rules a start of it broke (a peer's
    #: ``tolerated`` rules; hyperplace.check.JobRules)
    rule_breaks: set[str] = field(default_factory=set)
    queued_since: float | None = None
    # the first forecast of its start (policies with a schedule: the round after it arrived)
    forecast_start_s: float | None = None
    forecast_pool: str = ""
    forecast_at_s: float | None = None
    # that forecast before a policy's correction of it (the schedule's planned start; None:
    # the policy corrects nothing)
    raw_forecast_start_s: float | None = None
    # every forecast of its start while it waited, as the policy gave it: (made at, start
    # or None, window earliest, window latest; None: no window), a new entry only when it
    # changed (hyperplace.sim.forecast_score scores them)
    forecasts: list[tuple[float, float | None, float | None, float | None]] = field(
        default_factory=list)

    @property
    def speeds(self) -> list[float]:
        """The speed of each piece it ran in, oldest first (:attr:`pieces`)."""
        return [speed for _, _, speed in self.pieces]

    @property
    def jct_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.job.submit_s
