"""Federation over time: a multi-cluster instance replayed with a global queue.

The simulator (:mod:`hyperplace.sim.simulator`) replays a federation instance (two or more
member clusters joined by WAN links) under a policy of this package, by name:

* ``engine-federated`` (:mod:`~hyperplace.fedsim.planned`): one global queue planned by
  the planning engine's schedule over every member (which member and when, reservations,
  the fill between rounds), and a split across member clusters (pipeline stages or
  data-parallel replicas, by :func:`hyperplace.federation.federate`) of a job the schedule
  leaves waiting when that finishes it sooner, on the GPUs the schedule leaves free;
* ``engine-federated-rounds`` (:mod:`~hyperplace.fedsim.engine`, a baseline): the round
  engine it replaced, each round :func:`~hyperplace.federation.federate` on the window of
  the global queue, one EASY-style reservation;
* ``karmada-aggregated``, ``karmada-dynamic``, ``karmada-static``
  (:mod:`~hyperplace.fedsim.karmada`): Karmada's replica division into per-cluster queues,
  each member running its own local scheduler (Kueue BestEffortFIFO with TAS's rule).

``SimConfig.federation_split`` (``simulate --federation-split/--no-federation-split``, the
what-if axis ``federationSplit``) turns splitting off for all of them (the policy names then
end in ``-whole``); the ``-whole`` names (``engine-federated-whole``, ...) also name them
with splits off, so one ``simulate`` can replay a policy with and without splits. A split job's speed is the federation pricing's
(:mod:`~hyperplace.fedsim.common`); it holds its GPUs in every member until it ends. Every
round's per-cluster plan goes through the independent checker when the replay checks.
An instance with one cluster is refused (``spec.clusters``).

This package sits above both ``hyperplace.federation`` and ``hyperplace.sim`` (it uses the
one and drives the other), below benchkit, the service and the commands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hyperplace.fedsim.common import require_federation
from hyperplace.fedsim.engine import RoundFederatedEngine
from hyperplace.fedsim.karmada import KarmadaDivision

if TYPE_CHECKING:
    from hyperplace.models import Instance
    from hyperplace.sim.policies import Policy
    from hyperplace.sim.simulator import SimConfig


def __getattr__(name: str):
    # the planning engine's modules are imported only by a replay that runs it: a Karmada
    # replay's cache key (bench/bench_simulate.py) holds every module it imported
    if name == "FederatedEngine":
        from hyperplace.fedsim.planned import FederatedEngine

        return FederatedEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def engine_federated(instance: Instance, config: SimConfig) -> Policy:
    from hyperplace.fedsim.planned import FederatedEngine
    from hyperplace.sim.simulator import planning_settings

    return FederatedEngine(instance, budget_s=config.budget_s, split=config.federation_split,
                           solver=config.solver, seed=config.seed,
                           planning=planning_settings(config))


def engine_federated_rounds(instance: Instance, config: SimConfig) -> Policy:
    return RoundFederatedEngine(instance, budget_s=config.budget_s,
                                split=config.federation_split, aging_s=config.aging_s,
                                solver=config.solver, seed=config.seed)


def karmada_aggregated(instance: Instance, config: SimConfig) -> Policy:
    return KarmadaDivision(instance, "aggregated", split=config.federation_split,
                           seed=config.seed)


def karmada_dynamic(instance: Instance, config: SimConfig) -> Policy:
    return KarmadaDivision(instance, "dynamic", split=config.federation_split, seed=config.seed)


def karmada_static(instance: Instance, config: SimConfig) -> Policy:
    return KarmadaDivision(instance, "static", split=config.federation_split, seed=config.seed)


class _Whole:
    """The factory with splits off whatever the run's ``federation_split`` (``-whole``); a
    module-level class, not a closure, so that it pickles (whatif's workers receive the
    policies by pickle)."""

    def __init__(self, factory):
        self.factory = factory

    def __call__(self, instance: Instance, config: SimConfig) -> Policy:
        import dataclasses

        return self.factory(instance, dataclasses.replace(config, federation_split=False))


#: Policy name -> factory(instance, config), for ``run_simulation(extra=...)``; the
#: ``-whole`` names are the same policies with splits off, so one run can replay both.
POLICIES = {"engine-federated": engine_federated,
            "engine-federated-rounds": engine_federated_rounds,
            "karmada-aggregated": karmada_aggregated,
            "karmada-dynamic": karmada_dynamic, "karmada-static": karmada_static}
POLICIES.update({f"{name}-whole": _Whole(f) for name, f in list(POLICIES.items())})

__all__ = ["POLICIES", "FederatedEngine", "KarmadaDivision", "RoundFederatedEngine",
           "require_federation"]
