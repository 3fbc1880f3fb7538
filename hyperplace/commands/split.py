"""``hyperplace split``: the best layer split of a model over heterogeneous pipeline stages.

Mounted by ``hyperplace/cli.py`` as ``app.add_typer(split.app, name="split")``. The command is the Typer *callback* of ``app`` (``invoke_without_command=True``), so both
ways run it without a sub-command name.

Examples::

    hyperplace split --instance seed-beijing-shanghai
    hyperplace split --model-name seed-8layer --stage B200x8@beijing --stage H100x8@shanghai \\
        --link beijing-shanghai=100Gbps,20ms
    hyperplace split --profile LLAMA-3-8:mb=1 --stage A100-40x4@eth:tp=4 --stage GH200x4@cscs

Stages are ``TYPExCOUNT@CLUSTER`` with optional ``:tp=N``, ``:name=NAME`` and ``:optional``
(may stay empty). Links are ``A-B=BANDWIDTH[,LATENCY][,KIND]`` between clusters or stage
names (``100Gbps``, ``400Gb/s``, ``25GB/s``; ``30ms``, ``5us``); unlisted pairs default to
InfiniBand 400 Gb/s, 5 µs inside a cluster and a WAN of 100 Gb/s, 20 ms between clusters.
Profiles are ``MODEL[:mb=B]`` from Sailor's measured per-layer times (``OPT-350``,
``GPT-Neo-2.7``, ``LLAMA-3-8``, ``OPT-30``); ``GH200``/``GH-96`` measurements price ``H100``
stages.

Exit codes: 0 a plan, 1 no split fits in memory (the plan says which stage and by how much),
2 bad input (one line on stderr, no traceback).
"""

from __future__ import annotations

import json
import re
from enum import Enum
from typing import Any

import typer
import yaml
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hyperplace.costmodel.calibration import load_calibration
from hyperplace.errors import InputError
from hyperplace.models.model_spec import (
    ModelSpec,
    input_error_from_validation,
    model_preset,
    resolve_model,
)
from hyperplace.models.split import MAX_STAGE_GPUS, SplitPlan, SplitProblem, Stage, StageLink

app = typer.Typer(help="Split a model's layers over heterogeneous pipeline stages, exactly. "
                  "Exit codes: 0 a plan; 1 no split fits in memory; 2 bad input.",
                  add_completion=False,
                  context_settings={"help_option_names": ["-h", "--help"]})


class Solver(str, Enum):
    auto = "auto"
    dp = "dp"
    milp = "milp"
    cpsat = "cpsat"
    proportional = "proportional"


class Format(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


_STAGE_RE = re.compile(r"^(?P<gpu>.+?)x(?P<count>\d+)@(?P<cluster>[^:@]+)(?P<opts>(:[^:]+)*)$")
_BW_RE = re.compile(r"^\s*(?P<v>[\d.]+)\s*(?P<u>tbps|tb/s|gbps|gb/s|gbit/s|mbps|mb/s|GB/s)?\s*$",
                    re.IGNORECASE)
_LAT_RE = re.compile(r"^\s*(?P<v>[\d.]+)\s*(?P<u>ms|us|µs|s)?\s*$", re.IGNORECASE)


def parse_stage(text: str) -> Stage:
    """``B200x8@beijing[:tp=8][:name=bj][:optional]`` -> Stage (InputError when malformed)."""
    m = _STAGE_RE.match(text.strip())
    if not m:
        raise InputError(f"malformed stage {text!r}; expected TYPExCOUNT@CLUSTER[:tp=N]",
                         path="--stage")
    fields: dict[str, Any] = dict(gpu_type=m["gpu"], gpu_count=int(m["count"]),
                                  cluster=m["cluster"])
    for opt in filter(None, (m["opts"] or "").split(":")):
        key, _, val = opt.partition("=")
        if key == "tp" and val.isdigit():
            fields["tp"] = int(val)
        elif key == "name" and val:
            fields["name"] = val
        elif key == "optional" and not val:
            fields["optional"] = True
        else:
            raise InputError(f"malformed stage option {opt!r} in {text!r} "
                             "(tp=N, name=NAME or optional)", path="--stage")
    if fields["gpu_count"] <= 0:
        raise InputError(f"stage {text!r} has 0 GPUs", path="--stage")
    if fields["gpu_count"] > MAX_STAGE_GPUS:
        raise InputError(f"stage {text!r} has more than {MAX_STAGE_GPUS:,} GPUs", path="--stage")
    tp = fields.get("tp", min(fields["gpu_count"], 8))
    if tp > 0 and fields["gpu_count"] % tp:
        raise InputError(f"stage {text!r}: tp={tp} does not divide its {fields['gpu_count']} "
                         "GPUs", path="--stage")
    try:
        return Stage(**fields)
    except ValidationError as exc:
        err = input_error_from_validation(exc)
        raise InputError(f"stage {text!r}: {err.path + ': ' if err.path else ''}{err.message}",
                         path="--stage") from None


def _bandwidth_gbps(text: str, whole: str) -> float:
    m = _BW_RE.match(text)
    if not m:
        raise InputError(f"malformed bandwidth {text!r} in {whole!r} (e.g. 100Gbps)",
                         path="--link")
    v, unit = float(m["v"]), (m["u"] or "gbps")
    if unit == "GB/s":
        return v * 8
    unit = unit.lower()
    if unit in ("tbps", "tb/s"):
        return v * 1000
    if unit in ("mbps", "mb/s"):
        return v / 1000
    return v


def _latency_ms(text: str, whole: str) -> float:
    m = _LAT_RE.match(text)
    if not m:
        raise InputError(f"malformed latency {text!r} in {whole!r} (e.g. 20ms)", path="--link")
    v, unit = float(m["v"]), (m["u"] or "ms").lower()
    return {"ms": v, "us": v / 1e3, "µs": v / 1e3, "s": v * 1e3}[unit]


def parse_link(text: str, names: set[str]) -> StageLink:
    """``beijing-shanghai=100Gbps,30ms[,wan]``; names may contain '-' if they are known."""
    ends, eq, value = text.partition("=")
    if not eq or "-" not in ends:
        raise InputError(f"malformed link {text!r}; expected A-B=100Gbps,20ms", path="--link")
    splits = [(ends[:i], ends[i + 1:]) for i, ch in enumerate(ends) if ch == "-"]
    known = [(a, b) for a, b in splits if a in names and b in names]
    a, b = (known or splits)[0]
    if not a or not b:
        raise InputError(f"malformed link {text!r}; expected A-B=100Gbps,20ms", path="--link")
    if a == b:
        raise InputError(f"link {text!r}: both ends are {a!r}; a link joins two different "
                         "clusters or stages", path="--link")
    if not known:
        # A link between names no stage carries would be dropped without a word.
        unknown = a if a not in names else b
        raise InputError(f"link {text!r}: {unknown!r} is neither a stage nor a cluster "
                         f"(known: {', '.join(sorted(names))})", path="--link")
    parts = [p.strip() for p in value.split(",")]
    gbps = _bandwidth_gbps(parts[0], text)
    latency = _latency_ms(parts[1], text) if len(parts) > 1 and parts[1] else 0.0
    kind = parts[2].lower() if len(parts) > 2 else None
    if kind not in (None, "wan", "ib", "nvlink"):
        raise InputError(f"unknown link kind {kind!r} in {text!r} (wan, ib, nvlink)",
                         path="--link")
    if gbps <= 0:
        raise InputError(f"link {text!r} has zero bandwidth", path="--link")
    return StageLink(a=a, b=b, gbps=gbps, latency_ms=latency, kind=kind or "wan")


def stages_from_instance(name: str) -> tuple[list[Stage], list[StageLink], str | None, list[str]]:
    """One stage per (cluster, GPU type): one node's GPUs of that type, as a pipeline stage
    would take them; the federation's links; and the instance's model name."""
    from hyperplace.instances.registry import load_instance

    inst = load_instance(name)
    stages: list[Stage] = []
    for cluster in inst.clusters:
        seen: set[str] = set()
        for node in cluster.nodes:
            if node.gpu_type not in seen:
                seen.add(node.gpu_type)
                stages.append(Stage(cluster=cluster.name, gpu_type=node.gpu_type,
                                    gpu_count=node.gpu_count))
    links = [StageLink(a=link.a, b=link.b, gbps=link.gbps, latency_ms=link.latency_ms)
             for link in inst.federation.links]
    notes = [f"stages from instance {name}: one node per GPU type per cluster"
             if stages else f"instance {name} has no nodes"]
    return stages, links, inst.spec.model, notes


def _assumed_links(stages: list[Stage], links: list[StageLink]) -> list[str]:
    """Say which cluster pairs the split prices with the default WAN (no --link given)."""
    from hyperplace.models.split import (
        DEFAULT_INTER_CLUSTER_GBPS,
        DEFAULT_INTER_CLUSTER_LATENCY_MS,
    )

    clusters = list(dict.fromkeys(s.cluster for s in stages))
    stage_cluster = {s.name: s.cluster for s in stages}
    given = {frozenset((stage_cluster.get(x.a, x.a), stage_cluster.get(x.b, x.b)))
             for x in links}
    out = []
    for i, a in enumerate(clusters):
        for b in clusters[i + 1:]:
            if frozenset((a, b)) not in given:
                out.append(f"no --link between {a} and {b}: assumed a WAN of "
                           f"{DEFAULT_INTER_CLUSTER_GBPS:g} Gb/s, "
                           f"{DEFAULT_INTER_CLUSTER_LATENCY_MS:g} ms (give --link "
                           f"{a}-{b}=BANDWIDTH,LATENCY)")
    return out


def build_problem(
    *, model: str | None, model_name: str | None, profile: str | None,
    micro_batch_size: int | None, stage: list[str], link: list[str], microbatches: int,
    zero: int, recompute: bool, fixed_order: bool, instance: str | None,
) -> tuple[SplitProblem, list[str]]:
    """CLI strings -> SplitProblem; every problem is an InputError naming the option."""
    notes: list[str] = []
    stages = [parse_stage(s) for s in stage]
    links: list[StageLink] = []
    inst_model: str | None = None
    if instance:
        inst_stages, links, inst_model, notes = stages_from_instance(instance)
        if not stages:
            stages = inst_stages
        else:
            notes = [f"stages: the {len(stages)} given with --stage, not the instance's; "
                     f"instance {instance} gives the links and model only"]
    if not stages:
        raise InputError("no stages: give --stage TYPExCOUNT@CLUSTER (repeatable) or --instance",
                         path="--stage")
    seen: dict[str, str] = {}
    for s in stages:
        if s.name in seen and s.name != f"{s.gpu_type}x{s.gpu_count}@{s.cluster}":
            raise InputError(f"stage name {s.name!r} is given to two stages", path="--stage")
        seen[s.name] = s.name
    names = {s.cluster for s in stages} | {s.name for s in stages}
    links = links + [parse_link(x, names) for x in link]
    notes += _assumed_links(stages, links)
    if microbatches <= 0:
        raise InputError(f"must be at least 1, got {microbatches}", path="--microbatches")
    if zero not in (0, 1, 2, 3):
        raise InputError(f"must be 0, 1, 2 or 3, got {zero}", path="--zero")
    if model or model_name or profile:
        spec: ModelSpec = resolve_model(path=model, preset=model_name, profile=profile,
                                        micro_batch_size=micro_batch_size)
    elif inst_model:
        try:
            spec = model_preset(inst_model, micro_batch_size)
        except InputError as exc:
            raise InputError(f"instance {instance} names model {inst_model!r}, which is not a "
                             "preset; give --model, --model-name or --profile",
                             path="--instance") from exc
    else:
        raise InputError("no model: give --model FILE, --model-name PRESET or --profile NAME")
    required = sum(1 for s in stages if not s.optional)
    if required > spec.num_layers:
        raise InputError(
            f"{required} stages but the model has only {spec.num_layers} "
            f"layer{'s' if spec.num_layers != 1 else ''}: every stage needs a layer "
            "(mark some stages :optional)", path="--stage")
    try:
        problem = SplitProblem(model=spec, stages=stages, links=links, microbatches=microbatches,
                               zero=zero, recompute=recompute, fixed_order=fixed_order)
    except ValidationError as exc:
        raise input_error_from_validation(exc) from None
    return problem, notes


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1e3 * x:,.2f}"


def render_table(plan: SplitPlan, console: Console) -> None:
    """Per-stage table, totals, and the baselines with the symmetric split's idle time."""
    # two tables of at most 7 columns, so that both fit an 80-column terminal
    t = Table(title=f"layer split of {escape(plan.model)} ({plan.num_layers} layers, "
                    f"{plan.microbatches} micro-batches)", title_justify="left")
    # a default stage name (TYPExCOUNT@CLUSTER) already says the cluster
    named = any(not s.name.endswith(f"@{s.cluster}") for s in plan.stages)
    cols = ("pos", "stage", *(("cluster",) if named else ()), "GPUs", "layers", "n",
            "memory GB")
    for col in cols:
        t.add_column(col, justify="left" if col in ("stage", "cluster", "GPUs") else "right",
                     overflow="fold")
    for s in plan.stages:
        t.add_row("-" if s.position is None else str(s.position), escape(s.name),
                  *((escape(s.cluster),) if named else ()),
                  f"{s.gpu_count}x {s.gpu_type} tp{s.tp}", s.layer_range,
                  str(s.num_layers), f"{s.memory_used_gb:.1f} of {s.memory_available_gb:.0f}")
    console.print(t)
    per = Table(title="per micro-batch, in pipeline order (ms)", title_justify="left")
    for col in ("pos", "compute", "transfer", "load", "idle", "in flight"):
        per.add_column(col, justify="right")
    for s in plan.stages:
        if s.position is not None:
            per.add_row(str(s.position), _ms(s.compute_s), _ms(s.transfer_s), _ms(s.load_s),
                        _ms(s.idle_s), str(s.inflight_microbatches))
    console.print(per)
    if not plan.feasible:
        console.print(f"[bold red]infeasible[/]: {escape(plan.infeasible_reason)}")
    else:
        console.print(
            f"bottleneck {_ms(plan.bottleneck_s)} ms | step {_ms(plan.step_time_s)} ms "
            f"((m-1)·max + Σ = {_ms(plan.pipeline_time_s)} ms, DP sync {_ms(plan.dp_sync_s)} ms,"
            f" optimizer {_ms(plan.optimizer_s)} ms)"
            f" | bubble {100 * (plan.bubble_fraction or 0):.1f}% | "
            f"throughput {plan.throughput_tokens_s or 0:,.0f} tokens/s")
        console.print(
            f"lower bound {_ms(plan.lower_bound_s)} ms | solver {plan.stats.solver} "
            f"({plan.stats.status.value}) in {1e3 * plan.stats.runtime_s:.1f} ms | "
            f"WAN crossings {plan.wan_crossings}")
    for b in (plan.symmetric, plan.proportional):
        if b is None:
            continue
        if b.bottleneck_s is None:
            console.print(f"{b.name}: n/a ({b.message})")
            continue
        ratio = f", {b.ratio_to_optimal:.3f}x the optimum" if b.ratio_to_optimal else ""
        fit = "" if b.feasible else f" [red]does not fit: {escape(b.message)}[/]"
        console.print(f"{b.name} split {'/'.join(map(str, b.layers_per_stage))}: bottleneck "
                      f"{_ms(b.bottleneck_s)} ms{ratio}{fit}")
        if b.name == "symmetric":
            console.print("  symmetric idle per micro-batch: " + ", ".join(
                f"stage {i}: {_ms(x)} ms" for i, x in enumerate(b.idle_s)))
    for note in plan.notes:
        console.print(f"note: {escape(note)}")


@app.callback(invoke_without_command=True)
def split_command(
    model: str | None = typer.Option(None, "--model", help="ModelSpec YAML/JSON file"),
    model_name: str | None = typer.Option(
        None, "--model-name",
        help="preset: llama3-8b/70b/405b, gpt3-175b, mixtral-8x7b, deepseek-moe-16b, "
             "opt-350m, gpt-neo-2.7b, opt-30b, llama3-120b (assumed), seed-8layer"),
    profile: str | None = typer.Option(
        None, "--profile", help="measured profile MODEL[:mb=B], e.g. LLAMA-3-8:mb=1"),
    micro_batch_size: int | None = typer.Option(
        None, "--micro-batch-size", min=1, help="sequences per micro-batch (default: the "
        "model's, or the profile's mb=)"),
    stage: list[str] = typer.Option([], "--stage", help="TYPExCOUNT@CLUSTER[:tp=N] (repeat)"),
    link: list[str] = typer.Option([], "--link", help="A-B=100Gbps,20ms (repeat)"),
    microbatches: int = typer.Option(8, "--microbatches", help="micro-batches per step (m)"),
    solver: Solver = typer.Option(
        Solver.auto, "--solver", help="auto = the exact dynamic program; milp and cpsat prove "
        "the same optimum; proportional is the Metis-style baseline"),
    zero: int = typer.Option(0, "--zero", help="ZeRO stage 0-3"),
    recompute: bool = typer.Option(False, "--recompute/--no-recompute",
                                   help="full activation recomputation"),
    fixed_order: bool = typer.Option(False, "--fixed-order/--free-order",
                                     help="keep the stages in the order given, or let the "
                                     "solver order them (fewest WAN crossings, or the order given)"),
    output_format: Format | None = typer.Option(
        None, "--format", "-f", help="table, json or yaml (default: table, or the output "
        "file's suffix)"),
    instance: str | None = typer.Option(
        None, "--instance", "-i", help="bundled name or Instance file: one stage per GPU type "
        "per cluster, its links and model (--stage replaces its stages)"),
    budget: float | None = typer.Option(None, "--budget", help="seconds for MILP/CP-SAT "
                                        "(default 10)"),
    output: str | None = typer.Option(None, "--output", "-o",
                                      help="write the split plan here (.yaml or .json)"),
    time_limit: float | None = typer.Option(None, "--time-limit", hidden=True),
    calibration: str | None = typer.Option(
        None, "--calibration", help="cost-model calibration file (hyperplace calibrate)"),
) -> None:
    """Find the split that minimises the slowest stage, prove it, compare with baselines."""
    from hyperplace.commands.common import check_budget, file_format, write_output

    try:
        if budget is not None and time_limit is not None:
            raise InputError("give --budget once (--time-limit is its old name)",
                             path="--budget")
        time_limit = check_budget(
            budget if budget is not None else time_limit if time_limit is not None else 10.0,
            "--time-limit" if time_limit is not None else "--budget")
        shown = output_format.value if output_format is not None else None
        file_fmt = file_format(shown, output) if output is not None else None
        problem, notes = build_problem(
            model=model, model_name=model_name, profile=profile,
            micro_batch_size=micro_batch_size, stage=stage, link=link,
            microbatches=microbatches, zero=zero, recompute=recompute,
            fixed_order=fixed_order, instance=instance)
        fitted = load_calibration(calibration) if calibration else None
        from hyperplace.solvers.split import solve_split  # OR-Tools: loaded when used (start-up)

        plan = solve_split(problem, solver.value, time_limit=time_limit, calibration=fitted)
    except InputError as exc:
        typer.echo(f"error: {exc.one_line()}", err=True)
        raise typer.Exit(2) from None
    if notes:
        plan = plan.model_copy(update={"notes": [*notes, *plan.notes]})
    if output is not None and file_fmt is not None:
        data = plan.model_dump(mode="json", by_alias=True)
        text = (json.dumps(data, indent=2) + "\n" if file_fmt == "json"
                else yaml.safe_dump(data, sort_keys=False))
        try:
            write_output(output, text, plan.summary())
        except InputError as exc:
            typer.echo(f"error: {exc.one_line()}", err=True)
            raise typer.Exit(2) from None
        # -o FILE: the file and its one-line summary, nothing else (as every command)
        if not plan.feasible:
            typer.echo(f"infeasible: {plan.infeasible_reason}", err=True)
            raise typer.Exit(1)
        return
    output_format = output_format or Format.table
    if output_format == Format.json:
        typer.echo(json.dumps(plan.model_dump(mode="json", by_alias=True), indent=2))
    elif output_format == Format.yaml:
        typer.echo(yaml.safe_dump(plan.model_dump(mode="json", by_alias=True), sort_keys=False))
    else:
        from hyperplace.commands.render import console

        render_table(plan, console())
    if not plan.feasible:
        if output_format != Format.table:
            typer.echo(f"infeasible: {plan.infeasible_reason}", err=True)
        raise typer.Exit(1)
