"""Peer-style baselines: Volcano, Kueue TAS and Slurm's tree rules, one job at a time.

Each takes an :class:`~hyperplace.models.Instance` and returns a
:class:`~hyperplace.models.PlacementPlan` (status ``feasible``, no bound) so the bench can run
the same checker and metrics on them as on the engine. See ``common`` for what they see and
what they are blind to.
"""

from __future__ import annotations

from typing import Callable

from hyperplace.baselines.kueue import kueue_tas_style
from hyperplace.baselines.slurm import slurm_tree_style
from hyperplace.baselines.volcano import volcano_style
from hyperplace.models import Instance, PlacementPlan

BASELINES: dict[str, Callable[[Instance], PlacementPlan]] = {
    "volcano-style": volcano_style,
    "kueue-tas-style": kueue_tas_style,
    "slurm-tree-style": slurm_tree_style,
}

__all__ = ["BASELINES", "kueue_tas_style", "slurm_tree_style", "volcano_style"]
