"""Quotas and fair share of a round, as the model, greedy and the explanations see them.

The rules (documented in the README; the checker re-derives them independently):

* A GPU of type ``T`` admitted for a job of queue ``q`` counts against every quota key of
  ``q`` that covers ``T`` (the key equals ``T`` or its family, e.g. ``H100`` covers
  ``H100-80``; ``*`` covers every type). A type no key of a declared queue covers cannot be
  used by that queue (Kueue admits only onto flavors its ClusterQueue lists). The
  ``default`` queue, when not declared, has no quotas.
* **Per queue**: usage (running + admitted now) <= nominal + borrowing limit; a queue with no
  cohort cannot borrow (usage <= nominal).
* **Per cohort and key** (Kueue): what its queues borrow, ``sum max(0, usage - nominal)``,
  is at most what they lend, ``sum min(lendingLimit, max(0, nominal - usage))``. Volcano
  queues borrow from the cluster itself: their ``capability`` and the free GPUs limit them.
* Running jobs keep their GPUs, so a round never makes these worse than they already are:
  where the running jobs alone already exceed a limit (a quota was lowered), the limit
  becomes "no further use" instead of an infeasible round.
* **Fair share** (an objective after priority): each queue's share of the GPUs is its
  weighted max-min fair share given its demand (running + pending), by water-filling; the
  objective maximises the GPUs admitted *within* each queue's remaining share, so among
  plans of equal priority-weighted demand the one that serves under-served queues first wins.
  With usage history (``spec.queueUsage``, decayed GPU-hours of earlier rounds) each queue's
  weight is multiplied by Slurm's fair-share factor ``2 ** (-usage share / weight share)``
  (``usage.py``), so a queue that got less over recent rounds is preferred.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from hyperplace.models.usage import fair_share_factors
from hyperplace.models.instance import Instance
from hyperplace.models.queue import ANY_TYPE, Queue, QueueSet

UNCOVERED = "~uncovered"


def covers(key: str, gpu_type: str) -> bool:
    """True when quota key ``key`` (a type, a family or ``*``) covers GPU type ``gpu_type``."""
    t = gpu_type.upper()
    return key == ANY_TYPE or t == key or t.startswith(key + "-")


@dataclass(frozen=True)
class QuotaRow:
    """One limit on a (queue, key): admitted-now GPUs <= ``headroom``."""

    queue: str
    key: str
    headroom: float
    over: bool = False  # the running jobs alone exceed the limit (no further use at all)


@dataclass
class CohortRow:
    """One cohort and key: what its queues borrow <= what they lend (plus any overdraft the
    running jobs already have, which a round may not increase)."""

    cohort: str
    key: str
    members: list[Queue]
    running: dict[str, float]  # queue -> running GPUs counted against the key
    slack: float  # right-hand side: max(0, overdraft with nothing admitted)


def ceiling(queue: Queue, key: str) -> float:
    """The most GPUs of quota key ``key`` that ``queue`` may ever hold: nominal + borrowing
    limit in a cohort (a Volcano Queue's capability), its nominal quota without one."""
    quota = queue.quotas[key]
    return quota.cap if queue.cohort is not None else quota.nominal


@dataclass(frozen=True)
class Inadmissible:
    """Why a queue can never admit a job, whatever else runs (:meth:`QuotaBook.inadmissible`):
    on each GPU type the job could use, no quota key of the queue covers the type
    (``uncovered``) or a key's :func:`ceiling` is below the job's ``gpus`` (``capped``:
    type, key, ceiling)."""

    queue: str
    gpus: int
    uncovered: tuple[str, ...]
    capped: tuple[tuple[str, str, float], ...]


@dataclass
class QuotaBook:
    """Quota rows and fair shares of one round (inactive when no queues are declared)."""

    queues: QueueSet | None
    job_queue: list[str]
    running: dict[tuple[str, str], float] = field(default_factory=dict)
    rows: list[QuotaRow] = field(default_factory=list)
    cohort_rows: list[CohortRow] = field(default_factory=list)
    shares: dict[str, float] = field(default_factory=dict)
    running_total: dict[str, float] = field(default_factory=dict)

    @property
    def active(self) -> bool:
        return self.queues is not None

    def keys_for(self, queue: str, gpu_type: str) -> list[str]:
        """The quota keys a GPU of ``gpu_type`` used by ``queue`` counts against
        (``[UNCOVERED]`` when the queue is declared but covers no such type)."""
        if self.queues is None or queue not in self.queues.queues:
            return []
        keys = [k for k in self.queues.queues[queue].quotas if covers(k, gpu_type)]
        return keys or [UNCOVERED]

    def allows(self, new: Mapping[tuple[str, str], float],
               stopped: Mapping[tuple[str, str], float] | None = None) -> bool:
        """Whether admitting ``new`` GPUs per (queue, key) keeps every limit (greedy).

        ``stopped``: GPUs per (queue, key) of running jobs the round preempts (they no
        longer count). The limits are then those of the running jobs that keep running: a
        queue whose running jobs still exceed a limit may not use more of it, and a
        cohort's overdraft may not grow past what the jobs kept already have.
        """
        if not self.active:
            return True
        stopped = stopped or {}
        for row in self.rows:
            gone = stopped.get((row.queue, row.key), 0)
            use = new.get((row.queue, row.key), 0)
            if use - (0 if row.over else gone) > row.headroom + 1e-9 and \
                    not (row.over and use <= 0):
                return False
        for c in self.cohort_rows:
            credit = {k: -v for k, v in stopped.items()}
            total = {k: new.get(k, 0) - stopped.get(k, 0) for k in {*new, *stopped}}
            if _overdraft(c, total) > max(0.0, _overdraft(c, credit)) + 1e-9:
                return False
        return True

    def inadmissible(self, queue: str, types: Iterable[str], gpus: int) -> Inadmissible | None:
        """Why ``queue`` can never admit a job of ``gpus`` GPUs on any of ``types`` (the GPU
        types it could use), or None when some type could admit it once enough is free.

        The one check behind the pending reason (``explain``) and the plan's
        ``PendingJob.inadmissible``, which the forecast reads (it plans no start for such a
        job: the over-time schedule has no quotas)."""
        if self.queues is None or queue not in self.queues.queues:
            return None
        uncovered: list[str] = []
        capped: list[tuple[str, str, float]] = []
        for t in sorted(types):
            why = self.never_on(queue, t, gpus)
            if why is None:
                return None
            if why == UNCOVERED:
                uncovered.append(t)
            else:
                capped.append((t, *why))
        if not uncovered and not capped:
            return None
        return Inadmissible(queue, gpus, tuple(uncovered), tuple(capped))

    def never_on(self, queue: str, gpu_type: str, gpus: int
                 ) -> str | tuple[str, float] | None:
        """Why declared ``queue`` can never hold ``gpus`` GPUs of ``gpu_type``:
        :data:`UNCOVERED`, or the first key covering it and that key's :func:`ceiling`
        below ``gpus``; None when it could."""
        assert self.queues is not None
        keys = self.keys_for(queue, gpu_type)
        if UNCOVERED in keys:
            return UNCOVERED
        q = self.queues.queues[queue]
        return next(((k, ceiling(q, k)) for k in keys if gpus > ceiling(q, k) + 1e-9), None)

    def usage(self, queue: str, gpu_type: str, gpus: int) -> dict[tuple[str, str], float]:
        """``gpus`` GPUs of ``gpu_type`` for ``queue``, as per-key usage."""
        return {(queue, k): gpus for k in self.keys_for(queue, gpu_type)}


def overdraft(c: CohortRow, new: Mapping[tuple[str, str], float]) -> float:
    """What the cohort's queues borrow beyond what they lend with ``new`` GPUs per
    (queue, key) on top of the running jobs (negative: GPUs no longer used)."""
    return _overdraft(c, new)


def _overdraft(c: CohortRow, new: Mapping[tuple[str, str], float]) -> float:
    borrowed = lent = 0.0
    for q in c.members:
        quota = q.quotas[c.key]
        use = c.running.get(q.name, 0) + new.get((q.name, c.key), 0)
        borrowed += max(0.0, use - quota.nominal)
        lent += min(quota.lendable, max(0.0, quota.nominal - use))
    return borrowed - lent


def water_fill(capacity: float, demand: Mapping[str, float], weight: Mapping[str, float]
               ) -> dict[str, float]:
    """Weighted max-min fair shares of ``capacity`` among queues with ``demand``: the level
    ``L`` with ``sum min(demand_q, L * weight_q) = capacity`` (everyone's demand if it fits)."""
    active = {q: d for q, d in demand.items() if d > 0}
    if sum(active.values()) <= capacity:
        return dict(active)
    shares: dict[str, float] = {}
    left = capacity
    order = sorted(active, key=lambda q: active[q] / weight[q])
    wsum = sum(weight[q] for q in order)
    for q in order:
        fair = left * weight[q] / wsum
        shares[q] = min(active[q], fair)
        left -= shares[q]
        wsum -= weight[q]
    return shares


def build_quota_book(instance: Instance, job_names: list[str],
                     pending_gpus: Mapping[str, int]) -> QuotaBook:
    """Rows for every declared queue and cohort, and the fair shares.

    Parameters
    ----------
    instance : Instance
        The round; its ``spec.queues`` and ``spec.runningJobs``.
    job_names : list of str
        Pending jobs in the problem's order (their queues are looked up once).
    pending_gpus : mapping
        GPUs each pending job asks for (jobs that cannot run at all left out), for the
        fair-share demand.
    """
    qs = instance.queue_set
    by_name = {j.name: j for j in instance.jobs}
    job_queue = [instance.queue_of(by_name[n]) for n in job_names]
    book = QuotaBook(queues=qs, job_queue=job_queue)
    if qs is None:
        return book
    info = instance.running_job_info
    total_gpus = 0
    for c in instance.clusters:
        for n in c.nodes:
            total_gpus += n.gpu_count - len(n.faulty)
            for holder in n.allocated.values():
                queue = info[holder].queue if holder in info else "default"
                book.running_total[queue] = book.running_total.get(queue, 0) + 1
                for k in book.keys_for(queue, n.gpu_type):
                    book.running[(queue, k)] = book.running.get((queue, k), 0) + 1
    cohorts: dict[tuple[str, str], list[Queue]] = defaultdict(list)
    for q in qs.queues.values():
        for key, quota in [*q.quotas.items(), (UNCOVERED, None)]:
            run = book.running.get((q.name, key), 0)
            if quota is None:
                book.rows.append(QuotaRow(q.name, key, 0.0))
                continue
            cap = ceiling(q, key)
            if math.isfinite(cap):
                book.rows.append(QuotaRow(q.name, key, max(0.0, cap - run), over=run > cap))
            if q.cohort is not None and q.source != "volcano":
                # Volcano queues borrow from the cluster, not from each other's guarantees:
                # their cap (capability) and the free GPUs are the limits
                cohorts[(qs.root_cohort(q.cohort), key)].append(q)
    for (cohort, key), members in sorted(cohorts.items()):
        running = {q.name: book.running.get((q.name, key), 0) for q in members}
        row = CohortRow(cohort, key, members, running, 0.0)
        row.slack = max(0.0, _overdraft(row, {}))
        book.cohort_rows.append(row)
    demand: dict[str, float] = defaultdict(float)
    for name_q, run in book.running_total.items():
        demand[name_q] += run
    for name, queue in zip(job_names, job_queue):
        demand[queue] += pending_gpus.get(name, 0)
    weight = {q: (qs.queues[q].weight if q in qs.queues else 1.0) for q in demand}
    book.shares = water_fill(total_gpus, demand, _with_history(weight, qs, instance))
    return book


def _with_history(weight: dict[str, float], qs: QueueSet, instance: Instance
                  ) -> dict[str, float]:
    """Fair-share weights of the round: ``weight * F`` with Slurm's fair-share factor ``F`` of
    the queues' decayed usage (``spec.queueUsage``; see ``usage.py``), so a queue that got
    less over recent rounds gets a larger share. Unchanged without usage history."""
    usage = instance.spec.queue_usage
    if not usage or not weight:
        return weight
    every = {q.name: q.weight for q in qs.queues.values()}
    for q in (*weight, *usage):
        every.setdefault(q, 1.0)
    factor = fair_share_factors(usage, every)
    return {q: w * factor[q] for q, w in weight.items()}
