"""Federation: the HyperJob ``auto`` split across member clusters, decided as placed.

Public surface::

    from hyperplace.federation import federate, load_problem
    problem = load_problem()                 # the seed scenario
    plan = federate(problem, budget_s=10)    # a FederationPlan
    write_manifests(problem, plan, "out/")   # Volcano Jobs, PropagationPolicies, HyperJobs, launch

Modules: ``problem`` (jobs and round data), ``io`` (files, the seed scenario), ``asplaced``
(sub-jobs through the placement engine and the checker), ``pricing`` (step times from the
layer-split cost model), ``shapes`` (candidate shapes per job), ``formulation`` (the
per-round CP-SAT model and greedy data), ``solve`` (the budgeted driver), ``karmada``
(Karmada's division rules, for comparison), ``manifests`` and ``launch`` (what to apply),
``estimate`` (Karmada's estimator question, answered as placed).
"""

from hyperplace.federation.io import load_problem
from hyperplace.federation.problem import FederatedJob, FederationProblem
from hyperplace.federation.solve import federate

__all__ = ["FederatedJob", "FederationProblem", "federate", "load_problem"]
