"""``GET /v1/clusters/{name}/jobs/{job}``: ``hyperplace why`` for a stored cluster (#26).

A small, self-contained addition: one worker task (``why-job``, run in the solver pool like
every solve, so a slow answer never blocks the server) and one route. The answer is the
library's :class:`~hyperplace.solvers.workflows.why.JobAnswer`, as JSON: whether the job
would be admitted in a round now, the plan's reasons, and the checked changes that would
admit it. ``?budgetS=`` bounds all its solves (cut to ``--max-budget``); an unknown job is
404 naming the pending and running jobs.
"""

# no ``from __future__ import annotations``: FastAPI reads the route's annotations, which
# name types imported inside add_routes (service.app imports this module's worker side)
import time
from typing import Any

from hyperplace.errors import InputError
from hyperplace.service.worker import (
    Reply,
    RequestProblem,
    dumps,
    handler,
    remaining,
    resolve_instance,
)

KIND = "why-job"


@handler(KIND)
def why_task(payload: dict[str, Any], deadline: float, ctx: Any) -> Reply:
    from hyperplace.io import to_document
    from hyperplace.sim.forecast import forecast_plan
    from hyperplace.solvers.workflows.why import why_job

    inst, label = resolve_instance(payload, ctx)
    try:
        answer = why_job(inst, payload["job"], budget_s=max(0.05, remaining(deadline)),
                         solver=payload.get("solver", "auto"), forecaster=forecast_plan)
    except InputError as exc:
        if exc.path == "JOB":
            raise RequestProblem(404, [{"path": "job", "message": exc.message}]) from None
        raise
    answer = answer.model_copy(update={"instance": label})
    return Reply(200, dumps(to_document(answer)), {"state": answer.state})


def add_routes(app: Any, service: Any) -> None:
    """Mount the route on the service's FastAPI app (called from ``create_app``)."""
    from typing import Annotated, Literal

    from fastapi import Path, Query
    from fastapi.responses import Response

    from hyperplace.service.app import ERRORS, ClusterName, json_error

    JobName = Annotated[str, Path(min_length=1, max_length=253)]

    @app.get("/v1/clusters/{name}/jobs/{job}", tags=["clusters"], responses=ERRORS,
             summary="Why a job of a stored cluster is pending, and what would admit it")
    async def why_job_route(
        name: ClusterName, job: JobName,
        budget_s: Annotated[float | None, Query(alias="budgetS", gt=0, allow_inf_nan=False,
                                                description="seconds for all the solves")]
        = None,
        solver: Annotated[Literal["auto", "cpsat", "milp", "greedy"], Query()] = "auto",
    ) -> Response:
        rec = service.store.clusters.get(name)
        if rec is None:
            return json_error(404, f"no stored cluster {name!r}", path="name")
        budget = service.budget(budget_s)
        payload: dict[str, Any] = {"cluster": name, "cluster_version": [rec.version, rec.updated],
                                   "job": job, "solver": solver, "budget_s": budget}
        usage = service.usage_at(name, service.now())  # the round state's clock
        if usage is not None:
            payload["queue_usage"] = usage.snapshot()
        status, data, info = await service.execute(KIND, payload, time.monotonic() + budget)
        headers = dict(info.get("headers") or {})
        headers["X-Hyperplace-Budget-S"] = f"{budget:g}"
        return Response(data, status_code=status, media_type="application/json",
                        headers=headers)
