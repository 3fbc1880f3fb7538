"""Karmada's division over time: per-cluster queues, each member cluster with its own local
scheduler, the faithful peer of ``engine-federated`` (:mod:`hyperplace.fedsim.planned`).

Re-implemented from karmada-io/karmada at commit f8fdd02 (read, not copied):

* **When.** A job arriving at the federation is a ResourceBinding the karmada-scheduler
  schedules once (priority, then arrival: its scheduling queue); a division that fails
  (``UnschedulableError``) is retried, here at every event (the members' Kueue cadence,
  ``SimConfig.cadence`` upstream; every ``round_s`` with ``uniform``), until it succeeds. A scheduled
  binding is not re-divided when the member's part then waits in its local queue.
* **Unit.** Karmada divides *replicas*; here one replica is one data-parallel replica of the
  job (its whole pipeline, ``stages`` pods of ``gpusPerGroup`` GPUs: a component set, kept
  in one member). A job of one replica goes whole to one member.
* **Available replicas per member** (``pkg/scheduler/core/util.go`` L57-103,
  ``calAvailableReplicas``: the minimum over the enabled estimators): the general estimator
  on the member's resource summary, ``floor((allocatable - allocated - allocating) /
  request)`` (``pkg/estimator/client/general.go`` L66-108 and ``availableResourceMap``
  L409-423), where *allocating* is what pods still pending for scheduling in the member
  request (``pkg/apis/cluster/v1alpha1/types.go`` L352: parts already divided to the member
  and waiting in its queue); and the scheduler-estimator's node-resource plugin, the sum
  over nodes of ``floor(free / pod request)`` (``pkg/estimator/server/framework/plugins/
  noderesource/noderesource.go`` L70-130, L127), a replica needing ``stages`` such pods.
  Only GPUs of types the job accepts count, and only members that have such GPUs are
  candidates (the clusterAffinity an operator writes for a job pinned to a GPU type). A
  division that gives a member more replicas than it has GPUs for at all is unschedulable
  (its part would never run).
* **Division** (``pkg/scheduler/core/division_algorithm.go`` L75-98,
  ``dynamicDivideReplicas``; ``assignment.go`` L95-110 picks the strategy):
  ``karmada-aggregated`` (Divided, Aggregated): unschedulable when the members' available
  replicas sum to fewer than the job's (L76-77); else the shortest most-available-first
  prefix that covers them (L81-90), spread over it by available replicas;
  ``karmada-dynamic`` (Divided, DynamicWeight by AvailableReplicas, L91-97): the same test,
  spread over every member by available replicas; ``karmada-static`` (Divided,
  StaticWeight, ``assignment.go`` L199-211, ``getStaticWeightInfoList``
  ``division_algorithm.go`` L39-71: every member weight 1 when none is given): spread by
  the weights, blind to free capacity. The spread is Webster's method
  (``pkg/util/helper/binding.go`` L178 -> ``webstermethod.go``),
  :func:`hyperplace.federation.karmada.webster`.
* **Splits off** (``--no-federation-split``; the ``-whole`` policies): a spread constraint
  ``spreadByField: cluster, maxGroups: 1`` (what Volcano Global's HyperJob controller
  writes, peers.md): the job goes whole to the member with the most available replicas
  among those that hold all of them (static: the first by weight, then name), else it is
  unschedulable this round.

**Members.** Each member cluster runs its own local scheduler over its own queue: Kueue
BestEffortFIFO with Kueue TAS's placement rule (the ``kueue`` peer of
:mod:`hyperplace.sim.policies`: priority, then arrival; a part that does not fit is skipped
and the next one tried), on that member's free GPUs only. An admitted part holds its GPUs.
Nothing coordinates the members (Karmada has no gang across clusters): a split job runs
once its last part is admitted, and parts admitted earlier hold their GPUs idle meanwhile
(reported as ``held GPU-hours``). A part held longer than :data:`HOLD_TIMEOUT_S` without
its siblings is released and queued again (its pods give up: PyTorch elastic's rendezvous
``join_timeout`` default, 600 s, ``torch/distributed/elastic/rendezvous``), so two split
jobs holding one part each cannot block each other for ever. A job split by the division
runs at the speed the federation's pricing gives its division
(:func:`hyperplace.fedsim.common.split_speed`: slowest part, cross-cluster penalty,
data-parallel shape of :meth:`~hyperplace.federation.pricing.Pricer.data_parallel`).

Every round, each member's plan of the parts it admitted goes through the independent
checker (``schedule_violations``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hyperplace.baselines.common import JobOutcome, build_plan
from hyperplace.check import Violation
from hyperplace.federation import karmada as division
from hyperplace.federation.asplaced import Location, cluster_instance
from hyperplace.federation.problem import FederatedJob
from hyperplace.fedsim.common import (
    SplitPricing,
    cluster_plan,
    part_manifest,
    require_federation,
    split_speed,
    violations,
)
from hyperplace.models import Instance, TrainingJob
from hyperplace.models.plan import GPURef
from hyperplace.sim.jobs import SimJob
from hyperplace.sim.peers import PeerPlacer
from hyperplace.sim.policies import KUEUE_CADENCE_S, Decision, Policy, RoundView

RULES = ("aggregated", "dynamic", "static")
HOLD_TIMEOUT_S = 600.0
LOCAL_RULE = "kueue"


@dataclass
class PartState:
    job: str
    cluster: str
    replicas: int
    manifest: TrainingJob
    queued_s: float
    gpus: list[tuple[str, int]] = field(default_factory=list)  # held once admitted
    units: dict[str, list[GPURef]] = field(default_factory=dict)
    admitted_s: float | None = None
    _shape: str = ""

    @property
    def shape(self) -> str:
        """What the member's placement rule sees of one replica of the part (its spec
        without the model and the replica count): within a round the member's free GPUs
        only shrink, and the rule (Kueue TAS's) is deterministic and needs more room for
        more replicas, so once ``r`` replicas of a shape did not fit, no part of that shape
        with ``r`` or more is tried again that round (a shortcut that admits the same parts;
        at 0.8+ load most waiting parts are such repeats)."""
        if not self._shape:
            self._shape = self.manifest.spec.model_dump_json(exclude={"model",
                                                                       "replica_count"})
        return self._shape


class KarmadaDivision(SplitPricing, Policy):
    """``karmada-<rule>`` (``-whole`` with splits off); see the module docstring."""

    # each member's local Kueue decides at every event (hyperplace.sim.policies.
    # KUEUE_CADENCE_S, cited there), and a division that failed is retried at those events
    cadence_s = KUEUE_CADENCE_S

    def __init__(self, instance: Instance, rule: str = "aggregated", *, split: bool = True,
                 seed: int = 0, hold_timeout_s: float = HOLD_TIMEOUT_S):
        require_federation(instance)
        self.instance = instance
        if rule not in RULES:
            raise ValueError(f"unknown Karmada rule {rule!r}; use one of {', '.join(RULES)}")
        self.rule = rule
        self.split_on = split
        self.name = f"karmada-{rule}" + ("" if split else "-whole")
        self.hold_timeout_s = hold_timeout_s
        self.clusters = [c.name for c in instance.clusters]
        self.init_pricing(instance)
        self.placers = {c: PeerPlacer(cluster_instance(instance, c, []), LOCAL_RULE, seed)
                        for c in self.clusters}
        self.tolerated = self.placers[self.clusters[0]].tolerated  # the members' rule's
        self.parts: dict[str, list[PartState]] = {}  # job -> its parts (bound jobs)
        self.stats = {"priced_as_default": 0, "divisions": 0, "split": 0, "unschedulable": 0,
                      "timeouts": 0, "held_gpu_s": 0.0, "failed_parts": 0}
        self._last_now: float | None = None

    # ---- hooks the simulator reads -----------------------------------------------------
    def schedule_violations(self, now: float) -> list[Violation]:
        return violations(self._checks)

    def wake_s(self, now: float) -> float | None:
        """The next time a held part gives up (a round is needed then)."""
        times = [p.admitted_s + self.hold_timeout_s for parts in self.parts.values()
                 for p in parts if p.admitted_s is not None]
        return min(times) if times else None

    def notes(self) -> list[str]:
        s = self.stats
        return [f"{self.name}: {s['divisions']} division(s), {s['split']} over several member "
                f"clusters, {s['unschedulable']} unschedulable attempt(s) retried, "
                f"{s['timeouts']} held part(s) timed out, "
                f"{s['held_gpu_s'] / 3600:.1f} GPU-hours held idle by parts waiting for "
                f"their siblings, {s['priced_as_default']} job(s) priced as the default model "
                "for their GPU count"]

    # ---- estimates and division --------------------------------------------------------
    def priced(self, job: SimJob) -> FederatedJob:
        """The job as Karmada's estimator and the pricing see it: its own form."""
        return self.priced_form(job.manifest, split=False)

    def available(self, view: RoundView, fj: FederatedJob) -> dict[str, int]:
        """Available replicas of ``fj`` per member (module docstring)."""
        state = view.state
        catalog = state.base.catalog
        sel = fj.type_selector()
        replica_gpus = fj.replica_gpus if fj.replicas > 1 else fj.gpus
        pod = fj.unit_gpus(0)
        pods = fj.stages if fj.replicas > 1 else fj.stages * fj.replicas
        free = {c: 0 for c in self.clusters}
        node_fit = {c: 0 for c in self.clusters}
        for name, node in state.nodes.items():
            t = catalog.get(node.gpu_type)
            if sel and not t.matches(sel):
                continue
            cl = state.cluster_of[name]
            k = len(state.free_gpus(name))
            free[cl] += k
            node_fit[cl] += k // pod if pod > 0 else 0
        allocating = {c: 0 for c in self.clusters}
        for parts in self.parts.values():
            for p in parts:
                if p.admitted_s is None:
                    allocating[p.cluster] += p.manifest.total_gpus
        out = {}
        for c in self.clusters:
            general = max(0, free[c] - allocating[c]) // replica_gpus
            per_node = node_fit[c] // max(1, pods)
            out[c] = min(general, per_node)
        return out

    def _capacity(self, fj: FederatedJob) -> dict[str, int]:
        """Replicas of ``fj`` each member could ever hold (GPUs of accepted types)."""
        catalog = self.instance.catalog
        sel = fj.type_selector()
        per = fj.replica_gpus if fj.replicas > 1 else fj.gpus
        out = {}
        for c in self.instance.clusters:
            gpus = sum(n.gpu_count for n in c.nodes
                       if sel is None or catalog.get(n.gpu_type).matches(sel))
            out[c.name] = gpus // per
        return out

    def divide(self, fj: FederatedJob, avail: dict[str, int]) -> dict[str, int] | None:
        """Karmada's division of ``fj``'s replicas (module docstring) over the members with
        GPUs of a type the job accepts (the clusterAffinity an operator writes for a job
        pinned to a type); None: unschedulable this round."""
        want = fj.replicas
        cap = self._capacity(fj)
        members = [c for c in self.clusters if cap[c] > 0]
        avail = {c: avail[c] for c in members}
        if not members:
            return None
        if not self.split_on:
            if self.rule == "static":
                div: dict[str, int] | None = {members[0]: want}
            else:
                fits = [c for c in members if avail[c] >= want]
                div = {max(fits, key=lambda c: (avail[c], -members.index(c))): want} \
                    if fits else None
        elif want == 1 and self.rule == "static":
            div = division.static_weight(1, {c: 1 for c in members})
        elif self.rule == "aggregated":
            div = division.aggregated(want, avail)
        elif self.rule == "dynamic":
            seats = division.webster(want, avail) if sum(avail.values()) >= want else None
            div = {c: s for c, s in seats.items() if s > 0} if seats is not None else None
        else:
            div = division.static_weight(want, {c: 1 for c in members})
        if div is not None and any(r > cap[c] for c, r in div.items()):
            return None  # a part no member could ever hold: it would never run
        return div

    # ---- a round ----------------------------------------------------------------------
    def decide(self, view: RoundView) -> Decision:
        assert self.fs is not None, "the simulator builds the speed model first"
        t0 = time.perf_counter()
        now = view.now
        self._account_holds(view, now)
        self.let_go(view, now)
        queue = sorted(view.queue, key=lambda j: (-j.manifest.priority, j.submit_s, j.name))
        jobs = {j.name: j for j in queue}
        # 1. the karmada-scheduler divides every job not yet scheduled
        for job in queue:
            if job.name in self.parts:
                continue
            fj = self.priced(job)
            div = self.divide(fj, self.available(view, fj))
            if div is None:
                self.stats["unschedulable"] += 1
                continue
            self.stats["divisions"] += 1
            self.stats["split"] += int(len(div) > 1)
            self.parts[job.name] = [PartState(job.name, c, r, part_manifest(job.manifest, c, r),
                                              now) for c, r in sorted(div.items())]
        # 2. each member's local scheduler admits parts from its own queue
        inst = view.state.instance([j.manifest for j in queue])
        self._checks = []
        for cl in self.clusters:
            waiting = [p for name in self.parts for p in self.parts[name]
                       if p.cluster == cl and p.admitted_s is None and name in jobs]
            if not waiting:
                continue
            waiting.sort(key=lambda p: (-jobs[p.job].manifest.priority, p.queued_s,
                                        jobs[p.job].submit_s, p.job))
            member = cluster_instance(inst, cl, [])
            placer = self.placers[cl]
            fs = placer.state(member)
            admitted: dict[str, tuple[TrainingJob, dict[str, list[GPURef]]]] = {}
            failed: dict[str, int] = {}  # part shape -> fewest replicas that did not fit
            for p in waiting:
                if p.replicas >= failed.get(p.shape, p.replicas + 1):
                    continue  # as many or fewer of these replicas failed on more free GPUs
                units = placer.place(p.manifest, fs)
                if units is None:
                    failed[p.shape] = p.replicas
                    continue  # BestEffortFIFO: the next one is tried
                admitted[p.manifest.name] = (p.manifest, units)
                p.units = units
                p.gpus = [(g.node, g.gpu) for gs in units.values() for g in gs]
                p.admitted_s = now
            if admitted:
                self._checks.append(cluster_plan(inst, cl, f"{self.name}/{LOCAL_RULE}",
                                                 admitted))
                for name, _ in admitted.items():
                    part = next(p for ps in self.parts.values() for p in ps
                                if p.manifest.name == name)
                    view.state.allocate(hold_name(part), part.gpus)
        # 3. a job whose every part is admitted runs; its parts' holds become the job's GPUs
        starts: dict[str, dict[str, list[tuple[str, int]]]] = {}
        for name, parts in list(self.parts.items()):
            if name not in jobs or any(p.admitted_s is None for p in parts):
                continue
            for p in parts:
                view.state.release(hold_name(p))
            units = {f"{p.cluster}:{u}": [(g.node, g.gpu) for g in gs]
                     for p in parts for u, gs in p.units.items()}
            if len(parts) > 1:
                self.fs.split[name] = self._split_speed(jobs[name], parts)
            starts[name] = units
            del self.parts[name]
        solve_s = time.perf_counter() - t0
        outcomes = {j.name: JobOutcome(reasons=[
            "started: its parts were admitted by the member clusters (per-cluster plans)"
            if j.name in starts else f"{self.name}: divided or waiting in member queues"])
            for j in queue}
        return Decision(starts=starts, instance=inst,
                        plan=build_plan(inst, self.name, outcomes, solve_s), solve_s=solve_s,
                        status="feasible")

    def _split_speed(self, job: SimJob, parts: list[PartState]) -> float:
        fj = self.priced(job)
        assert self.fs is not None
        catalog = self.fs.instance.catalog
        locs = []
        for p in parts:
            node = p.gpus[0][0]
            gtype = catalog.get(self.fs.instance.node_index[node][1].gpu_type).name
            locs.append((Location(p.cluster, gtype), p.replicas))
        price = self.pricer.data_parallel(fj, locs)
        by_cluster = {p.cluster: {u: [(g.node, g.gpu) for g in gs] for u, gs in p.units.items()}
                      for p in parts}
        speed, _ = split_speed(self.fs, self.pricer, fj, job.manifest, by_cluster,
                               price.step_time_s if price.feasible else None)
        return speed

    def _account_holds(self, view: RoundView, now: float) -> None:
        last = self._last_now
        self._last_now = now
        if last is None or now <= last:
            return
        for parts in self.parts.values():
            for p in parts:
                if p.admitted_s is not None:
                    self.stats["held_gpu_s"] += len(p.gpus) * (now - max(last, p.admitted_s))

    def let_go(self, view: RoundView, now: float) -> None:
        """Held parts past the rendezvous timeout, or on hardware that failed since they
        were admitted (their pods die), let go of their GPUs and queue again."""
        state = view.state
        for parts in self.parts.values():
            for p in parts:
                if p.admitted_s is None:
                    continue
                # a failure the round state saw released the hold (it is no running job)
                broken = hold_name(p) not in state.jobs or any(
                    i in state.unusable(n) for n, i in p.gpus)
                if broken or now - p.admitted_s >= self.hold_timeout_s:
                    view.state.release(hold_name(p))
                    p.admitted_s, p.gpus, p.units = None, [], {}
                    p.queued_s = now
                    self.stats["timeouts" if not broken else "failed_parts"] += 1


def hold_name(part: PartState) -> str:
    return f"{part.manifest.name}#held"

