"""Slurm topology files and InfiniBand discovery dumps -> a cluster's fabric.

Slurm ``topology.conf`` (slurm.schedmd.com/topology.conf.html)
    ``topology/tree``: ``SwitchName=s Nodes=<hostlist>`` (a leaf) and ``SwitchName=s
    Switches=<hostlist>`` (a switch above others); a switch's tier is 1 for leaves and one
    more than its highest child. ``topology/block``: ``BlockName=b Nodes=<hostlist>``
    (``BlockSizes=`` ignored): each block is one NVLink domain (Topograph writes NVL72 racks
    so), read by :func:`hyperplace.instances.importers.nvlink.domains_from_block_conf`; a file
    may hold both. Topograph's Slurm outputs are these files.
``gres.conf`` with ``Links=``
    ``NodeName=<hostlist> Name=gpu [Type=t] File=/dev/nvidia<i> Links=a,b,...``: one line per
    GPU; ``Links`` counts the NVLinks from that GPU to each GPU of the node (``-1`` itself),
    so the node's NVLink pairs are the counts times the type's per-link figure.
``scontrol show nodes`` (``-o``, one line per node, or the multi-line form)
    ``NodeName``, ``Gres=gpu[:type]:N`` (the GPUs; the type through the catalog, else a
    feature naming a GPU type, ``ActiveFeatures=skylake,v100``), ``GresUsed=gpu:..(IDX:0-3)``
    (the GPUs in use, by index) or ``AllocTRES=..gres/gpu=N`` (a count: the lowest indices),
    held by ``slurm-allocated``; a node whose ``State`` is ``DOWN``/``DRAIN``/``FAIL`` has its
    GPUs faulty.
``ibnetdiscover`` output
    ``Switch <ports> "S-<guid>" # "<description>"`` blocks and ``Ca <ports> "H-<guid>" #
    "<host> <hca>"`` blocks with one line per connected port: ``[p] "S-..."[q] ... # "desc"
    lid L 4xNDR``. Hosts are the first word of a CA's description (CAs that are a switch's
    SHARP "Aggregation Node", or whose description is still the adapter's model string, are
    left out and counted; so is the fabric manager's server, a host named ``*ufm*``); a switch linked to a
    host is a leaf (tier 1), a switch linked only to leaves a spine (tier 2), above that
    core (tier 3). Each cable is a link at its width x rate (``4xNDR`` = 400 Gb/s, HDR 200,
    EDR 100); a host's HCAs on different leaves (rail-optimised fabrics) give it one link per
    leaf, the cables counted.

The files say where nodes are, not what GPUs they hold: the GPUs come from ``gpu_type`` and
``gpus_per_node`` (``--gpu-type``, ``--gpus-per-node``; the node label
``hyperplace.io/assumed`` then names ``gpu-count``), or, for the nodes a ``gres.conf`` or
``scontrol show nodes`` describes, from its lines (count and ``Type``). topology.conf's
``LinkSpeed`` is a relative figure Slurm itself does not use: links are taken at
``node_gbps`` (``--node-gbps``), and the notes say so.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from hyperplace.errors import InputError, known_words
from hyperplace.instances.importers.nvlink import expand_hostlist
from hyperplace.models.cluster import FabricSpec
from hyperplace.models.fabric import Link, Switch
from hyperplace.models.gpu import GPUCatalog, default_catalog
from hyperplace.models.node import GPUPair, Node, NVLinkTopology

RATE_GBPS = {"SDR": 10, "DDR": 20, "QDR": 40, "FDR": 56, "EDR": 100, "HDR": 200, "NDR": 400,
             "XDR": 800}  # per 4x link (IBTA generations)
MAX_TIER = 4


def _fields(line: str) -> dict[str, str]:
    return {k.lower(): v for k, v in (p.split("=", 1) for p in line.split() if "=" in p)}


@dataclass
class Tree:
    switches: dict[str, int] = field(default_factory=dict)       # name -> tier
    links: list[tuple[str, str]] = field(default_factory=list)   # child -> parent
    nodes: list[str] = field(default_factory=list)


def parse_topology_conf(text: str, source: str) -> Tree:
    """The tree part of a ``topology.conf`` (block lines are read by the NVLink reader)."""
    children: dict[str, list[str]] = {}
    leaves: dict[str, list[str]] = {}
    defined: list[str] = []  # switch names in the file's order (what is written keeps it)
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or not line.lower().startswith("switchname="):
            continue
        f = _fields(line)
        name = f.get("switchname", "")
        where = f"line {lineno}"
        if not name:
            raise InputError("SwitchName needs a name", source=source, path=where)
        if name in children or name in leaves:
            raise InputError(f"switch {name!r} is defined twice", source=source, path=where)
        defined.append(name)
        if "nodes" in f:
            leaves[name] = expand_hostlist(f["nodes"], source, f"{where}: Nodes")
        if "switches" in f:
            children[name] = expand_hostlist(f["switches"], source, f"{where}: Switches")
        if "nodes" not in f and "switches" not in f:
            raise InputError(f"switch {name!r} lists neither Nodes= nor Switches=",
                             source=source, path=where)
    tree = Tree()
    if not leaves and not children:
        return tree
    known = set(children) | set(leaves)
    for parent, kids in children.items():
        for k in kids:
            if k not in known:
                raise InputError(f"switch {parent!r} names switch {k!r}, which is not defined",
                                 source=source, path=f"SwitchName={parent}: Switches")

    def tier(s: str, depth: int = 0) -> int:
        if depth > 16:
            raise InputError(f"switch {s!r} is its own ancestor", source=source)
        below = [tier(k, depth + 1) for k in children.get(s, [])]
        return max([1 if s in leaves else 0, *(t + 1 for t in below)])

    seen_nodes: dict[str, str] = {}
    for s in defined:  # not the set: its order changes from one process to the next
        t = tier(s)
        if t > MAX_TIER:
            raise InputError(f"switch {s!r} is at tier {t}; hyperplace models at most "
                             f"{MAX_TIER} tiers", source=source)
        tree.switches[s] = t
    for parent, kids in children.items():
        tree.links += [(k, parent) for k in kids]
    for leaf, nodes in leaves.items():
        for n in nodes:
            if n in seen_nodes:
                raise InputError(f"node {n!r} is under two leaves ({seen_nodes[n]!r} and "
                                 f"{leaf!r})", source=source, path=f"SwitchName={leaf}: Nodes")
            seen_nodes[n] = leaf
            tree.links.append((n, leaf))
            tree.nodes.append(n)
    return tree


@dataclass
class GresNode:
    gpus: int
    gpu_type: str | None
    links: dict[int, list[int]]  # GPU index -> NVLink count to every GPU


def parse_gres_conf(text: str, source: str) -> dict[str, GresNode]:
    """node -> its GPUs from ``gres.conf`` ``Name=gpu`` lines (``Links=`` optional)."""
    out: dict[str, GresNode] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        f = _fields(line)
        if f.get("name") != "gpu":
            continue
        where = f"line {lineno}"
        if "nodename" not in f:
            raise InputError("a gpu line needs NodeName= (a per-node gres.conf: give it with "
                             "--name of the node)", source=source, path=where)
        files = f.get("file", "")
        m = re.fullmatch(r"(.*?)(\d+)", files) or re.fullmatch(r"(.*?)\[([0-9,\-]+)\]", files)
        if not m:
            raise InputError(f"File={files!r}: expected /dev/nvidia<N> or /dev/nvidia[0-7]",
                             source=source, path=where)
        indices = [int(x.removeprefix(m.group(1))) for x in expand_hostlist(files, source, where)]
        links = None
        if "links" in f:
            try:
                links = [int(x) for x in f["links"].split(",")]
            except ValueError:
                raise InputError(f"Links={f['links']!r}: expected integers", source=source,
                                 path=where) from None
        for node in expand_hostlist(f["nodename"], source, f"{where}: NodeName"):
            g = out.setdefault(node, GresNode(0, f.get("type"), {}))
            g.gpus = max(g.gpus, max(indices) + 1)
            if links is not None:
                if len(indices) != 1:
                    raise InputError("Links= goes with one File= device per line",
                                     source=source, path=where)
                g.links[indices[0]] = links
    return out


def gres_pairs(g: GresNode, per_link: float, node: str, source: str) -> list[GPUPair]:
    pairs = []
    for i, row in sorted(g.links.items()):
        if len(row) != g.gpus:
            raise InputError(f"node {node!r} GPU {i}: Links has {len(row)} entries for "
                             f"{g.gpus} GPUs", source=source)
        for j, count in enumerate(row):
            if j > i and count > 0:
                pairs.append(GPUPair(a=i, b=j, gigabytes_per_second=count * per_link))
    return pairs


@dataclass
class ScontrolNode:
    name: str
    gpus: int
    gpu_type: str | None
    used: list[int]
    down: bool


_FIELD = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")


def parse_scontrol_nodes(text: str, source: str, catalog: GPUCatalog | None = None
                         ) -> list[ScontrolNode]:
    """Nodes of ``scontrol show nodes`` output (module docstring)."""
    cat = catalog or default_catalog()
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    records = [r for r in re.split(r"(?=\bNodeName=)", body) if r.strip().startswith("NodeName=")]
    out = []
    for k, rec in enumerate(records):
        f = dict(_FIELD.findall(" ".join(rec.split())))
        name = f.get("NodeName", "")
        where = f"node {k + 1} ({name})"
        gres = f.get("Gres", "(null)")
        gpus, gtype = 0, None
        for part in re.split(r",(?![^(]*\))", gres):
            m = re.fullmatch(r"gpu(?::([^:()]+))?:(\d+)(?:\(.*\))?", part.strip())
            if m:
                gpus += int(m.group(2))
                gtype = gtype or m.group(1)
        if gpus == 0:
            continue
        if gtype is None or cat.find(gtype) is None:
            for feat in (f.get("ActiveFeatures") or f.get("AvailableFeatures") or "").split(","):
                if feat and cat.find(feat) is not None:
                    gtype = feat
                    break
        used: list[int] = []
        m = re.search(r"IDX:([0-9,\-]+)", f.get("GresUsed", ""))
        if m:
            for r in m.group(1).split(","):
                lo, _, hi = r.partition("-")
                used += range(int(lo), int(hi or lo) + 1)
        else:
            m = re.search(r"gres/gpu=(\d+)", f.get("AllocTRES", ""))
            used = list(range(int(m.group(1)))) if m else []
        if any(g >= gpus for g in used):
            raise InputError(f"GPUs in use {used} beyond its {gpus} GPUs", source=source,
                             path=where)
        state = f.get("State", "").upper()
        out.append(ScontrolNode(name, gpus, gtype, used,
                                any(s in state for s in ("DOWN", "DRAIN", "FAIL"))))
    if not out:
        raise InputError("no node with a gpu Gres: not `scontrol show nodes` output of GPU "
                         "nodes", source=source)
    return out


@dataclass
class IBFabric:
    hosts: list[str]
    switches: dict[str, int]          # name -> tier
    links: dict[tuple[str, str], tuple[float, int]]  # (a, b) -> (gbps per cable, cables)
    names: dict[str, str]             # switch guid -> name
    unnamed: int = 0                  # HCAs without a host name (left out)


_BLOCK = re.compile(r'^(Switch|Ca)\s+\d+\s+"([SH]-[0-9a-fA-F]+)"\s*(?:#\s*"([^"]*)")?')
_PORT = re.compile(r'^\[(\d+)\](?:\([0-9a-fA-F]+\))?\s+"([SH]-[0-9a-fA-F]+)"\[(\d+)\]'
                   r'(?:\([0-9a-fA-F]+\))?\s*(?:#\s*"([^"]*)")?.*?\b(\d+)x([A-Z]+)\b')


def parse_ibnetdiscover(text: str, source: str) -> IBFabric:
    """Hosts, switches (tiered) and cables of an ``ibnetdiscover`` dump (module docstring)."""
    kind_of: dict[str, str] = {}
    desc: dict[str, str] = {}
    cables: set[tuple[str, int, str, int, float]] = set()  # each cable once (both ends list it)
    current: str | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = _BLOCK.match(line)
        if m:
            kind, current = m.group(1), m.group(2)
            kind_of[current] = kind
            desc[current] = m.group(3) or current
            continue
        m = _PORT.match(line)
        if m and current is not None:
            width, rate = int(m.group(5)), m.group(6)
            if rate not in RATE_GBPS:
                raise InputError(f"unknown link rate {rate!r}", source=source,
                                 path=f"line {lineno}")
            gbps = RATE_GBPS[rate] * width / 4
            peer = m.group(2)
            if m.group(4) and peer not in desc:
                desc[peer] = m.group(4)
            kind_of.setdefault(peer, "Switch" if peer.startswith("S-") else "Ca")
            ends = sorted([(current, int(m.group(1))), (peer, int(m.group(3)))])
            cables.add((ends[0][0], ends[0][1], ends[1][0], ends[1][1], gbps))
    if not cables:
        raise InputError("no switch or HCA port lines: not ibnetdiscover output", source=source)

    def host_of(guid: str) -> str:
        return desc[guid].split()[0] if desc.get(guid) else guid

    def switch_name(guid: str) -> str:
        d = desc.get(guid, guid)
        d = d.split(";", 1)[1] if ";" in d else d
        return re.sub(r"[^A-Za-z0-9._-]+", "-", d.split(":")[0]).strip("-") or guid

    # not hosts: the switches' own SHARP aggregation nodes, and HCAs whose node description
    # was never set (the adapter's model string, "MT4129 ConnectX7 Mellanox Technologies")
    skipped = {g for g, k in kind_of.items() if k == "Ca" and (
        "Aggregation Node" in desc.get(g, "") or desc.get(g, "").startswith("MT")
        or desc.get(g, "").startswith("Mellanox"))}
    unnamed = sum(1 for g in skipped if "Aggregation Node" not in desc.get(g, ""))
    cables = {c for c in cables if c[0] not in skipped and c[2] not in skipped}
    kind_of = {g: k for g, k in kind_of.items() if g not in skipped}
    names = {g: switch_name(g) for g, k in kind_of.items() if k == "Switch"}
    if len(set(names.values())) < len(names):  # descriptions repeat: fall back to GUIDs
        names = {g: g for g in names}
    by_pair: dict[tuple[str, str], list[float]] = defaultdict(list)
    for a, _pa, b, _pb, gbps in sorted(cables):  # not the set's order: it changes per process
        ea = names[a] if kind_of.get(a) == "Switch" else host_of(a)
        eb = names[b] if kind_of.get(b) == "Switch" else host_of(b)
        if ea != eb:
            by_pair[(min(ea, eb), max(ea, eb))].append(gbps)
    hosts = sorted({host_of(g) for g, k in kind_of.items() if k == "Ca"})
    # the fabric manager's own server (NVIDIA UFM) is on the fabric but holds no GPUs
    managers = {h for h in hosts if "ufm" in h.lower()}
    hosts = [h for h in hosts if h not in managers]
    host_set = set(hosts)
    sw = set(names.values())
    tiers = {s: 1 for pair in by_pair for s in pair
             if s in sw and any(o in host_set for o in pair)}
    for t in (2, 3, 4):
        for (a, b) in by_pair:
            for x, o in ((a, b), (b, a)):
                if x in sw and x not in tiers and tiers.get(o) == t - 1:
                    tiers[x] = t
    for x in sorted(sw - set(tiers)):
        tiers[x] = MAX_TIER
    links = {pair: (max(rates), len(rates)) for pair, rates in by_pair.items()
             if not set(pair) & managers}
    return IBFabric(hosts=hosts, switches=tiers, links=links, names=names, unnamed=unnamed)


def import_slurm(topology_texts: list[tuple[str, str]], *, gres: list[tuple[str, str]] = (),
                 ib: list[tuple[str, str]] = (), scontrol: list[tuple[str, str]] = (),
                 gpu_type: str | None = None,
                 gpus_per_node: int = 8, node_gbps: float = 400.0,
                 catalog: GPUCatalog | None = None) -> tuple[list[Node], FabricSpec, list[str]]:
    """(nodes, fabric, notes) from topology.conf texts, gres.conf texts and ibnetdiscover
    dumps, each ``(text, source)``."""
    from hyperplace.instances.importers.nvlink import domains_from_block_conf

    cat = catalog or default_catalog()
    notes: list[str] = []
    switches: dict[str, int] = {}
    links: list[Link] = []
    node_names: list[str] = []
    blocks = []
    trees = [(parse_topology_conf(text, src), text, src) for text, src in topology_texts]
    if any(tree.links for tree, _, _ in trees):
        notes.append(f"link speeds are not in topology.conf (its LinkSpeed is a relative "
                     f"figure): every link is taken at {node_gbps:g} Gb/s (--node-gbps)")
    for tree, text, src in trees:
        switches.update(tree.switches)
        for a, b in tree.links:
            links.append(Link(a=a, b=b, gbps=node_gbps))
        node_names += [n for n in tree.nodes if n not in node_names]
        if re.search(r"(?im)^\s*blockname=", text):
            blocks.append((text, src))
    for text, src in ib:
        fab = parse_ibnetdiscover(text, src)
        switches.update(fab.switches)
        for (a, b), (gbps, count) in fab.links.items():
            links.append(Link(a=a, b=b, gbps=gbps, count=count))
        node_names += [h for h in fab.hosts if h not in node_names]
        notes.append(f"{src}: {len(fab.hosts)} hosts, "
                     f"{sum(1 for t in fab.switches.values() if t == 1)} leaf and "
                     f"{sum(1 for t in fab.switches.values() if t > 1)} spine/core switches"
                     + (f"; {fab.unnamed} HCAs without a host name left out" if fab.unnamed
                        else ""))
    gres_nodes: dict[str, GresNode] = {}
    for text, src in gres:
        gres_nodes.update(parse_gres_conf(text, src))
    for name in gres_nodes:
        if name not in node_names:
            node_names.append(name)
    sc_nodes: dict[str, ScontrolNode] = {}
    for text, src in scontrol:
        for n in parse_scontrol_nodes(text, src, cat):
            sc_nodes[n.name] = n
            if n.name not in node_names:
                node_names.append(n.name)
    if blocks and not node_names:
        for text, src in blocks:
            for d in domains_from_block_conf(text, src):
                node_names += [n for n in d.nodes if n not in node_names]
    if not node_names:
        raise InputError("no node: the files hold no SwitchName=.. Nodes=, BlockName=, gres.conf "
                         "gpu line or ibnetdiscover host", source=(topology_texts or ib or gres)[0][1])
    nodes = []
    family_sizes: dict[str, list[str]] = {}  # GPU family -> its memory sizes (catalog names)
    vague_noted: set[str] = set()  # types whose family-name assumption is noted already
    for name in node_names:
        g = gres_nodes.get(name)
        sc = sc_nodes.get(name)
        tname = gpu_type or (g.gpu_type if g else None) or (sc.gpu_type if sc else None)
        if tname is None:
            raise InputError(f"node {name!r}: the files do not say its GPU type: give --gpu-type",
                             path="--gpu-type")
        t = cat.find(tname)
        if t is None:
            raise InputError(f"unknown GPU type {tname!r} ({known_words(tname, cat.names())})",
                             path="--gpu-type")
        count = g.gpus if g else sc.gpus if sc else gpus_per_node
        pairs = gres_pairs(g, t.nvlink_per_link_gbps, name, "gres.conf") if g and g.links else []
        kind = NVLinkTopology.EXPLICIT if pairs else (
            NVLinkTopology.NVSWITCH if t.nvlink_gbps > 0 and count in (4, 8) else NVLinkTopology.PCIE)
        # a file's Type naming a family of several memory sizes (gres.conf Type=a100): the
        # size is the catalog's default for the family, an assumption to name
        if t.family not in family_sizes:
            family_sizes[t.family] = sorted(c.name for c in cat if c.family == t.family)
        sizes = family_sizes[t.family]
        vague = gpu_type is None and len(sizes) > 1 and tname.strip().lower() != t.name.lower()
        if vague and t.name not in vague_noted:
            vague_noted.add(t.name)
            notes.append(f"GPU type {tname!r} names the {t.family} family: taken as {t.name} "
                         f"(of {', '.join(sizes)}; --gpu-type chooses)")
        assumed = [*([] if (g and g.links) or t.nvlink_gbps == 0 else ["nvlink"]),
                   *([] if g or sc else ["gpu-count"]), *(["gpu-memory"] if vague else [])]
        labels = {"hyperplace.io/assumed": ",".join(assumed)} if assumed else {}
        faulty = list(range(count)) if sc and sc.down else []
        allocated = {i: "slurm-allocated" for i in sc.used} if sc and not sc.down else {}
        nodes.append(Node(name=name, gpu_type=t.name, gpu_count=count, nvlink=kind,
                          nvlink_pairs=pairs, labels=labels, faulty=faulty,
                          allocated=allocated))
    domains = []
    for text, src in blocks:
        domains += domains_from_block_conf(text, src, known=node_names)
    fabric = FabricSpec(switches=[Switch(name=s, tier=t) for s, t in switches.items()],
                        links=links, nvlink_domains=domains)
    if not switches and not domains:
        from hyperplace.models.cluster import FabricGenerator

        fabric = FabricSpec(generator=FabricGenerator(type="fat-tree-2", nodes_per_leaf=8,
                                                      spines=8, node_gbps=node_gbps,
                                                      uplink_gbps=node_gbps))
        notes.append("no switch in the files: a two-tier fat-tree is assumed")
    return nodes, fabric, notes
