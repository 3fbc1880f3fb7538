"""``hyperplace instances list|show|export|generate`` and ``hyperplace validate``.

Thin: every command calls :mod:`hyperplace.instances` and prints. Bad input is reported as
one ``error: FILE: field.path: problem`` line with exit code 2 here as well as in
``cli.main``, so the commands behave the same when driven by ``typer.testing.CliRunner``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from hyperplace.errors import InputError

F = TypeVar("F", bound=Callable[..., Any])

instances_app = typer.Typer(
    help="Bundled and generated instances: list, show, export, generate.",
    no_args_is_help=True,
)


def _console() -> Console:
    # A fresh console per command so CliRunner's captured stdout is used, and wide enough
    # that tables are not squeezed when the output is a pipe.
    return Console(file=sys.stdout, width=max(120, Console().width), highlight=False)


def _fail(exc: InputError) -> None:
    print(f"error: {exc.one_line()}", file=sys.stderr)
    raise typer.Exit(2)


def one_line_errors(func: F) -> F:
    """Report :class:`InputError` as one line and exit 2 (no traceback, even under tests)."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InputError as exc:
            _fail(exc)

    return wrapper  # type: ignore[return-value]


@instances_app.command("list")
@one_line_errors
def list_command() -> None:
    """The bundled instances: size, free GPUs and pending jobs."""
    from hyperplace.instances import DEFAULT_INSTANCE, list_instances

    table = Table(title="Bundled instances", title_justify="left")
    for col in ("name", "clusters", "nodes", "GPUs", "free", "pending jobs"):
        table.add_column(col, justify="left" if col == "name" else "right", no_wrap=True)
    table.add_column("description")
    for info in list_instances():
        name = info.name + (" (default)" if info.name == DEFAULT_INSTANCE else "")
        table.add_row(name, str(info.clusters), f"{info.nodes:,}", f"{info.gpus:,}",
                      f"{info.free_gpus:,}", str(info.pending_jobs), info.description)
    _console().print(table)


@instances_app.command("show")
@one_line_errors
def show_command(
    name_or_file: Annotated[str, typer.Argument(help="bundled name or Instance file")],
    all_domains: Annotated[bool, typer.Option("--all", help="every domain, not the top N")]
    = False,
    top: Annotated[int, typer.Option("--top", help="domains per tier to list")] = 8,
    as_json: Annotated[bool, typer.Option("--json", help="the summary as JSON")] = False,
) -> None:
    """GPUs by type and state, domains per tier, free GPUs per domain, fragmentation."""
    from hyperplace.instances import load_instance, summarize

    summary = summarize(load_instance(name_or_file))
    if as_json:
        print(summary.model_dump_json(by_alias=True, indent=2))
        return
    console = _console()
    console.print(f"[bold]{summary.name}[/bold]: {summary.description}")
    if summary.source:
        console.print(f"source: {summary.source}")
    model = f", model {summary.model}" if summary.model else ""
    console.print(f"{summary.running_jobs} running jobs, {summary.pending_jobs} pending jobs "
                  f"asking for {summary.pending_gpus:,} GPUs{model}")
    console.print(f"fragmentation {summary.fragmentation:.2f} (share of free GPUs on nodes "
                  "that are not wholly free)")
    for link in summary.inter_cluster_links:
        console.print(f"link {link.a} <-> {link.b}: {link.gbps:g} Gb/s, {link.latency_ms:g} ms")
    for cluster in summary.clusters:
        console.print()
        console.print(f"[bold]cluster {cluster.name}[/bold] ({cluster.region or 'no region'}): "
                      f"{cluster.nodes} nodes, fabric {cluster.fabric}, fragmentation "
                      f"{cluster.fragmentation:.2f}")
        console.print("GPUs by type and state")
        gpus = Table()
        for col in ("type", "total", "free", "allocated", "faulty", "largest free NVLink set"):
            gpus.add_column(col, justify="left" if col == "type" else "right")
        for row in cluster.gpus_by_type:
            gpus.add_row(row.gpu_type, f"{row.total:,}", f"{row.free:,}", f"{row.allocated:,}",
                         f"{row.faulty:,}", str(cluster.largest_free_nvlink_set[row.gpu_type]))
        console.print(gpus)
        console.print("Domains per tier (nodes pairwise within the hop radius)")
        tiers = Table()
        for col in ("tier", "max hops", "domains", "largest free domain"):
            tiers.add_column(col, justify="right")
        for tier in cluster.tiers:
            best = tier.domains[0].free_gpus if tier.domains else 0
            tiers.add_row(str(tier.tier), str(tier.radius), str(tier.domain_count), f"{best:,}")
        console.print(tiers)
        for tier in cluster.tiers:
            shown = tier.domains if all_domains else tier.domains[:top]
            title = f"Free GPUs per tier-{tier.tier} domain (hop <= {tier.radius})"
            if len(shown) < len(tier.domains):
                title += f", top {len(shown)} of {tier.domain_count} (--all for every one)"
            console.print(title)
            table = Table()
            for col in ("domain", "nodes", "GPUs", "free", "whole-free nodes"):
                table.add_column(col, justify="left" if col == "domain" else "right")
            for d in shown:
                table.add_row(d.name, str(d.nodes), f"{d.gpus:,}", f"{d.free_gpus:,}",
                              str(d.whole_free_nodes))
            console.print(table)


@instances_app.command("export")
@one_line_errors
def export_command(
    name_or_file: Annotated[str, typer.Argument(help="bundled name or Instance file")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="yaml or json")] = "yaml",
    output: Annotated[str | None, typer.Option("--output", "-o", help="file (default: stdout)")]
    = None,
) -> None:
    """Write an instance as one Instance document that loads back identically."""
    from hyperplace.instances import load_instance
    from hyperplace.instances.registry import render_instance

    text = render_instance(load_instance(name_or_file), fmt)
    if output is None:
        sys.stdout.write(text)
        return
    _write(output, text)
    print(f"wrote {output}", file=sys.stderr)


def _write(path: str, text: str) -> None:
    try:
        Path(path).write_text(text)
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", source=path) from None


@instances_app.command("generate")
@one_line_errors
def generate_command(
    gpus: Annotated[int, typer.Option("--gpus", help="GPUs (8 per node)")],
    jobs: Annotated[int, typer.Option("--jobs", help="pending jobs")],
    out: Annotated[str, typer.Option("--out", "-o", help="file to write (.yaml or .json)")],
    gpu_types: Annotated[str, typer.Option("--gpu-types", help="comma-separated GPU types")]
    = "H100-80,A100-80",
    fragmentation: Annotated[float, typer.Option(
        "--fragmentation", help="share of GPUs held by running jobs, 0..1")] = 0.3,
    seed: Annotated[int, typer.Option("--seed", help="same seed, same file")] = 0,
    fabric: Annotated[str, typer.Option(
        "--fabric", help="auto, fat-tree-2, fat-tree-3 or superpod-rail")] = "auto",
    faulty: Annotated[int, typer.Option("--faulty", help="faulty GPUs to scatter")] = 0,
    size_scale: Annotated[int, typer.Option(
        "--size-scale", help="multiply queued job sizes (8: Philly sizes read in 8-GPU nodes)")] = 1,
) -> None:
    """A seeded synthetic instance (job sizes from the Philly trace)."""
    from hyperplace.instances import generate
    from hyperplace.instances.registry import render_instance

    types = [t.strip() for t in gpu_types.split(",") if t.strip()]
    instance = generate(gpus, jobs, types, fragmentation=fragmentation, seed=seed,
                        fabric=fabric, faulty_gpus=faulty, size_scale=size_scale)
    _write(out, render_instance(instance, "json" if out.endswith(".json") else "yaml"))
    nodes = [n for c in instance.clusters for n in c.nodes]
    print(f"wrote {out}: {len(nodes):,} nodes, {sum(n.gpu_count for n in nodes):,} GPUs "
          f"({sum(n.free_count for n in nodes):,} free), {len(instance.jobs):,} pending jobs")


def validate_command(
    files: Annotated[list[str], typer.Argument(help="Instance, Cluster, job or HyperNode files")],
) -> None:
    """Check files; print ``FILE: ok (kind, summary)`` each, stop at the first bad one."""
    from hyperplace.instances import validate_file

    for f in files:
        try:
            summary = validate_file(f)
        except InputError as exc:
            _fail(exc)
        print(f"{f}: ok ({summary})")


def register(app: typer.Typer) -> None:
    app.add_typer(instances_app, name="instances")
    app.command("validate")(validate_command)
