"""The placement problem: a scheduling round as backend-independent data.

Built once from an :class:`~hyperplace.models.instance.Instance`; the model builder, greedy,
the mapping back and the explanations all ask it the same questions, and every placement
rule that decides whether a unit may use a node is a method here (written once):

* :meth:`PlacementProblem.eligible_types` / :meth:`~PlacementProblem.types_for`: GPU type
  and memory;
* :meth:`PlacementProblem.gpus_eligible`: type, memory and the NVLink rule for multi-node
  units;
* :meth:`PlacementProblem.link_eligible`: the node's link rate against the job's and the
  unit's between-node rates;
* :meth:`PlacementProblem.node_eligible`: both;
* :meth:`PlacementProblem.piece_capacity`: how many pieces fit on the node's free GPUs.

Each building step (nodes, jobs, node classes, bundles, priority phases) is a method or a cached
property of its own, so that a later round can reuse what did not change: given the previous
round's problem (``previous=``), a node whose hardware and fabric are unchanged keeps its pair
bandwidths, link rate, leaf and clique cache (only its free GPUs are read again), and a job
whose manifest is unchanged keeps its unit classes and reasons, when every node's hardware,
the GPU catalog and the queues are the same (what a job view depends on besides the job).
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections import defaultdict
from collections.abc import Iterable
from functools import cached_property
from typing import Protocol, TypeVar

from hyperplace.formulations.placement.domains import DomainKey, radius_for
from hyperplace.formulations.placement.nvlink import NVLinkRound, zero_hop_domain
from hyperplace.formulations.placement.params import ModelParams
from hyperplace.formulations.placement.migration import Migration
from hyperplace.models.migration import MigrationPolicy
from hyperplace.formulations.placement.preemption import Preemption, check_policy
from hyperplace.formulations.placement.stoppable import (
    BrokenJob,
    Mover,
    PreemptionCandidate,
    Stoppable,
    StopsJobs,
)
from hyperplace.formulations.placement.quotas import UNCOVERED, QuotaBook, build_quota_book
from hyperplace.formulations.placement.reasons import PendingReason, ReasonCode
from hyperplace.formulations.placement.extensions import RoundExtension
from hyperplace.formulations.placement.free_domain import FreeDomainGrowth
from hyperplace.formulations.placement.repair import FailureRepair
from hyperplace.formulations.placement.spares import HotSpares
from hyperplace.formulations.placement.phases import demand_by_level, priority_phases, phase_weights
from hyperplace.formulations.placement.views import (
    WHOLE_JOB_GROUP,
    cut_patterns,
    JobView,
    NodeClass,
    NodeView,
    UnitClass,
)
from hyperplace.models.priority import priority_weights
from hyperplace.models.cluster import Cluster
from hyperplace.models.gpu import GPUType
from hyperplace.models.instance import Instance
from hyperplace.models.job import GangUnit, GroupType, TrainingJob
from hyperplace.models.node import Node

POLICIES = ("performance", "cost")
#: The round's families (:mod:`~hyperplace.formulations.placement.extensions`), in the order
#: their hooks run: hot spares, failure repair, free-domain growth, migration, preemption
FAMILIES: tuple[type[RoundExtension], ...] = (HotSpares, FailureRepair, FreeDomainGrowth,
                                              Migration, Preemption)
_V = TypeVar("_V", JobView, UnitClass, NodeView)


class TypeRequirement(Protocol):
    """Anything with a GPU type selector and a memory floor (a unit, a unit class)."""

    @property
    def gpu_types(self) -> str | None: ...

    @property
    def min_memory_gb(self) -> float: ...


#: View fields that name a job or unit rather than describe what it needs.
_JOB_IDENTITY = frozenset({"index", "job", "priority", "classes", "impossible"})
_CLASS_IDENTITY = frozenset({"index", "job", "units"})


def _fields_key(view: object, skip: frozenset[str]) -> tuple[object, ...]:
    """The view's dataclass fields but ``skip``, hashable (lists as tuples; anything else
    unhashable by its repr, which tells equal values apart from unequal ones or, at worst,
    equal ones apart: never a false match)."""
    out: list[object] = []
    names = _FIELD_NAMES.get((type(view), skip))
    if names is None:
        names = _FIELD_NAMES[(type(view), skip)] = tuple(
            f.name for f in dataclasses.fields(view)  # type: ignore[arg-type]
            if f.name not in skip)
    for name in names:
        value = getattr(view, name)
        if isinstance(value, list):
            value = tuple(value)
        try:
            hash(value)
        except TypeError:
            value = repr(value)
        out.append((name, value))
    return tuple(out)


#: (view class, fields skipped) -> the names of its other fields, in order
_FIELD_NAMES: dict[tuple[type, frozenset[str]], tuple[str, ...]] = {}


def _clone(view: _V) -> _V:
    """A shallow copy of a view (dataclass): its fields, none of its lists copied (what
    ``copy.copy`` gives, at a fifth of its cost: 16,384 node views a warm round)."""
    out = object.__new__(type(view))
    out.__dict__.update(view.__dict__)
    return out


class PlacementProblem:
    """Everything a backend needs, derived once from an :class:`Instance`.

    Parameters
    ----------
    instance : Instance
        Clusters (with their free GPUs) and the pending jobs of the round.
    policy : str
        ``"performance"`` (fastest qualifying GPU type first) or ``"cost"`` (cheapest).
    params : ModelParams, optional
        Weights of the lower objectives and the clique cap.
    previous : PlacementProblem, optional
        The previous round's problem on the same clusters: views of unchanged nodes and
        jobs are reused (see the module docstring); it is not kept. Not with preemption or
        migration (a round that may stop running jobs marks their GPUs on its node views).
    preemption : str
        ``never`` (default), ``lower-priority`` or ``reclaim-within-cohort``: which running
        jobs the round may stop (:mod:`~hyperplace.formulations.placement.preemption`).
    migration : MigrationPolicy, optional
        Which running jobs (with manifests) the round may migrate
        (:mod:`~hyperplace.formulations.placement.migration`); not with ``preemption``.
    hot_spares : int
        Whole free nodes each leaf keeps free for repairs (:attr:`spare_allowance`,
        :mod:`~hyperplace.formulations.placement.spares`); 0 (default) keeps none.
    """

    def __init__(self, instance: Instance, policy: str = "performance",
                 params: ModelParams | None = None,
                 previous: PlacementProblem | None = None, preemption: str = "never",
                 migration: MigrationPolicy | None = None, hot_spares: int = 0):
        if policy not in POLICIES:
            raise ValueError(f"unknown policy {policy!r}; use performance or cost")
        self.hot_spares = _check_spares(hot_spares)
        check_policy(preemption)
        if migration is not None and preemption != "never":
            raise ValueError("a round either preempts or migrates running jobs, not both")
        self.preemption = preemption
        self.migration = migration
        self.instance = instance
        self.policy = policy
        self.params = params or ModelParams()
        self.catalog = instance.catalog
        self._eligible_types: dict[tuple[str | None, float], frozenset[str]] = {}
        self._types_for: dict[frozenset[tuple[str | None, float]], frozenset[str]] = {}
        self._best_link: dict[frozenset[str], float] = {}
        self._uplink: dict[str, float] = {}
        self._domains: dict[tuple[str, int | None], DomainKey] = {}
        self._domains_of: dict[tuple[str, int | None], tuple[DomainKey, ...]] = {}
        self._domain_leaves: dict[tuple[int | None, bool], dict[DomainKey, list[DomainKey]]] = {}
        self._shapes: dict[int, tuple[object, ...]] = {}
        #: pending jobs' views by what they are made of (:meth:`_add_job`)
        self._like: dict[tuple[object, ...], tuple[JobView, list[list[int]]]] = {}
        #: nodes and jobs whose views came from the previous round (names)
        self.reused_nodes: set[str] = set()
        self.reused_jobs: set[str] = set()
        prev = previous if previous is not None and _compatible(previous, self) and \
            not previous.preempting and not previous.stoppable and preemption == "never" and \
            migration is None else None
        #: the previous round's problem and the (previous, this round's) views of the nodes
        #: whose state changed, when every other node keeps its view and its place
        #: (:meth:`carried_layout`); None otherwise
        self._layout: tuple[weakref.ref[PlacementProblem], list[tuple[NodeView, NodeView]]] \
            | None = None
        self.nodes: list[NodeView] = self._build_nodes(prev)
        if prev is not None and self._layout is not None:
            self._carry_node_tables(prev, self._layout[1])
        else:
            self.node_by_name = {n.name: n for n in self.nodes}
            self.max_gpus_per_node = max((n.node.gpu_count for n in self.nodes), default=0)
            self.free_gpus = sum(len(n.free) for n in self.nodes)
        #: the round's multi-node NVLink domains (NVL72 racks), :mod:`.nvlink`
        self.nvlink = NVLinkRound(self)
        self.jobs: list[JobView] = []
        self.classes: list[UnitClass] = []
        same_nodes = prev is not None and \
            len(self.reused_nodes) == len(self.nodes) == len(prev.nodes)
        if prev is not None:
            self._carry_fabric_figures(prev, same_nodes)
        # a job view depends on the job and on every node's hardware (types present, largest
        # nodes, best links) and the queues: reuse job views only when all of those held
        old_jobs = {jv.name: jv for jv in prev.jobs} if prev is not None and same_nodes and \
            _same_queues(prev.instance, instance) else {}
        for job in instance.jobs:
            old = old_jobs.get(job.name)
            if old is not None and (old.job is job or old.job == job):
                self._adopt_job(old)
            else:
                self._add_job(job, like_earlier=True)
        #: running jobs the round may stop: preemption candidates, movers or broken jobs
        #: (one role per round, :mod:`~hyperplace.formulations.placement.stoppable`), each
        #: family finding its own (:meth:`RoundExtension.add_stoppable
        #: <hyperplace.formulations.placement.extensions.RoundExtension.add_stoppable>`)
        self.stoppable: list[Stoppable] = []
        #: running jobs that could have moved but were left out by ``max_movers``
        self.movers_left_out = 0
        for family in FAMILIES:
            family.add_stoppable(self)
        self.weights = priority_weights(self._weighted_demands(), self.weight_capacity)

    # ---- preemption ----------------------------------------------------------------
    @property
    def preempting(self) -> bool:
        """The round may stop running jobs: objective 1 then counts them too."""
        return self.preemption != "never"

    def add_stoppable_job(self, v: Stoppable) -> None:
        """Add running job ``v`` (its ``index`` the next one) to the jobs the round may
        stop, its GPUs marked reachable on their nodes (a family's
        :meth:`RoundExtension.add_stoppable
        <hyperplace.formulations.placement.extensions.RoundExtension.add_stoppable>`)."""
        assert v.index == len(self.stoppable), f"{v.name}: index {v.index} out of order"
        self.stoppable.append(v)
        for node, g in v.gpus:
            self.node_by_name[node].stoppable[g] = v.index

    def add_copy(self, job: TrainingJob, stoppable: int, queue: str) -> JobView:
        """Add ``job`` (a running job's manifest, or its failed units) as a job of the round
        that runs exactly when stoppable job ``stoppable`` is stopped, in ``queue``; its
        view."""
        self._add_job(job)
        view = self.jobs[-1]
        view.migrant, view.queue = stoppable, queue
        return view

    # ---- migration -----------------------------------------------------------------
    @property
    def repairing(self) -> bool:
        """The round repairs broken jobs (its movers; objective 1 counts those repaired)."""
        return self.migration is not None and self.migration.repairing

    def repair_gpus(self, v: Mover) -> int:
        """GPUs of a broken job's manifest (what objective 1 counts when it is repaired)."""
        return self.jobs[v.copy].gpus

    def mover(self, v: int) -> Mover:
        """Stoppable job ``v`` of a migrating (or repairing) round: a mover."""
        m = self.stoppable[v]
        assert isinstance(m, Mover), f"{m.name} is not a mover"
        return m

    def candidate(self, v: int) -> PreemptionCandidate:
        """Stoppable job ``v`` of a preempting round: a preemption candidate."""
        c = self.stoppable[v]
        assert isinstance(c, PreemptionCandidate), f"{c.name} is not a preemption candidate"
        return c

    def partial_of(self, v: int) -> int | None:
        """The job index of broken job ``v``'s repair in part (None: none, or no repair)."""
        b = self.stoppable[v]
        return b.partial if isinstance(b, BrokenJob) else None

    @cached_property
    def movers(self) -> list[Mover]:
        """The round's movers (broken jobs too); empty unless it migrates or repairs."""
        return [v for v in self.stoppable if isinstance(v, Mover)]

    @cached_property
    def candidates(self) -> list[PreemptionCandidate]:
        """The round's preemption candidates; empty unless it may preempt."""
        return [v for v in self.stoppable if isinstance(v, PreemptionCandidate)]

    @property
    def pending(self) -> list[JobView]:
        """The pending jobs of the round (its jobs but the copies of movers)."""
        return [jv for jv in self.jobs if jv.migrant is None]

    def is_copy(self, j: int) -> bool:
        """Job ``j`` is a mover's copy (not a pending job)."""
        return self.jobs[j].migrant is not None

    @property
    def weight_capacity(self) -> int:
        """GPUs objective 1 can count: the free ones, and those the round's families count
        too (:meth:`RoundExtension.counted_gpus
        <hyperplace.formulations.placement.extensions.RoundExtension.counted_gpus>`: with
        preemption the running jobs', with failure repair the broken jobs' healthy ones)."""
        return self.free_gpus + sum(ext.counted_gpus() for ext in self.extensions)

    def _weighted_demands(self) -> list[tuple[float, int]]:
        """Objective 1's demands (priority level, GPUs): the pending jobs', then the
        families' (:meth:`RoundExtension.weighted_demands
        <hyperplace.formulations.placement.extensions.RoundExtension.weighted_demands>`)."""
        demands: list[tuple[float, int]] = [(j.priority, j.gpus) for j in self.jobs
                                            if j.migrant is None]
        for ext in self.extensions:
            demands += ext.weighted_demands()
        return demands

    def kept_running_demand(self, stopped: Iterable[int] = ()) -> int:
        """Objective 1's share of the running jobs that keep running, all but the
        ``stopped`` ones (0 without preemption: :meth:`RoundExtension.kept_demand
        <hyperplace.formulations.placement.extensions.RoundExtension.kept_demand>`)."""
        return sum(ext.kept_demand(stopped) for ext in self.extensions)

    @property
    def relaxation_bounds(self) -> bool:
        """The LP relaxations (the model's, the aggregated model's) bound objective 1 and
        admitted jobs in this round (every family's :attr:`RoundExtension.relaxation_bounds
        <hyperplace.formulations.placement.extensions.RoundExtension.relaxation_bounds>`)."""
        return all(ext.relaxation_bounds for ext in self.extensions)

    @property
    def plan_objective(self) -> str | None:
        """The term a family reports as what the round maximises first, beside objective 1
        (failure repair's repaired demand; None: objective 1 itself)."""
        return next((ext.plan_objective for ext in self.extensions if ext.plan_objective),
                    None)

    def _carry_fabric_figures(self, prev: PlacementProblem, same_nodes: bool) -> None:
        """What the previous round computed from the fabrics and every node's hardware,
        where it still holds: the slowest switch-to-switch link of a cluster on the same
        fabric object (a scan of every link: 0.12 s at 131,072 GPUs), and, when every node
        has the same hardware (``same_nodes``), the fastest node link per GPU-type set."""
        nets = {c.name: c.network for c in self.instance.clusters}
        old_nets = {c.name: c.network for c in prev.instance.clusters}
        self._uplink = {name: v for name, v in prev._uplink.items()
                        if name in nets and nets[name] is old_nets.get(name)}
        if same_nodes and all(nets[k] is old_nets.get(k) for k in nets):
            self._best_link = dict(prev._best_link)

    # ---- nodes --------------------------------------------------------------------
    def _build_nodes(self, prev: PlacementProblem | None = None) -> list[NodeView]:
        """One view per node: free GPUs, pair bandwidths, link rate, leaf (reused from
        ``prev`` for a node with the same hardware on the same fabric)."""
        nodes: list[NodeView] = []
        # nodes of one GPU type and NVLink layout share one (read-only) pair table: at
        # 16,384 nodes building 28 pairs per node was a third of the problem's set-up
        tables: dict[tuple[object, ...], tuple[dict[tuple[int, int], float], float | None]] = {}
        #: (previous, new) views of reused nodes whose state changed; whether every node
        #: kept its view's place
        moved: list[tuple[NodeView, NodeView]] = []
        in_place = prev is not None
        for cluster in self.instance.clusters:
            net = cluster.network
            for node in cluster.nodes:
                old = prev.node_by_name.get(node.name) if prev is not None else None
                if old is not None and old.cluster.network is net and \
                        same_hardware(old.node, node):
                    if old.node is node and old.index == len(nodes):
                        # the same node object in the same place: the very view (its fields
                        # are the node's and the fabric's; the cluster it names is this
                        # round's copy of the same one): a round costs what changed
                        view = old
                        view.cluster = cluster
                    else:
                        view = _clone(old)  # shares the clique cache (same hardware)
                        in_place = in_place and old.index == len(nodes)
                        view.index, view.node, view.cluster = len(nodes), node, cluster
                        view.free = node.free_gpus
                        moved.append((old, view))
                    if len(view.clique_cache) > 512:
                        view.clique_cache = {}
                    nodes.append(view)
                    self.reused_nodes.add(node.name)
                    continue
                in_place = False
                t = self.catalog.get(node.gpu_type)
                shared = None if node.nvlink_pairs else \
                    (t.name, node.gpu_count, node.nvlink, node.nvlink_gbps)
                found = tables.get(shared) if shared is not None else None
                if found is None:
                    pairs = node.pair_bandwidths(t.nvlink_per_link_gbps, t.nvlink_gbps,
                                                 t.pcie_gbps)
                    values = set(pairs.values())
                    uniform = next(iter(values)) if len(values) == 1 else (
                        math.inf if not pairs else None)
                    if shared is not None:
                        tables[shared] = (pairs, uniform)
                else:
                    pairs, uniform = found
                att = net.attachments.get(node.name)
                link = min(att.values()) if att else None
                nic = sum(x.gbps for x in node.nics) if node.nics else None
                if link is not None and nic is not None:
                    link = min(link, nic)  # the slower of the node's NICs and its cabling
                # on non-tree fabrics a node's switch group plays the leaf: every domain
                # holds a group whole, while a leaf domain may be cut by a larger one
                leaf = net.leaf_of(node.name) if att or net.nvlink_domain_of(node.name) \
                    else None
                nodes.append(NodeView(
                    index=len(nodes), node=node, cluster=cluster, gpu_type=t,
                    free=node.free_gpus, pair_gbps=pairs, uniform_gbps=uniform,
                    attach_gbps=link,
                    leaf=(DomainKey.fabric(cluster.name, leaf) if leaf
                          else DomainKey.single_node(cluster.name, node.name)),
                    max_cliques=self.params.max_clique_enum,
                ))
        if prev is not None and in_place and len(nodes) == len(prev.nodes):
            self._layout = (weakref.ref(prev), moved)
        return nodes

    def _carry_node_tables(self, prev: PlacementProblem,
                           moved: list[tuple[NodeView, NodeView]]) -> None:
        """The node tables of a round whose nodes all kept their views' places
        (:meth:`carried_layout`): the previous round's, with the views of the nodes that
        changed put in (16,384 nodes: each table was a pass over every view a round)."""
        by_name = dict(prev.node_by_name)
        for _, view in moved:
            by_name[view.name] = view
        self.node_by_name = by_name
        self.max_gpus_per_node = prev.max_gpus_per_node  # same hardware
        self.free_gpus = prev.free_gpus + sum(len(new.free) - len(old.free) for old, new in moved)
        for name in ("types_present", "max_gpus_by_type"):  # hardware only
            if name in prev.__dict__:
                self.__dict__[name] = prev.__dict__[name]
        old_leaves = prev.__dict__.get("nodes_by_leaf")
        if old_leaves is not None:
            leaves = dict(old_leaves)
            for leaf in {new.leaf for _, new in moved}:
                leaves[leaf] = [by_name[n.name] for n in leaves[leaf]]
            self.__dict__["nodes_by_leaf"] = leaves

    def carried_layout(self) -> tuple[PlacementProblem, list[tuple[NodeView, NodeView]]] | None:
        """The previous round's problem and the (its, this round's) views of the nodes whose
        state changed, when every other node kept its view, in the same place (same nodes,
        same order, same hardware on the same fabric): what was derived from the previous
        round's views holds for all but those (greedy's free-GPU index,
        :class:`~hyperplace.solvers.heuristics.greedy.State`). None otherwise, or when the
        previous problem is gone."""
        if self._layout is None:
            return None
        prev = self._layout[0]()
        return None if prev is None else (prev, self._layout[1])

    # ---- jobs ---------------------------------------------------------------------
    def _add_job(self, job: TrainingJob, like_earlier: bool = False) -> None:
        """The job's view: unit classes, piece sizes, and reasons it cannot run at all.

        ``like_earlier`` (the round's pending jobs): a job whose units, between-replica
        rules and queue are those of an earlier pending job gets a copy of that job's view
        with its own name, priority and units (:meth:`_add_like`): the view is made of
        nothing else, and a queue of 16,384 jobs has a few hundred such shapes."""
        units = job.units()
        between = job.between_replicas
        queue = self.instance.queue_of(job)
        key: tuple[object, ...] | None = None
        if like_earlier:
            key = (queue, between.max_hop_count, between.min_infiniband_bandwidth_gbps,
                   tuple(tuple(v for k, v in u.__dict__.items() if k != "job") for u in units))
            earlier = self._like.get(key)
            if earlier is not None:
                self._add_like(earlier, job, units)
                return
        jv = JobView(index=len(self.jobs), job=job, priority=job.priority,
                     gpus=sum(u.gpus for u in units), hop_limit=between.max_hop_count,
                     min_ib_gbps=between.min_infiniband_bandwidth_gbps, queue=queue)
        # The fabric cannot give the bandwidth asked between nodes: the job can still run if
        # it all fits on one node (then no fabric link is used).
        fabric_best = self.best_link_gbps(units)
        # only a job whose GPUs exist can be short of links (else the missing type, memory
        # or nodes is the reason, and explain says so)
        types_exist = all(self.eligible_types(u.gpu_types, u.min_memory_gb) for u in units)
        ib_unreachable = types_exist and jv.min_ib_gbps > fabric_best and len(units) > 1
        if ib_unreachable and jv.gpus > self.max_gpus_per_node:
            jv.impossible.append(PendingReason(
                ReasonCode.BETWEEN_NODES_UNREACHABLE, gpus=jv.gpus, available=fabric_best,
                required=jv.min_ib_gbps))
        if jv.hop_limit == 0 or ib_unreachable:
            self._add_whole_job_class(jv, units, explain_size=not ib_unreachable)
        else:
            self._add_group_classes(jv, units)
        self.jobs.append(jv)
        if key is not None:
            at = {id(u): i for i, u in enumerate(units)}
            self._like[key] = (jv, [[at[id(u)] for u in uc.units] for uc in jv.classes])

    def _add_like(self, earlier: tuple[JobView, list[list[int]]], job: TrainingJob,
                  units: list[GangUnit]) -> None:
        """A view of ``job`` copied from an earlier job's of the same key (:meth:`_add_job`):
        its classes hold ``job``'s own units, at the positions the earlier job's held."""
        old, positions = earlier
        jv = _clone(old)
        jv.index, jv.job, jv.priority = len(self.jobs), job, job.priority
        jv.classes, jv.impossible = [], list(old.impossible)
        for uc, at in zip(old.classes, positions):
            new = _clone(uc)
            new.index, new.job = len(self.classes), jv.index
            new.units, new.pieces = [units[i] for i in at], list(uc.pieces)
            self.classes.append(new)
            jv.classes.append(new)
        self.jobs.append(jv)

    def _adopt_job(self, old: JobView) -> None:
        """The previous round's view of an unchanged job, renumbered for this round."""
        jv = _clone(old)
        jv.index, jv.classes, jv.impossible = len(self.jobs), [], list(old.impossible)
        for uc in old.classes:
            new = _clone(uc)
            new.index, new.job = len(self.classes), jv.index
            self.classes.append(new)
            jv.classes.append(new)
        self.jobs.append(jv)
        self.reused_jobs.add(jv.name)

    def _add_whole_job_class(self, jv: JobView, units: list[GangUnit], explain_size: bool) -> None:
        """Every unit of the job on one node: one piece holding them all."""
        strictest = max(units, key=lambda u: (u.min_nvlink_gbps, u.min_memory_gb))
        if jv.gpus > self.max_gpus_per_node and explain_size:
            jv.impossible.append(PendingReason(
                ReasonCode.JOB_LARGER_THAN_NODE, gpus=jv.gpus, available=self.max_gpus_per_node))
        jv.hop_limit = 0
        jv.min_ib_gbps = 0.0
        self._add_class(jv, group=WHOLE_JOB_GROUP, gtype=strictest.group_type, units=units,
                        size=jv.gpus, pieces=[jv.gpus], hop=None, proto=strictest,
                        min_mem=max(u.min_memory_gb for u in units),
                        parts=tuple(sorted((u.gpus for u in units), reverse=True)))

    def _add_group_classes(self, jv: JobView, units: list[GangUnit]) -> None:
        """One class per resource group; a unit that may span nodes is cut into pieces.

        When a unit may span nodes (:meth:`may_span`), a class of at most
        ``params.flexible_max_units`` units gets flexible pieces (any size up to a node,
        per unit, see :attr:`UnitClass.flexible`); a larger class is pooled: each unit takes
        one of a few cut patterns, node-sized pieces first (:attr:`UnitClass.pooled`), so
        that the model grows with the patterns (about log2 of the node size), not with the
        units (on tree fabrics, see :attr:`all_trees`). Pooled classes are a restriction
        (valid plans; a cut outside the patterns, or on a DGX-1 node with an NVLink floor,
        is not found).
        """
        by_group: dict[str, list[GangUnit]] = defaultdict(list)
        for u in units:
            by_group[u.group].append(u)
        g_max = self.max_node_gpus_for(units[0]) if units else 0
        for group, us in by_group.items():
            proto = us[0]
            g_node = self.max_node_gpus_for(proto) or g_max or self.max_gpus_per_node or 1
            sizes: tuple[int, ...] = ()
            # NVLink-bound (:mod:`.nvlink`): all pieces in one NVLink domain (hop 0)
            bound = self.nvlink.binding(proto, g_node)
            hop = 0 if bound else proto.max_hop_count
            if proto.gpus <= g_node:
                pieces = [proto.gpus]
            else:
                full, rest = divmod(proto.gpus, g_node)
                pieces = [g_node] * full + ([rest] if rest else [])
                too_small = self.nvlink.reason(proto) if bound else None
                if too_small is not None:
                    jv.impossible.append(too_small)
                elif proto.max_hop_count == 0 and not bound:
                    jv.impossible.append(PendingReason(
                        ReasonCode.GROUP_LARGER_THAN_NODE, gpus=proto.gpus, available=g_node,
                        group=group))
            patterns: tuple[tuple[int, ...], ...] = ()
            if bound and proto.slice_pods:  # a slice: its pods whole, one per piece
                pod = proto.gpus // proto.slice_pods
                pieces = [pod] * proto.slice_pods
                too_small = self.nvlink.reason(proto)
                if too_small is not None and too_small not in jv.impossible:
                    jv.impossible.append(too_small)
            elif bound or self.may_span(proto, g_node):
                if len(us) <= self.params.flexible_max_units or not self.all_trees:
                    sizes = tuple(range(1, min(proto.gpus, g_node) + 1))
                else:
                    patterns = cut_patterns(proto.gpus, g_node)
                    pieces = list(patterns[0])
            if any(u.gpus != proto.gpus for u in us):
                raise AssertionError("units of one group differ in size")
            self._add_class(jv, group=group, gtype=proto.group_type, units=us,
                            size=proto.gpus, pieces=pieces, hop=hop,
                            proto=proto, min_mem=proto.min_memory_gb, piece_sizes=sizes,
                            patterns=patterns, nvlink_bound=bound)

    def restrictions(self) -> list[str]:
        """Where the model sees fewer placements than the rules allow, in words: pooled cut
        classes (each unit takes one of a few cut patterns) and nodes whose GPU sets were
        enumerated only up to ``params.max_clique_enum``. Plans of such a round are valid, but
        the model's optimum and bounds hold only within it: the driver then never reports
        ``optimal`` and bounds objective 1 by a bound that ignores the restriction."""
        pooled = sorted({jv.name for jv in self.jobs if not jv.impossible
                         for uc in jv.classes if uc.pooled})
        capped = sorted(n.name for n in self.nodes if n.cliques_capped)
        out = []
        if pooled:
            out.append(f"{len(pooled)} job(s) with more than "
                       f"{self.params.flexible_max_units} units cut across nodes take "
                       f"one of a few cut patterns ({', '.join(pooled[:3])}"
                       f"{', ...' if len(pooled) > 3 else ''})")
        if capped:
            out.append(f"GPU sets on {len(capped)} node(s) enumerated up to "
                       f"{self.params.max_clique_enum} ({', '.join(capped[:3])}"
                       f"{', ...' if len(capped) > 3 else ''})")
        for ext in self.extensions:
            out += ext.restrictions()
        return out

    @cached_property
    def all_trees(self) -> bool:
        """Every cluster's fabric is a tree: a node lies in one domain per hop limit.

        Pooled classes count their units per domain of the unit's hop limit, which needs
        that; on other fabrics (overlapping domains) every class that may be cut gets
        piece variables per unit, whose domains are chosen per unit."""
        return all(c.network.is_tree for c in self.instance.clusters)

    @staticmethod
    def may_span(unit: GangUnit, largest_node: int) -> bool:
        """Whether a unit may be cut across nodes (the rule of the README's "Units").

        A unit larger than the largest node of its type must span nodes (unless its
        ``maxHopCount`` is 0: then it cannot run). A unit that fits in one node stays on one
        node, except one without an NVLink floor whose group declares ``maxHopCount`` >= 1
        (it asked for inter-node links within that radius). A unit with an NVLink floor
        that fits in one node never spans: NVLink does not cross nodes.
        """
        if unit.gpus < 2 or unit.max_hop_count == 0:
            return False
        if unit.gpus > largest_node:
            return True
        return unit.min_nvlink_gbps <= 0 and unit.max_hop_count is not None

    def _add_class(self, jv: JobView, *, group: str, gtype: GroupType, units: list[GangUnit],
                   size: int, pieces: list[int], hop: int | None, proto: GangUnit,
                   min_mem: float, parts: tuple[int, ...] | None = None,
                   piece_sizes: tuple[int, ...] = (),
                   patterns: tuple[tuple[int, ...], ...] = (), nvlink_bound: bool = False
                   ) -> None:
        uc = UnitClass(index=len(self.classes), job=jv.index, group=group, group_type=gtype,
                       units=list(units), size=size, pieces=sorted(pieces, reverse=True),
                       hop_limit=hop, gpu_types=proto.gpu_types, min_memory_gb=min_mem,
                       min_nvlink_gbps=proto.min_nvlink_gbps, min_ib_gbps=proto.min_ib_gbps,
                       parts=parts, piece_sizes=piece_sizes,
                       patterns=patterns if len(patterns) > 1 else (),
                       nvlink_bound=nvlink_bound)
        self.classes.append(uc)
        jv.classes.append(uc)

    def job_shape(self, jv: JobView) -> tuple[object, ...]:
        """Everything the placement rules (and the explanations) read of a job, its name and
        priority aside.

        Two jobs of one shape fit exactly the same GPU sets, so a search that failed for one
        (greedy's inversion fix) or an explanation found for one (``explain``) holds for the
        other on the same free GPUs. Includes the queue (quotas, GPU types it may use).
        """
        shape = self._shapes.get(jv.index)
        if shape is None:
            # every field of the views but identity: a field added later is included too
            shape = (_fields_key(jv, _JOB_IDENTITY),
                     tuple(r.code for r in jv.impossible),
                     tuple((uc.count, _fields_key(uc, _CLASS_IDENTITY)) for uc in jv.classes))
            self._shapes[jv.index] = shape
        return shape

    # ---- eligibility: the one place each rule is written ---------------------------------
    @cached_property
    def types_present(self) -> dict[str, GPUType]:
        """GPU types of the round's nodes, by name."""
        return {n.gpu_type.name: n.gpu_type for n in self.nodes}

    @cached_property
    def max_gpus_by_type(self) -> dict[str, int]:
        """GPUs of the largest node of each type."""
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.gpu_type.name] = max(out.get(n.gpu_type.name, 0), n.node.gpu_count)
        return out

    def eligible_types(self, selector: str | None, min_mem: float) -> frozenset[str]:
        """Names of the GPU types present that match a selector and a memory floor.

        Parameters
        ----------
        selector : str or None
            ``'|'``-separated types or families (None: any type).
        min_mem : float
            HBM floor in GB.
        """
        key = (selector, min_mem)
        found = self._eligible_types.get(key)
        if found is None:
            found = frozenset(
                name for name, t in self.types_present.items()
                if (not selector or t.matches(selector)) and t.hbm_gb + 1e-9 >= min_mem)
            self._eligible_types[key] = found
        return found

    def types_for(self, requirements: Iterable[TypeRequirement]) -> frozenset[str]:
        """GPU types any of ``requirements`` (units or unit classes of a job) may use."""
        key = frozenset((r.gpu_types, r.min_memory_gb) for r in requirements)
        found = self._types_for.get(key)
        if found is None:
            found = frozenset().union(*(self.eligible_types(s, m) for s, m in key))
            self._types_for[key] = found
        return found

    def type_ok(self, selector: str | None, min_mem: float, n: NodeView) -> bool:
        """The node's GPU type matches the selector and the memory floor."""
        return n.gpu_type.name in self.eligible_types(selector, min_mem)

    def gpus_eligible(self, uc: UnitClass, n: NodeView) -> bool:
        """The node's GPUs suit a piece of ``uc``: type, memory, and, for a unit cut into
        pieces, a node where its pieces can be told apart from the rule "every pair of a
        unit's GPUs on one node meets the floor": a pooled unit (several of its pieces may
        share a node) only where they may (:meth:`UnitClass.stacks_on`); a flexible unit
        anywhere (one exact GPU set per node where pieces cannot share it, see
        :meth:`UnitClass.sizes_on`)."""
        if not self.type_ok(uc.gpu_types, uc.min_memory_gb, n):
            return False
        if uc.nvlink_bound and not self.nvlink.tray_eligible(uc, n):
            return False
        if uc.pooled:
            return uc.stacks_on(n)
        return uc.flexible or \
            not (uc.multi_node and uc.min_nvlink_gbps and n.uniform_gbps is None)

    def link_eligible(self, jv: JobView, uc: UnitClass, n: NodeView) -> bool:
        """The node's link into the fabric meets the job's between-replica rate (when the
        job spans nodes) and the unit's own between-node rate (when it spans nodes)."""
        attach = n.attach_gbps or 0
        if self.needs_fabric(jv) and jv.min_ib_gbps and attach < jv.min_ib_gbps:
            return False
        return not (uc.multi_node and uc.min_ib_gbps and attach < uc.min_ib_gbps)

    def node_eligible(self, jv: JobView, uc: UnitClass, n: NodeView) -> bool:
        """A piece of ``uc`` (of job ``jv``) may sit on node ``n`` (free GPUs aside): GPUs,
        links, and a quota of the job's queue that covers the node's GPU type."""
        return self.gpus_eligible(uc, n) and self.link_eligible(jv, uc, n) and \
            self.queue_covers(jv, n) and (jv.allowed_nodes is None or n.name in jv.allowed_nodes)

    @staticmethod
    def alike_nodes_alike(jv: JobView, uc: UnitClass) -> bool:
        """Nodes of one :meth:`capacity_key` take the same pieces of ``uc`` (of job ``jv``):
        not where the node itself counts (a job limited to named nodes, an NVLink-bound
        class: its tray's domain)."""
        return jv.allowed_nodes is None and not uc.nvlink_bound

    @staticmethod
    def capacity_key(n: NodeView) -> tuple[object, ...] | None:
        """Everything :meth:`node_eligible` and :meth:`piece_capacity` read of node ``n``
        (where :meth:`alike_nodes_alike`): two nodes of one key take the same pieces, so a
        caller asking for many nodes may ask once per key. None for a node whose GPU pairs
        differ (its GPU sets are enumerated, and the enumeration's cap is recorded on the
        node itself)."""
        if n.uniform_gbps is None:
            return None
        return (n.gpu_type.name, n.node.gpu_count, n.uniform_gbps, n.attach_gbps,
                len(n.reachable))

    @cached_property
    def node_class_keys(self) -> list[tuple[object, ...] | None]:
        """:meth:`capacity_key` of each node class's representative."""
        return [self.capacity_key(nc.rep) for nc in self.node_classes]

    def queue_covers(self, jv: JobView, n: NodeView) -> bool:
        """The job's queue may use the node's GPU type (always, without declared queues)."""
        return UNCOVERED not in self.quotas.keys_for(jv.queue, n.gpu_type.name)

    @cached_property
    def quotas(self) -> QuotaBook:
        """Quota rows and fair shares of the round (inactive without declared queues)."""
        return build_quota_book(self.instance, [jv.name for jv in self.pending],
                                {jv.name: jv.gpus for jv in self.pending if not jv.impossible})

    def piece_capacity(self, uc: UnitClass, piece: int, n: NodeView) -> int:
        """How many pieces of this size and class fit on the node's reachable GPUs (its
        free ones, and those of running jobs the round may preempt)."""
        pool = n.reachable
        if not self.type_ok(uc.gpu_types, uc.min_memory_gb, n) or piece > len(pool):
            return 0
        return n.max_disjoint(piece, uc.min_nvlink_gbps, pool, parts=uc.parts)

    def best_link_gbps(self, units: Iterable[TypeRequirement]) -> float:
        """Fastest node link into the fabric among nodes of the units' GPU types."""
        ok = self.types_for(units)
        if ok not in self._best_link:
            self._best_link[ok] = max(
                (n.attach_gbps or 0.0 for n in self.nodes if n.gpu_type.name in ok), default=0.0)
        return self._best_link[ok]

    def max_node_gpus_for(self, unit: TypeRequirement) -> int:
        """GPUs of the largest node whose type suits ``unit`` (0 if none)."""
        ok = self.eligible_types(unit.gpu_types, unit.min_memory_gb)
        return max((self.max_gpus_by_type[t] for t in ok), default=0)

    def needs_fabric(self, jv: JobView) -> bool:
        """The job is placed as several pieces, so it may span nodes."""
        return jv.num_pieces > 1

    # ---- domains --------------------------------------------------------------------
    def domain(self, n: NodeView, hop_limit: int | None, *, job_level: bool = False) -> DomainKey:
        """The domain a node belongs to for a hop limit (cluster-qualified)."""
        key = (n.name, hop_limit)
        d = self._domains.get(key)
        if d is None:
            r = radius_for(n.cluster, hop_limit)
            fabric = None if (r is None or r == 0 or n.attach_gbps is None) else \
                n.cluster.network.node_domain(n.name, r)
            rack = zero_hop_domain(n) if fabric is None and r is not None else None
            if r is None:
                d = DomainKey.whole_cluster(n.cluster.name)
            elif rack is not None:  # hop 0 on a tray: its NVLink domain (the job's own)
                d = rack
            elif fabric is None:
                d = DomainKey.single_node(n.cluster.name, n.name)
            else:
                d = DomainKey.fabric(n.cluster.name, fabric)
            self._domains[key] = d
        return d

    def domains_of(self, n: NodeView, hop_limit: int | None, *, job_level: bool = False
                   ) -> tuple[DomainKey, ...]:
        """Every domain of a hop limit that holds the node: :meth:`domain` alone on trees;
        on other fabrics the overlapping maximal sets pairwise within the limit."""
        key = (n.name, hop_limit)
        ds = self._domains_of.get(key)
        if ds is None:
            d = self.domain(n, hop_limit, job_level=job_level)
            r = radius_for(n.cluster, hop_limit)
            net = n.cluster.network
            if d.fabric_domain is None or net.is_tree or r is None or r == 0:
                ds = (d,)
            else:
                ds = tuple(DomainKey.fabric(n.cluster.name, name)
                           for name in net.node_domains(n.name, r))
            self._domains_of[key] = ds
        return ds

    def leaves_by_domain(self, hop_limit: int | None, job_level: bool
                         ) -> dict[DomainKey, list[DomainKey]]:
        """Domain -> its leaves, for a hop limit (computed once per limit)."""
        key = (hop_limit, job_level)
        if key not in self._domain_leaves:
            out: dict[DomainKey, list[DomainKey]] = defaultdict(list)
            seen: set[str] = set()
            for n in self.nodes:
                if n.leaf in seen:
                    continue
                seen.add(n.leaf)
                for d in self.domains_of(n, hop_limit, job_level=job_level):
                    out[d].append(n.leaf)
            self._domain_leaves[key] = dict(out)
        return self._domain_leaves[key]

    @cached_property
    def nodes_by_leaf(self) -> dict[DomainKey, list[NodeView]]:
        """Nodes of each leaf."""
        out: dict[DomainKey, list[NodeView]] = defaultdict(list)
        for n in self.nodes:
            out[n.leaf].append(n)
        return dict(out)

    def domain_bandwidth(self, members: list[NodeView]) -> float:
        """A lower bound on the bottleneck Gb/s between any two nodes of a domain.

        Within one leaf group it is the slowest node link; across leaf groups the slowest
        switch-to-switch link of the cluster joins in. Conservative (it may turn a domain
        down that would do, never the reverse) and O(1) per domain instead of a widest-path
        search per pair; the checker still verifies every pair of a plan.
        """
        if len(members) <= 1:
            return math.inf
        if len({m.cluster.name for m in members}) > 1:
            return 0.0
        worst = min((m.attach_gbps or 0.0) for m in members)
        if len({m.leaf for m in members}) > 1:
            worst = min(worst, self.slowest_uplink(members[0].cluster))
        return worst

    def slowest_uplink(self, cluster: Cluster) -> float:
        """Slowest switch-to-switch link of the cluster's fabric (0 without one)."""
        if cluster.name not in self._uplink:
            net = cluster.network
            sw = net.switch_names
            bws = [link.gbps * link.count for link in net.links if link.a in sw and link.b in sw]
            self._uplink[cluster.name] = min(bws, default=0.0)
        return self._uplink[cluster.name]

    # ---- priority phases ---------------------------------------------------------------
    @cached_property
    def priority_phases(self) -> list[list[float]]:
        """Priority levels grouped, highest first, into exact lexicographic phases
        (see :mod:`~hyperplace.formulations.placement.phases`)."""
        return priority_phases(self._demand_by_level, self.weight_capacity)

    @cached_property
    def phase_weights(self) -> dict[float, int]:
        """Weight of a GPU of each level inside its phase."""
        return phase_weights(self._demand_by_level, self.priority_phases, self.weight_capacity)

    @cached_property
    def _demand_by_level(self) -> dict[float, int]:
        return demand_by_level(self._weighted_demands())

    # ---- bundles of interchangeable jobs ------------------------------------------------
    @cached_property
    def bundles(self) -> list[list[int]]:
        """Jobs that are one single-node piece with identical requirements, grouped.

        Such jobs are interchangeable for every objective, so the model counts how many of a
        bundle run instead of deciding each one; the mapping back admits them in queue order.
        Every other job is a bundle of its own.
        """
        groups: dict[tuple[object, ...], list[int]] = {}
        out: list[list[int]] = []
        for jv in self.jobs:
            if jv.num_pieces == 1 and not jv.impossible and jv.migrant is None:
                uc = jv.classes[0]
                key = (jv.priority, jv.queue, uc.size, uc.gpu_types, uc.min_memory_gb,
                       uc.min_nvlink_gbps, uc.parts)
                if key in groups:
                    groups[key].append(jv.index)
                    continue
                groups[key] = [jv.index]
                out.append(groups[key])
            else:
                out.append([jv.index])
        return out

    # ---- node classes ----------------------------------------------------------------
    @cached_property
    def node_classes(self) -> list[NodeClass]:
        """Nodes with free GPUs folded into classes of interchangeable nodes. A node that
        hosts a stoppable job is a class of its own (its capacity depends on which of
        its running jobs are stopped)."""
        groups: dict[tuple[object, ...], list[NodeView]] = defaultdict(list)
        for n in self.nodes:
            if not n.free and not n.stoppable:
                continue
            if n.stoppable:
                key: tuple[object, ...] = ("v", n.name)
            elif n.uniform_gbps is not None and not n.leaf.is_single_node:
                key = ("u", n.cluster.name, n.leaf, n.gpu_type.name, n.node.gpu_count,
                              len(n.free), n.fully_free, n.uniform_gbps, n.attach_gbps,
                       self.restricted_to(n))
            else:
                key = ("n", n.name)
            groups[key].append(n)
        return [NodeClass(index=i, nodes=ns, leaf=ns[0].leaf)
                for i, ns in enumerate(groups.values())]

    @cached_property
    def extensions(self) -> list[RoundExtension]:
        """The round's extensions (:mod:`~hyperplace.formulations.placement.extensions`),
        in the order their hooks run: hot spares, failure repair, free-domain growth,
        migration, preemption (those it asks for; their objectives come in this order)."""
        found = [family.of(self) for family in FAMILIES]
        return [ext for ext in found if ext is not None]

    @cached_property
    def stops_jobs(self) -> StopsJobs | None:
        """The round's family that stops running jobs (migration or preemption; None:
        neither), which owns the rows every stop shares."""
        return next((e for e in self.extensions if isinstance(e, StopsJobs)), None)

    @property
    def hot_spare_rule(self) -> HotSpares | None:
        """The round's hot spares (None: it keeps none)."""
        return next((e for e in self.extensions if isinstance(e, HotSpares)), None)

    @property
    def free_domain_growth(self) -> FreeDomainGrowth | None:
        """The round's free-domain growth (None: the round does not grow it)."""
        return next((e for e in self.extensions if isinstance(e, FreeDomainGrowth)), None)

    @property
    def spare_allowance(self) -> dict[DomainKey, int]:
        """Leaf -> whole free nodes the round may open there, keeping ``hot_spares`` of them
        (all it has when fewer) free for repairs; empty without hot spares
        (:class:`~hyperplace.formulations.placement.spares.HotSpares` owns it)."""
        spares = self.hot_spare_rule
        return spares.allowance if spares is not None else {}

    def restricted_to(self, n: NodeView) -> tuple[int, ...]:
        """Jobs limited to some nodes (repairs in part) that may use ``n``: nodes a class
        folds must agree on it."""
        return tuple(jv.index for jv in self._node_limited if n.name in (jv.allowed_nodes or ()))

    @cached_property
    def _node_limited(self) -> list[JobView]:
        return [jv for jv in self.jobs if jv.allowed_nodes is not None]

    @cached_property
    def leaf_fully_free(self) -> dict[DomainKey, bool]:
        """Per leaf: every GPU of every node is free."""
        state: dict[DomainKey, bool] = {}
        for n in self.nodes:
            state[n.leaf] = state.get(n.leaf, True) and n.fully_free
        return state

    # ---- policy ---------------------------------------------------------------------
    @cached_property
    def _penalties(self) -> dict[str, int]:
        types = self.types_present.values()
        if not types:
            return {}
        scale = self.params.policy_scale
        if self.policy == "performance":
            # THE speed model (hyperplace.costmodel.speed): its ranking speed per type
            from hyperplace.costmodel.speed import rank_speed

            speed = {x.name: rank_speed(x, self.instance.catalog) for x in types}
            best = max(speed.values())
            return {x.name: round(scale * (1 - speed[x.name] / best)) for x in types}
        worst = max(x.cost_per_hour for x in types) or 1.0
        return {x.name: round(scale * x.cost_per_hour / worst) for x in types}

    def policy_penalty(self, t: GPUType) -> int:
        """Per-GPU penalty of objective 4: 0 for the preferred type, up to ``policy_scale``."""
        return self._penalties[t.name]


#: Node fields the problem's views read besides the GPU state (``allocated``, ``faulty``).
_HARDWARE_FIELDS = ("name", "gpu_type", "gpu_count", "nvlink", "nvlink_gbps", "nvlink_pairs",
                    "nics")


def _check_spares(hot_spares: int) -> int:
    if hot_spares < 0:
        raise ValueError(f"hot spares must be >= 0, got {hot_spares}")
    return hot_spares


def same_hardware(a: Node, b: Node) -> bool:
    """The two node objects describe the same hardware (their GPU state may differ)."""
    return a is b or all(getattr(a, f) == getattr(b, f) for f in _HARDWARE_FIELDS)


def _same_queues(a: Instance, b: Instance) -> bool:
    return a.spec.queues is b.spec.queues or a.spec.queues == b.spec.queues


def _compatible(prev: PlacementProblem, new: PlacementProblem) -> bool:
    """Views of ``prev`` may serve ``new``: same policy, model parameters and GPU catalog
    (the same object, or the same types in the same order: an instance parsed again)."""
    return prev.policy == new.policy and prev.params == new.params and \
        (prev.catalog is new.catalog or list(prev.catalog) == list(new.catalog))
