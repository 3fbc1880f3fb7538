"""The peers' per-job placement rules on the current state, behind one small adapter.

Each peer baseline in :mod:`hyperplace.baselines` decides one job at a time
(``_place_job(job, free_state, views)``). The queueing disciplines in
:mod:`hyperplace.sim.policies` call :class:`PeerPlacer` to place *one* job on the free GPUs
of the current round, so a change in how a peer places a job shows up here without touching
the disciplines. (When ``hyperplace.baselines`` exposes a public per-job function, this
module is the one place to switch over.)
"""

from __future__ import annotations

from typing import Callable

from hyperplace.baselines import kueue, slurm, volcano
from hyperplace.baselines.common import ClusterView, FreeState, JobOutcome
from hyperplace.models import Instance, TrainingJob
from hyperplace.models.plan import GPURef

PlaceJob = Callable[[TrainingJob, FreeState, list[ClusterView]], JobOutcome]

RULES: dict[str, PlaceJob] = {
    "volcano": volcano._place_job,
    "kueue": kueue._place_job,
    "slurm": slurm._place_job,
}


def free_state(free: dict[str, list[int]], used: dict[str, int],
               allocatable: dict[str, int]) -> FreeState:
    """A baseline :class:`FreeState` from plain dicts (node -> free GPU indices, ...)."""
    fs = FreeState.__new__(FreeState)
    fs.free = {n: list(v) for n, v in free.items()}
    fs.used = dict(used)
    fs.allocatable = dict(allocatable)
    return fs


class PeerPlacer:
    """One peer's placement rule over an instance's topology (views built once)."""

    def __init__(self, instance: Instance, rule: str):
        if rule not in RULES:
            raise ValueError(f"unknown peer rule {rule!r}; use one of {', '.join(RULES)}")
        self.rule = rule
        self._place = RULES[rule]
        self.views = [ClusterView(c, instance.catalog) for c in instance.clusters]

    def place(self, job: TrainingJob, state: FreeState) -> dict[str, list[GPURef]] | None:
        """Unit name -> GPUs if the rule places ``job`` on ``state`` (which it then updates)."""
        outcome = self._place(job, state, self.views)
        return outcome.units or None
