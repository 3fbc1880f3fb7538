"""The placement formulation: a scheduling round as backend-independent problem data.

The package: :mod:`.views` (nodes, jobs, unit classes as the formulation sees them),
:mod:`.problem` (:class:`PlacementProblem`, where every eligibility rule is written once),
:mod:`.phases` (priority levels grouped into exact lexicographic phases), :mod:`.model` (the
integer model, one builder method per constraint family), :mod:`.domains` (domain keys),
:mod:`.reasons` (why a job cannot run, as codes), :mod:`.params` (tunables),
:mod:`.preemption` (which running jobs a round may stop, and for whom), :mod:`.spares`
(hot spares: whole free nodes each leaf keeps for repairs).

Written once; :mod:`hyperplace.solvers.backends.cpsat` and :mod:`hyperplace.solvers.backends.milp` encode the
same :class:`~hyperplace.formulations.linear.LinearModel`, and
:mod:`hyperplace.solvers.heuristics.greedy` works on the same :class:`PlacementProblem`.

Modelling choices (see the README):

* **Pieces.** A gang unit of at most one node's GPUs is one *piece*: GPUs of one node, like
  one pod. A larger unit (a 16-GPU TP group on 8-GPU nodes) is split into node-sized pieces
  that must sit in one domain of the radius its ``maxHopCount`` allows.
* **NVLink.** A piece of a unit with ``minNVLinkBandwidthGbpsPerPair`` must be a clique of
  free GPUs whose every pair has at least that bandwidth. On NVSwitch nodes any free GPUs
  qualify (if the node's pair bandwidth is high enough); on hybrid-cube-mesh, PCIe or
  explicit nodes the model chooses among the actual cliques.
* **Folding.** Uniform nodes with the same cluster, leaf domain, GPU type, free count and
  state are one *node class* with a multiplicity; per class the model counts pieces by size.
  With piece sizes that divide each other (1, 2, 4, 8) the per-size capacity rows below are
  exact (bin packing with divisible sizes); otherwise they are a relaxation and the mapping
  back drops a job whose pieces do not pack (the plan stays valid and says so).
* **Domains.** ``maxHopCount`` h maps to the fabric tier of the largest radius <= h: all
  pieces of a unit, or all units of a job (the DataParallel group's connectivity), lie in one
  domain of that tier. No unit or job crosses a cluster boundary in this formulation.

Objectives, strictly lexicographic:
1. maximise priority-weighted admitted GPUs (:mod:`~hyperplace.models.priority`; one
   phase per group of priority levels, see :attr:`PlacementProblem.priority_phases`);
   then, among plans that tie on it, admit the most jobs (fewer people left waiting);
   with preemption (:mod:`.preemption`) objective 1 also counts every running job kept, just
   above its priority, and lost work, then the number of preempted jobs, come right after it;
2. minimise communication cost: leaf and spine domains each job touches, weighted by its
   traffic (multi-node TP 100, PP 10, DP 1; a spine counts 3 leaves);
3. minimise fragmentation: whole free nodes opened (x1) and whole free leaf domains opened
   (x8), so partly used domains fill first and whole domains stay free for large jobs;
4. policy: ``performance`` prefers the fastest GPU type that qualifies, ``cost`` the cheapest.
"""

from hyperplace.formulations.placement.domains import DomainKey, radius_for
from hyperplace.formulations.placement.model import (
    PieceVar,
    PlacementModel,
    PlacementModelBuilder,
    build_model,
)
from hyperplace.formulations.placement.params import ModelParams
from hyperplace.formulations.placement.problem import POLICIES, PlacementProblem
from hyperplace.formulations.placement.reasons import PendingReason, ReasonCode
from hyperplace.formulations.placement.stoppable import (
    BrokenJob,
    Mover,
    PreemptionCandidate,
    Stoppable,
)
from hyperplace.formulations.placement.views import (
    WHOLE_JOB_GROUP,
    JobView,
    NodeClass,
    NodeView,
    UnitClass,
)

__all__ = [
    "POLICIES",
    "WHOLE_JOB_GROUP",
    "BrokenJob",
    "DomainKey",
    "JobView",
    "ModelParams",
    "Mover",
    "NodeClass",
    "NodeView",
    "PendingReason",
    "PieceVar",
    "PlacementModel",
    "PlacementModelBuilder",
    "PlacementProblem",
    "PreemptionCandidate",
    "ReasonCode",
    "Stoppable",
    "UnitClass",
    "build_model",
    "radius_for",
]
