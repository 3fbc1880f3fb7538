"""The HTTP service: FastAPI routes over the same library and document schemas as the CLI.

Layout of one request: the guard (ASGI middleware) checks the Bearer token and the body
size and records metrics; FastAPI validates the envelope (budget, solver, which instance);
the documents inside go to a worker process with the request's deadline; the worker
validates them, solves, and returns the JSON answer, which the event loop only forwards.

Status codes (every error body is :class:`~hyperplace.service.schemas.ErrorBody`):
400 malformed JSON, or two ``Authorization`` headers; 401 missing or wrong token; 404 unknown
run, cluster or route; 405 method not allowed (``Allow`` lists every method of the path); 409
a delta that contradicts the stored state, or cancelling a finished run; 413 body over the
limit (refused from ``Content-Length`` before a byte is read); 422 invalid field (``path``
names it), a body nested deeper than :data:`hyperplace.io.MAX_DEPTH` levels, more than
:data:`hyperplace.models.limits.MAX_JOBS` jobs; 429 the queue is full or the work ahead would
outlast the budget (``Retry-After``); 500 a worker crashed or the library failed on this
request (the worker is replaced; other requests are unaffected); 503 starting, shutting down,
or the hard deadline passed (``Retry-After``).

Budgets: ``budgetS`` (default ``default_budget_s``) is cut to ``max_budget_s``; the deadline
starts when the request arrives (its headers are read), so reading and parsing its body and
time spent queued come out of the budget, and the answer (or a 503 with ``Retry-After``)
arrives within the budget plus :data:`~hyperplace.service.config.OVERHEAD_S`. A request that
cannot be answered in time is refused instead of being answered late: 429 at arrival when
the work ahead would outlast its budget, or when a large body cannot be taken in (at most
:data:`INTAKE_SLOTS` read and parsed at once) within
:data:`~hyperplace.service.config.INTAKE_WAIT_S` (refused unread); 503 when its budget ran out while its body was read (unless a worker
is free at once: the floor of any budget is one greedy pass, still answered by the deadline
plus the overhead), or while it waited for a worker (at its deadline, not when a worker
frees up); 503 when the solve has not answered by the deadline plus :data:`HARD_GRACE_S`
(the solver is stopped; the rest of the overhead is for writing the answer). A background run's
budget starts when a worker takes it (time queued is not charged).

Drain (SIGTERM): ``/readyz`` turns 503 at once, new work and every queued request get 503
with ``Retry-After``, running solves go on for up to ``--shutdown-grace`` seconds and are
then stopped (their requests answered 503), background runs stay queued in the database and
resume at the next start; then the process exits.
"""

import asyncio
import contextlib
import hmac
import json
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Body as BodyParam
from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, SkipValidation
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from hyperplace.errors import InputError, field_path, problem_message, typos_first
from hyperplace.io import MAX_DEPTH, json_depth, loads_json
from hyperplace.models.limits import MAX_JOBS
from hyperplace.models.usage import QueueUsage
from hyperplace.models.instance import Instance
from hyperplace.models.federation import EstimateReport, FederationPlan
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.split import SplitPlan
from hyperplace.service import extender
from hyperplace.service.config import (
    INTAKE_WAIT_S,
    OVERHEAD_S,
    RESPONSE_RESERVE_S,
    ServiceConfig,
)

from hyperplace.service.metrics import Metrics
from hyperplace.service.pool import (
    Cancelled,
    Expired,
    HandOffFailed,
    PoolError,
    Saturated,
    Unavailable,
    WorkerCrashed,
    WorkerPool,
    WorkerTimedOut,
)
from hyperplace.service.schemas import (
    CheckRequest,
    CheckResponse,
    EstimateRequest,
    FederationRequest,
    PredictRequest,
    ClusterInfo,
    ClusterPatch,
    ErrorBody,
    K8sExtenderArgs,
    K8sFilterResult,
    K8sHostPriority,
    LayerSplitRequest,
    PlacementRequest,
    RunRequest,
    RunStatus,
    VolcanoPredicateRequest,
    VolcanoPredicateResponse,
    VolcanoPrioritizeRequest,
    VolcanoPrioritizeResponse,
)
from hyperplace.service.state import apply_patch, apply_plan, round_state
from hyperplace.solvers.workflows.session import RoundState, usage_at
from hyperplace.service.store import (
    FINISHED,
    ClusterRecord,
    DatabaseInUse,
    RunRecord,
    Store,
)
from hyperplace.service.worker import (
    RequestProblem,
    input_problem,
    WorkerContext,
    error_body,
    gc_paused,
    run_task,
)

API_VERSION = "v1"
# The hard deadline of a request someone waits for: budget + this (the rest of the overhead
# is for writing the answer).
HARD_GRACE_S = OVERHEAD_S - RESPONSE_RESERVE_S
KNOWN_PATHS = frozenset({"/openapi.json", "/docs", "/redoc"})
ClusterName = Annotated[str, Path(min_length=1, max_length=253,
                                  pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 404, 409, 413, 422, 429, 500, 503)}
# Bodies at least this large are checked and parsed in a thread (the loop keeps answering).
THREAD_PARSE_BYTES = 64 * 1024
PARSED_BODY = "hyperplace.parsed_body"
# When the request arrived (its headers were read; ``time.monotonic()``): budgets count from here.
ARRIVED = "hyperplace.arrived"
SHUTDOWN_RETRY_S = 5
# Large bodies (THREAD_PARSE_BYTES or more, or of unknown length) read and parsed at once;
# the others wait their turn, unread (TCP holds them back at the client), for at most
# INTAKE_WAIT_S (then 429 with Retry-After).
INTAKE_SLOTS = 2
# The intake's first guess of its rate (bytes of JSON read and parsed per second, per slot),
# replaced by what it measures; a loaded 2-CPU machine parses about this.
INTAKE_RATE_BPS = 10e6


class Intake:
    """The gate large bodies pass to be read and parsed: at most ``slots`` at a time (32
    bodies of 0.9 MB read and parsed together took seconds each on a loaded machine, all of
    it out of their budgets). A body waits at most INTAKE_WAIT_S for its turn (its budget is
    inside it, so only a wait within the overhead is sure to be in time), and one that
    would wait longer by the intake's estimate is refused from its headers; both 429 with
    ``Retry-After``, the body unread."""

    def __init__(self, slots: int = INTAKE_SLOTS, rate_bps: float = INTAKE_RATE_BPS):
        self.slots = slots
        self.rate_bps = rate_bps
        self.pending_bytes = 0  # declared bytes in the gate or waiting for it
        self._sem: asyncio.Semaphore | None = None

    def expected_wait(self) -> float:
        """Seconds until a body arriving now is taken in (the bytes ahead at the rate)."""
        return self.pending_bytes / (self.rate_bps * self.slots)

    @property
    def busy(self) -> bool:
        """Every place taken (a body arriving now would wait)."""
        return self._sem is not None and self._sem.locked()

    @contextlib.asynccontextmanager
    async def slot(self, nbytes: int, wait_s: float = INTAKE_WAIT_S) -> AsyncIterator[None]:
        """A place in the intake; :class:`IntakeBusy` if none is free within ``wait_s``."""
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.slots)
        self.pending_bytes += nbytes
        try:
            try:
                await asyncio.wait_for(self._sem.acquire(), wait_s)
            except TimeoutError:
                raise IntakeBusy(self.expected_wait()) from None
            try:
                start = time.monotonic()
                yield
                took = time.monotonic() - start
                if nbytes >= THREAD_PARSE_BYTES and took > 0:
                    self.rate_bps = 0.7 * self.rate_bps + 0.3 * max(1e5, nbytes / took)
            finally:
                self._sem.release()
        finally:
            self.pending_bytes -= nbytes


class IntakeBusy(Exception):
    def __init__(self, wait_s: float):
        self.wait_s = wait_s
        super().__init__(f"the server is taking in other large request bodies (about "
                         f"{wait_s:.1f} s of them); retry in {max(1, math.ceil(wait_s))} s")


class BodyTooLarge(Exception):
    pass


class BodyProblem(Exception):
    def __init__(self, status: int, message: str):
        self.status = status
        super().__init__(message)


def parse_body(raw: bytes) -> Any:
    """A request body as JSON, within the documented limits: nesting checked on the bytes
    before the parser runs (:data:`hyperplace.io.MAX_DEPTH`, as for the CLI), duplicate keys
    and NaN/Infinity refused (as the CLI reads JSON)."""
    depth = json_depth(raw)
    if depth > MAX_DEPTH:
        raise BodyProblem(422, f"the body is nested {depth} levels deep; at most {MAX_DEPTH} "
                          "(the input limit)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyProblem(400, f"malformed JSON: byte {exc.start} is not UTF-8") from None
    try:
        if len(raw) < THREAD_PARSE_BYTES:
            return loads_json(text)
        with gc_paused():  # a large body: the collector would hold the loop (worker.py)
            return loads_json(text)
    except json.JSONDecodeError as exc:
        raise BodyProblem(400, f"malformed JSON at line {exc.lineno}, column {exc.colno}: "
                          f"{exc.msg}") from None
    except ValueError as exc:  # a duplicate key, NaN or Infinity
        raise BodyProblem(400, f"malformed JSON: {exc}") from None
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise BodyProblem(422, "the body is nested too deeply") from None


class ParsedBodyRoute(APIRoute):
    """Routes that take the body the guard already read and parsed (in a thread when large)
    instead of parsing it again on the event loop."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            if request.scope.get(PARSED_BODY) is not None:
                request = ParsedRequest(request.scope, request.receive)
            return await handler(request)

        return route


class ParsedRequest(Request):
    """A request whose body the guard has read and parsed (FastAPI's custom-Request
    pattern): ``body()`` and ``json()`` return them instead of reading again."""

    async def body(self) -> bytes:
        return self.scope[PARSED_BODY][0]

    async def json(self) -> Any:
        return self.scope[PARSED_BODY][1]


class InlineContext(WorkerContext):
    """A worker context in the server process (validating a run before its 202): a stored
    cluster is read from the store, not asked of the server over a pipe."""

    def __init__(self, fetch: Callable[[str, int], Any]) -> None:
        super().__init__(None)
        self.fetch = fetch

    def stored_instance(self, name: str, version: list[Any]) -> Any:
        from hyperplace.models.instance import Instance
        from hyperplace.service.worker import validate

        doc = self.fetch(name, version[0])
        if doc is None:
            raise RequestProblem(404, [{"path": "cluster",
                                        "message": f"no stored cluster {name!r}"}])
        return validate(Instance, doc, "")


# Per endpoint kind: the payload keys a worker takes from the raw body instead (body key).
RAW_FIELDS: dict[str, dict[str, str | None]] = {
    kind: {"instance": "instance", "jobs": "jobs", "queues": "queues", **extra}
    for kind, extra in (("placement", {}), ("federation", {}), ("check", {"plan": "plan"}),
                        ("estimate", {"training_job": "trainingJob"}))}


def with_raw_body(payload: dict[str, Any], request: Request,
                  fields: dict[str, str | None]) -> dict[str, Any]:
    """A large body's documents go to the worker as the raw bytes it came in (the worker
    parses them): pickling bytes is a copy, pickling a 10 MB dict holds the interpreter
    (and so the event loop) for a second."""
    parsed = request.scope.get(PARSED_BODY)
    if not fields or parsed is None or len(parsed[0]) < THREAD_PARSE_BYTES:
        return payload
    out = {**payload, **{k: None for k in fields}}
    out["raw_body"], out["raw_fields"] = parsed[0], fields
    return out


def too_many_jobs(doc: Any, path: str) -> RequestProblem | None:
    """An instance document with more than MAX_JOBS pending jobs, refused before a worker
    validates it (which would take seconds)."""
    spec = doc.get("spec") if isinstance(doc, dict) else None
    jobs = spec.get("jobs") if isinstance(spec, dict) else None
    if isinstance(jobs, list) and len(jobs) > MAX_JOBS:
        return RequestProblem(422, [{"path": f"{path}spec.jobs", "message":
                                     f"{len(jobs):,} jobs; at most {MAX_JOBS:,} (the input limit)"}])
    return None


def bad_duration(doc: Any, path: str) -> RequestProblem | None:
    """An instance document with a job whose ``hyperplace.io/duration`` does not parse,
    refused before admission (:func:`hyperplace.sim.forecast.job_duration`, the rule the
    worker applies to the parsed instance): a request queued behind busy workers with a
    tiny budget would otherwise get 429 for what is bad input."""
    spec = doc.get("spec") if isinstance(doc, dict) else None
    jobs = spec.get("jobs") if isinstance(spec, dict) else None
    return bad_job_durations(jobs, path.rstrip("."))


def bad_job_durations(jobs: Any, prefix: str, *, listed: bool = False) -> RequestProblem | None:
    """:func:`bad_duration` over a list of raw job documents: an instance's ``spec.jobs``
    (the error at ``prefix.spec.jobs[i]...``) or, ``listed``, a request's ``jobs`` that
    replace a stored cluster's queue (at ``jobs[i]...``, as the worker names them)."""
    from hyperplace.errors import InputError
    from hyperplace.sim.forecast import DURATION_ANNOTATION, job_duration

    for i, job in enumerate(jobs if isinstance(jobs, list) else []):
        meta = job.get("metadata") if isinstance(job, dict) else None
        notes = meta.get("annotations") if isinstance(meta, dict) else None
        text = notes.get(DURATION_ANNOTATION) if isinstance(notes, dict) else None
        if not isinstance(text, str):
            continue  # absent, or not a string: the worker's validation names it
        try:
            job_duration(text, i, meta.get("name") if isinstance(meta.get("name"), str)
                         else f"#{i}")
        except InputError as exc:
            return input_problem(exc, prefix, jobs_given=listed)
    return None


def json_error(status: int, message: str, path: str | None = None,
               problems: list[dict[str, Any]] | None = None,
               headers: dict[str, str] | None = None) -> Response:
    problems = problems or [{"path": path, "message": message}]
    return Response(error_body(status, problems), status_code=status,
                    media_type="application/json", headers=headers)


# ---- endpoints over the library ---------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    """One ``POST`` endpoint that runs a worker handler of the same ``kind``.

    ``payload`` turns the validated envelope into the worker's payload; ``budget`` says
    whether the request carries ``budgetS``. An endpoint over another library call is one
    line here, one handler in ``worker.py`` and (for a new envelope) one request model.
    """

    path: str
    kind: str
    request: type[BaseModel]
    response: Any
    summary: str
    budgeted: bool = True


ENDPOINTS = [
    Endpoint("/v1/placement", "placement", PlacementRequest, PlacementPlan,
             "One scheduling round (as `hyperplace solve`): a PlacementPlan"),
    Endpoint("/v1/layer-split", "layer-split", LayerSplitRequest, SplitPlan,
             "The best layer split over heterogeneous stages (as `hyperplace split`)"),
    Endpoint("/v1/check", "check", CheckRequest, CheckResponse,
             "Check a plan with the independent checker (as `hyperplace check`)", False),
    Endpoint("/v1/predict", "predict", PredictRequest, dict[str, Any],
             "Step time, tokens/s, MFU and memory of one configuration (as `hyperplace "
             "predict`)", False),
    Endpoint("/v1/federation", "federation", FederationRequest, FederationPlan,
             "One federation round across member clusters (as `hyperplace federate`)"),
    Endpoint("/v1/estimate", "estimate", EstimateRequest, EstimateReport,
             "Karmada's estimator question per member cluster, as placed (as `hyperplace "
             "estimate`)", False),
]


class Service:
    """The state one server process holds: config, pool, store, metrics."""

    def __init__(self, config: ServiceConfig):
        self.config = config
        self.metrics = Metrics()
        self.pool = WorkerPool(config.workers, config.queue_limit, config.hard_timeout_s,
                               on_event=lambda e: self.metrics.worker_events.labels(e).inc())
        try:
            self.store = Store(config.db_path, config.run_retention_s)
        except DatabaseInUse as exc:
            raise InputError(str(exc), path="--db") from None
        self.run_tasks: set[asyncio.Task] = set()
        self.draining = False
        self.drain_task: asyncio.Task | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._node_sets: dict[str, tuple[tuple[int, float], frozenset[str]]] = {}
        self._cluster_locks: dict[str, asyncio.Lock] = {}
        self.clock: Callable[[], float] = time.time
        self.intake = Intake()
        self.clock_offset_s = 0.0

    # ---- drain ------------------------------------------------------------------------------
    def begin_drain(self) -> None:
        """SIGTERM: unready at once, queued work answered 503, running solves stopped after
        the grace period (see the module's docstring)."""
        if self.draining:
            return
        self.draining = True
        self.drain_task = asyncio.ensure_future(self.pool.close(self.config.shutdown_grace_s))

    # ---- extender look-ups ------------------------------------------------------------------
    def nodes_of(self, cluster: str) -> frozenset[str]:
        """The node names of a stored cluster (cached per stored version)."""
        rec = self.store.clusters.get(cluster)
        if rec is None:
            return frozenset()
        key = (rec.version, rec.updated)
        hit = self._node_sets.get(cluster)
        if hit is not None and hit[0] == key:
            return hit[1]
        names = frozenset(n.get("name") for c in rec.doc.get("spec", {}).get("clusters", [])
                          for n in c.get("nodes", []) if isinstance(n, dict))
        self._node_sets[cluster] = (key, names)
        return names

    def plans(self, job: str | None, namespace: str | None, cluster: str | None
              ) -> extender.Plans:
        if cluster is not None and cluster not in self.store.clusters:
            raise RequestProblem(404, [{"path": "cluster",
                                        "message": f"no stored cluster {cluster!r}"}])
        return extender.Plans(self.store.job_plans, self.nodes_of, job, namespace, cluster)

    # ---- budgets and payloads -------------------------------------------------------------
    def budget(self, requested: float | None) -> float:
        b = self.config.default_budget_s if requested is None else requested
        return min(b, self.config.max_budget_s)

    def instance_payload(self, body: Any) -> dict[str, Any]:
        problem = (too_many_jobs(body.instance, "instance.")
                   # a jobs list replaces the instance's own queue: its durations are read
                   or (bad_job_durations(body.jobs, "", listed=True) if body.jobs is not None
                       else bad_duration(body.instance, "instance.")))
        if problem is not None:
            raise problem
        payload = body.source_payload()
        if body.cluster is not None:
            rec = self.store.clusters.get(body.cluster)
            if rec is None:
                raise RequestProblem(404, [{"path": "cluster",
                                            "message": f"no stored cluster {body.cluster!r}"}])
            # the version and the time it was stored: a cluster deleted and stored again
            # restarts at version 1, and a worker must not mistake it for its cached one
            payload["cluster_version"] = [rec.version, rec.updated]
            usage = self.usage_at(body.cluster, self.now())
            if usage is not None:  # the round sees the history brought to its time
                payload["queue_usage"] = usage.snapshot()
        return payload

    # ---- usage history per stored cluster -------------------------------------------------
    def now(self) -> float:
        """The wall clock of the stored clusters' round state (usage history, stored-at
        times): ``clock()`` plus what ``/v1/debug/clock`` advanced it by (test hooks only), so
        tests move time instead of sleeping."""
        return self.clock() + self.clock_offset_s

    def usage_at(self, name: str, now: float) -> QueueUsage | None:
        """The cluster's usage history brought to ``now``: its round state's stored
        history (:meth:`~hyperplace.solvers.workflows.session.RoundState.history`), read
        back by :func:`~hyperplace.solvers.workflows.session.usage_at` (the GPUs each queue
        held since the last change accrue, everything decays); a copy, nothing is stored.
        None when the server keeps no history."""
        if not self.config.keeps_usage:
            return None
        return usage_at(self.store.history.get(name), self.config.half_life_s, now)

    def history_after(self, name: str, doc: dict[str, Any], now: float,
                      gpu_hours: dict[str, float] | None = None,
                      state: RoundState | None = None) -> dict[str, Any] | None:
        """What to store as the usage history of cluster ``name`` when its document becomes
        ``doc`` at ``now``: the serialized history of ``state`` (the round state that made
        the change: a PATCH), else of the round state of ``doc`` carrying the stored history
        brought to ``now`` (a PUT); ``gpu_hours`` (a document's own ``spec.queueUsage``)
        replaces the GPU-hours. None when the server keeps no history."""
        if not self.config.keeps_usage:
            return None
        if state is None:
            state = round_state(doc, self.usage_at(name, now))
        if gpu_hours:
            state.usage.gpu_hours = dict(gpu_hours)
        return state.history()

    def usage_view(self, name: str) -> dict[str, Any] | None:
        """The ``usageHistory`` of a cluster summary."""
        usage = self.usage_at(name, self.now())
        if usage is None:
            return None
        hist = self.store.history.get(name) or {}
        return {"halfLifeS": self.config.half_life_s, "asOf": hist.get("timeS"),
                "gpuHours": dict(sorted((hist.get("gpuHours") or {}).items())),
                "heldGpus": dict(sorted((hist.get("heldGpus") or {}).items())),
                "gpuHoursNow": usage.snapshot()}

    def fetch_cluster(self, name: str, version: int) -> dict[str, Any] | None:
        rec = self.store.clusters.get(name)
        return rec.doc if rec is not None else None

    def payload_for(self, ep: Endpoint, body: Any, budget: float) -> dict[str, Any]:
        if ep.kind == "placement":
            return {**self.instance_payload(body), "solver": body.solver,
                    "policy": body.policy, "seed": body.seed, "budget_s": budget,
                    "apply": body.apply, "preemption": body.preemption,
                    "hot_spares": body.hot_spares, "running_moveable": body.running_moveable,
                    "max_moves": body.max_moves}
        if ep.kind == "check":
            return {**self.instance_payload(body), "plan": body.plan}
        if ep.kind == "federation":
            return {**self.instance_payload(body), "solver": body.solver,
                    "policy": body.policy, "max_slowdown": body.max_slowdown,
                    "budget_s": budget}
        if ep.kind == "estimate":
            return {**self.instance_payload(body), "job": body.job,
                    "training_job": body.training_job}
        if ep.kind == "predict":
            return {**body.model_dump(exclude={"model"}), "model": body.model}
        if ep.kind == "layer-split":
            return {"problem": body.problem, "model_name": body.model_name,
                    "profile": body.profile, "micro_batch_size": body.micro_batch_size,
                    "solver": body.solver}
        return body.model_dump(mode="json", by_alias=False)

    # ---- running work -----------------------------------------------------------------------
    async def execute(self, kind: str, payload: dict[str, Any], deadline: float,
                      task_id: str | None = None, grace_s: float | None = HARD_GRACE_S
                      ) -> tuple[int, bytes, dict[str, Any]]:
        """Run one task in the pool; every failure becomes (status, error body, info).

        A request someone waits for is answered by its deadline plus ``grace_s`` (the
        documented overhead): a worker still busy then is stopped and the answer is 503 with
        ``Retry-After``, so latency stays bounded on an overloaded machine."""
        headers: dict[str, Any] = {}
        try:
            task = self.pool.submit(kind, payload, deadline, task_id=task_id,
                                    fetch=self.fetch_cluster, grace_s=grace_s)
            reply = await task.future
        except Saturated as exc:
            retry = str(int(exc.retry_after_s))
            return 429, error_body(429, [{"path": None, "message": str(exc)}]), {
                "headers": {"Retry-After": retry}}
        except Unavailable as exc:
            return 503, error_body(503, [{"path": None, "message": str(exc)}]), {
                "headers": {"Retry-After": str(SHUTDOWN_RETRY_S)}}
        except HandOffFailed as exc:
            return 422, error_body(422, [{"path": None, "message": str(exc)}]), {}
        except Expired as exc:
            retry = str(int(self.pool.retry_after()))
            return 503, error_body(503, [{"path": "budgetS", "message": str(exc)}]), {
                "headers": {"Retry-After": retry}}
        except Cancelled as exc:
            return 409, error_body(409, [{"path": None, "message": str(exc)}]), {"cancelled": True}
        except WorkerTimedOut as exc:
            retry = str(int(self.pool.retry_after()))
            return 503, error_body(503, [{"path": "budgetS", "message": str(exc)}]), {
                "headers": {"Retry-After": retry}}
        except WorkerCrashed as exc:
            return 500, error_body(500, [{"path": None, "message": str(exc)}]), {}
        except PoolError as exc:  # pragma: no cover - every kind is listed above
            return 500, error_body(500, [{"path": None, "message": str(exc)}]), {}
        info = dict(reply.info)
        info.setdefault("headers", headers)
        if reply.status == 200 and "solve_s" in info:
            self.metrics.solve_time.labels(kind).observe(info["solve_s"])
            self.metrics.results.labels(kind, info.get("status", "")).inc()
            if info.get("fallback"):
                self.metrics.fallbacks.labels(kind).inc()
        if reply.status == 200 and "extender" in info:
            await self.record_plan(payload, info)
        return reply.status, reply.body, info

    async def record_plan(self, payload: dict[str, Any], info: dict[str, Any]) -> None:
        """The extenders' view of a plan on a stored cluster (only: a round on an inline or
        bundled instance changes nothing the extenders answer)."""
        cluster = payload.get("cluster")
        if cluster is not None and cluster in self.store.clusters:
            await asyncio.to_thread(self.store.record_plan, cluster, info["extender"])

    async def after_placement(self, payload: dict[str, Any], info: dict[str, Any],
                              run: RunRecord | None = None) -> dict[str, str]:
        """``apply``: the admitted jobs now hold their GPUs in the stored cluster. With
        ``run`` (a finished background run), the run's end is written in the same
        transaction as the cluster (or alone, when nothing is applied)."""
        name = payload.get("cluster")
        if not (payload.get("apply") and name and info.get("allocations") is not None):
            if run is not None:
                await asyncio.to_thread(self.store.save_run, run)
            return {}
        applied = await self._apply(name, payload, info, run)
        if run is not None and applied.get("X-Hyperplace-Applied", "").startswith("no"):
            await asyncio.to_thread(self.store.save_run, run)
        return applied

    def cluster_lock(self, name: str) -> asyncio.Lock:
        """One writer at a time per stored cluster (PUT, PATCH, an applied round): each
        reads the stored version and writes the next, with awaits in between, so without
        it two concurrent PATCHes would both build on the same version and one be lost."""
        lock = self._cluster_locks.get(name)
        if lock is None:
            lock = self._cluster_locks[name] = asyncio.Lock()
        return lock

    async def _apply(self, name: str, payload: dict[str, Any], info: dict[str, Any],
                     run: RunRecord | None) -> dict[str, str]:
        async with self.cluster_lock(name):
            return await self._apply_locked(name, payload, info, run)

    async def _apply_locked(self, name: str, payload: dict[str, Any], info: dict[str, Any],
                            run: RunRecord | None) -> dict[str, str]:
        rec = self.store.clusters.get(name)
        if rec is None:
            return {"X-Hyperplace-Applied": "no: the cluster was deleted"}
        if [rec.version, rec.updated] != payload["cluster_version"]:
            return {"X-Hyperplace-Applied": f"no: the cluster changed (version {rec.version})"}
        now = self.now()
        usage = self.usage_at(name, now)
        try:
            doc, state = apply_plan(rec.doc, info["allocations"], info.get("running") or [],
                                    usage, now)
        except (RequestProblem, ValueError) as exc:
            return {"X-Hyperplace-Applied": f"no: {str(exc).splitlines()[0]}"}
        used = sum(len(g) for _, g in info["allocations"])
        new = ClusterRecord(name, rec.version + 1, doc, rec.gpus, rec.free_gpus - used,
                            max(0, rec.pending_jobs - len(info.get("admitted", []))), now)
        await asyncio.to_thread(self.store.put_cluster, new, json.dumps(doc),
                                state.history() if usage is not None else None, run)
        return {"X-Hyperplace-Applied": "yes", "X-Hyperplace-Cluster-Version": str(new.version)}

    # ---- runs ---------------------------------------------------------------------------------
    def start_run(self, run: RunRecord) -> None:
        """Queue a run and follow it to the end in a background task. Its budget starts when
        a worker takes it; it may wait in the queue for up to ``max_budget_s`` plus its
        budget before it is failed as expired."""
        body = PlacementRequest.model_validate(run.request["request"])
        budget = run.budget or self.budget(None)
        payload = self.payload_for(ENDPOINTS[0], body, budget)
        deadline = time.monotonic() + self.config.max_budget_s + budget
        task = self.pool.submit(run.kind, payload, deadline, task_id=run.id,
                                fetch=self.fetch_cluster, budget_s=budget)

        async def follow() -> None:
            try:
                reply = await task.future
            except Cancelled:
                self.finish_run(run, "cancelled")
                await asyncio.to_thread(self.store.save_run, run)
                return
            except Unavailable:
                if self.pool.closing:
                    return  # stays queued/running in the store: resumed after a restart
                self.finish_run(run, "failed", error={"status": 503, "error": "the server "
                                                      "was not taking work"})
                await asyncio.to_thread(self.store.save_run, run)
                return
            except PoolError as exc:
                self.finish_run(run, "failed", error={"status": 503 if isinstance(
                    exc, (Expired, WorkerTimedOut)) else 500, "error": str(exc)})
                await asyncio.to_thread(self.store.save_run, run)
                return
            try:
                status, body_bytes, info = reply.status, reply.body, dict(reply.info)
                if status == 200:
                    if "extender" in info:
                        await self.record_plan(payload, info)
                    if "solve_s" in info:
                        self.metrics.solve_time.labels(run.kind).observe(info["solve_s"])
                        if info.get("fallback"):
                            self.metrics.fallbacks.labels(run.kind).inc()
                    # succeeded: with apply, written with the cluster in one transaction
                    if self.finish_run(run, "succeeded", result=json.loads(body_bytes)):
                        await self.after_placement(payload, info, run)
                else:
                    self.finish_run(run, "failed", error=json.loads(body_bytes))
                    await asyncio.to_thread(self.store.save_run, run)
            except Exception as exc:  # noqa: BLE001 - a run must end, whatever failed
                self.finish_run(run, "failed", error={"status": 500, "error": f"internal "
                                                      f"error: {type(exc).__name__}: {exc}"[:500]},
                                force=True)
                await asyncio.to_thread(self.store.save_run, run)

        def started() -> None:
            if run.state == "queued":
                run.state, run.started = "running", time.time()

        task.on_start = started
        t = asyncio.create_task(follow())
        self.run_tasks.add(t)
        t.add_done_callback(self.run_tasks.discard)

    @staticmethod
    def finish_run(run: RunRecord, state: str, *, result: Any = None,
                   error: dict[str, Any] | None = None, force: bool = False) -> bool:
        """The one place a run ends: a run that already ended (cancelled by DELETE, say)
        keeps its first end. Synchronous, so nothing interleaves on the event loop."""
        if run.state in FINISHED and not force:
            return False
        run.state, run.result, run.error = state, result, error
        run.finished = time.time()
        return True

    def run_status(self, run: RunRecord) -> dict[str, Any]:
        progress = 1.0 if run.state in ("succeeded", "failed", "cancelled") else 0.0
        if run.state == "running" and run.started and run.budget:
            progress = min(0.99, (time.time() - run.started) / run.budget)
        return RunStatus(id=run.id, kind=run.kind, state=run.state,  # type: ignore[arg-type]
                         created_at=run.created, started_at=run.started,
                         finished_at=run.finished, progress=progress, budget_s=run.budget,
                         result=run.result, error=run.error).model_dump(by_alias=True)

    async def resume_runs(self) -> None:
        """Runs that were queued or running when the server stopped start again, when their
        inputs still exist (else they fail with the reason); nothing here can stop the
        server from starting."""
        for run in sorted(self.store.runs.values(), key=lambda r: r.created):
            if run.state not in ("queued", "running"):
                continue
            run.state, run.started = "queued", None
            try:
                request = (run.request or {}).get("request") or {}
                cluster = request.get("cluster")
                if cluster is not None and cluster not in self.store.clusters:
                    raise RequestProblem(409, [{"path": "request.cluster", "message":
                                                f"not resumed after a restart: the stored "
                                                f"cluster {cluster!r} was deleted"}])
                self.start_run(run)
            except RequestProblem as exc:
                self.finish_run(run, "failed", error=json.loads(error_body(exc.status,
                                                                          exc.problems)))
            except Exception as exc:  # noqa: BLE001 - never block start-up
                self.finish_run(run, "failed", error={"status": 503, "error":
                                                      f"not resumed after a restart: {exc}"[:500]})
            try:
                await asyncio.to_thread(self.store.save_run, run)
            except Exception:  # noqa: BLE001 - pragma: no cover
                pass

    async def expire_runs_forever(self, period_s: float = 3600.0) -> None:
        while True:
            await asyncio.sleep(period_s)
            await asyncio.to_thread(self.store.expire_runs)


# ---- the guard: token, body limit, metrics ------------------------------------------------

class Guard:
    """ASGI middleware in front of every route: Bearer token (all but ``/healthz``), body
    size limit (413 before reading a declared-too-large body, or as soon as a streamed one
    passes the limit), and request metrics by route template and status."""

    OPEN_PATHS = frozenset({"/healthz"})

    def __init__(self, app: Any, service: Service):
        self.app = app
        self.service = service
        self.intake = service.intake
        token = service.config.token
        self.expected = f"Bearer {token}".encode() if token else None

    async def _send_error(self, send: Callable, status: int, message: str,
                          headers: dict[str, str] | None = None) -> None:
        body = error_body(status, [{"path": None, "message": message}])
        hdrs = [(b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode())]
        hdrs += [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
        await send({"type": "http.response.start", "status": status, "headers": hdrs})
        await send({"type": "http.response.body", "body": body})

    async def _read_body(self, scope: dict, receive: Callable, headers: dict[bytes, bytes],
                         limit: int) -> Callable:
        """Read the whole body (the loop keeps serving while it arrives), refuse it past
        ``limit``, check and parse JSON (in a thread when large, so ``/healthz`` stays fast)
        and hand the parsed value to the route; the app gets a receive that replays it."""
        chunks: list[bytes] = []
        seen = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                break
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > limit:
                raise BodyTooLarge()
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        raw = b"".join(chunks)
        ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if raw and (not ctype or ctype == b"application/json" or ctype.endswith(b"+json")):
            if len(raw) >= THREAD_PARSE_BYTES:
                parsed = await asyncio.to_thread(parse_body, raw)
            else:
                parsed = parse_body(raw)
            scope[PARSED_BODY] = (raw, parsed)
        sent = False

        async def replay() -> dict:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": raw, "more_body": False}
            return await receive()

        return replay

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        scope[ARRIVED] = time.monotonic()  # every budget counts from here
        state = {"status": 500, "started": False}
        metrics = self.service.metrics

        async def send_wrapper(message: dict) -> None:
            if message["type"] == "http.response.start":
                state["status"], state["started"] = message["status"], True
            await send(message)

        try:
            raw_headers = list(scope.get("headers") or [])
            headers = dict(raw_headers)
            if sum(1 for k, _ in raw_headers if k == b"authorization") > 1:
                await self._send_error(send_wrapper, 400, "more than one Authorization header")
                return
            if self.expected is not None and scope["path"] not in self.OPEN_PATHS:
                got = headers.get(b"authorization", b"")
                if not hmac.compare_digest(got, self.expected):
                    await self._send_error(send_wrapper, 401,
                                           "missing or wrong token: send Authorization: Bearer "
                                           "<token>", {"WWW-Authenticate": "Bearer"})
                    return
            limit = self.service.config.max_body_bytes
            lengths = [v for k, v in raw_headers if k == b"content-length"]
            if len(set(lengths)) > 1 or any(not v.strip().isdigit() for v in lengths):
                await self._send_error(send_wrapper, 400, "invalid Content-Length")
                return
            if lengths and int(lengths[0]) > limit:  # refused before a byte is read
                await self._send_error(send_wrapper, 413, f"request body over the limit of "
                                       f"{limit} bytes")
                return
            if scope.get("method") in ("POST", "PUT", "PATCH"):
                declared = int(lengths[0]) if lengths else None
                if declared is not None and declared < THREAD_PARSE_BYTES:
                    receive = await self._read_body(scope, receive, headers, limit)
                else:  # large or of unknown length: through the intake gate
                    wait = self.intake.expected_wait()
                    if wait > INTAKE_WAIT_S and self.intake.busy:
                        await self._send_error(
                            send_wrapper, 429, f"the server is taking in "
                            f"{self.intake.pending_bytes / 1e6:.0f} MB of request bodies "
                            f"(about {wait:.1f} s): longer than a body may wait to be taken "
                            f"in ({INTAKE_WAIT_S:g} s); retry in {max(1, math.ceil(wait))} s",
                            {"Retry-After": str(max(1, math.ceil(wait)))})
                        return
                    async with self.intake.slot(declared or THREAD_PARSE_BYTES):
                        receive = await self._read_body(scope, receive, headers, limit)
            await self.app(scope, receive, send_wrapper)
        except BodyTooLarge:
            if not state["started"]:
                await self._send_error(send_wrapper, 413, f"request body over the limit "
                                       f"of {self.service.config.max_body_bytes} bytes")
        except BodyProblem as exc:
            if not state["started"]:
                await self._send_error(send_wrapper, exc.status, str(exc))
        except IntakeBusy as exc:
            if not state["started"]:
                await self._send_error(send_wrapper, 429, str(exc),
                                       {"Retry-After": str(max(1, math.ceil(exc.wait_s)))})
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or (
                scope["path"] if scope["path"] in KNOWN_PATHS else "unmatched")
            metrics.requests.labels(endpoint, str(state["status"])).inc()
            metrics.latency.labels(endpoint).observe(time.perf_counter() - start)


# ---- the application --------------------------------------------------------------------

def _body_loc(err: Any) -> dict[str, Any]:
    """A problem located in the body as the body's own path (``body`` and pydantic's
    ``function-...`` steps left out)."""
    loc = list(err.get("loc", ()))
    if loc and loc[0] == "body":
        loc = loc[1:]
    return {**err, "loc": tuple(p for p in loc
                                if not (isinstance(p, str) and p.startswith("function-")))}


def _validation_problems(exc: RequestValidationError,
                         route: Any = None) -> tuple[int, list[dict[str, Any]]]:
    problems = []
    raw = exc.errors()
    for err in raw:
        loc = list(err.get("loc", ()))
        if err.get("type") == "missing" and loc == ["body"]:
            return 422, _empty_body_problems(route)
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            where = f" at position {loc[1]}" if len(loc) > 1 else ""
            return 400, [{"path": None, "message":
                          f"malformed JSON{where}: {ctx.get('error', 'invalid JSON')}"}]
    errors = typos_first([_body_loc(e) for e in raw])
    model = _body_model(route)
    for err in errors[:20]:
        msg = problem_message(err, errors, model).removeprefix("Value error, ")
        problems.append({"path": field_path(err["loc"]) or None, "message": msg})
    return 422, problems


def _body_model(route: Any) -> Any:
    """The request model of an endpoint's body, or None."""
    field = getattr(route, "body_field", None)
    model = getattr(getattr(field, "field_info", None), "annotation", None)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _empty_body_problems(route: Any) -> list[dict[str, Any]]:
    """What an empty body lacks, by field: the endpoint's request model validated as ``{}``
    (its required fields, or its rule between fields), each message saying that the body
    was empty (FastAPI's own error names no field: the whole body is missing)."""
    from pydantic import ValidationError

    model = _body_model(route)
    if model is not None:
        try:
            model.model_validate({})
        except ValidationError as exc:
            errors = [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors()]
            _, problems = _validation_problems(RequestValidationError(errors))
            return [{**pr, "message": pr["message"] + " (the request body is empty)"}
                    for pr in problems]
    return [{"path": None, "message": "the request body is empty: send a JSON object"}]


def create_app(config: ServiceConfig) -> FastAPI:
    """The FastAPI application of one server process."""
    service = Service(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.loop = asyncio.get_running_loop()
        await service.pool.start()
        await service.resume_runs()
        expiry = asyncio.create_task(service.expire_runs_forever())
        try:
            yield
        finally:
            expiry.cancel()
            service.begin_drain()
            if service.drain_task is not None:
                await service.drain_task
            await service.pool.close(0)
            for t in list(service.run_tasks):
                t.cancel()
            service.store.close()

    app = FastAPI(
        title="hyperplace",
        version=API_VERSION,
        summary="Placement of foundation-model training jobs on heterogeneous GPU clusters",
        description=__doc__,
        lifespan=lifespan,
    )
    app.state.service = service
    app.router.route_class = ParsedBodyRoute

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        status, problems = _validation_problems(exc, request.scope.get("route"))
        return json_error(status, problems[0]["message"] if problems else "invalid request",
                          problems=problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if isinstance(exc.__cause__, BodyTooLarge):  # FastAPI wraps body-reading failures
            return json_error(413, f"request body over the limit of {config.max_body_bytes} "
                              "bytes")
        headers = dict(exc.headers) if exc.headers else {}
        if exc.status_code == 405:  # every method of the path, not just one route's
            allowed = sorted({m for route in app.router.routes
                              if isinstance(route, APIRoute)
                              and route.matches(request.scope)[0] != Match.NONE
                              for m in route.methods})
            headers["Allow"] = ", ".join(allowed)
            return json_error(405, f"method {request.method} not allowed; allowed: "
                              f"{', '.join(allowed)}", headers=headers)
        return json_error(exc.status_code, str(exc.detail), headers=headers or None)

    @app.exception_handler(RequestProblem)
    async def _problem(request: Request, exc: RequestProblem) -> Response:
        return json_error(exc.status, str(exc), problems=exc.problems)

    @app.exception_handler(BodyTooLarge)
    async def _too_large(request: Request, exc: BodyTooLarge) -> Response:
        return json_error(413, f"request body over the limit of {config.max_body_bytes} bytes")

    for ep in ENDPOINTS:
        _add_endpoint(app, service, ep)
    _add_runs(app, service)
    _add_clusters(app, service)
    _add_extenders(app, service)
    _add_operations(app, service)
    from hyperplace.service import why  # GET /v1/clusters/{name}/jobs/{job} (#26)

    why.add_routes(app, service)
    if config.test_hooks:
        _add_debug(app, service)
    app.add_middleware(Guard, service=service)
    return app


def _add_endpoint(app: FastAPI, service: Service, ep: Endpoint) -> None:
    async def route(request: Request,
                    body: Annotated[ep.request, BodyParam()]) -> Response:  # type: ignore[name-defined]
        arrived = request.scope.get(ARRIVED) or time.monotonic()  # reading counts
        budget = service.budget(getattr(body, "budget_s", None)) if ep.budgeted \
            else service.config.max_budget_s
        payload = with_raw_body(service.payload_for(ep, body, budget), request,
                                RAW_FIELDS.get(ep.kind, {}))
        status, data, info = await service.execute(ep.kind, payload, arrived + budget)
        headers = dict(info.get("headers") or {})
        if ep.budgeted:
            headers["X-Hyperplace-Budget-S"] = f"{budget:g}"
        if status == 200 and ep.kind == "placement":
            headers.update(await service.after_placement(payload, info))
        return Response(data, status_code=status, media_type="application/json",
                        headers=headers)

    route.__name__ = ep.kind.replace("-", "_")
    app.post(ep.path, response_model=ep.response, summary=ep.summary, responses=ERRORS,
             tags=["solve"])(route)


def _add_runs(app: FastAPI, service: Service) -> None:
    @app.post("/v1/runs", status_code=202, response_model=RunStatus, responses=ERRORS,
              tags=["runs"], summary="Submit a placement to run in the background")
    async def submit_run(body: RunRequest) -> Response:
        budget = service.budget(body.request.budget_s)
        # every document validated (in a worker) before the 202: a run accepted here fails
        # later only for reasons of its own (its cluster deleted, the machine too busy)
        payload = service.instance_payload(body.request)  # 404 for an unknown stored cluster
        # in a thread of this process (bounded by the body limits), not behind the queue
        reply = await asyncio.to_thread(
            run_task, "validate-placement", payload, time.monotonic() + 60,
            InlineContext(service.fetch_cluster))
        if reply.status != 200:
            return Response(reply.body, status_code=reply.status, media_type="application/json")
        run = RunRecord(id=uuid.uuid4().hex, kind=body.kind, state="queued",
                        created=time.time(), budget=budget,
                        request={"kind": body.kind,
                                 "request": body.request.model_dump(mode="json", by_alias=True,
                                                                    exclude_none=True)})
        try:
            service.start_run(run)
        except Saturated as exc:
            return json_error(429, str(exc), headers={"Retry-After": str(int(exc.retry_after_s))})
        except Unavailable as exc:
            return json_error(503, str(exc), headers={"Retry-After": str(SHUTDOWN_RETRY_S)})
        await asyncio.to_thread(service.store.save_run, run)
        return JSONResponse(service.run_status(run), status_code=202,
                            headers={"Location": f"/v1/runs/{run.id}"})

    def _get(run_id: str) -> RunRecord:
        run = service.store.runs.get(run_id)
        if run is None:
            raise RequestProblem(404, [{"path": "id", "message": f"no run {run_id!r}"}])
        return run

    @app.get("/v1/runs/{run_id}", response_model=RunStatus, responses=ERRORS, tags=["runs"],
             summary="Status, progress and (when done) the result of a run")
    async def get_run(run_id: Annotated[str, Path(max_length=64)]) -> Response:
        return JSONResponse(service.run_status(_get(run_id)))

    @app.get("/v1/runs", tags=["runs"], summary="The 100 most recent runs (no results)")
    async def list_runs() -> Response:
        runs = sorted(service.store.runs.values(), key=lambda r: -r.created)[:100]
        return JSONResponse([{"id": r.id, "kind": r.kind, "state": r.state,
                              "createdAt": r.created} for r in runs])

    @app.delete("/v1/runs/{run_id}", response_model=RunStatus, responses=ERRORS, tags=["runs"],
                summary="Cancel a run: a running solve is stopped and its worker freed")
    async def cancel_run(run_id: Annotated[str, Path(max_length=64)]) -> Response:
        run = _get(run_id)
        if run.state in FINISHED:
            return json_error(409, f"run {run_id} already {run.state}", path="id")
        # atomic with completion: either the pool still holds the task (it is stopped now and
        # can never succeed) or its answer is in and being recorded (409: it finished)
        if not service.pool.cancel(run_id):
            return json_error(409, f"run {run_id} has finished; its result is being recorded",
                              path="id")
        service.finish_run(run, "cancelled")
        await asyncio.to_thread(service.store.save_run, run)
        return JSONResponse(service.run_status(run))


def _loads_paused(text: str) -> Any:
    with gc_paused():
        return json.loads(text)


def _cluster_info(rec: ClusterRecord, usage: dict[str, Any] | None = None,
                  warnings: list[str] | None = None) -> dict[str, Any]:
    return ClusterInfo.model_validate(
        {"name": rec.name, "version": rec.version, "gpus": rec.gpus,
         "freeGpus": rec.free_gpus, "pendingJobs": rec.pending_jobs,
         "updatedAt": rec.updated, "usageHistory": usage,
         "warnings": warnings or None}).model_dump(by_alias=True, exclude_none=True)


def _add_clusters(app: FastAPI, service: Service) -> None:
    async def store_doc(name: str, doc: Any, version: int, prefix: str = "",
                        arrivals_from: int | None = None, request: Request | None = None,
                        updated: float | None = None, state: RoundState | None = None
                        ) -> Response:
        """Validate ``doc`` (in a worker) and store it as cluster ``name`` at ``updated``
        (default now) with its usage history (see :meth:`Service.history_after`)."""
        updated = service.now() if updated is None else updated
        payload = {"instance": doc, "name": name, "version": [version, updated],
                   "prefix": prefix, "arrivals_from": arrivals_from,
                   "strip_usage": service.config.keeps_usage}
        if request is not None:
            payload = with_raw_body(payload, request, {"instance": None})
        status, data, info = await service.execute(
            "validate-instance", payload, time.monotonic() + service.config.max_budget_s,
            grace_s=None)
        if status != 200:
            return Response(data, status_code=status, media_type="application/json",
                            headers=info.get("headers") or {})
        text = data.decode()
        # the worker's own text: parsed off the loop, with the collector paused (gc_paused)
        doc = await asyncio.to_thread(_loads_paused, text) if len(data) >= THREAD_PARSE_BYTES \
            else json.loads(text)
        # the history is the round state's (one copy, in the store's round_history): a
        # document's own spec.queueUsage replaces it, and is not kept in the document (the
        # worker took it out of the text and reports it in info)
        history = await asyncio.to_thread(service.history_after, name, doc, updated,
                                          info.get("queue_usage") or None, state)
        rec = ClusterRecord(name, version, doc, info["gpus"], info["free_gpus"],
                            info["pending_jobs"], updated)
        await asyncio.to_thread(service.store.put_cluster, rec, text, history)
        return JSONResponse(_cluster_info(rec, service.usage_view(name),
                                          info.get("warnings")))

    @app.put("/v1/clusters/{name}", response_model=ClusterInfo, responses=ERRORS,
             tags=["clusters"], summary="Store (or replace) a cluster: an Instance document")
    async def put_cluster(name: ClusterName, request: Request,
                          instance: Annotated[Annotated[Instance, SkipValidation],
                                              BodyParam()]) -> Response:
        problem = too_many_jobs(instance, "") or bad_duration(instance, "")
        if problem is not None:
            raise problem
        async with service.cluster_lock(name):
            old = service.store.clusters.get(name)
            return await store_doc(name, instance, (old.version + 1) if old else 1,
                                   request=request)

    @app.patch("/v1/clusters/{name}", response_model=ClusterInfo, responses=ERRORS,
               tags=["clusters"],
               summary="Apply deltas: completions, failures, repairs, allocations, arrivals")
    async def patch_cluster(name: ClusterName, patch: ClusterPatch) -> Response:
        async with service.cluster_lock(name):
            rec = service.store.clusters.get(name)
            if rec is None:
                return json_error(404, f"no stored cluster {name!r}", path="name")
            interrupted: list[str] = []
            now = service.now()
            # a deep copy of the stored document: off the loop (Python code: the loop runs);
            # its round state carries the stored usage history, brought to now
            doc, state = await asyncio.to_thread(apply_patch, rec.doc, patch, interrupted,
                                                 service.usage_at(name, now), now)
            after = len(doc["spec"].get("jobs") or [])
            first_arrival = after - len(patch.arrivals) if patch.arrivals else None
            resp = await store_doc(name, doc, rec.version + 1, arrivals_from=first_arrival,
                                   updated=now, state=state)
        if resp.status_code != 200:
            return resp
        return JSONResponse({**json.loads(bytes(resp.body)), "interruptedJobs": interrupted})

    @app.get("/v1/clusters/{name}", tags=["clusters"], responses=ERRORS,
             summary="A stored cluster: its summary and its Instance document")
    async def get_cluster(name: ClusterName) -> Response:
        rec = service.store.clusters.get(name)
        if rec is None:
            return json_error(404, f"no stored cluster {name!r}", path="name")
        return JSONResponse({**_cluster_info(rec, service.usage_view(name)),
                             "instance": rec.doc})

    @app.get("/v1/clusters", tags=["clusters"], summary="Stored clusters (summaries)")
    async def list_clusters() -> Response:
        return JSONResponse([_cluster_info(r, service.usage_view(r.name))
                             for r in service.store.clusters.values()])

    @app.delete("/v1/clusters/{name}", status_code=204, tags=["clusters"], responses=ERRORS)
    async def delete_cluster(name: ClusterName) -> Response:
        if not await asyncio.to_thread(service.store.delete_cluster, name):
            return json_error(404, f"no stored cluster {name!r}", path="name")
        return Response(status_code=204)


def _add_extenders(app: FastAPI, service: Service) -> None:
    labels = service.config.job_labels
    Cluster = Annotated[str | None, Query(
        min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="answer from this stored cluster's plans only (default: the plans of "
                    "every stored cluster, each with an opinion on its own nodes only)")]

    def pod_plans(args: dict[str, Any], cluster: str | None) -> extender.Plans:
        pod = args.get("Pod")
        return service.plans(extender.pod_job(pod, labels), extender.pod_namespace(pod), cluster)

    def task_plans(req: dict[str, Any], cluster: str | None) -> extender.Plans:
        task = req.get("task")
        return service.plans(extender.task_job(task, labels), extender.task_namespace(task),
                             cluster)

    @app.post("/v1/extender/filter", response_model=K8sFilterResult, tags=["extenders"],
              responses=ERRORS,
              summary="kube-scheduler extender filter verb, from the latest plan of the pod's job")
    async def k8s_filter(args: K8sExtenderArgs, cluster: Cluster = None) -> Response:
        data = args.model_dump(exclude_unset=True)
        return JSONResponse(extender.k8s_filter(data, pod_plans(data, cluster)))

    @app.post("/v1/extender/prioritize", response_model=list[K8sHostPriority],
              tags=["extenders"], responses=ERRORS,
              summary="kube-scheduler extender prioritize verb")
    async def k8s_prioritize(args: K8sExtenderArgs, cluster: Cluster = None) -> Response:
        data = args.model_dump(exclude_unset=True)
        return JSONResponse(extender.k8s_prioritize(data, pod_plans(data, cluster)))

    @app.post("/v1/volcano/predicate", response_model=VolcanoPredicateResponse,
              tags=["extenders"], responses=ERRORS, summary="Volcano extender predicate verb")
    async def volcano_predicate(req: VolcanoPredicateRequest, cluster: Cluster = None
                                ) -> Response:
        data = req.model_dump(exclude_unset=True)
        return JSONResponse(extender.volcano_predicate(data, task_plans(data, cluster)))

    @app.post("/v1/volcano/prioritize", response_model=VolcanoPrioritizeResponse,
              tags=["extenders"], responses=ERRORS, summary="Volcano extender prioritize verb")
    async def volcano_prioritize(req: VolcanoPrioritizeRequest, cluster: Cluster = None
                                 ) -> Response:
        data = req.model_dump(exclude_unset=True)
        return JSONResponse(extender.volcano_prioritize(data, task_plans(data, cluster)))


def _add_operations(app: FastAPI, service: Service) -> None:
    @app.get("/healthz", tags=["operations"], summary="The process is up (no token needed)")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"], summary="Workers started and taking work",
             responses={503: {"model": ErrorBody}})
    async def readyz() -> Response:
        pool = service.pool
        if service.draining or pool.closing:
            return json_error(503, "not ready: shutting down (draining)",
                              headers={"Retry-After": str(SHUTDOWN_RETRY_S)})
        if not pool.accepting or pool.alive == 0:
            return json_error(503, "not ready: no worker can take work (starting, or every "
                              "worker is being replaced)", headers={"Retry-After": "1"})
        return JSONResponse({"status": "ready", "workers": pool.size, "alive": pool.alive,
                             "busy": pool.busy, "queued": pool.queue_depth,
                             "queueLimit": pool.queue_limit,
                             "queueFree": max(0, pool.queue_limit - pool.queue_depth),
                             "expectedWaitS": round(pool.expected_wait(), 3),
                             "overheadS": OVERHEAD_S, "maxBudgetS": service.config.max_budget_s})

    @app.get("/metrics", tags=["operations"], summary="Prometheus text exposition")
    async def metrics() -> Response:
        data = service.metrics.render(service.pool.queue_depth, service.pool.busy,
                                      service.pool.size, service.store.run_counts)
        return Response(data, media_type=service.metrics.content_type)


def _add_debug(app: FastAPI, service: Service) -> None:
    @app.post("/v1/debug/crash", include_in_schema=False)
    async def crash() -> Response:
        status, data, info = await service.execute("debug-crash", {}, time.monotonic() + 5,
                                                   grace_s=None)
        return Response(data, status_code=status, media_type="application/json")

    @app.post("/v1/debug/sleep", include_in_schema=False)
    async def sleep(seconds: float = 1.0, budget: float | None = None) -> Response:
        """A worker sleeps ``seconds``; with ``budget``, as a solve with that budget would
        (answered by budget + OVERHEAD_S, else stopped: the hard deadline)."""
        if not math.isfinite(seconds) or not 0 <= seconds <= 30:
            return json_error(422, "seconds in [0, 30]", path="seconds")
        if budget is not None and not (math.isfinite(budget) and 0 < budget <= 30):
            return json_error(422, "budget in (0, 30]", path="budget")
        deadline = time.monotonic() + (30 if budget is None else budget)
        status, data, info = await service.execute(
            "debug-sleep", {"seconds": seconds}, deadline,
            grace_s=None if budget is None else HARD_GRACE_S)
        return Response(data, status_code=status, media_type="application/json",
                        headers=info.get("headers") or {})

    @app.post("/v1/debug/clock", include_in_schema=False)
    async def advance_clock(advance: float) -> dict[str, float]:
        """Move the round state's clock forward by ``advance`` seconds (never back)."""
        if not (math.isfinite(advance) and 0 <= advance <= 10 * 365 * 86400):
            raise RequestProblem(422, [{"path": "advance", "message": "0 or more seconds"}])
        service.clock_offset_s += advance
        return {"now": service.now(), "offsetS": service.clock_offset_s}

    @app.get("/v1/debug/workers", include_in_schema=False)
    async def workers() -> dict[str, Any]:
        return {"pids": service.pool.worker_pids(), "replaced": service.pool.replaced,
                "busy": service.pool.busy}


def run_server(app: FastAPI, sock: Any, log_level: str = "warning") -> None:
    """Serve on a bound, listening socket until SIGTERM or SIGINT, then drain (the module's
    docstring): uvicorn stops accepting connections; the service turns unready and answers
    what is pending within ``config.shutdown_grace_s``; then the process exits."""
    import uvicorn

    service: Service = app.state.service
    config = service.config

    class DrainingServer(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            loop = service.loop
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(service.begin_drain)
            super().handle_exit(sig, frame)

    server = DrainingServer(uvicorn.Config(
        app, log_level=log_level,
        # uvicorn's own limit comes after ours: by then every request has been answered
        timeout_graceful_shutdown=int(math.ceil(config.shutdown_grace_s)) + 5,
        limit_concurrency=None, access_log=False))
    server.run(sockets=[sock])
