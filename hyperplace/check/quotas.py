"""Quota rules of a plan, re-derived from the queue documents (independent of the model).

Written apart from ``formulations/placement/quotas.py`` on purpose: it recounts usage per
queue and GPU type from the plan's GPUs and the nodes' running jobs and applies the rules
as stated in the README (per queue: usage <= nominal + borrowing limit, nominal alone
without a cohort; per cohort: borrowed <= lent; a type no quota of a declared queue covers
is not usable; a round may not make a limit worse than its running jobs already had it).
"""

from __future__ import annotations

from collections import defaultdict

from hyperplace.models.instance import Instance
from hyperplace.models.queue import ANY_TYPE, QueueSet

Usage = dict[tuple[str, str], int]  # (queue, GPU type) -> GPUs


def key_matches(key: str, gpu_type: str) -> bool:
    if key == ANY_TYPE:
        return True
    name = gpu_type.upper()
    return name == key or name.startswith(key + "-")


def used_per_key(qs: QueueSet, usage: Usage, queue: str, key: str) -> int:
    return sum(n for (q, t), n in usage.items() if q == queue and key_matches(key, t))


def running_usage(instance: Instance) -> Usage:
    """GPUs held by running jobs per (queue, GPU type)."""
    info = instance.running_job_info
    out: Usage = defaultdict(int)
    for c in instance.clusters:
        for n in c.nodes:
            for holder in n.allocated.values():
                out[(info[holder].queue if holder in info else "default", n.gpu_type)] += 1
    return out


def quota_problems(instance: Instance, admitted: Usage) -> list[str]:
    """Every quota rule that ``admitted`` (GPUs per (queue, type) admitted now) breaks.

    Returns
    -------
    list of str
        One sentence per broken rule (empty: all hold).
    """
    qs = instance.queue_set
    if qs is None:
        return []
    run = running_usage(instance)
    total: Usage = defaultdict(int)
    for k, v in run.items():
        total[k] += v
    for k, v in admitted.items():
        total[k] += v
    out: list[str] = []
    for (queue, gpu_type), n in admitted.items():
        if n and queue in qs.queues and not any(key_matches(k, gpu_type) for k in qs.queues[queue].quotas):
            out.append(f"queue {queue} has no quota covering {gpu_type} but was given {n} of them")
    cohorts: dict[tuple[str, str], list[str]] = defaultdict(list)
    for q in qs.queues.values():
        for key, quota in q.quotas.items():
            before = used_per_key(qs, run, q.name, key)
            after = used_per_key(qs, total, q.name, key)
            limit = quota.nominal + quota.borrowing_limit if q.cohort else quota.nominal
            if after > max(limit, before):
                out.append(f"queue {q.name} uses {after} {key} GPUs, over its limit of {limit:g}")
            if q.cohort and q.source != "volcano":  # Volcano queues borrow from the cluster
                cohorts[(qs.root_cohort(q.cohort), key)].append(q.name)
    for (cohort, key), names in cohorts.items():
        def overdraft(usage: Usage) -> float:
            borrowed = lent = 0.0
            for name in names:
                quota = qs.queues[name].quotas[key]
                use = used_per_key(qs, usage, name, key)
                borrowed += max(0.0, use - quota.nominal)
                lent += min(min(quota.nominal, quota.lending_limit), max(0.0, quota.nominal - use))
            return borrowed - lent
        if overdraft(total) > max(0.0, overdraft(run)) + 1e-9:
            out.append(f"cohort {cohort} borrows more {key} GPUs than its queues lend "
                       f"({overdraft(total):g} over)")
    return out
