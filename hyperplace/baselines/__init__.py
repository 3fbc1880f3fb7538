"""Peer baselines: Volcano, Kueue TAS and Slurm's rules, re-implemented from their source.

Each module cites the upstream file and line of every rule it implements; ``gpu_choice``
does the same for which GPUs of a node a pod gets (NVIDIA's device plugin for the
Kubernetes peers, Slurm's gres selection for Slurm). See ``common`` for what the peers see
and what they are blind to.

Rules (``RULES``; the names are stable)
    ``volcano-style``      Volcano allocate + network-topology-aware + binpack, with
                           ``nvidia.com/gpu`` weighted in binpack (the bench's assumption).
    ``volcano-default``    The same with the shipped default weights (GPUs unweighted): every
                           feasible node ties and the choice is random.
    ``kueue-tas-style``    Kueue Topology Aware Scheduling (BestFit for required requests,
                           LeastFreeCapacity for implied ones).
    ``slurm-tree-style``   Slurm ``topology/tree`` with gres ``Links=`` GPU choice.
    ``kueue-quota-style``  Kueue without TAS: quota-only admission, then the kube-scheduler
                           binds pods one by one (random among feasible nodes); a partly
                           bound job holds its GPUs (``plan.objective_terms["held_gpus"]``).

Volcano and the kube-scheduler break ties at random (Go's ``rand`` and map order): run
those over several seeds (:data:`RANDOMISED`). The others are deterministic and ignore
the seed.

Stable API (the over-time simulation builds on it)
    ``RULES[name]``
        a :class:`PeerRule`: ``.place(job, state, views, rng) -> JobOutcome`` places ONE job
        on the current free state and, when it fits, takes its GPUs in ``state``;
        ``.chooser`` names the GPU-index rule its :class:`FreeState` must use.
    :func:`new_state` (instance, rule) -> FreeState
        the free GPUs of an instance, for ``rule``; ``FreeState.release(node, gpus)`` gives
        GPUs back when a job ends, ``FreeState.hold(node, gpus)`` marks them busy.
    :func:`cluster_views` (instance) -> list[ClusterView]
        the topology levels, computed once per instance.
    :func:`place_one` (instance, job, state, rule, seed=0, views=None, rng=None)
        -> ``dict[unit name, list[GPURef]] | None``: one job, placed or not.
    :func:`run_peer` (instance, rule, seed=0) -> PlacementPlan
        the whole queue, one job at a time in queue order.
    ``BASELINES[name](instance, seed=0) -> PlacementPlan``: the same, as callables.
    :data:`RANDOMISED`: the rules whose result depends on the seed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from hyperplace.baselines import kueue, kueue_quota, slurm, volcano
from hyperplace.baselines.common import (
    ClusterView,
    FreeState,
    JobOutcome,
    queue_order,
    run_baseline,
)
from hyperplace.baselines.kueue import kueue_tas_style
from hyperplace.baselines.slurm import slurm_tree_style
from hyperplace.baselines.volcano import VolcanoConfig, volcano_default, volcano_style
from hyperplace.models import Instance, PlacementPlan, TrainingJob
from hyperplace.models.plan import GPURef

PlaceFn = Callable[[TrainingJob, FreeState, list[ClusterView], random.Random], JobOutcome]


@dataclass(frozen=True)
class PeerRule:
    """One peer's per-job placement rule and the GPU-index chooser its nodes use."""

    name: str
    place: PlaceFn
    chooser: str
    randomised: bool


RULES: dict[str, PeerRule] = {
    "volcano-style": PeerRule(
        "volcano-style", partial(volcano.place_job, config=volcano.GPU_BINPACK),
        "device-plugin", True),
    "volcano-default": PeerRule(
        "volcano-default", partial(volcano.place_job, config=volcano.DEFAULT_CONFIG),
        "device-plugin", True),
    "kueue-tas-style": PeerRule("kueue-tas-style", kueue.place_job, "device-plugin", False),
    "slurm-tree-style": PeerRule("slurm-tree-style", slurm.place_job, "slurm-gres", False),
    "kueue-quota-style": PeerRule("kueue-quota-style", kueue_quota.place_job, "device-plugin",
                                  True),
}

RANDOMISED: frozenset[str] = frozenset(n for n, r in RULES.items() if r.randomised)


def cluster_views(instance: Instance) -> list[ClusterView]:
    """The topology levels of every cluster of ``instance`` (compute once, reuse)."""
    return [ClusterView(c, instance.catalog) for c in instance.clusters]


def new_state(instance: Instance, rule: str) -> FreeState:
    """The instance's free GPUs, handed out the way ``rule``'s nodes hand them out."""
    return FreeState(instance, RULES[rule].chooser)


def place_one(instance: Instance, job: TrainingJob, state: FreeState, rule: str,
              seed: int = 0, views: list[ClusterView] | None = None,
              rng: random.Random | None = None) -> dict[str, list[GPURef]] | None:
    """Place ONE job on the current free state with a peer's rule.

    Parameters
    ----------
    instance
        The instance the job and the state belong to (for its clusters).
    job
        The job to place (all its gang units or none).
    state
        Free GPUs now; on success the job's GPUs are taken from it.
    rule
        A key of :data:`RULES`.
    seed, rng
        Random tie-breaking for Volcano: pass ``rng`` to carry one stream across calls,
        else a fresh ``random.Random(seed)`` is used.
    views
        :func:`cluster_views` of the instance, to avoid recomputing them per call.

    Returns
    -------
    dict or None
        Unit name -> GPUs, or None when the rule leaves the job pending.
    """
    peer = RULES[rule]
    outcome = peer.place(job, state, views or cluster_views(instance),
                         rng or random.Random(seed))
    return outcome.units or None


def run_peer(instance: Instance, rule: str, seed: int = 0) -> PlacementPlan:
    """The whole pending queue with ``rule``, one job at a time in queue order."""
    peer = RULES[rule]
    return run_baseline(instance, rule, peer.place, seed, chooser=peer.chooser)


BASELINES: dict[str, Callable[..., PlacementPlan]] = {
    name: partial(run_peer, rule=name) for name in RULES}

__all__ = [
    "BASELINES",
    "RANDOMISED",
    "RULES",
    "ClusterView",
    "FreeState",
    "JobOutcome",
    "PeerRule",
    "VolcanoConfig",
    "cluster_views",
    "kueue_tas_style",
    "new_state",
    "place_one",
    "queue_order",
    "run_peer",
    "slurm_tree_style",
    "volcano_default",
    "volcano_style",
]
