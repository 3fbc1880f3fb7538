"""A pool of solver worker processes that the event loop drives without ever blocking.

Why not ``concurrent.futures.ProcessPoolExecutor``: it cannot stop a task that is running
(a cancelled run would keep its worker busy to the end of its budget) and one dead worker
breaks the whole pool (every request in flight would fail). Here each worker is one process
with one pipe; the event loop waits on the pipe with ``add_reader``; cancelling a running task
kills its process and starts a fresh one; a process that dies fails only its own task.

Workers come from a ``forkserver`` whose preloaded imports (the solvers, OR-Tools) make a
replacement start in milliseconds. Requests wait in one bounded FIFO queue: when it is full,
:class:`Saturated` says how long to wait (the HTTP layer answers 429 with ``Retry-After``).

What the pool promises (tested in tests/service/test_service_faults.py):

* never more solver processes than ``size``: a worker is killed and reaped before its
  replacement starts (cancel, hard deadline, crash alike);
* a task that cannot be handed to a worker (its payload does not pickle) fails alone; the
  slot stays as it was (the payload is pickled before a byte is written to the pipe);
* the hard deadline (deadline + grace) kills the solver and fails the task with
  :class:`WorkerTimedOut` (503 with ``Retry-After``);
* workers die with the server: each one asks the kernel for SIGKILL when its parent (the
  fork server, which exits when the server's pipe to it closes) dies, and a watchdog thread
  kills it within a second of the server's process going away (kill -9 included).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import math
import multiprocessing
import os
import time
from multiprocessing.reduction import ForkingPickler
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hyperplace.service.worker import Reply, worker_main

# Imported once in the fork server, so every worker (and every replacement) starts warm;
# the fork server skips a module that fails to import.
PRELOAD = ["hyperplace.service.worker", "hyperplace.solvers.driver", "hyperplace.check",
           "hyperplace.solvers.split", "hyperplace.instances.registry",
           "hyperplace.costmodel.predict", "hyperplace.federation"]


# How soon an idle worker must take a request whose budget was spent on reading it (the
# floor: one greedy pass, still answered by the hard deadline).
IDLE_PICKUP_S = 0.1


class PoolError(Exception):
    """Work that did not produce an answer (the HTTP layer maps each kind to a status)."""


log = logging.getLogger("hyperplace.service")


class Saturated(PoolError):
    def __init__(self, retry_after_s: float, message: str | None = None):
        self.retry_after_s = retry_after_s
        super().__init__(message or f"all workers busy and the queue is full; retry in "
                         f"{retry_after_s:.0f} s")


class HandOffFailed(PoolError):
    """The task's payload could not be sent to a worker (it fails alone; the slot is fine)."""


class Unavailable(PoolError):
    """The pool is starting or shutting down."""


class Expired(PoolError):
    """The request's deadline passed while it waited for a worker."""


class WorkerCrashed(PoolError):
    pass


class WorkerTimedOut(PoolError):
    pass


class Cancelled(PoolError):
    pass


@dataclass
class Task:
    id: str
    kind: str
    payload: dict[str, Any]
    deadline: float
    fetch: Callable[[str, int], Any] | None = None  # stored cluster doc by (name, version)
    grace_s: float | None = None  # answer by deadline + grace, else the worker is stopped
    budget_s: float | None = None  # a run's budget: the deadline is set when a worker takes it
    on_start: Callable[[], None] | None = None  # called when a worker takes it
    future: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    state: str = "queued"
    started: float | None = None
    cancelled: bool = False
    expiry: asyncio.TimerHandle | None = None  # fails it at ``start_by`` if still queued
    start_by: float = 0.0  # a worker must take it by then (its deadline, see submit)


@dataclass
class Slot:
    index: int
    process: Any = None
    conn: Any = None
    task: Task | None = None
    started_tasks: int = 0
    killed: bool = False  # its process was sent SIGKILL (cancel): replace before reuse


class WorkerPool:
    """``size`` worker processes, a FIFO of at most ``queue_limit`` waiting tasks."""

    def __init__(self, size: int, queue_limit: int, hard_timeout_s: float = 30.0,
                 on_event: Callable[[str], None] | None = None):
        self.size = size
        self.queue_limit = queue_limit
        self.hard_timeout_s = hard_timeout_s
        self.on_event = on_event or (lambda _name: None)
        self._ctx = multiprocessing.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)
        self._slots = [Slot(i) for i in range(size)]
        self._queue: collections.deque[Task] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._runners: list[asyncio.Task] = []
        self._tasks: dict[str, Task] = {}
        self._ids = itertools.count(1)
        self._recent: collections.deque[float] = collections.deque(maxlen=50)
        self.ready = False
        self.closing = False
        self.replaced = 0
        self.server_pid = os.getpid()

    # ---- lifecycle --------------------------------------------------------------------
    async def start(self) -> None:
        """Start every worker (the first one also starts the fork server: a second or two)."""
        self._wakeup = asyncio.Event()
        for slot in self._slots:
            await asyncio.to_thread(self._spawn, slot)
        self._runners = [asyncio.create_task(self._run(slot)) for slot in self._slots]
        self.ready = True

    def _spawn(self, slot: Slot) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=worker_main, args=(child, self.server_pid),
                                 daemon=True, name=f"hyperplace-worker-{slot.index}")
        proc.start()
        child.close()
        slot.process, slot.conn, slot.killed = proc, parent, False

    def _kill(self, slot: Slot) -> None:
        if slot.process is not None:
            slot.killed = True
            if slot.process.is_alive():
                slot.process.kill()

    def drain(self) -> None:
        """Stop taking work at once (readyz unready, new work 503) and answer every queued
        task with :class:`Unavailable`; running tasks go on (see :meth:`close`)."""
        self.closing = True
        self.ready = False
        for task in list(self._queue):
            self._fail(task, Unavailable("the server is shutting down; retry on another "
                                         "replica or after the restart"))
        self._queue.clear()
        if self._wakeup is not None:
            self._wakeup.set()

    async def close(self, grace_s: float) -> None:
        """Stop taking work, let running tasks finish for up to ``grace_s``, then stop them
        (their requests are answered :class:`Unavailable`)."""
        self.drain()
        end = time.monotonic() + grace_s
        while any(s.task is not None for s in self._slots) and time.monotonic() < end:
            await asyncio.sleep(0.05)
        for r in self._runners:
            r.cancel()
        for slot in self._slots:
            if slot.task is not None:
                self._fail(slot.task, Unavailable("the server is shutting down: the solve was "
                                                  "stopped at the end of the grace period"))
            if slot.conn is not None:
                slot.conn.close()
            self._kill(slot)
        for slot in self._slots:
            if slot.process is not None:
                await asyncio.to_thread(slot.process.join, 2.0)

    # ---- submitting ---------------------------------------------------------------------
    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    @property
    def busy(self) -> int:
        return sum(1 for s in self._slots if s.task is not None)

    @property
    def alive(self) -> int:
        """Workers whose process is up (a slot being replaced is not)."""
        return sum(1 for s in self._slots if s.process is not None and s.process.is_alive())

    @property
    def accepting(self) -> bool:
        """Whether new work can be queued now (the runners are up and not shutting down)."""
        return self.ready and not self.closing and all(not r.done() for r in self._runners)

    def worker_pids(self) -> list[int | None]:
        return [s.process.pid if s.process is not None else None for s in self._slots]

    def _mean_task_s(self) -> float:
        """The recent typical task time: the median of the last 50 (a worker's first task,
        seconds longer than the rest, must not make every estimate refuse), 1 s before
        anything finished."""
        if not self._recent:
            return 1.0
        ordered = sorted(self._recent)
        return ordered[len(ordered) // 2]

    def retry_after(self) -> float:
        """Seconds until a queue place is likely free: queued work over the workers, at the
        recent mean task time (1 s before anything finished)."""
        return max(1.0, math.ceil(self._mean_task_s() * (len(self._queue) + 1) / self.size))

    def _task_s(self, task: Task, now: float) -> float:
        """How long a task is expected to hold a worker from ``now``: the recent mean task
        time, never more than it may (its deadline plus its grace)."""
        mean = self._mean_task_s()
        grace = self.hard_timeout_s if task.grace_s is None else task.grace_s
        if task.state == "running" and task.started is not None:
            return max(0.0, min(task.started + mean, task.deadline + grace) - now)
        budget = task.budget_s if task.budget_s is not None else task.deadline - now
        return max(0.0, min(mean, budget + grace))

    def expected_wait(self) -> float:
        """Seconds a task queued now would wait for a worker: the running tasks' expected
        ends and the queued tasks after them, each at the recent mean task time but never
        past its own deadline plus grace, assigned to the workers in queue order (0 while a
        worker is idle)."""
        import heapq

        now = time.monotonic()
        free = [self._task_s(s.task, now) if s.task is not None else 0.0 for s in self._slots]
        heapq.heapify(free)
        for task in self._queue:
            if task.cancelled:
                continue
            start = heapq.heappop(free)
            heapq.heappush(free, start + self._task_s(task, now))
        return free[0]

    def submit(self, kind: str, payload: dict[str, Any], deadline: float, *,
               task_id: str | None = None, fetch: Callable[[str, int], Any] | None = None,
               grace_s: float | None = None, budget_s: float | None = None) -> Task:
        """Queue a task; raises :class:`Saturated` or :class:`Unavailable` at once.

        ``budget_s`` (background runs): the task's deadline is set when a worker takes it
        (``budget_s`` from then), so time spent queued is not charged to it; ``deadline``
        then only bounds how long it may wait."""
        if self.closing or not self.ready:
            raise Unavailable("the server is starting or shutting down")
        now = time.monotonic()
        start_by = deadline
        if budget_s is None and deadline <= now:
            # its budget went on reading the request: the floor of any budget (one greedy
            # pass, answered by the hard deadline) only if a worker can take it at once
            grace = self.hard_timeout_s if grace_s is None else grace_s
            idle = any(s.task is None and s.process is not None for s in self._slots) \
                and not any(not t.cancelled for t in self._queue)
            if not idle or deadline + grace <= now:
                raise Expired("its budget ran out before it reached the queue (reading and "
                              "parsing the request took it all) and no worker is free; retry "
                              "with a larger budget or later")
            start_by = now + IDLE_PICKUP_S
        if len(self._queue) >= self.queue_limit:
            raise Saturated(self.retry_after(), f"the queue is full ({self.queue_limit} "
                            f"waiting); retry in {self.retry_after():.0f} s")
        wait = self.expected_wait()
        if budget_s is None and wait > deadline - time.monotonic():
            # it would wait past its whole budget: refuse now rather than answer late
            raise Saturated(self.retry_after(), f"the work ahead would take about {wait:.1f} s "
                            f"of the {max(0.0, deadline - time.monotonic()):.1f} s budget before "
                            f"a worker is free; retry in {self.retry_after():.0f} s or with a "
                            "larger budget")
        task = Task(id=task_id or f"t{next(self._ids)}", kind=kind, payload=payload,
                    deadline=deadline, fetch=fetch, grace_s=grace_s, budget_s=budget_s,
                    start_by=start_by)
        self._tasks[task.id] = task
        self._queue.append(task)
        # answered when it must have started, if no worker took it by then (not when one
        # frees up)
        task.expiry = asyncio.get_running_loop().call_at(
            self._loop_time(start_by), self._expire, task)
        assert self._wakeup is not None
        self._wakeup.set()
        return task

    @staticmethod
    def _loop_time(deadline: float) -> float:
        """A ``time.monotonic()`` instant on the event loop's clock."""
        loop = asyncio.get_running_loop()
        return loop.time() + (deadline - time.monotonic())

    def _expire(self, task: Task) -> None:
        if task.state != "queued" or task.future.done():
            return
        try:
            self._queue.remove(task)
        except ValueError:
            pass
        self._fail(task, Expired("its budget ran out while it waited for a worker; retry, "
                                 "with a larger budget or later"))

    async def run(self, kind: str, payload: dict[str, Any], deadline: float, **kw: Any) -> Reply:
        task = self.submit(kind, payload, deadline, **kw)
        return await task.future

    def cancel(self, task_id: str) -> bool:
        """Cancel a queued task, or stop a running one by killing its worker (a fresh worker
        takes its place). False when the task is unknown or already finished."""
        task = self._tasks.get(task_id)
        if task is None or task.future.done():
            return False
        task.cancelled = True
        if task.state == "queued":
            try:
                self._queue.remove(task)
            except ValueError:
                pass
            self._fail(task, Cancelled("cancelled before it started"))
            return True
        for slot in self._slots:
            if slot.task is task:
                self._kill(slot)  # the runner sees EOF, fails the task, replaces the worker
        return True

    def _fail(self, task: Task, exc: Exception) -> None:
        self._tasks.pop(task.id, None)
        if task.expiry is not None:
            task.expiry.cancel()
        if not task.future.done():
            task.future.set_exception(exc)

    # ---- running -----------------------------------------------------------------------
    async def _next(self) -> Task:
        assert self._wakeup is not None
        while True:
            while self._queue:
                task = self._queue.popleft()
                if not task.cancelled:
                    return task
            self._wakeup.clear()
            await self._wakeup.wait()

    async def _run(self, slot: Slot) -> None:
        while not self.closing:
            task = await self._next()
            if self.closing:
                self._fail(task, Unavailable("the server is shutting down"))
                break
            if self._queue and self._wakeup is not None:
                self._wakeup.set()  # let another idle runner take the next one
            if task.start_by <= time.monotonic():
                self._fail(task, Expired("its budget ran out while it waited for a worker; "
                                         "retry, with a larger budget or later"))
                continue
            if task.expiry is not None:
                task.expiry.cancel()
            task.state, task.started = "running", time.monotonic()
            if task.budget_s is not None:
                task.deadline = task.started + task.budget_s
            slot.task = task
            if task.on_start is not None:
                task.on_start()
            try:
                reply = await self._exchange(slot, task)
            except HandOffFailed as exc:  # nothing reached the worker: the slot is as it was
                self._fail(task, exc)
            except TimeoutError:  # before OSError: TimeoutError is one
                self._kill(slot)
                self.on_event("timeout")
                grace = self.hard_timeout_s if task.grace_s is None else task.grace_s
                self._fail(task, WorkerTimedOut(f"no answer within the budget plus {grace:g} s "
                                                "(the machine is busier than the budget "
                                                "allows); the solve was stopped"))
                await self._replace(slot)
            except (EOFError, OSError):
                # answer first, then replace the worker (a fork can take seconds when busy)
                code = slot.process.exitcode if slot.process is not None else None
                if task.cancelled:
                    self._fail(task, Cancelled("cancelled while running; its worker was stopped"))
                else:
                    self.on_event("crash")
                    self._fail(task, WorkerCrashed(f"the worker process died (exit code {code}); "
                                                   "it has been replaced"))
                await self._replace(slot)
            except asyncio.CancelledError:
                self._fail(task, Unavailable("the server is shutting down"))
                raise
            except Exception as exc:  # noqa: BLE001 - a bug here must not end the slot's runner
                log.exception("worker slot %d: unexpected failure", slot.index)
                self._fail(task, WorkerCrashed(f"internal error handing the task to a worker: "
                                               f"{type(exc).__name__}; the worker was replaced"))
                self._kill(slot)
                await self._replace(slot)
            else:
                self._recent.append(time.monotonic() - task.started)
                if task.cancelled:  # DELETE said "cancelled": the answer that came anyway
                    self._fail(task, Cancelled("cancelled while running; its worker was "
                                               "stopped"))
                else:
                    self._tasks.pop(task.id, None)
                    if not task.future.done():
                        task.future.set_result(reply)
                if slot.killed:
                    # the answer was already in the pipe when cancel killed the worker: the
                    # next task must not be sent to the dead process (it failed as "worker
                    # died, exit code -9", a 500 for an unrelated request or run)
                    await self._replace(slot)
            finally:
                slot.task = None

    async def _replace(self, slot: Slot) -> None:
        """Kill and reap the slot's worker, then start a fresh one: the old solver is gone
        before the new one exists, so never more than ``size`` solve at once."""
        if slot.conn is not None:
            slot.conn.close()
            slot.conn = None
        if slot.process is not None:
            self._kill(slot)
            while slot.process.is_alive():
                await asyncio.to_thread(slot.process.join, 1.0)
                self._kill(slot)
            slot.process = None
        if not self.closing:
            await asyncio.to_thread(self._spawn, slot)
        self.replaced += 1

    @staticmethod
    def _pickle(obj: Any) -> bytes:
        try:
            return bytes(ForkingPickler.dumps(obj))
        except RecursionError:
            raise HandOffFailed("the request is nested too deeply to hand to a worker") from None
        except Exception as exc:  # noqa: BLE001 - anything unpicklable fails this task only
            raise HandOffFailed(f"the request could not be handed to a worker: "
                                f"{type(exc).__name__}") from None

    async def _send(self, conn: Any, obj: Any) -> None:
        """Pickle (first, whole) and write in a thread: a large payload never stalls the
        loop, and a payload that does not pickle never leaves half a message in the pipe."""
        def send() -> None:
            conn.send_bytes(self._pickle(obj))
        await asyncio.to_thread(send)

    async def _exchange(self, slot: Slot, task: Task) -> Reply:
        conn = slot.conn
        grace = self.hard_timeout_s if task.grace_s is None else task.grace_s
        limit = max(0.0, task.deadline - time.monotonic()) + grace

        async def talk() -> Reply:
            await self._send(conn, (task.kind, task.payload, task.deadline))
            while True:
                msg = await self._recv(conn)
                if msg[0] == "need":  # a stored cluster this worker has not cached
                    _, name, version = msg
                    try:
                        await self._send(conn, task.fetch(name, version) if task.fetch else None)
                    except HandOffFailed as exc:  # the worker waits for it: replace the worker
                        raise RuntimeError(str(exc)) from None
                    continue
                _, status, body, info = msg
                return Reply(status, body, info)

        return await asyncio.wait_for(talk(), timeout=limit)

    async def _recv(self, conn: Any) -> Any:
        loop = asyncio.get_running_loop()
        readable: asyncio.Future[None] = loop.create_future()
        fd = conn.fileno()

        def wake() -> None:
            if not readable.done():
                readable.set_result(None)

        loop.add_reader(fd, wake)
        try:
            await readable
        finally:
            loop.remove_reader(fd)
        return conn.recv()
