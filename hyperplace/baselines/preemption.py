"""Peer preemption rules, re-implemented from their source, for the sharing benchmark.

Both take one pending job that does not fit and return the running jobs they would stop.
Whether the preemptor then really fits (its gang, hop and NVLink rules) is decided
afterwards by :func:`preemptor_fits`, with hyperplace's exact placement of that one job on
the instance with the victims released: the peers do not decide it with the topology.

Kueue-style (classical preemption with Topology Aware Scheduling, :func:`kueue_style`)
    kubernetes-sigs/kueue at commit ff69552, the policy ``withinClusterQueue:
    LowerPriority`` (hyperplace's ``lower-priority``), on a TAS flavor as a competent site
    runs GPU jobs:
    ``pkg/scheduler/preemption/classical/hierarchical_preemption.go``
    ``collectSameQueueCandidates`` (L125-130) and ``classifyPreemptionVariant`` (L81-113,
    own queue L87-88, ``common/preemption_policy.go`` ``SatisfiesPreemptionPolicy`` L27-34:
    strictly lower priority) keep the running workloads of the preemptor's own
    ClusterQueue with lower priority (every running job when the instance declares no
    queues: one queue); ``pkg/scheduler/preemption/common/ordering.go``
    ``CandidatesOrdering`` (L42; criteria L35-41) orders them lower priority first, then
    admitted more recently first; ``pkg/scheduler/preemption/preemption.go``
    ``classicalPreemptions`` (L284, loop L320-337) removes candidates in that order until
    ``workloadFits`` (L669-684) holds; then ``fillBackWorkloads`` (L341-354) puts back, in
    reverse order (all but the last removed), every victim whose return keeps the fit; no
    fit with every candidate removed: nobody is stopped (L338). ``workloadFits`` asks two
    things: the request fits the quota still available (L670-677; here the ClusterQueue's
    quota is the cluster's GPUs of the job's types, quotas not modelled, so this counts
    free GPUs) **and** ``FindTopologyAssignmentsForWorkload`` (L678-683) finds a TAS
    assignment for it on the snapshot with the candidates removed: Kueue TAS's own rule
    (:mod:`hyperplace.baselines.kueue`, the same one the ``kueue`` peer admits with) on
    the GPUs the victims free. Admission order: the order of ``spec.runningJobs`` (later =
    admitted more recently); jobs not listed come after, by name.

Kueue without TAS (:func:`kueue_classical_style`, a named weaker variant)
    The same loop with ``workloadFits`` reduced to the quota check (a flavor without a
    topology: no assignment to find), so "fits" counts free GPUs, not where they are, and
    a gang may stay unplaceable after its victims are stopped (kueue#5243).

Volcano-style (``preempt`` action)
    volcano-sh/volcano at commit ed72c7c: ``pkg/scheduler/actions/preempt/preempt.go``
    ``Execute`` (L101, per preemptor job L160-230) takes the preemptor's tasks one by one
    and considers only tasks of other jobs of the same queue (filter L212-213: "Preempt
    other jobs within queue"; every running job when the instance declares no queues);
    ``normalPreempt`` (L331-425) visits nodes in score order and on each node evicts
    preemptable tasks lowest priority first (``BuildVictimsPriorityQueue``, L377-399) until
    the task fits the node's future idle resources (``preemptorFitsOnNode``, L434); a node
    where it still does not fit has its evictions discarded. A task here is one gang unit
    of the job (a node's worth of GPUs); stopping a task of a running job stops the whole
    job (gang), so all its GPUs are freed and its work since the checkpoint is lost. Node
    score: most free GPUs first, then name (Volcano's default ``nodeorder`` least-requested
    scoring, GPUs only). Volcano commits only when the job is pipelined (L221): when some
    task found no node, nobody is stopped.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hyperplace.baselines import kueue as kueue_rule
from hyperplace.baselines.common import ClusterView, FreeState
from hyperplace.models.instance import Instance
from hyperplace.models.job import TrainingJob
from hyperplace.models.sharing import released, running_gpus


@dataclass
class PeerPreemption:
    """What a peer rule decided for one preemptor."""

    rule: str
    victims: list[str] = field(default_factory=list)
    lost_gpu_seconds: float = 0.0
    fits: bool = False  # the preemptor is then placed whole (hyperplace's exact check)


def _type_ok(instance: Instance, job: TrainingJob, gpu_type: str) -> bool:
    t = instance.catalog.get(gpu_type)
    return all(u.gpu_types is None or t.matches(u.gpu_types) for u in job.units())


def _lost(instance: Instance, victims: list[str]) -> float:
    info, held = instance.running_job_info, running_gpus(instance)
    return sum(len(held[v]) * info[v].checkpoint_age_s for v in victims)


def preemptor_fits(instance: Instance, job: TrainingJob, victims: list[str]) -> bool:
    """Whether ``job`` alone is placed whole once ``victims`` are stopped (exact, CP-SAT)."""
    from hyperplace.solvers.driver import solve_placement

    plan = solve_placement(released(instance, victims).with_jobs([job]), solver="cpsat",
                           budget_s=10)
    return job.name in plan.admitted


def _admission_order(instance: Instance) -> list[str]:
    listed = [r.name for r in instance.spec.running_jobs]
    rest = sorted(set(running_gpus(instance)) - set(listed))
    return listed + rest


def _tas_assignment_found(instance: Instance, job: TrainingJob, victims: list[str],
                          views: list[ClusterView]) -> bool:
    """``FindTopologyAssignmentsForWorkload`` on the round with ``victims`` removed."""
    state = FreeState(released(instance, victims), "device-plugin")
    return bool(kueue_rule.place_job(job, state, views, random.Random(0)).units)


def kueue_style(instance: Instance, job: TrainingJob, tas: bool = True) -> PeerPreemption:
    """Kueue's classical preemption within the job's ClusterQueue, the fit checked with the
    TAS assignment (``tas=False``: by quota only; see the module docstring for the source)."""
    info, held = instance.running_job_info, running_gpus(instance)
    node_type = {n.name: n.gpu_type for c in instance.clusters for n in c.nodes}
    ok = {t: _type_ok(instance, job, t) for t in set(node_type.values())}
    free = sum(n.free_count for c in instance.clusters for n in c.nodes if ok[n.gpu_type])
    order = _admission_order(instance)
    queue = instance.queue_of(job)
    cands = [v for v in held if v in info and info[v].priority < job.priority
             and info[v].queue == queue and any(ok[node_type[n]] for n, _ in held[v])]
    cands.sort(key=lambda v: (info[v].priority, -order.index(v)))
    views = [ClusterView(c, instance.catalog) for c in instance.clusters] if tas else []

    def usable(v: str) -> int:
        return sum(1 for n, _ in held[v] if ok[node_type[n]])

    def fits(victims: list[str], free_gpus: int) -> bool:  # workloadFits, L669-684
        return free_gpus >= job.total_gpus and (
            not tas or _tas_assignment_found(instance, job, victims, views))

    rule = "kueue" if tas else "kueue-classical"
    targets: list[str] = []
    fit = fits(targets, free)
    for v in cands:
        if fit:
            break
        targets.append(v)
        free += usable(v)
        fit = fits(targets, free)
    if not fit:
        return PeerPreemption(rule)
    for i in range(len(targets) - 2, -1, -1):  # fill back, reverse order, all but the last
        back = targets[:i] + targets[i + 1:]
        if fits(back, free - usable(targets[i])):
            free -= usable(targets[i])
            targets = back
    return PeerPreemption(rule, targets, _lost(instance, targets),
                          preemptor_fits(instance, job, targets))


def kueue_classical_style(instance: Instance, job: TrainingJob) -> PeerPreemption:
    """Kueue's classical preemption on a flavor without TAS: the fit counts GPUs only."""
    return kueue_style(instance, job, tas=False)


def volcano_style(instance: Instance, job: TrainingJob) -> PeerPreemption:
    """Volcano's ``preempt`` action, node by node (see the module docstring for the source)."""
    info, held = instance.running_job_info, running_gpus(instance)
    nodes = [n for c in instance.clusters for n in c.nodes if _type_ok(instance, job, n.gpu_type)]
    busy: dict[str, set[int]] = {n.name: set(n.allocated) | set(n.faulty) for n in nodes}
    owner = {(n.name, g): j for n in nodes for g, j in n.allocated.items()}
    victims: list[str] = []
    queue = instance.queue_of(job)
    for unit in job.units():
        order = sorted(nodes, key=lambda n: (-(n.gpu_count - len(busy[n.name])), n.name))
        placed = False
        for n in order:
            if n.gpu_count < unit.gpus:
                continue
            local = sorted({owner[(n.name, g)] for g in busy[n.name] if (n.name, g) in owner
                            and owner[(n.name, g)] not in victims
                            and info[owner[(n.name, g)]].priority < job.priority
                            and info[owner[(n.name, g)]].queue == queue},
                           key=lambda v: (info[v].priority, v))
            trial = list(victims)
            taken = set(busy[n.name])
            while n.gpu_count - len(taken) < unit.gpus and local:
                v = local.pop(0)
                trial.append(v)
                taken -= {g for name, g in held[v] if name == n.name}
            if n.gpu_count - len(taken) >= unit.gpus:
                for v in trial[len(victims):]:  # gang: the victim's GPUs everywhere are freed
                    for name, g in held[v]:
                        if name in busy:
                            busy[name].discard(g)
                victims = trial
                free_now = sorted(set(range(n.gpu_count)) - busy[n.name])
                busy[n.name] |= set(free_now[:unit.gpus])
                placed = True
                break
        if not placed:
            return PeerPreemption("volcano")  # not pipelined: evictions discarded
    return PeerPreemption("volcano", victims, _lost(instance, victims),
                          preemptor_fits(instance, job, victims))
