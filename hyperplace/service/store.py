"""What the service keeps across restarts, in SQLite: stored clusters, their queues' usage
history (decayed GPU-hours, for fair share over rounds: the serialized history of the
cluster's round state, :meth:`~hyperplace.solvers.workflows.session.RoundState.history`),
runs, and the latest plan of every job (for the scheduler extenders).

Durability (what the service promises, tested in tests/service/test_service_faults.py): every change
the service acknowledges (a 2xx answer) was committed to SQLite before the answer was sent,
in WAL mode with ``synchronous=FULL`` (each commit is fsynced), so neither kill -9 nor a power
cut after the answer loses it. One server per database: the server holds an exclusive
``flock`` on ``<db>.lock`` for its lifetime (released by the kernel when the process dies,
kill -9 included); a second server on the same file refuses to start and says which process
holds it. The end of a run (its result, and with ``apply`` the stored cluster it changed) is
one transaction: a crash leaves it either not done (the run is resumed) or done once.

Retention: finished runs (succeeded, failed, cancelled) are kept ``retention_s`` (default 7
days, ``--run-retention``) after they finished, then deleted (at start and hourly); their
requests are dropped from memory (and from the row) when they finish, and only unfinished
runs' requests are loaded at start.

Everything else is also held in memory (the event loop reads it without touching the disk);
writes go to SQLite first (in a thread, one connection behind a lock).
"""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS clusters (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, doc TEXT NOT NULL,
    gpus INTEGER NOT NULL, free_gpus INTEGER NOT NULL, pending_jobs INTEGER NOT NULL,
    updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, kind TEXT NOT NULL, state TEXT NOT NULL, created REAL NOT NULL,
    started REAL, finished REAL, budget REAL, request TEXT NOT NULL, result TEXT,
    error TEXT);
CREATE TABLE IF NOT EXISTS cluster_job_plans (
    cluster TEXT NOT NULL, namespace TEXT NOT NULL, job TEXT NOT NULL, nodes TEXT,
    pending TEXT, updated REAL NOT NULL, PRIMARY KEY (cluster, namespace, job));
CREATE TABLE IF NOT EXISTS round_history (cluster TEXT PRIMARY KEY, history TEXT NOT NULL);
"""
#: The usage history's table before it held the round state's serialized history; a
#: database that has it is carried over at start (:meth:`Store._carry_old_usage`).
OLD_USAGE_TABLE = "queue_usage"


@dataclass
class ClusterRecord:
    name: str
    version: int
    doc: dict[str, Any]
    gpus: int
    free_gpus: int
    pending_jobs: int
    updated: float


@dataclass
class RunRecord:
    id: str
    kind: str
    state: str
    created: float
    request: dict[str, Any]
    budget: float | None = None
    started: float | None = None
    finished: float | None = None
    result: Any = None  # parsed JSON answer
    error: dict[str, Any] | None = None


@dataclass
class JobPlan:
    """The latest plan's word on one job: GPUs per node if admitted, else why it waits."""

    cluster: str | None
    nodes: dict[str, int] = field(default_factory=dict)
    pending: str | None = None


#: (stored cluster, namespace, job): plans are only ever looked up under all three.
PlanKey = tuple[str, str, str]
DEFAULT_NAMESPACE = "default"
#: How long finished runs are kept (seconds) unless the server says otherwise.
DEFAULT_RETENTION_S = 7 * 24 * 3600.0
FINISHED = frozenset({"succeeded", "failed", "cancelled"})


class DatabaseInUse(Exception):
    """Another server holds the database's lock."""


def _lock_database(path: str) -> int:
    """An exclusive, non-blocking ``flock`` on ``<path>.lock`` (the fd, kept open)."""
    lock_path = f"{path}.lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        try:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
        except OSError:  # pragma: no cover
            holder = "unknown"
        os.close(fd)
        raise DatabaseInUse(f"the database {path} is in use by another hyperplace serve "
                            f"(pid {holder}, lock {lock_path}); one server per database") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    return fd


class Store:
    def __init__(self, path: str, retention_s: float | None = DEFAULT_RETENTION_S):
        self.path = path
        self.retention_s = retention_s
        self._lock_fd: int | None = None
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._lock_fd = _lock_database(path)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            if path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(SCHEMA)
        self.clusters: dict[str, ClusterRecord] = {}
        self.runs: dict[str, RunRecord] = {}
        self.job_plans: dict[PlanKey, JobPlan] = {}
        #: stored cluster -> its round state's usage history (``RoundState.history()``)
        self.history: dict[str, dict[str, Any]] = {}
        self._carry_old_usage()
        self.expire_runs()
        self._load()

    def _load(self) -> None:
        with self._lock:
            for row in self._db.execute("SELECT name, version, doc, gpus, free_gpus, "
                                        "pending_jobs, updated FROM clusters"):
                self.clusters[row[0]] = ClusterRecord(row[0], row[1], json.loads(row[2]),
                                                      row[3], row[4], row[5], row[6])
            for row in self._db.execute(
                    "SELECT id, kind, state, created, started, finished, budget, "
                    "CASE WHEN state IN ('queued', 'running') THEN request ELSE '{}' END, "
                    "result, error FROM runs"):
                self.runs[row[0]] = RunRecord(
                    id=row[0], kind=row[1], state=row[2], created=row[3], started=row[4],
                    finished=row[5], budget=row[6], request=json.loads(row[7]),
                    result=json.loads(row[8]) if row[8] else None,
                    error=json.loads(row[9]) if row[9] else None)
            for row in self._db.execute("SELECT cluster, namespace, job, nodes, pending "
                                        "FROM cluster_job_plans"):
                self.job_plans[(row[0], row[1], row[2])] = JobPlan(
                    row[0], json.loads(row[3] or "{}"), row[4])
            for row in self._db.execute("SELECT cluster, history FROM round_history"):
                self.history[row[0]] = json.loads(row[1])

    def _carry_old_usage(self) -> None:
        """A database written before the usage history was the round state's keeps it in
        ``queue_usage`` (time, GPU-hours, held GPUs per cluster): the same three facts, moved
        into ``round_history`` in one transaction (nothing is lost)."""
        with self._lock:
            if self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                "name = ?", (OLD_USAGE_TABLE,)).fetchone() is None:
                return
            self._db.execute("BEGIN")
            rows = self._db.execute(
                f"SELECT cluster, time, gpu_hours, held FROM {OLD_USAGE_TABLE}").fetchall()
            self._db.executemany("INSERT OR REPLACE INTO round_history VALUES (?, ?)", [
                (c, json.dumps({"timeS": t, "gpuHours": json.loads(hours),
                                "heldGpus": json.loads(held)})) for c, t, hours, held in rows])
            self._db.execute(f"DROP TABLE {OLD_USAGE_TABLE}")
            self._db.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._db.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    # ---- clusters -----------------------------------------------------------------------
    def put_cluster(self, rec: ClusterRecord, doc_text: str,
                    history: dict[str, Any] | None = None, run: RunRecord | None = None) -> None:
        """Store a cluster and (when given) its round state's usage history and a finished
        run (the end of an ``apply`` run), in one transaction."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                if run is not None:
                    self._write_run(run)
                self._db.execute(
                    "INSERT OR REPLACE INTO clusters VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (rec.name, rec.version, doc_text, rec.gpus, rec.free_gpus, rec.pending_jobs,
                     rec.updated))
                if history is not None:
                    self._db.execute("INSERT OR REPLACE INTO round_history VALUES (?, ?)",
                                     (rec.name, json.dumps(history)))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        self.clusters[rec.name] = rec
        if history is not None:
            self.history[rec.name] = history
        if run is not None:
            self._after_run_write(run)

    def delete_cluster(self, name: str) -> bool:
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM clusters WHERE name = ?", (name,))
            self._db.execute("DELETE FROM round_history WHERE cluster = ?", (name,))
            self._db.execute("DELETE FROM cluster_job_plans WHERE cluster = ?", (name,))
            self._db.execute("COMMIT")
        self.history.pop(name, None)
        for key in [k for k in self.job_plans if k[0] == name]:
            del self.job_plans[key]
        return self.clusters.pop(name, None) is not None

    # ---- runs -----------------------------------------------------------------------------
    def _write_run(self, run: RunRecord) -> None:
        request = {} if run.state in FINISHED else run.request
        self._db.execute(
            "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run.id, run.kind, run.state, run.created, run.started, run.finished,
             run.budget, json.dumps(request),
             json.dumps(run.result) if run.result is not None else None,
             json.dumps(run.error) if run.error is not None else None))

    def _after_run_write(self, run: RunRecord) -> None:
        if run.state in FINISHED:
            run.request = {}  # not kept in memory once finished (nor in the row)
        self.runs[run.id] = run

    def save_run(self, run: RunRecord) -> None:
        with self._lock:
            self._write_run(run)
        self._after_run_write(run)

    def expire_runs(self, now: float | None = None) -> int:
        """Delete finished runs older than the retention; how many went."""
        if not self.retention_s:
            return 0
        cutoff = (time.time() if now is None else now) - self.retention_s
        with self._lock:
            cur = self._db.execute("DELETE FROM runs WHERE state IN ('succeeded', 'failed', "
                                   "'cancelled') AND finished IS NOT NULL AND finished < ?",
                                   (cutoff,))
        gone = [r.id for r in self.runs.values()
                if r.state in FINISHED and r.finished is not None and r.finished < cutoff]
        for rid in gone:
            del self.runs[rid]
        return max(cur.rowcount, len(gone))

    def run_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.runs.values():
            out[r.state] = out.get(r.state, 0) + 1
        return out

    # ---- latest plan per job --------------------------------------------------------------
    def record_plan(self, cluster: str, index: dict[str, Any]) -> None:
        """Remember a stored cluster's plan's word on each of its jobs (admitted: where;
        pending: why), keyed by (cluster, namespace, job). Plans of requests that name no
        stored cluster are never recorded: they change nothing the extenders answer."""
        now = time.time()
        spaces = index.get("namespaces") or {}
        rows: list[tuple[str, str, str, str | None, str | None, float]] = [
            (cluster, spaces.get(job) or DEFAULT_NAMESPACE, job, json.dumps(nodes), None, now)
            for job, nodes in index.get("jobs", {}).items()]
        rows += [(cluster, spaces.get(job) or DEFAULT_NAMESPACE, job, None, reason, now)
                 for job, reason in index.get("pending", {}).items()]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO cluster_job_plans VALUES (?, ?, ?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")
        for c, ns, job, nodes, reason, _ in rows:
            self.job_plans[(c, ns, job)] = JobPlan(c, json.loads(nodes or "{}"), reason)
