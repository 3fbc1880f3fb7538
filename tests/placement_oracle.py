"""A brute-force placement oracle for tiny rounds, independent of the formulation.

It enumerates, job by job, every way to put each unit's GPUs on the free GPUs (any split
over nodes; on nodes whose GPU pairs all have the same bandwidth the choice of indices does
not matter, elsewhere every GPU subset is tried), keeps those the independent checker finds
valid for that job alone, and takes the best subset of jobs by dynamic programming over the
free GPUs left. Objective: (priority-weighted admitted GPUs, admitted jobs), the engine's
objective 1 and its tie-breaker, with the priority definition of
``hyperplace.models.priority``.

Only for rounds of a few nodes and jobs: the search is exponential.
"""

from __future__ import annotations

from functools import lru_cache
from itertools import combinations

from hyperplace.check import check
from hyperplace.models.priority import priority_weights
from hyperplace.models import Instance, PlacementPlan
from hyperplace.models.job import TrainingJob
from hyperplace.models.node import NVLinkTopology
from hyperplace.models.plan import GPURef, PendingJob, UnitPlacement
from hyperplace.models.result import SolveStatus

# violations about the plan's bookkeeping or other jobs, not this job's own placement
_NOT_PLACEMENT = ("job-missing", "pending", "priority-inversion", "summary", "unknown-pending")

State = tuple[tuple[int, ...], ...]  # free GPUs per node, in node order


def _splits(total: int, caps: list[int]) -> list[tuple[int, ...]]:
    """Every way to write ``total`` as k_0 + ... + k_n with 0 <= k_i <= caps[i]."""
    if not caps:
        return [()] if total == 0 else []
    out = []
    for k in range(min(total, caps[0]) + 1):
        out.extend((k, *rest) for rest in _splits(total - k, caps[1:]))
    return out


class Oracle:
    """Best (weighted GPUs, jobs) for a tiny instance.

    ``forced``: names of jobs that must be placed and count in neither term (migrated
    running jobs, see :func:`best_with_migrations`); ``weights``: the priority weights to
    use (default: over this instance's jobs and free GPUs)."""

    def __init__(self, instance: Instance, forced: frozenset[str] = frozenset(),
                 weights: dict[float, int] | None = None):
        self.inst = instance
        self.nodes = [n for c in instance.clusters for n in c.nodes]
        self.jobs = list(instance.jobs)
        self.forced = {j for j, job in enumerate(self.jobs) if job.name in forced}
        free = sum(n.free_count for n in self.nodes)
        self.weights = weights if weights is not None else priority_weights(
            ((j.priority, j.total_gpus) for j in self.jobs), free)

    def _uniform(self, i: int) -> bool:
        return self.nodes[i].nvlink in (NVLinkTopology.NVSWITCH, NVLinkTopology.PCIE)

    def _unit_choices(self, gpus: int, state: State) -> list[tuple[tuple[int, tuple[int, ...]], ...]]:
        """Every (node, GPUs) split of one unit on the free GPUs of ``state``."""
        out = []
        for split in _splits(gpus, [len(f) for f in state]):
            parts: list[list[tuple[int, tuple[int, ...]]]] = [[]]
            for i, k in enumerate(split):
                if k == 0:
                    continue
                sets = [state[i][:k]] if self._uniform(i) else list(combinations(state[i], k))
                parts = [p + [(i, s)] for p in parts for s in sets]
            out.extend(tuple(p) for p in parts)
        return out

    def _valid(self, job: TrainingJob, units: list[tuple[str, tuple[tuple[int, tuple[int, ...]], ...]]]) -> bool:
        placements = [UnitPlacement(job=job.name, unit=name, gpus=[
            GPURef(node=self.nodes[i].name, gpu=g) for i, gs in parts for g in gs])
            for name, parts in units]
        plan = PlacementPlan(status=SolveStatus.FEASIBLE, solver="oracle", placements=placements,
                             pending=[PendingJob(job=j.name, reasons=["-"])
                                      for j in self.jobs if j.name != job.name])
        return not [v for v in check(plan, self.inst) if v.job == job.name
                    and not v.code.startswith(_NOT_PLACEMENT)]

    def _placements(self, j: int, state: State) -> set[State]:
        """Free states left by every valid placement of job ``j`` on ``state``."""
        job = self.jobs[j]
        units = job.units()
        found: set[State] = set()

        def place(k: int, st: State, chosen: list) -> None:
            if k == len(units):
                if self._valid(job, chosen):
                    found.add(st)
                return
            for parts in self._unit_choices(units[k].gpus, st):
                nxt = list(st)
                for i, gs in parts:
                    nxt[i] = tuple(g for g in nxt[i] if g not in gs)
                place(k + 1, tuple(nxt), [*chosen, (units[k].name, parts)])

        place(0, state, [])
        return found

    def best(self) -> tuple[int, int]:
        """(priority-weighted admitted GPUs, admitted jobs) of an optimal plan; objective
        ``-1`` when a forced job cannot be placed."""
        none = (-1, 0)

        @lru_cache(maxsize=None)
        def value(j: int, state: State) -> tuple[int, int]:
            if j == len(self.jobs):
                return (0, 0)
            forced = j in self.forced
            best = none if forced else value(j + 1, state)
            gain = 0 if forced else self.weights[self.jobs[j].priority] * self.jobs[j].total_gpus
            for left in self._placements(j, state):
                rest = value(j + 1, left)
                if rest == none:
                    continue
                best = max(best, (gain + rest[0], rest[1] + (0 if forced else 1)))
            return best

        return value(0, tuple(n.free_gpus for n in self.nodes))


def best_with_migrations(instance: Instance) -> tuple[int, float, int, int]:
    """(objective 1, -lost work, -migrations, admitted jobs) of an optimal plan of a round
    in which every running job with a manifest may migrate: every set of them is tried by
    releasing their GPUs and placing their manifests as jobs that must run (objective 1 is
    the pending jobs' alone, weighted over the GPUs free before any move)."""
    from hyperplace.models.sharing import released

    manifests = instance.running_manifests
    info = instance.running_job_info
    free = sum(n.free_count for c in instance.clusters for n in c.nodes)
    weights = priority_weights(((j.priority, j.total_gpus) for j in instance.jobs), free)
    names = sorted(manifests)
    best: tuple[int, float, int, int] | None = None
    for k in range(len(names) + 1):
        for moved in combinations(names, k):
            base = released(instance, moved)
            trial = base.with_jobs([*(manifests[n] for n in moved), *instance.jobs])
            obj, jobs = Oracle(trial, forced=frozenset(moved), weights=weights).best()
            if obj < 0:
                continue
            lost = sum(manifests[n].total_gpus * info[n].checkpoint_age_s for n in moved)
            key = (obj, -lost, -k, jobs)
            if best is None or key > best:
                best = key
    assert best is not None  # moving nothing is always possible
    return best


def best_free_domain(instance: Instance, max_moves: int) -> tuple[int, float, int]:
    """(largest free domain GPUs summed over types, -lost work, -migrations) of an optimal
    ``defrag`` without ``--for``: every set of at most ``max_moves`` running jobs with
    manifests, every placement of their manifests on the GPUs then free (all must run);
    the domain measured on the final free GPUs (whole free nodes of one type in one domain
    of 2 hops)."""
    from hyperplace.models.sharing import released

    manifests = instance.running_manifests
    info = instance.running_job_info
    names = sorted(manifests)
    best: tuple[int, float, int] | None = None
    for k in range(min(max_moves, len(names)) + 1):
        for moved in combinations(names, k):
            base = released(instance, moved)
            trial = base.with_jobs([manifests[n] for n in moved])
            oracle = Oracle(trial, forced=frozenset(moved))
            states = {tuple(n.free_gpus for n in oracle.nodes)}
            for j in range(len(oracle.jobs)):
                states = {left for st in states for left in oracle._placements(j, st)}
            if not states:
                continue
            lost = sum(manifests[n].total_gpus * info[n].checkpoint_age_s for n in moved)
            domain = max(_free_domain(trial, oracle.nodes, st) for st in states)
            key = (domain, -lost, -k)
            if best is None or key > best:
                best = key
    assert best is not None
    return best


def _free_domain(instance: Instance, nodes: list, state: State) -> int:
    free = {n.name: len(f) for n, f in zip(nodes, state)}
    total = 0
    for c in instance.clusters:
        by_name = {n.name: n for n in c.nodes}
        best: dict[str, int] = {}
        for members in c.network.domains(2).values():
            per: dict[str, int] = {}
            for name in members:
                n = by_name[name]
                if not n.faulty and free[name] == n.gpu_count:
                    per[n.gpu_type] = per.get(n.gpu_type, 0) + n.gpu_count
            for t, g in per.items():
                best[t] = max(best.get(t, 0), g)
        total += sum(best.values())
    return total
