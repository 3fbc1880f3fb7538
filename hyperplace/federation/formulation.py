"""The per-round federation formulation: choose at most one shape per job.

Index sets: jobs ``j``, their admissible shapes ``s`` (``shapes.enumerate_shapes``),
locations ``l`` (a GPU type in a cluster), WAN links ``e``. Variables ``x[j,s]`` in {0, 1}.

* one shape per job: ``Σ_s x[j,s] <= 1``;
* GPUs per location: ``Σ gpus[j,s,l]·x[j,s] <= free[l]`` (the totals; the as-placed truth is
  enforced by verifying the answer with the placement engine per cluster and cutting off
  any combination it cannot place: ``Σ_{(j,s) in C} x[j,s] <= |C| - 1``);
* WAN: ``Σ gbps[j,s,e]·x[j,s] <= capacity[e]`` (boundary activations and cross-cluster
  all-reduce, averaged over a step, in Mb/s);
* cluster use (binpack): ``y[c] >= x[j,s]`` for every shape touching ``c``.

Objectives, strictly lexicographic (one phase each, the previous phase's value fixed):
(1) priority-weighted admitted GPUs, with weights such that a job is never left out so that
lower-priority jobs can run instead; (2) earliest affinity group (Karmada's ordered
``clusterAffinities``); (3) the policy: ``throughput`` (least total slowdown against each
job's best single-cluster step), ``cost`` (least GPU price per token) or ``binpack``
(fewest clusters touched, then the fullest ones); (4) throughput when the policy is not
throughput, else fewest clusters per job.

The data are plain integers so that the CP-SAT encoding (``cpsat.py``-style, here in
:func:`solve_cpsat`) and the greedy share them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hyperplace.federation.asplaced import Location
from hyperplace.federation.pricing import link_key
from hyperplace.federation.problem import FederatedJob
from hyperplace.federation.shapes import Shape
from hyperplace.models.gpu import GPUCatalog
from hyperplace.models.instance import Instance

SCALE = 1000


@dataclass
class Candidate:
    """One (job, shape) pair with its integer coefficients."""

    index: int
    job: FederatedJob
    shape: Shape
    gpus: dict[Location, int]
    wan_mbps: dict[tuple[str, str], int]
    clusters: tuple[str, ...]
    slowdown: int  # SCALE x penalty against the job's best single-cluster step
    cost: int  # SCALE x relative GPU price per million tokens


@dataclass
class FederationData:
    """Backend-independent data of one round."""

    candidates: list[Candidate]
    by_job: dict[str, list[int]]
    free: dict[Location, int]
    wan_capacity: dict[tuple[str, str], int]
    cluster_free: dict[str, int]
    weights: dict[int, int]  # priority -> weight per GPU
    policy: str
    #: no-good cuts: at most (jobs named in a cut - 1) of its candidates (solve.no_good)
    cuts: list[list[int]] = field(default_factory=list)

    def demand(self, c: Candidate) -> int:
        return self.weights[c.job.priority] * c.job.gpus


def priority_weights(jobs: list[FederatedJob]) -> dict[int, int]:
    """Weights per GPU such that one job of a priority outweighs all GPUs of lower ones."""
    weights: dict[int, int] = {}
    below = 0
    for p in sorted({j.priority for j in jobs}):
        w = below + 1
        weights[p] = w
        below += w * sum(j.gpus for j in jobs if j.priority == p)
    return weights


def build_data(instance: Instance, jobs: list[FederatedJob], shapes: dict[str, list[Shape]],
               catalog: GPUCatalog, policy: str) -> FederationData:
    cands: list[Candidate] = []
    by_job: dict[str, list[int]] = {}
    for job in jobs:
        for shape in shapes.get(job.name, []):
            gpus = shape.gpus_at(job)
            price_per_h = sum(n * catalog.get(loc.gpu_type).cost_per_hour
                              for loc, n in gpus.items())
            tokens = shape.price.tokens_per_step or 1.0
            cost = price_per_h * shape.price.step_time_s / tokens * 1e6  # per Mtoken, relative
            c = Candidate(
                index=len(cands), job=job, shape=shape, gpus=gpus,
                wan_mbps={k: int(round(v * 1000)) for k, v in shape.price.wan_gbps.items()},
                clusters=tuple(shape.clusters), slowdown=int(round(SCALE * shape.penalty)),
                cost=int(round(SCALE * cost)))
            cands.append(c)
            by_job.setdefault(job.name, []).append(c.index)
    free: dict[Location, int] = {}
    cluster_free: dict[str, int] = {}
    for cl in instance.clusters:
        cluster_free[cl.name] = sum(n.free_count for n in cl.nodes)
        for n in cl.nodes:
            loc = Location(cl.name, catalog.get(n.gpu_type).name)
            free[loc] = free.get(loc, 0) + n.free_count
    wan = {link_key(link.a, link.b): int(round(link.gbps * 1000))
           for link in instance.federation.links}
    return FederationData(cands, by_job, free, wan, cluster_free, priority_weights(jobs), policy)


def objectives(data: FederationData) -> list[tuple[str, str, dict[int, int]]]:
    """The phases as (name, sense, coefficients over candidates); binpack's cluster term
    is added by the encoder (it needs the y variables)."""
    demand = {c.index: data.demand(c) for c in data.candidates}
    affinity = {c.index: c.shape.affinity_index for c in data.candidates}
    slowdown = {c.index: c.slowdown for c in data.candidates}
    cost = {c.index: c.cost for c in data.candidates}
    spread = {c.index: len(c.clusters) for c in data.candidates}
    phases = [("admitted_priority_demand", "max", demand), ("affinity_order", "min", affinity)]
    if data.policy == "throughput":
        phases += [("slowdown", "min", slowdown), ("clusters_per_job", "min", spread)]
    elif data.policy == "cost":
        phases += [("cost_per_mtoken", "min", cost), ("slowdown", "min", slowdown)]
    else:
        phases += [("clusters_touched", "min", {}), ("slowdown", "min", slowdown)]
    return phases


def greedy_order(data: FederationData, idx: list[int]) -> list[int]:
    """Shapes of one job in the order greedy tries them (the policy's preference)."""
    def key(i: int) -> tuple:
        c = data.candidates[i]
        if data.policy == "cost":
            return (c.shape.affinity_index, c.cost, c.slowdown)
        if data.policy == "binpack":
            left = sum(data.cluster_free[cl] for cl in c.clusters)
            return (c.shape.affinity_index, len(c.clusters), left, c.slowdown)
        return (c.shape.affinity_index, c.slowdown, len(c.clusters))
    return sorted(idx, key=key)


def fits_totals(data: FederationData, chosen: list[int], extra: int) -> bool:
    """Locations' free GPUs and WAN capacity hold ``chosen + [extra]``."""
    use: dict[Location, int] = {}
    wan: dict[tuple[str, str], int] = {}
    for i in [*chosen, extra]:
        c = data.candidates[i]
        for loc, n in c.gpus.items():
            use[loc] = use.get(loc, 0) + n
        for k, v in c.wan_mbps.items():
            wan[k] = wan.get(k, 0) + v
    if any(n > data.free.get(loc, 0) for loc, n in use.items()):
        return False
    return all(v <= data.wan_capacity.get(k, 0) for k, v in wan.items())


def solve_cpsat(data: FederationData, time_limit: float, hint: list[int] | None = None,
                seed: int = 0) -> tuple[list[int] | None, str, list[float], float | None]:
    """Lexicographic CP-SAT solve. Returns (chosen candidates or None, status of the last
    phase: optimal/feasible/unknown, phase values, bound on phase 1)."""
    import time

    from ortools.sat.python import cp_model

    start = time.perf_counter()
    m = cp_model.CpModel()
    x = {c.index: m.new_bool_var(f"x{c.index}") for c in data.candidates}
    for idx in data.by_job.values():
        m.add_at_most_one(x[i] for i in idx)
    use: dict[Location, list[tuple[int, int]]] = {}
    wan: dict[tuple[str, str], list[tuple[int, int]]] = {}
    touching: dict[str, list[int]] = {}
    for c in data.candidates:
        for loc, n in c.gpus.items():
            use.setdefault(loc, []).append((c.index, n))
        for k, v in c.wan_mbps.items():
            wan.setdefault(k, []).append((c.index, v))
        for cl in c.clusters:
            touching.setdefault(cl, []).append(c.index)
    for loc, terms in use.items():
        m.add(sum(n * x[i] for i, n in terms) <= data.free.get(loc, 0))
    for k, terms in wan.items():
        m.add(sum(v * x[i] for i, v in terms) <= data.wan_capacity.get(k, 0))
    for cut in data.cuts:
        m.add(sum(x[i] for i in cut) <= len({data.candidates[i].job.name for i in cut}) - 1)
    y = {cl: m.new_bool_var(f"y_{cl}") for cl in touching}
    for cl, idx in touching.items():
        for i in idx:
            m.add_implication(x[i], y[cl])
    if hint:
        for i, v in x.items():
            m.add_hint(v, 1 if i in hint else 0)
    values: list[float] = []
    status_name = "optimal"
    bound1: float | None = None
    best: list[int] | None = None
    for k, (name, sense, coef) in enumerate(objectives(data)):
        if name == "clusters_touched":
            expr = sum(SCALE * y[cl] for cl in y) + sum(
                (data.cluster_free.get(cl, 0) * y[cl]) for cl in y)
        else:
            expr = sum(v * x[i] for i, v in coef.items() if v)
        if sense == "max":
            m.maximize(expr)
        else:
            m.minimize(expr)
        left = time_limit - (time.perf_counter() - start)
        if left <= 0.01:
            status_name = "feasible" if best is not None else "unknown"
            break
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = left
        solver.parameters.num_workers = 2
        solver.parameters.random_seed = seed
        st = solver.solve(m)
        if st not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if best is None:
                return None, "infeasible" if st == cp_model.INFEASIBLE else "unknown", values, None
            status_name = "feasible"
            break
        value = solver.objective_value
        values.append(value)
        if k == 0:
            bound1 = solver.best_objective_bound
        best = [i for i, v in x.items() if solver.boolean_value(v)]
        if st != cp_model.OPTIMAL:
            status_name = "feasible"
            break
        # fix this phase's value before the next
        m.add(expr >= int(round(value))) if sense == "max" else m.add(expr <= int(round(value)))
        m.clear_objective()
        m.clear_hints()
        for i, v in x.items():
            m.add_hint(v, 1 if i in best else 0)
    return best, status_name, values, bound1
