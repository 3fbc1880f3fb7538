"""GPU speeds for placement policies from a calibration (``solve --policy performance
--calibration FILE``).

The placement policy ranks GPU types by ``bf16_tflops × mfu``. With a calibration, ``mfu``
becomes the efficiency the fitted model predicts on a reference layer (a llama3-70b
transformer layer, one 4,096-token sequence, TP 8, BF16, FlashAttention), so the ranking
follows what was measured rather than the catalog's planning constants.
"""

from __future__ import annotations

from hyperplace.costmodel.calibration import Calibration
from hyperplace.costmodel.layers import stage_layer_times
from hyperplace.models.gpu import GPUCatalog, GPUType
from hyperplace.models.instance import Instance
from hyperplace.models.presets import model_preset

REFERENCE_MODEL = "llama3-70b"
REFERENCE_SEQ = 4096
REFERENCE_TP = 8


def calibrated_mfu(gpu: GPUType, calibration: Calibration,
                   catalog: GPUCatalog | None = None) -> float:
    """Predicted model-FLOPs utilisation of ``gpu`` on the reference layer, in (0, 1]."""
    model = model_preset(REFERENCE_MODEL).model_copy(update={"seq_length": REFERENCE_SEQ,
                                                             "num_layers": 3})
    layers = model.build_layers()
    times = stage_layer_times(model, layers, gpu, REFERENCE_TP, 1, calibration=calibration,
                              catalog=catalog)
    seconds = float(times.total[1])
    mfu = layers[1].flops / (seconds * REFERENCE_TP * gpu.bf16_tflops * 1e12)
    return min(1.0, max(1e-3, mfu))


def with_calibrated_speeds(instance: Instance, calibration: Calibration) -> Instance:
    """A copy of ``instance`` whose GPU types (built-in and declared) carry calibrated
    ``mfu``; everything else unchanged."""
    catalog = instance.catalog
    types = [t.model_copy(update={"mfu": calibrated_mfu(t, calibration, catalog)})
             for t in catalog]
    return instance.model_copy(update={"spec": instance.spec.model_copy(
        update={"gpu_types": types})})
