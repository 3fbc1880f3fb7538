"""Independent checker for layer-split plans.

Written apart from ``formulations/layer_split.py`` on purpose: it re-derives every figure
from the model, the GPU catalog and the cost-model formulas with plain loops (no prefix
sums, no shared helpers beyond the model's own layer list and the cost model's per-layer
times), so a bug in the formulation or a backend shows up as a disagreement here instead of
being repeated. Layer times come from :func:`hyperplace.costmodel.stage_layer_times`, the
one cost model: the checker verifies the plan against it, not the cost model itself (its
fidelity is measured in ``bench/bench_fidelity.py``).
"""

from __future__ import annotations

from hyperplace.costmodel.calibration import Calibration
from hyperplace.costmodel.layers import stage_layer_times
from hyperplace.costmodel.pipeline import zero3_gather_seconds
from hyperplace.models.gpu import default_catalog
from hyperplace.models.split import SplitPlan, SplitProblem, Stage

RTOL = 1e-6


def _close(a: float, b: float, rtol: float = RTOL) -> bool:
    return abs(a - b) <= rtol * max(abs(a), abs(b), 1e-9)


def _link(problem: SplitProblem, a: Stage, b: Stage) -> tuple[float, float]:
    """(bytes per second, latency seconds) between two neighbouring stages."""
    for link in problem.links:
        if {link.a, link.b} == {a.name, b.name}:
            return link.gbps * 1e9 / 8, link.latency_ms / 1e3
    for link in problem.links:
        if {link.a, link.b} == {a.cluster, b.cluster}:
            return link.gbps * 1e9 / 8, link.latency_ms / 1e3
    if a.cluster == b.cluster:
        return problem.intra_cluster_gbps * 1e9 / 8, problem.intra_cluster_latency_ms / 1e3
    return problem.inter_cluster_gbps * 1e9 / 8, problem.inter_cluster_latency_ms / 1e3


def check_split(plan: SplitPlan, problem: SplitProblem,
                calibration: Calibration | None = None) -> list[str]:
    """Violations of ``plan`` against ``problem``; an empty list means the plan is sound."""
    out: list[str] = []
    catalog = default_catalog()
    layers = problem.model.build_layers()
    L = len(layers)
    by_name = {s.name: s for s in problem.stages}
    if not plan.feasible:
        if plan.stats.status.value == "optimal":
            out.append("infeasible plan marked optimal")
        if not plan.infeasible_reason:
            out.append("infeasible plan does not say why")
        return out

    active = [a for a in plan.stages if a.position is not None]
    active.sort(key=lambda a: a.position or 0)
    if [a.position for a in active] != list(range(len(active))):
        out.append(f"positions are not 0..{len(active) - 1}")
    for a in plan.stages:
        if a.name not in by_name:
            out.append(f"stage {a.name} is not in the problem")
        elif a.position is None and not by_name[a.name].optional:
            out.append(f"stage {a.name} is empty but not optional")
    if {a.name for a in plan.stages} != set(by_name):
        out.append("plan does not list every stage of the problem")
    if problem.fixed_order:
        given = [s.name for s in problem.stages if s.name in {a.name for a in active}]
        if given != [a.name for a in active]:
            out.append("fixed order not respected")
    nxt = 0
    for a in active:
        if a.first_layer is None or a.last_layer is None or a.num_layers < 1:
            out.append(f"stage {a.name} has no layers but a pipeline position")
            return out
        if a.first_layer != nxt:
            out.append(f"stage {a.name} starts at layer {a.first_layer}, expected {nxt} "
                       "(layers missing or overlapping: not contiguous)")
        if a.last_layer - a.first_layer + 1 != a.num_layers:
            out.append(f"stage {a.name}: layer range and count disagree")
        nxt = a.last_layer + 1
    if nxt != L:
        out.append(f"layers {nxt}..{L - 1} are assigned to no stage")
    if out:
        return out

    P, m = len(active), problem.microbatches
    loads: list[float] = []
    for pos, a in enumerate(active):
        s = by_name[a.name]
        g = catalog.get(s.gpu_type)
        t = s.tp or min(s.gpu_count, 8)
        d = s.gpu_count // t
        compute = 0.0
        # memory per GPU, term by term (the frameworks' accounting: 2-byte weights and
        # gradients, 12 bytes of Adam state, sharded by ZeRO over the stage's replicas)
        mem = problem.runtime_overhead_gb * 1e9 + (2 * 40e6 if d > 1 else 0.0)
        inflight = min(P - pos, m)
        z = problem.zero
        w_b = 2.0 / d if z >= 3 else 2.0
        g_b = (2.0 / d if z >= 2 else 2.0) * (2.0 if z == 0 and problem.fp32_grad_accum else 1.0)
        o_b = 12.0 / d if z >= 1 else 12.0
        times = stage_layer_times(problem.model, layers, g, t, d, recompute=problem.recompute,
                                  precision=s.precision or problem.precision,
                                  calibration=calibration)
        # ZeRO-3's weight all-gathers: the cost model's own figure, like the layer times
        gathers = zero3_gather_seconds(problem, s, layers, catalog, calibration)
        model = problem.model
        sp = model.has_dimensions and model.sequence_parallel
        for i in range(a.first_layer or 0, (a.last_layer or 0) + 1):
            layer = layers[i]
            compute += float(times.fwd[i] + times.bwd[i] + gathers[i])
            if problem.recompute:
                act = layer.recompute_bytes / (t if sp else 1)
            else:
                act = layer.activation_bytes_replicated + layer.activation_bytes_sharded / t
            mem += layer.params * (w_b + g_b + o_b) / t + inflight * act / d
            if i == L - 1 and model.has_dimensions and model.vocab_size:
                mem += 8.0 * model.micro_batch_size * model.seq_length / d * model.vocab_size / t
        if z >= 3 and d > 1:
            mem += 4.0 * max(ly.params for ly in layers) / t  # the prefetched layer
        if problem.recompute:
            mem += max(ly.activation_bytes_replicated + ly.activation_bytes_sharded / t
                       for ly in layers) / d
        mem *= 1.05  # the allocator's fragmentation reserve
        transfer = 0.0
        first, last = a.first_layer or 0, a.last_layer or 0  # set: checked above
        for nb_pos, boundary_layer in ((pos - 1, first - 1), (pos + 1, last)):
            if 0 <= nb_pos < P:
                bps, lat = _link(problem, s, by_name[active[nb_pos].name])
                transfer += 2 * (layers[boundary_layer].output_bytes / bps + lat)
        load = compute + transfer
        loads.append(load)
        cap = g.hbm_gb * 1e9
        if mem > cap * (1 + 1e-9):
            out.append(f"stage {a.name}: memory {mem / 1e9:.2f} GB over {cap / 1e9:.0f} GB")
        if not _close(mem / 1e9, a.memory_used_gb):
            out.append(f"stage {a.name}: reported memory {a.memory_used_gb:.3f} GB, "
                       f"recomputed {mem / 1e9:.3f} GB")
        if not _close(compute, a.compute_s):
            out.append(f"stage {a.name}: reported compute {a.compute_s:.6g}s, recomputed {compute:.6g}s")
        if not _close(transfer, a.transfer_s):
            out.append(f"stage {a.name}: reported transfer {a.transfer_s:.6g}s, "
                       f"recomputed {transfer:.6g}s")
        if a.inflight_microbatches != inflight:
            out.append(f"stage {a.name}: {a.inflight_microbatches} micro-batches in flight "
                       f"reported, 1F1B keeps {inflight}")
    bottleneck = max(loads)
    pipeline = (m - 1) * bottleneck + sum(loads)
    if plan.bottleneck_s is None or not _close(bottleneck, plan.bottleneck_s):
        out.append(f"reported bottleneck {plan.bottleneck_s}, recomputed {bottleneck}")
    if plan.pipeline_time_s is None or not _close(pipeline, plan.pipeline_time_s):
        out.append(f"reported pipeline time {plan.pipeline_time_s}, recomputed {pipeline}")
    if plan.stats.objective is not None and not _close(plan.stats.objective, bottleneck):
        out.append("stats.objective differs from the bottleneck")
    if plan.lower_bound_s is not None and plan.lower_bound_s > bottleneck * (1 + RTOL):
        out.append(f"lower bound {plan.lower_bound_s} above the bottleneck {bottleneck}")
    if plan.stats.bound is not None and plan.stats.bound > bottleneck * (1 + RTOL):
        out.append(f"solver bound {plan.stats.bound} above the bottleneck {bottleneck}")
    if plan.step_time_s and plan.throughput_tokens_s:
        tps = m * problem.model.tokens_per_microbatch / plan.step_time_s
        if not _close(tps, plan.throughput_tokens_s):
            out.append("throughput inconsistent with step time")
    return out
