"""Independent check of a plan's ``preemptions[]``.

Recomputed from the instance, not from the solver's bookkeeping:

* each victim is a running job (``preempt-unknown``), listed once (``preempt-duplicate``),
  with its GPUs and lost work (GPUs x ``checkpointAgeS``) stated right (``preempt-lost-work``);
* each preemption was needed (``preempt-unneeded``): with that victim put back (running
  on its GPUs, every other preemption kept), the plan's placements are checked again by
  the placement rules (:func:`hyperplace.check.check`, on the instance with only the
  other victims released) and must then break one that they do not break with every
  victim released: a GPU of the victim used twice, or a quota exceeded (a queue that
  reclaims its nominal quota may need a borrower stopped wherever it runs). A plan that
  stays valid with the victim kept would be higher on objective 1 without the preemption
  (the running job counts there), so the preemption was not needed;
* preempted GPUs are reused only by jobs allowed to stop the victim under the plan's
  ``preemptionPolicy`` (``preempt-reuse``), by the one rule
  :class:`hyperplace.models.preemption_policy.StopRule`: jobs of the victim's own queue
  that outrank it, or, with ``why: reclaim-within-cohort``, jobs of another queue of its
  cohort when the victim's queue was borrowing;
* a victim whose GPUs nobody reuses (stopped for quota) was stopped for an admitted job
  allowed to stop it (``preempt-stopper``): a stop may not free its queue's or its
  cohort's quota for a job of another queue that could not stop it itself;
* reclaim restores a nominal quota, no more (``preempt-reclaim``): a queue whose jobs reuse
  a victim's GPUs by reclaiming (jobs of another queue) uses, after the round (running
  jobs kept + admitted now), at most its nominal quota on every key covering the victim's
  GPUs; a victim stopped for quota by reclaiming needs one such queue. Kueue lets a
  preemptor stop workloads of other ClusterQueues only when it then fits without borrowing
  (kueue at ff69552, ``pkg/scheduler/preemption/classical/hierarchical_preemption.go``
  ``classifyPreemptionVariant`` L103-105: ``ReclaimWithoutBorrowing`` unless
  ``borrowWithinCohort`` is set; ``pkg/scheduler/preemption/preemption.go``
  ``workloadFits`` L669-676 with ``allowBorrowing=false``); and a queue reclaimed from
  keeps its guarantee: all but the last of its stopped jobs leave it above its nominal
  quota (``classical/candidate_generator.go`` ``candidateIsValid`` L136-157).

The rest of the plan is then checked against the instance with the victims released and
their unused GPUs kept out of reach (see :func:`hyperplace.models.sharing.released`).
"""

from __future__ import annotations

from collections.abc import Callable

from hyperplace.check.quotas import Usage, key_matches, used_per_key, running_usage
from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.preemption_policy import (
    LOWER_PRIORITY,
    POLICIES,
    RECLAIM,
    StopRule,
    nominal_total,
    queue_use,
    reclaim_keeps_guarantee,
)
from hyperplace.models.sharing import released, running_gpus


def preemption_problems(plan: PlacementPlan, instance: Instance
                        ) -> tuple[list[tuple[str, str, str]], Instance]:
    """(code, job, message) for each broken preemption rule, and the released instance the
    rest of the plan must be valid on."""
    out: list[tuple[str, str, str]] = []
    held = running_gpus(instance)
    info = instance.running_job_info
    jobs = {j.name: j for j in instance.jobs}
    user: dict[tuple[str, int], str] = {}
    for u in plan.placements:
        for g in u.gpus:
            user[(g.node, g.gpu)] = u.job
    seen: set[str] = set()
    reserve: set[tuple[str, int]] = set()
    # a plan without its policy is judged by the most permissive one
    policy = plan.preemption_policy if plan.preemption_policy in POLICIES else RECLAIM
    rule = StopRule.of(instance, policy)
    reclaims: dict[str, set[str]] = {}  # victim -> queues that reuse its GPUs by reclaiming
    quota_only: dict[str, set[str]] = {}  # victim nobody reuses -> queues that may reclaim it
    admitted = {u.job for u in plan.placements}
    for p in plan.preemptions:
        if p.job in seen:
            out.append(("preempt-duplicate", p.job, "preempted twice"))
            continue
        seen.add(p.job)
        if p.job not in held:
            out.append(("preempt-unknown", p.job, "is not a running job of the instance"))
            continue
        gpus = held[p.job]
        lost = len(gpus) * info[p.job].checkpoint_age_s
        if p.gpus != len(gpus) or abs(p.lost_gpu_seconds - lost) > 1e-6 * max(1.0, lost):
            out.append(("preempt-lost-work", p.job,
                        f"holds {len(gpus)} GPUs, {lost:g} GPU-seconds since its checkpoint; "
                        f"the plan says {p.gpus} and {p.lost_gpu_seconds:g}"))
        users = {user[g] for g in gpus if g in user}
        reserve |= {g for g in gpus if g not in user}
        victim = info[p.job]
        for name in sorted(users):
            job = jobs.get(name)
            if job is None:
                continue  # an unknown job is reported by the placement check
            queue = instance.queue_of(job)
            why = rule.why(queue, job.priority, victim.queue, victim.priority)
            if why == RECLAIM and p.why == RECLAIM:
                reclaims.setdefault(p.job, set()).add(queue)
                continue
            if why is not None and why != RECLAIM:
                continue
            out.append(("preempt-reuse", p.job,
                        f"its GPUs go to {name!r} (queue {queue}, priority {job.priority}), "
                        f"which may not stop it (queue {victim.queue}, priority "
                        f"{victim.priority}) under {policy}"
                        + (": only by reclaiming within the cohort, and the plan says "
                           f"{p.why}" if why == RECLAIM else "")))
        if not users:  # stopped for quota: some admitted job must be allowed to stop it
            ways = {(rule.why(instance.queue_of(jobs[j]), jobs[j].priority, victim.queue,
                              victim.priority), instance.queue_of(jobs[j]))
                    for j in admitted if j in jobs}
            if any(why == LOWER_PRIORITY for why, _ in ways):
                continue
            if p.why == RECLAIM and any(why == RECLAIM for why, _ in ways):
                quota_only[p.job] = {q for why, q in ways if why == RECLAIM}
                continue
            out.append(("preempt-stopper", p.job,
                        f"no admitted job may stop it under {policy} (a stop may not free "
                        "quota for a job that could not stop it itself)"))
    victims = [p.job for p in plan.preemptions if p.job in held]
    if reclaims or quota_only:
        out += _reclaim_problems(plan, instance, victims, reclaims, quota_only)
    out += _guarantee_problems(plan, instance, victims)
    base = _recheck(plan, instance, victims, reserve)
    for v in dict.fromkeys(victims):
        if not _recheck(plan, instance, [x for x in victims if x != v],
                        reserve - set(held[v])) - base:
            out.append(("preempt-unneeded", v,
                        "the plan stays valid with it running: it could keep running"))
    return out, released(instance, victims, reserve=reserve)


def _nominal_excess(plan: PlacementPlan, instance: Instance, victims: list[str]
                   ) -> Callable[[str, str], list[str]]:
    """(victim, queue) -> how the queue, after the round (running jobs kept + admitted now),
    exceeds its nominal quota on the keys covering the victim's GPUs (empty: within)."""
    qs = instance.queue_set
    assert qs is not None
    info = instance.running_job_info
    jobs = {j.name: j for j in instance.jobs}
    types = {(n.name): n.gpu_type for c in instance.clusters for n in c.nodes}
    after: Usage = dict(running_usage(instance))
    held = running_gpus(instance)
    for v in dict.fromkeys(victims):
        for node, _ in held[v]:
            key = (info[v].queue, types[node])
            after[key] = after.get(key, 0) - 1
    for u in plan.placements:
        if u.job in jobs:
            for g in u.gpus:
                if g.node in types:
                    key = (instance.queue_of(jobs[u.job]), types[g.node])
                    after[key] = after.get(key, 0) + 1

    def excess(v: str, q: str) -> list[str]:
        victim_types = {types[node] for node, _ in held[v]}
        out = []
        for key, quota in qs.queues[q].quotas.items() if q in qs.queues else ():
            if not any(key_matches(key, t) for t in victim_types):
                continue
            use = used_per_key(qs, after, q, key)
            if use > quota.nominal + 1e-9:
                out.append(f"queue {q} reclaims it but then uses {use} {key} GPUs, over its "
                           f"nominal quota of {quota.nominal:g} (reclaim restores a nominal "
                           "quota, it does not borrow)")
        return out

    return excess


def _reclaim_problems(plan: PlacementPlan, instance: Instance, victims: list[str],
                      reclaims: dict[str, set[str]], quota_only: dict[str, set[str]]
                      ) -> list[tuple[str, str, str]]:
    """``preempt-reclaim``: each queue that reclaims a victim's GPUs ends the round within
    its nominal quota on the keys covering them; a victim whose GPUs nobody uses, stopped
    for quota by reclaiming, needs one such queue (see the module docstring)."""
    excess = _nominal_excess(plan, instance, victims)
    out: list[tuple[str, str, str]] = []
    for v, queues in reclaims.items():
        for q in sorted(queues):
            out += [("preempt-reclaim", v, m) for m in excess(v, q)]
    for v, queues in quota_only.items():
        found = [excess(v, q) for q in sorted(queues)]
        if all(found):
            out.append(("preempt-reclaim", v, found[0][0]))
    return out


def _guarantee_problems(plan: PlacementPlan, instance: Instance, victims: list[str]
                        ) -> list[tuple[str, str, str]]:
    """``preempt-reclaim``: a queue reclaimed from keeps its guarantee, all but the last of
    its stopped jobs leaving it above its nominal quota (:func:`hyperplace.models.
    preemption_policy.reclaim_keeps_guarantee`, GPUs over all keys)."""
    info = instance.running_job_info
    held = running_gpus(instance)
    reclaimed = {info[p.job].queue for p in plan.preemptions
                 if p.why == RECLAIM and p.job in held}
    if not reclaimed:
        return []
    jobs = {j.name: j for j in instance.jobs}
    running = queue_use(instance)
    out: list[tuple[str, str, str]] = []
    for q in sorted(reclaimed):
        stopped = [len(held[v]) for v in dict.fromkeys(victims) if info[v].queue == q]
        admitted = sum(len(u.gpus) for u in plan.placements
                       if u.job in jobs and instance.queue_of(jobs[u.job]) == q)
        nominal = nominal_total(instance, q)
        if not reclaim_keeps_guarantee(running.get(q, 0), stopped, admitted, nominal):
            out.append(("preempt-reclaim", q,
                        f"reclaim takes queue {q} below its nominal quota of {nominal:g}: "
                        f"{running.get(q, 0)} GPUs running, {sum(stopped)} stopped, "
                        f"{admitted} admitted (Kueue reclaims from a queue only while it "
                        "is above its nominal quota)"))
    return out


def _recheck(plan: PlacementPlan, instance: Instance, victims: list[str],
             reserve: set[tuple[str, int]]) -> set[tuple[str, str, str]]:
    """The placement rules the plan's placements break on the instance with only
    ``victims`` released (the placement checker, claims aside): a preemption is needed
    when putting its victim back adds a violation (a GPU used twice, a quota exceeded)."""
    from hyperplace.check.placement import check

    kept = released(instance, victims, reserve=reserve)
    trial = plan.model_copy(update={"preemptions": [], "objective": None, "bound": None,
                                    "gap": None, "objective_terms": {},
                                    "preemption_policy": None})
    return {(v.code, v.job or "", v.message) for v in check(trial, kept)
            if not v.code.startswith("claim-")}
