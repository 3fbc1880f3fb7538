"""``hyperplace instances list|show|export|generate`` and ``hyperplace validate``.

Thin: every command calls :mod:`hyperplace.instances` and prints. Bad input is reported as
one ``error: FILE: field.path: problem`` line with exit code 2 here as well as in
``cli.main``, so the commands behave the same when driven by ``typer.testing.CliRunner``.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import Annotated

import typer
from rich.console import Console

from hyperplace.commands.common import (
    ALL_HELP,
    TOP_HELP,
    console,
    fail,
    file_format,
    interruptible,
    one_line_errors,
    pick_output,
    write_output,
)
from hyperplace.errors import InputError
from hyperplace.io import write_atomic
from hyperplace.models.limits import MAX_GPUS, MAX_JOBS

#: Largest ``--size-scale``: the biggest Philly job (32 GPUs) becomes 32,768 GPUs.
MAX_SIZE_SCALE = 1024


class DocFormat(StrEnum):
    yaml = "yaml"
    json = "json"


class ImportFormat(StrEnum):
    nvidia_smi = "nvidia-smi"
    nccl_xml = "nccl-xml"
    dgx1 = "dgx1"
    hypernode = "hypernode"
    alibaba = "alibaba"
    kubernetes = "kubernetes"
    slurm = "slurm"
    ibnetdiscover = "ibnetdiscover"

instances_app = typer.Typer(
    help="Instances: list and show the bundled ones, export, generate, import your own "
    "(exit codes as for every command: hyperplace -h).",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _console() -> Console:
    return console()


@instances_app.command("list")
@one_line_errors
def list_command() -> None:
    """The bundled instances: size, free GPUs and pending jobs."""
    from hyperplace.instances import DEFAULT_INSTANCE, list_instances

    from hyperplace.commands import render as r
    from hyperplace.commands.render import Column

    infos = list_instances()
    numbers = [Column(c, justify="right") for c in ("clusters", "nodes", "GPUs", "free",
                                                     "pending")]
    values = [[r.count(i.clusters), r.count(i.nodes), r.count(i.gpus), r.count(i.free_gpus),
               r.count(i.pending_jobs)] for i in infos]
    names = [i.name + (" (default)" if i.name == DEFAULT_INSTANCE else "") for i in infos]
    out = _console()
    wide = r.fit([Column("name"), *numbers, Column("description", "text", min_width=40)],
                 [[n, *v, i.description] for n, v, i in zip(names, values, infos)], out.width)
    if "description" in [c.header for c in wide.table.columns] and wide.width <= out.width:
        r.print_table(out, [Column("name"), *numbers, Column("description", "text",
                                                             min_width=40)],
                      [[n, *v, i.description] for n, v, i in zip(names, values, infos)],
                      "Bundled instances")
    else:  # narrow: each description under its name (names whole; clusters may go)
        longest = max((len(n) for n in names), default=0)
        numbers[0] = Column("clusters", "optional", justify="right")
        r.print_table(out, [Column("name and description", "text", min_width=30,
                                   floor=longest), *numbers],
                      [[f"{n}\n{i.description}", *v] for n, v, i in zip(names, values, infos)],
                      "Bundled instances")


@instances_app.command("show")
@one_line_errors
def show_command(
    name_or_file: Annotated[str, typer.Argument(help="bundled name or Instance file")],
    all_domains: Annotated[bool, typer.Option("--all", help=ALL_HELP)] = False,
    top: Annotated[int, typer.Option("--top", help=TOP_HELP)] = 8,
    as_json: Annotated[bool, typer.Option("--json", help="the summary as JSON")] = False,
    draw: Annotated[str | None, typer.Option(
        "--draw", help="also draw the cluster as an SVG picture (leaves, nodes, GPU states)")]
    = None,
) -> None:
    """GPUs by type and state, domains per tier, free GPUs per domain, fragmentation."""
    from hyperplace.instances import load_instance, summarize

    if draw is not None and not draw.lower().endswith(".svg"):
        raise InputError(f"pictures are SVG: give a .svg file name, got {draw!r}",
                         path="--draw")
    instance = load_instance(name_or_file)
    if draw is not None:
        from hyperplace.draw import draw_svg

        with interruptible():
            picture = draw_svg(instance)
        write_output(draw, picture, "picture of the cluster")
    summary = summarize(instance)
    if as_json:
        print(summary.model_dump_json(by_alias=True, indent=2))
        return
    from hyperplace.commands import render as r
    from hyperplace.commands.render import Column

    out = _console()
    r.print_line(out, f"{summary.name}: {summary.description}")
    if summary.source:
        r.print_line(out, f"source: {summary.source}")
    model = f", model {summary.model}" if summary.model else ""
    r.print_line(out, f"{r.plural(summary.running_jobs, 'running job')}, "
                      f"{r.plural(summary.pending_jobs, 'pending job')} asking for "
                      f"{r.count(summary.pending_gpus)} GPUs{model}")
    r.print_line(out, f"fragmentation {summary.fragmentation:.2f} (share of free GPUs on nodes "
                      "that are not wholly free)")
    for link in summary.inter_cluster_links:
        r.print_line(out, f"link {link.a} <-> {link.b}: {link.gbps:,g} Gb/s, "
                          f"{link.latency_ms:g} ms")
    for cluster in summary.clusters:
        r.print_line(out, "")
        r.print_line(out, f"cluster {cluster.name} ({cluster.region or 'no region'}): "
                          f"{r.plural(cluster.nodes, 'node')}, fabric {cluster.fabric}, "
                          f"fragmentation {cluster.fragmentation:.2f}")
        r.print_table(out, [Column("type"), *[Column(c, justify="right") for c in (
            "total", "free", "allocated", "faulty", "largest free NVLink set")]],
            [[row.gpu_type, r.count(row.total), r.count(row.free), r.count(row.allocated),
              r.count(row.faulty), r.count(cluster.largest_free_nvlink_set[row.gpu_type])]
             for row in cluster.gpus_by_type], "GPUs by type and state")
        r.print_table(out, [Column(c, justify="right") for c in (
            "tier", "max hops", "domains", "largest free domain")],
            [[str(t.tier), str(t.radius), r.count(t.domain_count),
              r.count(t.domains[0].free_gpus if t.domains else 0)] for t in cluster.tiers],
            "Domains per tier (nodes pairwise within the hop radius)")
        def domain_table(domains, total: int, title: str, what: str, member: str) -> None:
            shown, hidden = r.cap(domains, top, all_domains)
            if hidden:
                title += f", top {len(shown)} of {r.count(total)} (--all for every one)"
            r.print_table(out, [Column(what), *[Column(c, justify="right") for c in (
                f"{member}s", "GPUs", "free", f"whole-free {member}s")]],
                [[d.name, r.count(d.nodes), r.count(d.gpus), r.count(d.free_gpus),
                  r.count(d.whole_free_nodes)] for d in shown], title)

        for tier in cluster.tiers:
            domain_table(tier.domains, tier.domain_count,
                         f"Free GPUs per tier-{tier.tier} domain (hop <= {tier.radius})",
                         "domain", "node")
        if cluster.nvlink_domains:  # racks (#24): the NVLink level below the leaves
            domain_table(cluster.nvlink_domains, len(cluster.nvlink_domains),
                         "Free GPUs per NVLink domain (rack; trays share one NVLink switch "
                         "layer)", "NVLink domain", "tray")


@instances_app.command("export")
@one_line_errors
def export_command(
    name_or_file: Annotated[str, typer.Argument(help="bundled name or Instance file")],
    fmt: Annotated[DocFormat | None, typer.Option(
        "--format", "-f", help="yaml or json (default: from the output suffix, else yaml)")]
    = None,
    output: Annotated[str | None, typer.Option("--output", "-o", help="file (default: stdout)")]
    = None,
) -> None:
    """Write an instance as one Instance document that loads back identically."""
    from hyperplace.instances import load_instance
    from hyperplace.instances.registry import render_instance

    out_fmt = file_format(fmt.value if fmt else None, output)
    instance = load_instance(name_or_file)
    with interruptible():
        text = render_instance(instance, out_fmt)
    if output is None:
        sys.stdout.write(text)
        return
    write_output(output, text)


@instances_app.command("generate")
@one_line_errors
def generate_command(
    gpus: Annotated[int, typer.Option(
        "--gpus", help=f"GPUs, 8 per node (8..{MAX_GPUS:,})")],
    jobs: Annotated[int, typer.Option("--jobs", help=f"pending jobs (0..{MAX_JOBS:,})")],
    output: Annotated[str | None, typer.Option(
        "--output", "-o", help="file to write (.yaml or .json)")] = None,
    gpu_types: Annotated[str, typer.Option("--gpu-types", help="comma-separated GPU types")]
    = "H100-80,A100-80",
    load: Annotated[float | None, typer.Option(
        "--load", help="share of GPUs held by running jobs, 0..1 (default 0.3); how "
        "fragmented the free GPUs end up is printed, as `instances show` defines it")] = None,
    seed: Annotated[int, typer.Option("--seed", min=0, max=2**31 - 1,
                                      help="same seed, same file (0..2,147,483,647)")] = 0,
    fabric: Annotated[str, typer.Option(
        "--fabric", help="auto, fat-tree-2, fat-tree-3 or superpod-rail")] = "auto",
    faulty: Annotated[int, typer.Option(
        "--faulty", help="faulty GPUs to scatter (at most the GPUs generated)")] = 0,
    size_scale: Annotated[int, typer.Option(
        "--size-scale", help=f"multiply queued job sizes, 1..{MAX_SIZE_SCALE} (8: Philly "
        "sizes read in 8-GPU nodes)")] = 1,
    fmt: Annotated[DocFormat | None, typer.Option(
        "--format", "-f", help="yaml or json (default: from the output suffix)")] = None,
    out_old: Annotated[str | None, typer.Option("--out", hidden=True)] = None,
    fragmentation_old: Annotated[float | None, typer.Option("--fragmentation", hidden=True)]
    = None,
) -> None:
    """A seeded synthetic instance (job sizes from the Philly trace)."""
    from hyperplace.instances import generate
    from hyperplace.instances.registry import render_instance
    from hyperplace.instances.summary import fragmentation as free_fragmentation

    out = pick_output(output, out_old)
    if out is None:
        raise InputError("give the file to write with -o/--output FILE", path="--output")
    if load is not None and fragmentation_old is not None:
        raise InputError("give --load once (--fragmentation is its old name)", path="--load")
    share = load if load is not None else fragmentation_old if fragmentation_old is not None \
        else 0.3
    if not 8 <= gpus <= MAX_GPUS:
        raise InputError(f"must be within 8..{MAX_GPUS:,} (the GPU limit), got {gpus:,}",
                         path="--gpus")
    if not 0 <= jobs <= MAX_JOBS:
        raise InputError(f"must be within 0..{MAX_JOBS:,} (the job limit), got {jobs:,}",
                         path="--jobs")
    if not 1 <= size_scale <= MAX_SIZE_SCALE:
        raise InputError(f"must be within 1..{MAX_SIZE_SCALE}, got {size_scale:,}",
                         path="--size-scale")
    total = -(-gpus // 8) * 8
    if not 0 <= faulty <= total:
        raise InputError(f"must be within 0..{total:,} (the GPUs generated), got {faulty:,}",
                         path="--faulty")
    if not 0.0 <= share <= 1.0:
        raise InputError(f"must be within [0, 1], got {share}", path="--load")
    out_fmt = file_format(fmt.value if fmt else None, out)
    types = [t.strip() for t in gpu_types.split(",") if t.strip()]
    with interruptible():
        instance = generate(gpus, jobs, types, fragmentation=share, seed=seed, fabric=fabric,
                            faulty_gpus=faulty, size_scale=size_scale)
        text = render_instance(instance, out_fmt)
    write_atomic(out, text)
    nodes = [n for c in instance.clusters for n in c.nodes]
    total_gpus = sum(n.gpu_count for n in nodes)
    held = sum(len(n.allocated) for n in nodes)
    # two different measures: --load is the share of GPUs held by running jobs (what the
    # scale bench and the README call "fragmentation 0.6"); instances show's fragmentation
    # is the share of the free GPUs not on a whole free node (1.00: no node is wholly free)
    print(f"wrote {out}: {len(nodes):,} nodes, {total_gpus:,} GPUs "
          f"({held / max(1, total_gpus):.2f} held by running jobs (--load), "
          f"{sum(n.free_count for n in nodes):,} free, of them "
          f"{free_fragmentation(nodes):.2f} off whole free nodes (instances show's "
          f"fragmentation)), {len(instance.jobs):,} pending jobs")


@instances_app.command("import")
@one_line_errors
def import_command(
    files: Annotated[list[str], typer.Argument(
        metavar="FILE...", help="one node per file (nvidia-smi, nccl-xml, dgx1), HyperNode "
        "YAML, an Alibaba machine list (CSV), or kubectl get nodes/pods -o json and a Kueue "
        "Topology (kubernetes); - reads standard input")],
    source: Annotated[ImportFormat, typer.Option(
        "--from", metavar="FORMAT", case_sensitive=False,
        help="what the files are: nvidia-smi, nccl-xml, dgx1, hypernode, alibaba, "
        "kubernetes, slurm, ibnetdiscover")],
    output: Annotated[str | None, typer.Option(
        "--output", "-o", help="Cluster file to write (default: stdout)")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", help="cluster name (default: from the first file)")] = None,
    count: Annotated[int, typer.Option(
        "--count", help="nodes made from each node file (nvidia-smi, nccl-xml, dgx1)")] = 1,
    gpu_type: Annotated[list[str] | None, typer.Option(
        "--gpu-type", help="GPU type when the file does not say it (nvidia-smi guesses from "
        "NVLink counts; HyperNode files need it for the nodes they name); once for every "
        "file or once per file, in file order")] = None,
    gpu_count: Annotated[list[int] | None, typer.Option(
        "--gpu-count", help="nccl-xml: GPUs of a node whose file lists none (AWS p5, g5); "
        "once for every file or once per file")] = None,
    gpus_per_node: Annotated[int, typer.Option(
        "--gpus-per-node", help="GPUs of each node a HyperNode file or a Slurm "
        "topology.conf names (a gres.conf or scontrol show nodes says its own)")] = 8,
    nodes_from: Annotated[str | None, typer.Option(
        "--nodes-from", help="HyperNode import: take the nodes (and labels) from this Cluster "
        "or Instance file instead")] = None,
    nodes_per_leaf: Annotated[int, typer.Option(
        "--nodes-per-leaf", help="node files: nodes per leaf switch of the fat-tree")] = 8,
    node_gbps: Annotated[float, typer.Option(
        "--node-gbps", help="node-to-leaf and uplink Gb/s where the files do not say")] = 400.0,
    fmt: Annotated[DocFormat | None, typer.Option(
        "--format", "-f", help="yaml or json (default: from the output suffix)")] = None,
) -> None:
    """Build a Cluster file from the formats real clusters are described in."""
    from hyperplace.instances.importing import import_cluster

    out_fmt = file_format(fmt.value if fmt else None, output)
    text, summary = import_cluster(
        source.value, files, name=name, count=count, gpu_type=gpu_type, gpu_count=gpu_count,
        gpus_per_node=gpus_per_node, nodes_from=nodes_from, nodes_per_leaf=nodes_per_leaf,
        node_gbps=node_gbps, fmt=out_fmt)
    if output is None:
        sys.stdout.write(text)
        print(summary, file=sys.stderr)
        return
    write_output(output, text, summary)


def validate_command(
    files: Annotated[list[str], typer.Argument(help="Instance, Cluster, job or HyperNode files")],
) -> None:
    """Check files: one line each, "FILE: ok (kind, summary)"; stops at the first bad one.

    Docstrings here are the command's help: plain words, no reStructuredText markup."""
    from hyperplace.instances import validate_file

    for f in files:
        try:
            summary = validate_file(f)
        except InputError as exc:
            fail(exc)
        print(f"{f}: ok ({summary})")


def register(app: typer.Typer) -> None:
    app.add_typer(instances_app, name="instances")
    app.command("validate")(validate_command)
