"""Independent check of a plan's hot spares (``hotSpares: N``, #14).

NVLink domains (#24): a tray's leaf is its NVLink domain, so spares are kept per rack,
and a domain's ``spareTrays`` is a floor of its own (applied with or without ``hotSpares``).

The rule: in every leaf (:func:`hyperplace.models.sharing.leaves`, the placement model's
leaf; nodes off the fabric are in none), the placements of the plan's jobs other than
repairs (migrations with ``why: repair``) leave at least ``min(N, whole free nodes the leaf
had)`` of its whole free nodes whole free (``hot-spares``). Which nodes stay spare is the
plan's choice; repairs may use them (that is what they are for). Whole free: none of the
node's GPUs held or faulty in the instance the plan is for.
"""

from __future__ import annotations

from collections.abc import Set

from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.sharing import declared_spares, whole_free_per_leaf


def spare_problems(plan: PlacementPlan, instance: Instance) -> list[str]:
    """One message per leaf left with fewer whole free nodes than its hot spares."""
    repairs = {m.job for m in plan.migrations if m.why == "repair"}
    new = {(g.node, g.gpu) for u in plan.placements if u.job not in repairs for g in u.gpus}
    return spare_shortfall(instance, plan.hot_spares, new)


def spare_shortfall(instance: Instance, spares: int, busy: Set[tuple[str, int]]) -> list[str]:
    """Leaves that keep fewer than ``min(spares, whole free nodes they had)`` whole free
    nodes once the ``busy`` GPUs are taken, in words (empty when ``spares`` is 0); an
    NVLink domain that declares ``spareTrays`` keeps at least that many (#24)."""
    declared = declared_spares(instance)
    if spares <= 0 and not declared:
        return []
    before = whole_free_per_leaf(instance)
    after = whole_free_per_leaf(instance, busy)

    def keep(leaf: str, had: int) -> int:
        return min(max(spares, declared.get(leaf, 0)), had)

    return [f"leaf {leaf}: {after[leaf]} whole free node(s) left by new placements, fewer "
            f"than the {keep(leaf, had)} hot spare(s) it must keep"
            for leaf, had in sorted(before.items()) if after[leaf] < keep(leaf, had)]
