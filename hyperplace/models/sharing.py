"""What decisions that stop running work change in an Instance: a released copy.

Preemption frees every GPU of a victim (gang); the plan is then a plan for the *released*
instance, and both the solver and the independent checker build that instance the same
way, from the instance and the plan's ``preemptions[]`` (and ``migrations[]``: a migrated
job's old GPUs are released likewise). :func:`largest_free_domains` is what defragmentation
maximises.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Set

from hyperplace.models.cluster import Cluster
from hyperplace.models.instance import Instance
from hyperplace.models.node import Node


def running_gpus(instance: Instance) -> dict[str, list[tuple[str, int]]]:
    """Running job -> the (node, GPU) pairs it holds, in node order."""
    out: dict[str, list[tuple[str, int]]] = {}
    for c in instance.clusters:
        for n in c.nodes:
            for g, holder in sorted(n.allocated.items()):
                out.setdefault(holder, []).append((n.name, g))
    return out


def largest_free_domains(instance: Instance, busy: Set[tuple[str, int]] = frozenset(),
                         freed: Set[tuple[str, int]] = frozenset()) -> dict[str, int]:
    """GPU type -> GPUs of whole free nodes of that type in one leaf domain (nodes pairwise
    within 2 hops), the largest such domain; ``busy`` GPUs count as taken and ``freed``
    ones (held in the instance) as free. A node is whole free when none of its GPUs is
    held or faulty."""
    best: dict[str, int] = defaultdict(int)
    for c in instance.clusters:
        by_name = {n.name: n for n in c.nodes}
        for members in c.network.domains(2).values():
            per_type: dict[str, int] = defaultdict(int)
            for name in members:
                n = by_name.get(name)
                if n is None or n.faulty:
                    continue
                held = {g for g in n.allocated if (name, g) not in freed}
                if held or any((name, g) in busy for g in range(n.gpu_count)):
                    continue
                per_type[n.gpu_type] += n.gpu_count
            for t, gpus in per_type.items():
                best[t] = max(best[t], gpus)
        for n in c.nodes:
            best.setdefault(n.gpu_type, 0)
    return dict(best)


def released(instance: Instance, victims: Iterable[str],
             hold: dict[tuple[str, int], str] | None = None,
             reserve: Iterable[tuple[str, int]] = ()) -> Instance:
    """A copy of ``instance`` in which the ``victims`` hold no GPUs.

    Parameters
    ----------
    instance : Instance
        The round as it was.
    victims : iterable of str
        Running jobs whose GPUs are all freed.
    hold : dict, optional
        (node, GPU) -> job now holding it (a preemptor placed earlier in the round).
    reserve : iterable of (node, GPU)
        GPUs freed by a preemption but not used by its preemptor: kept out of reach of the
        rest of the round (marked unusable) so that only the preemptor profits.
    """
    gone = set(victims)
    hold = hold or {}
    reserved = set(reserve)
    clusters = []
    for c in instance.clusters:
        nodes = []
        for n in c.nodes:
            alloc = {g: j for g, j in n.allocated.items() if j not in gone}
            alloc.update({g: j for (name, g), j in hold.items() if name == n.name})
            faulty = sorted({*n.faulty, *(g for name, g in reserved if name == n.name)} - set(alloc))
            if alloc != n.allocated or faulty != list(n.faulty):
                # rebuilt, not model_copy: a copy would keep cached views of the old state
                n = Node(**{**{k: getattr(n, k) for k in Node.model_fields},
                            "allocated": alloc, "faulty": faulty})
            nodes.append(n)
        fields = {k: getattr(c, k) for k in Cluster.model_fields}
        clusters.append(Cluster(**{**fields, "nodes": nodes}))
    spec = instance.spec.model_copy(update={"clusters": clusters})
    return Instance(metadata=instance.metadata, spec=spec)


def with_failures(instance: Instance, failed: Iterable[tuple[str, int]]) -> Instance:
    """The instance after these GPUs failed: each is faulty and held by no one. A running
    job that held one keeps its healthy GPUs; it is *broken* (it holds fewer GPUs than its
    manifest asks for) until a repair moves it."""
    dead = set(failed)
    clusters = []
    for c in instance.clusters:
        nodes = []
        for n in c.nodes:
            mine = {g for name, g in dead if name == n.name}
            if mine:
                n = Node(**{**{k: getattr(n, k) for k in Node.model_fields},
                            "allocated": {g: j for g, j in n.allocated.items() if g not in mine},
                            "faulty": sorted(set(n.faulty) | mine)})
            nodes.append(n)
        clusters.append(Cluster(**{**{k: getattr(c, k) for k in Cluster.model_fields},
                                   "nodes": nodes}))
    spec = instance.spec.model_copy(update={"clusters": clusters})
    return Instance(metadata=instance.metadata, spec=spec)


def _whole_free(n: Node) -> bool:
    return not n.allocated and not n.faulty


def leaves(cluster: Cluster) -> dict[str, list[Node]]:
    """Leaf (``cluster/leaf``, :meth:`~hyperplace.models.fabric.Network.leaf_of`, the
    placement model's leaf) -> its nodes in cluster order; nodes off the fabric are in no
    leaf (the hot-spare rule does not apply to them)."""
    out: dict[str, list[Node]] = {}
    net = cluster.network
    for n in cluster.nodes:
        leaf = net.leaf_of(n.name)
        if leaf is not None:
            out.setdefault(f"{cluster.name}/{leaf}", []).append(n)
    return out


def declared_spares(instance: Instance) -> dict[str, int]:
    """Leaf (``cluster/nvl:<domain>``, see :func:`leaves`) -> whole free trays its NVLink
    domain keeps for repairs (``spareTrays``, :class:`~hyperplace.models.nvlink.NVLinkDomain`);
    only domains that declare some."""
    out: dict[str, int] = {}
    for c in instance.clusters:
        net = c.network
        for d in net.nvlink_domains:
            if d.spare_trays:
                for n in d.nodes:
                    leaf = net.leaf_of(n)
                    if leaf is not None:
                        out[f"{c.name}/{leaf}"] = d.spare_trays
    return out


def whole_free_per_leaf(instance: Instance, busy: Set[tuple[str, int]] = frozenset()
                        ) -> dict[str, int]:
    """Leaf (``cluster/leaf``, see :func:`leaves`) -> whole free nodes in it (none of
    their GPUs held or faulty), ``busy`` GPUs counted as taken."""
    out: dict[str, int] = {}
    for c in instance.clusters:
        for leaf, members in leaves(c).items():
            out[leaf] = sum(1 for n in members if _whole_free(n) and
                            not any((n.name, g) in busy for g in range(n.gpu_count)))
    return out
