"""The over-time schedule: which pending job runs when, on which capacity pool.

A round of the placement model (:mod:`hyperplace.formulations.placement`) decides which
pending jobs start *now* and on which GPUs. This model decides *when* each job of the pending
window starts and on which **pool** (a GPU type inside a fabric domain its hop limits allow),
over a horizon, so that "16 A100 now, 8 H100 + 8 A100, or wait for 16 H100" is one of its
decisions. Exact GPUs stay with the placement model: the jobs this schedule starts now go
there; the others are *reservations* (a pool and a start time) that the round's starts and
later rounds respect (:mod:`hyperplace.solvers.schedule`).

**Pools.** Per cluster a laminar tree: the root is the whole cluster (any GPU type: a job
spread over types runs at its slowest one's speed); below it one pool per GPU type; below that
the canonical fabric domains of each tier radius (spine, then leaf: ``Fabric.node_domain``),
each restricted to that type. A domain whose nodes are its parent's is not repeated. A pool's
capacity is its usable GPUs (failed ones left out). A job placed in a pool uses capacity in
that pool and every pool above it. Because the family is laminar and a job placed at a pool
may use any nodes inside it, the capacity rows on each pool are exactly what whole-node jobs
need to be assignable to nodes (a job of one pool fills what the jobs of the pools inside
leave); jobs smaller than a node count GPUs, which is a relaxation (a 4-GPU job and a 4-GPU
job on two half-free nodes fit by count, not on one node): the placement model decides
those, and a job the schedule starts that the placement cannot place waits for the next round.

**Demand.** A job of ``g`` GPUs on nodes of ``n`` GPUs: ``g`` when ``g < n``, else whole nodes
``ceil(g / n) * n`` (a gang gets whole nodes, as Slurm's ``--exclusive`` and the placement
model's node shapes do). A gang also needs ``ceil(g / n)`` *whole free nodes*: a second
cumulative per pool counts nodes, where a node holding any running job is busy until the last
of them ends (so GPUs left free on partly used nodes do not count for gangs). Planned jobs
smaller than a node take no whole node there (a relaxation: the placement packs them).

**Options.** Per job at most ``max_options`` (pool, predicted duration): for each GPU type the
job accepts, the lowest tier whose domains hold it (fewest switch tiers crossed, the fastest)
in its ``per_tier`` domains with the most free GPUs now, the type's whole cluster when its hop
limits allow, and the cluster root (mixed types) for a multi-node job that accepts several
types. A job smaller than a node crosses no switch anywhere, so it gets its type's cluster
pool only. Durations come from the caller (``duration(job, gpu_type, crossings)``, the one
speed model's prediction), rounded *up* to the time step.

**Time.** Integer steps of ``step_s`` aligned to absolute multiples of ``step_s`` (step 0 runs
from now to the next multiple, so the grid is the same in every round and a reservation's
start maps to the same step), horizon ``H = ceil(horizon_s / step_s)``. A run's length in
steps is ``ceil(duration / step_s)``, and ``ceil((duration + now - origin) / step_s)`` when it
starts now (step 0 is short: the job still ends within its steps), so a plan made in one round
is still feasible in the next. A job
may end beyond the horizon (its start must be inside it), or be left *unscheduled* (no start
inside the horizon: its completion counts as ``H + its shortest duration``, so leaving it out
never pays). Running jobs are fixed intervals ``[0, ceil(predicted end / step))`` on the leaf
pools of the nodes they hold.

**Objective** (minimised), priorities as strata: within a priority class, ``sum w_j * end_j``
with ``w_j`` from ``objective``:

* ``completion`` (default): ``w_j = 1``: the sum of completion times (mean JCT).
* ``slowdown``: ``w_j = 1 / max(best_j, 10 s)``, ``best_j`` the job's shortest predicted
  duration: the sum of bounded slowdowns ``(end_j - submit_j) / max(best_j, 10 s)`` up to a
  constant (submit times and ``now`` are constants).

The problem's default is ``completion``; the planning engine's replays use ``slowdown``
(:data:`hyperplace.sim.planning.OBJECTIVE`, measured on the bench's cells 2026-12-03 with
the engine's fill, wait weight and reservations: better mean JCT, wait and slowdown on
three of four cells). An earlier measurement (400 Philly jobs at ``--load 8``, 2026-12-01,
before those) had favoured ``completion`` on mean and p99 JCT.

``wait_weight`` adds the job's waiting to its term: ``w_j * (end_j + wait_weight * start_j)``
(rounded to quarters: ``WAIT_DEN * end + round(WAIT_DEN * wait_weight) * start``; an
unscheduled job waits the whole horizon). A planned start after now rests on the running jobs'
*predicted* ends, which are wrong by the prediction error, while capacity left idle now is
lost for sure: weighing the wait makes "wait for a faster type" win only by a margin (with
``wait_weight`` 1 a job waits ``s`` for a type that runs it in ``d_fast`` only when
``2 s + d_fast < d_now``). The default 0 is the plain objective; the engine
(:mod:`hyperplace.sim.planning`) sets its own, chosen by measurement.

Each class's weights are scaled so that one step of its least-weighted job outweighs
every class below it at its worst (every job of those classes unscheduled): a higher
priority never waits for a lower one (when the integers would overflow, each class weighs
``SOFT_STRATUM`` times the one below instead, or less when even that overflows, and the
problem says so: ``strict_strata``). A reservation from the previous round (a pool and start) adds its lateness (steps after the
reserved start) in a stratum of its own just above its class's completion terms: no job of
the same class or below starts earlier at the price of a reserved job's lateness, so
reservations hold unless the running jobs overrun their predictions or a higher class
arrives (then the schedule re-plans; Slurm's backfill re-plans every cycle too).
On another GPU type than the reserved pool's, lateness is the steps the job *ends* after it
would end at its reservation: a reserved job may move to another type when that does not
finish it later (measured: with lateness of the start on every type, Philly's 350-hour jobs
waited 24 minutes behind overrunning jobs for their H100 reservation and then started "on
time" on A100, at 1.0x speed instead of 1.8x; with lateness of the end on every type, the
fm workload's whole-cluster gangs waited days, since a drain no longer paid).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

from hyperplace.models import Instance, TrainingJob

SLOWDOWN_FLOOR_S = 10.0
OBJECTIVES = ("slowdown", "completion")
# the largest objective coefficient sum CP-SAT handles comfortably (int64 with room)
MAX_COEFF_SUM = 2 ** 60
WEIGHT_SCALE = 10_000
SOFT_STRATUM = 1_000
WAIT_DEN = 4  # wait_weight is rounded to quarters (integer objective)


@dataclass(frozen=True)
class Pool:
    """Capacity of one GPU type (or every type: ``gpu_type`` None) in one fabric domain."""

    id: int
    name: str            # "leaf t1:leaf-3 H100", "cluster c0 H100", "cluster c0"
    cluster: str
    gpu_type: str | None
    domain: str | None   # None: the whole cluster
    tier: int            # switch tiers a multi-node job in it is predicted to cross (0: leaf)
    parent: int | None
    capacity: int        # usable GPUs
    nodes: tuple[str, ...]
    gpus_per_node: int
    whole_nodes: int = 0  # nodes with every GPU usable (what a gang can take)

    @property
    def level(self) -> str:
        if self.domain is None:
            return "cluster"
        return "leaf" if self.tier == 0 else "spine" if self.tier == 1 else f"tier-{self.tier}"


@dataclass(frozen=True)
class Option:
    pool: int
    duration_s: float
    gpu_type: str | None  # None: mixed types (the cluster root)
    crossings: int


@dataclass
class ScheduleJob:
    name: str
    gpus: int
    priority: int
    submit_s: float
    options: list[Option]
    demand: dict[int, int] = field(default_factory=dict)  # pool id -> GPUs it takes there
    node_demand: dict[int, int] = field(default_factory=dict)  # pool id -> whole nodes (gangs)
    reason: str = ""  # why it has no option (it then gets no forecast start)
    not_now: frozenset[int] = frozenset()  # pools it may not start in now (placement failed)

    @property
    def best_s(self) -> float:
        return min((o.duration_s for o in self.options), default=math.inf)


@dataclass(frozen=True)
class Busy:
    """A running job's GPUs on one leaf pool until its predicted end (seconds from now)."""

    job: str
    pool: int
    gpus: int
    end_s: float


@dataclass(frozen=True)
class Reservation:
    """A start promised by an earlier round: absolute time and pool."""

    job: str
    pool: int
    start_s: float


@dataclass
class ScheduleProblem:
    now: float
    horizon_s: float
    step_s: float
    pools: list[Pool]
    jobs: list[ScheduleJob]
    busy: list[Busy]
    objective: str = "completion"
    node_busy: list[Busy] = field(default_factory=list)  # nodes (gpus = node count) a gang
    # cannot take until the running jobs on them end
    reservations: dict[str, Reservation] = field(default_factory=dict)
    strict_strata: bool = True  # set by int_weights: False when strata had to be soft
    # the weight of a job's waiting (start steps) beside its completion (module docstring)
    wait_weight: float = 0.0
    order: str = "submit"  # the list order after priority and reservations (list_order)
    aging_s: float = 4 * 3600.0

    @property
    def coefs(self) -> tuple[int, int]:
        """(end, start) integer multipliers of a job's weight: ``wait_weight`` as a ratio
        of quarters (``end + wait_weight * start`` times ``WAIT_DEN``)."""
        return WAIT_DEN, int(round(self.wait_weight * WAIT_DEN))

    def job_cost(self, start: int, end: int) -> int:
        """A job's objective term before its weight: ``WAIT_DEN * end + num * start``."""
        de, ds = self.coefs
        return de * end + ds * start

    @property
    def steps(self) -> int:
        return max(1, math.ceil(self.horizon_s / self.step_s - 1e-9))

    def dur_steps(self, o: Option, start: int | None = None) -> int:
        """Steps an option's run takes when it starts at step ``start``, rounded up; started
        now (step 0, which is short by ``now - origin``), that part is added so that the job
        ends within its steps. ``start`` None: the longer of the two."""
        d = max(1, math.ceil(o.duration_s / self.step_s - 1e-9))
        if start is not None and start > 0:
            return d
        lag = self.now - self.origin
        return max(d, math.ceil((o.duration_s + lag) / self.step_s - 1e-9))

    @property
    def origin(self) -> float:
        """The grid's origin: steps are aligned to absolute multiples of ``step_s`` (step 0
        runs from now to the next multiple), so the grid does not shift between rounds."""
        return math.floor(self.now / self.step_s + 1e-9) * self.step_s

    def time_of(self, k: int) -> float:
        """Absolute time at which step ``k`` starts (step 0: now)."""
        return self.now if k <= 0 else self.origin + k * self.step_s

    def busy_steps(self, b: Busy) -> int:
        """Steps a running job holds from now: up to the first boundary at or after its
        predicted end."""
        end = self.now + b.end_s
        if end <= self.now:
            return 0
        return max(1, math.ceil((end - self.origin) / self.step_s - 1e-9))

    def ancestors(self, pool: int) -> list[int]:
        """``pool`` and every pool above it (root last)."""
        out = []
        p: int | None = pool
        while p is not None:
            out.append(p)
            p = self.pools[p].parent
        return out

    def weight(self, job: ScheduleJob) -> float:
        if self.objective == "completion":
            return 1.0
        return 1.0 / max(job.best_s, SLOWDOWN_FLOOR_S)

    def int_weights(self) -> dict[str, int]:
        """Integer objective weights per job, priority classes as strata (module docstring).

        Within a class the weights keep their ratios with the largest at ``WEIGHT_SCALE``
        (a job whose weight rounds below 1 gets 1). Strata, lowest first: per class its
        completion terms, then its reservations' lateness; each stratum's least weight is
        one more than every stratum below at its worst, so strata are strict. When that would
        overflow, each stratum weighs ``SOFT_STRATUM`` times the largest weight below it
        instead (``strict_strata`` False: strong preferences, not strict)."""
        cached = self.__dict__.get("_w_cache")
        if cached is not None:
            return cached
        H = self.steps
        members: dict[int, list[ScheduleJob]] = {}
        for j in self.jobs:
            if j.options:
                members.setdefault(j.priority, []).append(j)
        raw = {j.name: self.weight(j) for js in members.values() for j in js}
        hi = max(raw.values(), default=1.0)
        base = {n: max(1, int(round(v / hi * WEIGHT_SCALE))) for n, v in raw.items()}
        strata: list[tuple[str, int, list[ScheduleJob], int]] = []  # kind, class, jobs, worst
        for c in sorted(members):
            js = members[c]
            strata.append(("end", c, js, sum(base[j.name] * self.job_cost(
                H, H + max(self.dur_steps(o) for o in j.options)) for j in js)))
            res = [j for j in js if j.name in self.reservations]
            if res:
                strata.append(("late", c, res, sum(H + max(self.dur_steps(o)
                                                           for o in j.options) for j in res)))

        def assign(soft: int) -> tuple[dict[str, int], dict[str, int], int]:
            """soft 0: strict strata; else each stratum ``soft`` times the one below."""
            w: dict[str, int] = {}
            late: dict[str, int] = {}
            below, top = 0, 0
            for kind, _, js, worst in strata:
                if kind == "end":
                    mult = (below + 1) if not soft else max(1, top * soft // WEIGHT_SCALE)
                    for j in js:
                        w[j.name] = base[j.name] * mult
                    top = max(top, max(w[j.name] for j in js))
                    below += mult * worst
                else:
                    lw = (below + 1) if not soft else max(1, top * soft)
                    for j in js:
                        late[j.name] = lw
                    top = max(top, lw)
                    below += lw * worst
            return w, late, below

        w, late, total = assign(0)
        self.strict_strata = total <= MAX_COEFF_SUM
        # soft strata: SOFT_STRATUM times the one below, less when even that overflows
        # (many classes and long jobs); factor 1 always fits (no stratum weighs more)
        for soft in (SOFT_STRATUM, 100, 10, 2, 1):
            if total <= MAX_COEFF_SUM:
                break
            w, late, total = assign(soft)
        self._late_w = {j.name: late.get(j.name, 0) for js in members.values() for j in js}
        self._w_cache = w
        return w

    def lateness_weights(self) -> dict[str, int]:
        """Per job the objective weight of one step after its reservation (its class's
        reservation stratum, see :meth:`int_weights`)."""
        self.int_weights()
        return dict(self._late_w)

    def objective_value(self, starts: dict[str, tuple[int, int] | None],
                        names: set[str] | None = None) -> int:
        """The model's objective for ``starts`` (job -> (option index, start step) or None),
        over the jobs ``names`` (default: all)."""
        w = self.int_weights()
        lw = self.lateness_weights()
        H = self.steps
        total = 0
        for j in self.jobs:
            if not j.options or (names is not None and j.name not in names):
                continue
            got = starts.get(j.name)
            if got is None:
                s, end = H, H + min(self.dur_steps(o) for o in j.options)
                late = self._late_unscheduled(j)
            else:
                k, s = got
                end = s + self.dur_steps(j.options[k], s)
                late = self.lateness(j, k, s)
            total += w[j.name] * self.job_cost(s, end) + lw[j.name] * late
        return total

    def reserved_step(self, job: ScheduleJob) -> int | None:
        r = self.reservations.get(job.name)
        if r is None:
            return None
        if r.start_s <= self.now:
            return 0
        return max(0, math.ceil((r.start_s - self.origin) / self.step_s - 1e-9))

    def reserved_type(self, job: ScheduleJob) -> tuple[str | None, int] | None:
        """(GPU type of the reserved pool, the step the job ends starting at its reserved
        step there; its fastest option's length when that pool is no option now)."""
        r = self.reserved_step(job)
        if r is None or not job.options:
            return None
        pool = self.reservations[job.name].pool
        o = next((o for o in job.options if o.pool == pool),
                 min(job.options, key=lambda o: o.duration_s))
        return self.pools[pool].gpu_type, r + self.dur_steps(o, r)

    def lateness(self, job: ScheduleJob, k: int, start: int) -> int:
        """Steps a reserved job is late with option ``k`` from ``start`` (module docstring):
        its start after the reserved one on the reserved GPU type, its end after the
        reserved end on another type."""
        r = self.reserved_step(job)
        if r is None:
            return 0
        rtype, rend = self.reserved_type(job) or (None, 0)
        o = job.options[k]
        if o.gpu_type == rtype:
            return max(0, start - r)
        return max(0, start + self.dur_steps(o, start) - rend)

    def _late_unscheduled(self, job: ScheduleJob) -> int:
        r = self.reserved_step(job)
        return 0 if r is None else max(0, self.steps - r)


Duration = Callable[[TrainingJob, "str | None", int], float]


def job_demand(gpus: int, gpus_per_node: int) -> int:
    """GPUs a job takes in a pool of ``gpus_per_node`` nodes (module docstring)."""
    if gpus < gpus_per_node:
        return gpus
    return math.ceil(gpus / gpus_per_node) * gpus_per_node


class _PoolTree:
    """Builds the pools of one instance (see :func:`build_pools`)."""

    def __init__(self, usable: Callable[[str], int]):
        self.usable = usable
        self.pools: list[Pool] = []

    def add(self, members: list, **kw) -> int:
        """A pool over ``members`` (nodes); capacity and whole nodes from ``usable``."""
        self.pools.append(Pool(
            id=len(self.pools), nodes=tuple(n.name for n in members),
            capacity=sum(self.usable(n.name) for n in members),
            whole_nodes=sum(self.usable(n.name) == n.gpu_count for n in members),
            gpus_per_node=max(n.gpu_count for n in members), **kw))
        return len(self.pools) - 1

    @staticmethod
    def span(cluster, radii: list[int], members: list[str]) -> int:
        """The lowest tier at which ``members`` share one domain (crossings paid)."""
        for i, r in enumerate(radii):
            if len({cluster.network.node_domain(m, r) for m in members}) == 1:
                return i
        return len(radii)

    def cluster(self, c) -> None:
        nodes = list(c.nodes)
        if not nodes:
            return
        radii = list(c.network.radii)
        root = self.add(nodes, name=f"cluster {c.name}", cluster=c.name, gpu_type=None,
                        domain=None, tier=self.span(c, radii, [n.name for n in nodes]),
                        parent=None)
        for t in sorted({n.gpu_type for n in nodes}):
            tnodes = [n for n in nodes if n.gpu_type == t]
            top = self.add(tnodes, name=f"cluster {c.name} {t}", cluster=c.name, gpu_type=t,
                           domain=None, tier=self.span(c, radii, [n.name for n in tnodes]),
                           parent=root)
            # parent of each node at the level above (starts: the type's cluster pool)
            above = {n.name: top for n in tnodes}
            for tier in range(len(radii) - 1, -1, -1):
                above = self.tier(c, t, tnodes, tier, radii[tier], above)

    def tier(self, c, gpu_type: str, tnodes: list, tier: int, radius: int,
             above: dict[str, int]) -> dict[str, int]:
        """The domains of one tier under their parents; returns the new parent of each node."""
        groups: dict[tuple[int, str], list] = {}
        for n in tnodes:
            d = c.network.node_domain(n.name, radius)
            if d is not None:
                groups.setdefault((above[n.name], d), []).append(n)
        new_above = dict(above)
        for (par, d), members in sorted(groups.items(), key=lambda kv: kv[0][1]):
            if {m.name for m in members} == set(self.pools[par].nodes):
                continue  # the same nodes as its parent: not repeated
            level = "leaf" if tier == 0 else "spine" if tier == 1 else f"tier-{tier}"
            pid = self.add(members, name=f"{level} {d} {gpu_type}", cluster=c.name,
                           gpu_type=gpu_type, domain=d, tier=tier, parent=par)
            for m in members:
                new_above[m.name] = pid
        return new_above


def build_pools(instance: Instance, usable: Callable[[str], int] | None = None) -> list[Pool]:
    """The laminar pool tree of every cluster (module docstring).

    ``usable(node)``: GPUs of the node that are not failed (default: ``gpu_count`` minus
    ``faulty``)."""
    if usable is None:
        idx = {nd.name: nd for c in instance.clusters for nd in c.nodes}

        def usable(n: str) -> int:
            return idx[n].gpu_count - len(set(idx[n].faulty))
    tree = _PoolTree(usable)
    for c in instance.clusters:
        tree.cluster(c)
    return tree.pools


def leaf_pool_of(pools: list[Pool]) -> dict[str, int]:
    """Node -> the deepest pool of its own GPU type that holds it."""
    out: dict[str, tuple[int, int]] = {}
    depth: dict[int, int] = {}
    for p in pools:
        depth[p.id] = 0 if p.parent is None else depth[p.parent] + 1
        if p.gpu_type is None:
            continue
        for n in p.nodes:
            if n not in out or depth[p.id] > out[n][1]:
                out[n] = (p.id, depth[p.id])
    return {n: v[0] for n, v in out.items()}


def job_facts(job: TrainingJob) -> tuple[int, frozenset, int | None]:
    """(GPUs, the units' type selectors, the tightest hop limit) of a job."""
    units = job.units()
    gpus = sum(u.gpus for u in units)
    selectors = frozenset(u.gpu_types for u in units)
    hop = min((u.max_hop_count for u in units if u.max_hop_count is not None), default=None)
    between = job.between_replicas.max_hop_count
    if between is not None:
        hop = between if hop is None else min(hop, between)
    return gpus, selectors, hop


def pool_structure(pools: list[Pool], instance: Instance) -> dict:
    """Lookups :func:`job_options` needs, built once per round."""
    by_cluster: dict[str, list[Pool]] = {}
    for p in pools:
        by_cluster.setdefault(p.cluster, []).append(p)
    clusters = {c.name: c for c in instance.clusters}
    return {"by_cluster": by_cluster, "clusters": clusters, "radius": {},
            "radii": {c: list(clusters[c].network.radii) for c in by_cluster},
            "nvlink": {c: nvlink_domains(clusters[c], instance) for c in by_cluster}}


def nvlink_domains(cluster, instance: Instance) -> dict[str, list[tuple[int, float]]]:
    """GPU type -> (GPUs a unit may use, per-GPU NVLink GB/s) of each multi-node NVLink
    domain (NVL72 rack; a partition's trays when partitioned; spare trays left out) of a
    cluster, as the placement model counts them (:mod:`hyperplace.formulations.placement.
    nvlink`)."""
    out: dict[str, list[tuple[int, float]]] = {}
    net = cluster.network
    if not net.nvlink_domains:
        return out
    by_name = {n.name: n for n in cluster.nodes}
    for d in net.nvlink_domains:
        members = [by_name[n] for n in d.nodes if n in by_name]
        if not members:
            continue
        n = members[0]
        trays = min(d.partition_trays or len(d.nodes), d.usable_trays)
        gbps = d.gbps_per_gpu if d.gbps_per_gpu is not None else \
            instance.catalog.get(n.gpu_type).nvlink_gbps
        out.setdefault(n.gpu_type, []).append((trays * n.gpu_count, gbps))
    return out


def nvlink_shortfall(job: TrainingJob, gpu_type: str, domains: dict[str, list],
                     gpus_per_node: int) -> str:
    """Why ``job`` cannot run on ``gpu_type`` in a cluster with these NVLink domains
    (:func:`nvlink_domains`): a unit bound to one NVLink domain (a slice, or a unit larger
    than a node that asks for an NVLink floor or ``maxHopCount: 0``, as the placement model
    binds it) larger than every domain of the type that meets its floor; "" when none."""
    have = domains.get(gpu_type)
    if not have:
        return ""
    for u in job.units():
        bound = u.slice_pods > 0 or (u.gpus > gpus_per_node and u.gpus >= 2 and (
            u.min_nvlink_gbps > 0 or u.max_hop_count == 0))
        if not bound:
            continue
        best = max((g for g, gbps in have if gbps + 1e-9 >= u.min_nvlink_gbps), default=0)
        if best < u.gpus:
            return (f"group {u.group} needs {u.gpus} GPUs in one NVLink domain at >= "
                    f"{u.min_nvlink_gbps:g} GB/s per GPU, but the largest NVLink domain of "
                    f"{gpu_type} offers {best}")
    return ""


def _by_free(pools: list[Pool], free_now: dict[int, int]) -> list[Pool]:
    """Most GPUs free now first (name on ties)."""
    return sorted(pools, key=lambda p: (-free_now.get(p.id, p.capacity), p.name))


def _max_tier(radius: int | None, radii: list[int]) -> int:
    """The highest tier index a hop radius allows (-1: one node only)."""
    if radius is None:
        return len(radii)
    if radius == 0:
        return -1
    return max(i for i, r in enumerate(radii) if r <= radius)


def _type_options(job: TrainingJob, tpools: list[Pool], gpu_type: str, gpus: int,
                  max_tier: int, free_now: dict[int, int], per_tier: int,
                  duration: Duration) -> list[tuple[Option, int]]:
    """The (option, demand) pairs of one GPU type: its cluster pool for a job of one node;
    else the lowest tier whose domains hold it (``per_tier`` of them) and one domain of each
    of the next two tiers."""
    gpn = tpools[0].gpus_per_node
    need = job_demand(gpus, gpn)
    if gpus <= gpn:  # one node: no switch crossed anywhere; hop 0 holds too
        top = next(p for p in tpools if p.domain is None)
        return [(Option(top.id, duration(job, gpu_type, 0), gpu_type, 0), need)] \
            if top.capacity >= need else []
    if max_tier < 0:
        return []  # hop limit 0 and more than a node
    fitting = [p for p in tpools if p.capacity >= need and p.tier <= max_tier
               and p.whole_nodes * gpn >= need]
    if not fitting:
        return []
    low = min(p.tier for p in fitting)
    chosen = _by_free([p for p in fitting if p.tier == low], free_now)[:per_tier]
    for tier in sorted({p.tier for p in fitting if p.tier > low})[:2]:
        chosen += _by_free([p for p in fitting if p.tier == tier], free_now)[:1]
    return [(Option(p.id, duration(job, gpu_type, p.tier), gpu_type, p.tier), need)
            for p in chosen]


def _mixed_option(job: TrainingJob, cps: list[Pool], ok_types: list[str], gpus: int,
                  duration: Duration) -> list[tuple[Option, int]]:
    """The cluster root (several types, at the slowest one's speed) for a multi-node job."""
    root = next(p for p in cps if p.gpu_type is None)
    need = job_demand(gpus, root.gpus_per_node)
    if gpus <= root.gpus_per_node or root.capacity < need:
        return []
    slow = max(ok_types, key=lambda t: duration(job, t, root.tier))
    return [(Option(root.id, duration(job, slow, root.tier), None, root.tier), need)]


def _reserved_option(job: TrainingJob, pool: Pool | None, gpus: int, selectors: frozenset,
                     instance: Instance, duration: Duration) -> list[tuple[Option, int]]:
    """The pool of a reservation as an option (when its type is still accepted)."""
    if pool is None or pool.gpu_type is None:
        return []
    if not all(s is None or instance.catalog.get(pool.gpu_type).matches(s) for s in selectors):
        return []
    need = job_demand(gpus, pool.gpus_per_node)
    if pool.capacity < need:
        return []
    tier = 0 if gpus <= pool.gpus_per_node else pool.tier
    return [(Option(pool.id, duration(job, pool.gpu_type, tier), pool.gpu_type, tier), need)]


def _trim(cands: list[Option], pools: list[Pool], max_options: int,
          keep_pool: int | None) -> list[Option]:
    """The ``max_options`` fastest options, keeping the widest one (never worse for the start
    time: a job with only narrow options may wait needlessly) and a reservation's pool (else
    a re-plan could only move the job later)."""
    cands = sorted(cands, key=lambda o: (o.duration_s, pools[o.pool].tier, pools[o.pool].name))
    keep = cands[:max_options]
    widest = max(cands, key=lambda o: (pools[o.pool].capacity, -o.duration_s))
    if widest not in keep:
        keep[-1] = widest
    held = next((o for o in cands if o.pool == keep_pool), None)
    if held is not None and held not in keep:
        keep[-2 if len(keep) > 1 and keep[-1] is widest else -1] = held
    return keep


def _accepted_types(job: TrainingJob, cps: list[Pool], selectors: frozenset, catalog,
                    nvl: dict | None) -> tuple[list[str], str]:
    """The GPU types of a cluster's pools ``cps`` that every unit of ``job`` accepts and
    whose NVLink domains (``nvl``: :func:`nvlink_domains`) can hold its NVLink-bound units;
    with the reason a type was left out for NVLink ("" when none was)."""
    def accepted(t: str) -> bool:
        return all(s is None or catalog.get(t).matches(s) for s in selectors)

    ok = [p.gpu_type for p in cps if p.gpu_type is not None and p.domain is None
          and accepted(p.gpu_type)]
    if not nvl:
        return ok, ""
    gpn = {p.gpu_type: p.gpus_per_node for p in cps if p.gpu_type is not None}
    why = {t: nvlink_shortfall(job, t, nvl, gpn[t]) for t in ok}
    return [t for t in ok if not why[t]], next((w for w in why.values() if w), "")


def job_options(job: TrainingJob, pools: list[Pool], instance: Instance, duration: Duration,
                free_now: dict[int, int], *, max_options: int = 6, per_tier: int = 2,
                keep_pool: int | None = None, facts: tuple | None = None,
                structure: dict | None = None
                ) -> tuple[list[Option], dict[int, int], str]:
    """The capacity options of ``job`` (module docstring), its demand per pool and, when it
    has none, why. ``facts``: :func:`job_facts` of the job (computed when not given);
    ``structure``: :func:`pool_structure` of ``pools`` (likewise)."""
    from hyperplace.formulations.placement.domains import radius_for

    gpus, selectors, hop = facts if facts is not None else job_facts(job)
    catalog = instance.catalog
    st = structure if structure is not None else pool_structure(pools, instance)
    found: list[tuple[Option, int]] = []
    short = ""
    for cname, cps in st["by_cluster"].items():
        radius = st["radius"].setdefault((cname, hop), radius_for(st["clusters"][cname], hop))
        max_tier = _max_tier(radius, st["radii"][cname])
        ok_types, why = _accepted_types(job, cps, selectors, catalog,
                                        st.get("nvlink", {}).get(cname))
        short = short or why
        for t in ok_types:
            found += _type_options(job, [p for p in cps if p.gpu_type == t], t, gpus,
                                   max_tier, free_now, per_tier, duration)
        if len(ok_types) > 1 and radius is None:
            found += _mixed_option(job, cps, ok_types, gpus, duration)
    if keep_pool is not None and not any(o.pool == keep_pool for o, _ in found):
        pool = pools[keep_pool] if 0 <= keep_pool < len(pools) else None
        found += _reserved_option(job, pool, gpus, selectors, instance, duration)
    if not found:
        return [], {}, short or (f"no pool can hold {gpus} GPUs of the types and hop "
                                 f"limit it accepts")
    demand = {o.pool: d for o, d in found}
    keep = _trim([o for o, _ in found], pools, max_options, keep_pool)
    return keep, {o.pool: demand[o.pool] for o in keep}, ""


@dataclass(frozen=True)
class PendingJob:
    """A pending job as the schedule sees it: manifest, submit time, and its predicted
    duration per option (``duration(manifest, gpu_type or None, crossings)``)."""

    manifest: TrainingJob
    submit_s: float
    priority: int | None = None  # default: the manifest's


@dataclass(frozen=True)
class RunningSlot:
    job: str
    gpus: tuple[tuple[str, int], ...]
    end_s: float  # predicted end, absolute


def _running_busy(instance: Instance, pools: list[Pool], running: list[RunningSlot],
                  now: float, node_free_s: dict[str, float] | None = None
                  ) -> tuple[list[Busy], list[Busy]]:
    """Running jobs' GPUs per leaf pool, and the whole nodes they keep busy, to their ends.

    A busy node is whole again at the latest of its jobs' ends, or at ``node_free_s[node]``
    (absolute) when the caller gives a later one (the expected end of the *last* of its jobs
    is later than the latest of their expected ends). Only nodes a gang could take count as
    busy whole nodes (a node with a failed GPU is never whole: it is in no pool's whole
    nodes either)."""
    leaf = leaf_pool_of(pools)
    whole = {n.name for c in instance.clusters for n in c.nodes if not n.faulty}
    busy: list[Busy] = []
    node_end: dict[str, float] = {}
    for r in running:
        end = max(0.0, r.end_s - now)
        per: dict[int, int] = {}
        for n, _ in r.gpus:
            if n in whole:
                node_end[n] = max(node_end.get(n, 0.0), end)
            if n in leaf:
                per[leaf[n]] = per.get(leaf[n], 0) + 1
        busy += [Busy(r.job, pid, g, end) for pid, g in sorted(per.items())]
    for n, t in (node_free_s or {}).items():
        if n in node_end:
            node_end[n] = max(node_end[n], t - now)
    per_leaf_end: dict[tuple[int, float], int] = {}
    for n, e in node_end.items():
        if n in leaf:
            per_leaf_end[(leaf[n], e)] = per_leaf_end.get((leaf[n], e), 0) + 1
    node_busy = [Busy(f"nodes-until-{e:g}", pid, k, e)
                 for (pid, e), k in sorted(per_leaf_end.items())]
    return busy, node_busy


def _schedule_job(pj: "PendingJob", pools: list[Pool], instance: Instance, duration: Duration,
                  free_now: dict[int, int], max_options: int, reservation: Reservation | None,
                  facts_cache: dict, structure: dict, not_now) -> ScheduleJob:
    m = pj.manifest
    facts = facts_cache.get(m.name)
    if facts is None:
        facts = facts_cache[m.name] = job_facts(m)
    opts, dem, why = job_options(m, pools, instance, duration, free_now,
                                 max_options=max_options,
                                 keep_pool=reservation.pool if reservation is not None else None,
                                 facts=facts, structure=structure)
    g = facts[0]
    nd = {pid: math.ceil(g / pools[pid].gpus_per_node) for pid in dem
          if g >= pools[pid].gpus_per_node}
    return ScheduleJob(name=m.name, gpus=g,
                       priority=m.priority if pj.priority is None else pj.priority,
                       submit_s=pj.submit_s, options=opts, demand=dem, reason=why,
                       node_demand=nd, not_now=frozenset(not_now))


def build_schedule_problem(instance: Instance, pending: list[PendingJob],
                           running: list[RunningSlot], now: float, duration: Duration, *,
                           horizon_s: float, step_s: float, objective: str = "completion",
                           max_options: int = 6, reservations: dict[str, Reservation] | None
                           = None, usable: Callable[[str], int] | None = None,
                           not_now: dict[str, set[int]] | None = None,
                           pools: list[Pool] | None = None,
                           facts_cache: dict | None = None,
                           wait_weight: float = 0.0,
                           node_free_s: dict[str, float] | None = None) -> ScheduleProblem:
    """The schedule problem of one round (module docstring).

    ``pools``: :func:`build_pools` of the instance when the caller keeps them between rounds;
    ``facts_cache``: job name -> :func:`job_facts`, kept by the caller between rounds.
    ``not_now``: job -> pools it may not start in at step 0 (the placement model could not
    place it there in the last round: the pool counts are a relaxation of exact GPUs).
    ``node_free_s``: busy node -> when it is expected whole again (absolute), where later than
    the latest of its running jobs' ends (:func:`_running_busy`).

    Raises ValueError naming the argument for a horizon or step that is not positive."""
    for name, v in (("horizon_s", horizon_s), ("step_s", step_s)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ValueError(f"{name}: must be a positive number of seconds, got {v!r}")
    if objective not in OBJECTIVES:
        raise ValueError(f"objective: use one of {', '.join(OBJECTIVES)}, got {objective!r}")
    if pools is None:
        pools = build_pools(instance, usable)
    busy, node_busy = _running_busy(instance, pools, running, now, node_free_s)
    used0 = {p.id: 0 for p in pools}
    for b in busy:
        p: int | None = b.pool
        while p is not None:
            used0[p] += b.gpus
            p = pools[p].parent
    free_now = {p.id: p.capacity - used0[p.id] for p in pools}
    structure = pool_structure(pools, instance)
    facts_cache = {} if facts_cache is None else facts_cache
    jobs = [_schedule_job(pj, pools, instance, duration, free_now, max_options,
                          (reservations or {}).get(pj.manifest.name), facts_cache, structure,
                          (not_now or {}).get(pj.manifest.name, ()))
            for pj in pending]
    return ScheduleProblem(now=now, horizon_s=horizon_s, step_s=step_s, pools=pools, jobs=jobs,
                           busy=busy, objective=objective, node_busy=node_busy,
                           reservations=dict(reservations or {}), wait_weight=wait_weight)
