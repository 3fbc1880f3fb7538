"""A small Python client for ``hyperplace serve``, speaking the library's own types.

    from hyperplace.client import Client
    with Client("http://127.0.0.1:8080", token=None) as hp:
        plan = hp.placement("mixed-a100-h100", budget_s=5)     # a PlacementPlan
        assert hp.check(plan, "mixed-a100-h100") == []          # Violations, as hyperplace.check

Errors from the server raise :class:`ServiceError` with the HTTP status, the one-line message
and the field path the server named. Needs ``httpx`` (the ``serve`` extra).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from hyperplace.check import Violation
from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.split import SplitPlan, SplitProblem

InstanceRef = Instance | str  # an Instance, or a bundled instance's name


class ServiceError(Exception):
    """An error answer: ``status`` (HTTP), ``message`` (one line), ``path`` (the field)."""

    def __init__(self, status: int, message: str, path: str | None = None,
                 retry_after_s: float | None = None, body: Any = None):
        self.status = status
        self.message = message
        self.path = path
        self.retry_after_s = retry_after_s
        self.body = body
        super().__init__(f"{status}: {message}")


def _doc(model: Any) -> Any:
    return model.to_doc() if hasattr(model, "to_doc") else model


class Client:
    """One connection pool to one server; use as a context manager or call :meth:`close`."""

    def __init__(self, url: str = "http://127.0.0.1:8080", *, token: str | None = None,
                 timeout_s: float = 120.0):
        import socket

        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # TCP_NODELAY: otherwise a request's header and body writes meet delayed ACKs (~40 ms)
        transport = httpx.HTTPTransport(
            socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
        self._http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s,
                                  transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- plumbing ------------------------------------------------------------------------
    def _call(self, method: str, path: str, body: Any = None) -> Any:
        resp = self._http.request(method, path, json=body)
        if resp.status_code >= 400:
            try:
                data = resp.json()
            except ValueError:
                data = {"error": resp.text}
            retry = resp.headers.get("Retry-After")
            raise ServiceError(resp.status_code, str(data.get("error", resp.reason_phrase)),
                               data.get("path"), float(retry) if retry else None, data)
        if resp.status_code == 204 or not resp.content:
            return None
        return resp.json()

    @staticmethod
    def _source(instance: InstanceRef | None, cluster: str | None,
                jobs: Iterable[TrainingJob] | None) -> dict[str, Any]:
        body: dict[str, Any] = {}
        if isinstance(instance, str):
            body["bundled"] = instance
        elif instance is not None:
            body["instance"] = _doc(instance)
        if cluster is not None:
            body["cluster"] = cluster
        if jobs is not None:
            body["jobs"] = [_doc(j) for j in jobs]
        return body

    # ---- solving ---------------------------------------------------------------------------
    def placement(self, instance: InstanceRef | None = None, *, cluster: str | None = None,
                  jobs: Iterable[TrainingJob] | None = None, budget_s: float | None = None,
                  solver: str = "auto", policy: str = "performance", seed: int = 0,
                  apply: bool = False) -> PlacementPlan:
        """One scheduling round on an Instance, a bundled instance or a stored cluster."""
        body = self._source(instance, cluster, jobs)
        body.update(solver=solver, policy=policy, seed=seed, apply=apply)
        if budget_s is not None:
            body["budgetS"] = budget_s
        return PlacementPlan.model_validate(self._call("POST", "/v1/placement", body))

    def check(self, plan: PlacementPlan, instance: InstanceRef | None = None, *,
              cluster: str | None = None, jobs: Iterable[TrainingJob] | None = None
              ) -> list[Violation]:
        body = self._source(instance, cluster, jobs)
        body["plan"] = _doc(plan)
        data = self._call("POST", "/v1/check", body)
        return [Violation.model_validate(v) for v in data["violations"]]

    def layer_split(self, problem: SplitProblem | dict[str, Any], *,
                    model_name: str | None = None, profile: str | None = None,
                    solver: str = "auto", budget_s: float | None = None) -> SplitPlan:
        """The layer split; ``problem`` may leave out ``model`` when ``model_name`` (a preset)
        or ``profile`` names it."""
        body: dict[str, Any] = {"problem": problem.model_dump(mode="json", by_alias=True)
                                if isinstance(problem, SplitProblem) else problem,
                                "solver": solver}
        if model_name:
            body["modelName"] = model_name
        if profile:
            body["profile"] = profile
        if budget_s is not None:
            body["budgetS"] = budget_s
        return SplitPlan.model_validate(self._call("POST", "/v1/layer-split", body))

    # ---- runs ------------------------------------------------------------------------------
    def submit_run(self, instance: InstanceRef | None = None, *, cluster: str | None = None,
                   jobs: Iterable[TrainingJob] | None = None, budget_s: float | None = None,
                   solver: str = "auto", policy: str = "performance") -> str:
        """Start a placement in the background; returns the run id."""
        request = self._source(instance, cluster, jobs)
        request.update(solver=solver, policy=policy)
        if budget_s is not None:
            request["budgetS"] = budget_s
        return self._call("POST", "/v1/runs", {"kind": "placement", "request": request})["id"]

    def run(self, run_id: str) -> dict[str, Any]:
        return self._call("GET", f"/v1/runs/{run_id}")

    def cancel_run(self, run_id: str) -> dict[str, Any]:
        return self._call("DELETE", f"/v1/runs/{run_id}")

    def wait_run(self, run_id: str, timeout_s: float = 300.0, poll_s: float = 0.1
                 ) -> PlacementPlan:
        """Poll until the run ends; its plan, or :class:`ServiceError` if it failed."""
        end = time.monotonic() + timeout_s
        while True:
            status = self.run(run_id)
            if status["state"] == "succeeded":
                return PlacementPlan.model_validate(status["result"])
            if status["state"] in ("failed", "cancelled"):
                err = status.get("error") or {}
                raise ServiceError(int(err.get("status", 409)),
                                   str(err.get("error", f"run {status['state']}")),
                                   err.get("path"), body=status)
            if time.monotonic() > end:
                raise TimeoutError(f"run {run_id} still {status['state']} after {timeout_s} s")
            time.sleep(poll_s)

    # ---- stored clusters ---------------------------------------------------------------------
    def put_cluster(self, name: str, instance: Instance) -> dict[str, Any]:
        return self._call("PUT", f"/v1/clusters/{name}", _doc(instance))

    def patch_cluster(self, name: str, *, arrivals: Iterable[TrainingJob] = (),
                      completions: Iterable[str] = (), failures: Iterable[dict] = (),
                      repairs: Iterable[dict] = (), allocations: Iterable[dict] = ()
                      ) -> dict[str, Any]:
        """Deltas: ``failures``/``repairs`` are ``{"node": N, "gpus": [i, ...]}`` (all GPUs
        of the node when ``gpus`` is left out); ``allocations`` ``{"job", "gpus": [{node,
        gpu}]}``."""
        body = {"arrivals": [_doc(j) for j in arrivals], "completions": list(completions),
                "failures": list(failures), "repairs": list(repairs),
                "allocations": list(allocations)}
        return self._call("PATCH", f"/v1/clusters/{name}", body)

    def get_cluster(self, name: str) -> tuple[Instance, int]:
        data = self._call("GET", f"/v1/clusters/{name}")
        return Instance.model_validate(data["instance"]), int(data["version"])

    def delete_cluster(self, name: str) -> None:
        self._call("DELETE", f"/v1/clusters/{name}")

    # ---- operations --------------------------------------------------------------------------
    def healthy(self) -> bool:
        return self._http.get("/healthz").status_code == 200

    def ready(self) -> bool:
        return self._http.get("/readyz").status_code == 200
