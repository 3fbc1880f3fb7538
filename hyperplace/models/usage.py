"""Usage history across rounds: per-queue GPU-hours with a half-life decay, and the fair-share
factor that turns it into this round's fair-share weights (as Slurm's multifactor priority
plugin does for accounts).

A per-round fair share only sees what runs *now*. A queue whose jobs never win a tie (its
jobs are larger, so the other queue's plan admits more jobs for the same GPUs) can wait for
ever while both queues look equally served at every round. Remembering who got the GPUs over
the last hours fixes that: a queue that used less than its weight entitles it to is preferred
until the history evens out, and old usage is forgotten with a half-life.

The rules re-implement Slurm's, read from SchedMD/slurm at commit 284c3b9,
``src/plugins/priority/multifactor/priority_multifactor.c``:

* **Decay.** Every cycle of the decay thread first multiplies every association's raw usage
  by ``decay_factor ** elapsed_seconds`` (``_decay_thread``, line 1443, applied by
  ``_apply_decay``, line 206, ``usage_raw *= real_decay`` at line 176), then adds each running
  job's usage over the cycle, itself decayed by the same factor:
  ``run_delta * pow(decay_factor, run_delta) * billable_tres`` (``_apply_new_usage``, lines
  1182 and 1190). So over an interval of ``dt`` seconds in which a queue holds ``G`` GPUs,
  ``U <- (U + G * dt) * d(dt)``. Slurm's per-second factor is ``1 - 0.693 / half_life``
  (``_init_decay_vars``, lines 1640-1677, whose comment derives it as the first-order
  expansion of ``exp(ln(1/2) / half_life)``); we use the exact ``d(dt) = 2 ** (-dt /
  half_life)``, so usage halves in exactly one half-life.
* **Fair-share factor.** ``F = 2 ** (-U_norm / S_norm)`` (the comment at lines 1707-1727:
  ``priority_fs = pow(2.0, -(usage_efctv / shares_norm))``), where ``U_norm`` is the queue's
  usage over the total usage (``set_assoc_usage_norm``, lines 1931-1948; 0 for everyone when
  nobody has used anything) and ``S_norm`` its weight over the total weight. A queue that used
  exactly its share has ``F = 1/2``; one that used nothing ``F = 1``.

Where Slurm sorts *jobs* by a priority that adds ``F`` with other factors, hyperplace keeps
priority strict and uses ``F`` in the fair-share objective that comes right after it: each
queue's fair-share weight for the round is ``weight * F`` (see
:func:`hyperplace.formulations.placement.quotas.build_quota_book`), so the water-filled share
of a queue that got less over recent rounds is larger. When every queue used exactly what its
weight entitles it to, all factors are equal and the shares are the plain per-round ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hyperplace.models.queue import DEFAULT_QUEUE

if TYPE_CHECKING:
    from hyperplace.models.instance import Instance
    from hyperplace.models.queue import QueueSet

SECONDS_PER_HOUR = 3600.0


def decay_factor(elapsed_s: float, half_life_s: float | None) -> float:
    """What is left of usage after ``elapsed_s`` seconds: ``2 ** (-elapsed_s / half_life_s)``
    (1 without a half-life: usage is then kept whole)."""
    if half_life_s is None or not math.isfinite(half_life_s) or half_life_s <= 0:
        return 1.0
    return float(2.0 ** (-max(0.0, elapsed_s) / half_life_s))


def fair_share_factors(usage: Mapping[str, float], weights: Mapping[str, float]
                       ) -> dict[str, float]:
    """Slurm's fair-share factor ``2 ** (-U_norm / S_norm)`` of every queue in ``weights``.

    Parameters
    ----------
    usage : mapping
        Decayed usage per queue (any unit; only the ratios matter); queues not listed used 0.
    weights : mapping
        Fair-share weight of every queue taking part (the ``S_norm`` denominators sum over
        these); non-positive weights count as the smallest positive one.
    """
    total_use = sum(max(0.0, usage.get(q, 0.0)) for q in weights)
    positive = [w for w in weights.values() if w > 0]
    floor = min(positive) if positive else 1.0
    w = {q: (x if x > 0 else floor) for q, x in weights.items()}
    total_w = sum(w.values())
    out = {}
    for q in weights:
        u_norm = max(0.0, usage.get(q, 0.0)) / total_use if total_use > 0 else 0.0
        out[q] = 2.0 ** (-u_norm / (w[q] / total_w))
    return out


@dataclass
class QueueUsage:
    """Decayed GPU-hours per queue, advanced as time passes: the one home of the
    accumulate-and-decay rule, kept by the one round state
    (:class:`hyperplace.solvers.workflows.session.RoundState`: the simulator's round loop,
    :class:`~hyperplace.solvers.workflows.session.PlacementSession` and the service drive it;
    the service's SQLite store keeps each stored cluster's round state's history).

    ``half_life_s`` None (or 0) keeps no history: :meth:`snapshot` is then empty and every
    round's fair share is the plain per-round one.
    """

    half_life_s: float | None
    gpu_hours: dict[str, float] = field(default_factory=dict)
    time_s: float | None = None

    @property
    def enabled(self) -> bool:
        return self.half_life_s is not None and self.half_life_s > 0

    def advance(self, now_s: float, gpus_by_queue: Mapping[str, float]) -> None:
        """Move to ``now_s``: each queue held ``gpus_by_queue[q]`` GPUs since the last call.

        ``U <- (U + G * dt) * 2 ** (-dt / half_life)`` with ``dt`` in seconds and ``U`` in
        GPU-hours (Slurm's ordering, see the module docstring).
        """
        if not self.enabled:
            self.time_s = now_s
            return
        if self.time_s is None:
            self.time_s = now_s
            return
        dt = now_s - self.time_s
        if dt <= 0:
            return
        d = decay_factor(dt, self.half_life_s)
        for q in set(self.gpu_hours) | set(gpus_by_queue):
            used = self.gpu_hours.get(q, 0.0) + gpus_by_queue.get(q, 0.0) * dt / SECONDS_PER_HOUR
            self.gpu_hours[q] = used * d
        self.time_s = now_s

    def snapshot(self) -> dict[str, float]:
        """The decayed GPU-hours per queue as an Instance's ``spec.queueUsage`` (empty when
        no history is kept or nothing has run yet)."""
        if not self.enabled:
            return {}
        return {q: round(u, 9) for q, u in sorted(self.gpu_hours.items()) if u > 0}

    def to_doc(self) -> dict[str, Any]:
        """``{"timeS", "gpuHours"}``: what a store keeps to carry the history on."""
        return {"timeS": self.time_s, "gpuHours": dict(sorted(self.gpu_hours.items()))}

    @classmethod
    def from_doc(cls, half_life_s: float | None, doc: Mapping[str, Any]) -> "QueueUsage":
        """The history :meth:`to_doc` wrote, under (possibly another) half-life."""
        return cls(half_life_s, {str(q): float(u) for q, u in doc.get("gpuHours", {}).items()},
                   doc.get("timeS"))


def held_gpus_by_queue(instance: "Instance") -> dict[str, int]:
    """GPUs each queue holds in ``instance``: every running job's GPUs (``node.allocated``)
    count towards its queue (``spec.runningJobs``; ``default`` when it is not listed)."""
    info = instance.running_job_info
    held: dict[str, int] = {}
    for job, gpus in instance.running_jobs().items():
        queue = info[job].queue if job in info else DEFAULT_QUEUE
        held[queue] = held.get(queue, 0) + gpus
    return held


def known_queue_usage(queue_set: "QueueSet | None", gpu_hours: Mapping[str, float]
                      ) -> dict[str, float]:
    """``gpu_hours`` as a ``spec.queueUsage``: positive values of the queues ``queue_set``
    declares (``default`` alone without declared queues), sorted by queue."""
    return {q: float(u) for q, u in sorted(gpu_hours.items())
            if u > 0 and (queue_set.known(q) if queue_set is not None else q == DEFAULT_QUEUE)}


def with_queue_usage(instance: "Instance", gpu_hours: Mapping[str, float]) -> "Instance":
    """``instance`` with ``gpu_hours`` as its ``spec.queueUsage``, keeping only queues it
    declares (a queue dropped from the documents since takes no part); the same object when
    nothing changes. Derived values cached on the instance stay (none depends on the usage).
    """
    usage = known_queue_usage(instance.queue_set, gpu_hours)
    if usage == instance.spec.queue_usage:
        return instance
    spec = instance.spec.model_copy(update={"queue_usage": usage})
    return instance.model_copy(update={"spec": spec})
