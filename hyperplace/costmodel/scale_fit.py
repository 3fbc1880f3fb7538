"""Fitting the cost model on measured large runs (the fit set), with leave-one-out error.

The fit set (``hyperplace/data/fit_set_large_runs.csv``, one provenance per row) holds
NVIDIA's Megatron-LM SC'21 Table 1 (A100, GPT 1.7B-1T, configurations of the published
``examples/sc21`` scripts) and the Megatron-Core README's H100 weak-scaling table (GPT
2B-462B). Each row is priced by :func:`hyperplace.costmodel.predict.predict` with its
published configuration; the measured step time is the row's FLOPs (SC'21 counts hardware
FLOPs, with the recomputed forward; Megatron-Core model FLOPs) over its GPUs' measured
TFLOP/s.

Per GPU type, four coefficients of the transformer layer's physical form
(:mod:`hyperplace.costmodel.features`) are fitted: ``gemm`` (inverse GEMM efficiency at
the shape's ceiling; the LM head's GEMMs share it), ``attention`` (relative to the
published FlashAttention figure; only where the rows use FlashAttention, else the published
figure is kept), ``elementwise`` (inverse fraction of HBM bandwidth; the head's logits share
it) and ``tpComm``, the exposed share of tensor-parallel communication (``1 − overlap``).
The data-parallel gradient reduction's overlap is the row's configuration
(``overlap_grad_reduce``: under the last micro-batch's backward pass; ``overlap_param_gather``:
the distributed optimizer's parameter all-gather under the first micro-batch's forward, as
the Megatron-Core README says its H100 runs did), not fitted. The
fit minimises squared log errors of step time by Gauss-Newton with a weak pull
(:data:`RIDGE`) towards physical priors (:data:`PRIOR`). Other layer kinds keep the
small-shape (Sailor) fit.

Leave-one-out: every row is predicted by a fit on the other rows of its GPU type; the
errors are stored with the calibration and shown by ``predict`` and the fidelity bench.
"""

from __future__ import annotations

import copy
import csv
import math
import statistics
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from hyperplace.costmodel.calibration import Calibration
from hyperplace.costmodel.features import COLUMNS
from hyperplace.errors import InputError
from hyperplace.models.model_spec import ModelSpec

FIT_SET_FILE = "fit_set_large_runs.csv"
# Types that are the same chip as a fitted one (only the memory differs): same coefficients.
SAME_CHIP = {"A100-80": ("A100-40",)}
FITTED = ("gemm", "attention", "elementwise", "tpComm")
PRIOR = {"gemm": 1.25, "attention": 1.0, "elementwise": 1.3, "tpComm": 1.0}
RIDGE = 0.02
# Bounds of the fitted coefficients: an efficiency never above 100 % of what the shape allows
# (0.8 leaves room for the ceilings being estimates), communication may be all but hidden.
LOWEST = {"gemm": 0.8, "attention": 0.5, "elementwise": 0.5, "tpComm": 0.02}
FIXED_MS = 0.05  # per layer: launches (the ``fixed`` coefficient of fitted types)
ITERATIONS = 8
LOO_ITERATIONS = 3  # from the full fit's coefficients, Gauss-Newton has converged by then
STEP = 0.02


@dataclass
class FitRow:
    run: str
    gpu: str
    spec: ModelSpec
    config: dict[str, Any]
    measured_step_s: float
    measured_tflops: float
    tflops_kind: str
    source: str
    assumed: str

    @property
    def gpus(self) -> int:
        c = self.config
        return c["tp"] * c["pp"] * c["dp"] * c["cp"]


def _flag(text: str) -> bool:
    return text.strip().lower() in ("yes", "true", "full", "1")


def read_fit_set(path: str | Path | None = None) -> list[FitRow]:
    """The fit set (default: bundled); one-line errors name the row and column."""
    if path is None:
        text = (resources.files("hyperplace.data") / FIT_SET_FILE).read_text()
        source = FIT_SET_FILE
    else:
        from hyperplace.io import read_text_limited

        text = read_text_limited(path)  # size limit, valid UTF-8 (binary was a traceback)
        source = str(path)
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    out = []
    for n, r in enumerate(csv.DictReader(lines), start=2):
        try:
            h, L, a = int(r["hidden"]), int(r["layers"]), int(r["heads"])
            spec = ModelSpec(name=r["run"], num_layers=L, hidden_size=h, num_heads=a,
                             ffn_hidden_size=int(r["ffn"]), vocab_size=int(r["vocab"]),
                             seq_length=int(r["seq"]), tie_embeddings=True,
                             flash_attention=_flag(r["flash"]),
                             sequence_parallel=_flag(r["sequence_parallel"]),
                             source=r["source"])
            cfg = dict(tp=int(r["tp"]), pp=int(r["pp"]), dp=int(r["dp"]), cp=int(r["cp"]),
                       virtual_stages=int(r["virtual_stages"]),
                       micro_batch=int(r["micro_batch"]), global_batch=int(r["global_batch"]),
                       recompute=_flag(r["recompute"]), zero=int(r["zero"]),
                       precision=r["precision"].strip(),
                       overlap_grad_reduce=_flag(r["overlap_grad_reduce"]),
                       overlap_param_gather=_flag(r.get("overlap_param_gather") or "no"))
            tflops = float(r["measured_tflops_per_gpu"])
        except (KeyError, ValueError) as exc:
            raise InputError(f"bad fit-set row: {exc}", source=source, path=f"row {n}") from None
        layers = spec.build_layers()
        model_flops = sum(layer.flops for layer in layers) / spec.micro_batch_size
        flops = model_flops * cfg["global_batch"]
        if r["tflops_kind"] == "hardware" and cfg["recompute"]:
            flops *= 4.0 / 3.0
        gpus = cfg["tp"] * cfg["pp"] * cfg["dp"] * cfg["cp"]
        if gpus != int(r["gpus"]):
            raise InputError(f"TP x PP x DP x CP = {gpus}, not the {r['gpus']} GPUs given",
                             source=source, path=f"row {n}")
        out.append(FitRow(run=r["run"], gpu=r["gpu"], spec=spec, config=cfg,
                          measured_step_s=flops / (gpus * tflops * 1e12),
                          measured_tflops=tflops, tflops_kind=r["tflops_kind"],
                          source=r["source"], assumed=r.get("assumed", "")))
    return out


def predict_row(row: FitRow, calibration: Calibration, detail: bool = True):
    """The row's configuration priced with ``calibration``; ``detail=False`` (the fit's
    residuals: thousands of calls reading the step time): no per-layer times, memory
    breakdown or notes (:func:`~hyperplace.costmodel.predict.predict`)."""
    from hyperplace.costmodel.predict import predict

    c = row.config
    return predict(row.spec, row.gpu, tp=c["tp"], pp=c["pp"], dp=c["dp"], cp=c["cp"],
                   virtual_stages=c["virtual_stages"], micro_batch=c["micro_batch"],
                   global_batch=c["global_batch"], recompute=c["recompute"], zero=c["zero"],
                   precision=c["precision"], overlap_grad_reduce=c["overlap_grad_reduce"],
                   overlap_param_gather=c.get("overlap_param_gather", False),
                   calibration=calibration, detail=detail)


def with_coefficients(base: Calibration, gpu: str, values: dict[str, float],
                      held_out: dict[str, Any] | None = None) -> Calibration:
    """A copy of ``base`` whose ``gpu`` transformer/head coefficients are ``values``."""
    cal = copy.copy(base)
    cal.gpus = dict(base.gpus)
    fit, _ = base.fit_for(_catalog_type(gpu))
    fit = copy.deepcopy(fit)
    tr = dict(zip(COLUMNS["transformer"], fit.coefficients["transformer"]))
    tr.update({k: values[k] for k in FITTED})
    tr["fixed"], tr["tpFixed"] = FIXED_MS, 0.0
    hd = dict(zip(COLUMNS["head"], fit.coefficients["head"]))
    hd.update({"gemm": values["gemm"], "logits": values["elementwise"], "fixed": FIXED_MS,
               "tpFixed": 0.0})
    fit.coefficients["transformer"] = [tr[k] for k in COLUMNS["transformer"]]
    fit.coefficients["head"] = [hd[k] for k in COLUMNS["head"]]
    fit.comm_exposure = values["tpComm"]
    if held_out is not None:
        fit.held_out = held_out
    cal.gpus[gpu] = fit
    return cal


def _catalog_type(name: str):
    from hyperplace.models.gpu import default_catalog

    return default_catalog().get(name)


def _residuals(rows: list[FitRow], base: Calibration, gpu: str,
               values: dict[str, float]) -> np.ndarray:
    cal = with_coefficients(base, gpu, values)
    return np.array([math.log(predict_row(r, cal, detail=False).step_time_s / r.measured_step_s)
                     for r in rows])


def fit_type(rows: list[FitRow], base: Calibration, gpu: str,
             start: dict[str, float] | None = None,
             iterations: int = ITERATIONS) -> dict[str, float]:
    """Coefficients for one GPU type from its rows (module docstring); ``start`` warm-starts
    the Gauss-Newton iterations (the leave-one-out refits start from the full fit)."""
    free = [k for k in FITTED if k != "attention" or any(r.spec.flash_attention for r in rows)]
    theta = {k: math.log((start or PRIOR)[k]) for k in FITTED}
    prior = np.array([math.log(PRIOR[k]) for k in free])
    for _ in range(iterations):
        values = {k: math.exp(v) for k, v in theta.items()}
        r0 = _residuals(rows, base, gpu, values)
        jac = np.zeros((len(rows), len(free)))
        for j, k in enumerate(free):
            bumped = dict(values)
            bumped[k] = math.exp(theta[k] + STEP)
            jac[:, j] = (_residuals(rows, base, gpu, bumped) - r0) / STEP
        x = np.array([theta[k] for k in free])
        lhs = jac.T @ jac + RIDGE * np.eye(len(free))
        rhs = -(jac.T @ r0 + RIDGE * (x - prior))
        delta = np.linalg.solve(lhs, rhs)
        delta = np.clip(delta, -0.7, 0.7)
        for j, k in enumerate(free):
            theta[k] = float(np.clip(theta[k] + delta[j], math.log(LOWEST[k]), math.log(5.0)))
        if np.max(np.abs(delta)) < 1e-4:
            break
    return {k: math.exp(v) for k, v in theta.items()}


@dataclass
class RowResult:
    row: FitRow
    predicted_step_s: float
    loo_step_s: float
    predicted_tflops: float
    loo_tflops: float

    @property
    def error(self) -> float:
        return self.predicted_step_s / self.row.measured_step_s - 1

    @property
    def loo_error(self) -> float:
        """Relative error of the held-out throughput (measured / predicted step − 1 flips
        sign: positive means predicted faster than measured)."""
        return self.row.measured_step_s / self.loo_step_s - 1


@dataclass
class FitReport:
    calibration: Calibration
    coefficients: dict[str, dict[str, float]]
    results: list[RowResult] = field(default_factory=list)

    def summary(self, gpu: str | None = None) -> dict[str, float]:
        errs = [abs(r.loo_error) for r in self.results if gpu is None or r.row.gpu == gpu]
        if not errs:
            return {}
        return {"rows": len(errs), "looMedianAbs": statistics.median(errs),
                "looWithin15": sum(e <= 0.15 for e in errs) / len(errs),
                "looMaxAbs": max(errs)}


def fit_scale(base: Calibration, rows: list[FitRow] | None = None,
              loo: bool = True) -> FitReport:
    """Fit every GPU type of the fit set, with leave-one-out predictions."""
    rows = rows if rows is not None else read_fit_set()
    cal = base
    coefficients: dict[str, dict[str, float]] = {}
    results: list[RowResult] = []
    for gpu in sorted({r.gpu for r in rows}):
        mine = [r for r in rows if r.gpu == gpu]
        values = fit_type(mine, base, gpu)
        coefficients[gpu] = values
        full = with_coefficients(base, gpu, values)
        for i, r in enumerate(mine):
            pred = predict_row(r, full, detail=False)
            if loo and len(mine) > 2:
                held = fit_type(mine[:i] + mine[i + 1:], base, gpu, start=values,
                                iterations=LOO_ITERATIONS)
                lpred = predict_row(r, with_coefficients(base, gpu, held), detail=False)
            else:
                lpred = pred
            scale = r.measured_tflops * r.measured_step_s
            results.append(RowResult(r, pred.step_time_s, lpred.step_time_s,
                                     scale / pred.step_time_s, scale / lpred.step_time_s))
        report = FitReport(full, coefficients, results)
        stats = report.summary(gpu)
        held_out = {"fitSet": sorted({r.source.split(" (")[0].split(";")[0] for r in mine}),
                    "runs": [r.run for r in mine], **{k: round(v, 4) for k, v in stats.items()}}
        cal = with_coefficients(cal, gpu, values, held_out=held_out)
        for twin in SAME_CHIP.get(gpu, ()):
            if twin in cal.gpus:
                cal = with_coefficients(cal, twin, values, held_out={
                    **held_out, "sameChipAs": gpu})
    # Types measured only at small shapes (Sailor): priced at scale through the same form
    # with the nearest fitted type's coefficients, and said so.
    fitted = sorted({r.gpu for r in rows} | {t for g in {r.gpu for r in rows}
                                             for t in SAME_CHIP.get(g, ())})
    from hyperplace.costmodel.hardware import nearest_measured

    for name in sorted(set(cal.gpus) - set(fitted)):
        near = nearest_measured(_catalog_type(name), sorted({r.gpu for r in rows}))
        src = cal.gpus[near]
        cal = with_coefficients(cal, name, coefficients[near], held_out={
            **src.held_out, "borrowedFrom": near})
    cal.fitted_on = list(dict.fromkeys([*base.fitted_on,
                                        f"{FIT_SET_FILE} (measured large runs, bundled)"]))
    return FitReport(cal, coefficients, results)
