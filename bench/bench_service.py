"""Service benchmark: a real ``hyperplace serve`` on loopback, driven over HTTP.

Measures, per row, latency p50/p99/max, throughput and the answers' statuses:

* placement rounds of 64, 1,024 and 16,384 GPUs (inline Instance documents, "cold") at
  concurrency 1, 8 and 32, each with its budget; how far any answer came after its budget
  (the documented overhead is ``hyperplace.service.config.OVERHEAD_S``) and the service's own
  time per request (answer time minus the solver's ``runtimeS``, at concurrency 1);
* warm rounds: the same cluster stored once (PUT), then per round a PATCH (one job completes,
  one arrives) and a placement naming the stored cluster, against the cold inline request;
* kube-scheduler extender ``filter``/``prioritize`` and Volcano ``predicate`` p99 (64
  candidate nodes, answered from the latest plan), concurrency 8;
* the same extender verbs while both workers solve 16,384-GPU rounds (the loop never
  solves: a solve running must not slow the extender down);
* ``/healthz`` while 30 MB bodies are being read and parsed (parsing is in a thread);
* ``/v1/estimate`` p99 on a 16-cluster federation (if the endpoint exists);
* the promises, checked over every row: every answer within its budget plus the overhead
  (or refused at once), a ``Retry-After`` on every 429 and 503, no 5xx.

Usage: ``python bench/bench_service.py [--quick] [--out bench/results/service.md]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import httpx

from hyperplace.instances import generate, load_instance
from hyperplace.instances.registry import instance_document
from hyperplace.service.config import OVERHEAD_S
from hyperplace.service.launch import LocalServer
from benchlib import machine


NODELAY = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


async def drive(url: str, requests: list[tuple[str, str, dict]], concurrency: int
                ) -> list[dict]:
    """Send ``(method, path, body)`` requests with at most ``concurrency`` in flight."""
    sem = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    # TCP_NODELAY, as Go's net/http (kube-scheduler, Volcano) sets it: without it, httpx's
    # separate header and body writes meet delayed ACKs and every request pays ~40 ms
    transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=NODELAY)
    # each body encoded once, before any clock starts: encoding 32 bodies of 0.9 MB in this
    # one loop took seconds, which the requests' times counted as the server's
    encoded: dict[int, bytes] = {}
    for _, _, body in requests:
        if id(body) not in encoded:
            encoded[id(body)] = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=url, timeout=600, transport=transport) as client:
        async def one(method: str, path: str, body: dict) -> dict:
            async with sem:
                start = time.perf_counter()
                if method == "GET":
                    r = await client.request(method, path)
                else:
                    r = await client.request(method, path, content=encoded[id(body)],
                                             headers=headers)
                wall = time.perf_counter() - start
                try:
                    data = r.json()
                except ValueError:
                    data = {}
                return {"code": r.status_code, "wall": wall,
                        "retry_after": r.headers.get("Retry-After"),
                        "status": data.get("status") if isinstance(data, dict) else None,
                        "runtime": data.get("runtimeS") if isinstance(data, dict) else None}
        return await asyncio.gather(*(one(*req) for req in requests))


def row(label: str, results: list[dict], elapsed: float, budget: float | None,
        solves: bool = True) -> str:
    walls = [r["wall"] for r in results]
    ok = [r for r in results if r["code"] == 200]
    statuses: dict[str, int] = {}
    for r in ok:
        statuses[str(r["status"])] = statuses.get(str(r["status"]), 0) + 1
    errors = len(results) - len(ok)
    late = max((r["wall"] - budget for r in results), default=0.0) if budget else None
    own = [r["wall"] - r["runtime"] for r in ok if r["runtime"] is not None]
    fallback = statuses.get("fallback", 0) / len(ok) if ok else float("nan")
    late_s = f"{late:+.2f}" if late is not None else "-"
    own_s = f"{1e3 * pct(own, 50):,.1f}" if own else "-"
    shown = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items())) if solves else "-"
    if not solves:
        fallback = float("nan")
    return (f"| {label} | {len(results)} | {1e3 * pct(walls, 50):,.1f} | "
            f"{1e3 * pct(walls, 99):,.1f} | {1e3 * max(walls):,.1f} | "
            f"{len(results) / elapsed:,.2f} | {shown} | "
            f"{'-' if fallback != fallback else f'{fallback:.0%}'} | {errors} | "
            f"{late_s} | {own_s} | {os.getloadavg()[0]:.1f} |")


def run(url: str, requests: list[tuple[str, str, dict]], concurrency: int
        ) -> tuple[list[dict], float]:
    start = time.perf_counter()
    results = asyncio.run(drive(url, requests, concurrency))
    return results, time.perf_counter() - start




def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer requests, no 16,384-GPU rows")
    ap.add_argument("--budget", type=float, default=5.0)
    ap.add_argument("--out", default="bench/results/service.md")
    args = ap.parse_args()
    budget = args.budget
    every: list[tuple[str, dict, float | None]] = []  # (row, result, budget): the promises
    workers = os.cpu_count() or 2
    lines = [
        "# Service bench",
        "",
        f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC",
        f"- machine: {machine()}; shared with other work while it ran, so timings are noisy; "
        f"load average at start {os.getloadavg()[0]:.1f} (1 min)",
        f"- command: `python bench/bench_service.py{' --quick' if args.quick else ''} "
        f"--budget {budget:g}`",
        f"- server: `hyperplace serve` on loopback, {workers} worker processes, max budget "
        f"{max(budget, 10):g} s; client: httpx on the same machine",
        f"- documented overhead (answer after budget): {OVERHEAD_S} s "
        "(`hyperplace.service.config.OVERHEAD_S`)",
        "",
    ]
    sizes = [("64 GPUs (seed-beijing-shanghai)", instance_document(load_instance(
        "seed-beijing-shanghai")))]
    sizes.append(("1,024 GPUs / 100 jobs", instance_document(generate(1024, 100, seed=1))))
    if not args.quick:
        sizes.append(("16,384 GPUs / 2,000 jobs",
                      instance_document(generate(16384, 2000, seed=1))))
    head = ("| case | requests | p50 ms | p99 ms | max ms | req/s | statuses | fallback | "
            "errors | worst (answer - budget) s | service ms p50 (answer - runtimeS) | "
            "load (1 min, at the row's end) |")
    sep = "|" + "---|" * 12
    with LocalServer("--max-budget", str(max(budget, 10)), "--queue-limit", "256",
                     workers=workers) as server:
        url = server.url
        lines += ["## Placement (inline instance, budget "
                  f"{budget:g} s)", "", head, sep]
        for label, doc in sizes:
            big = len(doc["spec"]["clusters"][0]["nodes"]) > 1000
            for c in (1, 8, 32):
                n = (c if big else max(2 * c, 16)) if not args.quick else max(c, 4)
                if big and c == 1:
                    n = 3
                reqs = [("POST", "/v1/placement", {"instance": doc, "budgetS": budget})] * n
                results, elapsed = run(url, reqs, c)
                lines.append(row(f"{label}, concurrency {c}", results, elapsed, budget))
                every += [(f"{label}, concurrency {c}", r, budget) for r in results]
                print(lines[-1], flush=True)

        # warm vs cold: one stored cluster, PATCH + placement by name per round
        lines += ["", "## Warm (PATCH + stored cluster) vs cold (inline) rounds, concurrency 1",
                  "", head, sep]
        for label, doc in sizes[1:]:
            rounds = 3 if args.quick or "16,384" in label else 8
            cold, e_cold = run(url, [("POST", "/v1/placement",
                                      {"instance": doc, "budgetS": budget})] * rounds, 1)
            with httpx.Client(base_url=url, timeout=600,
                              transport=httpx.HTTPTransport(socket_options=NODELAY)) as client:
                assert client.put("/v1/clusters/warm", json=doc).status_code == 200
                plan = client.post("/v1/placement", json={"cluster": "warm", "budgetS": budget,
                                                          "apply": True}).json()
                if "jobs" not in plan:  # refused under load: warm rounds without completions
                    plan = {"jobs": []}
                jobs = doc["spec"]["jobs"]
                walls = []
                admitted = [j["job"] for j in plan["jobs"]]
                start = time.perf_counter()
                for k in range(rounds):
                    arrival = json.loads(json.dumps(jobs[k % len(jobs)]))
                    arrival["metadata"]["name"] = f"arrival-{k}"
                    t0 = time.perf_counter()
                    done = [admitted[k]] if k < len(admitted) else []
                    r1 = client.patch("/v1/clusters/warm",
                                      json={"completions": done, "arrivals": [arrival]})
                    r2 = client.post("/v1/placement", json={"cluster": "warm",
                                                            "budgetS": budget})
                    walls.append({"code": max(r1.status_code, r2.status_code),
                                  "wall": time.perf_counter() - t0,
                                  "status": r2.json().get("status"),
                                  "runtime": r2.json().get("runtimeS")})
                e_warm = time.perf_counter() - start
                client.delete("/v1/clusters/warm")
            lines.append(row(f"{label}: cold, inline", cold, e_cold, budget))
            lines.append(row(f"{label}: warm, PATCH + by name", walls, e_warm, budget))
            print(*lines[-2:], sep="\n", flush=True)

        # extenders, from the latest plan of a stored 1,024-GPU cluster
        doc = sizes[1][1]
        with httpx.Client(base_url=url, timeout=600) as client:
            client.put("/v1/clusters/ext", json=doc)
            plan = client.post("/v1/placement", json={"cluster": "ext", "budgetS": budget}).json()
        job = plan["jobs"][0]["job"]
        names = [n["name"] for n in doc["spec"]["clusters"][0]["nodes"][:64]]
        pod = {"metadata": {"name": f"{job}-0", "labels": {"volcano.sh/job-name": job}}}
        n_ext = 200 if args.quick else 500
        lines += ["", "## Scheduler extenders (64 candidate nodes)", "", head, sep]
        for (label, path, body), c in ((x, c) for c in (1, 8) for x in (
                ("kube-scheduler filter", "/v1/extender/filter", {"Pod": pod, "NodeNames": names}),
                ("kube-scheduler prioritize", "/v1/extender/prioritize",
                 {"Pod": pod, "NodeNames": names}),
                ("Volcano predicate", "/v1/volcano/predicate",
                 {"task": {"Job": f"default/{job}", "Pod": pod}, "node": {"Name": names[0]}}))):
            results, elapsed = run(url, [("POST", path, body)] * n_ext, c)
            lines.append(row(f"{label}, concurrency {c}", results, elapsed, None, False))
            every += [(label, r, None) for r in results]
            print(lines[-1], flush=True)

        # the same verbs while both workers solve big rounds (the loop never solves)
        big_label, big_doc = (sizes[-1] if not args.quick else (
            "16,384 GPUs / 2,000 jobs", instance_document(generate(16384, 2000, seed=1))))
        solve_budget = max(budget, 10)
        lines += ["", f"## Scheduler extenders while {workers} workers solve "
                  f"{big_label} rounds (budget {solve_budget:g} s), concurrency 8", "",
                  head, sep]

        async def under_solve() -> list[tuple[str, list[dict], float]]:
            solves = asyncio.ensure_future(drive(url, [("POST", "/v1/placement", {
                "instance": big_doc, "budgetS": solve_budget})] * workers, workers))
            await asyncio.sleep(3.0 if not args.quick else 1.0)  # bodies read, solving
            busy = (await asyncio.to_thread(httpx.get, url + "/readyz")).json().get("busy")
            out = []
            for label, path, body in (
                    ("kube-scheduler filter", "/v1/extender/filter",
                     {"Pod": pod, "NodeNames": names}),
                    ("Volcano predicate", "/v1/volcano/predicate",
                     {"task": {"Job": f"default/{job}", "Pod": pod}, "node": {"Name": names[0]}})):
                t0 = time.perf_counter()
                res = await drive(url, [("POST", path, body)] * (n_ext // 2), 8)
                out.append((label, res, time.perf_counter() - t0))
            solved = await solves
            out.append((f"(the {workers} solves themselves; {busy} busy as measuring began)",
                        solved, sum(r["wall"] for r in solved) / len(solved)))
            return out

        for label, res, elapsed in asyncio.run(under_solve()):
            solving = label.startswith("(")
            lines.append(row(label if solving else f"{label}, during the solves", res, elapsed,
                             solve_budget if solving else None, solving))
            every += [(label, r, solve_budget if solving else None) for r in res]
            print(lines[-1], flush=True)

        # /healthz while large bodies are read and parsed
        huge = instance_document(generate(65536, 20000 if not args.quick else 2000, seed=2))
        job0 = huge["spec"]["jobs"][0]
        junk = {"bundled": "seed-beijing-shanghai", "jobs": [job0] * 75_000}  # > MAX_JOBS
        huge_mb = len(json.dumps(huge)) / 1e6
        junk_mb = len(json.dumps(junk)) / 1e6
        lines += ["", f"## /healthz while large bodies are posted: PUT of a {huge_mb:.1f} MB "
                  f"65,536-GPU cluster and POSTs of {junk_mb:.0f} MB (75,000 jobs: refused, 422)",
                  "", head, sep]

        huge_bytes, junk_bytes = json.dumps(huge).encode(), json.dumps(junk).encode()

        def send_bodies(method: str, path: str, content: bytes, n: int) -> list[dict]:
            """From a thread of its own, encoded beforehand: the loop that times /healthz
            must not be the one writing 24 MB (it was, and its own stalls were counted)."""
            out = []
            with httpx.Client(base_url=url, timeout=600,
                              transport=httpx.HTTPTransport(socket_options=NODELAY)) as c:
                for _ in range(n):
                    t = time.perf_counter()
                    r = c.request(method, path, content=content,
                                  headers={"content-type": "application/json"})
                    out.append({"code": r.status_code, "wall": time.perf_counter() - t,
                                "retry_after": r.headers.get("Retry-After"), "status": None,
                                "runtime": None})
            return out

        async def health_under_bodies() -> tuple[list[dict], float, list[dict], list[dict]]:
            puts = asyncio.ensure_future(asyncio.to_thread(
                send_bodies, "PUT", "/v1/clusters/huge", huge_bytes, 2))
            posts = asyncio.ensure_future(asyncio.to_thread(
                send_bodies, "POST", "/v1/placement", junk_bytes, 3))
            t0 = time.perf_counter()
            res = []
            while not (puts.done() and posts.done()):
                res += await drive(url, [("GET", "/healthz", {})] * 5, 1)
                await asyncio.sleep(0.02)
            return res, time.perf_counter() - t0, await puts, await posts

        health, elapsed, put_results, post_results = asyncio.run(health_under_bodies())
        lines.append(row("GET /healthz, concurrency 1, during the bodies", health, elapsed,
                         None, False))
        lines.append(row(f"PUT {huge_mb:.1f} MB cluster", put_results,
                         sum(r["wall"] for r in put_results), None, False))
        lines.append(row(f"POST {junk_mb:.0f} MB, 75,000 jobs (422 expected)", post_results,
                         sum(r["wall"] for r in post_results), None, False))
        every += [("healthz", r, None) for r in health + put_results]
        print(*lines[-3:], sep="\n", flush=True)

        # Karmada estimator at 16 clusters
        spec = httpx.get(url + "/openapi.json").json()
        if "/v1/estimate" in spec["paths"]:
            from hyperplace.federation.generator import pipeline_job, random_federation

            fed = instance_document(random_federation(16, seed=1, nodes=(8, 32)))
            tj = json.loads(pipeline_job("bench-llm", "llama3-8b", stages=2, replicas=2)
                            .model_dump_json(by_alias=True))
            n_est = 10 if args.quick else 40
            lines += ["", "## Karmada estimator: /v1/estimate on 16 member clusters "
                      "(2,056 GPUs, inline federation)", "", head, sep]
            for c in (1, 8):
                results, elapsed = run(url, [("POST", "/v1/estimate",
                                              {"instance": fed, "trainingJob": tj})] * n_est, c)
                lines.append(row(f"estimate, 16 clusters, concurrency {c}", results, elapsed,
                                 None, False))
                print(lines[-1], flush=True)
    # the promises over every request above
    late = [(lbl, r["wall"] - b) for lbl, r, b in every if b is not None and r["code"] == 200]
    # refusals too: a 429/503 also promises to come within the budget plus the overhead
    late_any = [(lbl, r["wall"] - b, r["code"]) for lbl, r, b in every if b is not None]
    worst_any = max(late_any, key=lambda x: x[1]) if late_any else ("-", float("nan"), 0)
    refused = [r for _, r, _ in every if r["code"] in (429, 503)]
    no_retry = [r for r in refused if not r.get("retry_after")]
    five = [(lbl, r["code"]) for lbl, r, _ in every if r["code"] >= 500 and r["code"] != 503]
    worst = max(late, key=lambda x: x[1]) if late else ("-", float("nan"))
    lines += ["", "## Promises, over every request above", "",
              f"- answers (200) with a budget: {len(late)}; worst answer - budget: "
              f"{worst[1]:+.2f} s ({worst[0]}); documented overhead {OVERHEAD_S} s: "
              f"{'held' if worst[1] <= OVERHEAD_S else 'NOT held'}",
              f"- every answer with a budget (200, 429, 503; client-timed, upload included): "
              f"{len(late_any)}; worst answer - budget: {worst_any[1]:+.2f} s ({worst_any[0]}, "
              f"{worst_any[2]}); {'held' if worst_any[1] <= OVERHEAD_S else 'NOT held'}",
              f"- refused (429/503): {len(refused)}, without Retry-After: {len(no_retry)}",
              f"- 5xx other than 503: {len(five)}"]
    lines.append(f"- load average at the end: {os.getloadavg()[0]:.1f} (1 min)")
    print(*lines[-5:], sep="\n", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(args.out).with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
