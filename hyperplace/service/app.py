"""The HTTP service: FastAPI routes over the same library and document schemas as the CLI.

Layout of one request: the guard (ASGI middleware) checks the Bearer token and the body
size and records metrics; FastAPI validates the envelope (budget, solver, which instance);
the documents inside go to a worker process with the request's deadline; the worker
validates them, solves, and returns the JSON answer, which the event loop only forwards.

Status codes (every error body is :class:`~hyperplace.service.schemas.ErrorBody`):
400 malformed JSON; 401 missing or wrong token; 404 unknown run, cluster or route; 409 a
delta that contradicts the stored state, or cancelling a finished run; 413 body over the
limit; 422 invalid field (``path`` names it); 429 queue full (``Retry-After``); 500 a worker
crashed or the library failed on this request (the worker is replaced; other requests are
unaffected); 503 starting or shutting down (``Retry-After``).

Budgets: ``budgetS`` (default ``default_budget_s``) is cut to ``max_budget_s``; the deadline
starts when the request arrives, so time spent queued comes out of the budget, and the answer
arrives within the budget plus :data:`~hyperplace.service.config.OVERHEAD_S`, or within one
greedy pass plus that overhead when the budget is shorter than the greedy pass (the floor of
any budget, as for the CLI). A request that could not start within its budget is refused
(429 at arrival, 503 if its deadline passes in the queue) instead of being answered late.
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
from fastapi import FastAPI, Path, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, SkipValidation
from starlette.exceptions import HTTPException as StarletteHTTPException

from hyperplace.errors import field_path
from hyperplace.models.usage import QueueUsage
from hyperplace.models.instance import Instance
from hyperplace.models.federation import EstimateReport, FederationPlan
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.split import SplitPlan
from hyperplace.service import extender
from hyperplace.service.config import OVERHEAD_S, ServiceConfig
from hyperplace.service.metrics import Metrics
from hyperplace.service.pool import (
    Cancelled,
    Expired,
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
from hyperplace.service.state import apply_patch, apply_plan
from hyperplace.service.store import ClusterRecord, RunRecord, Store, UsageRecord
from hyperplace.service.worker import RequestProblem, error_body

API_VERSION = "v1"
KNOWN_PATHS = frozenset({"/openapi.json", "/docs", "/redoc"})
ClusterName = Annotated[str, Path(min_length=1, max_length=253,
                                  pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 413, 422, 429, 500, 503)}


class BodyTooLarge(Exception):
    pass


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
        self.store = Store(config.db_path)
        self.run_tasks: set[asyncio.Task] = set()

    # ---- budgets and payloads -------------------------------------------------------------
    def budget(self, requested: float | None) -> float:
        b = self.config.default_budget_s if requested is None else requested
        return min(b, self.config.max_budget_s)

    def instance_payload(self, body: Any) -> dict[str, Any]:
        payload = body.source_payload()
        if body.cluster is not None:
            rec = self.store.clusters.get(body.cluster)
            if rec is None:
                raise RequestProblem(404, [{"path": "cluster",
                                            "message": f"no stored cluster {body.cluster!r}"}])
            # the version and the time it was stored: a cluster deleted and stored again
            # restarts at version 1, and a worker must not mistake it for its cached one
            payload["cluster_version"] = [rec.version, rec.updated]
            usage = self.usage_at(body.cluster, time.time())
            if usage is not None:  # the round sees the history brought to its time
                payload["queue_usage"] = usage.snapshot()
        return payload

    # ---- usage history per stored cluster -------------------------------------------------
    def usage_at(self, name: str, now: float) -> QueueUsage | None:
        """The cluster's usage history brought to ``now`` (the GPUs each queue held since the
        last update accrue, everything decays; the library's
        :class:`~hyperplace.models.usage.QueueUsage` rule); a copy, nothing is
        stored. None when the server keeps no history."""
        if not self.config.keeps_usage:
            return None
        rec = self.store.usage.get(name) or UsageRecord(None)
        usage = QueueUsage(self.config.half_life_s, dict(rec.gpu_hours), rec.time_s)
        usage.advance(now, rec.held)
        return usage

    def usage_after(self, name: str, now: float, held: dict[str, int],
                    gpu_hours: dict[str, float] | None = None) -> UsageRecord | None:
        """The record to store when what the cluster's queues hold changes at ``now``: the
        history up to ``now`` (or ``gpu_hours``, a history given by the caller) and the new
        holdings."""
        usage = self.usage_at(name, now)
        if usage is None:
            return None
        hours = dict(gpu_hours) if gpu_hours else dict(usage.gpu_hours)
        return UsageRecord(now, hours, {q: int(g) for q, g in held.items() if g > 0})

    def usage_view(self, name: str) -> dict[str, Any] | None:
        """The ``usageHistory`` of a cluster summary."""
        usage = self.usage_at(name, time.time())
        if usage is None:
            return None
        rec = self.store.usage.get(name) or UsageRecord(None)
        return {"halfLifeS": self.config.half_life_s, **rec.to_json(),
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
                      task_id: str | None = None, grace_s: float | None = OVERHEAD_S
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
                "headers": {"Retry-After": "1"}}
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
            cluster = payload.get("cluster") or info.get("instance")
            await asyncio.to_thread(self.store.record_plan, cluster, info["extender"])
        return reply.status, reply.body, info

    async def after_placement(self, payload: dict[str, Any], info: dict[str, Any]
                              ) -> dict[str, str]:
        """``apply``: the admitted jobs now hold their GPUs in the stored cluster."""
        name = payload.get("cluster")
        if not (payload.get("apply") and name and info.get("allocations") is not None):
            return {}
        rec = self.store.clusters.get(name)
        if rec is None:
            return {"X-Hyperplace-Applied": "no: the cluster was deleted"}
        if [rec.version, rec.updated] != payload["cluster_version"]:
            return {"X-Hyperplace-Applied": f"no: the cluster changed (version {rec.version})"}
        running = info.get("running") or []
        try:
            doc = apply_plan(rec.doc, info["allocations"], running)
        except RequestProblem as exc:
            return {"X-Hyperplace-Applied": f"no: {exc}"}
        used = sum(len(g) for _, g in info["allocations"])
        now = time.time()
        held = dict(self.store.usage[name].held) if name in self.store.usage else {}
        for _, queue, _, gpus in running:
            held[queue] = held.get(queue, 0) + gpus
        new = ClusterRecord(name, rec.version + 1, doc, rec.gpus, rec.free_gpus - used,
                            max(0, rec.pending_jobs - len(info.get("admitted", []))), now)
        await asyncio.to_thread(self.store.put_cluster, new, json.dumps(doc),
                                self.usage_after(name, now, held))
        return {"X-Hyperplace-Applied": "yes", "X-Hyperplace-Cluster-Version": str(new.version)}

    # ---- runs ---------------------------------------------------------------------------------
    def start_run(self, run: RunRecord) -> None:
        """Queue a run and follow it to the end in a background task."""
        body = PlacementRequest.model_validate(run.request["request"])
        payload = self.payload_for(ENDPOINTS[0], body, run.budget or self.budget(None))
        deadline = time.monotonic() + (run.budget or self.budget(None))
        task = self.pool.submit(run.kind, payload, deadline, task_id=run.id,
                                fetch=self.fetch_cluster)

        async def follow() -> None:
            try:
                reply = await task.future
                status, body_bytes, info = reply.status, reply.body, dict(reply.info)
                if status == 200:
                    if "extender" in info:
                        cluster = payload.get("cluster") or info.get("instance")
                        await asyncio.to_thread(self.store.record_plan, cluster,
                                                info["extender"])
                    if "solve_s" in info:
                        self.metrics.solve_time.labels(run.kind).observe(info["solve_s"])
                        if info.get("fallback"):
                            self.metrics.fallbacks.labels(run.kind).inc()
                    await self.after_placement(payload, info)
                    run.state, run.result = "succeeded", json.loads(body_bytes)
                else:
                    run.state, run.error = "failed", json.loads(body_bytes)
            except Cancelled:
                run.state = "cancelled"
            except PoolError as exc:
                if self.pool.closing:
                    return  # stays queued/running in the store: resumed after a restart
                run.state, run.error = "failed", {"status": 500, "error": str(exc)}
            run.finished = time.time()
            await asyncio.to_thread(self.store.save_run, run)

        async def mark_started() -> None:
            while task.state == "queued" and not task.future.done():
                await asyncio.sleep(0.02)
            if task.state == "running" and run.state == "queued":
                run.state, run.started = "running", time.time()

        t = asyncio.create_task(follow())
        s = asyncio.create_task(mark_started())
        for x in (t, s):
            self.run_tasks.add(x)
            x.add_done_callback(self.run_tasks.discard)

    def run_status(self, run: RunRecord) -> dict[str, Any]:
        progress = 1.0 if run.state in ("succeeded", "failed", "cancelled") else 0.0
        if run.state == "running" and run.started and run.budget:
            progress = min(0.99, (time.time() - run.started) / run.budget)
        return RunStatus(id=run.id, kind=run.kind, state=run.state,  # type: ignore[arg-type]
                         created_at=run.created, started_at=run.started,
                         finished_at=run.finished, progress=progress, budget_s=run.budget,
                         result=run.result, error=run.error).model_dump(by_alias=True)

    async def resume_runs(self) -> None:
        """Runs that were queued or running when the server stopped start again."""
        for run in sorted(self.store.runs.values(), key=lambda r: r.created):
            if run.state in ("queued", "running"):
                run.state, run.started = "queued", None
                try:
                    self.start_run(run)
                except PoolError as exc:
                    run.state, run.error = "failed", {"status": 503, "error":
                                                      f"not resumed after a restart: {exc}"}
                    run.finished = time.time()
                await asyncio.to_thread(self.store.save_run, run)


# ---- the guard: token, body limit, metrics ------------------------------------------------

class Guard:
    """ASGI middleware in front of every route: Bearer token (all but ``/healthz``), body
    size limit (413 before reading a declared-too-large body, or as soon as a streamed one
    passes the limit), and request metrics by route template and status."""

    OPEN_PATHS = frozenset({"/healthz"})

    def __init__(self, app: Any, service: Service):
        self.app = app
        self.service = service
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

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state = {"status": 500, "started": False}
        metrics = self.service.metrics

        async def send_wrapper(message: dict) -> None:
            if message["type"] == "http.response.start":
                state["status"], state["started"] = message["status"], True
            await send(message)

        try:
            headers = dict(scope.get("headers") or [])
            if self.expected is not None and scope["path"] not in self.OPEN_PATHS:
                got = headers.get(b"authorization", b"")
                if not hmac.compare_digest(got, self.expected):
                    await self._send_error(send_wrapper, 401,
                                           "missing or wrong token: send Authorization: Bearer "
                                           "<token>", {"WWW-Authenticate": "Bearer"})
                    return
            limit = self.service.config.max_body_bytes
            declared = headers.get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                await self._send_error(send_wrapper, 413, f"request body over the limit of "
                                       f"{limit} bytes")
                return
            seen = 0

            async def counting_receive() -> dict:
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > limit:
                        raise BodyTooLarge()
                return message

            try:
                await self.app(scope, counting_receive, send_wrapper)
            except BodyTooLarge:
                if not state["started"]:
                    await self._send_error(send_wrapper, 413, f"request body over the limit "
                                           f"of {limit} bytes")
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or (
                scope["path"] if scope["path"] in KNOWN_PATHS else "unmatched")
            metrics.requests.labels(endpoint, str(state["status"])).inc()
            metrics.latency.labels(endpoint).observe(time.perf_counter() - start)


# ---- the application --------------------------------------------------------------------

def _validation_problems(exc: RequestValidationError) -> tuple[int, list[dict[str, Any]]]:
    problems = []
    for err in exc.errors()[:20]:
        loc = list(err.get("loc", ()))
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx") or {}
            where = f" at position {loc[1]}" if len(loc) > 1 else ""
            return 400, [{"path": None, "message":
                          f"malformed JSON{where}: {ctx.get('error', 'invalid JSON')}"}]
        if loc and loc[0] == "body":
            loc = loc[1:]
        loc = [p for p in loc if not (isinstance(p, str) and p.startswith("function-"))]
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        if err.get("type") == "extra_forbidden":
            msg = "unknown field"
        elif err.get("type") == "missing":
            msg = "required field is missing"
        problems.append({"path": field_path(loc) or None, "message": msg})
    return 422, problems


def create_app(config: ServiceConfig) -> FastAPI:
    """The FastAPI application of one server process."""
    service = Service(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await service.pool.start()
        await service.resume_runs()
        try:
            yield
        finally:
            await service.pool.close(config.shutdown_grace_s)
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

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        status, problems = _validation_problems(exc)
        return json_error(status, problems[0]["message"] if problems else "invalid request",
                          problems=problems)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> Response:
        if isinstance(exc.__cause__, BodyTooLarge):  # FastAPI wraps body-reading failures
            return json_error(413, f"request body over the limit of {config.max_body_bytes} "
                              "bytes")
        return json_error(exc.status_code, str(exc.detail),
                          headers=dict(exc.headers) if exc.headers else None)

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
    if config.test_hooks:
        _add_debug(app, service)
    app.add_middleware(Guard, service=service)
    return app


def _add_endpoint(app: FastAPI, service: Service, ep: Endpoint) -> None:
    async def route(body: Annotated[ep.request, BodyParam()]) -> Response:  # type: ignore[name-defined]
        arrived = time.monotonic()
        budget = service.budget(getattr(body, "budget_s", None)) if ep.budgeted \
            else service.config.max_budget_s
        payload = service.payload_for(ep, body, budget)
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
        service.instance_payload(body.request)  # 404 now for an unknown stored cluster
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
            return json_error(503, str(exc), headers={"Retry-After": "1"})
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
        if run.state not in ("queued", "running"):
            return json_error(409, f"run {run_id} already {run.state}", path="id")
        service.pool.cancel(run_id)
        run.state, run.finished = "cancelled", time.time()
        await asyncio.to_thread(service.store.save_run, run)
        return JSONResponse(service.run_status(run))


def _cluster_info(rec: ClusterRecord, usage: dict[str, Any] | None = None) -> dict[str, Any]:
    return ClusterInfo.model_validate(
        {"name": rec.name, "version": rec.version, "gpus": rec.gpus,
         "freeGpus": rec.free_gpus, "pendingJobs": rec.pending_jobs,
         "updatedAt": rec.updated, "usageHistory": usage}).model_dump(by_alias=True,
                                                                     exclude_none=True)


def _add_clusters(app: FastAPI, service: Service) -> None:
    async def store_doc(name: str, doc: Any, version: int, prefix: str = "",
                        arrivals_from: int | None = None) -> Response:
        updated = time.time()
        payload = {"instance": doc, "name": name, "version": [version, updated],
                   "prefix": prefix, "arrivals_from": arrivals_from}
        status, data, info = await service.execute(
            "validate-instance", payload, time.monotonic() + service.config.max_budget_s,
            grace_s=None)
        if status != 200:
            return Response(data, status_code=status, media_type="application/json",
                            headers=info.get("headers") or {})
        text = data.decode()
        doc = json.loads(text)
        usage = None
        if service.config.keeps_usage:
            # the history is the service's (one copy, in its own table): a document's own
            # spec.queueUsage replaces it, and is not kept in the document
            own = doc["spec"].pop("queueUsage", None)
            usage = service.usage_after(name, updated, info.get("held") or {}, own)
            text = json.dumps(doc)
        rec = ClusterRecord(name, version, doc, info["gpus"], info["free_gpus"],
                            info["pending_jobs"], updated)
        await asyncio.to_thread(service.store.put_cluster, rec, text, usage)
        return JSONResponse(_cluster_info(rec, service.usage_view(name)))

    @app.put("/v1/clusters/{name}", response_model=ClusterInfo, responses=ERRORS,
             tags=["clusters"], summary="Store (or replace) a cluster: an Instance document")
    async def put_cluster(name: ClusterName,
                          instance: Annotated[Annotated[Instance, SkipValidation],
                                              BodyParam()]) -> Response:
        old = service.store.clusters.get(name)
        return await store_doc(name, instance, (old.version + 1) if old else 1)

    @app.patch("/v1/clusters/{name}", response_model=ClusterInfo, responses=ERRORS,
               tags=["clusters"],
               summary="Apply deltas: completions, failures, repairs, allocations, arrivals")
    async def patch_cluster(name: ClusterName, patch: ClusterPatch) -> Response:
        rec = service.store.clusters.get(name)
        if rec is None:
            return json_error(404, f"no stored cluster {name!r}", path="name")
        interrupted: list[str] = []
        doc = apply_patch(rec.doc, patch, interrupted)
        after = len(doc["spec"].get("jobs") or [])
        first_arrival = after - len(patch.arrivals) if patch.arrivals else None
        resp = await store_doc(name, doc, rec.version + 1, arrivals_from=first_arrival)
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
    plans = service.store.job_plans

    @app.post("/v1/extender/filter", response_model=K8sFilterResult, tags=["extenders"],
              summary="kube-scheduler extender filter verb, from the latest plan of the pod's job")
    async def k8s_filter(args: K8sExtenderArgs) -> Response:
        return JSONResponse(extender.k8s_filter(args.model_dump(exclude_unset=True), plans,
                                                labels))

    @app.post("/v1/extender/prioritize", response_model=list[K8sHostPriority],
              tags=["extenders"], summary="kube-scheduler extender prioritize verb")
    async def k8s_prioritize(args: K8sExtenderArgs) -> Response:
        return JSONResponse(extender.k8s_prioritize(args.model_dump(exclude_unset=True), plans,
                                                    labels))

    @app.post("/v1/volcano/predicate", response_model=VolcanoPredicateResponse,
              tags=["extenders"], summary="Volcano extender predicate verb")
    async def volcano_predicate(req: VolcanoPredicateRequest) -> Response:
        return JSONResponse(extender.volcano_predicate(req.model_dump(exclude_unset=True),
                                                       plans, labels))

    @app.post("/v1/volcano/prioritize", response_model=VolcanoPrioritizeResponse,
              tags=["extenders"], summary="Volcano extender prioritize verb")
    async def volcano_prioritize(req: VolcanoPrioritizeRequest) -> Response:
        return JSONResponse(extender.volcano_prioritize(req.model_dump(exclude_unset=True),
                                                        plans, labels))


def _add_operations(app: FastAPI, service: Service) -> None:
    @app.get("/healthz", tags=["operations"], summary="The process is up (no token needed)")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"], summary="Workers started and taking work",
             responses={503: {"model": ErrorBody}})
    async def readyz() -> Response:
        if not service.pool.ready:
            return json_error(503, "not ready: workers starting or shutting down",
                              headers={"Retry-After": "1"})
        return JSONResponse({"status": "ready", "workers": service.pool.size,
                             "busy": service.pool.busy, "queued": service.pool.queue_depth,
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
    async def sleep(seconds: float = 1.0) -> Response:
        if not math.isfinite(seconds) or not 0 <= seconds <= 30:
            return json_error(422, "seconds in [0, 30]", path="seconds")
        status, data, info = await service.execute("debug-sleep", {"seconds": seconds},
                                                   time.monotonic() + 30, grace_s=None)
        return Response(data, status_code=status, media_type="application/json",
                        headers=info.get("headers") or {})

    @app.get("/v1/debug/workers", include_in_schema=False)
    async def workers() -> dict[str, Any]:
        return {"pids": service.pool.worker_pids(), "replaced": service.pool.replaced,
                "busy": service.pool.busy}
