"""The fitted cost model: what a layer, a pipeline stage and a training step cost.

One implementation for every decision that ranks options by predicted time: the layer split
(``hyperplace split``), ``hyperplace predict``, the federation's pricing and the performance
policy. Modules:

* :mod:`~hyperplace.costmodel.features`: the physical terms of a layer's time;
* :mod:`~hyperplace.costmodel.fit`: fitting their coefficients to measured profiles;
* :mod:`~hyperplace.costmodel.calibration`: the fitted parameters as a versioned file;
* :mod:`~hyperplace.costmodel.layers`: per-layer times of a model on a stage;
* :mod:`~hyperplace.costmodel.collectives`, :mod:`~hyperplace.costmodel.hardware`: links,
  collectives, peaks and measured intra-node bandwidths;
* :mod:`~hyperplace.costmodel.predict`: one configuration's step time and its parts;
* :mod:`~hyperplace.costmodel.observations`: observed step times as feedback;
* :mod:`~hyperplace.costmodel.speed`: THE speed model (how fast a job runs on a placement).
"""

from hyperplace.costmodel.calibration import (
    SCHEMA_VERSION,
    Calibration,
    default_calibration,
    load_calibration,
    write_calibration,
)
from hyperplace.costmodel.layers import LayerTimes, stage_layer_times

__all__ = ["SCHEMA_VERSION", "Calibration", "LayerTimes", "default_calibration",
           "load_calibration", "stage_layer_times", "write_calibration"]
