"""Independent check of a plan's hot spares (``hotSpares: N``, #14).

New placements leave, in every leaf domain (nodes pairwise within 2 hops), at least
``min(N, whole free nodes it had)`` whole free nodes (``hot-spares``); placements of jobs the
plan migrates for a repair (``why: repair``) may use them. The rest of the plan is then
checked with the designated spares (:func:`hyperplace.models.sharing.spare_nodes`) that it
leaves unused kept out of reach, as the solver saw the round.
"""

from __future__ import annotations

from hyperplace.models.instance import Instance
from hyperplace.models.plan import PlacementPlan
from hyperplace.models.sharing import whole_free_per_leaf, with_hot_spares


def spare_problems(plan: PlacementPlan, instance: Instance) -> tuple[list[str], Instance]:
    """Messages for leaves left with too few spares, and the instance to check the rest on."""
    n = plan.hot_spares
    if n <= 0:
        return [], instance
    repairs = {m.job for m in plan.migrations if m.why == "repair"}
    used = {(g.node, g.gpu) for u in plan.placements for g in u.gpus}
    new = {(g.node, g.gpu) for u in plan.placements if u.job not in repairs for g in u.gpus}
    before = whole_free_per_leaf(instance)
    after = whole_free_per_leaf(instance, new)
    out = [f"leaf {leaf}: {after[leaf]} whole free nodes left by new placements, fewer than "
           f"the {min(n, had)} hot spares it must keep" for leaf, had in sorted(before.items())
           if after[leaf] < min(n, had)]
    return out, with_hot_spares(instance, n, keep_usable=used)
