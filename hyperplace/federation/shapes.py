"""Candidate shapes of one job: where its units go, priced and probed as placed.

* **monolithic**: every unit in one location (one GPU type of one cluster);
* **pipeline**: ``n_c`` consecutive pipeline stages (all replicas of them) per cluster, over
  2..``MAX_PIPELINE_CLUSTERS`` clusters, with the exact layer split and cluster order of
  ``solve_split``; two-cluster pipelines over the ``MAX_SPLIT_LOCATIONS`` best-ranked
  locations (free GPUs x speed), three-cluster ones over the ``MAX_THREE_WAY_LOCATIONS``
  best, fewest clusters and tightest fit first (splits fill fragments and leave large free
  clusters to jobs that fit them whole), stage counts nearest speed-proportional first;
* **data-parallel**: ``d_c`` whole replicas per cluster over 2..``MAX_DP_CLUSTERS`` of the
  ``MAX_THREE_WAY_LOCATIONS`` best-ranked clusters, hierarchical all-reduce
  (``pricing.Pricer.data_parallel``).

The enumeration is capped (these constants, and each job's slice of the budget), so
``optimal`` in a plan means optimal over the shapes enumerated.

Tensor parallelism never crosses a cluster: a unit (one model-parallel group of one
replica) always lies in one location. ``maxDomains`` bounds the clusters of a shape,
``clusterNames`` and the affinity group bound where they come from. A split whose
predicted step exceeds ``max_slowdown`` x the job's best single-cluster step is refused
and the refusal is kept as a reason. Every part of a kept shape fits **alone** in its
cluster as placed (engine + checker); jobs competing for a cluster are settled by the
round's formulation and its joint verification.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field

from hyperplace.federation.asplaced import Location, Part, Prober, free_gpus, locations, total_gpus
from hyperplace.federation.pricing import Price, Pricer
from hyperplace.federation.problem import AffinityGroup, FederatedJob
from hyperplace.models.gpu import GPUCatalog
from hyperplace.models.instance import Instance

MAX_PIPELINE_CLUSTERS = 3
MAX_DP_CLUSTERS = 4
# Locations considered for splits, best first (by free GPUs x speed): keeps enumeration small.
MAX_SPLIT_LOCATIONS = 12
# Three-cluster pipelines are drawn from the best-ranked this many locations only.
MAX_THREE_WAY_LOCATIONS = 6
MAX_COMPOSITIONS = 64
# Stage-count vectors tried per cluster combination (nearest to speed-proportional first).
COMPOSITIONS_PER_COMBO = 3


@dataclass
class Shape:
    job: str
    kind: str  # monolithic | pipeline | data-parallel
    parts: list[Part]
    price: Price
    affinity_index: int
    affinity_name: str
    penalty: float = 1.0

    @property
    def clusters(self) -> list[str]:
        return list(dict.fromkeys(p.location.cluster for p in self.parts))

    def gpus_at(self, job: FederatedJob) -> dict[Location, int]:
        out: dict[Location, int] = {}
        for p in self.parts:
            out[p.location] = out.get(p.location, 0) + p.gpus(job)
        return out

    def describe(self) -> str:
        where = " + ".join(f"{p.location}" + (f" x{len(p.positions)} stages"
                                                if self.kind == "pipeline" else
                                                f" x{p.replicas} replicas"
                                                if self.kind == "data-parallel" else "")
                           for p in self.parts)
        return f"{self.kind} {where}"


@dataclass
class JobShapes:
    job: FederatedJob
    shapes: list[Shape] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # reasons, for pending explanations
    best_monolithic: tuple[str, Price] | None = None
    best_note: str = ""
    deadline: float = math.inf
    truncated: bool = False

    def out_of_time(self) -> bool:
        """Past the deadline, once the job has an admissible shape: the floor of any
        budget is enumerating until each job has one (as one greedy pass is in placement)."""
        if self.shapes and time.perf_counter() > self.deadline:
            self.truncated = True
        return self.truncated


def _speed(catalog: GPUCatalog, loc: Location) -> float:
    """A location's GPU type's ranking speed from THE speed model (hyperplace.costmodel.speed)."""
    from hyperplace.costmodel.speed import rank_speed

    return rank_speed(catalog.get(loc.gpu_type), catalog)


def best_monolithic(job: FederatedJob, instance: Instance, pricer: Pricer,
                    catalog: GPUCatalog) -> tuple[tuple[str, Price] | None, str]:
    """The job's step time in the best single location large enough to hold it if it were
    idle (the reference for every split's penalty); a hypothetical cluster of the fastest
    accepted type when no member is large enough."""
    locs = locations(instance, job, [c.name for c in instance.clusters], catalog)
    clusters = {c.name: c for c in instance.clusters}
    best: tuple[str, Price] | None = None
    for loc in locs:
        if total_gpus(clusters[loc.cluster], loc.gpu_type) < job.gpus:
            continue
        price = pricer.monolithic(job, loc)
        if price.feasible and (best is None or price.step_time_s < best[1].step_time_s):
            best = (str(loc), price)
    if best is not None:
        return best, ""
    if not locs:
        return None, ""
    fastest = max(locs, key=lambda loc: _speed(catalog, loc))
    price = pricer.monolithic(job, fastest)
    if not price.feasible:
        return None, ""
    return ((f"hypothetical {fastest.gpu_type}", price),
            f"no member cluster has {job.gpus} {fastest.gpu_type} GPUs: the reference is a "
            f"hypothetical idle cluster of them")


def _compositions(total: int, parts: int) -> list[tuple[int, ...]]:
    """Ways to write ``total`` as ``parts`` positive integers (ordered)."""
    out = []
    for cuts in itertools.combinations(range(1, total), parts - 1):
        bounds = (0, *cuts, total)
        out.append(tuple(bounds[i + 1] - bounds[i] for i in range(parts)))
        if len(out) >= MAX_COMPOSITIONS:
            break
    return out


def enumerate_shapes(job: FederatedJob, instance: Instance, prober: Prober, pricer: Pricer,
                     catalog: GPUCatalog, max_slowdown: float,
                     deadline: float = math.inf) -> JobShapes:
    """Every admissible shape of ``job`` in each of its affinity groups, in group order;
    split shapes stop being enumerated at ``deadline`` (``time.perf_counter()``), which
    the result says in ``truncated``."""
    result = JobShapes(job)
    result.deadline = deadline
    result.best_monolithic, result.best_note = best_monolithic(job, instance, pricer, catalog)
    ref = result.best_monolithic[1].step_time_s if result.best_monolithic else None
    groups = job.affinity_groups([c.name for c in instance.clusters])
    max_domains = job.max_domains or len(instance.clusters)
    for gi, group in enumerate(groups):
        before = len(result.shapes)
        _group_shapes(job, instance, prober, pricer, catalog, gi, group, max_domains, ref,
                      max_slowdown, result)
        if len(result.shapes) == before:
            result.refused.append(f"affinity group {group.name!r} "
                                  f"({', '.join(group.clusters) or 'no cluster'}) cannot hold "
                                  "the job now")
    return result


def _group_shapes(job: FederatedJob, instance: Instance, prober: Prober, pricer: Pricer,
                  catalog: GPUCatalog, gi: int, group: AffinityGroup, max_domains: int,
                  ref: float | None, max_slowdown: float, out: JobShapes) -> None:
    locs = locations(instance, job, group.clusters, catalog)
    if not locs:
        out.refused.append(f"affinity group {group.name!r}: no cluster has a GPU type the job "
                           f"accepts ({job.type_selector() or 'any'})")
        return
    clusters = {c.name: c for c in instance.clusters}

    def keep(kind: str, parts: list[Part], price: Price) -> None:
        if not price.feasible:
            out.refused.append(f"{kind} over {', '.join(str(p.location) for p in parts)}: "
                               f"{price.reason}")
            return
        penalty = price.step_time_s / ref if ref else 1.0
        if kind != "monolithic" and penalty > max_slowdown:
            extra = ""
            if price.dp_sync_inter_s > 0:
                extra = (f" (cross-cluster all-reduce {price.dp_sync_inter_s:.2f} s per step "
                         f"over the WAN)")
            elif price.wan_transfer_s > 0:
                extra = f" (WAN boundary transfers {price.wan_transfer_s:.2f} s per step)"
            out.refused.append(
                f"{kind} over {' + '.join(str(p.location) for p in parts)} refused: predicted "
                f"step {price.step_time_s:.3f} s is {penalty:.2f}x the best single-cluster "
                f"step {ref:.3f} s{extra}, above the {max_slowdown:g}x limit")
            return
        out.shapes.append(Shape(job.name, kind, parts, price, gi, group.name, penalty))

    all_positions = tuple(range(job.stages))
    # monolithic
    mono_fit = []
    for loc in locs:
        part = Part(loc, all_positions, job.replicas)
        if not prober.fits(job, part):
            free = free_gpus(clusters[loc.cluster], loc.gpu_type)
            why = (f"{free} free {loc.gpu_type} GPUs, the job needs {job.gpus}"
                   if free < job.gpus else
                   f"{free} free {loc.gpu_type} GPUs cover the job's {job.gpus} by totals, but "
                   f"the placement engine cannot place its units on them (domains, NVLink "
                   f"cliques or hop limits)")
            out.refused.append(f"monolithic on {loc}: {why}")
            continue
        mono_fit.append(loc)
        keep("monolithic", [part], pricer.monolithic(job, loc))
    if max_domains < 2:
        if not mono_fit:
            out.refused.append(f"maxDomains {max_domains} allows no split across clusters")
        return
    # one location per cluster for splits: the fastest type with room, best first
    per_cluster: dict[str, Location] = {}
    for loc in sorted(locs, key=lambda lc: -_speed(catalog, lc)):
        if free_gpus(clusters[loc.cluster], loc.gpu_type) >= min(
                job.unit_gpus(p) for p in all_positions):
            per_cluster.setdefault(loc.cluster, loc)
    ranked = sorted(per_cluster.values(),
                    key=lambda lc: -free_gpus(clusters[lc.cluster], lc.gpu_type)
                    * _speed(catalog, lc))[:MAX_SPLIT_LOCATIONS]
    _pipeline_shapes(job, prober, pricer, ranked, max_domains, keep, out)
    _dp_shapes(job, prober, pricer, catalog, ranked[:MAX_THREE_WAY_LOCATIONS], max_domains,
               keep, out)


def _pipeline_shapes(job, prober, pricer, ranked, max_domains, keep, out) -> None:
    if job.stages < 2:
        return
    top = min(MAX_PIPELINE_CLUSTERS, max_domains, job.stages, len(ranked))
    stage_gpus = max(job.unit_gpus(p) for p in range(job.stages)) * job.replicas
    room = {loc: prober_free(prober, loc) // stage_gpus for loc in ranked}
    combos = []
    for k in range(2, top + 1):
        pool = ranked if k == 2 else ranked[:MAX_THREE_WAY_LOCATIONS]
        for combo in itertools.combinations(pool, k):
            slack = sum(min(room[c], job.stages) for c in combo) - job.stages
            if slack < 0:
                continue  # the totals alone cannot hold the pipeline here
            combos.append((k, slack, combo))
    # fewest clusters first, then the tightest fit: splits fill the fragments ("bubbles")
    # and leave large free clusters to jobs that fit them whole
    combos.sort(key=lambda x: (x[0], x[1]))
    for k, _, combo in combos:
        speed = [_speed(pricer.catalog, c) for c in combo]
        target = [job.stages * v / sum(speed) for v in speed]
        counts_list = [cs for cs in _compositions(job.stages, k)
                       if all(n <= room[c] for c, n in zip(combo, cs))]
        # stage counts closest to proportional-to-speed first; the exact layer split
        # then balances within them
        counts_list.sort(key=lambda cs: sum(abs(n - t) for n, t in zip(cs, target)))
        for counts in counts_list[:COMPOSITIONS_PER_COMBO]:
            if out.out_of_time():
                return
            price = pricer.pipeline(job, list(zip(combo, counts)))
            if not price.feasible:
                continue
            parts = _parts_from_stages(job, price)
            if all(prober.fits(job, p) for p in parts):
                keep("pipeline", parts, price)


def prober_free(prober: Prober, loc: Location) -> int:
    return free_gpus(prober.clusters[loc.cluster], loc.gpu_type)


def _parts_from_stages(job: FederatedJob, price: Price) -> list[Part]:
    by_loc: dict[Location, list[int]] = {}
    for s in price.stages:
        by_loc.setdefault(s.location, []).append(s.position)
    return [Part(loc, tuple(pos), job.replicas) for loc, pos in by_loc.items()]


def _dp_shapes(job, prober, pricer, catalog, ranked, max_domains, keep, out) -> None:
    if job.replicas < 2 or out.out_of_time():
        return
    caps = {loc: prober.max_replicas(job, loc) for loc in ranked}
    usable = [loc for loc in ranked if caps[loc] > 0]
    top = min(MAX_DP_CLUSTERS, max_domains, job.replicas, len(usable))
    for k in range(2, top + 1):
        for combo in itertools.combinations(usable, k):
            if sum(caps[c] for c in combo) < job.replicas:
                continue
            if out.out_of_time():
                return
            # one replica each, then fill the fastest first (synchronous DP waits for the
            # slowest cluster anyway; fewer replicas on slow GPUs shorten its pipeline)
            dist = {c: 1 for c in combo}
            left = job.replicas - k
            for c in sorted(combo, key=lambda lc: -_speed(catalog, lc)):
                take = min(left, caps[c] - 1)
                dist[c] += take
                left -= take
            if left:
                continue
            parts_spec = [(c, dist[c]) for c in combo]
            price = pricer.data_parallel(job, parts_spec)
            parts, first = [], 0
            for c, d in parts_spec:
                parts.append(Part(c, tuple(range(job.stages)), d, first))
                first += d
            keep("data-parallel", parts, price)
