"""The service under faults (#27), each defect with its regression test against a real
``hyperplace serve`` in a subprocess on loopback, with bounded loops: poisoned hand-offs,
the hard deadline, orphans after kill -9, restarts with deleted inputs, SIGTERM drain, two
servers on one database, cancel racing completion, isolation of stored clusters' plans, and
the medium and low items (strict types, limits, OpenAPI, headers, names)."""

from __future__ import annotations

import concurrent.futures
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from hyperplace.check import check
from hyperplace.instances.registry import instance_document, load_instance
from hyperplace.io import MAX_DEPTH
from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.service.launch import LocalServer

SMALL = "mixed-a100-h100"


def _nested(levels: int) -> object:
    doc: object = 1
    for _ in range(levels):
        doc = [doc]
    return doc


def _alive(pid: int) -> bool:
    """A process that exists and is not a zombie (a container's init may not reap)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _wait_run(client: httpx.Client, run_id: str, states: set[str], timeout: float = 60) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        body = client.get(f"/v1/runs/{run_id}").json()
        if body["state"] in states:
            return body
        time.sleep(0.05)
    raise AssertionError(f"run {run_id} not in {states}: {body}")


def _pod(job: str, namespace: str | None = None) -> dict:
    meta: dict = {"name": f"{job}-0", "labels": {"hyperplace.io/job": job}}
    if namespace:
        meta["namespace"] = namespace
    return {"metadata": meta}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    db = tmp_path_factory.mktemp("faults") / "service.sqlite"
    with LocalServer(db=db, workers=2, test_hooks=True) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server: LocalServer):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def _serving(http: httpx.Client) -> None:
    ready = http.get("/readyz").json()
    assert ready["status"] == "ready" and ready["alive"] == ready["workers"], ready
    r = http.post("/v1/placement", json={"bundled": "seed-beijing-shanghai", "budgetS": 10})
    assert r.status_code == 200, r.text


# ---- critical: one small request must not kill a worker slot ------------------------------


def _wait_busy(client: httpx.Client, busy: int, timeout_s: float = 30.0) -> None:
    """Until ``busy`` workers are taken (a request has reached them), not a fixed sleep."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if client.get("/v1/debug/workers").json()["busy"] >= busy:
            return
        time.sleep(0.05)
    raise AssertionError(f"{busy} worker(s) never became busy")

def test_deep_nesting_is_422_everywhere_and_no_slot_dies(http: httpx.Client) -> None:
    deep = _nested(500)  # about 1 KB of JSON
    inst = instance_document(load_instance(SMALL))
    bodies = [
        ("POST", "/v1/placement", {"instance": deep}),
        ("POST", "/v1/placement", {"bundled": SMALL, "jobs": [deep]}),
        ("POST", "/v1/placement", {"bundled": SMALL, "queues": [{"spec": deep}]}),
        ("POST", "/v1/check", {"bundled": SMALL, "plan": deep}),
        ("POST", "/v1/predict", {"gpu": "H100-SXM", "model": deep}),
        ("PUT", "/v1/clusters/deep", {**inst, "spec": {**inst["spec"], "x": deep}}),
        ("POST", "/v1/runs", {"request": {"bundled": SMALL, "jobs": [deep]}}),
        ("POST", "/v1/extender/filter", {"Pod": {"metadata": {"labels": deep}}}),
        ("POST", "/v1/volcano/predicate", {"task": deep, "node": {"Name": "n"}}),
    ]
    for _ in range(3):  # more than --workers of each
        for method, path, body in bodies:
            r = http.request(method, path, json=body)
            assert r.status_code == 422, (path, r.text)
            err = r.json()
            assert f"at most {MAX_DEPTH}" in err["error"] and err["problems"], err
    http.put("/v1/clusters/deep", json=inst).raise_for_status()
    r = http.patch("/v1/clusters/deep", json={"arrivals": [deep]})
    assert r.status_code == 422, r.text
    _serving(http)


def test_a_failed_hand_off_fails_that_task_not_the_slot() -> None:
    """The pool itself: a payload that cannot be pickled (the hand-off fails) fails its own
    task; the same slot then serves the next task."""
    import asyncio

    from hyperplace.service.pool import HandOffFailed, WorkerPool

    async def main() -> None:
        pool = WorkerPool(1, 4)
        await pool.start()
        try:
            pids = pool.worker_pids()
            for _ in range(3):
                with pytest.raises(HandOffFailed):
                    await pool.run("debug-sleep", {"seconds": lambda: 0},
                                   time.monotonic() + 10)
            reply = await pool.run("debug-sleep", {"seconds": 0}, time.monotonic() + 10)
            assert reply.status == 200 and pool.worker_pids() == pids and pool.replaced == 0
        finally:
            await pool.close(0)

    asyncio.run(main())


def test_cancel_after_the_answer_is_in_the_pipe_never_fails_the_next_task() -> None:
    """The cause of runs that ended "failed" (and of an unrelated 500 "exit code -9") in the
    cancel race: the worker had written its answer, DELETE killed it before the runner read
    the answer, and the runner then sent the next task to the dead process. Made
    deterministic by blocking the loop while the answer is written."""
    import asyncio

    from hyperplace.service.pool import Cancelled, WorkerPool

    async def main() -> None:
        pool = WorkerPool(1, 4)
        await pool.start()
        try:
            # the worker answers 0.5 s after it gets the task: never while the loop still
            # runs below (a 0.05 s sleep was read by the runner within the 0.2 s hand-off
            # wait whenever the worker was quick, and cancel() then found the task finished)
            first = pool.submit("debug-sleep", {"seconds": 0.5}, time.monotonic() + 30)
            end = time.monotonic() + 30
            while first.state != "running" and time.monotonic() < end:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.2)  # the hand-off (a thread) gets going
            (slot,) = [s for s in pool._slots if s.task is first]
            # the loop blocked until the worker's answer is in the pipe, however busy the
            # machine: the runner cannot read it before cancel() below
            assert slot.conn is not None and slot.conn.poll(30)
            assert pool.cancel(first.id)  # the task is still the pool's: DELETE says cancelled
            second = pool.submit("debug-sleep", {"seconds": 0}, time.monotonic() + 30)
            reply = await asyncio.wait_for(second.future, 30)  # was WorkerCrashed (-9)
            assert reply.status == 200, reply
            with pytest.raises(Cancelled):  # the answer that came anyway is not a success
                await first.future
            assert pool.replaced == 1 and pool.alive == 1
        finally:
            await pool.close(0)

    asyncio.run(main())


# ---- the hard deadline, orphans, readiness ------------------------------------------------------

def test_hard_deadline_kills_the_solver_503_and_no_extra_solvers(http: httpx.Client) -> None:
    from hyperplace.service.config import OVERHEAD_S

    before = http.get("/v1/debug/workers").json()
    start = time.monotonic()
    r = http.post("/v1/debug/sleep", params={"seconds": 20, "budget": 1})
    took = time.monotonic() - start
    assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1, r.text
    assert "budget" in r.json()["error"]
    assert took < 1 + OVERHEAD_S + 5  # answered at the deadline, not after the 20 s sleep
    end = time.monotonic() + 15  # answered first, then the worker is replaced
    while time.monotonic() < end:
        after = http.get("/v1/debug/workers").json()
        if after["replaced"] > before["replaced"] and None not in after["pids"]:
            break
        time.sleep(0.05)
    gone = set(before["pids"]) - set(after["pids"])
    assert len(gone) == 1 and not any(_alive(p) for p in gone), (before, after)
    assert len(after["pids"]) == 2 and all(_alive(p) for p in after["pids"])
    _serving(http)


def _raw_post(url: str, path: str, body: bytes, pieces: int = 1, pause_s: float = 0.0,
              declared: int | None = None) -> tuple[socket.socket, float]:
    """Open a connection and send a POST's headers and its body in ``pieces`` with
    ``pause_s`` between them (a slow client); the socket stays open (the caller reads)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sent_at = time.monotonic()
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {declared or len(body)}\r\n\r\n".encode())
    step = -(-len(body) // pieces)
    for i in range(0, len(body), step):
        if i:
            time.sleep(pause_s)
        sock.sendall(body[i:i + step])
    return sock, sent_at


def _status_and_body(sock: socket.socket) -> tuple[int, dict]:
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split()[1]), json.loads(rest[:length])


def test_a_budget_counts_from_the_request_s_arrival(http: httpx.Client,
                                                    server: LocalServer) -> None:
    """Reading the request comes out of its budget: a 1 s budget whose body takes 2.1 s to
    arrive (past the budget plus the overhead) is answered 503 with Retry-After as soon as
    it is read, never solved late."""
    body = json.dumps({"bundled": "seed-beijing-shanghai", "budgetS": 1}).encode()
    sock, sent_at = _raw_post(server.url, "/v1/placement", body, pieces=4, pause_s=0.7)
    with sock:
        status, answer = _status_and_body(sock)
    assert status == 503 and "budget ran out" in answer["error"], answer
    assert "reading" in answer["error"], answer
    _serving(http)


def test_a_queued_request_is_answered_at_its_deadline() -> None:
    """A request waiting for a worker gets its 503 (with Retry-After) at its deadline plus
    the overhead, not when a worker frees up."""
    from hyperplace.service.config import OVERHEAD_S

    srv = LocalServer("--shutdown-grace", "0", workers=1, test_hooks=True).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as client, \
                concurrent.futures.ThreadPoolExecutor(2) as ex:
            busy = ex.submit(client.post, "/v1/debug/sleep", params={"seconds": 8})
            _wait_busy(client, 1)
            start = time.monotonic()
            r = client.post("/v1/debug/sleep", params={"seconds": 0.1, "budget": 1})
            took = time.monotonic() - start
            assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1, r.text
            assert "waited for a worker" in r.json()["error"], r.text
            assert took < 1 + OVERHEAD_S + 3 and not busy.done(), took  # well before the 8 s
            srv.stop()  # a drain with no grace: the running request answered 503 at once
            assert busy.result().status_code == 503
    finally:
        srv.stop()


def test_large_bodies_are_taken_in_a_few_at_a_time() -> None:
    """At most INTAKE_SLOTS large bodies are read and parsed at once; one that cannot be
    taken in within INTAKE_WAIT_S is refused (429, Retry-After), unread, so the refusal is
    in time for any budget."""
    from hyperplace.service.app import INTAKE_SLOTS
    from hyperplace.service.config import INTAKE_WAIT_S, OVERHEAD_S

    with LocalServer(workers=1) as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as client:
        big = 2_000_000
        slow = [_raw_post(srv.url, "/v1/placement", b"{", declared=big)[0]
                for _ in range(INTAKE_SLOTS)]
        try:
            time.sleep(0.5)
            start = time.monotonic()
            r = client.post("/v1/placement", json={"bundled": SMALL, "jobs": [],
                                                   "queues": [{"x": "y" * 100_000}]})
            took = time.monotonic() - start
            assert r.status_code == 429 and "taking in" in r.json()["error"], r.text
            assert took < INTAKE_WAIT_S + OVERHEAD_S + 2, took
            assert int(r.headers["Retry-After"]) >= 1
            assert client.get("/healthz").status_code == 200  # small requests go on
        finally:
            for sock in slow:
                sock.close()
        end = time.monotonic() + 10
        while time.monotonic() < end:  # the gate is free again once the clients went away
            r = client.post("/v1/check", json={"bundled": SMALL, "plan": {"x": "y" * 100_000}})
            if r.status_code != 429:
                break
            time.sleep(0.1)
        assert r.status_code == 422, r.text  # taken in: the worker refused the plan


def test_workers_die_with_the_server_on_kill_9(tmp_path) -> None:
    srv = LocalServer(db=tmp_path / "s.sqlite", workers=2, test_hooks=True).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            pids = client.get("/v1/debug/workers").json()["pids"]
            with concurrent.futures.ThreadPoolExecutor(2) as ex:
                busy = [ex.submit(client.post, "/v1/debug/sleep", params={"seconds": 25})
                        for _ in range(2)]
                _wait_busy(client, 2)
                srv.kill()
                for f in busy:
                    with pytest.raises(httpx.HTTPError):
                        f.result()
        end = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.1)
        assert not any(_alive(p) for p in pids), "workers outlived the server"
    finally:
        srv.stop()


# ---- restarts, durability, one server per database ----------------------------------------

def test_restart_with_deleted_cluster_fails_the_run_and_starts(tmp_path) -> None:
    db = tmp_path / "state.sqlite"
    inst = instance_document(load_instance(SMALL))
    srv = LocalServer(db=db, workers=1, test_hooks=True).start()
    try:
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            client.put("/v1/clusters/soon-gone", json=inst).raise_for_status()
            client.put("/v1/clusters/kept", json=inst).raise_for_status()
            # an acknowledged PATCH survives kill -9 (committed before the answer)
            r = client.patch("/v1/clusters/kept", json={"failures": [{"node": "h100-00"}]})
            assert r.status_code == 200, r.text
            with concurrent.futures.ThreadPoolExecutor(1) as ex:
                ex.submit(client.post, "/v1/debug/sleep", params={"seconds": 20})
                _wait_busy(client, 1)  # the only worker is busy: runs stay queued
                gone = client.post("/v1/runs", json={"request": {"cluster": "soon-gone",
                                                                 "budgetS": 10}})
                kept = client.post("/v1/runs", json={"request": {"cluster": "kept",
                                                                 "budgetS": 10}})
                assert gone.status_code == 202 == kept.status_code, (gone.text, kept.text)
                assert client.delete("/v1/clusters/soon-gone").status_code == 204
                srv.kill()
    finally:
        srv.stop()  # a failing assertion above must not leave the server running
    with LocalServer(db=db, workers=1) as srv2, httpx.Client(base_url=srv2.url) as client:
        failed = _wait_run(client, gone.json()["id"], {"failed"}, 30)
        assert "soon-gone" in failed["error"]["error"] and "deleted" in failed["error"]["error"]
        done = _wait_run(client, kept.json()["id"], {"succeeded"}, 60)
        assert done["result"]["apiVersion"]
        node = next(n for c in client.get("/v1/clusters/kept").json()["instance"]["spec"][
            "clusters"] for n in c["nodes"] if n["name"] == "h100-00")
        assert len(node["faulty"]) == 8


def test_concurrent_patches_are_never_lost(http: httpx.Client) -> None:
    inst = instance_document(load_instance(SMALL))
    base = http.put("/v1/clusters/racy", json=inst).json()
    job = inst["spec"]["jobs"][0]

    def arrive(i: int) -> int:
        arrival = json.loads(json.dumps(job))
        arrival["metadata"]["name"] = f"arrival-{i}"
        return http.patch("/v1/clusters/racy", json={"arrivals": [arrival]}).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        assert list(ex.map(arrive, range(8))) == [200] * 8
    after = http.get("/v1/clusters/racy").json()
    assert after["version"] == base["version"] + 8
    assert after["pendingJobs"] == base["pendingJobs"] + 8
    names = {j["metadata"]["name"] for j in after["instance"]["spec"]["jobs"]}
    assert {f"arrival-{i}" for i in range(8)} <= names


def test_two_servers_on_one_database(tmp_path) -> None:
    db = tmp_path / "one.sqlite"
    first = LocalServer(db=db, workers=1).start()
    try:
        out = subprocess.run([sys.executable, "-m", "hyperplace.cli", "serve", "--port", "0",
                              "--workers", "1", "--db", str(db)],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert "in use by another hyperplace serve" in out.stderr
        assert f"pid {first.proc.pid}" in out.stderr and "listening" not in out.stderr
        first.kill()  # the kernel drops the lock with the process
        with LocalServer(db=db, workers=1) as again, httpx.Client(base_url=again.url) as c:
            assert c.get("/readyz").status_code == 200
    finally:
        first.stop()


def test_durability_settings(tmp_path) -> None:
    import sqlite3

    from hyperplace.service.store import Store

    store = Store(str(tmp_path / "d.sqlite"))
    try:
        assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    finally:
        store.close()
    with sqlite3.connect(tmp_path / "d.sqlite") as db:
        assert db.execute("SELECT count(*) FROM runs").fetchone()[0] == 0


# ---- SIGTERM drains ---------------------------------------------------------------------------

def test_sigterm_drains_within_the_grace_period(tmp_path) -> None:
    srv = LocalServer("--shutdown-grace", "2", db=tmp_path / "t.sqlite", workers=1,
                      test_hooks=True).start()
    try:
        _drain_checks(srv)
    finally:
        srv.stop()  # a failing assertion must not leave the server running


def _drain_checks(srv: LocalServer) -> None:
    with httpx.Client(base_url=srv.url, timeout=30) as client, \
            concurrent.futures.ThreadPoolExecutor(3) as ex:
        running = ex.submit(client.post, "/v1/debug/sleep", params={"seconds": 20})
        _wait_busy(client, 1)
        queued = ex.submit(client.post, "/v1/debug/sleep", params={"seconds": 0.1})
        time.sleep(0.3)
        start = time.monotonic()
        srv.proc.send_signal(15)
        q = queued.result(timeout=10)
        assert q.status_code == 503 and int(q.headers["Retry-After"]) >= 1, q.text
        # answered at once, before the 2 s grace the running request gets (not after it)
        assert not running.done() or running.result().status_code == 503
        r = running.result(timeout=15)
        assert r.status_code == 503 and int(r.headers["Retry-After"]) >= 1, r.text
        assert "shutting down" in r.json()["error"]
        try:  # a new request: refused (connection closed) or 503, never "ready"
            ready = httpx.get(srv.url + "/readyz", timeout=2)
            assert ready.status_code == 503
        except httpx.HTTPError:
            pass
        srv.proc.wait(timeout=30)  # the process exits after the grace (not after the 20 s sleep)
        assert time.monotonic() - start < 20


# ---- cancel is atomic with completion ---------------------------------------------------------

def test_cancel_never_contradicts_the_final_state(http: httpx.Client) -> None:
    outcomes = []
    for i in range(12):
        run = http.post("/v1/runs", json={"request": {"bundled": "seed-beijing-shanghai",
                                                      "budgetS": 10, "solver": "greedy"}})
        assert run.status_code == 202, run.text
        time.sleep(0.02 * i)
        r = http.delete(f"/v1/runs/{run.json()['id']}")
        final = _wait_run(http, run.json()["id"], {"succeeded", "failed", "cancelled"})
        time.sleep(0.1)
        final = http.get(f"/v1/runs/{run.json()['id']}").json()
        if r.status_code == 200:
            assert r.json()["state"] == "cancelled" and final["state"] == "cancelled", final
        else:
            # too late to cancel: the run had ended, and ends as the 409 said it had
            assert r.status_code == 409 and final["state"] in ("succeeded", "failed"), \
                (r.text, final)
            assert f"already {final['state']}" in r.json()["error"], (r.text, final)
            if final["state"] == "failed":  # never because of the cancel
                assert "cancel" not in (final.get("error") or ""), final
        outcomes.append(r.status_code)
    assert set(outcomes) <= {200, 409}
    _serving(http)


def test_forecasts_only_in_what_the_budget_left(http: httpx.Client) -> None:
    """Forecasts run after the solve, so only when they fit in what the budget has left
    (sim.forecast.FORECAST_S_PER_JOB a job); otherwise the plan says none were made and
    why. Background runs (their hard deadline is far) so a loaded machine changes nothing:
    1,500 jobs need 0.45 s of forecasts, more than a 0.4 s budget has, far less than 10 s."""
    from hyperplace.sim.forecast import FORECAST_S_PER_JOB

    inst = load_instance(SMALL)
    job = min(inst.jobs, key=lambda j: j.total_gpus).to_doc()
    jobs = [{**job, "metadata": {**job["metadata"], "name": f"f-{i}"}} for i in range(1500)]
    assert FORECAST_S_PER_JOB * len(jobs) > 0.4
    plans = {}
    for budget in (0.4, 10):
        run = http.post("/v1/runs", json={"request": {"bundled": SMALL, "jobs": jobs,
                                                      "budgetS": budget, "solver": "greedy"}})
        assert run.status_code == 202, run.text
        done = _wait_run(http, run.json()["id"], {"succeeded", "failed"}, 120)
        assert done["state"] == "succeeded", done
        plans[budget] = PlacementPlan.model_validate(done["result"])
        assert not check(plans[budget], inst.with_jobs(
            [type(inst.jobs[0]).model_validate(j) for j in jobs]))
    short, long = plans[0.4], plans[10]
    assert short.forecasts == [] and "no forecasts" in short.message, short.message
    assert "1,500 jobs" in short.message
    assert {f.job for f in long.forecasts} == {j["metadata"]["name"] for j in jobs}
    assert "no forecasts" not in (long.message or "")


def test_forecasts_wait_for_the_worker_s_measured_rate() -> None:
    """A worker gates a plan's forecasts on its own last measured rate, not only on the
    library's idle-machine figure (forecasts of 2,000 jobs on a busy machine took twice that
    and ran past the hard deadline, and the worker was stopped)."""
    from hyperplace.service.worker import WorkerContext, placement

    inst = load_instance(SMALL)
    request = {"bundled": SMALL, "solver": "greedy", "policy": "performance", "seed": 0,
               "budget_s": 5.0}
    ctx = WorkerContext(None)
    first = PlacementPlan.model_validate_json(
        placement(request, time.monotonic() + 5.0, ctx).body)
    assert {f.job for f in first.forecasts} == {j.name for j in inst.jobs}
    ctx.forecast_s_per_job = 10.0 / len(inst.jobs)  # as if they had taken 10 s
    second = PlacementPlan.model_validate_json(
        placement(request, time.monotonic() + 5.0, ctx).body)
    assert second.forecasts == [] and "no forecasts" in second.message, second.message
    assert not check(first, inst) and not check(second, inst)


# ---- isolation ----------------------------------------------------------------------------

def test_plans_are_per_stored_cluster_and_namespace(http: httpx.Client) -> None:
    inst = load_instance(SMALL)
    doc = instance_document(inst)
    nodes = [n.name for c in inst.clusters for n in c.nodes]
    job = PlacementPlan.model_validate(http.post("/v1/placement", json={
        "bundled": SMALL, "budgetS": 10}).json()).jobs[0].job
    flt = {"Pod": _pod(job), "NodeNames": nodes}
    assert http.post("/v1/extender/filter", json=flt).json()["FailedNodes"] == {}
    # a dry run on a bundled instance (no stored cluster) changes nothing here
    assert http.post("/v1/placement", json={"bundled": SMALL, "budgetS": 10}).status_code == 200
    assert http.post("/v1/extender/filter", json=flt).json()["FailedNodes"] == {}
    # cluster A (renamed nodes) is planned: its plan speaks for A's nodes only
    a = json.loads(json.dumps(doc).replace('"h100-', '"a-h100-').replace('"a100-', '"a-a100-'))
    http.put("/v1/clusters/iso-a", json=a).raise_for_status()
    plan = PlacementPlan.model_validate(
        http.post("/v1/placement", json={"cluster": "iso-a", "budgetS": 10}).json())
    assert check(plan, Instance.model_validate(a)) == []
    placed = next(p for p in plan.jobs if p.job == job)
    a_nodes = [n for n in (x.replace("h100-", "a-h100-").replace("a100-", "a-a100-")
                           if not x.startswith("a-") else x for x in nodes)]
    on_a = http.post("/v1/extender/filter", json={"Pod": _pod(job), "NodeNames": a_nodes}).json()
    assert sorted(on_a["NodeNames"]) == sorted(placed.node_names)
    # the same job name on another cluster's nodes, or in another namespace: no opinion
    assert http.post("/v1/extender/filter", json=flt).json()["FailedNodes"] == {}
    other_ns = {"Pod": _pod(job, "team-b"), "NodeNames": a_nodes}
    assert http.post("/v1/extender/filter", json=other_ns).json()["FailedNodes"] == {}
    scores = http.post("/v1/volcano/prioritize", json={
        "task": {"Name": f"{job}-0", "Namespace": "default", "Job": f"default/{job}"},
        "nodes": [{"Name": n} for n in nodes]}).json()["nodeScore"]
    assert set(scores.values()) == {0}
    # ?cluster= names the stored cluster to answer from
    r = http.post("/v1/extender/filter", params={"cluster": "no-such"}, json=flt)
    assert r.status_code == 404
    assert http.delete("/v1/clusters/iso-a").status_code == 204
    gone = http.post("/v1/extender/filter", json={"Pod": _pod(job), "NodeNames": a_nodes})
    assert gone.json()["FailedNodes"] == {}  # deleting the cluster drops its plans


@pytest.mark.parametrize("path, body", [
    ("/v1/volcano/predicate", {"task": {"name": "p", "pod": {}}, "node": {"name": "n"}}),
    ("/v1/volcano/predicate", {"Task": {"Name": "p"}, "Node": {"Name": "n"}}),
    ("/v1/volcano/prioritize", {"task": {"name": "p"}, "nodes": [{"name": "n"}]}),
    ("/v1/volcano/predicate", {"task": {"Pod": {"metadata": [1, 2]}}, "node": {"Name": "n"}}),
    ("/v1/volcano/prioritize", {"task": {"Job": 5}, "nodes": [{"Name": 3}]}),
    ("/v1/extender/filter", {"Pod": {"metadata": [1, 2]}, "NodeNames": ["n"]}),
    ("/v1/extender/filter", {"pod": {"metadata": {}}, "nodenames": ["n"]}),
    ("/v1/extender/filter", {"Pod": {"metadata": {"labels": {"a": 1}}}, "NodeNames": ["n"]}),
    ("/v1/extender/prioritize", {"Pod": {}, "Nodes": {"items": [{"metadata": "x"}]}}),
    ("/v1/extender/prioritize", {"Pod": {}, "NodeNames": "n"}),
])
def test_malformed_extender_requests_are_422(http: httpx.Client, path: str, body: dict) -> None:
    r = http.post(path, json=body)
    assert r.status_code == 422 and r.headers["content-type"] == "application/json", r.text
    assert r.json()["problems"]


# ---- medium and low -------------------------------------------------------------------------

@pytest.mark.parametrize("body, path", [
    ({"bundled": SMALL, "budgetS": "5"}, "budgetS"),
    ({"bundled": SMALL, "apply": "yes"}, "apply"),
    ({"bundled": SMALL, "seed": 1.0}, "seed"),
    ({"bundled": SMALL, "hotSpares": "1"}, "hotSpares"),
])
def test_no_coercion_in_envelopes(http: httpx.Client, body: dict, path: str) -> None:
    r = http.post("/v1/placement", json=body)
    assert r.status_code == 422 and r.json()["path"] == path, r.text


def _coerced(doc: dict, path: tuple, value: object) -> dict:
    out = json.loads(json.dumps(doc))
    at = out
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return out


def test_no_coercion_inside_documents(http: httpx.Client) -> None:
    """The documents a request carries (Instance, TrainingJob, PlacementPlan, ...) are read
    as strictly as its envelope: a number or a bool sent as a string is a 422 naming the
    field, through every way a document reaches the service."""
    inst = instance_document(load_instance(SMALL))
    job = inst["spec"]["jobs"][0]
    group = ("spec", "resourceGroups", 0)
    cases = [
        ("POST", "/v1/placement", {"bundled": SMALL, "jobs": [
            _coerced(job, (*group, "gpusPerGroup"), "8")]},
         "jobs[0].spec.resourceGroups[0].gpusPerGroup"),
        ("POST", "/v1/placement", {"bundled": SMALL, "jobs": [
            _coerced(job, (*group, "gpuRequirements", "minMemoryGB"), "80")]},
         "jobs[0].spec.resourceGroups[0].gpuRequirements.minMemoryGB"),
        ("POST", "/v1/placement", {"instance": _coerced(
            inst, ("spec", "clusters", 0, "nodes", 0, "gpuCount"), "8")},
         "instance.spec.clusters[0].nodes[0].gpuCount"),
        ("POST", "/v1/placement", {"bundled": SMALL, "jobs": [
            _coerced(job, ("spec", "replicaCount"), 2.0)]}, "jobs[0].spec.replicaCount"),
        ("PUT", "/v1/clusters/strict", _coerced(
            inst, ("spec", "clusters", 0, "nodes", 0, "gpuCount"), "8"),
         "spec.clusters[0].nodes[0].gpuCount"),
    ]
    for method, path, body, where in cases:
        r = http.request(method, path, json=body)
        assert r.status_code == 422 and r.json()["path"] == where, (where, r.text)
    http.put("/v1/clusters/strict", json=inst).raise_for_status()
    arrival = _coerced(_coerced(job, ("spec", "replicaCount"), "2"), ("metadata", "name"), "new")
    r = http.patch("/v1/clusters/strict", json={"arrivals": [arrival]})
    assert r.status_code == 422 and r.json()["path"] == "arrivals[0].spec.replicaCount", r.text
    # an integer where a number is asked is not a coercion
    ok = _coerced(job, (*group, "gpuRequirements", "minMemoryGB"), 80)
    assert http.post("/v1/placement", json={"bundled": SMALL, "jobs": [ok],
                                            "budgetS": 10}).status_code == 200


def test_patch_arrival_with_null_metadata_and_names(http: httpx.Client) -> None:
    inst = instance_document(load_instance(SMALL))
    http.put("/v1/clusters/names", json=inst).raise_for_status()
    job = json.loads(json.dumps(inst["spec"]["jobs"][0]))
    r = http.patch("/v1/clusters/names", json={"arrivals": [{**job, "metadata": None}]})
    assert r.status_code == 422 and r.json()["path"].startswith("arrivals[0]"), r.text
    bidi = {**job, "metadata": {**job["metadata"], "name": "evil\u202egnp.exe"}}
    r = http.patch("/v1/clusters/names", json={"arrivals": [bidi]})
    assert r.status_code == 422 and r.json()["path"] == "arrivals[0].metadata.name", r.text
    r = http.patch("/v1/clusters/names", json={"completions": ["x\u2067y"]})
    assert r.status_code == 422 and r.json()["path"] == "completions[0]", r.text


def test_apply_with_a_job_named_as_people_write_them(http: httpx.Client) -> None:
    inst = instance_document(load_instance(SMALL))
    job = next(j for j in inst["spec"]["jobs"] if j["metadata"]["name"] == "llama3-8b-lora")
    job["metadata"]["name"] = "team a/job 1"
    inst["spec"]["jobs"] = [job]
    http.put("/v1/clusters/spaced", json=inst).raise_for_status()
    r = http.post("/v1/placement", json={"cluster": "spaced", "budgetS": 10, "apply": True})
    assert r.status_code == 200 and r.headers["X-Hyperplace-Applied"] == "yes", r.text
    assert r.json()["jobs"][0]["job"] == "team a/job 1"
    assert http.get("/v1/clusters/spaced").json()["pendingJobs"] == 0
    r = http.patch("/v1/clusters/spaced", json={"completions": ["team a/job 1"]})
    assert r.status_code == 200, r.text
    http.put("/v1/clusters/spaced", json=inst).raise_for_status()
    run = http.post("/v1/runs", json={"request": {"cluster": "spaced", "budgetS": 10,
                                                  "apply": True}})
    assert run.status_code == 202, run.text
    assert _wait_run(http, run.json()["id"], {"succeeded", "failed"})["state"] == "succeeded"
    assert http.get("/v1/clusters/spaced").json()["pendingJobs"] == 0


def test_runs_validate_before_202_and_nesting(http: httpx.Client) -> None:
    bad_job = {"apiVersion": "hyperplace.io/v1", "kind": "FoundationModelTrainingJob",
               "metadata": {"name": "j"}, "spec": {"gpus": "many"}}
    r = http.post("/v1/runs", json={"request": {"bundled": SMALL, "jobs": [bad_job]}})
    assert r.status_code == 422 and r.json()["path"].startswith("jobs[0]"), r.text
    r = http.post("/v1/runs", json={"request": {"bundled": SMALL, "jobs": [_nested(400)]}})
    assert r.status_code == 422, r.text


def test_too_many_jobs_refused_early(http: httpx.Client) -> None:
    from hyperplace.models.limits import MAX_JOBS

    inst = instance_document(load_instance(SMALL))
    job = {"metadata": {"name": "j"}}  # counted before anything validates them
    inst["spec"]["jobs"] = [job] * (MAX_JOBS + 1)
    for method, path, body in (("POST", "/v1/placement", {"instance": inst}),
                               ("PUT", "/v1/clusters/huge", inst),
                               ("POST", "/v1/placement", {"bundled": SMALL,
                                                          "jobs": [job] * (MAX_JOBS + 1)})):
        r = http.request(method, path, json=body)
        assert r.status_code == 422 and str(MAX_JOBS) in r.text.replace(",", ""), r.text[:300]


def test_body_limit_from_the_header_before_reading(server: LocalServer) -> None:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"POST /v1/placement HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 999999999\r\n\r\n{")
        head = sock.recv(4096).decode()  # answered with no more than one byte of the body
    assert head.startswith("HTTP/1.1 413"), head


def test_headers_openapi_and_405(http: httpx.Client) -> None:
    r = http.get("/readyz", headers=[("Authorization", "Bearer a"), ("Authorization", "Bearer b")])
    assert r.status_code == 400 and "Authorization" in r.json()["error"]
    spec = http.get("/openapi.json").json()
    for path, op in (("/v1/placement", "post"), ("/v1/clusters/{name}", "patch"),
                     ("/v1/runs", "post"), ("/v1/extender/filter", "post")):
        codes = set(spec["paths"][path][op]["responses"])
        assert {"400", "404", "409", "422", "429", "503"} <= codes, (path, codes)
    r = http.post("/v1/clusters/x")
    assert r.status_code == 405
    assert set(r.headers["Allow"].replace(" ", "").split(",")) == {"GET", "PUT", "PATCH",
                                                                     "DELETE"}


def test_queue_full_429_text_and_run_wait_not_charged(tmp_path) -> None:
    with LocalServer("--queue-limit", "1", workers=1, test_hooks=True) as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as client, \
            concurrent.futures.ThreadPoolExecutor(3) as ex:
        first = ex.submit(client.post, "/v1/debug/sleep", params={"seconds": 3})
        _wait_busy(client, 1)
        # a run with a 2 s budget waits ~3 s for the only worker, then runs with all of it
        # (were the wait charged, its budget would be gone before it starts)
        run = client.post("/v1/runs", json={"request": {"bundled": "seed-beijing-shanghai",
                                                        "budgetS": 2, "solver": "greedy"}})
        assert run.status_code == 202, run.text
        r = client.post("/v1/debug/sleep", params={"seconds": 0.1})
        assert r.status_code == 429 and "queue is full (1 waiting)" in r.json()["error"]
        assert int(r.headers["Retry-After"]) >= 1
        assert first.result().status_code == 200
        done = _wait_run(client, run.json()["id"], {"succeeded", "failed"}, 30)
        assert done["state"] == "succeeded", done
        assert done["startedAt"] - done["createdAt"] > 2  # it did wait


def test_finished_runs_expire_and_requests_are_not_kept(tmp_path) -> None:
    db = tmp_path / "r.sqlite"
    with LocalServer("--run-retention", "0.0005", db=db, workers=1) as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as client:
        run = client.post("/v1/runs", json={"request": {"bundled": SMALL, "budgetS": 5}})
        rid = run.json()["id"]
        _wait_run(client, rid, {"succeeded"})
    import sqlite3

    with sqlite3.connect(db) as con:
        assert con.execute("SELECT request FROM runs WHERE id = ?", (rid,)).fetchone()[0] == "{}"
    time.sleep(2)  # past the 1.8 s retention
    with LocalServer("--run-retention", "0.0005", db=db, workers=1) as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as client:
        assert client.get(f"/v1/runs/{rid}").status_code == 404


def test_cli_refuses_deep_documents(tmp_path) -> None:
    from hyperplace.errors import InputError
    from hyperplace.io import load_documents

    for name, text in (("deep.json", json.dumps({"a": _nested(MAX_DEPTH + 1)})),
                       ("deep.yaml", "a: " + "[" * 80 + "1" + "]" * 80 + "\n")):
        (tmp_path / name).write_text(text)
        with pytest.raises(InputError) as err:
            load_documents(tmp_path / name)
        assert f"{MAX_DEPTH}" in err.value.one_line(), err.value.one_line()
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"a": _nested(MAX_DEPTH - 2)}))
    assert load_documents(ok)



# ---- schemathesis over the OpenAPI document -------------------------------------------------

def test_schemathesis_finds_no_5xx(tmp_path) -> None:
    """Schemathesis (positive and negative cases from the server's own OpenAPI document,
    a fixed seed: derandomize) against every operation: no 5xx, and every 4xx answer is the
    documented error body. The example budget keeps this under a minute on an idle machine;
    budgets are capped at 1 s so a valid solve stays short."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable

    modes = (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE)
    with LocalServer("--max-budget", "1", "--default-budget", "1", db=tmp_path / "st.sqlite",
                     workers=2) as srv, httpx.Client(base_url=srv.url, timeout=30) as client:
        schema = schemathesis.openapi.from_dict(client.get("/openapi.json").json())
        operations = [r.ok() for r in schema.get_all_operations()]
        assert len(operations) >= 20
        seen: dict[int, int] = {}
        for op in operations:
            for mode in modes:
                @settings(max_examples=6, deadline=None, derandomize=True, database=None,
                          suppress_health_check=list(HealthCheck))
                @given(op.as_strategy(generation_mode=mode))
                def one(case) -> None:
                    r = case.call(base_url=srv.url, timeout=30)
                    seen[r.status_code] = seen.get(r.status_code, 0) + 1
                    where = (case.method, case.formatted_path, str(case.body)[:500])
                    assert r.status_code < 500, (where, r.text[:500])
                    if r.status_code >= 400:
                        body = r.json()
                        assert body["status"] == r.status_code and body["error"], (where, body)
                        assert "problems" in body and "path" in body, (where, body)

                try:
                    one()
                except Unsatisfiable:  # no negative case exists (an operation without input)
                    assert mode is modes[1] and not op.body and not op.query, op.label
        assert client.get("/readyz").json()["alive"] == 2
    assert sum(seen.values()) >= 120 and 200 in seen and 422 in seen, seen
