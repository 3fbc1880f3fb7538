"""Layer split: from a model, stages and links to arrays every backend encodes the same way.

Cost model (``shared/design/cost-model.md``), per micro-batch, for a stage in a fixed
pipeline order with layers ``[a, b)``::

    load_k(a, b) = T[k, b] - T[k, a]          # compute (prefix sums of per-layer times)
                 + X[k-1, a]  (k > 0)          # boundary with the upstream stage
                 + X[k, b]    (k < P-1)        # boundary with the downstream stage

``X[k, j]`` is the time to move the activation at cut ``j`` forward and its gradient back
(``2·(bytes/bandwidth + latency)``) over the link between stages k and k+1. It is charged to
*both* endpoints because with blocking point-to-point both sides are busy for it; this also
keeps ``load_k`` a function of ``(a, b)`` alone, which is what makes the exact DP work.

Memory per GPU of stage k at pipeline position k of P (1F1B keeps ``min(P - k, m)``
micro-batches of activations in flight)::

    M[k, b] - M[k, a] + const_k <= capacity_k

Objective: minimise ``max_k load_k`` (the bottleneck), then the pipeline time
``(m - 1)·max + Σ_k load_k``, i.e. Σ among bottleneck-optimal splits.

A split is ``cuts = [0, c1, ..., c_{P-1}, L]``; stage k runs layers ``cuts[k] .. cuts[k+1]-1``.
:func:`evaluate_split` is the one place that prices a split; solvers, baselines and the plan
mapping all go through it (the checker in ``check/split.py`` deliberately does not).

Stage order (``fixed_order=False``): the pipeline should cross the WAN as few times as
possible and put fast links between neighbours. :func:`candidate_orders` enumerates every
order that keeps each cluster's stages together (which is exactly the set of orders with the
fewest WAN crossings, ``#clusters - 1``), deduplicating stages that are interchangeable
(same cluster, GPU type, count, TP). The driver solves each exactly and keeps the best, so
the order is optimal among minimum-crossing orders for up to ``EXACT_ORDER_MAX_STAGES``
stages (and while the count stays under ``MAX_ENUMERATED_ORDERS``). Beyond that the order is
heuristic: clusters chained greedily by the fastest link, stages inside a cluster by
per-GPU memory, largest first (early positions hold the most in-flight activations), and
the reverse of that order; both are solved exactly.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from hyperplace.costmodel.pipeline import (  # noqa: F401  (the split's pricing, re-exported)
    GB,
    GRAD_BUCKET_BYTES,
    INF,
    LinkInfo,
    SplitData,
    SplitEvaluation,
    StageRows,
    build_split_data,
    counts_to_cuts,
    evaluate_split,
    find_link,
    stage_rows,
    validate_cuts,
)
from hyperplace.models.gpu import default_catalog
from hyperplace.models.result import SolveStats, SolveStatus
from hyperplace.models.split import (
    BaselineSummary,
    SplitPlan,
    SplitProblem,
    Stage,
    StageAssignment,
)

# Relative tie band for "the same bottleneck": loads are floats from the same prefix sums,
# so only rounding separates equal ones. The one definition every backend uses.
TIE_RTOL = 1e-9
EXACT_ORDER_MAX_STAGES = 8
MAX_ENUMERATED_ORDERS = 5040


@dataclass
class SplitSolution:
    """What a backend returns: cuts (or none), how sure it is, how long it took."""

    solver: str
    status: SolveStatus
    cuts: list[int] | None = None
    bound: float | None = None
    runtime_s: float = 0.0
    message: str = ""


def lower_bound(data: SplitData) -> float:
    """A fluid lower bound on the bottleneck, valid for every split (and every solver).

    For weights ``w_k >= 0`` summing to 1, ``max_k load_k >= Σ_k w_k·load_k >=
    Σ_l min_k w_k·time[k, l] + Σ_k w_k·(least transfer stage k can pay)``. With ``w_k``
    proportional to each stage's speed this is "all layers spread perfectly by speed";
    it is also never below the slowest single layer on its fastest stage.
    """
    P, L = data.num_stages, data.num_layers
    totals = data.time.sum(axis=1)
    if np.any(totals <= 0):
        w = np.full(P, 1.0 / P)
    else:
        w = (1.0 / totals) / np.sum(1.0 / totals)
    min_x = np.zeros(P)
    for k in range(P):
        if k > 0:
            min_x[k] += float(np.min(data.xfer[k - 1, 1:L])) if L > 1 else 0.0
        if k < P - 1:
            min_x[k] += float(np.min(data.xfer[k, 1:L])) if L > 1 else 0.0
    fluid = float(np.sum(np.min(w[:, None] * data.time, axis=0)) + np.dot(w, min_x))
    single = float(np.max(np.min(data.time, axis=0))) if L else 0.0
    return max(fluid, single)


# ------------------------------------------------------------------------------ plans


def wan_crossings(stages: list[Stage]) -> int:
    return sum(1 for a, b in zip(stages, stages[1:]) if a.cluster != b.cluster)


def summarise_baseline(
    name: str, data: SplitData, cuts: list[int] | None, optimum: float | None, message: str = ""
) -> BaselineSummary:
    """A baseline's numbers under the same cost model, with its ratio to the optimum."""
    if cuts is None:
        return BaselineSummary(name=name, layers_per_stage=[], feasible=False, message=message)
    ev = evaluate_split(data, cuts)
    counts = [cuts[k + 1] - cuts[k] for k in range(data.num_stages)]
    if not ev.feasible:
        k, over = max(ev.overflow, key=lambda x: x[1])
        message = message or (f"stage {data.stages[k].name} is {over / GB:.1f} GB over its "
                              f"{data.mem_cap[k] / GB:.0f} GB per GPU")
    return BaselineSummary(
        name=name, layers_per_stage=counts, feasible=ev.feasible,
        bottleneck_s=ev.bottleneck_s, step_time_s=ev.step_time_s,
        ratio_to_optimal=(ev.bottleneck_s / optimum) if optimum else None,
        idle_s=[ev.bottleneck_s - x for x in ev.load_s], message=message,
    )


def to_plan(
    data: SplitData,
    solution: SplitSolution,
    *,
    symmetric: BaselineSummary | None = None,
    proportional: BaselineSummary | None = None,
    left_out: list[Stage] | None = None,
    notes: list[str] | None = None,
    infeasible_reason: str = "",
) -> SplitPlan:
    """Map a backend's cuts back to a :class:`SplitPlan` (every figure from evaluate_split)."""
    problem = data.problem
    model = problem.model
    left_out = left_out or []
    lb = lower_bound(data)
    tokens = model.tokens_per_microbatch
    notes = list(notes or [])
    sources = sorted(set(data.time_sources))
    parts = {part for s in sources for part in s.split("+")}
    if parts & {"scaled-tp", "scaled-gpu"}:
        notes.append("some layer times are measurements on another GPU type or TP degree, "
                     "rescaled by the fitted cost model's ratio between the two")
    notes.extend(data.cost_notes)
    rows: list[StageAssignment] = []
    if solution.cuts is None:
        for s, g in zip(data.stages, data.gpus):
            rows.append(StageAssignment(name=s.name, cluster=s.cluster, gpu_type=g.name,
                                        gpu_count=s.gpu_count, tp=s.tensor_parallel,
                                        dp=s.data_parallel, position=None,
                                        memory_available_gb=g.hbm_gb))
        stats = SolveStats(status=solution.status, solver=solution.solver,
                           runtime_s=solution.runtime_s, message=solution.message)
        return SplitPlan(model=model.name, feasible=False, stages=rows, order=[],
                         num_layers=data.num_layers, microbatches=problem.microbatches,
                         tokens_per_microbatch=tokens, lower_bound_s=lb, stats=stats,
                         symmetric=symmetric, proportional=proportional, notes=notes,
                         infeasible_reason=infeasible_reason or solution.message)
    ev = evaluate_split(data, solution.cuts)
    for k, (s, g) in enumerate(zip(data.stages, data.gpus)):
        a, b = solution.cuts[k], solution.cuts[k + 1]
        rows.append(StageAssignment(
            name=s.name, cluster=s.cluster, gpu_type=g.name, gpu_count=s.gpu_count,
            tp=s.tensor_parallel, dp=s.data_parallel, position=k, first_layer=a,
            last_layer=b - 1, num_layers=b - a, compute_s=ev.compute_s[k],
            transfer_s=ev.transfer_s[k], load_s=ev.load_s[k],
            idle_s=ev.bottleneck_s - ev.load_s[k], inflight_microbatches=int(data.inflight[k]),
            dp_sync_s=ev.dp_sync_s[k], optimizer_s=ev.optimizer_s[k],
            memory_used_gb=ev.memory_bytes[k] / GB, memory_available_gb=g.hbm_gb,
        ))
    catalog = default_catalog()
    for s in left_out:
        g = catalog.get(s.gpu_type)
        rows.append(StageAssignment(name=s.name, cluster=s.cluster, gpu_type=g.name,
                                    gpu_count=s.gpu_count, tp=s.tensor_parallel,
                                    dp=s.data_parallel, position=None,
                                    memory_available_gb=g.hbm_gb))
    bound = solution.bound
    if solution.status == SolveStatus.OPTIMAL:
        bound = ev.bottleneck_s if bound is None else min(bound, ev.bottleneck_s)
    objective = ev.bottleneck_s
    gap = None if bound is None else abs(objective - bound) / max(abs(objective), 1e-12)
    stats = SolveStats(status=solution.status, solver=solution.solver, objective=objective,
                       bound=bound, gap=gap, runtime_s=solution.runtime_s,
                       message=solution.message)
    m = problem.microbatches
    return SplitPlan(
        model=model.name, feasible=ev.feasible, stages=rows,
        order=[s.name for s in data.stages], cuts=list(solution.cuts),
        num_layers=data.num_layers, microbatches=m, tokens_per_microbatch=tokens,
        bottleneck_s=ev.bottleneck_s, pipeline_time_s=ev.pipeline_time_s,
        dp_sync_s=max(ev.dp_sync_s), optimizer_s=max(ev.optimizer_s),
        step_time_s=ev.step_time_s,
        bubble_fraction=(ev.pipeline_time_s - m * ev.bottleneck_s) / ev.pipeline_time_s
        if ev.pipeline_time_s > 0 else 0.0,
        throughput_tokens_s=m * tokens / ev.step_time_s if ev.step_time_s > 0 else None,
        lower_bound_s=min(lb, ev.bottleneck_s) if solution.status == SolveStatus.OPTIMAL else lb,
        stats=stats, symmetric=symmetric, proportional=proportional,
        wan_crossings=wan_crossings(data.stages), notes=notes,
        infeasible_reason=infeasible_reason,
    )


# ------------------------------------------------------------------------------ orders


def _signature(s: Stage) -> tuple:
    return (s.cluster, s.gpu_type, s.gpu_count, s.tensor_parallel)


def _unique_perms(items: list[Stage]) -> Iterator[tuple[Stage, ...]]:
    """Permutations of stages, skipping ones that only swap interchangeable stages."""
    seen: set[tuple] = set()
    for perm in itertools.permutations(items):
        key = tuple(_signature(s) for s in perm)
        if key not in seen:
            seen.add(key)
            yield perm


def _named_links(problem: SplitProblem) -> bool:
    cluster_names = {s.cluster for s in problem.stages}
    return any(link.a not in cluster_names or link.b not in cluster_names
               for link in problem.links)


def count_grouped_orders(problem: SplitProblem) -> int:
    clusters: dict[str, list[Stage]] = {}
    for s in problem.stages:
        clusters.setdefault(s.cluster, []).append(s)
    total = math.factorial(len(clusters))
    for group in clusters.values():
        total *= math.factorial(len(group))
    return total


def candidate_orders(problem: SplitProblem) -> tuple[list[list[Stage]], bool]:
    """Orders to solve, and whether they cover every minimum-WAN-crossing order.

    Fixed order: just the given one (exact by definition).
    """
    if problem.fixed_order or len(problem.stages) == 1:
        return [list(problem.stages)], True
    clusters: dict[str, list[Stage]] = {}
    for s in problem.stages:
        clusters.setdefault(s.cluster, []).append(s)
    exact = (len(problem.stages) <= EXACT_ORDER_MAX_STAGES
             and count_grouped_orders(problem) <= MAX_ENUMERATED_ORDERS * 8)
    if exact:
        # With links named per stage, "interchangeable" stages are not: enumerate them all.
        named = _named_links(problem)
        perms = (lambda g: itertools.permutations(g)) if named else _unique_perms
        per_cluster = {c: [list(p) for p in perms(g)] for c, g in clusters.items()}
        orders: list[list[Stage]] = []
        seen: set[tuple] = set()
        for cperm in itertools.permutations(clusters):
            for combo in itertools.product(*(per_cluster[c] for c in cperm)):
                order = [s for part in combo for s in part]
                key = tuple(s.name if named else _signature(s) for s in order)
                if key in seen:
                    continue
                seen.add(key)
                orders.append(order)
                if len(orders) > MAX_ENUMERATED_ORDERS:
                    exact = False
                    break
            if not exact:
                break
        if exact:
            return orders, True
    return _heuristic_orders(problem, clusters), False


def _heuristic_orders(problem: SplitProblem, clusters: dict[str, list[Stage]]) -> list[list[Stage]]:
    catalog = default_catalog()

    def stage_mem(s: Stage) -> float:
        g = catalog.find(s.gpu_type)
        return g.hbm_gb * s.tensor_parallel if g else 0.0

    def bw(c1: str, c2: str) -> float:
        a = clusters[c1][0]
        b = clusters[c2][0]
        return find_link(problem, a, b).gbps

    names = list(clusters)
    # Start from the cluster with the most memory: it takes the early, activation-heavy end.
    start = max(names, key=lambda c: sum(stage_mem(s) for s in clusters[c]))
    chain = [start]
    while len(chain) < len(names):
        last = chain[-1]
        nxt = max((c for c in names if c not in chain), key=lambda c: bw(last, c))
        chain.append(nxt)
    order = [s for c in chain for s in sorted(clusters[c], key=stage_mem, reverse=True)]
    return [order, list(reversed(order))]
