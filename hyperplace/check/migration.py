"""Independent check of a plan's ``migrations[]`` (#14).

Recomputed from the instance, not from the solver's bookkeeping:

* each migrated job is a running job (``migrate-unknown``) with a manifest in
  ``spec.runningJobs[].job`` (``migrate-no-manifest``: without one nothing says what "whole"
  means for it), listed once and not also preempted (``migrate-duplicate``);
* it runs whole at its new place: the rest of the plan is checked on the instance with the
  migrated jobs' old GPUs released and their manifests queued, so every unit, type, NVLink,
  hop and bandwidth rule and the gang rule apply to its new GPUs as to any job; a migrated
  job with no placement is ``migrate-not-placed`` (moving means it must run);
* stated numbers are right (``migrate-lost-work``): ``gpus`` = its manifest's GPUs,
  ``lostGpuSeconds`` = those x ``checkpointAgeS`` (a job hit by a failure restarts whole), ``gpusMoved`` = new GPUs not held before,
  ``fromNodes``/``toNodes`` = old and new nodes;
* each migration was needed (``migrate-unneeded``): another job of the plan uses one of its
  old GPUs (putting it back would make the plan invalid), or, for ``why: repair``, it
  holds fewer GPUs than its manifest (failed ones are faulty and held by no one, see
  :func:`hyperplace.models.sharing.with_failures`), or, for ``why: defrag``, the
  largest free domain (:func:`hyperplace.models.sharing.largest_free_domains`) is smaller without it; a job put back
  on exactly its old GPUs moved nothing and is unneeded too.

Objective 1 and the priority rule are judged on the pending jobs only: a migrated job is a
running job that keeps running, never a pending job admitted, and its GPUs are not
available to pending jobs (it outranks them all for the priority check).
"""

from __future__ import annotations

from collections import defaultdict

from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.sharing import largest_free_domains, released, running_gpus

GPU = tuple[str, int]


def migration_problems(plan: PlacementPlan, instance: Instance
                       ) -> tuple[list[tuple[str, str, str]], Instance, set[str]]:
    """(code, job, message) per broken migration rule, the instance the rest of the plan is
    checked on (migrated jobs released and queued) and the names of the migrated jobs."""
    out: list[tuple[str, str, str]] = []
    held = running_gpus(instance)
    info = instance.running_job_info
    manifests = instance.running_manifests
    preempted = {p.job for p in plan.preemptions}
    new: dict[str, set[GPU]] = defaultdict(set)
    user: dict[GPU, str] = {}
    for u in plan.placements:
        for g in u.gpus:
            new[u.job].add((g.node, g.gpu))
            user[(g.node, g.gpu)] = u.job
    moved: list[str] = []
    for m in plan.migrations:
        if m.job in moved or m.job in preempted:
            out.append(("migrate-duplicate", m.job, "migrated twice, or migrated and preempted"))
            continue
        if m.job not in held and m.job not in manifests:
            out.append(("migrate-unknown", m.job, "is not a running job of the instance"))
            continue
        if m.job not in manifests:
            out.append(("migrate-no-manifest", m.job, "has no manifest in spec.runningJobs[].job, "
                        "so its new place cannot be checked"))
            continue
        moved.append(m.job)
        old = set(held.get(m.job, ()))
        size = manifests[m.job].total_gpus  # a broken job holds fewer: it restarts whole
        lost = size * info[m.job].checkpoint_age_s
        gained = len(new[m.job] - old)
        if not new[m.job]:
            out.append(("migrate-not-placed", m.job, "is migrated but has no new placement"))
        if m.gpus != size or abs(m.lost_gpu_seconds - lost) > 1e-6 * max(1.0, lost) \
                or m.gpus_moved != gained:
            out.append(("migrate-lost-work", m.job,
                        f"runs on {size} GPUs, {lost:g} GPU-seconds since its checkpoint, "
                        f"{gained} new GPUs; the plan says {m.gpus}, {m.lost_gpu_seconds:g} and "
                        f"{m.gpus_moved}"))
        if sorted(set(m.from_nodes)) != sorted({n for n, _ in old}) or \
                sorted(set(m.to_nodes)) != sorted({n for n, _ in new[m.job]}):
            out.append(("migrate-lost-work", m.job, "fromNodes/toNodes are not its old and new "
                        "nodes"))
    busy = {g for gs in new.values() for g in gs}
    freed = {g for j in moved for g in held.get(j, ())}
    score = sum(largest_free_domains(instance, busy, freed).values()) if any(
        m.why == "defrag" for m in plan.migrations) else 0
    for m in plan.migrations:
        if m.job not in moved or not new[m.job]:
            continue
        old = set(held.get(m.job, ()))
        broken = len(old) < manifests[m.job].total_gpus
        if new[m.job] == old and not broken:
            out.append(("migrate-unneeded", m.job, "put back on exactly its old GPUs"))
            continue
        if any(user.get(g, m.job) != m.job for g in old):
            continue  # another job uses its old GPUs: without the move the plan is invalid
        if m.why == "repair" and len(old) < manifests[m.job].total_gpus:
            continue  # it lost GPUs to a failure: without the move it cannot run
        if m.why == "defrag":
            without = sum(largest_free_domains(instance, busy - new[m.job], freed - old).values())
            if without < score:
                continue
        out.append(("migrate-unneeded", m.job,
                    "no other job uses its old GPUs" + (" and the largest free domain is as "
                                                        "large without it" if m.why == "defrag" else "")))
    base = released(instance, moved)
    derived = base.with_jobs([*base.jobs, *(manifests[j] for j in moved)])
    return out, derived, set(moved)
