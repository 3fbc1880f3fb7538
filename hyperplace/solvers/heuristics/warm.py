"""What one scheduling round leaves for the next: its problem and its plan.

A round after small changes (a few arrivals, completions, failures) is not a cold start.
:class:`WarmStart` carries two things from round to round, and
:func:`~hyperplace.solvers.driver.solve_placement` uses both when it is given one
(``warm=``), as :class:`~hyperplace.solvers.workflows.session.PlacementSession` and the simulator's
engine policy do:

* the previous :class:`~hyperplace.formulations.placement.PlacementProblem`: views of nodes
  whose hardware and fabric did not change and of jobs whose manifest did not change are
  reused (``PlacementProblem(previous=...)``), so only what changed is derived again;
* the previous round's assignment: placements of jobs that are still pending, unchanged and
  whose GPUs are all still free (and within their queue's quota) are kept, the rest of the
  queue is filled greedily around them (:func:`~hyperplace.solvers.heuristics.greedy.fix_inversions`),
  and when that scores at least as well as greedy's own plan it becomes the round's starting
  plan: the fallback, the lower-bound cut, and the hint of a backend that accepts one
  (CP-SAT's solution hint, HiGHS's starting solution). A round re-solved with nothing
  changed thus starts from the previous optimum.

Nothing here decides validity on its own: the starting plan is built by the same greedy
rules, and the exact backend's hint is vetted against the model like greedy's.
"""

from __future__ import annotations

from dataclasses import dataclass

from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.formulations.placement.params import ModelParams
from hyperplace.models.instance import Instance
from hyperplace.solvers.heuristics.greedy import QuotaLedger, fix_inversions, plan_score
from hyperplace.solvers.params import GreedyParams

__all__ = ["WarmStart", "carried_placements", "carry_fabric"]


@dataclass
class WarmStart:
    """The previous round's problem and assignment (empty before the first round).

    Attributes
    ----------
    problem : PlacementProblem or None
        The previous round's problem (its views are reused).
    assignment : Assignment or None
        The previous round's chosen assignment (its job indices refer to ``problem``).
    carried : int
        Jobs whose placement the last round took over from the one before (for tests and
        reports).
    """

    problem: PlacementProblem | None = None
    assignment: Assignment | None = None
    carried: int = 0

    def build(self, instance: Instance, policy: str, params: ModelParams,
              hot_spares: int = 0) -> PlacementProblem:
        """This round's problem, reusing the previous round's views where they still hold."""
        return PlacementProblem(instance, policy, params, previous=self.problem,
                                hot_spares=hot_spares)

    def start(self, p: PlacementProblem, greedy: Assignment, params: GreedyParams | None = None,
              deadline: float | None = None) -> Assignment:
        """The round's starting plan: greedy's, or the previous placements still valid here
        filled greedily around, when that admits at least as much (objective 1, then jobs).
        """
        self.carried = 0
        if self.problem is None or self.assignment is None:
            return greedy
        kept = carried_placements(p, self.problem, self.assignment)
        if not kept.units:
            return greedy
        candidate = fix_inversions(p, kept, params, deadline)
        if plan_score(p, candidate) >= plan_score(p, greedy):
            self.carried = len(kept.units)
            return candidate
        return greedy

    def remember(self, p: PlacementProblem, chosen: Assignment) -> None:
        """Keep this round's problem and plan for the next round."""
        self.problem = p
        self.assignment = chosen


def carried_placements(p: PlacementProblem, prev: PlacementProblem, a: Assignment
                       ) -> Assignment:
    """The placements of ``a`` (an assignment of ``prev``) that are still valid in ``p``.

    A job's placement is kept when the job is still pending with the same manifest (its view
    was reused, so its unit classes are the same), every node it uses has the same hardware
    on the same fabric (reused views), every GPU it uses is free now and not taken by a job
    kept before it, its queue's quotas still allow it, and the whole free nodes it opens
    leave every leaf its hot spares (:meth:`HotSpares.opened_over
    <hyperplace.formulations.placement.spares.HotSpares.opened_over>`). Jobs are taken
    highest priority first.
    """
    index = {jv.name: jv for jv in p.jobs}
    out = Assignment()
    taken: dict[str, set[int]] = {}
    ledger = QuotaLedger(p)
    spares = p.hot_spare_rule
    order = sorted(a.units, key=lambda j: (-prev.jobs[j].priority, j))
    for j in order:
        old = prev.jobs[j]
        jv = index.get(old.name)
        if jv is None or jv.name not in p.reused_jobs or jv.impossible:
            continue
        position = {uc.index: k for k, uc in enumerate(old.classes)}
        units: list[PlacedUnit] = []
        ok = True
        claim: dict[str, set[int]] = {}
        for u in a.units[j]:
            if u.uclass not in position:
                ok = False
                break
            for node, gpus in u.pieces:
                view = p.node_by_name.get(node)
                if view is None or node not in p.reused_nodes or \
                        not set(gpus) <= set(view.free) or \
                        set(gpus) & (taken.get(node, set()) | claim.get(node, set())):
                    ok = False
                    break
                claim.setdefault(node, set()).update(gpus)
            if not ok:
                break
            units.append(PlacedUnit(uclass=jv.classes[position[u.uclass]].index,
                                    unit=u.unit, pieces=list(u.pieces)))
        if not ok:
            continue
        if spares is not None and spares.opened_over(set(taken) | set(claim)):
            continue
        if not ledger.admit(jv, units):
            continue
        out.units[jv.index] = units
        for node, claimed in claim.items():
            taken.setdefault(node, set()).update(claimed)
    return out


def carry_fabric(prev: Instance, new: Instance) -> int:
    """Give ``new``'s clusters the fabrics already built for ``prev``'s, where nothing a
    fabric is built from changed: the same cluster name, fabric spec, and nodes (names,
    hardware, labels, in order). For callers that parse every round's instance afresh (the
    service's stored clusters): without it nothing of the previous round could be reused,
    because node views are reused only on the very same fabric. Returns how many clusters
    got one.
    """
    from hyperplace.formulations.placement.problem import same_hardware

    before = {c.name: c for c in prev.clusters}
    carried = 0
    for c in new.clusters:
        old = before.get(c.name)
        if old is None or "network" not in old.__dict__ or "network" in c.__dict__:
            continue
        if old.fabric != c.fabric or len(old.nodes) != len(c.nodes):
            continue
        if all(a.labels == b.labels and same_hardware(a, b) for a, b in zip(old.nodes, c.nodes)):
            c.__dict__["network"] = old.__dict__["network"]
            carried += 1
    return carried
