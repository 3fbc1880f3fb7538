"""Prometheus metrics of one service process (its own registry, text exposition format)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
                   30, 60, 120)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        disable_created_metrics()  # the *_created series only add noise here
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("hyperplace_requests_total", "HTTP requests by endpoint and status",
                                ["endpoint", "status"], registry=r)
        self.latency = Histogram("hyperplace_request_seconds", "HTTP request latency",
                                 ["endpoint"], buckets=LATENCY_BUCKETS, registry=r)
        self.solve_time = Histogram("hyperplace_solve_seconds", "solver time per task (runtimeS)",
                                    ["kind"], buckets=LATENCY_BUCKETS, registry=r)
        self.results = Counter("hyperplace_solve_results_total", "solves by kind and status",
                               ["kind", "status"], registry=r)
        self.fallbacks = Counter("hyperplace_fallbacks_total",
                                 "solves answered with the greedy/proportional fallback",
                                 ["kind"], registry=r)
        self.worker_events = Counter("hyperplace_worker_events_total",
                                     "workers replaced after a crash or a hard timeout",
                                     ["event"], registry=r)
        self.queue_depth = Gauge("hyperplace_queue_depth", "tasks waiting for a worker",
                                 registry=r)
        self.workers_busy = Gauge("hyperplace_workers_busy", "workers solving now", registry=r)
        self.workers = Gauge("hyperplace_workers", "worker processes", registry=r)
        self.runs = Gauge("hyperplace_runs", "asynchronous runs by state", ["state"], registry=r)

    def render(self, queue_depth: int, busy: int, workers: int,
               run_counts: Callable[[], dict[str, int]]) -> bytes:
        self.queue_depth.set(queue_depth)
        self.workers_busy.set(busy)
        self.workers.set(workers)
        counts = run_counts()
        for state in ("queued", "running", "succeeded", "failed", "cancelled"):
            self.runs.labels(state).set(counts.get(state, 0))
        return generate_latest(self.registry)
