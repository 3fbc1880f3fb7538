"""Preemption inside the placement formulation: which running jobs may be stopped, and for
whom (``solve --preemption``).

Who may stop whom is :class:`hyperplace.models.preemption_policy.StopRule` (the policies
``never``, ``lower-priority``, ``reclaim-within-cohort`` as Kueue names them, with the
source they follow); the checker asks the same rule. Under ``reclaim-within-cohort`` a
reclaim restores the nominal quota and no more: while a victim that some jobs may stop only
by reclaiming is stopped, their queues end the round within their nominal quota (the
model's ``reclaim`` rows, :meth:`Preemption.reclaim_within_nominal`, which say when they are
stricter than the rule).

A running job that at least one pending job may use is a
:class:`~hyperplace.formulations.placement.stoppable.PreemptionCandidate`: the
model gives it a keep/stop boolean (its capacity rows are every stop's,
:meth:`StopsJobs.shared_rows
<hyperplace.formulations.placement.stoppable.StopsJobs.shared_rows>`). Its GPUs
become *reachable* on its nodes (:attr:`NodeView.stoppable
<hyperplace.formulations.placement.views.NodeView.stoppable>`): usable by the jobs allowed
to stop it, and only when it is stopped. Gang is automatic: one boolean frees all its GPUs.

Who may use whose GPUs is not nested (each queue stops only its own lower-priority jobs;
under ``reclaim-within-cohort`` a reclaiming job need not outrank the borrower, and a job
that outranks a victim of another queue may stop it only by reclaiming), so on a node the
model bounds
every *union of signatures* (:func:`signature_unions`), which is Hall's condition for
jobs that each may use the free GPUs plus the GPUs of the stopped victims of their
signature: the rows are exact, and the mapping back finds the matching by a flow.

**Objective 1 with preemption.** Every running job counts as admitted demand in a level
of its own just above its priority (priority + 0.5, :func:`running_levels`): above every
pending job of its priority or lower, below every pending job that outranks it. Stopping
one loses its GPUs there, so it pays only when the GPUs (or quota) it frees admit demand
of a job that outranks it (one of its queue, allowed to stop it; the model's ``stopper``
rows ask for such a job admitted), and a chain (stop a low job so that a high one moves onto its GPUs and
another low job takes the high one's place) never does. Under
``reclaim-within-cohort`` a running job of a queue that uses more than its nominal quota
within a cohort (it runs on borrowed GPUs) counts in a level below every other one, so
that a queue reclaiming its guarantee gains by stopping it whatever the priorities; the
model lets only the jobs allowed to stop it use its GPUs.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from hyperplace.formulations.linear import Objective
from hyperplace.models.instance import Instance
from hyperplace.models.preemption_policy import (  # re-exported: the rule's one home
    POLICIES,
    RECLAIM,
    StopRule,
    borrowing_queues,
    check_policy,
    nominal_total,
    queue_use,
    running_levels,
)
from hyperplace.formulations.placement.stoppable import (  # re-exported: their home
    MAX_UNIONS_PER_NODE,
    PreemptionCandidate,
    Stoppable,
    StopsJobs,
    signature_unions,
)
from hyperplace.models.plan import Preemption as PreemptionEntry
from hyperplace.models.sharing import running_gpus

if TYPE_CHECKING:
    from hyperplace.formulations.placement.decoded import Assignment
    from hyperplace.formulations.placement.model import PlacementModelBuilder
    from hyperplace.formulations.placement.problem import PlacementProblem

Terms = list[tuple[int, int]]


@dataclass(frozen=True)
class PendingRef:
    """What the victim rule needs of a pending job."""

    index: int
    priority: int
    queue: str
    gpus: int


def preemption_candidates(instance: Instance, jobs: Sequence[PendingRef], policy: str
                          ) -> list[PreemptionCandidate]:
    """Running jobs some pending job may stop under ``policy`` (none for ``never``),
    least lost work first: a job may stop one when :meth:`StopRule.why
    <hyperplace.models.preemption_policy.StopRule.why>` says so, a reclaim only when the
    job's queue could stay within its nominal quota with it (:meth:`StopRule.may_reclaim
    <hyperplace.models.preemption_policy.StopRule.may_reclaim>`).

    Parameters
    ----------
    instance : Instance
        The round (running jobs from ``node.allocated`` and ``spec.runningJobs``).
    jobs : sequence of PendingRef
        The pending jobs that could run at all.
    policy : str
        One of :data:`POLICIES`.
    """
    check_policy(policy)
    if policy == "never" or not jobs:
        return []
    info = instance.running_job_info
    held = running_gpus(instance)
    levels = running_levels(instance, policy, (j.priority for j in jobs))
    rule = StopRule.of(instance, policy)
    may_reclaim = {j.index: rule.may_reclaim(j.queue, j.gpus) for j in jobs}
    out: list[PreemptionCandidate] = []
    for name in sorted(held, key=lambda n: (len(held[n]) * info[n].checkpoint_age_s, n)):
        r = info[name]
        v = PreemptionCandidate(index=len(out), name=name, priority=r.priority, queue=r.queue,
                   gpus=tuple(held[name]), lost=len(held[name]) * r.checkpoint_age_s,
                   level=levels[name][0])
        for j in jobs:
            why = rule.why(j.queue, j.priority, r.queue, r.priority)
            if why == RECLAIM and not may_reclaim[j.index]:
                continue
            if why is not None:
                v.allowed.add(j.index)
            if why == RECLAIM:
                v.reclaim_only.add(j.index)
        if v.allowed:
            out.append(v)
    return out


class Preemption(StopsJobs):
    """The round may preempt running jobs (``solve --preemption``; see the module
    docstring): its candidates' share of objective 1, the stopper rows, the reclaim and
    guarantee rows of its quota rules, its objectives after objective 1, the plan's terms,
    which stops the decoded plan keeps and its reasons; greedy's step is
    :mod:`hyperplace.solvers.heuristics.greedy_preempt` (registered in
    :mod:`hyperplace.solvers.heuristics.families`)."""

    name = "preemption"
    leaves_for_good = True
    relaxation_bounds = False  # objective 1 counts the running jobs kept: not written there
    objective_names = ("preempted_lost_gpu_seconds", "preempted_jobs")

    def __init__(self, p: PlacementProblem):
        self.p = p

    @classmethod
    def of(cls, p: PlacementProblem) -> Preemption | None:
        """The extension when the round's policy may stop running jobs."""
        return cls(p) if p.preempting else None

    @classmethod
    def add_stoppable(cls, p: PlacementProblem) -> None:
        """The round's preemption candidates (:func:`preemption_candidates`: none unless
        its policy may stop running jobs), for the pending jobs that could run at all."""
        if not p.preempting:
            return  # no references to build: 6 ms a round at 8,000 pending jobs
        refs = [PendingRef(jv.index, jv.priority, jv.queue, jv.gpus)
                for jv in p.jobs if not jv.impossible]
        for v in preemption_candidates(p.instance, refs, p.preemption):
            p.add_stoppable_job(v)

    @cached_property
    def running(self) -> list[tuple[str, float, int]]:
        """Every running job as (name, level objective 1 counts it in, GPUs held)
        (:func:`running_levels`)."""
        p = self.p
        levels = running_levels(p.instance, p.preemption, (jv.priority for jv in p.jobs))
        return [(name, lvl, g) for name, (lvl, g) in levels.items()]

    def weighted_demands(self) -> list[tuple[float, int]]:
        """Objective 1 counts every running job kept, in its own level
        (:func:`running_levels`)."""
        return [(prio, g) for _, prio, g in self.running]

    def counted_gpus(self) -> int:
        """The running jobs' GPUs (each kept running job counts in its own level)."""
        return sum(g for _, _, g in self.running)

    def bound_demands(self) -> tuple[int, list[tuple[int, int]]]:
        """The candidates' GPUs, which pending jobs and the candidates kept fill alike."""
        p = self.p
        return (sum(len(v.gpus) for v in p.candidates),
                [(p.weights[v.level], len(v.gpus)) for v in p.candidates])

    def kept_demand(self, stopped: Iterable[int]) -> int:
        """Priority-weighted GPUs of every running job but the ``stopped`` candidates."""
        p = self.p
        total = sum(p.weights[prio] * g for _, prio, g in self.running)
        return total - sum(p.weights[p.stoppable[v].level] * len(p.stoppable[v].gpus)
                           for v in stopped)

    def stop_rows(self, b: PlacementModelBuilder) -> None:
        """Objective 1 counts every running job as admitted demand of its own priority
        level, so stopping candidate ``v`` costs its GPUs there: ``-GPUs(v) x stop[v]`` at
        ``v``'s level; and each stop counts once in ``preempted_jobs``."""
        for victim in self.p.candidates:
            s = b.stop[victim.index]
            b.obj_demand_by_level[victim.level].append((s, -len(victim.gpus)))
            b.obj_victims.append((s, 1))

    def after_stop_rows(self, b: PlacementModelBuilder) -> None:
        """A running job is stopped only in a plan that admits a job allowed to stop it:
        ``stop[v] <= sum of run`` over the bundles of ``allowed``. The capacity rows
        already keep its GPUs for such jobs; without this row a stop could still free
        quota (its queue's, its cohort's) for a job of another queue that may not stop it
        (``lower-priority`` stays within a queue; the checker's ``preempt-stopper``)."""
        leader = {j: lead for lead, members in b.bundles.items() for j in members}
        for victim in self.p.candidates:
            runs = sorted({b.run[leader[j]] for j in victim.allowed
                           if leader.get(j) in b.run})
            b.lm.add([(b.stop[victim.index], 1)] + [(r, -1) for r in runs], hi=0,
                     name=f"stopper[{victim.name}]")

    def objectives(self, b: PlacementModelBuilder) -> list[Objective]:
        """After objective 1: lost work (GPU-seconds since each victim's checkpoint), then
        the number of victims."""
        if not b.stop:
            return []
        lost, stops = self.objective_names
        return [Objective(b.obj_lost, lost, "min"), Objective(b.obj_victims, stops, "min")]

    def settle_stopped(self, a: Assignment, stopped: set[int]) -> set[int] | None:
        """The victims of ``stopped`` the assignment needs: those whose GPUs it uses, and
        those whose quota it needs (a stopped job no longer counts against its queue, so a
        queue reclaiming its nominal quota may need a borrower stopped wherever it runs).
        Every other one keeps running (tried highest level first, then most lost work)."""
        p = self.p
        keep = self.used(a) & stopped
        if not p.quotas.active:
            return keep
        book = p.quotas
        use: dict[tuple[str, str], float] = defaultdict(float)
        for j, units in a.units.items():
            for u in units:
                for node, gpus in u.pieces:
                    t = p.node_by_name[node].gpu_type.name
                    for key, n in book.usage(p.jobs[j].queue, t, len(gpus)).items():
                        use[key] += n

        gone: dict[tuple[str, str], float] = defaultdict(float)  # stopped jobs' usage

        def count(v: int, sign: int) -> None:
            for node, _ in p.stoppable[v].gpus:
                t = p.node_by_name[node].gpu_type.name
                for key, n in book.usage(p.stoppable[v].queue, t, 1).items():
                    gone[key] += sign * n

        for v in stopped:
            count(v, +1)
        order = sorted(stopped - keep, key=lambda v: (-p.stoppable[v].level, -p.stoppable[v].lost))
        for v in order:
            count(v, -1)
            if not book.allows(use, gone):
                count(v, +1)
                keep.add(v)
        return keep

    def used(self, a: Assignment) -> set[int]:
        """Victims whose GPUs the assignment uses."""
        p = self.p
        out: set[int] = set()
        for units in a.units.values():
            for u in units:
                for node, gpus in u.pieces:
                    held = p.node_by_name[node].stoppable
                    out.update(held[g] for g in gpus if g in held)
        return out

    def terms(self, a: Assignment) -> dict[str, float]:
        """The exact lost work (the model counts whole GPU-seconds) and the stops."""
        p = self.p
        return {"preempted_lost_gpu_seconds": float(sum(p.stoppable[v].lost for v in a.stopped)),
                "preempted_jobs": float(len(a.stopped))}

    def plan_sections(self, a: Assignment) -> dict[str, object]:
        """The plan's ``preemptions[]`` (:meth:`preemptions`) and its ``preemptionPolicy``."""
        return {"preemptions": self.preemptions(a), "preemption_policy": self.p.preemption}

    def preemptions(self, a: Assignment) -> list[PreemptionEntry]:
        """One entry per stopped victim: why (``reclaim-within-cohort`` when a job of
        another queue uses its GPUs, or, when none does, its quota), for whom (the
        highest-priority job using its GPUs, then the one using most of them), its GPUs and
        its lost work."""
        p = self.p
        users: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for v in a.stopped:  # a victim stopped for quota: the jobs allowed to stop it that run
            for j in p.stoppable[v].allowed & set(a.units):
                users[v][j] = 0
        for j, units in a.units.items():
            for u in units:
                for node, gpus in u.pieces:
                    held = p.node_by_name[node].stoppable
                    for g in gpus:
                        if g in held:
                            users[held[g]][j] += 1
        out = []
        for v in sorted(a.stopped, key=lambda v: p.stoppable[v].name):
            victim = p.candidate(v)
            by = users.get(v, {})
            user = min(by, key=lambda j: (-p.jobs[j].priority, -by[j], p.jobs[j].name)) if by else None
            # reclaim when a job on its GPUs reclaims (StopRule.why); when none uses them (a
            # stop for quota), when a job allowed to stop it that runs reclaims
            on = {j for j, n in by.items() if n > 0} or set(by)
            why = "reclaim-within-cohort" if on & victim.reclaim_only else "lower-priority"
            out.append(PreemptionEntry(job=victim.name, why=why,
                                       preemptor=p.jobs[user].name if user is not None else "",
                                       gpus=len(victim.gpus), lost_gpu_seconds=victim.lost))
        return out

    def quota_rows(self, b: PlacementModelBuilder, terms: dict[tuple[str, str], Terms],
                   freed: dict[tuple[str, str], Terms], big: int) -> None:
        """The reclaim rule's rows (:meth:`reclaim_within_nominal`,
        :meth:`reclaim_keeps_guarantee`), after the quota and cohort rows."""
        self.reclaim_within_nominal(b, terms, freed, big)
        self.reclaim_keeps_guarantee(b)

    def reclaim_within_nominal(self, b: PlacementModelBuilder,
                               terms: dict[tuple[str, str], Terms],
                               freed: dict[tuple[str, str], Terms], big: int) -> None:
        """Reclaim restores a nominal quota, no more: for every victim some jobs may stop
        only by reclaiming (``PreemptionCandidate.reclaim_only``: jobs of other queues of its
        cohort, ``reclaim-within-cohort`` only), and every queue such jobs belong to,
        ``stop[v]`` implies that queue's use of each key covering ``v``'s GPUs (running -
        stopped + admitted now, ``terms`` + ``freed``) <= its nominal quota. Kueue lets a
        workload stop another ClusterQueue's only when it then fits without borrowing
        (kueue at ff69552, ``pkg/scheduler/preemption/classical/hierarchical_preemption.go``
        ``classifyPreemptionVariant`` L103-105, ``preemption.go`` ``workloadFits``
        L669-676 with ``allowBorrowing=false``).

        Stricter than that rule (the checker's ``preempt-reclaim``: only the queues whose
        jobs reuse the victim's GPUs, or for a stop only for quota one of them, must end
        within nominal) in exactly one situation: ``v`` is stopped and a queue that may
        reclaim it ends the round above its nominal quota on such a key although none of
        its jobs uses ``v``'s GPUs, i.e. ``v`` was stopped for a job of its own queue that
        outranks it, or for another queue's reclaim, while that queue borrows elsewhere in
        the same round. Such plans are valid but outside the model; under
        ``lower-priority`` no job reclaims and the rows are absent, so the model is exact
        there. Making it exact needs the stop split by whom it serves (a pool of ``v``'s
        GPUs per queue in the node rows and in the mapping's flow); the driver bounds a
        greedy plan that lands outside the model by the demand bound instead."""
        p = self.p
        book = p.quotas
        qs = book.queues
        if qs is None:
            return
        for victim in p.candidates:
            queues = {p.jobs[j].queue for j in victim.reclaim_only}
            types = {p.node_by_name[node].gpu_type.name for node, _ in victim.gpus}
            for q in sorted(queues):
                if q not in qs.queues:
                    continue
                keys = {k for t in types for k in book.keys_for(q, t)} & set(qs.queues[q].quotas)
                for key in sorted(keys):
                    run = book.running.get((q, key), 0)
                    nominal_left = int(math.floor(qs.queues[q].quotas[key].nominal - run + 1e-9))
                    t = terms.get((q, key), []) + freed.get((q, key), [])
                    if not t:
                        continue
                    m = big + len(p.stoppable) + abs(nominal_left) + \
                        sum(abs(c) for _, c in t)
                    b.lm.add(list(t) + [(b.stop[victim.index], m)], hi=nominal_left + m,
                             name=f"reclaim[{victim.name},{q},{key}]")

    def reclaim_keeps_guarantee(self, b: PlacementModelBuilder) -> None:
        """A queue reclaimed from keeps its guarantee (Kueue skips a ClusterQueue's
        workloads once it is back within nominal, ``classical/candidate_generator.go``
        ``candidateIsValid`` L136-157): per borrowing queue ``B`` with victims some jobs may
        reclaim, when any of them is stopped, ``running(B) - stopped GPUs of B + admitted
        GPUs of B + GPUs of one stopped reclaimable victim (last[v]) >= nominal(B) + 1``
        (:func:`~hyperplace.models.preemption_policy.reclaim_keeps_guarantee`, GPUs over
        all keys). The checker applies it only when a stop of ``B`` is a reclaim; here it
        also holds when ``B``'s victims are stopped for ``B``'s own jobs, which admit about
        what they stop, so it binds only on reclaim."""
        p = self.p
        reclaimable: dict[str, list[PreemptionCandidate]] = defaultdict(list)
        for victim in p.candidates:
            if victim.reclaim_only:
                reclaimable[victim.queue].append(victim)
        if not reclaimable:
            return
        running = queue_use(p.instance)
        for queue, vs in sorted(reclaimable.items()):
            need = int(math.floor(nominal_total(p.instance, queue) + 1e-9)) + 1
            last = {v.index: b.lm.bool(f"last[{queue},{v.name}]") for v in vs}
            b.lm.add([(x, 1) for x in last.values()], hi=1, name=f"last[{queue}]")
            for v in vs:
                b.lm.add([(last[v.index], 1), (b.stop[v.index], -1)], hi=0,
                         name=f"last[{v.name}]<=stop")
                b.lm.add([(b.stop[v.index], 1)] + [(x, -1) for x in last.values()],
                         hi=0, name=f"stop[{v.name}]=>last")
            row: Terms = [(b.stop[v.index], -len(v.gpus)) for v in p.candidates
                          if v.queue == queue]
            row += [(var, gpus) for j, terms in b.job_gpu_terms.items()
                    if p.jobs[j].queue == queue and not p.is_copy(j) for var, gpus, _ in terms]
            row += [(last[v.index], len(v.gpus) - need) for v in vs]
            b.lm.add(row, lo=-running.get(queue, 0), name=f"guarantee[{queue}]")
            b.derived.append(_last_rule(
                [(last[v.index], b.stop[v.index], len(v.gpus)) for v in vs]))

    def quota_holds(self, used: dict[tuple[str, str], float],
                    gone: dict[tuple[str, str], float], stopped: dict[int, int],
                    admitted: dict[str, int]) -> bool:
        """Greedy's side of the reclaim rule's rows: :meth:`reclaim_within_nominal`, then
        :meth:`reclaim_keeps_guarantee`, on greedy's quota ledger's counts."""
        return self._within_nominal(used, gone, stopped) and \
            self._keeps_guarantee(stopped, admitted)

    def _within_nominal(self, used: dict[tuple[str, str], float],
                        gone: dict[tuple[str, str], float], stopped: dict[int, int]) -> bool:
        """While a victim some jobs may stop only by reclaiming is stopped, their queues
        stay within their nominal quota on the keys covering its GPUs."""
        p = self.p
        book = p.quotas
        if book.queues is None:
            return True
        for index, times in stopped.items():
            if times <= 0:
                continue
            v = p.stoppable[index]
            if not isinstance(v, PreemptionCandidate):
                continue
            types = {p.node_by_name[node].gpu_type.name for node, _ in v.gpus}
            for q in {p.jobs[j].queue for j in v.reclaim_only}:
                queue = book.queues.queues.get(q)
                if queue is None:
                    continue
                for key in {k for t in types for k in book.keys_for(q, t)} & set(queue.quotas):
                    use = book.running.get((q, key), 0) + used.get((q, key), 0) \
                        - gone.get((q, key), 0)
                    if use > queue.quotas[key].nominal + 1e-9:
                        return False
        return True

    def _keeps_guarantee(self, stopped: dict[int, int], admitted: dict[str, int]) -> bool:
        """A queue with a stopped victim that some jobs may reclaim keeps its guarantee
        (the model's ``last[]`` marks a reclaimable victim: the largest of those)."""
        p = self.p
        queues = {p.stoppable[i].queue for i, n in stopped.items()
                  if n > 0 and _reclaimable(p.stoppable[i])}
        for q in queues:
            sizes = [len(v.gpus) for v in p.stoppable
                     if v.queue == q and stopped.get(v.index, 0) > 0]
            largest = max((len(v.gpus) for v in p.stoppable if v.queue == q
                           and _reclaimable(v) and stopped.get(v.index, 0) > 0))
            total = self._running.get(q, 0) - sum(sizes) + admitted.get(q, 0) + largest
            if total <= nominal_total(p.instance, q) + 1e-9:
                return False
        return True

    @cached_property
    def _running(self) -> dict[str, int]:
        """GPUs each queue's running jobs hold (for the guarantee)."""
        return queue_use(self.p.instance)

    def reasons(self, a: Assignment, reasons: dict[int, list[str]], proven: bool) -> None:
        """Why preemption did not place a pending job (:meth:`stop_reasons`) and, with
        queues, why it could stop none (:meth:`other_queue_reasons`)."""
        if self.p.stoppable:
            self.stop_reasons(a, reasons, proven)
        if self.p.instance.queue_set is not None:
            self.other_queue_reasons(a, reasons)

    def stop_reasons(self, a: Assignment, reasons: dict[int, list[str]], proven: bool
                     ) -> None:
        """For a pending job that could have stopped running jobs: that doing so did not
        place it (proven: any plan placing it would leave out or stop work of its level or
        higher)."""
        p = self.p
        for jv in p.jobs:
            if jv.index in a.units or jv.impossible:
                continue
            mine = [v for v in p.stoppable if jv.index in v.allowed and v.index not in a.stopped]
            if not mine:
                continue
            gpus = sum(len(v.gpus) for v in mine)
            what = f"{len(mine)} running job(s) it may preempt ({gpus} GPUs, {p.preemption})"
            reasons.setdefault(jv.index, []).append(
                f"preemption: no plan that stops some of the {what} places it whole without "
                "leaving out or stopping work of its priority or higher" if proven else
                f"preemption: stopping some of the {what} placed it in no plan found within "
                "the budget")

    def other_queue_reasons(self, a: Assignment, reasons: dict[int, list[str]]) -> None:
        """For a pending job that may stop no running job while lower-priority ones run in
        other queues: that the policy stops across queues only by reclaiming
        (:class:`~hyperplace.models.preemption_policy.StopRule`)."""
        p = self.p
        info = p.instance.running_job_info
        held = running_gpus(p.instance)
        everyone = sorted(info[n].priority for n in held)
        per_queue: dict[str, list[int]] = defaultdict(list)
        for n in held:
            per_queue[info[n].queue].append(info[n].priority)
        for prios in per_queue.values():
            prios.sort()
        may_stop = {j for v in p.candidates for j in v.allowed}
        for jv in p.jobs:
            if jv.index in a.units or jv.impossible or jv.index in may_stop or \
                    jv.migrant is not None:
                continue
            lower = bisect_left(everyone, jv.priority) - bisect_left(
                per_queue.get(jv.queue, []), jv.priority)
            if lower <= 0:
                continue
            text = (f"preemption: {lower} lower-priority running job(s) are in other queues; "
                    f"{p.preemption} stops only jobs of its own queue (queue {jv.queue})")
            if p.preemption == "reclaim-within-cohort":
                text += (" or, to reclaim, jobs of borrowing queues of its cohort while its "
                         "queue stays within its nominal quota")
            reasons.setdefault(jv.index, []).append(text)


def _reclaimable(v: Stoppable) -> bool:
    """Some jobs may stop ``v`` only by reclaiming within the cohort."""
    return isinstance(v, PreemptionCandidate) and bool(v.reclaim_only)


def _last_rule(vs: list[tuple[int, int, int]]) -> Callable[[list[int]], None]:
    """Hint completion for a queue reclaimed from: ``last`` marks its largest stopped
    reclaimable victim."""
    def rule(values: list[int]) -> None:
        stopped = [(gpus, lv) for lv, sv, gpus in vs if values[sv]]
        for lv, _, _ in vs:
            values[lv] = 0
        if stopped:
            values[max(stopped)[1]] = 1
    return rule


__all__ = ["MAX_UNIONS_PER_NODE", "POLICIES", "PendingRef", "Preemption", "borrowing_queues",
           "check_policy", "nominal_total", "preemption_candidates", "queue_use",
           "running_levels",
           "signature_unions"]
