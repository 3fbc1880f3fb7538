"""Fitting the cost model to measured per-layer times (Sailor's profiles) and step times.

Rows: for every (model, GPU type, micro-batch, TP) of a profile, the median forward+backward
time of its transformer layers, its embedding, final norm and LM head, and its optimizer
update, each with the feature row of :mod:`hyperplace.costmodel.features`. Coefficients are
fitted by non-negative least squares on *relative* errors (every row divided by its measured
time, so a 1 ms layer counts as much as a 1 s one): first pooled over all GPU types, then per
type with a ridge pull towards the pooled values, so a type measured on two models only
still gets sensible coefficients.

Two properties of the data are handled explicitly and reported:

* **Precision.** Sailor's profiles do not record their precision, and some clearly ran in
  FP32: every V100 profile and OPT-30 and LLaMA-3-8 on A100-40 stay below the FP32 peak
  (e.g. OPT-30 on A100-40 reaches 17.8 TFLOP/s against A100's 19.5 FP32 peak, while the same
  layers reach 193 TFLOP/s on GH200). :func:`infer_precision` labels a profile FP32 when its
  best transformer layer stays below the type's FP32 peak and either the layer has at least
  50 M parameters (large enough to be compute-bound) or the type has no BF16 (V100). The
  label is an input of the model (``precision``), as a person training a model knows it.
* **Copied profiles.** Sailor's GPT-Neo-2.7 GH-96 profile has 26 layers with OPT-350's
  GH-96 times; a profile whose layer count does not match the model is dropped, with a note.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from hyperplace.costmodel.calibration import Calibration, GpuFit
from hyperplace.costmodel.features import COLUMNS, KINDS, LayerShape, features
from hyperplace.costmodel.hardware import FP32_TFLOPS, SAILOR_GPU
from hyperplace.errors import InputError
from hyperplace.models.gpu import GPUCatalog, default_catalog
from hyperplace.models.profiles import (
    PROFILE_DIMS,
    PROFILE_TRANSFORMER_LAYERS,
    layer_kind,
    llm_info,
    sequence_length,
)

RIDGE = 0.01  # pull of each type's coefficients towards the pooled ones (relative units)
# A pooled coefficient of 0 must not pin the per-type one at 0: the pull is scaled by at
# least this floor.
PRIOR_FLOOR = 0.5
COMPUTE_BOUND_PARAMS = 50e6
PROFILE_COLUMNS = ("model", "gpu_type", "micro_batch_size", "tensor_parallel", "layer",
                   "fwd_s", "bwd_s", "update_s")
MAX_PROFILE_ROWS = 1_000_000


@dataclass(frozen=True)
class Row:
    """One measured time and what it was measured on."""

    model: str
    gpu: str  # catalog name
    micro_batch: int
    tp: int
    kind: str
    time_s: float  # forward+backward (optimizer: the update)
    fwd_share: float
    shape: LayerShape


def read_profile_rows(paths: Iterable[str | Path]) -> list[dict[str, str]]:
    """Sailor-format per-layer rows from CSV files or folders holding
    ``sailor_layer_profiles.csv``; one-line errors name the file and row."""
    out: list[dict[str, str]] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            path = path / "sailor_layer_profiles.csv"
        from hyperplace.io import read_text_limited

        # the file's text whole (size limit, valid UTF-8: a binary file was a traceback)
        with io.StringIO(read_text_limited(path), newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in PROFILE_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(f"missing columns: {', '.join(missing)}", source=str(path),
                                 path="header")
            for n, row in enumerate(reader, start=2):
                if len(out) >= MAX_PROFILE_ROWS:
                    raise InputError(f"more than {MAX_PROFILE_ROWS:,} rows", source=str(path))
                _check_profile_row(row, str(path), n)
                out.append(row)
    return out


def _check_profile_row(row: dict[str, str], source: str, line: int) -> None:
    for col in ("micro_batch_size", "tensor_parallel", "layer"):
        value = (row.get(col) or "").strip()
        if not value.isdigit() or (col != "layer" and int(value) == 0):
            raise InputError(f"{col}: expected a positive integer, got {value!r}",
                             source=source, path=f"row {line}")
    for col in ("fwd_s", "bwd_s", "update_s"):
        try:
            number = float(row.get(col) or "")
        except ValueError:
            raise InputError(f"{col}: expected a number, got {row.get(col)!r}",
                             source=source, path=f"row {line}") from None
        if not math.isfinite(number) or number < 0:
            raise InputError(f"{col}: expected a finite, non-negative time, got {number}",
                             source=source, path=f"row {line}")
    if float(row["fwd_s"]) + float(row["bwd_s"]) <= 0:
        raise InputError("fwd_s + bwd_s must be positive", source=source, path=f"row {line}")


def _achieved_tflops(model: str, tp: int, mb: int, time_s: float) -> float:
    seq = sequence_length(model)
    params = llm_info()[model]["1"]["1"]["params_floats"]
    h = PROFILE_DIMS[model]["hidden_size"]
    flops = 6.0 * mb * seq * params + 12.0 * mb * seq * seq * h
    return flops / (tp * time_s) / 1e12


def infer_precision(rows: list[dict[str, str]], catalog: GPUCatalog | None = None
                    ) -> dict[str, tuple[str, str]]:
    """``MODEL|GPU`` -> (precision, reason) for every profile in ``rows`` (see module doc)."""
    catalog = catalog or default_catalog()
    best: dict[tuple[str, str], float] = defaultdict(float)
    for row in rows:
        model = row["model"]
        if model not in PROFILE_DIMS or not 1 <= int(row["layer"]) <= PROFILE_TRANSFORMER_LAYERS[model]:
            continue
        t = float(row["fwd_s"]) + float(row["bwd_s"])
        key = (model, row["gpu_type"])
        best[key] = max(best[key], _achieved_tflops(model, int(row["tensor_parallel"]),
                                                    int(row["micro_batch_size"]), t))
    out = {}
    for (model, sailor_gpu), tflops in sorted(best.items()):
        gpu = catalog.find(SAILOR_GPU.get(sailor_gpu, sailor_gpu))
        if gpu is None:
            continue
        fp32 = FP32_TFLOPS.get(gpu.family, math.inf)
        params = llm_info()[model]["1"]["1"]["params_floats"]
        large = params >= COMPUTE_BOUND_PARAMS
        no_bf16 = gpu.family == "V100"
        if tflops <= fp32 and (large or no_bf16):
            why = ("no BF16 on V100" if no_bf16 and not large else
                   f"{params / 1e6:.0f} M-parameter layers are compute-bound")
            out[f"{model}|{gpu.name}"] = (
                "fp32", f"best layer {tflops:.1f} TFLOP/s <= FP32 peak {fp32:g}; {why}")
        else:
            out[f"{model}|{gpu.name}"] = ("bf16", f"best layer {tflops:.1f} TFLOP/s")
    return out


def profile_rows_to_fit_rows(rows: list[dict[str, str]], catalog: GPUCatalog | None = None,
                             precision: dict[str, str] | None = None
                             ) -> tuple[list[Row], list[str]]:
    """Medians per (model, GPU, micro-batch, TP, kind) as fitting rows, and notes on what
    was dropped (unknown models or GPU types, profiles whose layer count is wrong)."""
    catalog = catalog or default_catalog()
    notes: list[str] = []
    groups: dict[tuple[str, str, int, int], list[dict[str, str]]] = defaultdict(list)
    skipped_gpus: set[str] = set()
    for row in rows:
        model = row["model"]
        if model not in PROFILE_DIMS:
            raise InputError(f"unknown profiled model {model!r}; the fit knows "
                             f"{', '.join(sorted(PROFILE_DIMS))}", path="model")
        gpu_type = catalog.find(SAILOR_GPU.get(row["gpu_type"], row["gpu_type"]))
        if gpu_type is None:
            skipped_gpus.add(row["gpu_type"])
            continue
        groups[(model, gpu_type.name, int(row["micro_batch_size"]),
                int(row["tensor_parallel"]))].append(row)
    if skipped_gpus:
        notes.append(f"skipped GPU types not in the catalog: {', '.join(sorted(skipped_gpus))}")
    by_profile: dict[tuple[str, str], set[int]] = defaultdict(set)
    for (model, gpu, _, _), rs in groups.items():
        by_profile[(model, gpu)] |= {int(r["layer"]) for r in rs}
    bad = {key for key, layers in by_profile.items()
           if len(layers) != len(llm_info()[key[0]]["1"])}
    for model, gpu in sorted(bad):
        notes.append(f"dropped {model} on {gpu}: {len(by_profile[(model, gpu)])} layers "
                     f"measured but the model has {len(llm_info()[model]['1'])} (a copied "
                     "profile)")
    precision = precision or {}
    out: list[Row] = []
    for (model, gpu, mb, tp), rs in sorted(groups.items()):
        if (model, gpu) in bad:
            continue
        prec = precision.get(f"{model}|{gpu}", "bf16")
        n = len(llm_info()[model]["1"])
        dims = PROFILE_DIMS[model]
        seq = sequence_length(model)
        by_kind: dict[str, list[tuple[float, float, float]]] = defaultdict(list)
        update = []
        for r in rs:
            idx = int(r["layer"])
            layer = layer_kind(model, idx, n)
            fwd, bwd = float(r["fwd_s"]), float(r["bwd_s"])
            params = float(llm_info()[model]["1"][str(idx)]["params_floats"])
            by_kind[layer].append((fwd + bwd, fwd / (fwd + bwd), params))
            if float(r["update_s"]) > 0 and layer == "transformer":
                update.append((float(r["update_s"]), params))
        for kind, values in by_kind.items():
            time_s = statistics.median(v[0] for v in values)
            share = statistics.median(v[1] for v in values)
            params = statistics.median(v[2] for v in values)
            h = dims["hidden_size"]
            if kind == "transformer":
                flops = 6.0 * mb * seq * params + 12.0 * mb * seq * seq * h
            elif kind == "head":
                flops = 6.0 * mb * seq * h * dims["vocab_size"]
            else:
                flops = 0.0
            shape = LayerShape(kind=kind, flops=flops, micro_batch=mb, seq=seq, hidden=h,
                               heads=dims["num_heads"], vocab=dims["vocab_size"], params=params,
                               tp=tp, precision=prec, flash=False)
            out.append(Row(model, gpu, mb, tp, kind, time_s, share, shape))
        if update:
            time_s = statistics.median(u[0] for u in update)
            params = statistics.median(u[1] for u in update)
            shape = LayerShape(kind="optimizer", flops=0.0, micro_batch=mb, seq=seq,
                               hidden=dims["hidden_size"], heads=dims["num_heads"],
                               params=params, tp=tp, precision=prec)
            out.append(Row(model, gpu, mb, tp, "optimizer", time_s, 0.0, shape))
    return out, notes


def nnls(matrix: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Exact non-negative least squares for the few columns a layer kind has: the best
    unconstrained solution over every subset of columns whose solution is non-negative
    (2^n least-squares solves, n <= 7)."""
    n = matrix.shape[1]
    best, best_res = np.zeros(n), float(np.sum(target ** 2))
    for mask in range(1, 1 << n):
        cols = [j for j in range(n) if mask >> j & 1]
        sol = np.linalg.lstsq(matrix[:, cols], target, rcond=None)[0]
        if (sol < 0).any():
            continue
        res = float(np.sum((matrix[:, cols] @ sol - target) ** 2))
        if res < best_res - 1e-15:
            best = np.zeros(n)
            best[cols] = sol
            best_res = res
    return best


def _design(rows: list[Row], catalog: GPUCatalog) -> tuple[np.ndarray, np.ndarray]:
    matrix = np.array([np.array(features(r.shape, catalog.get(r.gpu), catalog)) / r.time_s
                       for r in rows])
    return matrix, np.ones(len(rows))


def fit(rows: list[Row], catalog: GPUCatalog | None = None, ridge: float = RIDGE,
        fitted_on: list[str] | None = None, precision: dict[str, str] | None = None,
        notes: list[str] | None = None) -> Calibration:
    """Coefficients pooled over all types, then per type pulled towards the pooled ones."""
    catalog = catalog or default_catalog()
    pooled: dict[str, list[float]] = {}
    pooled_share: dict[str, float] = {}
    for kind in KINDS:
        kind_rows = [r for r in rows if r.kind == kind]
        if not kind_rows:
            raise InputError(f"no measured {kind} rows to fit", path="profiles")
        matrix, target = _design(kind_rows, catalog)
        pooled[kind] = [float(x) for x in nnls(matrix, target)]
        if kind != "optimizer":
            pooled_share[kind] = float(statistics.median(r.fwd_share for r in kind_rows))
    gpus: dict[str, GpuFit] = {}
    for gpu in sorted({r.gpu for r in rows}):
        coefficients, shares = {}, {}
        for kind in KINDS:
            kind_rows = [r for r in rows if r.kind == kind and r.gpu == gpu]
            prior = np.array(pooled[kind])
            n = len(COLUMNS[kind])
            penalty = math.sqrt(ridge) * np.eye(n) / np.maximum(prior, PRIOR_FLOOR)
            if kind_rows:
                matrix, target = _design(kind_rows, catalog)
                matrix = np.vstack([matrix, penalty])
                target = np.concatenate([target, penalty @ prior])
                coefficients[kind] = [float(x) for x in nnls(matrix, target)]
                if kind != "optimizer":
                    shares[kind] = float(statistics.median(r.fwd_share for r in kind_rows))
            else:
                coefficients[kind] = list(pooled[kind])
                if kind != "optimizer":
                    shares[kind] = pooled_share[kind]
        gpu_rows = [r for r in rows if r.gpu == gpu]
        gpus[gpu] = GpuFit(coefficients=coefficients, fwd_share=shares, rows=len(gpu_rows),
                           models=sorted({r.model for r in gpu_rows}),
                           precisions=sorted({r.shape.precision for r in gpu_rows}))
    return Calibration(gpus=gpus, pooled=pooled, pooled_fwd_share=pooled_share,
                       fitted_on=fitted_on or [], precision=precision or {},
                       notes=notes or [])


def predict_row(calibration: Calibration, row: Row, catalog: GPUCatalog | None = None) -> float:
    """The calibration's forward+backward (or update) time for a fitting row's configuration."""
    catalog = catalog or default_catalog()
    fwd, bwd, _ = calibration.layer_time(row.shape, catalog.get(row.gpu), catalog)
    return fwd + bwd


def fit_profiles(paths: Iterable[str | Path] | None = None, *, ridge: float = RIDGE,
                 exclude: set[tuple[str, str]] | None = None,
                 exclude_gpus: set[str] | None = None) -> tuple[Calibration, list[Row]]:
    """Fit on profile files (default: the bundled Sailor profiles); returns the calibration
    and all rows (held-out ones included, for scoring)."""
    from hyperplace.models.profiles import layer_rows

    if paths is None:
        raw = layer_rows()
        sources = ["Sailor sailor_layer_profiles.csv (bundled, eth-easl/sailor, MIT)"]
    else:
        paths = list(paths)
        raw = read_profile_rows(paths)
        sources = [str(p) for p in paths]
    labels = infer_precision(raw)
    precision = {k: v[0] for k, v in labels.items()}
    rows, notes = profile_rows_to_fit_rows(raw, precision=precision)
    notes += [f"precision {k}: {v[0]} ({v[1]})" for k, v in sorted(labels.items())
              if v[0] != "bf16"]
    train = [r for r in rows if (r.model, r.gpu) not in (exclude or set())
             and r.gpu not in (exclude_gpus or set())]
    calibration = fit(train, ridge=ridge, fitted_on=sources, precision=precision, notes=notes)
    return calibration, rows
