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
* preempted GPUs are reused only by jobs that outrank the victim, or (``why:
  reclaim-within-cohort``) by jobs of another queue in the victim's cohort
  (``preempt-reuse``).

The rest of the plan is then checked against the instance with the victims released and
their unused GPUs kept out of reach (see :func:`hyperplace.models.sharing.released`).
"""

from __future__ import annotations

from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
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
    qs = instance.queue_set
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
            if job.priority > victim.priority:
                continue
            if p.why == "reclaim-within-cohort" and qs is not None:
                mine = instance.queue_of(job)
                a = qs.queues.get(mine)
                b = qs.queues.get(victim.queue)
                if a is not None and b is not None and a.cohort and b.cohort and mine != b.name \
                        and qs.root_cohort(a.cohort) == qs.root_cohort(b.cohort):
                    continue
            out.append(("preempt-reuse", p.job,
                        f"its GPUs go to {name!r} (priority {job.priority}), which does not "
                        f"outrank it (priority {victim.priority})"
                        + (" nor reclaims within its cohort" if p.why != "lower-priority" else "")))
    victims = [p.job for p in plan.preemptions if p.job in held]
    base = _recheck(plan, instance, victims, reserve)
    for v in dict.fromkeys(victims):
        if not _recheck(plan, instance, [x for x in victims if x != v],
                        reserve - set(held[v])) - base:
            out.append(("preempt-unneeded", v,
                        "the plan stays valid with it running: it could keep running"))
    return out, released(instance, victims, reserve=reserve)


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
