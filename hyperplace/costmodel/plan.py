"""``hyperplace plan``: the best parallel configurations of one model on an allocation.

The search space: TP (powers of two up to 8, dividing the heads and the GPUs), CP (1, 2, 4,
dividing the sequence), PP (divisors of the rest, up to the layers), interleaving (1, 2, 4
virtual stages), micro-batch (1, 2), recomputation (none, selective, full), expert
parallelism for an MoE model (powers of two dividing its experts and DP x CP) and sharding
(distributed optimizer, or ZeRO-3 / FSDP), DP the rest; the global batch is fixed (the
user's, or about 4 M tokens), so configurations compare by step time. Every candidate is
priced by :func:`hyperplace.costmodel.predict.predict`, the one cost model.

Pruning, each exact for the ranking: a configuration whose weights, gradients and
optimizer state alone exceed the memory is not priced; cheaper recomputation and sharding
are tried first and the costlier variants only when the cheaper one does not fit (a
costlier variant of a fitting configuration is never faster: it adds work or
communication and changes nothing else); and candidates are priced in the order of a lower
bound on their step time from their layers' compute alone (:func:`compute_bound_s`), the
search stopping at the first whose bound is slower than the ``top`` best found (every later
one is slower still). :func:`brute_force` prices every candidate for the tests.

An allocation of several types runs at its slowest type (synchronous training; the layer
split across unequal stages is ``hyperplace split``'s): every configuration is priced at the
type with the lowest BF16 peak (ties: lower HBM bandwidth, then NVLink, NIC, name) and must
fit the smallest memory of the types (any rank may land on it), whatever order the types are
given in; the answer says which type decided which.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from hyperplace.costmodel.calibration import Calibration, default_calibration
from hyperplace.costmodel.pipeline import (
    FRAGMENTATION_RESERVE,
    counts_to_cuts,
    expert_params,
    interleaved_memory_factor,
    memory_terms,
)
from hyperplace.costmodel.predict import (
    Prediction,
    even_layers,
    layer_seconds,
    layers_of,
    predict,
    virtual_stages_refusal,
)
from hyperplace.errors import InputError
from hyperplace.models.gpu import GPUCatalog, GPUType, default_catalog
from hyperplace.models.model_spec import ModelSpec
from hyperplace.models.split import SplitProblem, Stage

TARGET_TOKENS = 4 * 1024 * 1024
MICRO_BATCHES = (1, 2)
VIRTUAL = (1, 2, 4)
CP = (1, 2, 4)  # tried only for sequences of LONG_SEQ tokens or more
LONG_SEQ = 16384
RECOMPUTE = ("none", "selective", "full")
# relative slack of the compute bound against a found step time (floating-point rounding)
BOUND_SLACK = 1e-6
MAX_EXPLAINED = 24  # candidates that do not fit whose dominant memory term is looked up
MAX_GPUS = 1 << 20


@dataclass(frozen=True)
class Candidate:
    tp: int
    cp: int
    pp: int
    dp: int
    virtual_stages: int
    micro_batch: int
    recompute: str
    zero: int
    ep: int = 1

    def label(self) -> str:
        v = f" V{self.virtual_stages}" if self.virtual_stages > 1 else ""
        cp = f" CP{self.cp}" if self.cp > 1 else ""
        ep = f" EP{self.ep}" if self.ep > 1 else ""
        return (f"TP{self.tp}{cp} PP{self.pp}{v} DP{self.dp}{ep} mb{self.micro_batch} "
                f"recompute {self.recompute} ZeRO-{self.zero}")


@dataclass
class Planned:
    candidate: Candidate
    prediction: Prediction

    def to_doc(self) -> dict[str, Any]:
        p = self.prediction
        return {"config": self.candidate.__dict__, "label": self.candidate.label(),
                "stepTimeS": p.step_time_s, "tokensPerS": p.tokens_per_s, "mfu": p.mfu,
                "memoryPerGpuGb": p.memory_per_gpu_gb, "fits": p.fits, "parts": p.parts}


@dataclass
class PlanResult:
    model: str
    gpu: str
    gpus: int
    global_batch: int
    best: list[Planned]
    losers: list[dict[str, Any]]
    priced: int
    pruned: int
    seconds: float
    notes: list[str] = field(default_factory=list)
    # (type, count) per distinct type, by name; the type memory was checked against
    allocation: list[tuple[str, int]] = field(default_factory=list)
    memory_gpu: str = ""
    capacity_gb: float = 0.0
    # when nothing fits: the configuration needing the least memory and its need (GB)
    closest: dict[str, Any] | None = None

    def describe_gpus(self) -> str:
        """``64 x H100-80`` or ``32 x H100-80 + 32 x H200-141``."""
        if len(self.allocation) <= 1:
            return f"{self.gpus:,} x {self.gpu}"
        return " + ".join(f"{n:,} x {name}" for name, n in self.allocation)

    def nothing_fits(self) -> str:
        """One line: what does not fit and by how much (``best`` empty)."""
        if self.closest is None:
            return f"nothing fits in memory on {self.describe_gpus()}"
        c = self.closest
        return (f"nothing fits in memory on {self.describe_gpus()}: the least any "
                f"configuration needs is {c['neededGb']:.1f} GB per GPU ({c['example']}), "
                f"{c['overByGb']:.1f} GB over the {self.capacity_gb:g} GB of {self.memory_gpu}")

    def to_doc(self) -> dict[str, Any]:
        return {"model": self.model, "gpuType": self.gpu, "gpus": self.gpus,
                "allocation": [{"gpuType": t, "gpus": n} for t, n in self.allocation],
                "memoryGpuType": self.memory_gpu, "memoryCapacityGb": self.capacity_gb,
                "globalBatch": self.global_batch, "best": [b.to_doc() for b in self.best],
                "whyOthersLose": self.losers, "priced": self.priced, "pruned": self.pruned,
                "searchSeconds": self.seconds, "notes": self.notes,
                "nothingFits": self.nothing_fits() if not self.best else None}


def parse_gpus(text: str) -> list[tuple[str, int]]:
    """``TYPExN[,TYPExN]`` -> [(type, n)]; InputError naming --gpus."""
    out = []
    for part in text.split(","):
        name, sep, count = part.strip().rpartition("x")
        if not sep or not name or not count.isdigit() or int(count) <= 0:
            raise InputError(f"expected TYPExN[,TYPExN] with N > 0, got {part.strip()!r}",
                             path="--gpus")
        out.append((name, int(count)))
    if sum(n for _, n in out) > MAX_GPUS:
        raise InputError(f"more than {MAX_GPUS:,} GPUs", path="--gpus")
    return out


def _divisors(n: int, limit: int) -> list[int]:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


def default_global_batch(spec: ModelSpec, gpus: int) -> int:
    """About :data:`TARGET_TOKENS` tokens per step, at least one sequence per GPU, a power
    of two so that most degrees divide it."""
    seqs = max(1, TARGET_TOKENS // spec.seq_length, gpus // 8)
    return 1 << (seqs - 1).bit_length()


# The pricing space (``space="pricing"``): what the speed model searches for a job that
# declares no parallelism, thousands of times per simulation: micro-batch 1 and plain or
# 2-way interleaved 1F1B only (the rest of the space as above).
PRICING_MICRO_BATCHES = (1,)
PRICING_VIRTUAL = (1, 2)
SPACES = ("full", "pricing")


def candidates(spec: ModelSpec, gpus: int, global_batch: int,
               space: str = "full") -> list[Candidate]:
    micro_batches = PRICING_MICRO_BATCHES if space == "pricing" else MICRO_BATCHES
    virtual = PRICING_VIRTUAL if space == "pricing" else VIRTUAL
    out = []
    for tp in (1, 2, 4, 8):
        if tp > gpus or gpus % tp or spec.num_heads % tp or spec.kv_heads % tp and tp > 1 \
                and spec.kv_heads < tp and tp % spec.kv_heads:
            continue
        for cp in (CP if spec.seq_length >= LONG_SEQ else (1,)):
            if gpus % (tp * cp) or spec.seq_length % (2 * cp):
                continue
            rest = gpus // (tp * cp)
            for pp in _divisors(rest, spec.num_layers):
                dp = rest // pp
                for mb in micro_batches:
                    if global_batch % (mb * dp):
                        continue
                    m = global_batch // (mb * dp)
                    for v in virtual:
                        if v > 1 and (pp == 1 or spec.num_layers < pp * v or m % pp
                                      or virtual_stages_refusal(spec.num_layers, pp, v)):
                            continue
                        for rc in RECOMPUTE:
                            for zero in ((1, 3) if dp * cp > 1 else (0,)):
                                for ep in _expert_degrees(spec, dp * cp):
                                    out.append(Candidate(tp, cp, pp, dp, v, mb, rc, zero, ep))
    return out


def _expert_degrees(spec: ModelSpec, ranks: int) -> list[int]:
    """EP degrees for an MoE model: powers of two dividing its routed experts and the
    DP x CP ranks (1 for a dense model)."""
    if not spec.has_dimensions or spec.num_experts <= 1:
        return [1]
    out, ep = [], 1
    while ep <= min(spec.num_experts, ranks):
        if spec.num_experts % ep == 0 and ranks % ep == 0:
            out.append(ep)
        ep *= 2
    return out


def _state_bound_gb(total_params: float, c: Candidate, experts: float = 0.0) -> float:
    """Weights + gradients + optimizer state per GPU: a lower bound on its memory (the
    ``experts`` routed-expert parameters of them sharded by EP where ZeRO does not)."""
    shards = c.dp * c.cp
    per = {0: 16.0, 1: 4.0 + 12.0 / shards, 3: 16.0 / shards}[c.zero]
    per_expert = {0: 16.0 / c.ep, 1: 4.0 / c.ep + 12.0 / shards, 3: 16.0 / shards}[c.zero]
    return ((total_params - experts) * per + experts * per_expert) / (c.tp * c.pp) / 1e9


def price_candidate(spec: ModelSpec, gpu: str, c: Candidate, global_batch: int,
           calibration: Calibration, catalog: GPUCatalog, detail: bool = True) -> Prediction:
    return predict(spec, gpu, tp=c.tp, pp=c.pp, dp=c.dp, cp=c.cp,
                   virtual_stages=c.virtual_stages, micro_batch=c.micro_batch,
                   global_batch=global_batch, recompute=c.recompute == "full",
                   selective_recompute=c.recompute == "selective", zero=c.zero,
                   sequence_parallel=c.tp > 1, ep=c.ep, calibration=calibration,
                   catalog=catalog, detail=detail)


def compute_bound_s(spec: ModelSpec, gpu: str, c: Candidate, global_batch: int,
                    calibration: Calibration, catalog: GPUCatalog,
                    memo: dict[tuple, float] | None = None) -> float:
    """A lower bound on ``c``'s step time from its layers' compute alone. With ``T`` the
    forward + backward seconds of all layers per micro-batch (:func:`layer_seconds`, the
    same per-layer times :func:`predict` adds up), every stage's load is at least its
    compute, the bottleneck at least ``T/p``, and the 1F1B time ``m·max + (Σ − max)/v``
    grows with both, so ``step >= T/p · (m + (p − 1)/v)``. ``T`` depends on TP, CP,
    micro-batch and recomputation only (per replica the same tokens whatever DP is), so it
    is computed once per such group (``memo``)."""
    key = (c.tp, c.cp, c.micro_batch, c.recompute)
    per_mb = memo.get(key) if memo is not None else None
    if per_mb is None:
        per_mb = layer_seconds(spec, gpu, tp=c.tp, dp=c.dp, cp=c.cp,
                               micro_batch=c.micro_batch, recompute=c.recompute == "full",
                               selective_recompute=c.recompute == "selective",
                               sequence_parallel=c.tp > 1, calibration=calibration,
                               catalog=catalog)
        if memo is not None:
            memo[key] = per_mb
    m = global_batch // (c.micro_batch * c.dp)
    return per_mb / c.pp * (m + (c.pp - 1) / c.virtual_stages)


def memory_gb(spec: ModelSpec, gpu: GPUType, c: Candidate, global_batch: int,
              memo: dict[tuple, Any] | None = None, breakdown: bool = True
              ) -> tuple[float, dict[str, float]]:
    """``c``'s memory per GPU (GB) exactly as :func:`predict` reports it, and the worst
    stage's terms, without pricing any time: the same model, stages and
    :func:`~hyperplace.costmodel.pipeline.memory_terms`, the same even layer split and
    in-flight micro-batches (what the planner checks before pricing a candidate). The
    terms do not depend on PP, interleaving or the micro-batch count: ``memo`` keeps them per
    (TP, CP, DP, micro-batch, recomputation, ZeRO, EP); ``breakdown=False`` skips the
    worst stage's terms (empty)."""
    key = (c.tp, c.cp, c.dp, c.micro_batch, c.recompute, c.zero, c.ep)
    hit = memo.get(key) if memo is not None else None
    if hit is None:
        model = spec.model_copy(update={"micro_batch_size": c.micro_batch * c.dp,
                                        "sequence_parallel": c.tp > 1,
                                        **({"selective_recompute": True}
                                           if c.recompute == "selective" else {})})
        layers = layers_of(model)
        stage = Stage(name="stage0", cluster="cluster", gpu_type=gpu.name,
                      gpu_count=c.tp * c.dp * c.cp, tp=c.tp)
        problem = SplitProblem(model=model, stages=[stage], zero=c.zero,
                               recompute=c.recompute == "full", expert_parallel=c.ep,
                               context_parallel=c.cp, fixed_order=True)
        terms = memory_terms(problem, stage, layers)
        state = terms["weights"] + terms["gradients"] + terms["optimizer"] + terms["logits"]
        zero = np.zeros(1)
        hit = (terms, np.concatenate([zero, np.cumsum(state)]),
               np.concatenate([zero, np.cumsum(terms["activations"])]), len(layers))
        if memo is not None:
            memo[key] = hit
    terms, state_prefix, act_prefix, n_layers = hit
    m = global_batch // (c.micro_batch * c.dp)
    cuts = counts_to_cuts(even_layers(n_layers, c.pp))
    factor = interleaved_memory_factor(c.pp, c.virtual_stages)
    worst, worst_k = -1.0, 0
    const = float(terms["runtime"] + terms["buffers"] + terms["recomputeWorkingSet"])
    for k in range(c.pp):
        a, b = cuts[k], cuts[k + 1]
        inflight = min(c.pp - k, m) * factor
        mem = (float(state_prefix[b] - state_prefix[a])
               + inflight * float(act_prefix[b] - act_prefix[a]) + const) \
            * (1 + FRAGMENTATION_RESERVE)
        if mem > worst:
            worst, worst_k = mem, k
    if not breakdown:
        return worst / 1e9, {}
    a, b = cuts[worst_k], cuts[worst_k + 1]
    inflight = min(c.pp - worst_k, m) * factor
    breakdown = {name: (float(np.sum(v[a:b])) if isinstance(v, np.ndarray) else float(v)) / 1e9
                 for name, v in terms.items()}
    breakdown["activations"] *= inflight
    breakdown["fragmentationReserve"] = FRAGMENTATION_RESERVE * sum(breakdown.values())
    return worst / 1e9, breakdown


def _ranked(planned: list[Planned]) -> list[Planned]:
    """Fastest first; among equal step times the simpler configuration (less CP, smaller
    micro-batch, fewer virtual stages, less recomputation and sharding)."""
    return sorted(planned, key=lambda p: (-round(p.prediction.tokens_per_s, 6), p.candidate.cp,
                                          p.candidate.ep, p.candidate.micro_batch, p.candidate.virtual_stages,
                                          RECOMPUTE.index(p.candidate.recompute),
                                          p.candidate.zero))


def brute_force(spec: ModelSpec, gpu: str, gpus: int, global_batch: int,
                calibration: Calibration | None = None,
                catalog: GPUCatalog | None = None) -> list[Planned]:
    """Every candidate priced, fitting ones by tokens/s (the planner's oracle)."""
    calibration = calibration or default_calibration()
    catalog = catalog or default_catalog()
    out = [Planned(c, price_candidate(spec, gpu, c, global_batch, calibration, catalog))
           for c in candidates(spec, gpus, global_batch)]
    return _ranked([p for p in out if p.prediction.fits])


def plan(spec: ModelSpec, allocation: list[tuple[str, int]], *, global_batch: int | None = None,
         top: int = 5, calibration: Calibration | None = None,
         catalog: GPUCatalog | None = None, space: str = "full",
         explain: bool = True) -> PlanResult:
    """The best configurations (module docstring); ``space="pricing"`` searches the
    speed model's narrower space (:data:`PRICING_MICRO_BATCHES`, :data:`PRICING_VIRTUAL`).
    ``explain=False`` (the speed model, which reads only ``best``): the same ``best``, but no
    ``losers`` and no ``closest`` (why the others lose and, when nothing fits, the
    configuration needing the least memory: a pass over every candidate)."""
    began = time.perf_counter()
    calibration = calibration or default_calibration()
    catalog = catalog or default_catalog()
    notes = []
    counts: dict[str, int] = {}
    by_name: dict[str, GPUType] = {}
    for name, n in allocation:
        t = catalog.find(name)
        if t is None:
            raise InputError(f"unknown GPU type {name!r}", path="--gpus")
        by_name[t.name] = t
        counts[t.name] = counts.get(t.name, 0) + n
    types = [by_name[k] for k in sorted(by_name)]  # the order given does not matter
    gpus = sum(counts.values())
    slow = min(types, key=lambda t: (t.bf16_tflops, t.hbm_tb_s, t.nvlink_gbps, t.nic_gbps,
                                     t.name))
    small = min(types, key=lambda t: (t.hbm_gb, t.name))
    if len(types) > 1:
        notes.append(f"a mix of {', '.join(t.name for t in types)}: priced at the slowest, "
                     f"{slow.name} (lowest BF16 peak {slow.bf16_tflops:g} TFLOP/s, ties by HBM "
                     f"bandwidth {slow.hbm_tb_s:g} TB/s; synchronous training); memory checked "
                     f"against the smallest, {small.name} ({small.hbm_gb:g} GB); hyperplace "
                     "split gives the exact layer split across unequal stages")
    gb = global_batch or default_global_batch(spec, gpus)
    if global_batch is not None and global_batch <= 0:
        raise InputError("must be a positive integer", path="--global-batch")
    cap = small.hbm_gb
    layers = layers_of(spec)  # memoised: spec.total_params() would build them again
    total_params = sum(layer.params for layer in layers)
    total_experts = float(expert_params(spec, layers).sum())
    cands = candidates(spec, gpus, gb, space)
    if not cands:
        raise InputError(f"no TP x CP x PP x DP x micro-batch of {gpus} GPUs divides the "
                         f"global batch {gb}", path="--global-batch")
    priced: list[Planned] = []
    pruned = n_priced = 0
    fitting: dict[tuple, list[tuple[int, int]]] = {}
    losers: dict[str, dict[str, Any]] = {}
    order = {"none": 0, "selective": 1, "full": 2}
    memo: dict[tuple, float] = {}
    mem_memo: dict[tuple, Any] = {}
    explained = 0
    closest: dict[str, Any] | None = None
    bounds = {c: compute_bound_s(spec, slow.name, c, gb, calibration, catalog, memo)
              for c in cands}
    # cheapest bound first; among equal bounds less recomputation and sharding first (the
    # variant rule below needs them priced before the costlier ones)
    queue = sorted(cands, key=lambda c: (bounds[c], order[c.recompute], c.zero))
    kth: list[float] = []  # the best ``top`` fitting step times so far, ascending
    for i, c in enumerate(queue):
        if len(kth) >= top and bounds[c] > kth[top - 1] * (1 + BOUND_SLACK):
            # every later candidate's compute alone is slower than the top ``top``
            rest = len(queue) - i
            pruned += rest
            key = "slower by compute alone than the best found"
            losers.setdefault(key, {"reason": key, "example": c.label(),
                                    "boundS": round(bounds[c], 4),
                                    "bestS": round(kth[0], 4), "candidates": rest})
            break
        base = (c.tp, c.cp, c.pp, c.dp, c.virtual_stages, c.micro_batch, c.ep)
        mine = (order[c.recompute], c.zero)
        if any(r <= mine[0] and z <= mine[1] for r, z in fitting.get(base, [])):
            pruned += 1  # a variant with less recomputation and sharding fits: it is faster
            continue
        bound = _state_bound_gb(total_params, c, total_experts)
        if bound > cap:
            pruned += 1
            key = "weights, gradients and optimizer state alone exceed the memory"
            losers.setdefault(key, {"reason": key, "example": c.label(),
                                    "neededGb": round(bound, 1), "capacityGb": cap})
            continue
        need, _ = memory_gb(spec, slow, c, gb, mem_memo, breakdown=False)
        if need > cap * (1 + 1e-9):  # the memory predict would report: no time to price
            pruned += 1
            if not explain:
                continue
            if closest is None or need < closest["neededGb"]:
                closest = {"example": c.label(), "neededGb": need}
            if explained < MAX_EXPLAINED:  # a few examples of why, not every candidate
                explained += 1
                _, terms = memory_gb(spec, slow, c, gb, mem_memo)
                big = max(terms, key=terms.get)
                key = f"does not fit: {big} dominates"
                losers.setdefault(key, {"reason": key, "example": c.label(),
                                        "neededGb": round(need, 1),
                                        "overByGb": round(need - cap, 1)})
            continue
        # priced at the slowest type, its memory held to the smallest type's capacity
        p = replace(price_candidate(spec, slow.name, c, gb, calibration, catalog,
                                    detail=explain), memory_capacity_gb=cap)
        n_priced += 1
        if p.fits:
            fitting.setdefault(base, []).append(mine)
            priced.append(Planned(c, p))
            kth = sorted([*kth, p.step_time_s])[:max(top, 1)]
        elif explain:
            if closest is None or p.memory_per_gpu_gb < closest["neededGb"]:
                closest = {"example": c.label(), "neededGb": p.memory_per_gpu_gb}
            terms = {k: v for k, v in p.memory.items() if k not in ("stage",
                                                                    "microbatchesInFlight")}
            big = max(terms, key=terms.get)
            key = f"does not fit: {big} dominates"
            losers.setdefault(key, {"reason": key, "example": c.label(),
                                    "neededGb": round(p.memory_per_gpu_gb, 1),
                                    "overByGb": round(p.memory_per_gpu_gb - cap, 1)})
    ranked = _ranked(priced)
    if ranked and explain:
        best = ranked[0].prediction
        for other in ranked[top:top + 3]:
            o = other.prediction
            diff = {k: o.parts[k] - best.parts.get(k, 0.0) for k in o.parts}
            worst = max(diff, key=diff.get)
            key = f"slower: more {worst}"
            losers.setdefault(key, {"reason": key, "example": other.candidate.label(),
                                    "slowerByPct": round(100 * (o.step_time_s
                                                                / best.step_time_s - 1), 2),
                                    "extraS": round(diff[worst], 4)})
    if not ranked and explain:
        closest = _least_memory(spec, slow, cands, gb, mem_memo) or closest
        if closest is not None:
            closest["overByGb"] = closest["neededGb"] - cap
    return PlanResult(model=spec.name, gpu=slow.name, gpus=gpus, global_batch=gb,
                      best=ranked[:top], losers=list(losers.values()),
                      priced=n_priced, pruned=pruned,
                      seconds=time.perf_counter() - began, notes=notes,
                      allocation=[(t.name, counts[t.name]) for t in types],
                      memory_gpu=small.name, capacity_gb=cap,
                      closest=None if ranked else closest)


def _least_memory(spec: ModelSpec, gpu: GPUType, cands: list[Candidate], global_batch: int,
                  memo: dict[tuple, Any]) -> dict[str, Any] | None:
    """The candidate needing the least memory per GPU (exact, :func:`memory_gb`, every
    candidate: the search above skips some by a bound) and its need in GB."""
    best: dict[str, Any] | None = None
    for c in cands:
        need, _ = memory_gb(spec, gpu, c, global_batch, memo, breakdown=False)
        if best is None or need < best["neededGb"]:
            best = {"example": c.label(), "neededGb": need}
    return best
