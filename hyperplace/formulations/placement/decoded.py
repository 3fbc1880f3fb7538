"""What every solver produces: the placed units per admitted job (:class:`Assignment`,
:class:`PlacedUnit`). Below the mapping back (:mod:`hyperplace.formulations.mapping`) and the
round extensions, which both read and write them."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field


@dataclass
class PlacedUnit:
    """One gang unit placed: its class, its name, and its GPUs per node (one piece each)."""

    uclass: int
    unit: str
    pieces: list[tuple[str, tuple[int, ...]]]  # (node, GPUs) per piece


@dataclass
class Assignment:
    """What every solver produces: placed units per admitted job, and for jobs the mapping
    back had to drop, why."""

    units: dict[int, list[PlacedUnit]] = field(default_factory=dict)  # job index -> units
    notes: dict[int, str] = field(default_factory=dict)  # job index -> why it was dropped
    stopped: set[int] = field(default_factory=set)  # stopped running jobs (problem.stoppable)
    #: pending jobs no search tried before the deadline (greedy cut short), so that their
    #: explanation says so instead of blaming other jobs
    untried: set[int] = field(default_factory=set)

    def used(self) -> dict[str, set[int]]:
        """GPUs in use per node."""
        out: dict[str, set[int]] = defaultdict(set)
        for units in self.units.values():
            for u in units:
                for node, gpus in u.pieces:
                    out[node].update(gpus)
        return out
