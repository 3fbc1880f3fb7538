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


def spare_nodes(instance: Instance, count: int) -> list[str]:
    """The hot spares: in every leaf domain (nodes pairwise within 2 hops), the last
    ``count`` whole free nodes in cluster order (all of them when it has fewer). New
    placements leave them free; repairs may use them."""
    if count <= 0:
        return []
    out: dict[str, None] = {}
    for c in instance.clusters:
        order = {n.name: i for i, n in enumerate(c.nodes)}
        by_name = {n.name: n for n in c.nodes}
        for _, members in sorted(c.network.domains(2).items()):
            free = sorted((m for m in members if m in by_name and _whole_free(by_name[m])),
                          key=order.__getitem__)
            out.update(dict.fromkeys(free[-count:]))
    return list(out)


def with_hot_spares(instance: Instance, count: int, keep_usable: Set[tuple[str, int]] = frozenset()
                    ) -> Instance:
    """The instance with its hot spares' GPUs (:func:`spare_nodes`) kept out of reach of new
    placements (marked unusable), except ``keep_usable`` ones."""
    names = set(spare_nodes(instance, count))
    if not names:
        return instance
    reserve = {(n.name, g) for c in instance.clusters for n in c.nodes if n.name in names
               for g in range(n.gpu_count)} - set(keep_usable)
    return released(instance, [], reserve=reserve)


def whole_free_per_leaf(instance: Instance, busy: Set[tuple[str, int]] = frozenset()
                        ) -> dict[str, int]:
    """Leaf domain (``cluster/leaf``) -> whole free nodes in it, ``busy`` GPUs counted as
    taken."""
    out: dict[str, int] = {}
    for c in instance.clusters:
        by_name = {n.name: n for n in c.nodes}
        for leaf, members in c.network.domains(2).items():
            out[f"{c.name}/{leaf}"] = sum(
                1 for m in members if m in by_name and _whole_free(by_name[m])
                and not any((m, g) in busy for g in range(by_name[m].gpu_count)))
    return out
