"""Usage history of a stored cluster in the service (#14), against a real server: applied
rounds accrue each queue's GPU-hours (Slurm's decay, the library's QueueUsage rule) in the
SQLite store, later rounds on the cluster see it as spec.queueUsage (a queue that got less
wins the fair-share tie), it survives a restart, and it is shown in GET /v1/clusters/{name}.
Every plan goes through the checker."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys

import httpx
import pytest
from queue_helpers import cluster_queue, one_node, queued

from hyperplace.check import check
from hyperplace.models import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.service.launch import LocalServer
from hyperplace.service.state import round_state
from hyperplace.solvers.workflows.session import usage_at


def _round(client: httpx.Client, cluster: str) -> PlacementPlan:
    """One applied round, checked against the stored state it was solved on."""
    before = Instance.model_validate(client.get(f"/v1/clusters/{cluster}").json()["instance"])
    r = client.post("/v1/placement", json={"cluster": cluster, "budgetS": 5, "solver": "cpsat",
                                           "apply": True})
    assert r.status_code == 200, r.text
    assert r.headers["X-Hyperplace-Applied"] == "yes"
    plan = PlacementPlan.model_validate(r.json())
    assert check(plan, before) == []
    return plan


def test_usage_history_persists_across_applied_rounds_and_a_restart(tmp_path) -> None:
    db = tmp_path / "state.sqlite"
    base = one_node([cluster_queue("a"), cluster_queue("b")])

    def jobs(*spec: tuple[str, int]) -> list[dict]:
        return [queued(base, name, gpus, name[0]).to_doc() for name, gpus in spec]

    inst = base.with_jobs([queued(base, "a0", 4, "a"), queued(base, "a1", 4, "a"),
                           queued(base, "b0", 8, "b")])
    with LocalServer(db=db, workers=1, test_hooks=True) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as hp:
        info = hp.put("/v1/clusters/fair", json=inst.to_doc()).json()
        assert info["usageHistory"]["gpuHours"] == {} and info["usageHistory"]["heldGpus"] == {}
        assert info["usageHistory"]["halfLifeS"] == 7 * 24 * 3600  # Slurm's default
        # round 1, no history yet: per round both queues are at their share and a's plan
        # admits more jobs, so a wins the node
        assert sorted(_round(hp, "fair").admitted) == ["a0", "a1"]
        got = hp.get("/v1/clusters/fair").json()
        assert got["usageHistory"]["heldGpus"] == {"a": 8}
        assert {r["name"]: r["queue"] for r in got["instance"]["spec"]["runningJobs"]} == {
            "a0": "a", "a1": "a"}
        # a holds the node for 1.5 s: the service's round-state clock moves, no sleep
        assert hp.post("/v1/debug/clock", params={"advance": 1.5}).status_code == 200
        r = hp.patch("/v1/clusters/fair", json={"completions": ["a0", "a1"],
                                                "arrivals": jobs(("a2", 4), ("a3", 4))})
        assert r.status_code == 200, r.text
        hist = r.json()["usageHistory"]
        assert hist["heldGpus"] == {} and set(hist["gpuHours"]) == {"a"}
        assert 8 * 1.5 / 3600 * 0.99 < hist["gpuHours"]["a"] < 8 * 10 / 3600
        assert hp.get("/v1/clusters/fair").json()["instance"]["spec"].get(
            "runningJobs", []) == []  # the completed jobs left the list
        # round 2: the same tie, but a used the node: b's job wins it
        assert _round(hp, "fair").admitted == ["b0"]
        r = hp.patch("/v1/clusters/fair", json={"completions": ["b0"],
                                                "arrivals": jobs(("b1", 8))})
        hist = r.json()["usageHistory"]
        assert 0 < hist["gpuHours"]["b"] < hist["gpuHours"]["a"]
        stored = hp.get("/v1/clusters/fair").json()
    with LocalServer(db=db, workers=1) as srv, httpx.Client(base_url=srv.url, timeout=60) as hp:
        after = hp.get("/v1/clusters/fair").json()
        # the history is the stored one, to the last digit
        for key in ("asOf", "gpuHours", "heldGpus"):
            assert after["usageHistory"][key] == stored["usageHistory"][key], key
        now = after["usageHistory"]["gpuHoursNow"]
        assert now["a"] == pytest.approx(stored["usageHistory"]["gpuHours"]["a"], rel=1e-4)
        # round 3 after the restart: a used more (1.5 s against b's few ms), so b wins the
        # tie again, where a per-round fair share alone would admit a2 and a3
        assert _round(hp, "fair").admitted == ["b1"]


def test_a_documents_own_usage_seeds_the_history_and_bad_usage_is_a_422() -> None:
    base = one_node([cluster_queue("a"), cluster_queue("b")])
    inst = base.with_jobs([queued(base, "a0", 4, "a"), queued(base, "a1", 4, "a"),
                           queued(base, "b0", 8, "b")])
    with LocalServer(workers=1) as srv, httpx.Client(base_url=srv.url, timeout=60) as hp:
        doc = inst.to_doc()
        doc["spec"]["queueUsage"] = {"nope": 1.0}
        r = hp.put("/v1/clusters/seeded", json=doc)
        assert r.status_code == 422 and r.json()["path"] == "spec.queueUsage.nope", r.text
        doc["spec"]["queueUsage"] = {"b": -1.0}
        r = hp.put("/v1/clusters/seeded", json=doc)
        assert r.status_code == 422 and r.json()["path"].startswith("spec.queueUsage"), r.text
        doc["spec"]["queueUsage"] = {"a": 5.0}
        r = hp.put("/v1/clusters/seeded", json=doc)
        assert r.status_code == 200 and r.json()["usageHistory"]["gpuHours"] == {"a": 5.0}
        got = hp.get("/v1/clusters/seeded").json()
        assert "queueUsage" not in got["instance"]["spec"]  # one copy: the service's
        # a used 5 GPU-hours, b nothing: b wins the tie a wins per round
        assert _round(hp, "seeded").admitted == ["b0"]
        # a manifest's priority beyond spec.runningJobs' range still leaves a valid cluster
        urgent = queued(base, "x", 4, "a").to_doc()
        urgent["spec"]["priority"] = 10**8
        r = hp.patch("/v1/clusters/seeded", json={"completions": ["b0"], "arrivals": [urgent]})
        assert r.status_code == 200, r.text
        assert "x" in _round(hp, "seeded").admitted
        running = hp.get("/v1/clusters/seeded").json()["instance"]["spec"]["runningJobs"]
        assert {"name": "x", "queue": "a", "priority": 1_000_000} in running
        assert _round(hp, "seeded").admitted == []  # the next round on it is answered
        assert hp.delete("/v1/clusters/seeded").status_code == 204
        assert hp.get("/v1/clusters").json() == []
    out = subprocess.run([sys.executable, "-m", "hyperplace.cli", "serve", "--half-life", "-1",
                          "--port", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("error: --half-life: must be a finite number")


HALF_LIFE_S = 7 * 24 * 3600.0  # the server's default (Slurm's)


def _stored(client: httpx.Client, cluster: str) -> tuple[dict, dict]:
    got = client.get(f"/v1/clusters/{cluster}").json()
    return got["usageHistory"], got["instance"]


def _is_round_states(hist: dict, doc: dict) -> None:
    """The stored history is the serialized history of the stored document's round state:
    the round state read from the document, carrying the history, writes it back unchanged
    (the GPUs it says each queue holds are the ones the document's running jobs hold)."""
    stored = {"timeS": hist["asOf"], "gpuHours": hist["gpuHours"], "heldGpus": hist["heldGpus"]}
    state = round_state(doc, usage_at(stored, HALF_LIFE_S, hist["asOf"]))
    assert state.history() == stored


def test_stored_history_is_the_round_states_and_a_restart_carries_it_on(tmp_path) -> None:
    """A failure under a running job (PATCH) changes what its queue holds: the history
    accrues the GPUs held until then, then the fewer ones; a restarted server reads the same
    history (to the last digit) and accrues what it says is held."""
    db = tmp_path / "state.sqlite"
    base = one_node([cluster_queue("a"), cluster_queue("b")])
    inst = base.with_jobs([queued(base, "a0", 4, "a"), queued(base, "a1", 4, "a")])

    def decay(dt: float) -> float:
        return 2.0 ** (-dt / HALF_LIFE_S)
    with LocalServer(db=db, workers=1, test_hooks=True) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as hp:
        assert hp.put("/v1/clusters/c", json=inst.to_doc()).status_code == 200
        assert sorted(_round(hp, "c").admitted) == ["a0", "a1"]
        hist, doc = _stored(hp, "c")
        assert hist["heldGpus"] == {"a": 8} and hist["gpuHours"] == {}
        _is_round_states(hist, doc)
        started = hist["asOf"]
        assert hp.post("/v1/debug/clock", params={"advance": 3600}).status_code == 200
        r = hp.patch("/v1/clusters/c", json={"failures": [{"node": "n0", "gpus": [0]}]})
        assert r.status_code == 200, r.text
        assert len(r.json()["interruptedJobs"]) == 1
        hist, doc = _stored(hp, "c")
        assert hist["heldGpus"] == {"a": 4}  # one 4-GPU job left
        dt = hist["asOf"] - started  # 1 h on the moved clock, plus the PATCH's own time
        assert 3600 <= dt < 3660
        assert hist["gpuHours"]["a"] == pytest.approx(8 * dt / 3600 * decay(dt), rel=1e-9)
        _is_round_states(hist, doc)
    with LocalServer(db=db, workers=1, test_hooks=True) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as hp:
        again, doc = _stored(hp, "c")
        for key in ("asOf", "gpuHours", "heldGpus"):
            assert again[key] == hist[key], key
        _is_round_states(again, doc)
        # the restarted server's clock offset starts at 0: 2 h on is 1 h after the failure
        assert hp.post("/v1/debug/clock", params={"advance": 7200}).status_code == 200
        running = [r["name"] for r in doc["spec"]["runningJobs"]]
        r = hp.patch("/v1/clusters/c", json={"completions": running})
        assert r.status_code == 200, r.text
        after, doc = _stored(hp, "c")
        assert after["heldGpus"] == {}
        # the 4 GPUs still held accrued for the hour since the failure (and the restart's
        # own seconds), all of it decayed
        dt = after["asOf"] - hist["asOf"]
        assert 3600 <= dt < 3900
        assert after["gpuHours"]["a"] == pytest.approx(
            (hist["gpuHours"]["a"] + 4 * dt / 3600) * decay(dt), rel=1e-9)
        _is_round_states(after, doc)


def test_a_database_from_before_the_round_state_history_keeps_its_history(tmp_path) -> None:
    """A database whose usage history is in the old ``queue_usage`` table (time, GPU-hours
    and held GPUs per cluster) is carried over at start: the same history, nothing lost."""
    db = tmp_path / "state.sqlite"
    base = one_node([cluster_queue("a"), cluster_queue("b")])
    inst = base.with_jobs([queued(base, "a0", 4, "a"), queued(base, "b0", 4, "b")])
    with LocalServer(db=db, workers=1) as srv, httpx.Client(base_url=srv.url, timeout=60) as hp:
        assert hp.put("/v1/clusters/old", json=inst.to_doc()).status_code == 200
        assert sorted(_round(hp, "old").admitted) == ["a0", "b0"]
        hist, _ = _stored(hp, "old")
    # the old layout, as the service wrote it before (one row per cluster)
    con = sqlite3.connect(db)
    with con:
        con.execute("DROP TABLE round_history")
        con.execute("CREATE TABLE queue_usage (cluster TEXT PRIMARY KEY, time REAL, "
                    "gpu_hours TEXT NOT NULL, held TEXT NOT NULL)")
        con.execute("INSERT INTO queue_usage VALUES (?, ?, ?, ?)",
                    ("old", hist["asOf"], json.dumps({"a": 2.5}), json.dumps(hist["heldGpus"])))
    con.close()
    with LocalServer(db=db, workers=1) as srv, httpx.Client(base_url=srv.url, timeout=60) as hp:
        again, doc = _stored(hp, "old")
        assert again["asOf"] == hist["asOf"] and again["gpuHours"] == {"a": 2.5}
        assert again["heldGpus"] == hist["heldGpus"] == {"a": 4, "b": 4}
        _is_round_states(again, doc)
    con = sqlite3.connect(db)
    tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    con.close()
    assert "queue_usage" not in tables and "round_history" in tables


def test_why_reads_the_usage_history_on_the_services_clock() -> None:
    """GET /v1/clusters/{name}/jobs/{job} brings the stored usage history to the service's
    clock (``service.now()``, which /v1/debug/clock moves), as rounds do, not to the host's
    wall clock: after 10 h on the moved clock queue a's running job has used 80 GPU-hours
    against b's seeded 1, so b wins the fair-share tie for the free node; on the wall clock a
    would have used seconds' worth and win it."""
    from hyperplace.models import Cluster, FabricGenerator, FabricSpec, Node
    from hyperplace.models.instance import RunningJob

    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=2, spines=2)
    held = {g: "r0" for g in range(8)}
    cluster = Cluster(name="c", nodes=[Node(name="n0", gpu_type="H100-80", gpu_count=8),
                                       Node(name="n1", gpu_type="H100-80", gpu_count=8,
                                            allocated=held)],
                      fabric=FabricSpec(generator=gen))
    base = one_node([cluster_queue("a"), cluster_queue("b")])
    spec = base.spec.model_copy(update={"clusters": [cluster],
                                        "running_jobs": [RunningJob(name="r0", queue="a")]})
    two = base.model_copy(update={"spec": spec})
    inst = two.with_jobs([queued(two, "a2", 8, "a"), queued(two, "b1", 8, "b")])
    doc = inst.to_doc()
    doc["spec"]["queueUsage"] = {"b": 1.0}
    with LocalServer(workers=1, test_hooks=True) as srv, \
            httpx.Client(base_url=srv.url, timeout=60) as hp:
        info = hp.put("/v1/clusters/tie", json=doc).json()
        assert info["usageHistory"]["heldGpus"] == {"a": 8}
        assert hp.post("/v1/debug/clock", params={"advance": 36000}).status_code == 200
        got = hp.get("/v1/clusters/tie").json()["usageHistory"]["gpuHoursNow"]
        assert 70 < got["a"] < 80 and 0.9 < got["b"] <= 1  # accrued, and decayed a little
        answers = {job: hp.get(f"/v1/clusters/tie/jobs/{job}", params={"budgetS": 5})
                   for job in ("a2", "b1")}
        assert all(r.status_code == 200 for r in answers.values()), answers
        assert answers["b1"].json()["state"] == "admitted", answers["b1"].text
        assert answers["a2"].json()["state"] == "pending", answers["a2"].text
