"""Published peak memory per GPU (``hyperplace/data/published_peak_memory.csv``) against
the cost model's memory per GPU (:func:`hyperplace.costmodel.predict.predict`): what
``bench/bench_fidelity.py`` reports and the tests check. Nothing here is fitted on them."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib import resources

from hyperplace.costmodel.predict import Prediction, predict
from hyperplace.models.presets import model_preset

PEAKS_FILE = "published_peak_memory.csv"
GIB = 2**30


@dataclass(frozen=True)
class PeakRow:
    run: str
    model: str
    gpu: str
    config: dict
    measured_gib: float
    assumed: str
    source: str


def read_peaks() -> list[PeakRow]:
    """The bundled published peaks."""
    text = (resources.files("hyperplace.data") / PEAKS_FILE).read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    out = []
    for r in csv.DictReader(lines):
        config = dict(tp=int(r["tp"]), pp=int(r["pp"]), virtual_stages=int(r["virtual_stages"]),
                      cp=int(r["cp"]), dp=int(r["dp"]), micro_batch=int(r["micro_batch"]),
                      global_batch=int(r["global_batch"]), seq=int(r["seq"]),
                      recompute=r["recompute"] == "full",
                      selective_recompute=r["recompute"] == "selective", zero=int(r["zero"]),
                      precision=r["precision"],
                      sequence_parallel=r["sequence_parallel"] == "yes")
        out.append(PeakRow(run=r["run"], model=r["model"], gpu=r["gpu"], config=config,
                           measured_gib=float(r["measured_gib"]), assumed=r["assumed"],
                           source=r["source"]))
    return out


def predict_peak(row: PeakRow) -> Prediction:
    """The cost model's prediction of one published run's configuration."""
    return predict(model_preset(row.model), row.gpu, **row.config)
