""""Why is my job pending?": one job's answer, and the smallest change that would admit it.

:func:`why_job` solves the round as it is (the same :func:`solve_placement` as ``solve``):
admitted jobs say where they run; a pending one gets the plan's reasons and then a few
*what-ifs*, each a real solve of the same round with one thing about the job changed, its
plan put through the independent checker before it counts:

* **fewer GPUs**: fewer replicas (data-parallel copies), or a smaller model-parallel group
  when there is one replica; the largest that fits is reported;
* **a looser hop limit**: the next ``maxHopCount`` up, then none;
* **another GPU type**: each type of the cluster the job does not accept now;
* **preempting**: the same round with ``--preemption lower-priority``; the running jobs that
  would be stopped for it are named;
* **a higher priority**: above the jobs that outrank it; the pending jobs it would then
  displace are named.

Changes that admit the job come first, smallest first; those that do not are kept (marked)
so a reader knows they were tried. "Waiting until when" needs a forecast of when running
jobs end; when the plan carries one, it is quoted, otherwise the answer says there is none.
The CLI (``hyperplace why``) and the service (``GET /v1/clusters/{name}/jobs/{job}``) are
thin shells over this function.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import Field

from hyperplace.errors import InputError
from hyperplace.models.base import HPModel
from hyperplace.models.instance import Instance
from hyperplace.models.job import MODEL_PARALLEL, TrainingJob
from hyperplace.models.plan import PlacementPlan

#: What-if solves are given at least this many seconds each (small rounds need far less).
MIN_WHAT_IF_S = 0.3


class Change(HPModel):
    """One change to the job (or the round) and whether a solve with it admits the job."""

    kind: Literal["budget", "fewer-gpus", "hop-limit", "gpu-type", "preempt", "priority"]
    change: str = Field(description="the change, in words a person can act on")
    admits: bool = Field(description="a solve of the round with this change admits the job "
                                     "(its plan passes the independent checker)")
    gpus: int = Field(default=0, ge=0, description="GPUs the job would use with the change")
    effects: list[str] = Field(default_factory=list, description=(
        "what else the change does: running jobs preempted, pending jobs displaced"))


class JobAnswer(HPModel):
    """The answer for one job: admitted now or not, why, and what would admit it."""

    api_version: Literal["hyperplace/v1"] = "hyperplace/v1"
    kind: Literal["JobAnswer"] = "JobAnswer"
    job: str
    instance: str
    state: Literal["admitted", "pending", "running"]
    summary: str = Field(description="one sentence")
    gpus: int = 0
    priority: int = 0
    nodes: list[str] = Field(default_factory=list, description="where it runs or would run")
    reasons: list[str] = Field(default_factory=list, description="the plan's reasons")
    changes: list[Change] = Field(default_factory=list)
    untried: list[str] = Field(default_factory=list, description=(
        "changes not tried because the budget ran out (a larger budget tries them)"))
    forecast: str | None = Field(default=None, description=(
        "when it would start by waiting, from the plan's forecast when it has one"))
    plan_status: str = ""
    solver: str = ""
    runtime_s: float = 0.0


def why_job(instance: Instance, job: str, *, budget_s: float = 10.0, solver: str = "auto",
            policy: str = "performance", seed: int = 0, what_ifs: bool = True,
            forecaster: Callable[[Instance, PlacementPlan], list[Any]] | None = None
            ) -> JobAnswer:
    """Whether ``job`` would be admitted in a round of ``instance`` now, and if not, why and
    what would admit it (see the module). ``budget_s`` bounds all the solves together.

    ``forecaster(instance, plan) -> forecasts[]`` (the shells pass the over-time schedule's
    :func:`hyperplace.sim.forecast.forecast_plan`, a layer above this one) says when the job
    would start by waiting."""
    from hyperplace.solvers.driver import solve_placement

    began = time.perf_counter()
    manifest, answer = _pending_manifest(instance, job)
    if answer is not None:
        return answer
    base_budget = budget_s * (0.5 if what_ifs else 1.0)
    plan = solve_placement(instance, solver=solver, budget_s=base_budget, policy=policy,
                           seed=seed)
    common = dict(job=job, instance=instance.name, priority=manifest.priority,
                  plan_status=plan.status.value, solver=plan.solver)
    placed = next((j for j in plan.jobs if j.job == job), None)
    if placed is not None:
        return JobAnswer(state="admitted", gpus=placed.gpus, nodes=list(placed.node_names),
                         summary=f"{job} would be admitted now: {placed.gpus:,} GPUs on "
                                 f"{_list(placed.node_names, 6)}",
                         runtime_s=time.perf_counter() - began, **common)
    reasons = next((p.reasons for p in plan.pending if p.job == job), [])
    if forecaster is not None:
        plan = plan.model_copy(update={"forecasts": forecaster(instance, plan)})
    changes: list[Change] = []
    untried: list[str] = []
    if what_ifs:
        search = _WhatIfSearch(instance, manifest, plan, reasons, began + budget_s,
                               dict(solver=solver, policy=policy, seed=seed))
        changes, untried = search.run()
    forecast = _forecast(plan, job)
    return JobAnswer(state="pending", gpus=_gpus(manifest),
                     reasons=list(reasons), changes=changes, forecast=forecast,
                     untried=untried,
                     summary=_summary(job, reasons, changes),
                     runtime_s=time.perf_counter() - began, **common)


def _pending_manifest(instance: Instance, job: str
                      ) -> tuple[TrainingJob, None] | tuple[None, JobAnswer]:
    """The pending job's manifest, or the answer for a running job (an InputError naming
    the pending and running jobs when ``job`` is neither)."""
    running = _running_jobs(instance)
    if job in running and job not in {j.name for j in instance.jobs}:
        nodes = sorted(running[job])
        return None, JobAnswer(job=job, instance=instance.name, state="running", nodes=nodes,
                               gpus=sum(running[job].values()),
                               summary=f"{job} is running on {_list(nodes)}; nothing to admit")
    manifest = next((j for j in instance.jobs if j.name == job), None)
    skipped = next((s for s in instance.spec.skipped if s.job == job), None)
    if manifest is None and skipped is not None:  # read, but not a job hyperplace places
        raise InputError(f"{job!r} is not placed by hyperplace: {skipped.reason}", path="JOB")
    if manifest is None:
        names = [j.name for j in instance.jobs]
        raise InputError(f"no job {job!r} in {instance.name}: pending jobs are "
                         f"{_list(names) or 'none'}"
                         + (f"; running: {_list(sorted(running))}" if running else ""),
                         path="JOB")
    return manifest, None


class _WhatIfSearch:
    """The what-ifs of one pending job, tried in order of relevance within what is left of
    the budget: each kind's smallest change that admits it, and the largest smaller ask
    that is admitted (a binary search)."""

    def __init__(self, instance: Instance, manifest: TrainingJob, plan: PlacementPlan,
                 reasons: list[str], deadline: float, solve: dict[str, Any]):
        self.instance, self.manifest, self.plan = instance, manifest, plan
        self.job = manifest.name
        self.reasons = reasons
        self.deadline = deadline
        self.solve = solve
        self.changes: list[Change] = []
        self.untried: list[str] = []
        self.smaller = _fewer_gpus(manifest)
        self.planned = 0

    def run(self) -> tuple[list[Change], list[str]]:
        tries = self._tries()
        searches = max(1, len(self.smaller)).bit_length() + 1 if self.smaller else 0
        self.planned = len(tries) + searches
        done_kinds: set[str] = set()
        fewer_at = min((i for i, t in enumerate(tries)
                        if _relevance("fewer-gpus", self.reasons) <= _relevance(t[0], self.reasons)),
                       default=len(tries))
        for i, (kind, words, inst, preemption, gpus) in enumerate(tries):
            if i == fewer_at and self.smaller:
                self.fewer()
            if kind in done_kinds:  # the smallest change of a kind that admits is enough
                continue
            change = self.attempt(kind, words, inst, preemption, gpus)
            if change is None:
                continue
            self.changes.append(change)
            if change.admits:
                done_kinds.add(kind)
        if fewer_at >= len(tries) and self.smaller:
            self.fewer()
        return _ranked(self.changes), self.untried

    def _tries(self) -> list[tuple[str, str, Instance, str, int]]:
        tries = sorted(_what_ifs(self.instance, self.manifest, self.plan),
                       key=lambda t: _relevance(t[0], self.reasons))
        if any(_ran_out(r) for r in self.reasons):  # the round itself needs more time first
            left = max(MIN_WHAT_IF_S, (self.deadline - time.perf_counter()) / 2)
            tries.insert(0, ("budget", f"give the round a larger budget (it ran out before "
                             f"deciding this job; tried here with {left:.1f} s)",
                             self.instance, "never", _gpus(self.manifest)))
        return tries

    def attempt(self, kind: str, words: str, inst: Instance, preemption: str, gpus: int
                ) -> Change | None:
        from hyperplace.solvers.driver import solve_placement

        left = self.deadline - time.perf_counter()
        if left < MIN_WHAT_IF_S:
            self.untried.append(words)
            return None
        share = left / 2 if kind == "budget" else left / max(1, self.planned)
        self.planned = max(1, self.planned - 1)
        other = solve_placement(inst, budget_s=max(MIN_WHAT_IF_S, share),
                                preemption=preemption, **self.solve)
        admits = _admits(other, inst, self.job)
        return Change(kind=kind, change=words, admits=admits, gpus=gpus,
                      effects=_effects(self.plan, other, self.job) if admits else [])

    def _probe(self, i: int) -> Change | None:
        words, changed = self.smaller[i]
        return self.attempt("fewer-gpus", words, _replace(self.instance, changed), "never",
                            _gpus(changed))

    def fewer(self) -> None:
        """The largest smaller ask that is admitted: a binary search."""
        last = self._probe(len(self.smaller) - 1)
        if last is None:
            return
        if not last.admits:
            self.changes.append(last.model_copy(update={"change": "even " + last.change}))
            return
        lo, hi, best = 0, len(self.smaller) - 1, last
        while lo < hi:
            mid = (lo + hi) // 2
            found = self._probe(mid)
            if found is None:
                break
            if found.admits:
                hi, best = mid, found
            else:
                lo = mid + 1
        self.changes.append(best)


# ---- the what-ifs -------------------------------------------------------------------------

def _fewer_gpus(job: TrainingJob) -> list[tuple[str, TrainingJob]]:
    """Smaller asks, largest first: fewer replicas, or (one replica) a smaller largest
    model-parallel group, halving."""
    from hyperplace.words import plural

    out: list[tuple[str, TrainingJob]] = []
    r = job.spec.replica_count
    gpus = _gpus(job)
    for fewer in range(r - 1, 0, -1):
        changed = _with_spec(job, replica_count=fewer)
        out.append((f"ask for {plural(fewer, 'replica')} instead of {r:,} "
                    f"({_gpus(changed):,} GPUs instead of {gpus:,})", changed))
    if r == 1:
        groups = [g for g in job.spec.resource_groups if g.type in MODEL_PARALLEL]
        if groups:
            big = max(groups, key=lambda g: g.gpus_per_group)
            size = big.gpus_per_group // 2
            while size >= 1:
                changed = _with_group(job, big.name, gpus_per_group=size)
                out.append((f"make group {big.name} {plural(size, 'GPU')} instead of "
                            f"{big.gpus_per_group:,} ({plural(_gpus(changed), 'GPU')} in all)",
                            changed))
                size //= 2
    return out


def _what_ifs(instance: Instance, job: TrainingJob, plan: PlacementPlan):  # noqa: ANN202
    """(kind, words, instance with the change, preemption, GPUs) in the order they are tried:
    within a kind, the smallest change first."""
    gpus = _gpus(job)
    # a looser hop limit: one step at a time, then none
    limited = [g for g in job.spec.resource_groups
               if g.inter_node_connectivity.max_hop_count is not None]
    if limited:
        now = max(g.inter_node_connectivity.max_hop_count or 0 for g in limited)
        for hops in [h for h in (now + 1, now + 2) if h <= 6] + [None]:
            changed = job
            for g in limited:
                changed = _with_hops(changed, g.name, hops)
            words = (f"allow up to {hops} switch {'hop' if hops == 1 else 'hops'} between its "
                     f"GPUs (maxHopCount {hops}, now {now})" if hops is not None
                     else f"drop the hop limit (maxHopCount, now {now})")
            yield ("hop-limit", words, _replace(instance, changed), "never", gpus)
    # another GPU type: the cluster's types the job does not accept now
    present = sorted({n.gpu_type for c in instance.clusters for n in c.nodes})
    accepted = _accepted_types(instance, job, present)
    for t in present:
        if t in accepted:
            continue
        spec = instance.catalog.find(t)
        if spec is None:
            continue
        changed, lowered = _with_type(job, t, spec.hbm_gb, spec.nvlink_gbps)
        yield ("gpu-type", f"accept {t} GPUs (acceleratorType {t}, no gpu-type toleration"
               + "".join(f"; {x}" for x in lowered) + ")", _replace(instance, changed),
               "never", gpus)
    # preempting lower-priority running jobs
    if instance.spec.running_jobs:
        yield ("preempt", "let it preempt lower-priority running jobs (preemption "
               "policy lower-priority)", instance, "lower-priority", gpus)
    # a higher priority
    top = max((j.priority for j in instance.jobs), default=job.priority)
    if job.priority <= top and any(j.priority >= job.priority for j in instance.jobs
                                   if j.name != job.name):
        changed = _with_spec(job, priority=top + 1)
        yield ("priority", f"raise its priority to {top + 1} (now {job.priority}), above "
               "every other pending job", _replace(instance, changed), "never", gpus)


#: Which what-ifs a reason points to first (its words -> kinds, most relevant first).
_POINTS_TO = (("outranked", ("priority", "preempt")), ("maxHopCount", ("hop-limit",)),
              ("hop", ("hop-limit",)), ("none of that type", ("gpu-type",)),
              (" GB", ("gpu-type",)), ("are free", ("fewer-gpus", "preempt")),
              ("largest", ("fewer-gpus", "hop-limit")), ("fragmented", ("hop-limit",
                                                                        "fewer-gpus")))


def _relevance(kind: str, reasons: list[str]) -> int:
    """0 for the kinds the reasons point to (in their order), then the default order."""
    text = " ".join(reasons)
    pointed: list[str] = []
    for words, kinds in _POINTS_TO:
        if words in text:
            pointed.extend(k for k in kinds if k not in pointed)
    default = ("fewer-gpus", "hop-limit", "gpu-type", "preempt", "priority")
    return pointed.index(kind) if kind in pointed else len(pointed) + (
        default.index(kind) if kind in default else len(default))


def _ran_out(reason: str) -> bool:
    return reason.startswith(("not tried", "not admitted in this plan (per-job analysis "
                              "skipped: the time budget"))


def _admits(plan: PlacementPlan, instance: Instance, job: str) -> bool:
    from hyperplace.check import check

    return any(j.job == job for j in plan.jobs) and check(plan, instance) == []


def _effects(before: PlacementPlan, after: PlacementPlan, job: str) -> list[str]:
    out = [f"preempts {p.job} ({p.gpus:,} GPUs, {p.why})" for p in after.preemptions
           if p.preemptor == job or not p.preemptor]
    admitted_after = {j.job for j in after.jobs}
    displaced = [j.job for j in before.jobs if j.job not in admitted_after]
    if displaced:
        out.append(f"{_list(displaced, 5)} would then wait instead")
    return out


def _ranked(changes: list[Change]) -> list[Change]:
    """Changes that admit first; among them the ones with fewer side effects, then the
    order they were tried in (smallest change of each kind first)."""
    order = {id(c): i for i, c in enumerate(changes)}
    return sorted(changes, key=lambda c: (not c.admits, len(c.effects), order[id(c)]))


def _forecast(plan: PlacementPlan, job: str) -> str | None:
    """The plan's forecast for the job (the over-time schedule's ``forecasts[]``), in words."""
    for f in getattr(plan, "forecasts", None) or []:
        if getattr(f, "job", None) != job:
            continue
        if getattr(f, "text", ""):
            return f.text
        lo, hi = getattr(f, "earliest_s", None), getattr(f, "latest_s", None)
        if lo is None:
            return "no start within the schedule's reach"
        where = f" on {f.pool}" if getattr(f, "pool", "") else ""
        span = f"{_duration(lo)}" + (f" to {_duration(hi)}" if hi is not None and hi > lo
                                     else "")
        return f"planned to start in {span}{where} by waiting"
    return None


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def _summary(job: str, reasons: list[str], changes: list[Change]) -> str:
    first = next((c for c in changes if c.admits), None)
    why = reasons[0] if reasons else "the plan gives no reason"
    if first is None:
        return f"{job} would stay pending: {why}; none of the changes tried admits it"
    return f"{job} would stay pending: {why}. Smallest change that admits it: {first.change}"


# ---- small helpers ------------------------------------------------------------------------

def _running_jobs(instance: Instance) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for c in instance.clusters:
        for n in c.nodes:
            for holder in n.allocated.values():
                per = out.setdefault(holder, {})
                per[n.name] = per.get(n.name, 0) + 1
    return out


def _gpus(job: TrainingJob) -> int:
    return sum(u.gpus for u in job.units())


def _list(items: list[str], most: int = 4) -> str:
    items = list(items)
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def _replace(instance: Instance, job: TrainingJob) -> Instance:
    return instance.with_jobs([job if j.name == job.name else j for j in instance.jobs])


def _with_spec(job: TrainingJob, **update: object) -> TrainingJob:
    return job.model_copy(update={"spec": job.spec.model_copy(update=update)})


def _with_group(job: TrainingJob, group: str, **update: object) -> TrainingJob:
    groups = [g.model_copy(update=update) if g.name == group else g
              for g in job.spec.resource_groups]
    return _with_spec(job, resource_groups=groups)


def _with_hops(job: TrainingJob, group: str, hops: int | None) -> TrainingJob:
    groups = [g.model_copy(update={"inter_node_connectivity": g.inter_node_connectivity
                                   .model_copy(update={"max_hop_count": hops})})
              if g.name == group else g for g in job.spec.resource_groups]
    return _with_spec(job, resource_groups=groups)


def _with_type(job: TrainingJob, gpu_type: str, hbm_gb: float, nvlink_gbps: float
               ) -> tuple[TrainingJob, list[str]]:
    """The job asking for ``gpu_type`` in every group, without its gpu-type tolerations;
    memory and NVLink floors above what the type has are lowered to it, and said so."""
    groups, lowered = [], []
    for g in job.spec.resource_groups:
        req = g.gpu_requirements
        update: dict[str, object] = {"accelerator_type": gpu_type}
        if req.min_memory_gb > hbm_gb:
            update["min_memory_gb"] = hbm_gb
            lowered.append(f"a memory floor of {hbm_gb:g} GB instead of "
                           f"{req.min_memory_gb:g} (the model must then fit in it)")
        if req.min_nvlink_bandwidth_gbps_per_pair > nvlink_gbps:
            update["min_nvlink_bandwidth_gbps_per_pair"] = nvlink_gbps
            lowered.append(f"an NVLink floor of {nvlink_gbps:g} GB/s instead "
                           f"of {req.min_nvlink_bandwidth_gbps_per_pair:g}")
        groups.append(g.model_copy(update={"gpu_requirements": req.model_copy(update=update)}))
    tolerations = [t for t in job.spec.tolerations if t.key != "gpu-type"]
    return (_with_spec(job, resource_groups=groups, tolerations=tolerations),
            list(dict.fromkeys(lowered)))


def _accepted_types(instance: Instance, job: TrainingJob, types: list[str]) -> set[str]:
    """The types of ``types`` every unit of the job accepts now (the same selector match the
    engine uses, memory floors included)."""
    out: set[str] = set()
    units = job.units()
    for t in types:
        spec = instance.catalog.find(t)
        if spec is not None and all((u.gpu_types is None or spec.matches(u.gpu_types))
                                    and spec.hbm_gb >= u.min_memory_gb for u in units):
            out.add(t)
    return out


__all__ = ["Change", "JobAnswer", "why_job"]
