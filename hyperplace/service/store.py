"""What the service keeps across restarts, in SQLite: stored clusters, their queues' usage
history (decayed GPU-hours, for fair share over rounds), runs, and the latest plan of every
job (for the scheduler extenders).

Everything is also held in memory (the event loop reads it without touching the disk); writes
go to SQLite first (in a thread, one connection behind a lock, WAL journal), so a restart
loses nothing that was acknowledged.
"""

from __future__ import annotations

import json
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
CREATE TABLE IF NOT EXISTS job_plans (
    job TEXT PRIMARY KEY, cluster TEXT, nodes TEXT, pending TEXT, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS queue_usage (
    cluster TEXT PRIMARY KEY, time REAL, gpu_hours TEXT NOT NULL, held TEXT NOT NULL);
"""


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
class UsageRecord:
    """A stored cluster's usage history: decayed GPU-hours per queue as of ``time_s`` (wall
    clock, seconds) and the GPUs each queue has held since then (what accrues next)."""

    time_s: float | None
    gpu_hours: dict[str, float] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"asOf": self.time_s, "gpuHours": dict(sorted(self.gpu_hours.items())),
                "heldGpus": dict(sorted(self.held.items()))}


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


class Store:
    def __init__(self, path: str):
        self.path = path
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        with self._lock:
            if path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
        self.clusters: dict[str, ClusterRecord] = {}
        self.runs: dict[str, RunRecord] = {}
        self.job_plans: dict[str, JobPlan] = {}
        self.usage: dict[str, UsageRecord] = {}
        self._load()

    def _load(self) -> None:
        with self._lock:
            for row in self._db.execute("SELECT name, version, doc, gpus, free_gpus, "
                                        "pending_jobs, updated FROM clusters"):
                self.clusters[row[0]] = ClusterRecord(row[0], row[1], json.loads(row[2]),
                                                      row[3], row[4], row[5], row[6])
            for row in self._db.execute("SELECT id, kind, state, created, started, finished, "
                                        "budget, request, result, error FROM runs"):
                self.runs[row[0]] = RunRecord(
                    id=row[0], kind=row[1], state=row[2], created=row[3], started=row[4],
                    finished=row[5], budget=row[6], request=json.loads(row[7]),
                    result=json.loads(row[8]) if row[8] else None,
                    error=json.loads(row[9]) if row[9] else None)
            for row in self._db.execute("SELECT job, cluster, nodes, pending FROM job_plans"):
                self.job_plans[row[0]] = JobPlan(row[1], json.loads(row[2] or "{}"), row[3])
            for row in self._db.execute("SELECT cluster, time, gpu_hours, held FROM queue_usage"):
                self.usage[row[0]] = UsageRecord(row[1], json.loads(row[2]), json.loads(row[3]))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ---- clusters -----------------------------------------------------------------------
    def put_cluster(self, rec: ClusterRecord, doc_text: str,
                    usage: UsageRecord | None = None) -> None:
        """Store a cluster and (when given) its usage history, in one transaction."""
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.execute(
                    "INSERT OR REPLACE INTO clusters VALUES (?, ?, ?, ?, ?, ?, ?)",
                    (rec.name, rec.version, doc_text, rec.gpus, rec.free_gpus, rec.pending_jobs,
                     rec.updated))
                if usage is not None:
                    self._db.execute(
                        "INSERT OR REPLACE INTO queue_usage VALUES (?, ?, ?, ?)",
                        (rec.name, usage.time_s, json.dumps(usage.gpu_hours),
                         json.dumps(usage.held)))
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        self.clusters[rec.name] = rec
        if usage is not None:
            self.usage[rec.name] = usage

    def delete_cluster(self, name: str) -> bool:
        with self._lock:
            self._db.execute("BEGIN")
            self._db.execute("DELETE FROM clusters WHERE name = ?", (name,))
            self._db.execute("DELETE FROM queue_usage WHERE cluster = ?", (name,))
            self._db.execute("COMMIT")
        self.usage.pop(name, None)
        return self.clusters.pop(name, None) is not None

    # ---- runs -----------------------------------------------------------------------------
    def save_run(self, run: RunRecord) -> None:
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run.id, run.kind, run.state, run.created, run.started, run.finished,
                 run.budget, json.dumps(run.request),
                 json.dumps(run.result) if run.result is not None else None,
                 json.dumps(run.error) if run.error is not None else None))
        self.runs[run.id] = run

    def run_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.runs.values():
            out[r.state] = out.get(r.state, 0) + 1
        return out

    # ---- latest plan per job --------------------------------------------------------------
    def record_plan(self, cluster: str | None, index: dict[str, Any]) -> None:
        """Remember the plan's word on each of its jobs (admitted: where; pending: why)."""
        now = time.time()
        rows: list[tuple[str, str | None, str | None, str | None, float]] = [
            (job, cluster, json.dumps(nodes), None, now)
                for job, nodes in index.get("jobs", {}).items()]
        rows += [(job, cluster, None, reason, now)
                 for job, reason in index.get("pending", {}).items()]
        with self._lock:
            self._db.execute("BEGIN")
            self._db.executemany("INSERT OR REPLACE INTO job_plans VALUES (?, ?, ?, ?, ?)", rows)
            self._db.execute("COMMIT")
        for job, nodes in index.get("jobs", {}).items():
            self.job_plans[job] = JobPlan(cluster, dict(nodes), None)
        for job, reason in index.get("pending", {}).items():
            self.job_plans[job] = JobPlan(cluster, {}, reason)
