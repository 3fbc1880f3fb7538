"""``hyperplace instances import``: a Cluster file from the formats real clusters use.

The importers (:mod:`hyperplace.instances.importers`) each read one format into domain
objects; this module assembles their output into one ``Cluster`` document:

* ``nvidia-smi``, ``nccl-xml``, ``dgx1``: every file describes one node (its GPUs, NVLink
  pairs, NICs); ``count`` nodes are made from each, named ``<node>-<k>``, and joined by a
  two-tier fat-tree of ``nodes_per_leaf`` nodes per leaf at ``node_gbps``.
* ``hypernode``: Volcano HyperNode files give the fabric (leaf and spine tiers); the nodes
  come from a Cluster/Instance file (``nodes_from``), or are made, ``gpus_per_node`` GPUs of
  ``gpu_type`` each, for every node a HyperNode names with ``exactMatch``.
* ``kubernetes``: ``kubectl get nodes -o json`` (a ``List`` of ``Node``s, or one ``Node``),
  optionally with ``kubectl get pods -A -o json`` (what runs: ``allocated``) and a Kueue
  ``Topology`` (the levels) among the files; one cluster from all of them
  (:mod:`hyperplace.instances.importers.kubernetes`).
* ``slurm`` / ``ibnetdiscover``: Slurm ``topology.conf`` (tree, block), ``gres.conf`` with
  ``Links=``, ``ibnetdiscover`` output, told apart by content; the GPUs from ``gres.conf`` or
  ``--gpu-type``/``--gpus-per-node`` (:mod:`hyperplace.instances.importers.slurm`).
* ``alibaba``: an Alibaba GPU machine list (2023 ``sn,...,gpu,model`` or PAI 2020
  ``machine,gpu_type,...,cap_gpu``), one cluster per file on an assumed fat-tree.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hyperplace.errors import InputError, from_validation_error
from hyperplace.io import dump_yaml, read_text_limited
from hyperplace.models import Cluster, FabricGenerator, FabricSpec, GPUCatalog, GPUType, Node
from hyperplace.models.limits import MAX_GPUS

FORMATS = ("nvidia-smi", "nccl-xml", "dgx1", "hypernode", "alibaba", "kubernetes", "slurm",
           "ibnetdiscover")

#: Node label the importers set to what they assumed (e.g. ``gpu-type,nic-speed``).
ASSUMED_LABEL = "hyperplace.io/assumed"


def cluster_document(cluster: Cluster, gpu_types: list[GPUType]) -> dict[str, Any]:
    """A ``hyperplace/v1`` ``Cluster`` document that :func:`parse_cluster` reads back."""
    body = cluster.to_doc()
    name = body.pop("name")
    spec: dict[str, Any] = {}
    if gpu_types:
        spec["gpuTypes"] = [t.to_doc() for t in gpu_types]
    spec.update(body)
    for node in spec.get("nodes", []):
        if "allocated" in node:
            node["allocated"] = {int(k): v for k, v in node["allocated"].items()}
    return {"apiVersion": "hyperplace/v1", "kind": "Cluster", "metadata": {"name": name},
            "spec": spec}


def _cluster(name: str, nodes: list[Node], fabric: FabricSpec, source: str,
             labels: dict[str, str] | None = None) -> Cluster:
    gpus = sum(n.gpu_count for n in nodes)
    if gpus > MAX_GPUS:
        raise InputError(f"{gpus:,} GPUs, more than the limit of {MAX_GPUS:,}", source=source)
    try:
        return Cluster(name=name, nodes=nodes, fabric=fabric, labels=labels or {})
    except ValidationError as exc:
        raise from_validation_error(exc, source=source) from None


def per_file(values: Any, files: list[str], option: str) -> list[Any]:
    """One value per file: none, one for every file, or one each (in file order)."""
    if values is None or isinstance(values, (str, int)):
        return [values] * len(files)
    values = list(values)
    if not values:
        return [None] * len(files)
    if len(values) == 1:
        return values * len(files)
    if len(values) != len(files):
        raise InputError(f"given {len(values)} times for {len(files)} files: give it once (every "
                         "file) or once per file, in file order", path=option)
    return values


def _node_files(kind: str, files: list[str], *, count: int, gpu_type: Any,
                nodes_per_leaf: int, node_gbps: float, name: str | None,
                gpu_count: Any = None) -> Cluster:
    from hyperplace.instances import importers as imp

    if count < 1:
        raise InputError(f"must be at least 1, got {count}", path="--count")
    if nodes_per_leaf < 1:
        raise InputError(f"must be at least 1, got {nodes_per_leaf}", path="--nodes-per-leaf")
    templates: list[Node] = []
    types = per_file(gpu_type, files, "--gpu-type")
    counts = per_file(gpu_count, files, "--gpu-count")
    for f, ftype, fcount in zip(files, types, counts):
        read_text_limited(f)  # size and encoding limits, before any importer reads it
        try:
            if kind == "nvidia-smi":
                node = imp.import_nvidia_smi_topo(f, gpu_type=ftype)
            elif kind == "nccl-xml":
                node = imp.import_nccl_topology(f, gpu_type=ftype, gpu_count=fcount)
            else:
                node = imp.import_nvlink_link_matrix(f, gpu_type=ftype or "V100-32",
                                                     name=Path(f).stem)
        except InputError as exc:  # the library says "pass gpu_type"; the CLI has options
            exc.message = (exc.message.replace("pass gpu_type", "give --gpu-type")
                           .replace("pass gpu_count", "give --gpu-count")
                           .replace("gpu_count=", "--gpu-count ").replace("gpu_type ", "--gpu-type "))
            raise InputError(exc.message, source=exc.source or f, path=exc.path) from None
        templates.append(node)
    gpus = count * sum(t.gpu_count for t in templates)
    if gpus > MAX_GPUS:
        raise InputError(f"{count:,} copies make {gpus:,} GPUs, more than the limit of "
                         f"{MAX_GPUS:,}", path="--count")
    nodes: list[Node] = []
    for t in templates:
        base = t.name
        for k in range(count):
            node_name = base if count == 1 else f"{base}-{k:0{len(str(count - 1))}d}"
            nodes.append(t.model_copy(update={"name": node_name}))
    names = [n.name for n in nodes]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise InputError(f"two files make a node named {dup!r}; give each file a distinct "
                         "name", source=files[0])
    fabric = FabricSpec(generator=FabricGenerator(
        type="fat-tree-2", nodes_per_leaf=nodes_per_leaf, spines=max(1, min(8, nodes_per_leaf)),
        node_gbps=node_gbps, uplink_gbps=node_gbps))
    return _cluster(name or _stem(files[0]), nodes, fabric, files[0])


def _stem(path: str) -> str:
    return "stdin" if path == "-" else Path(path).stem


def _hypernode_files(files: list[str], *, gpu_type: str | None, gpus_per_node: int,
                     nodes_from: str | None, node_gbps: float, name: str | None) -> Cluster:
    from hyperplace.instances.importers.hypernode import hypernodes_to_fabric
    from hyperplace.instances.registry import document_kind, instance_from_documents
    from hyperplace.io import load_documents

    docs: list[dict[str, Any]] = []
    for f in files:
        for i, d in enumerate(load_documents(f)):
            if d.get("kind") in ("List", "HyperNodeList"):
                docs.extend(d.get("items") or [])
            else:
                label = f"document {i + 1}"
                if document_kind(d, f, label) != "HyperNode":
                    raise InputError(f"expected HyperNode, got {d.get('kind')!r}", source=f,
                                     path=f"{label}: kind")
                docs.append(d)
    source = files[0]
    if nodes_from is not None:
        inst = instance_from_documents(load_documents(nodes_from), nodes_from)
        base_nodes = [n for c in inst.clusters for n in c.nodes]
        fabric = hypernodes_to_fabric(docs, source=source, nodes=base_nodes,
                                      node_gbps=node_gbps, uplink_gbps=node_gbps)
        return _cluster(name or inst.clusters[0].name, base_nodes, fabric, source)
    if gpu_type is None:
        raise InputError("a HyperNode file names nodes but not their GPUs: give --gpu-type "
                         "(and --gpus-per-node), or --nodes-from a Cluster file",
                         path="--gpu-type")
    hypernodes_to_fabric(docs, source=source, check_only=True)  # well formed first
    named: list[str] = []
    for d in docs:
        for m in d["spec"]["members"]:
            if m.get("type") != "Node":
                continue
            how = next(iter(m["selector"]))
            if how != "exactMatch":
                raise InputError(
                    f"HyperNode {d['metadata']['name']!r} selects nodes by {how}, which needs "
                    "the nodes themselves: give --nodes-from a Cluster file", source=source)
            if m["selector"]["exactMatch"]["name"] not in named:
                named.append(m["selector"]["exactMatch"]["name"])
    if not named:
        raise InputError("the HyperNodes name no node with exactMatch, so the nodes are "
                         "unknown: give --nodes-from a Cluster file", source=source)
    if not 1 <= gpus_per_node <= 72:
        raise InputError(f"must be within 1..72, got {gpus_per_node}", path="--gpus-per-node")
    known = GPUCatalog().find(gpu_type)
    if known is None:
        raise InputError(f"unknown GPU type {gpu_type!r} (known: "
                         f"{', '.join(GPUCatalog().names())})", path="--gpu-type")
    nodes = [Node(name=n, gpu_type=known.name, gpu_count=gpus_per_node) for n in named]
    fabric = hypernodes_to_fabric(docs, source=source, nodes=nodes, node_gbps=node_gbps,
                                  uplink_gbps=node_gbps)
    return _cluster(name or Path(source).stem, nodes, fabric, source)


def _kubernetes(files: list[str], *, name: str | None, gpu_type: str | None,
                node_gbps: float | None, nodes_per_leaf: int) -> tuple[Cluster, list[str]]:
    from hyperplace.instances.foreign import classify
    from hyperplace.instances.importers.kubernetes import import_kubernetes_nodes, \
        levels_from_topology
    from hyperplace.io import load_documents

    nodes: list[tuple[dict[str, Any], str]] = []
    pods: list[tuple[dict[str, Any], str]] = []
    slices: list[tuple[dict[str, Any], str]] = []
    levels = None
    for f in files:
        docs = load_documents(f)
        for i, d in enumerate(docs):
            label = f"document {i + 1}: " if len(docs) > 1 else ""
            what = classify(d)
            items = d.get("items") if d.get("kind") in ("List", "NodeList", "PodList") else [d]
            if what == "topology":
                levels = levels_from_topology(d, f, label)
            elif what == "cluster" and any(isinstance(x, dict) and x.get("kind") == "Pod"
                                           for x in items or []) or d.get("kind") in ("Pod",
                                                                                    "PodList"):
                pods.append((d, label))
            elif what == "cluster" and any(isinstance(x, dict) and x.get("kind") ==
                                           "ResourceSlice" for x in items or []) or \
                    d.get("kind") in ("ResourceSlice", "ResourceSliceList"):
                slices.append((d, label))
            elif what == "cluster":
                nodes.append((d, label))
            elif what in ("queue", "job"):
                continue  # queue and job files go with --queues and --jobs
            else:
                raise InputError(f"expected Node, a List of nodes or pods, or a Kueue Topology, "
                                 f"got {d.get('kind')!r}", source=f, path=f"{label}kind")
    if not nodes:
        raise InputError("no Node: give `kubectl get nodes -o json` output", source=files[0])
    source = files[0] if len(files) == 1 else ", ".join(files)
    kc = import_kubernetes_nodes(nodes, source, pod_docs=pods, slice_docs=slices,
                                 gpu_type=gpu_type, levels=levels,
                                 name=name or Path(files[0]).stem.removesuffix("-nodes")
                                 if files[0] != "-" else name or "kubernetes",
                                 node_gbps=node_gbps, nodes_per_leaf=nodes_per_leaf)
    return kc.cluster, kc.notes


def _slurm(files: list[str], *, name: str | None, gpu_type: str | None, gpus_per_node: int,
           node_gbps: float) -> tuple[Cluster, list[str]]:
    """Slurm topology.conf (tree/block), gres.conf and ibnetdiscover files, told apart by
    their content (:mod:`hyperplace.instances.importers.slurm`)."""
    from hyperplace.instances.importers.slurm import import_slurm

    topo, gres, ib, sc = [], [], [], []
    for f in files:
        text = read_text_limited(f)
        src = "<stdin>" if f == "-" else f
        if re.search(r"(?m)^(Switch|Ca)\s+\d+\s+\"[SH]-", text):
            ib.append((text, src))
        elif re.search(r"(?m)^\s*NodeName=\S+.*\b(Arch|CPUTot|CoresPerSocket|State)=", text):
            sc.append((text, src))
        elif re.search(r"(?im)^\s*(switchname|blockname)=", text):
            topo.append((text, src))
        elif re.search(r"(?im)\bname=gpu\b", text):
            gres.append((text, src))
        else:
            raise InputError("not a Slurm topology.conf (SwitchName=/BlockName= lines), a "
                             "gres.conf (Name=gpu lines), `scontrol show nodes` output or "
                             "ibnetdiscover output", source=src)
    nodes, fabric, notes = import_slurm(topo, gres=gres, ib=ib, scontrol=sc, gpu_type=gpu_type,
                                        gpus_per_node=gpus_per_node, node_gbps=node_gbps)
    return _cluster(name or _stem(files[0]), nodes, fabric, files[0]), notes


def _alibaba(files: list[str], name: str | None) -> list[tuple[Cluster, list[GPUType]]]:
    from hyperplace.instances import importers as imp

    out = []
    for i, f in enumerate(files):
        text = read_text_limited(f)
        header = text.split("\n", 1)[0].strip().split(",")
        cluster_name = (name if len(files) == 1 else f"{name}-{i}") if name else Path(f).stem
        if "sn" in header:
            out.append(imp.import_alibaba_gpu2023_nodes(f, name=cluster_name))
        elif "machine" in header:
            out.append(imp.import_alibaba_pai2020_machines(f, name=cluster_name))
        else:
            raise InputError("line 1: not an Alibaba machine list (expected the 2023 columns "
                             "sn,cpu_milli,memory_mib,gpu,model or the PAI 2020 columns "
                             "machine,gpu_type,cap_cpu,cap_mem,cap_gpu)", source=f)
    return out


def import_cluster(kind: str, files: list[str], *, name: str | None = None, count: int = 1,
                   gpu_type: Any = None, gpus_per_node: int = 8, gpu_count: Any = None,
                   nodes_from: str | None = None, nodes_per_leaf: int = 8,
                   node_gbps: float = 400.0, fmt: str = "yaml") -> tuple[str, str]:
    """(Cluster file text, one-line summary) from ``files`` of format ``kind``."""
    if kind not in FORMATS:
        raise InputError(f"unknown format {kind!r} (one of {', '.join(FORMATS)})", path="--from")
    if not files:
        raise InputError("give at least one FILE", path="FILE")
    for f in files:
        if f != "-" and not Path(f).is_file():
            raise InputError("no such file" if not Path(f).is_dir()
                             else "is a directory, expected a file", source=f)
    if not 0 < node_gbps <= 1e7:
        raise InputError(f"must be a positive number of Gb/s, got {node_gbps}",
                         path="--node-gbps")
    if name is not None and (not name or len(name) > 253 or not name.isprintable()):
        raise InputError("must be 1 to 253 printable characters", path="--name")
    notes: list[str] = []
    if kind in ("hypernode", "kubernetes", "alibaba", "slurm", "ibnetdiscover") and \
            not isinstance(gpu_type, str) \
            and gpu_type is not None:
        if len(gpu_type) > 1:
            raise InputError(f"one type for a {kind} import (it applies to every node)",
                             path="--gpu-type")
        gpu_type = gpu_type[0] if gpu_type else None
    if kind != "nccl-xml" and gpu_count not in (None, []):
        raise InputError("only for nccl-xml files that list no GPU", path="--gpu-count")
    if kind == "alibaba":
        clusters = _alibaba(files, name)
    elif kind in ("slurm", "ibnetdiscover"):
        sc, notes = _slurm(files, name=name, gpu_type=gpu_type, gpus_per_node=gpus_per_node,
                           node_gbps=node_gbps)
        clusters = [(sc, [])]
    elif kind == "kubernetes":
        kc, notes = _kubernetes(files, name=name, gpu_type=gpu_type,
                                node_gbps=None if node_gbps == 400.0 else node_gbps,
                                nodes_per_leaf=nodes_per_leaf)
        clusters = [(kc, [])]
    elif kind == "hypernode":
        clusters = [(_hypernode_files(files, gpu_type=gpu_type, gpus_per_node=gpus_per_node,
                                      nodes_from=nodes_from, node_gbps=node_gbps, name=name),
                     [])]
    else:
        clusters = [(_node_files(kind, files, count=count, gpu_type=gpu_type,
                                 nodes_per_leaf=nodes_per_leaf, node_gbps=node_gbps,
                                 name=name, gpu_count=gpu_count), [])]
    docs = [cluster_document(c, types) for c, types in clusters]
    if fmt == "json":
        text = json.dumps(docs[0] if len(docs) == 1 else docs, indent=2) + "\n"
    else:
        text = "---\n".join(dump_yaml(d) for d in docs)
    summary = "; ".join(
        f"Cluster {c.name}: {len(c.nodes):,} node{'' if len(c.nodes) == 1 else 's'}, "
        f"{c.gpu_count:,} GPU{'' if c.gpu_count == 1 else 's'} "
        f"({', '.join(sorted({n.gpu_type for n in c.nodes}))}), fabric {c.network.kind}"
        for c, _ in clusters)
    assumed = sorted({a for c, _ in clusters for n in c.nodes
                      for a in n.labels.get(ASSUMED_LABEL, "").split(",") if a})
    if assumed:
        hint = "" if gpu_type or "gpu-type" not in assumed else \
            "; give --gpu-type to set the type (once per file for files of different types)"
        summary += (f" (assumed, not in the file: {', '.join(assumed)}{hint}; the labels say "
                    "what was assumed)")
    if notes:
        summary += "; " + "; ".join(notes)
    return text, summary
