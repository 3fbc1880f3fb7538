"""What runs inside a worker process: one handler per kind of work, and the process's loop.

Every handler gets the request's payload (plain JSON-ready data, validated here and not in
the event loop) and the request's deadline on the shared monotonic clock, and returns a
:class:`Reply`: the HTTP status, the JSON body as bytes (encoded here, so the event loop only
forwards it) and a small ``info`` dict for the metrics, the run store and the extender index.

Adding an endpoint over another library call is one handler here plus one
:class:`~hyperplace.service.app.Endpoint` line in ``app.py``.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import signal
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from pydantic import ValidationError

from hyperplace.errors import InputError, field_path, problem_message, typos_first

Handler = Callable[[dict[str, Any], float, "WorkerContext"], "Reply"]
HANDLERS: dict[str, Handler] = {}
# Handlers only reachable when the server runs with test hooks (the service tests).
DEBUG_KINDS = frozenset({"debug-crash", "debug-sleep"})

# Kept back from the remaining budget for writing the answer and the hop back.
ENCODE_RESERVE_S = 0.02
# A round's solve is given this fraction of what its deadline leaves less: the plan, its
# encoding and a solver's overrun on a busy machine come after it, and an answer not in by
# the hard deadline stops the worker (its replacement starts cold, and the next rounds miss).
SOLVE_RESERVE_FRACTION = 0.1
# Forecasts of at least this many jobs set a worker's forecast rate (in fewer, the fixed
# cost of a call, a first import included, would make the rate seconds a job).
FORECAST_RATE_MIN_JOBS = 200
# Workers run this much nicer than the server (os.nice). 0: at +5, on a machine shared with
# other work, every nice-0 process took CPU from the solves, and their wall-clock deadlines
# did not move: at load ~4, 16,384-GPU rounds at budget 5 s ran past the hard deadline and
# were stopped, 3 of 3 at concurrency 1 and every one at 8 (at 0: 3 of 3, and the first 2 of 8
# answered); the extender's p99 at +5 was within the noise (notes/issue-27-service.md).
WORKER_NICE = 0
# Cached parsed instances of stored clusters, per worker (LRU).
CACHE_SIZE = 4
# Stored clusters whose last round's problem a worker keeps for the next round (LRU).
WARM_SIZE = 2

_PATH_PREFIX = re.compile(r"^([A-Za-z_]\w*(?:\[\d+\])*(?:\.[A-Za-z_]\w*(?:\[\d+\])*)*): (.+)$",
                          re.S)


class Reply(NamedTuple):
    status: int
    body: bytes
    info: dict[str, Any]


class WorkerContext:
    """A worker's link back to the server (to fetch a stored cluster it has not cached)."""

    def __init__(self, conn: Any) -> None:
        # seconds per job of this worker's last forecasts (the library's figure until then)
        self.forecast_s_per_job = 0.0
        self.conn = conn
        self.cache: OrderedDict[tuple[str, tuple[Any, ...]], Any] = OrderedDict()
        # per stored cluster: what its last round left for the next (solvers.heuristics.warm)
        self.warm: OrderedDict[str, Any] = OrderedDict()
        # this task's input read with a warning (an old key's spelling), one line each: the
        # answer carries them as the CLI prints them (reset by run_task)
        self.input_warnings: list[str] = []

    def warm_start(self, name: str, inst: Any) -> Any:
        """The stored cluster's :class:`~hyperplace.solvers.heuristics.warm.WarmStart` (fabric and the
        views of unchanged nodes and jobs reused from its previous round in this worker)."""
        from hyperplace.solvers.heuristics.warm import WarmStart, carry_fabric

        warm = self.warm.pop(name, None) or WarmStart()
        if warm.problem is not None:
            carry_fabric(warm.problem.instance, inst)
        self.warm[name] = warm
        while len(self.warm) > WARM_SIZE:
            self.warm.popitem(last=False)
        return warm

    def stored_instance(self, name: str, version: list[Any]) -> Any:
        """The parsed instance of a stored cluster at ``version``: from this worker's cache
        (a warm round skips sending and validating it), else asked of the server."""
        key = (name, tuple(version))
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        self.conn.send(("need", name, version))
        doc = self.conn.recv()
        if doc is None:
            raise InputError(f"no stored cluster {name!r}", path="cluster")
        from hyperplace.models.instance import Instance

        inst = validate(Instance, doc, "")
        self.remember(name, version, inst)
        return inst

    def remember(self, name: str, version: list[Any], inst: Any) -> None:
        """Cache under (name, [version, stored-at]): never reused across a delete."""
        key = (name, tuple(version))
        self.cache[key] = inst
        self.cache.move_to_end(key)
        while len(self.cache) > CACHE_SIZE:
            self.cache.popitem(last=False)


class RequestProblem(Exception):
    """Bad input found in a worker: becomes a 4xx with the field path."""

    def __init__(self, status: int, problems: list[dict[str, Any]]):
        self.status = status
        self.problems = problems
        super().__init__(problems[0]["message"] if problems else "bad request")


def handler(kind: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        HANDLERS[kind] = fn
        return fn
    return register


# ---- validation with field paths -------------------------------------------------------

def _join(prefix: str, path: str) -> str:
    if not prefix:
        return path
    if not path:
        return prefix
    return f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"


def problems_of(exc: ValidationError, prefix: str = "", model: Any = None) -> list[dict[str, Any]]:
    """Every problem of a pydantic error as ``{path, message}``; a path a model validator put
    at the start of its message (``spec.clusters[0].nodes[3].gpuType: unknown ...``) is
    moved into the path."""
    out = []
    errors = typos_first(exc.errors())
    for err in errors[:20]:
        loc = [p for p in err.get("loc", ())
               if not (isinstance(p, str) and p.startswith("function-"))]
        path = field_path(loc)
        msg = problem_message(err, errors, model).removeprefix("Value error, ")
        match = _PATH_PREFIX.match(msg)
        if match:
            path, msg = _join(path, match.group(1)), match.group(2)
        out.append({"path": _join(prefix, path) or None, "message": msg.splitlines()[0]})
    return out


_gc_lock = threading.Lock()
_gc_holds = 0


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a large JSON text is parsed or
    validated (threads share the pause; it resumes when the last one ends).

    Measured (bench/results/service.md): parsing a 7.6 MB body with the duplicate-key hook
    took 0.88 s and held every other thread (the event loop) for up to 0.57 s, because the
    many young objects set off full collections of the whole heap; with the collector paused,
    0.34 s and 46 ms. JSON documents hold no reference cycles, so nothing is left for the
    collector to find."""
    global _gc_holds
    with _gc_lock:
        if _gc_holds == 0:
            gc.disable()
        _gc_holds += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_holds -= 1
            if _gc_holds == 0:
                gc.enable()


def _as_json(obj: Any) -> Any:
    """A library object inside a request's document (a model the service resolved by name)."""
    from pydantic import BaseModel

    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json", by_alias=True)
    raise TypeError(f"{type(obj).__name__} is not JSON")


def validate(model: Any, data: Any, prefix: str) -> Any:
    """A document of a request as the library's ``model``, strictly: no string-to-number or
    string-to-bool coercion (``"gpusPerGroup": "8"`` is a 422 naming the field; an integer
    where a number is asked is fine). Strict validation of JSON input (pydantic's strict mode
    in JSON mode: enum values, dates and tuples as JSON writes them); the library models and
    the CLI's reading of files are unchanged."""
    if isinstance(data, model):  # already the library's object (a workload read by a reader)
        return data
    try:
        with gc_paused():
            return model.model_validate_json(
                json.dumps(data, allow_nan=False, default=_as_json), strict=True)
    except ValidationError as exc:
        raise RequestProblem(422, problems_of(exc, prefix, model)) from None
    except (TypeError, ValueError) as exc:  # pragma: no cover - bodies are parsed JSON
        raise RequestProblem(422, [{"path": prefix or None, "message": str(exc)}]) from None


def request_field(path: str, prefix: str, *, jobs_given: bool = False) -> str | None:
    """The request's field for ``path`` of the instance the library read: a job of a
    request's ``jobs`` list (``jobs_given``: it replaced the queue) at ``jobs[i]...``
    whatever the instance came from, anything else under ``prefix``."""
    if jobs_given and path.startswith("spec.jobs["):
        return path.removeprefix("spec.")
    return _join(prefix, path) or prefix or None


def input_problem(exc: InputError, prefix: str = "", *, jobs_given: bool = False
                  ) -> RequestProblem:
    path = exc.path or ""
    if path.startswith("--"):  # a CLI option name from the library: the request field instead
        path = ""
    return RequestProblem(422, [{"path": request_field(path, prefix, jobs_given=jobs_given),
                                 "message": exc.message}])


def error_body(status: int, problems: list[dict[str, Any]]) -> bytes:
    first = problems[0] if problems else {"path": None, "message": "bad request"}
    where = f"{first['path']}: " if first.get("path") else ""
    return json.dumps({"status": status, "error": f"{where}{first['message']}",
                       "path": first.get("path"), "problems": problems}).encode()


def dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()


def remaining(deadline: float) -> float:
    return deadline - time.monotonic() - ENCODE_RESERVE_S


# ---- the instance a request names --------------------------------------------------------

def resolve_instance(src: dict[str, Any], ctx: WorkerContext) -> tuple[Any, str]:
    """The instance of an :class:`~hyperplace.service.schemas.InstanceSource` payload, and the
    name a plan should record. Bundled instances are looked up by name among the bundled
    ones only: no request can make the server read a path."""
    from hyperplace.instances.registry import bundled_names, load_instance
    from hyperplace.models.job import TrainingJob

    if src.get("instance") is not None:
        with old_keys_noted(ctx):
            if isinstance(src["instance"], dict) and src["instance"].get("kind", "Instance") \
                    == "Instance":
                renamed_keys(src["instance"], "instance")
            inst = _inline_instance(src["instance"])
        label = inst.name
    elif src.get("bundled") is not None:
        name = src["bundled"]
        known = bundled_names()
        if name not in known:
            raise RequestProblem(422, [{"path": "bundled", "message":
                                        f"unknown bundled instance {name!r}; known: "
                                        f"{', '.join(known)}"}])
        inst = load_instance(name)
        label = name
    else:
        name, version = src["cluster"], src["cluster_version"]
        inst = ctx.stored_instance(name, version)
        label = name
        if src.get("queue_usage") is not None and inst.queue_set is not None:
            # the service's usage history of this cluster, brought to the round's time
            from hyperplace.models.usage import with_queue_usage

            inst = with_queue_usage(inst, src["queue_usage"])
    if src.get("jobs") is not None:
        jobs = [validate(TrainingJob, _inline_job(j, i), f"jobs[{i}]")
                for i, j in enumerate(src["jobs"])]
        seen: set[str] = set()
        for i, j in enumerate(jobs):
            if j.name in seen:
                raise RequestProblem(422, [{"path": f"jobs[{i}].metadata.name",
                                            "message": f"duplicate job name {j.name!r}"}])
            seen.add(j.name)
        inst = inst.with_jobs(jobs)
    if src.get("queues"):
        inst = with_queue_payload(inst, src["queues"], jobs_given=src.get("jobs") is not None)
    return inst, label


@contextlib.contextmanager
def old_keys_noted(ctx: WorkerContext) -> Iterator[None]:
    """Within: every ``DeprecatedKey`` warning the library raises while reading a request's
    documents goes to ``ctx.input_warnings`` (the CLI prints them as ``warning:`` lines)."""
    import warnings

    from hyperplace.errors import DeprecatedKey

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DeprecatedKey)
        yield
    ctx.input_warnings += [str(w.message).removeprefix("body: ") for w in caught
                           if issubclass(w.category, DeprecatedKey)]


def renamed_keys(doc: Any, source: str) -> None:
    """Warn (``DeprecatedKey``) of every old key an Instance document uses, as the CLI's
    reader does; both spellings in one mapping is a 422 at the old key."""
    from hyperplace.instances.registry import warn_renamed_keys

    try:
        warn_renamed_keys(doc, source)
    except InputError as exc:
        path = _join(source, exc.path or "") if source != "body" else exc.path
        raise RequestProblem(422, [{"path": path, "message": exc.message}]) from None


def _inline_instance(doc: Any) -> Any:
    """``instance`` of a request: an Instance, or (#23, as every file the CLI reads) a
    ``Cluster`` document, a Kubernetes ``Node``/``List`` of nodes, or such documents in a
    ``List``: read by the library's own reader (:func:`instance_from_documents`); a bad
    field is a 422 naming ``instance...``."""
    from hyperplace.models.instance import Instance

    if not isinstance(doc, dict) or doc.get("kind", "Instance") == "Instance":
        return validate(Instance, doc, "instance")
    from hyperplace.instances.registry import instance_from_documents

    try:
        return instance_from_documents([doc], "instance")
    except InputError as exc:
        raise RequestProblem(422, [{"path": _join("instance", exc.path or ""),
                                    "message": exc.message}]) from None


def _inline_job(doc: Any, i: int) -> Any:
    """A ``jobs[i]`` entry: hyperplace's job, or a Kubernetes workload (Volcano Job, batch/v1
    Job, JobSet, PyTorchJob, MPIJob, PodGroup) read as ``--jobs`` reads it."""
    from hyperplace.instances.importers.jobs import is_job_document, job_document

    if not isinstance(doc, dict) or not is_job_document(doc):
        return doc
    try:
        job, _ = job_document(doc, "request")
    except InputError as exc:
        raise RequestProblem(422, [{"path": _join(f"jobs[{i}]", exc.path or ""),
                                    "message": exc.message}]) from None
    if job is None:
        raise RequestProblem(422, [{"path": f"jobs[{i}]", "message":
                                    "no pod of this job asks for a GPU: nothing to place"}])
    return job


def with_queue_payload(inst: Any, docs: list[Any], *, jobs_given: bool) -> Any:
    """The instance with a request's ``queues`` documents, through the same library path as
    ``hyperplace solve --queues`` (:meth:`Instance.with_queue_documents`); a bad document or a
    job naming an undeclared queue is a 422 with the field path."""
    from hyperplace.models.queue import QueueError

    pairs = []
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise RequestProblem(422, [{"path": f"queues[{i}]",
                                        "message": "expected a mapping (a queue document)"}])
        pairs.append((f"queues[{i}]", doc))
    try:
        return inst.with_queue_documents(pairs)
    except QueueError as exc:
        raise RequestProblem(422, [{"path": exc.path, "message": exc.message}]) from None
    except ValueError as exc:
        msg = str(exc)
        match = _PATH_PREFIX.match(msg)
        path, message = (match.group(1), match.group(2)) if match else (None, msg)
        if path:
            path = request_field(path, "instance", jobs_given=jobs_given)
        raise RequestProblem(422, [{"path": path, "message": message.splitlines()[0]}]) from None


# ---- handlers -------------------------------------------------------------------------------

def extender_index(plan: Any, inst: Any = None) -> dict[str, Any]:
    """What the extender endpoints need from a plan: per admitted job the GPUs it gets on
    each node, per pending job its first reason, and each job's namespace (when its manifest
    names one)."""
    jobs: dict[str, dict[str, int]] = {}
    for p in plan.placements:
        per = jobs.setdefault(p.job, {})
        for g in p.gpus:
            per[g.node] = per.get(g.node, 0) + 1
    pending = {pj.job: (pj.reasons[0] if pj.reasons else "pending") for pj in plan.pending}
    spaces = {j.name: j.metadata.namespace for j in (inst.jobs if inst is not None else [])
              if j.metadata.namespace}
    return {"jobs": jobs, "pending": pending, "namespaces": spaces}


@handler("placement")
def placement(payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    from hyperplace.models.request import RoundRequest
    from hyperplace.solvers.driver import solve_placement

    inst, label = resolve_instance(payload, ctx)
    from hyperplace.sim import forecast  # (#21) when and where, every job

    _run_times_of(payload, inst)
    # the request body was validated as the library's round request; its budget is what
    # the service's deadline leaves, less SOLVE_RESERVE_FRACTION of it
    request = RoundRequest.of(
        solver=payload["solver"], policy=payload["policy"], seed=payload["seed"],
        budget_s=max(0.01, (1 - SOLVE_RESERVE_FRACTION) * remaining(deadline)), preemption=payload.get("preemption", "never"),
        running_moveable=bool(payload.get("running_moveable")),
        max_moves=payload.get("max_moves"), hot_spares=payload.get("hot_spares", 0))
    # rounds on a stored cluster are not cold starts (an inline instance has no history)
    warm = ctx.warm_start(label, inst) if payload.get("cluster") is not None else None
    plan = solve_placement(inst, **request.solve_kwargs(), warm=warm)

    forecasts: list[Any] = []
    # after the solve: only in what its budget left, at this worker's measured rate (the
    # library's figure was fitted on an idle machine; on a busy one forecasts of 2,000 jobs
    # took twice as long and ran past the hard deadline)
    need = max(forecast.forecast_cost_s(inst, plan), ctx.forecast_s_per_job * len(inst.jobs))
    if need <= remaining(deadline):
        start = time.monotonic()
        try:
            # the plan's now is the wall clock, as in solve: texts say "about 14:20 UTC"
            forecasts = forecast.forecast_plan(inst, plan, clock=time.time())
        except InputError as exc:  # a job's duration annotation: its field in the request
            raise input_problem(exc, "instance" if payload.get("instance") is not None
                                else "") from None
        if len(inst.jobs) >= FORECAST_RATE_MIN_JOBS:
            ctx.forecast_s_per_job = (time.monotonic() - start) / len(inst.jobs)
    else:
        plan = plan.model_copy(update={"message": "; ".join(filter(None, [
            plan.message, f"no forecasts: the budget had no time left for them (about "
            f"{need:.2g} s for {len(inst.jobs):,} jobs; a larger budgetS, or GET "
            "/v1/clusters/{name}/jobs/{job} for one job)"]))})
    plan = plan.model_copy(update={
        "metadata": plan.metadata.model_copy(update={"instance": label}),
        "budget_s": payload["budget_s"], "forecasts": forecasts,
        "warnings": [*plan.warnings, *ctx.input_warnings]})
    info: dict[str, Any] = {
            "status": plan.status.value, "solve_s": plan.runtime_s,
            "fallback": plan.status.value == "fallback", "instance": label,
            "extender": extender_index(plan, inst)}
    if payload.get("apply"):
        info["allocations"] = [[p.job, [[g.node, g.gpu] for g in p.gpus]]
                               for p in plan.placements]
        info["admitted"] = plan.admitted
        # queue (as the stored cluster declares it; request queues are not stored), priority
        # and GPUs of each admitted job: for spec.runningJobs and the usage history
        manifests = {j.name: j for j in inst.jobs}
        own_queues = not payload.get("queues")
        from hyperplace.models.instance import RunningJob

        info["running"] = [
            [j.job, entry.queue, entry.priority, j.gpus] for j in plan.jobs
            for entry in [RunningJob.started(manifests[j.job], inst.queue_of(manifests[j.job])
                                             if own_queues else "default")]]
    return Reply(200, dumps(plan.to_doc()), info)


def read_run_times(inst: Any, prefix: str, *, jobs_given: bool = False) -> None:
    """Every job's run time read (``hyperplace.io/duration``): a bad annotation is a 422 at
    its field whatever the budget leaves for forecasts, and before a run is accepted or a
    cluster stored (a stored bad one would fail every later placement on it). With a
    request's ``jobs`` list (``jobs_given``: it replaced the queue) the field is that list's,
    ``jobs[i]...``, as the service's pre-admission check names it."""
    from hyperplace.sim.forecast import run_times

    try:
        run_times(inst)
    except InputError as exc:
        raise input_problem(exc, prefix, jobs_given=jobs_given) from None


def _run_times_of(payload: dict[str, Any], inst: Any) -> None:
    """:func:`read_run_times` with the request's field names."""
    read_run_times(inst, "instance" if payload.get("instance") is not None else "",
                   jobs_given=payload.get("jobs") is not None)


@handler("validate-placement")
def validate_placement(payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    """A background run's documents, validated before the run is accepted (202). A stored
    cluster alone needs nothing (it was validated when stored)."""
    if payload.get("cluster") is not None and not (payload.get("jobs") or payload.get("queues")):
        return Reply(200, dumps({}), {})
    inst, _ = resolve_instance(payload, ctx)
    _run_times_of(payload, inst)
    return Reply(200, dumps({"jobs": len(inst.jobs)}), {})


@handler("check")
def check_plan(payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    from hyperplace.check import check
    from hyperplace.models.plan import PlacementPlan

    plan = validate(PlacementPlan, payload["plan"], "plan")
    inst, _ = resolve_instance(payload, ctx)
    violations = check(plan, inst)
    body = {"ok": not violations,
            "violations": [v.model_dump(mode="json") for v in violations],
            **({"warnings": list(ctx.input_warnings)} if ctx.input_warnings else {})}
    return Reply(200, dumps(body), {"violations": len(violations)})


@handler("layer-split")
def layer_split(payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    from hyperplace.models.model_spec import resolve_model
    from hyperplace.models.split import SplitProblem
    from hyperplace.solvers.split import solve_split

    problem = payload["problem"]
    if not isinstance(problem, dict):
        raise RequestProblem(422, [{"path": "problem", "message": "must be an object"}])
    problem = dict(problem)
    named = [k for k in ("model_name", "profile") if payload.get(k)]
    if len(named) > 1:
        raise RequestProblem(422, [{"path": "profile",
                                    "message": "give modelName or profile, not both"}])
    if named:
        if "model" in problem:
            raise RequestProblem(422, [{"path": "problem.model", "message":
                                        f"give the model inline or as {named[0]}, not both"}])
        field = "modelName" if named[0] == "model_name" else "profile"
        try:
            problem["model"] = resolve_model(preset=payload.get("model_name"),
                                             profile=payload.get("profile"),
                                             micro_batch_size=payload.get("micro_batch_size"))
        except InputError as exc:
            raise RequestProblem(422, [{"path": field, "message": exc.message}]) from None
    parsed = validate(SplitProblem, problem, "problem")
    limit = max(0.05, remaining(deadline))
    try:
        plan = solve_split(parsed, payload["solver"], time_limit=limit)
    except InputError as exc:
        raise input_problem(exc, "problem") from None
    info = {"status": plan.stats.status.value, "solve_s": plan.stats.runtime_s,
            "fallback": plan.stats.status.value == "fallback"}
    return Reply(200, dumps(plan.model_dump(mode="json", by_alias=True)), info)


@handler("predict")
def predict_config(payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    from hyperplace.costmodel.predict import predict
    from hyperplace.models.model_spec import ModelSpec
    from hyperplace.models.profiles import resolve_model

    if payload.get("model") is not None:
        spec = validate(ModelSpec, payload["model"], "model")
    else:
        try:
            spec = resolve_model(preset=payload["model_name"])
        except InputError as exc:
            raise RequestProblem(422, [{"path": "modelName", "message": exc.message}]) from None
    try:
        pred = predict(spec, payload["gpu"], tp=payload["tp"], pp=payload["pp"],
                       dp=payload["dp"], micro_batch=payload["microbatch_size"],
                       global_batch=payload["global_batch"], seq=payload["seq"],
                       recompute=payload["recompute"], zero=payload["zero"],
                       flash=payload["flash"], sequence_parallel=payload["sequence_parallel"],
                       precision=payload["precision"])
    except InputError as exc:
        path = (exc.path or "").lstrip("-").replace("microbatch-size", "microbatchSize")
        raise RequestProblem(422, [{"path": path or None, "message": exc.message}]) from None
    return Reply(200, dumps(pred.to_doc()), {})


@handler("federation")
def federation_round(payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    from hyperplace.federation import federate
    from hyperplace.federation.problem import FederationProblem, from_training_job

    inst, label = resolve_instance(payload, ctx)
    if len(inst.clusters) < 2:  # nothing to split across: the round is /v1/placement's
        where = "instance.spec.clusters" if payload.get("instance") is not None else (
            "bundled" if payload.get("bundled") is not None else "cluster")
        raise RequestProblem(422, [{"path": where, "message": (
            f"a federation needs at least 2 member clusters; {label} has "
            f"{len(inst.clusters)}: POST /v1/placement places one cluster's queue")}])
    fjobs, unpriced = [], {}
    for j in inst.jobs:  # a job the round cannot price stays pending with the reason
        try:
            fjobs.append(from_training_job(j))
        except InputError as exc:
            unpriced[j.name] = f"not federated: {exc.one_line()}"
    problem = FederationProblem(inst.with_jobs([]), fjobs, policy=payload["policy"],
                                unpriced=unpriced, max_slowdown=payload["max_slowdown"])
    plan = federate(problem, budget_s=max(0.05, remaining(deadline)), solver=payload["solver"])
    plan = plan.model_copy(update={
        "metadata": plan.metadata.model_copy(update={"instance": label}),
        "budget_s": payload["budget_s"], "warnings": list(ctx.input_warnings)})
    info = {"status": plan.status.value, "solve_s": plan.runtime_s,
            "fallback": plan.status.value == "fallback"}
    return Reply(200, dumps(plan.to_doc()), info)


@handler("estimate")
def estimate_job(payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    from hyperplace.federation.estimate import estimate
    from hyperplace.federation.problem import from_training_job
    from hyperplace.models.job import TrainingJob

    inst, _ = resolve_instance(payload, ctx)
    if payload.get("training_job") is not None:
        job = validate(TrainingJob, payload["training_job"], "trainingJob")
        where = "trainingJob"
    else:
        match = [j for j in inst.jobs if j.name == payload["job"]]
        if not match:
            names = ", ".join(j.name for j in inst.jobs) or "none"
            raise RequestProblem(422, [{"path": "job", "message":
                                        f"no job {payload['job']!r} in the queue (jobs: {names})"}])
        job, where = match[0], "job"
    try:
        report = estimate(inst, from_training_job(job))
    except InputError as exc:
        raise RequestProblem(422, [{"path": where, "message": exc.message}]) from None
    report = report.model_copy(update={"warnings": list(ctx.input_warnings)})
    return Reply(200, dumps(report.to_doc()), {})


@handler("validate-instance")
def validate_instance(payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    """A cluster to store (PUT) or a patched one (PATCH): validated, normalised, cached."""
    from hyperplace.instances.registry import instance_document
    from hyperplace.models.instance import Instance

    try:
        with old_keys_noted(ctx):
            renamed_keys(payload["instance"], payload.get("prefix") or "body")
        inst = validate(Instance, payload["instance"], payload.get("prefix", ""))
        read_run_times(inst, payload.get("prefix", ""))
    except RequestProblem as exc:
        first = payload.get("arrivals_from")
        if first is not None:  # a PATCH: name the arrival, not its place in the queue
            for prob in exc.problems:
                m = re.match(r"^spec\.jobs\[(\d+)\](.*)$", prob["path"] or "")
                if m and int(m.group(1)) >= first:
                    prob["path"] = f"arrivals[{int(m.group(1)) - first}]{m.group(2)}"
        raise
    doc = instance_document(inst)
    if payload.get("strip_usage"):  # the service keeps the history: its round state's
        doc["spec"].pop("queueUsage", None)
    if payload.get("name") is not None:
        ctx.remember(payload["name"], payload["version"], inst)
    gpus = sum(n.gpu_count for c in inst.clusters for n in c.nodes)
    free = sum(n.free_count for c in inst.clusters for n in c.nodes)
    info = {"gpus": gpus, "free_gpus": free, "pending_jobs": len(inst.jobs),
            "queue_usage": dict(inst.spec.queue_usage), "warnings": list(ctx.input_warnings)}
    return Reply(200, dumps(doc), info)


@handler("debug-crash")
def debug_crash(payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    os.kill(os.getpid(), signal.SIGKILL)  # as a native solver's segfault would end it
    raise AssertionError("unreachable")


@handler("debug-sleep")
def debug_sleep(payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    time.sleep(float(payload.get("seconds", 1.0)))
    return Reply(200, dumps({"slept": payload.get("seconds", 1.0)}), {})


# ---- the process ------------------------------------------------------------------------

def with_documents(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with its documents taken from the raw body the server passed on (already
    checked there: size, depth, JSON)."""
    from hyperplace.io import loads_json

    payload = dict(payload)
    with gc_paused():
        body = loads_json(payload.pop("raw_body").decode("utf-8"))
    for key, name in payload.pop("raw_fields").items():
        if name is None:
            payload[key] = body
        elif isinstance(body, dict):
            payload[key] = body.get(name, body.get(key))
    return payload


def run_task(kind: str, payload: dict[str, Any], deadline: float, ctx: WorkerContext) -> Reply:
    """One task, with every failure turned into an answer (the process survives them)."""
    fn = HANDLERS.get(kind)
    if fn is None:
        return Reply(404, error_body(404, [{"path": None, "message": f"no such work {kind!r}"}]),
                     {})
    ctx.input_warnings = []
    try:
        if payload.get("raw_body") is not None:
            payload = with_documents(payload)
        return fn(payload, deadline, ctx)
    except RequestProblem as exc:
        return Reply(exc.status, error_body(exc.status, exc.problems), {"rejected": True})
    except InputError as exc:
        prob = input_problem(exc)
        return Reply(422, error_body(422, prob.problems), {"rejected": True})
    except MemoryError:
        return Reply(500, error_body(500, [{"path": None, "message": "out of memory"}]),
                     {"error": "MemoryError"})
    except Exception as exc:  # a library bug: 500 for this request only
        msg = f"internal error: {type(exc).__name__}: {exc}".splitlines()[0][:500]
        return Reply(500, error_body(500, [{"path": None, "message": msg}]),
                     {"error": type(exc).__name__})


def _warm_up(ctx: WorkerContext) -> None:
    """One tiny round before taking work, so the first request does not pay for loading the
    catalog, the bundled instances and the solvers' first calls (about a second)."""
    try:
        placement({"bundled": "seed-beijing-shanghai", "solver": "auto", "policy": "performance",
                   "seed": 0, "budget_s": 1.0}, time.monotonic() + 1.0, ctx)
    except Exception:  # noqa: BLE001 - a warm-up failure only costs the first request time
        pass


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (``prctl(PR_SET_PDEATHSIG)``).
    The parent of a worker is the fork server, which exits as soon as the server's end of
    its pipe closes (the server exiting, or killed with -9)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # pragma: no cover - not Linux: the watchdog remains
        pass


def watch_server(server_pid: int, period_s: float = 0.5) -> None:
    """A daemon thread that ends this worker within ``period_s`` of the server's process
    going away (its pid gone, or this process re-parented), even mid-solve."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(period_s)
            try:
                os.kill(server_pid, 0)
                gone = os.getppid() != parent
            except ProcessLookupError:
                gone = True
            except PermissionError:  # pragma: no cover - the pid was reused by another user
                gone = True
            if gone:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="hyperplace-watchdog", daemon=True).start()


def worker_main(conn: Any, server_pid: int | None = None) -> None:
    """Serve tasks from the server until the pipe closes (at :data:`WORKER_NICE`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when workers stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        os.nice(WORKER_NICE)
    except OSError:  # pragma: no cover - not permitted: same priority as the server
        pass
    die_with_parent()
    if server_pid is not None:
        watch_server(server_pid)
    ctx = WorkerContext(conn)
    _warm_up(ctx)
    while True:
        try:
            kind, payload, deadline = conn.recv()
        except (EOFError, OSError):
            return
        reply = run_task(kind, payload, deadline, ctx)
        try:
            conn.send(("done", reply.status, reply.body, reply.info))
        except (BrokenPipeError, OSError):
            return


# ``why-job`` (GET /v1/clusters/{name}/jobs/{job}, #26) registers its handler here
from hyperplace.service import why as _why  # noqa: E402,F401
