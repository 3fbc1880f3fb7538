"""The service's settings: one validated object, built by ``hyperplace serve`` or by tests."""

from __future__ import annotations

import ipaddress
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from hyperplace.errors import InputError

# What the service may add to a request's budget before the answer arrives: reading the
# request, the hop to a worker and back, writing the JSON answer (validating the documents
# happens in the worker and comes out of the budget). Enforced: a worker still busy at the
# deadline plus this less RESPONSE_RESERVE_S is stopped and the request answered 503 with
# Retry-After. Measured
# with bench/bench_service.py (bench/results/service.md); the load test asserts it.
OVERHEAD_S = 0.5
# Of that overhead, what the hard deadline leaves for the answer to be written and to reach
# the client on a loaded machine: a worker still busy at budget + OVERHEAD_S - this is
# stopped (at load 16 on 2 CPUs, a 503 fired at budget + 0.5 s reached the client 0.2 s later).
RESPONSE_RESERVE_S = 0.2
# A large body waits at most this long to be taken in (read and parsed; the budget is in
# the body, so the service cannot know whether a longer wait would still be in time): then
# 429 with Retry-After, so even the smallest budget's refusal comes within the overhead.
INTAKE_WAIT_S = 0.25
# The usage history's half-life by default: Slurm's PriorityDecayHalfLife default, 7 days
# (``DEFAULT_PRIORITY_DECAY`` = 604800 s in SchedMD/slurm src/common/read_config.h).
DEFAULT_HALF_LIFE_S = 7 * 24 * 3600.0
# Above this size a request body is refused with 413 (a 16,384-GPU, 2,000-job instance is
# about 0.9 MB of JSON; 131,072 GPUs about 7 MB).
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024


def default_db_path() -> str:
    """``$XDG_STATE_HOME/hyperplace/service.sqlite`` (``~/.local/state/...`` by default)."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return str(Path(base) / "hyperplace" / "service.sqlite")


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class ServiceConfig:
    """Settings of one service process.

    workers: solver worker processes (each solve runs in one; the event loop never solves).
    queue_limit: requests waiting for a worker beyond which new ones get 429 + Retry-After.
    max_budget_s: the largest ``budgetS`` honoured; larger requests are cut to it (and say so).
    default_budget_s: the budget of a request that names none.
    token: the Bearer token every endpoint but ``/healthz`` requires (None: no token).
    db_path: SQLite file that keeps stored clusters, runs and the latest plan per job across
    restarts (``:memory:`` keeps nothing).
    max_body_bytes: larger request bodies get 413.
    hard_timeout_s: a worker still busy this long past a request's deadline is killed (the
    driver keeps its budget, so this only catches a hung native solver).
    shutdown_grace_s: on SIGTERM, how long running solves may go on before they are stopped
        (``--shutdown-grace``); queued requests are answered 503 at once.
    run_retention_s: finished runs are deleted this long after they finished
        (``--run-retention``, hours on the command line); None or 0 keeps them.
    test_hooks: enables ``/v1/debug/*`` (crash a worker, sleep in one) for the service tests.
    half_life_s: half-life of every stored cluster's per-queue usage history (decayed
    GPU-hours that later rounds' fair share sees, kept in the database); None or 0 keeps none.
    """

    workers: int = 2
    queue_limit: int = 64
    max_budget_s: float = 60.0
    default_budget_s: float = 10.0
    token: str | None = None
    db_path: str = ":memory:"
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    hard_timeout_s: float = 30.0
    shutdown_grace_s: float = 10.0
    run_retention_s: float | None = 7 * 24 * 3600.0
    test_hooks: bool = False
    half_life_s: float | None = DEFAULT_HALF_LIFE_S
    job_labels: tuple[str, ...] = field(default=(
        "hyperplace.io/job", "volcano.sh/job-name", "training.kubeflow.org/job-name",
        "batch.kubernetes.io/job-name", "job-name"))

    @property
    def keeps_usage(self) -> bool:
        """Whether stored clusters keep usage history (a positive half-life)."""
        return bool(self.half_life_s)

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise InputError(f"must be at least 1, got {self.workers}", path="--workers")
        if self.queue_limit < 1:
            raise InputError(f"must be at least 1, got {self.queue_limit}", path="--queue-limit")
        if not (math.isfinite(self.max_budget_s) and self.max_budget_s > 0):
            raise InputError(f"must be a positive, finite number of seconds, got "
                             f"{self.max_budget_s}", path="--max-budget")
        if self.token is not None and not self.token:
            raise InputError("the token file is empty", path="--token-file")
        if self.half_life_s is not None and not (math.isfinite(self.half_life_s)
                                                 and self.half_life_s >= 0):
            raise InputError(f"must be a finite number of hours, 0 or more, got "
                             f"{self.half_life_s / 3600:g}", path="--half-life")
        if not (math.isfinite(self.shutdown_grace_s) and self.shutdown_grace_s >= 0):
            raise InputError(f"must be a finite number of seconds, 0 or more, got "
                             f"{self.shutdown_grace_s}", path="--shutdown-grace")
        if self.run_retention_s is not None and not (math.isfinite(self.run_retention_s)
                                                     and self.run_retention_s >= 0):
            raise InputError("must be a finite number of hours, 0 or more",
                             path="--run-retention")
        if self.max_body_bytes < 1024:
            raise InputError("must be at least 1 KiB", path="--max-body-mb")


def read_token(path: str | Path) -> str:
    """The token in a file (surrounding whitespace ignored); errors are one line."""
    p = Path(path)
    try:
        token = p.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None
    if not token:
        raise InputError("the token file is empty", source=str(path))
    if any(c.isspace() for c in token):
        raise InputError("the token must be one word (no spaces or newlines inside)",
                         source=str(path))
    return token
