"""The peers' per-job placement rules on the current state (``hyperplace.baselines`` API).

The queueing disciplines in :mod:`hyperplace.sim.policies` place *one* job at a time on the
free GPUs of the current round with a peer's rule: :data:`hyperplace.baselines.RULES`
(``PeerRule.place``), on a :class:`~hyperplace.baselines.FreeState` built for that rule's
GPU chooser. Volcano breaks ties at random: each policy run carries one seeded stream.
"""

from __future__ import annotations

import random

from hyperplace.baselines import RULES, FreeState, cluster_views, new_state
from hyperplace.models import Instance, TrainingJob
from hyperplace.models.plan import GPURef

# the simulation's short rule names -> hyperplace.baselines.RULES keys
RULE_NAMES = {"volcano": "volcano-style", "kueue": "kueue-tas-style",
              "slurm": "slurm-tree-style"}

#: checker codes of job rules a peer's upstream cannot express (its starts may break them;
#: a replay counts them as the job's ``rule_breaks``): Slurm's ``--switches`` is one limit
#: on the whole allocation that gives way after ``max_switch_wait`` and its tree plugin has
#: no constraint for a spine (:mod:`hyperplace.baselines.slurm`), so a unit's and the
#: replicas' hop limits may be broken; Kueue TAS keeps each PodSet in its domain, but a
#: job whose resource groups are pods of different templates is several PodSets, each in
#: its own domain (:func:`hyperplace.baselines.kueue.podsets`), so its between-replica
#: limit may be broken. Volcano (hard network-topology mode) keeps every hop limit here.
TOLERATED = {"slurm-tree-style": frozenset({"hop-count", "replica-hop-count"}),
             "kueue-tas-style": frozenset({"replica-hop-count"})}


class PeerPlacer:
    """One peer's placement rule over an instance's topology (views built once)."""

    def __init__(self, instance: Instance, rule: str, seed: int = 0):
        key = RULE_NAMES.get(rule, rule)
        if key not in RULES:
            raise ValueError(f"unknown peer rule {rule!r}; use one of {', '.join(RULE_NAMES)}")
        self.rule = key
        self.peer = RULES[key]
        self.tolerated = TOLERATED.get(key, frozenset())
        self.views = cluster_views(instance)
        self.rng = random.Random(f"{key}-{seed}")
        self._accepted: dict[str, tuple[str, ...]] = {}
        # Kueue's and Slurm's rules draw nothing at random: a job they cannot place by count
        # may be skipped without asking them (Volcano's draws would shift)
        self.deterministic = key in ("kueue-tas-style", "slurm-tree-style")

    def tolerates(self, code: str, job: TrainingJob, waited_s: float) -> bool:
        """Whether this rule's upstream may break the checker rule ``code`` for ``job``,
        which has waited ``waited_s`` (:data:`TOLERATED`): Slurm keeps a ``--switches=1``
        job (a between-replica limit of 1) to one leaf until ``max_switch_wait``, so a
        break before then is a fault of the rule, not Slurm's behaviour."""
        if code not in self.tolerated:
            return False
        if self.rule == "slurm-tree-style" and code == "replica-hop-count":
            from hyperplace.baselines.slurm import MAX_SWITCH_WAIT_S

            limit = job.between_replicas.max_hop_count
            return limit is None or limit >= 2 or waited_s >= MAX_SWITCH_WAIT_S
        return True

    def accepted_nodes(self, name: str, job: TrainingJob) -> tuple[str, ...]:
        """Nodes of a GPU type the job accepts (cached per job name)."""
        got = self._accepted.get(name)
        if got is None:
            from hyperplace.baselines.common import eligible_nodes

            units = job.units()
            got = self._accepted[name] = tuple(sorted(
                {n for view in self.views for n in eligible_nodes(view, units)}))
        return got

    def cannot_fit(self, name: str, job: TrainingJob, state: FreeState, gpus: int) -> bool:
        """True when this rule surely cannot place the job now: it draws nothing at random
        and fewer than ``gpus`` GPUs of the types it accepts are free (no rule places a
        job on fewer GPUs than it asks). False: ask :meth:`place`."""
        return self.deterministic and sum(
            len(state.free[n]) for n in self.accepted_nodes(name, job)) < gpus

    def state(self, round_instance: Instance,
              free: dict[str, list[int]] | None = None) -> FreeState:
        """The round's free GPUs for this rule (``free`` overrides the per-node lists)."""
        fs = new_state(round_instance, self.rule)
        if free is not None:
            for n, gpus in free.items():
                fs.used[n] += len(fs.free[n]) - len(gpus)
                fs.free[n] = list(gpus)
        return fs

    def state_from(self, base: FreeState, free: dict[str, list[int]]) -> FreeState:
        """A copy of ``base`` (a :meth:`state` of this round) with these free GPUs."""
        fs = base.copy()
        for n, gpus in free.items():
            fs.used[n] += len(fs.free[n]) - len(gpus)
            fs.free[n] = list(gpus)
        return fs

    def place(self, job: TrainingJob, state: FreeState) -> dict[str, list[GPURef]] | None:
        """Unit name -> GPUs if the rule places ``job`` (``state`` then holds them)."""
        outcome = self.peer.place(job, state, self.views, self.rng)
        return outcome.units or None
