"""Pictures of a cluster and a plan, as SVG written directly (no plotting dependency).

What the picture shows, per cluster: the spine domains (tier 2) as bands, the leaf domains
(tier 1, nodes one switch hop apart) inside them as boxes, and in each leaf box one row per
node with one cell per GPU, coloured by state:

* a job this plan admits: one colour per job (named in the legend);
* allocated to a job already running: grey;
* faulty: red, crossed;
* free: white.

Jobs the plan leaves pending are listed beside the picture with their first reason. Up to
:data:`DETAIL_NODES` nodes every GPU is drawn; beyond, each leaf domain is one bar whose
segments give its GPUs by state and by admitted job, so 2,000 nodes still read as a fabric.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from html import escape

from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan

#: Most nodes drawn GPU by GPU; larger clusters are drawn one bar per leaf domain.
DETAIL_NODES = 256

CELL, GAP = 11, 2
FREE, RUNNING, FAULTY, FRAME = "#ffffff", "#9e9e9e", "#e53935", "#455a64"
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173", "#3182bd",
           "#e6550d", "#31a354", "#756bb1", "#636363")
FONT = "font-family='DejaVu Sans, Arial, sans-serif'"


@dataclass
class _Svg:
    width: float = 0
    height: float = 0
    parts: list[str] = field(default_factory=list)

    def rect(self, x: float, y: float, w: float, h: float, fill: str, stroke: str = FRAME,
             title: str | None = None, width: float = 0.6, rx: float = 0) -> None:
        tip = f"<title>{escape(title)}</title>" if title else ""
        self.parts.append(f"<rect x='{x:.1f}' y='{y:.1f}' width='{w:.1f}' height='{h:.1f}' "
                          f"rx='{rx}' fill='{fill}' stroke='{stroke}' stroke-width='{width}'>"
                          f"{tip}</rect>")
        self.width = max(self.width, x + w)
        self.height = max(self.height, y + h)

    def text(self, x: float, y: float, s: str, size: int = 10, weight: str = "normal",
             anchor: str = "start", fill: str = "#212121") -> None:
        self.parts.append(f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' {FONT} "
                          f"font-weight='{weight}' text-anchor='{anchor}' fill='{fill}'>"
                          f"{escape(s)}</text>")
        self.width = max(self.width, x + (len(s) * size * 0.6 if anchor == "start" else 0))
        self.height = max(self.height, y + 4)

    def cross(self, x: float, y: float, w: float) -> None:
        self.parts.append(f"<path d='M{x:.1f},{y:.1f} l{w:.1f},{w:.1f} M{x + w:.1f},{y:.1f} "
                          f"l{-w:.1f},{w:.1f}' stroke='#ffffff' stroke-width='1.2'/>")

    def render(self) -> str:
        w, h = int(self.width + 12), int(self.height + 12)
        return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{w}' height='{h}' "
                f"viewBox='0 0 {w} {h}'><rect width='100%' height='100%' fill='#fafafa'/>"
                + "".join(self.parts) + "</svg>\n")


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def _spine_title(spine: str, leaves: list[tuple[str, list[str]]]) -> str:
    """A spine domain named by what it holds: ``spine domain (leaves leaf000-leaf003)``.

    Domain ids are built from one member switch (``t3:leaf000``), which as a title read as
    if the spine domain were a leaf; the leaves it spans say what it is."""
    if spine.startswith("("):  # "(no spine)"
        return spine
    names = [leaf.split(":", 1)[-1] for leaf, _ in leaves]
    span = names[0] if len(names) == 1 else f"{names[0]}-{names[-1]}"
    return f"spine domain over {_short(span, 40)}"


def _tail(s: str, n: int) -> str:
    """Node names differ at the end (``dgx-b200-0``, ``dgx-b200-1``): keep the end."""
    return s if len(s) <= n else "…" + s[-(n - 1):]


def _job_colours(plan: PlacementPlan | None) -> dict[str, str]:
    jobs = plan.admitted if plan is not None else []
    return {j: PALETTE[i % len(PALETTE)] for i, j in enumerate(jobs)}


def _placed(plan: PlacementPlan | None) -> dict[tuple[str, int], str]:
    out: dict[tuple[str, int], str] = {}
    for p in plan.placements if plan is not None else []:
        for g in p.gpus:
            out[(g.node, g.gpu)] = p.job
    return out


def _domains(cluster) -> list[tuple[str, list[tuple[str, list[str]]]]]:  # noqa: ANN001
    """[(spine domain, [(leaf domain, [node names])])] in node order."""
    fabric = cluster.network
    order = {n.name: i for i, n in enumerate(cluster.nodes)}
    leaves: dict[str, list[str]] = {}
    for n in cluster.nodes:
        leaves.setdefault(fabric.node_domain(n.name, 1) or f"(no switch) {n.name}",
                          []).append(n.name)
    spines: dict[str, list[tuple[str, list[str]]]] = {}
    for leaf, nodes in leaves.items():
        spine = fabric.node_domain(nodes[0], 3) or "(no spine)"
        spines.setdefault(spine, []).append((leaf, nodes))
    out = [(s, sorted(ls, key=lambda x: order[x[1][0]])) for s, ls in spines.items()]
    return sorted(out, key=lambda x: order[x[1][0][1][0]])


def _rows(cluster, nodes: list[str]) -> list[tuple[str, str | None]]:  # noqa: ANN001
    """The rows of a leaf box: (node, None) per node, and (first tray, domain) before the
    trays of each multi-node NVLink domain (an NVL72 rack: its header and frame)."""
    net = cluster.network
    out: list[tuple[str, str | None]] = []
    seen: set[str] = set()
    for name in nodes:
        d = net.nvlink_domain_of(name)
        if d is not None and d.name not in seen:
            seen.add(d.name)
            out.append((name, d.name))
        out.append((name, None))
    return out


def _rack_frame(svg: _Svg, cluster, rack: str, nodes: list[str], x: float,  # noqa: ANN001
                y: float, w: float) -> None:
    """An NVLink domain's header row and a frame around its trays in this leaf box."""
    net = cluster.network
    d = next(d for d in net.nvlink_domains if d.name == rack)
    trays = [n for n in nodes if net.nvlink_domain_of(n) is d]
    first = cluster.node_by_name[d.nodes[0]]
    gbps = f"{d.gbps_per_gpu:g} GB/s per GPU" if d.gbps_per_gpu is not None else "NVLink"
    what = d.system or "NVLink domain"
    extra = f", {d.switch_trays} NVLink switch trays" if d.switch_trays else ""
    spares = f", {d.spare_trays} spare" if d.spare_trays else ""
    full = (f"NVLink domain {rack}: {what}, {len(d.nodes)} trays x {first.gpu_count} GPUs, "
            f"{gbps}{extra}{spares}")
    svg.parts.append(f"<rect x='{x + 2:.1f}' y='{y - 1:.1f}' width='{w - 4:.1f}' "
                     f"height='{(len(trays) + 1) * (CELL + GAP) + 1:.1f}' rx='3' "
                     f"fill='none' stroke='#7cb342' stroke-width='1.4'><title>{escape(full)}"
                     "</title></rect>")
    svg.text(x + 4, y + CELL - 2, _short(f"rack {rack} · {what} · {len(d.nodes)} trays",
                                         int(w / 4.8)), 8, "bold", fill="#33691e")


def _legend(svg: _Svg, x: float, y: float, plan: PlacementPlan | None,
            colours: dict[str, str]) -> None:
    svg.text(x, y, "GPU state", 12, "bold")
    y += 16
    states = [(FREE, "free"), (RUNNING, "allocated (running before this round)"),
              (FAULTY, "faulty")]
    for fill, label in states:
        svg.rect(x, y - 9, CELL, CELL, fill)
        if fill == FAULTY:
            svg.cross(x + 2, y - 7, CELL - 4)
        svg.text(x + CELL + 6, y, label)
        y += 15
    if plan is None:
        return
    y += 8
    svg.text(x, y, f"admitted by this plan ({len(plan.jobs)})", 12, "bold")
    y += 16
    gpus = {j.job: j.gpus for j in plan.jobs}
    biggest = sorted(colours, key=lambda j: -gpus.get(j, 0))[:40]  # the largest jobs first
    for job, colour in ((j, colours[j]) for j in biggest):
        svg.rect(x, y - 9, CELL, CELL, colour)
        svg.text(x + CELL + 6, y, f"{_short(job, 34)} ({gpus.get(job, 0)} GPUs)")
        y += 15
    if len(colours) > 40:
        svg.text(x, y, f"… and {len(colours) - 40} more")
        y += 15
    y += 8
    svg.text(x, y, f"pending ({len(plan.pending)})", 12, "bold")
    y += 16
    for pj in plan.pending[:30]:
        svg.text(x, y, _short(pj.job, 40), weight="bold")
        y += 13
        lines = textwrap.wrap(pj.reasons[0] if pj.reasons else "", 52)
        if len(lines) > 4:
            lines = [*lines[:3], _short(lines[3], 50) + " …"]
        for line in lines:
            svg.text(x + 8, y, line, size=9, fill="#546e7a")
            y += 12
        y += 3
    if len(plan.pending) > 30:
        svg.text(x, y, f"… and {len(plan.pending) - 30} more")


def _detailed(svg: _Svg, instance: Instance, plan: PlacementPlan | None,
              colours: dict[str, str], top: float) -> float:
    placed = _placed(plan)
    y = top
    for cluster in instance.clusters:
        svg.text(8, y + 12, f"cluster {cluster.name}: {len(cluster.nodes)} nodes, "
                 f"{cluster.gpu_count} GPUs, fabric {cluster.network.kind}", 13, "bold")
        y += 24
        label_chars = min(24, max((len(n.name) for n in cluster.nodes), default=8))
        row_label = 10 + label_chars * 5.6
        for spine, leaves in _domains(cluster):
            gpus = max((n.gpu_count for n in cluster.nodes), default=8)
            leaf_w = row_label + gpus * (CELL + GAP) + 12
            per_row = max(1, min(len(leaves), 6))
            rows = [leaves[i:i + per_row] for i in range(0, len(leaves), per_row)]
            band_top = y
            y += 18
            for row in rows:
                height = max(len(_rows(cluster, nodes)) for _, nodes in row) * (CELL + GAP) + 24
                for k, (leaf, nodes) in enumerate(row):
                    x = 14 + k * (leaf_w + 8)
                    svg.rect(x, y, leaf_w, height, "#eceff1", "#90a4ae", rx=3)
                    svg.text(x + 4, y + 12, f"leaf {_short(leaf.split(':', 1)[-1], 22)}", 9,
                             "bold")
                    for r, (name, rack) in enumerate(_rows(cluster, nodes)):
                        if rack is not None:  # an NVLink domain: a frame over its trays
                            _rack_frame(svg, cluster, rack, nodes, x, y + 18 + r * (CELL + GAP),
                                        leaf_w)
                            continue
                        node = cluster.node_by_name[name]
                        ny = y + 18 + r * (CELL + GAP)
                        svg.text(x + 4, ny + CELL - 2, _tail(name, label_chars), 9)
                        for g in range(node.gpu_count):
                            gx = x + row_label + g * (CELL + GAP)
                            job = placed.get((name, g))
                            if g in node.faulty:
                                fill, tip = FAULTY, f"{name} GPU {g}: faulty"
                            elif job is not None:
                                fill, tip = colours[job], f"{name} GPU {g}: {job} (this plan)"
                            elif g in node.allocated:
                                fill = RUNNING
                                tip = f"{name} GPU {g}: running {node.allocated[g]}"
                            else:
                                fill, tip = FREE, f"{name} GPU {g}: free"
                            svg.rect(gx, ny, CELL, CELL, fill, title=tip)
                            if fill == FAULTY:
                                svg.cross(gx + 2, ny + 2, CELL - 4)
                y += height + 8
            svg.parts.insert(0, f"<rect x='6' y='{band_top:.1f}' width='{per_row * (leaf_w + 8) + 14}' "
                                f"height='{y - band_top:.1f}' rx='4' fill='#e3f2fd' "
                                f"stroke='#64b5f6'/>")
            svg.text(10, band_top + 13, f"{_spine_title(spine, leaves)} ({len(leaves)} leaves)",
                     10, "bold", fill="#1565c0")
            y += 10
    return y


def _aggregated(svg: _Svg, instance: Instance, plan: PlacementPlan | None,
                colours: dict[str, str], top: float) -> float:
    placed = _placed(plan)
    y = top
    bar_w = 420.0
    for cluster in instance.clusters:
        svg.text(8, y + 12, f"cluster {cluster.name}: {len(cluster.nodes):,} nodes, "
                 f"{cluster.gpu_count:,} GPUs, fabric {cluster.network.kind} (one bar per "
                 "leaf domain)", 13, "bold")
        y += 24
        for spine, leaves in _domains(cluster):
            svg.text(10, y + 11, f"{_spine_title(spine, leaves)}: "
                     f"{len(leaves)} leaves", 10, "bold", fill="#1565c0")
            y += 16
            for leaf, nodes in leaves:
                counts: dict[str, int] = {}
                total = 0
                for name in nodes:
                    node = cluster.node_by_name[name]
                    total += node.gpu_count
                    for g in range(node.gpu_count):
                        job = placed.get((name, g))
                        key = ("faulty" if g in node.faulty else job if job is not None
                               else "running" if g in node.allocated else "free")
                        counts[key] = counts.get(key, 0) + 1
                svg.text(14, y + 8, _short(leaf.split(":", 1)[-1], 14), 8)
                x = 90.0
                order = [k for k in counts if k not in ("free", "running", "faulty")]
                for key in [*order, "running", "faulty", "free"]:
                    if key not in counts:
                        continue
                    w = bar_w * counts[key] / max(total, 1)
                    fill = {"free": FREE, "running": RUNNING, "faulty": FAULTY}.get(
                        key, colours.get(key, "#000"))
                    svg.rect(x, y, w, 9, fill, stroke="none" if w < 2 else FRAME, width=0.3,
                             title=f"{leaf}: {key} {counts[key]} GPUs")
                    x += w
                svg.rect(90, y, bar_w, 9, "none", width=0.6)
                svg.text(90 + bar_w + 6, y + 8, f"{counts.get('free', 0)}/{total} free", 8)
                y += 11
            y += 8
    return y


def draw_svg(instance: Instance, plan: PlacementPlan | None = None) -> str:
    """The instance (and, given a plan, what it places and leaves pending) as SVG text."""
    svg = _Svg()
    colours = _job_colours(plan)
    title = f"hyperplace: {instance.name}"
    if plan is not None:
        title += (f" - plan {plan.status.value} ({plan.solver}), {len(plan.jobs)} admitted, "
                  f"{len(plan.pending)} pending")
    svg.text(8, 18, title, 15, "bold")
    nodes = sum(len(c.nodes) for c in instance.clusters)
    if nodes <= DETAIL_NODES:
        _detailed(svg, instance, plan, colours, 28)
    else:
        _aggregated(svg, instance, plan, colours, 28)
    _legend(svg, svg.width + 24, 48, plan, colours)
    return svg.render()
