"""``hyperplace predict``: step time, throughput, MFU and memory of one configuration.

Examples::

    hyperplace predict --model-name llama3-70b --gpu H100 --tp 8 --pp 4 --dp 16 \\
        --microbatch-size 1 --global-batch 512 --seq 8192 --zero 1 --sequence-parallel
    hyperplace predict --model my-model.yaml --gpu A100-80 --tp 4 --format json

Same cost model as ``hyperplace split`` (one implementation, see
:mod:`hyperplace.costmodel.predict`). Exit codes: 0 a prediction (also when it does not fit
in memory: the headline says so first, with by how much), 2 bad input (one line on stderr).
"""

from __future__ import annotations

import json
from enum import Enum

import typer
from rich.console import Console
from rich.table import Table

from hyperplace.costmodel.calibration import load_calibration
from hyperplace.costmodel.predict import Prediction, predict
from hyperplace.errors import InputError
from hyperplace.models.profiles import resolve_model


class Format(str, Enum):
    table = "table"
    json = "json"


class Precision(str, Enum):
    bf16 = "bf16"
    fp16 = "fp16"
    fp32 = "fp32"
    fp8 = "fp8"


def render(pred: Prediction, console: Console) -> None:
    """Headline figures, the parts of the step, and the per-layer times (first, middle, last)."""
    if not pred.fits:
        console.print(
            f"DOES NOT FIT: {pred.memory_per_gpu_gb:.1f} GB per GPU needed, "
            f"{pred.memory_capacity_gb:g} GB available "
            f"({pred.memory_per_gpu_gb - pred.memory_capacity_gb:.1f} GB over): the figures "
            "below are what it would run at, were there the memory")
    console.print(
        f"{pred.model} on {pred.tp * pred.pp * pred.dp} x {pred.gpu} "
        f"(TP {pred.tp}, PP {pred.pp}, DP {pred.dp}), micro-batch {pred.micro_batch}, "
        f"global batch {pred.global_batch} x {pred.seq} tokens, {pred.microbatches} "
        "micro-batches per step")
    console.print(
        f"step {pred.step_time_s:.3f} s | {pred.tokens_per_s:,.0f} tokens/s | "
        f"{pred.model_tflops_per_gpu:.1f} model TFLOP/s per GPU "
        f"({pred.hardware_tflops_per_gpu:.1f} hardware) | MFU {100 * pred.mfu:.1f}% | "
        f"memory {pred.memory_per_gpu_gb:.1f} / {pred.memory_capacity_gb:g} GB per GPU")
    parts = Table(title="step time parts (s)")
    for name in pred.parts:
        parts.add_column(name, justify="right")
    parts.add_row(*(f"{v:.4f}" for v in pred.parts.values()))
    console.print(parts)
    layers = Table(title="per-layer time per micro-batch (ms)")
    for col in ("index", "kind", "stage", "fwd", "bwd"):
        layers.add_column(col, justify="left" if col == "kind" else "right")
    rows = pred.layers
    shown = rows if len(rows) <= 8 else [*rows[:3], rows[len(rows) // 2], *rows[-2:]]
    for r in shown:
        layers.add_row(str(r["index"]), r["kind"], str(r["stage"]), f"{1e3 * r['fwdS']:.3f}",
                       f"{1e3 * r['bwdS']:.3f}")
    console.print(layers)
    console.print(f"layer times: {', '.join(pred.sources)}")
    for note in pred.notes:
        console.print(f"note: {note}")


def predict_command(
    model: str | None = typer.Option(None, "--model", help="ModelSpec YAML/JSON file"),
    model_name: str | None = typer.Option(None, "--model-name",
                                          help="preset, e.g. llama3-70b (see hyperplace split)"),
    gpu: str = typer.Option(..., "--gpu", help="GPU type, e.g. H100, A100-80, B200"),
    tp: int = typer.Option(1, "--tp", help="tensor-parallel degree"),
    pp: int = typer.Option(1, "--pp", help="pipeline stages"),
    dp: int = typer.Option(1, "--dp", help="data-parallel replicas"),
    microbatch_size: int = typer.Option(1, "--microbatch-size", help="sequences per replica"),
    global_batch: int | None = typer.Option(None, "--global-batch",
                                            help="sequences per step (default mb x dp)"),
    seq: int | None = typer.Option(None, "--seq", help="sequence length (default: model's)"),
    recompute: bool = typer.Option(False, "--recompute/--no-recompute",
                                   help="full activation recomputation"),
    selective_recompute: bool = typer.Option(
        False, "--selective-recompute",
        help="recompute the attention core and the MLP activation (keeps less activation)"),
    zero: int = typer.Option(0, "--zero", help="ZeRO stage 0-3 (3: FSDP; 1: distributed "
                                                "optimizer)"),
    flash: bool = typer.Option(True, "--flash/--no-flash", help="FlashAttention (default on)"),
    sequence_parallel: bool = typer.Option(
        False, "--sequence-parallel/--no-sequence-parallel",
        help="Megatron sequence parallelism (activations sharded over TP)"),
    precision: Precision = typer.Option(Precision.bf16, "--precision",
                                         help="training precision (fp8: Transformer Engine "
                                              "GEMMs, on types with FP8 tensor cores)"),
    virtual_stages: int = typer.Option(1, "--virtual-stages",
                                       help="interleaved 1F1B: model chunks per pipeline rank"),
    cp: int = typer.Option(1, "--cp", help="context-parallel degree (GPUs = TP x CP x PP x DP)"),
    ep: int = typer.Option(1, "--ep", help="expert-parallel degree of an MoE model (divides "
                                           "its experts and DP x CP)"),
    overlap_grad_reduce: bool = typer.Option(
        True, "--overlap-grad-reduce/--no-overlap-grad-reduce",
        help="DP gradient reduction under the last micro-batch's backward (default on)"),
    overlap_param_gather: bool = typer.Option(
        False, "--overlap-param-gather/--no-overlap-param-gather",
        help="with --zero >= 1: the parameter all-gather under the next forward (Megatron-Core "
             "--overlap-param-gather)"),
    calibration: str | None = typer.Option(None, "--calibration",
                                           help="calibration file (hyperplace calibrate)"),
    output_format: Format = typer.Option(Format.table, "--format",
                                         help="table, json or yaml"),
) -> None:
    """Predict step time, tokens/s, TFLOP/s per GPU, MFU and memory of one configuration."""
    try:
        spec = resolve_model(path=model, preset=model_name)
        fitted = load_calibration(calibration) if calibration else None
        pred = predict(spec, gpu, tp=tp, pp=pp, dp=dp, micro_batch=microbatch_size,
                       global_batch=global_batch, seq=seq, recompute=recompute, zero=zero,
                       flash=flash, sequence_parallel=sequence_parallel,
                       precision=precision.value, virtual_stages=virtual_stages, cp=cp,
                       overlap_grad_reduce=overlap_grad_reduce,
                       overlap_param_gather=overlap_param_gather,
                       selective_recompute=selective_recompute, ep=ep,
                       calibration=fitted)
    except InputError as exc:
        typer.echo(f"error: {exc.one_line()}", err=True)
        raise typer.Exit(2) from None
    if output_format == Format.json:
        typer.echo(json.dumps(pred.to_doc(), indent=2))
    else:
        from hyperplace.commands.render import console

        render(pred, console())


def register(app: typer.Typer) -> None:
    app.command("predict")(predict_command)
