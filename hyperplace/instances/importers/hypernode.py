"""Volcano HyperNodes (``topology.volcano.sh/v1alpha1``) <-> hyperplace fabrics.

A Volcano cluster already describes its network as a tree of HyperNodes: tier 1 = the nodes
on one leaf switch (or in one NVLink domain), tier 2 = the leaves under one spine, and so on.
Reading that tree gives the engine the same hop structure Volcano schedules with, so the
comparison with Volcano's allocate is made on one topology.

Import (:func:`import_hypernodes`): one switch per HyperNode, at the HyperNode's tier; a
``Node`` member is linked to its HyperNode's switch, a ``HyperNode`` member's switch to its
parent's. Hop count (switches on the path) then follows tiers: two nodes under one tier-1
HyperNode are 1 hop apart, under one tier-2 HyperNode 3 hops, under one tier-3 5 hops.
HyperNodes carry no bandwidth, so node links get ``node_gbps`` and switch links
``uplink_gbps`` (defaults: 400 Gb/s, the NDR rate of current GPU fabrics).

Member selectors (the CRD's ``exactMatch``/``regexMatch``/``labelMatch``, exactly one each):
``regexMatch`` is matched like Go's ``regexp.MatchString`` (unanchored search) against the
node names passed in, or the HyperNode names of the file; ``labelMatch`` needs the nodes
themselves for their labels. A node or HyperNode may have one parent only, and a HyperNode
member must sit at a lower tier than its parent, as Volcano requires.

Export (:func:`fabric_to_hypernodes`): the cluster's fabric domains (``Fabric.domains``)
become HyperNodes, tier ``t`` for the domains of hop radius ``2t - 1``; tier-1 HyperNodes list
their nodes, higher tiers the HyperNodes of the level below.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import yaml

from hyperplace.errors import InputError
from hyperplace.instances.importers._source import Source, read_text
from hyperplace.models.cluster import Cluster, FabricSpec
from hyperplace.models.fabric import Link, Switch
from hyperplace.models.node import Node

API_VERSION = "topology.volcano.sh/v1alpha1"
KIND = "HyperNode"
MEMBER_TYPES = ("Node", "HyperNode")
SELECTORS = ("exactMatch", "regexMatch", "labelMatch")
MAX_SWITCH_TIER = 4  # hyperplace's Switch.tier range
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _fail(src: str, path: str, message: str) -> InputError:
    return InputError(message, source=src, path=path)


def _labels_match(labels: Mapping[str, str], selector: Mapping[str, Any], src: str,
                  path: str) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(str(key)) != str(value):
            return False
    for k, expr in enumerate(selector.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{k}]"
        if not isinstance(expr, dict) or "key" not in expr or "operator" not in expr:
            raise _fail(src, where, "needs key and operator")
        key, op, values = str(expr["key"]), expr["operator"], [str(v) for v in expr.get("values") or []]
        if op == "In":
            ok = labels.get(key) in values
        elif op == "NotIn":
            ok = labels.get(key) not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            raise _fail(src, f"{where}.operator",
                        f"unknown operator {op!r} (expected In, NotIn, Exists, DoesNotExist)")
        if not ok:
            return False
    return True


def _select(selector: Any, candidates: Sequence[str], labels: Mapping[str, Mapping[str, str]] | None,
            kind: str, known_names: bool, src: str, path: str, check_only: bool = False
            ) -> list[str]:
    if not isinstance(selector, dict):
        raise _fail(src, path, "selector is missing (need exactMatch, regexMatch or labelMatch)")
    given = [s for s in SELECTORS if s in selector]
    unknown = [s for s in selector if s not in SELECTORS]
    if unknown:
        raise _fail(src, f"{path}.{unknown[0]}", f"unknown selector (expected {', '.join(SELECTORS)})")
    if len(given) != 1:
        raise _fail(src, path, f"exactly one of {', '.join(SELECTORS)} must be given, got "
                               f"{', '.join(given) or 'none'}")
    how = given[0]
    body = selector[how]
    if not isinstance(body, dict):
        raise _fail(src, f"{path}.{how}", "must be a mapping")
    if how == "exactMatch":
        name = body.get("name")
        if not isinstance(name, str) or not name:
            raise _fail(src, f"{path}.exactMatch.name", "required, a non-empty string")
        if known_names and name not in candidates:
            raise _fail(src, f"{path}.exactMatch.name", f"no {kind} named {name!r}")
        return [name]
    if how == "regexMatch":
        pattern = body.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise _fail(src, f"{path}.regexMatch.pattern", "required, a non-empty string")
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            raise _fail(src, f"{path}.regexMatch.pattern", f"bad regular expression: {exc}") from None
        if not known_names:
            if check_only:
                # checking the file alone (hyperplace validate): the pattern is well formed;
                # which nodes it selects is known only against a cluster's node list
                return []
            raise _fail(src, f"{path}.regexMatch", f"regexMatch needs the list of {kind} names; "
                                                   "give the cluster's nodes")
        return [c for c in candidates if rx.search(c)]
    if kind != "node":
        raise _fail(src, f"{path}.labelMatch", "labelMatch applies to Node members only")
    if labels is None:
        if check_only and not known_names:
            return []  # checking the file alone: the selector is resolved against a cluster
        raise _fail(src, f"{path}.labelMatch", "labelMatch needs the nodes' labels; give the "
                                               "cluster's nodes with their labels")
    return [c for c in candidates if _labels_match(labels.get(c, {}), body, src,
                                                   f"{path}.labelMatch")]


def hypernodes_to_fabric(
    docs: Sequence[dict[str, Any]],
    *,
    source: str = "<hypernodes>",
    nodes: Sequence[str] | Sequence[Node] | None = None,
    node_gbps: float = 400.0,
    uplink_gbps: float = 400.0,
    check_only: bool = False,
    nvlink_tier: int | None = None,
) -> FabricSpec:
    """The explicit fabric of a set of HyperNode documents (see the module docstring).

    ``check_only``: validate the documents without a node list (regex and label selectors
    are checked for form but select nothing), as ``hyperplace validate`` does.
    ``nvlink_tier``: the tier whose HyperNodes are NVLink networks (an NVL72 rack): they
    become NVLink domains, not switches (also any HyperNode labelled
    ``hyperplace.io/network: nvlink``), see :mod:`.nvlink`.
    """
    src = source
    node_names: list[str] = []
    labels: dict[str, Mapping[str, str]] | None = None
    if nodes is not None:
        if all(isinstance(n, Node) for n in nodes):
            node_names = [n.name for n in nodes]  # type: ignore[union-attr]
            labels = {n.name: n.labels for n in nodes}  # type: ignore[union-attr]
        else:
            node_names = [str(n) for n in nodes]
    known_nodes = nodes is not None

    tiers: dict[str, int] = {}
    where: dict[str, int] = {}
    for i, doc in enumerate(docs):
        p = f"documents[{i}]"
        if not isinstance(doc, dict):
            raise _fail(src, p, "expected a mapping")
        if doc.get("apiVersion") != API_VERSION:
            raise _fail(src, f"{p}.apiVersion", f"expected {API_VERSION}, got {doc.get('apiVersion')!r}")
        if doc.get("kind") != KIND:
            raise _fail(src, f"{p}.kind", f"expected {KIND}, got {doc.get('kind')!r}")
        name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
        if not isinstance(name, str) or not name:
            raise _fail(src, f"{p}.metadata.name", "required, a non-empty string")
        if name in tiers:
            raise _fail(src, f"{p}.metadata.name", f"HyperNode {name!r} is defined twice "
                                                    f"(also documents[{where[name]}])")
        spec = doc.get("spec")
        if not isinstance(spec, dict):
            raise _fail(src, f"{p}.spec", "required, a mapping")
        tier = spec.get("tier")
        if not isinstance(tier, int) or isinstance(tier, bool):
            raise _fail(src, f"{p}.spec.tier", f"required, an integer (got {tier!r})")
        if not 1 <= tier <= MAX_SWITCH_TIER:
            raise _fail(src, f"{p}.spec.tier", f"tier {tier} is outside 1..{MAX_SWITCH_TIER} "
                                               "(tier 1 = closest, e.g. a leaf switch)")
        members = spec.get("members")
        if not isinstance(members, list) or not members:
            raise _fail(src, f"{p}.spec.members", "required, a non-empty list")
        tiers[name] = tier
        where[name] = i

    hyper_names = list(tiers)
    switches = [Switch(name=n, tier=t) for n, t in tiers.items()]
    links: list[Link] = []
    parent: dict[str, str] = {}
    for i, doc in enumerate(docs):
        name = doc["metadata"]["name"]
        for j, member in enumerate(doc["spec"]["members"]):
            p = f"documents[{i}].spec.members[{j}]"
            if not isinstance(member, dict):
                raise _fail(src, p, "expected a mapping with type and selector")
            mtype = member.get("type")
            if mtype not in MEMBER_TYPES:
                raise _fail(src, f"{p}.type", f"unknown member type {mtype!r} (expected Node or "
                                              "HyperNode)")
            if mtype == "Node":
                chosen = _select(member.get("selector"), node_names, labels, "node", known_nodes,
                                 src, f"{p}.selector", check_only)
            else:
                chosen = _select(member.get("selector"), hyper_names, None, "HyperNode", True,
                                 src, f"{p}.selector")
            for child in chosen:
                if mtype == "HyperNode":
                    if child == name:
                        raise _fail(src, p, f"HyperNode {name!r} lists itself")
                    if tiers[child] >= tiers[name]:
                        raise _fail(src, p, f"member HyperNode {child!r} (tier {tiers[child]}) must "
                                            f"be below {name!r} (tier {tiers[name]})")
                if child in parent and parent[child] != name:
                    raise _fail(src, p, f"{mtype} {child!r} is a member of both "
                                        f"{parent[child]!r} and {name!r}")
                if child in parent:
                    continue
                parent[child] = name
                links.append(Link(a=child, b=name,
                                  gbps=node_gbps if mtype == "Node" else uplink_gbps))
    from hyperplace.instances.importers.nvlink import nvlink_hypernodes, split_nvlink_tier

    racks = nvlink_hypernodes(docs, nvlink_tier)
    if racks and not check_only:
        try:
            switches, links, domains = split_nvlink_tier(switches, links, racks)
        except ValueError as exc:
            raise _fail(src, "spec.members", str(exc)) from None
        return FabricSpec(switches=switches, links=links, nvlink_domains=domains)
    return FabricSpec(switches=switches, links=links)


def import_hypernodes(
    source: Source,
    *,
    nodes: Sequence[str] | Sequence[Node] | None = None,
    node_gbps: float = 400.0,
    uplink_gbps: float = 400.0,
) -> FabricSpec:
    """The fabric of a (multi-document) HyperNode YAML file; errors name file and field."""
    text, src = read_text(source)
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        raise InputError(f"malformed YAML: {at}{getattr(exc, 'problem', None) or exc}",
                         source=src) from None
    expanded: list[Any] = []
    for d in docs:  # a `kind: List` (kubectl get -o yaml) holds the HyperNodes under items
        if isinstance(d, dict) and d.get("kind") in ("List", "HyperNodeList"):
            expanded.extend(d.get("items") or [])
        else:
            expanded.append(d)
    if not expanded:
        raise InputError("file holds no HyperNode", source=src)
    return hypernodes_to_fabric(expanded, source=src, nodes=nodes, node_gbps=node_gbps,
                                uplink_gbps=uplink_gbps)


def _k8s_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9.-]+", "-", text.lower()).strip("-.")
    return name[:253].rstrip("-.") or "hypernode"


def _member(member_type: str, name: str) -> dict[str, Any]:
    """Exact match when the name is a valid Kubernetes name, else an anchored regex."""
    if _DNS1123.match(name) and len(name) <= 253:
        return {"type": member_type, "selector": {"exactMatch": {"name": name}}}
    return {"type": member_type, "selector": {"regexMatch": {"pattern": f"^{re.escape(name)}$"}}}


def fabric_to_hypernodes(cluster: Cluster) -> list[dict[str, Any]]:
    """HyperNode documents for the cluster's fabric: tier t = the hop-(2t-1) domains."""
    net = cluster.network
    docs: list[dict[str, Any]] = []
    used: set[str] = set()
    below: dict[str, frozenset[str]] = {}  # HyperNode name -> its nodes, at the previous level
    for radius in net.radii:
        tier = (radius + 1) // 2
        if tier > MAX_SWITCH_TIER:
            break
        level: dict[str, frozenset[str]] = {}
        for domain, members in sorted(net.domains(radius).items()):
            name = _k8s_name(f"{cluster.name}-{domain}")
            base, k = name, 2
            while name in used:
                name, k = f"{base[:248]}-{k}", k + 1
            used.add(name)
            node_set = frozenset(members)
            if not below:
                spec_members = [_member("Node", n) for n in sorted(members)]
            else:
                spec_members = [_member("HyperNode", child)
                                for child, child_nodes in sorted(below.items())
                                if child_nodes <= node_set]
            docs.append({
                "apiVersion": API_VERSION,
                "kind": KIND,
                "metadata": {"name": name, "labels": {"hyperplace.io/cluster": _k8s_name(cluster.name)}},
                "spec": {"tier": tier, "tierName": f"hop-{radius}", "members": spec_members},
            })
            level[name] = node_set
        below = level
    return docs


def dump_hypernodes(docs: Iterable[dict[str, Any]]) -> str:
    """A multi-document YAML stream, as ``kubectl apply -f`` takes it."""
    return yaml.safe_dump_all(list(docs), sort_keys=False, default_flow_style=False)
