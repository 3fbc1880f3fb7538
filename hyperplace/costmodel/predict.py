"""``hyperplace predict``: step time, throughput and memory of one training configuration.

A configuration is a model on ``pp`` pipeline stages of ``tp × dp`` GPUs of one type,
``micro_batch`` sequences per replica per micro-batch and ``global_batch`` sequences per
step (so ``m = global_batch / (micro_batch · dp)`` micro-batches). It is priced by the layer
split's own machinery, so ``split`` and ``predict`` agree by construction: the same
:func:`hyperplace.costmodel.stage_layer_times`, memory, point-to-point, DP all-reduce and
optimizer terms, the layers divided evenly over the stages as Megatron-LM does by default
(the first stage also holds the embedding, the last the final norm and LM head).

The step time is the 1F1B pipeline time ``(m−1)·max_k load_k + Σ_k load_k`` plus the slowest
stage's DP all-reduce and optimizer update, reported as parts that add up to it: compute,
TP communication and point-to-point of the slowest stage (×m), the pipeline bubble (the
rest of the pipeline time), DP sync and optimizer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from typing import Any, Literal, cast

from hyperplace.costmodel.calibration import Calibration, default_calibration
from hyperplace.costmodel.hardware import peak_flops
from hyperplace.errors import InputError, known_words
from hyperplace.models.gpu import GPUCatalog, GPUType, default_catalog
from hyperplace.models.model_spec import ModelSpec
from hyperplace.models.split import SplitProblem, Stage, StageLink

GB = 1e9
Precision = Literal["bf16", "fp16", "fp32", "fp8"]
PRECISIONS = ("bf16", "fp16", "fp32", "fp8")
INTRA_CLUSTER_LATENCY_MS = 0.005


@dataclass
class Prediction:
    """What ``predict`` answers; ``to_doc`` gives the JSON keys of ``--format json``."""

    model: str
    gpu: str
    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    seq: int
    microbatches: int
    step_time_s: float
    tokens_per_s: float
    model_tflops_per_gpu: float
    hardware_tflops_per_gpu: float
    mfu: float
    memory_per_gpu_gb: float
    memory_capacity_gb: float
    memory: dict[str, float]
    parts: dict[str, float]
    layers: list[dict[str, Any]]
    layers_per_stage: list[int]
    sources: list[str]
    notes: list[str] = field(default_factory=list)

    @property
    def fits(self) -> bool:
        return self.memory_per_gpu_gb <= self.memory_capacity_gb * (1 + 1e-9)

    def to_doc(self) -> dict[str, Any]:
        return {
            "model": self.model, "gpu": self.gpu, "tp": self.tp, "pp": self.pp, "dp": self.dp,
            "microBatchSize": self.micro_batch, "globalBatch": self.global_batch,
            "seq": self.seq, "microbatches": self.microbatches,
            "stepTimeS": self.step_time_s, "tokensPerS": self.tokens_per_s,
            "tflopsPerGpu": self.model_tflops_per_gpu,
            "hardwareTflopsPerGpu": self.hardware_tflops_per_gpu, "mfu": self.mfu,
            "memoryPerGpuGb": self.memory_per_gpu_gb,
            "memoryCapacityGb": self.memory_capacity_gb, "fits": self.fits,
            "memory": self.memory,
            "parts": self.parts, "layersPerStage": self.layers_per_stage,
            "layers": self.layers, "timeSources": self.sources, "notes": self.notes,
        }


_layers: dict[str, list] = {}


def layers_of(model: ModelSpec) -> list:
    """``model.build_layers()``, memoised on the model's fields (a planner prices hundreds of
    configurations of the same model; the model is frozen, its layers are too)."""
    key = model.model_dump_json()
    hit = _layers.get(key)
    if hit is None:
        if len(_layers) > 4096:
            _layers.clear()
        hit = _layers[key] = model.build_layers()
    return list(hit)


def virtual_stages_refusal(layers: int, pp: int, virtual_stages: int) -> str | None:
    """Why ``virtual_stages`` chunks per rank cannot split ``layers`` over ``pp`` stages, or
    None: as Megatron-Core, every stage's layer count (:func:`even_layers`) must be a
    multiple of the virtual pipeline size (NVIDIA/Megatron-LM
    megatron/core/transformer/transformer_config.py, "must be divisible by virtual
    pipeline", and megatron/training/arguments.py for --num-layers-per-virtual-pipeline-stage),
    the embedding and the loss counted as a layer each where that evens an uneven split."""
    if virtual_stages <= 1:
        return None
    counts = sorted(set(even_layers(layers, pp)))
    if all(c % virtual_stages == 0 for c in counts):
        return None
    if (layers + 2) % (pp * virtual_stages) == 0 and len(counts) > 1:
        # the uneven split gives the first and last stages one layer fewer: Megatron's
        # --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split
        # count the embedding and the loss as a layer each, evening it out (Llama 3 405B:
        # 126 + 2 layers on PP 8 x 2 virtual stages)
        return None
    return (f"{virtual_stages} virtual stages do not divide the {'/'.join(map(str, counts))} "
            f"layers per pipeline stage ({layers} layers on PP {pp}); Megatron needs each "
            "stage's layers to be a multiple of the virtual stages")


def even_layers(layers: int, pp: int) -> list[int]:
    """Layers per stage: as even as possible; when they do not divide, the first and last
    stages (which also hold the embedding and the LM head, and the first the most
    activations in flight) get the fewer layers, as Llama 3 405B ran 126 layers on 16
    stages (Dubey et al. 2024, section 3.3.2)."""
    q, r = divmod(layers, pp)
    counts = [q] * pp
    order = [k for k in range(1, pp - 1)] + [pp - 1, 0] if pp > 2 else list(range(pp))
    for k in order[:r]:
        counts[k] += 1
    return counts


def layer_seconds(spec: ModelSpec, gpu_name: str, *, tp: int, dp: int, cp: int = 1,
                  micro_batch: int = 1, recompute: bool = False,
                  selective_recompute: bool = False, sequence_parallel: bool | None = None,
                  precision: str = "bf16", calibration: Calibration | None = None,
                  catalog: GPUCatalog | None = None) -> float:
    """Forward + backward seconds of all of the model's layers for one micro-batch on one
    TP x CP group, as :func:`predict` prices them (the same layer times, before ZeRO-3
    gathers and point-to-point): what the planner bounds a configuration's step with."""
    from hyperplace.costmodel.layers import stage_layer_times

    catalog = catalog or default_catalog()
    gpu = catalog.find(gpu_name)
    if gpu is None:
        raise InputError(f"unknown GPU type {gpu_name!r}", path="--gpu")
    update: dict[str, Any] = {"micro_batch_size": micro_batch * dp}
    if sequence_parallel is not None:
        update["sequence_parallel"] = sequence_parallel
    if selective_recompute:
        update["selective_recompute"] = True
    model = spec.model_copy(update=update)
    times = stage_layer_times(model, layers_of(model), gpu, tp, dp * cp, recompute=recompute,
                              precision=precision, calibration=calibration, catalog=catalog)
    return float(times.total.sum())


def fidelity_note(calibration: Calibration, gpu: GPUType, catalog: GPUCatalog) -> str:
    """Which measurements the coefficients came from, and their held-out error."""
    fit, how = calibration.fit_for(gpu, catalog)
    held = fit.held_out
    if held:
        twin = f" (same chip as {held['sameChipAs']})" if held.get("sameChipAs") else ""
        if held.get("borrowedFrom"):
            twin = (f" (measured at small shapes only: transformer layers priced with "
                    f"{held['borrowedFrom']}'s coefficients through the same form)")
        return (f"coefficients: {how}{twin}; transformer layers fitted on "
                f"{', '.join(held.get('fitSet', []))} ({held.get('rows', 0)} runs): "
                f"leave-one-out step-time error median {100 * held.get('looMedianAbs', 0):.1f}"
                f"%, {100 * held.get('looWithin15', 0):.0f}% within 15%, max "
                f"{100 * held.get('looMaxAbs', 0):.1f}%")
    return (f"coefficients: {how}; fitted on small-shape per-layer profiles "
            f"({', '.join(fit.models) or 'none'}) only: no held-out error at scale")


def _positive(value: int, option: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InputError(f"must be a positive integer, got {value!r}", path=option)


def validate_configuration(spec: ModelSpec, tp: int, pp: int, dp: int, micro_batch: int,
                           global_batch: int) -> int:
    """Micro-batches per step; InputError naming the option for a configuration that
    cannot run."""
    for value, option in ((tp, "--tp"), (pp, "--pp"), (dp, "--dp"),
                          (micro_batch, "--microbatch-size"), (global_batch, "--global-batch")):
        _positive(value, option)
    if spec.num_heads % tp:
        raise InputError(f"TP {tp} does not divide the model's {spec.num_heads} attention "
                         "heads", path="--tp")
    if pp > spec.num_layers:
        raise InputError(f"PP {pp} is more than the model's {spec.num_layers} layers: every "
                         "stage needs a layer", path="--pp")
    per_step = micro_batch * dp
    if global_batch % per_step:
        raise InputError(f"global batch {global_batch} does not divide into micro-batches of "
                         f"{micro_batch} on {dp} data-parallel replicas ({per_step} sequences "
                         "per micro-batch step)", path="--global-batch")
    return global_batch // per_step


def predict(spec: ModelSpec, gpu_name: str, *, tp: int = 1, pp: int = 1, dp: int = 1,
            micro_batch: int = 1, global_batch: int | None = None, seq: int | None = None,
            recompute: bool = False, zero: int = 0, flash: bool | None = None,
            sequence_parallel: bool | None = None, precision: str = "bf16",
            virtual_stages: int = 1, cp: int = 1, overlap_grad_reduce: bool = True,
            selective_recompute: bool = False, ep: int = 1,
            overlap_param_gather: bool = False,
            calibration: Calibration | None = None,
            catalog: GPUCatalog | None = None, detail: bool = True) -> Prediction:
    """Price one configuration (see the module docstring); InputError on bad input.

    ``detail=False`` (the planner's pricing, the speed model, the scale fit: thousands of
    calls that read the step, its parts and the memory per GPU): the same figures, but no
    per-layer times (``layers`` empty), no memory breakdown (``memory`` empty) and no notes.

    ``virtual_stages``: interleaved 1F1B with that many model chunks per pipeline rank;
    ``cp``: context parallelism (each of ``cp`` ranks holds ``s/cp`` of every sequence;
    GPUs = TP x CP x PP x DP); ``ep``: expert parallelism of an MoE model (its routed
    experts sharded over ``ep`` of the DP x CP ranks, tokens sent to them and back by
    all-to-alls: :func:`hyperplace.costmodel.pipeline.expert_alltoall_seconds`).
    """
    from hyperplace.costmodel.kernels import has_fp8
    from hyperplace.costmodel.pipeline import (
        FRAGMENTATION_RESERVE,
        build_split_data,
        memory_terms,
        counts_to_cuts,
        evaluate_split,
        stage_rows,
    )

    catalog = catalog or default_catalog()
    calibration = calibration or default_calibration()
    gpu = catalog.find(gpu_name)
    if gpu is None:
        raise InputError(f"unknown GPU type {gpu_name!r} ({known_words(gpu_name, catalog.names())})",
                         path="--gpu")
    if zero not in (0, 1, 2, 3):
        raise InputError(f"must be 0, 1, 2 or 3, got {zero}", path="--zero")
    if precision not in PRECISIONS:
        raise InputError(f"must be one of {', '.join(PRECISIONS)}, got {precision!r}",
                         path="--precision")
    if precision == "fp8" and not has_fp8(gpu):
        raise InputError(f"{gpu.name} has no FP8 tensor cores (FP8 needs Hopper, Ada, "
                         "Blackwell or MI300-class GPUs)", path="--precision")
    _positive(virtual_stages, "--virtual-stages")
    _positive(cp, "--cp")
    _positive(ep, "--ep")
    if ep > 1:
        if not spec.has_dimensions or spec.num_experts <= 1:
            raise InputError(f"expert parallelism needs an MoE model; {spec.name} has no "
                             "routed experts", path="--ep")
        if spec.num_experts % ep:
            raise InputError(f"EP {ep} does not divide the model's {spec.num_experts} "
                             "routed experts", path="--ep")
        if (dp * cp) % ep:
            raise InputError(f"EP {ep} does not divide DP x CP = {dp * cp} (the expert-"
                             "parallel group is made of data-parallel ranks)", path="--ep")
    if virtual_stages > 1:
        if pp == 1:
            raise InputError("interleaving needs pipeline stages: use --pp > 1",
                             path="--virtual-stages")
        if spec.num_layers < pp * virtual_stages:
            raise InputError(f"PP {pp} x {virtual_stages} virtual stages is more chunks than "
                             f"the model's {spec.num_layers} layers", path="--virtual-stages")
        uneven = virtual_stages_refusal(spec.num_layers, pp, virtual_stages)
        if uneven:
            raise InputError(uneven, path="--virtual-stages")
    global_batch = global_batch if global_batch is not None else micro_batch * dp
    m = validate_configuration(spec, tp, pp, dp, micro_batch, global_batch)
    if virtual_stages > 1 and m % pp:
        raise InputError(f"interleaved 1F1B needs the {m} micro-batches per step to be a "
                         f"multiple of PP {pp}", path="--global-batch")
    seq_len = seq if seq is not None else spec.seq_length
    if cp > 1 and seq_len % (2 * cp):
        raise InputError(f"context parallelism {cp} needs the sequence length {seq_len} to "
                         f"be a multiple of 2 x CP = {2 * cp}", path="--cp")
    update: dict[str, Any] = {"micro_batch_size": micro_batch * dp}
    if seq is not None:
        _positive(seq, "--seq")
        if spec.has_dimensions and seq > spec.seq_length:
            raise InputError(f"sequence length {seq} is above the model's {spec.seq_length}",
                             path="--seq")
        if not spec.has_dimensions and seq != spec.seq_length:
            raise InputError(f"the model's layers were measured at sequence length "
                             f"{spec.seq_length}; drop --seq", path="--seq")
        update["seq_length"] = seq
    if not spec.has_dimensions and micro_batch * dp != spec.micro_batch_size:
        raise InputError(f"the model's layers were measured at micro-batch "
                         f"{spec.micro_batch_size}; use --microbatch-size "
                         f"{spec.micro_batch_size} with --dp 1", path="--microbatch-size")
    if flash is not None:
        update["flash_attention"] = flash
    if sequence_parallel is not None:
        update["sequence_parallel"] = sequence_parallel
    if selective_recompute:
        if recompute:
            raise InputError("choose full (--recompute) or selective recomputation, not both",
                             path="--selective-recompute")
        update["selective_recompute"] = True
    model = spec.model_copy(update=update)
    # CP ranks are data-parallel ranks for the stage's arithmetic: each holds a 1/cp share
    # of every micro-batch's tokens, and gradients are reduced over DP x CP
    stages = [Stage(name=f"stage{i}", cluster="cluster", gpu_type=gpu.name,
                    gpu_count=tp * dp * cp, tp=tp) for i in range(pp)]
    # Megatron's scatter-gather P2P: every TP rank of every replica sends its own share over
    # its own NIC, so a boundary moves at tp·dp NICs' bandwidth.
    links = [StageLink(a=a.name, b=b.name, gbps=gpu.nic_gbps * tp * dp * cp,
                       latency_ms=INTRA_CLUSTER_LATENCY_MS, kind="ib")
             for a, b in zip(stages, stages[1:])]
    problem = SplitProblem(model=model, stages=stages, links=links, microbatches=m, zero=zero,
                           recompute=recompute, fixed_order=True,
                           virtual_stages=virtual_stages,
                           overlap_grad_reduce=overlap_grad_reduce and dp * cp > 1,
                           overlap_param_gather=overlap_param_gather,
                           precision=cast(Precision, precision), expert_parallel=ep,
                           context_parallel=cp)
    layer_list = layers_of(model)
    # Every stage is the same GPUs: price the layers once for all of them.
    rows = stage_rows(problem, stages[0], layer_list, catalog, calibration)
    data = build_split_data(problem, catalog=catalog, calibration=calibration,
                            layers=layer_list, cache={s.name: rows for s in stages})
    cuts = counts_to_cuts(even_layers(len(layer_list), pp))
    ev = evaluate_split(data, cuts)

    k = max(range(pp), key=lambda i: ev.load_s[i])
    assert data.tp_comm is not None and data.fwd is not None
    tp_part = float(data.tp_comm[k, cuts[k]:cuts[k + 1]].sum())
    ep_part = float(data.ep_comm[k, cuts[k]:cuts[k + 1]].sum()) if data.ep_comm is not None \
        else 0.0
    j = max(range(pp), key=lambda i: ev.dp_sync_s[i] + ev.optimizer_s[i])
    parts = {
        "compute": m * (ev.compute_s[k] - tp_part - ep_part),
        "tpComm": m * tp_part,
        "epComm": m * ep_part,
        "p2p": m * ev.transfer_s[k],
        "bubble": ev.pipeline_time_s - m * ev.load_s[k],
        "dpSync": ev.dp_sync_s[j],
        "optimizer": ev.optimizer_s[j],
    }
    if ep <= 1:
        del parts["epComm"]  # no expert parallelism: no all-to-all part
    step = ev.step_time_s
    flops_per_sequence = sum(layer.flops for layer in layer_list) / model.micro_batch_size
    model_flops = flops_per_sequence * global_batch
    gpus = tp * pp * dp * cp
    model_tflops = model_flops / step / gpus / 1e12
    hardware_tflops = model_tflops * (4 / 3 if recompute else 1.0)
    memory = max(ev.memory_bytes) / GB
    capacity = gpu.hbm_gb
    if not detail:
        return Prediction(
            model=spec.name, gpu=gpu.name, tp=tp, pp=pp, dp=dp, micro_batch=micro_batch,
            global_batch=global_batch, seq=model.seq_length, microbatches=m,
            step_time_s=step, tokens_per_s=global_batch * model.seq_length / step,
            model_tflops_per_gpu=model_tflops, hardware_tflops_per_gpu=hardware_tflops,
            mfu=model_tflops * 1e12 / peak_flops(gpu, "bf16" if precision == "fp8"
                                                 else precision),
            memory_per_gpu_gb=memory, memory_capacity_gb=capacity, memory={}, parts=parts,
            layers=[], layers_per_stage=[cuts[i + 1] - cuts[i] for i in range(pp)],
            sources=sorted(set(data.time_sources)), notes=[])
    layers = []
    stage_of = np.searchsorted(np.asarray(cuts), np.arange(len(layer_list)), side="right") - 1
    for i, layer in enumerate(layer_list):
        stage = int(stage_of[i])
        kind: str = layer.kind
        if model.has_dimensions and model.vocab_size:
            if i == 0:
                kind = "embedding+transformer"
            if i == model.num_layers - 1:
                kind = "transformer+head" if i else "embedding+transformer+head"
        total = float(data.time[stage, i])
        fwd = float(data.fwd[stage, i])
        layers.append({"index": i, "kind": kind, "stage": stage, "fwdS": fwd,
                       "bwdS": total - fwd})
    notes = list(data.cost_notes)
    if pp > 1:
        notes.append("layers divided evenly over the stages (the fewer on the first and "
                     "last when they do not divide); hyperplace split finds the best split")
    worst = max(range(pp), key=lambda i: ev.memory_bytes[i])
    terms = memory_terms(problem, stages[worst], layer_list)
    a, b = cuts[worst], cuts[worst + 1]
    breakdown = {name: float(np.sum(value[a:b])) / GB if isinstance(value, np.ndarray)
                 else float(value) / GB for name, value in terms.items()}
    breakdown["activations"] *= float(data.inflight[worst])
    breakdown["fragmentationReserve"] = FRAGMENTATION_RESERVE * sum(breakdown.values())
    breakdown = {"stage": worst, "microbatchesInFlight": float(data.inflight[worst]),
                 **breakdown}
    if memory > capacity:
        terms = {k: v for k, v in breakdown.items() if k not in ("stage", "microbatchesInFlight")}
        big = max(terms, key=lambda k: terms[k])
        notes.append(f"does not fit: {memory:.1f} GB per GPU needed, {capacity:g} GB available "
                     f"({memory - capacity:.1f} GB over; {big} dominates with "
                     f"{terms[big]:.1f} GB on stage {worst}; try --recompute, --zero, more TP "
                     "or PP)")
    fidelity = fidelity_note(calibration, gpu, catalog)
    notes.append(fidelity)
    scale = calibration.scale_for(model.name, gpu.name)
    if scale != 1.0:
        notes.append(f"layer times scaled by {scale:.3f} from observed step times")
    return Prediction(
        model=spec.name, gpu=gpu.name, tp=tp, pp=pp, dp=dp, micro_batch=micro_batch,
        global_batch=global_batch, seq=model.seq_length, microbatches=m, step_time_s=step,
        tokens_per_s=global_batch * model.seq_length / step,
        model_tflops_per_gpu=model_tflops, hardware_tflops_per_gpu=hardware_tflops,
        mfu=model_tflops * 1e12 / peak_flops(gpu, "bf16" if precision == "fp8" else precision), memory_per_gpu_gb=memory,
        memory_capacity_gb=capacity, memory=breakdown, parts=parts, layers=layers,
        layers_per_stage=[cuts[i + 1] - cuts[i] for i in range(pp)],
        sources=sorted(set(data.time_sources)), notes=notes)

