"""Free-domain growth (``defrag`` without ``--for``, ``MigrationPolicy(grow_free_domain=True)``):
a round extension (:mod:`.extensions`) whose objective, right after objective 1, is the
largest free domain: the sum over GPU types of the GPUs of whole free nodes of that type in
one domain of 2 hops (a leaf), as :func:`hyperplace.models.sharing.largest_free_domains`
(and the checker) measure it. Its moves' cost (lost work, then migrations) comes after it.

It owns its rows (:meth:`FreeDomainGrowth.rows`), its objective, the hint completion of its
variables, its value in the plan score and terms (:meth:`FreeDomainGrowth.plan_value`) and
its share of the decode settlement (:meth:`FreeDomainGrowth.move_stands`: a migration that
frees part of the largest domain stands). It has no reasons of its own: its round's movers move for
pending jobs first (objective 1 comes before the free domain, which never holds a pending
job back), so migration's reason is the true one (``defrag`` solves it without pending jobs).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import TYPE_CHECKING

from hyperplace.formulations.linear import Objective
from hyperplace.formulations.placement.domains import DomainKey
from hyperplace.formulations.placement.extensions import RoundExtension

if TYPE_CHECKING:
    from hyperplace.formulations.placement.decoded import Assignment, PlacedUnit
    from hyperplace.formulations.placement.model import PlacementModelBuilder
    from hyperplace.formulations.placement.problem import PlacementProblem

Terms = list[tuple[int, int]]
OBJECTIVE = "largest_free_domain_gpus"


class FreeDomainGrowth(RoundExtension):
    """The largest free domain as the objective after objective 1 (see the module
    docstring)."""

    name = "free-domain growth"
    objective_names = (OBJECTIVE,)

    def __init__(self, p: PlacementProblem):
        self.p = p

    @classmethod
    def of(cls, p: PlacementProblem) -> FreeDomainGrowth | None:
        """The extension when the round's migration policy grows the free domain."""
        return cls(p) if p.migration is not None and p.migration.grow_free_domain else None

    def rows(self, b: PlacementModelBuilder) -> None:
        """A node may be whole free after the round when none of its GPUs is faulty or held
        by a running job that cannot move. A whole free class of ``m`` nodes keeps ``m -
        used`` (:meth:`PlacementModelBuilder.nodes_used`); a node hosting movers is whole
        free (``wf = 1``) only if every mover on it moves (``wf <= stop[v]``) and no piece
        lands on it (``GPUs of its pieces <= its GPUs x (1 - wf)``). Per type ``t``, ``L[t]
        <= GPUs whole free in domain d + M (1 - pick[d, t])`` with one ``pick`` per type:
        ``L[t]`` is the largest domain's when maximised."""
        p = self.p
        # per (type, domain): terms of whole free GPUs, and their most
        per: dict[tuple[str, DomainKey], Terms] = defaultdict(list)
        most: dict[tuple[str, DomainKey], int] = defaultdict(int)
        const: dict[tuple[str, DomainKey], int] = defaultdict(int)
        pieces_on: dict[int, Terms] = defaultdict(list)
        rule_nodes: list[tuple[int, list[int], list[int]]] = []  # (wf, stops, pieces)
        for pv in b.pieces:
            pieces_on[pv.node_class].append((pv.var, pv.piece))
        for nc in p.node_classes:
            n = nc.rep
            f = n.node.gpu_count
            if n.node.faulty or len(n.free) + len(n.stoppable) < f:
                continue  # a faulty GPU, or one held by a job that stays
            if n.attach_gbps is None:
                continue  # off the fabric: in no domain (as largest_free_domains counts)
            domains = list(p.domains_of(n, 2))
            t = n.gpu_type.name
            if not n.stoppable:  # whole free now: m - used stay whole free
                u = b.nodes_used(nc)
                for d in domains:
                    const[(t, d)] += f * nc.multiplicity
                    most[(t, d)] += f * nc.multiplicity
                    if u is not None:
                        per[(t, d)].append((u, -f))
                continue
            wf = b.lm.bool(f"wholefree[{n.name}]")
            for v in sorted(set(n.stoppable.values())):
                b.lm.add([(wf, 1), (b.stop[v], -1)], hi=0, name=f"wholefree[{n.name},{v}]")
            load = pieces_on.get(nc.index, [])
            if load:
                b.lm.add(load + [(wf, f)], hi=f, name=f"wholefree-empty[{n.name}]")
            for d in domains:
                per[(t, d)].append((wf, f))
                most[(t, d)] += f
            rule_nodes.append((wf, [b.stop[v] for v in sorted(set(n.stoppable.values()))],
                               [v for v, _ in load]))
        by_type: dict[str, list[DomainKey]] = defaultdict(list)
        for t, d in sorted(set(per) | set(const)):
            by_type[t].append(d)
        objective: Terms = []
        rule_types = []
        for t, doms in sorted(by_type.items()):
            top = max(most[(t, d)] for d in doms)
            largest = b.lm.var(f"freedomain[{t}]", 0, top)
            picks = [b.lm.bool(f"pick[{t},{d}]") for d in doms]
            b.lm.eq([(x, 1) for x in picks], 1, f"pick[{t}]")
            for d, x in zip(doms, picks):
                # L <= const + terms + top (1 - pick)
                b.lm.add([(largest, 1)] + [(v, -c) for v, c in per[(t, d)]] + [(x, top)],
                         hi=const[(t, d)] + top, name=f"freedomain[{t},{d}]")
            objective.append((largest, 1))
            rule_types.append((largest, [(x, const[(t, d)], per[(t, d)])
                                         for d, x in zip(doms, picks)]))
        b.obj_free_domain = objective
        b.derived.append(_free_domain_rule(rule_nodes, rule_types))

    def objectives(self, b: PlacementModelBuilder) -> list[Objective]:
        """The largest free domain, maximised (the moves' cost comes after it)."""
        return [Objective(b.obj_free_domain, OBJECTIVE, "max")] if b.obj_free_domain else []

    def move_stands(self, a: Assignment, stopped: set[int], v: int, copy: int,
                    units: list[PlacedUnit]) -> bool:
        """A migration frees part of the largest free domain: it would be smaller without
        it (the decode settlement keeps it)."""
        without = self.plan_value(a, stopped - {v})
        a.units[copy] = units
        moved = self.plan_value(a, stopped)
        del a.units[copy]
        return without < moved

    def plan_value(self, a: Assignment, stopped: set[int] | None = None) -> int:
        """The largest free domain per GPU type, summed over types, once the assignment's
        migrations (``stopped``, default ``a.stopped``) are done
        (:func:`hyperplace.models.sharing.largest_free_domains`, as the checker measures it)."""
        from hyperplace.models.sharing import largest_free_domains

        p = self.p
        busy = {(node, g) for units in a.units.values() for u in units
                for node, gpus in u.pieces for g in gpus}
        freed = {gpu for v in (a.stopped if stopped is None else stopped)
                 for gpu in p.stoppable[v].gpus}
        return sum(largest_free_domains(p.instance, busy, freed).values())

    def terms(self, a: Assignment) -> dict[str, float]:
        return {OBJECTIVE: float(self.plan_value(a))}


def _free_domain_rule(nodes: list[tuple[int, list[int], list[int]]],
                      types: list[tuple[int, list[tuple[int, int, Terms]]]]
                      ) -> Callable[[list[int]], None]:
    """Hint completion of the free-domain family (after the node counts): a node is whole
    free when its movers all move and no piece lands there; per type the largest domain is
    picked."""
    def rule(values: list[int]) -> None:
        for wf, stops, pieces in nodes:
            values[wf] = int(all(values[s] for s in stops) and not any(values[v] for v in pieces))
        for largest, options in types:
            sizes = [const + sum(c * values[v] for v, c in terms) for _, const, terms in options]
            best = max(range(len(options)), key=lambda k: sizes[k])
            for k, (x, _, _) in enumerate(options):
                values[x] = int(k == best)
            values[largest] = max(0, sizes[best])
    return rule


__all__ = ["OBJECTIVE", "FreeDomainGrowth"]
