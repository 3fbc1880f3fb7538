"""Fitted cost-model parameters: what ships in ``hyperplace/data/costmodel_calibration.json``
and what ``hyperplace calibrate`` writes.

A calibration holds, per measured GPU type and layer kind, the non-negative coefficients of
:mod:`hyperplace.costmodel.features`, the forward share of forward+backward time, the pooled
coefficients over all types, the precision each fitted profile ran at, optional step-time
scales learned from observed steps, and where all of it came from. Files carry
``schemaVersion``; another version is refused with its version named, never half-read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from hyperplace.costmodel.features import (
    COLUMNS,
    KINDS,
    TP_COLUMNS,
    LayerShape,
    features,
    selective_recompute_features,
)
from hyperplace.costmodel.hardware import nearest_measured
from hyperplace.errors import InputError
from hyperplace.models.gpu import GPUCatalog, GPUType, default_catalog

SCHEMA_VERSION = 2
KIND = "CostModelCalibration"
DEFAULT_FILE = "costmodel_calibration.json"
MAX_FILE_BYTES = 5_000_000


_FEATURES: dict[tuple, list[float]] = {}


def _cached_features(shape: LayerShape, gpu: GPUType,
                     catalog: GPUCatalog | None) -> list[float]:
    """:func:`features` memoised per (shape, type): the planner and the speed model price the
    same layer shapes many times."""
    key = (shape, gpu)
    hit = _FEATURES.get(key)
    if hit is None:
        if len(_FEATURES) > 200_000:
            _FEATURES.clear()
        hit = _FEATURES[key] = features(shape, gpu, catalog)
    return hit


_RECOMPUTE: dict[tuple, list[float]] = {}


def _cached_recompute(shape: LayerShape, gpu: GPUType) -> list[float]:
    key = (shape, gpu)
    hit = _RECOMPUTE.get(key)
    if hit is None:
        if len(_RECOMPUTE) > 200_000:
            _RECOMPUTE.clear()
        hit = _RECOMPUTE[key] = selective_recompute_features(shape, gpu)
    return hit


@dataclass
class GpuFit:
    """One GPU type's fitted coefficients per layer kind, and what they were fitted on."""

    coefficients: dict[str, list[float]]
    fwd_share: dict[str, float]
    rows: int = 0
    models: list[str] = field(default_factory=list)
    precisions: list[str] = field(default_factory=list)  # what the fitted rows ran at
    # Set by the fit on measured large runs (scale_fit): the exposed share of communication
    # (1 - overlap) and the leave-one-out error of that fit.
    comm_exposure: float | None = None
    held_out: dict[str, Any] = field(default_factory=dict)


@dataclass
class Calibration:
    """Coefficients per GPU type (and pooled), precision notes, observed-step scales."""

    gpus: dict[str, GpuFit]
    pooled: dict[str, list[float]]
    pooled_fwd_share: dict[str, float]
    fitted_on: list[str] = field(default_factory=list)
    precision: dict[str, str] = field(default_factory=dict)  # "MODEL|GPU" -> fp32/bf16
    step_scale: dict[str, float] = field(default_factory=dict)  # "MODEL|GPU" or "*|GPU"
    notes: list[str] = field(default_factory=list)
    created_by: str = ""

    # ----------------------------------------------------------------- evaluation

    def fit_for(self, gpu: GPUType, catalog: GPUCatalog | None = None) -> tuple[GpuFit, str]:
        """This type's fit, or the nearest measured type's (peak-scaled, because every
        feature is relative to the type's own peak and bandwidth), and a sentence saying so."""
        if gpu.name in self.gpus:
            return self.gpus[gpu.name], f"fitted on measured {gpu.name}"
        near = nearest_measured(gpu, sorted(self.gpus), catalog)
        return self.gpus[near], (f"{gpu.name} has no measurement: efficiencies of the nearest "
                                 f"measured type {near}, scaled to {gpu.name}'s peak FLOPs "
                                 "and memory bandwidth")

    def layer_time(self, shape: LayerShape, gpu: GPUType,
                   catalog: GPUCatalog | None = None) -> tuple[float, float, float]:
        """(forward s, backward s, of which TP communication s) of one layer, one micro-batch."""
        fit, _ = self.fit_for(gpu, catalog)
        coef = fit.coefficients[shape.kind]
        row = _cached_features(shape, gpu, catalog)
        total = sum(c * x for c, x in zip(coef, row))
        tp = sum(c * x for c, x, name in zip(coef, row, COLUMNS[shape.kind])
                 if name in TP_COLUMNS)
        share = fit.fwd_share.get(shape.kind, 1 / 3)
        again = 0.0
        if shape.selective_recompute:
            again = sum(c * x for c, x in zip(coef, _cached_recompute(shape, gpu)))
        return total * share, total * (1 - share) + again, tp

    def comm_exposure(self, gpu: GPUType, catalog: GPUCatalog | None = None) -> float:
        """Exposed share of data-parallel communication (1: not overlapped)."""
        fit, _ = self.fit_for(gpu, catalog)
        return 1.0 if fit.comm_exposure is None else fit.comm_exposure

    def scale_for(self, model: str, gpu: str) -> float:
        return self.step_scale.get(f"{model}|{gpu}", self.step_scale.get(f"*|{gpu}", 1.0))

    # ----------------------------------------------------------------- files

    def to_doc(self) -> dict[str, Any]:
        return {
            "schemaVersion": SCHEMA_VERSION,
            "kind": KIND,
            "createdBy": self.created_by,
            "fittedOn": self.fitted_on,
            "notes": self.notes,
            "columns": {k: list(v) for k, v in COLUMNS.items()},
            "pooled": {"coefficients": self.pooled, "fwdShare": self.pooled_fwd_share},
            "gpus": {name: {"coefficients": f.coefficients, "fwdShare": f.fwd_share,
                            "rows": f.rows, "models": f.models, "precisions": f.precisions,
                            **({"commExposure": f.comm_exposure}
                               if f.comm_exposure is not None else {}),
                            **({"heldOut": f.held_out} if f.held_out else {})}
                     for name, f in sorted(self.gpus.items())},
            "precision": dict(sorted(self.precision.items())),
            "stepScale": dict(sorted(self.step_scale.items())),
        }

    @classmethod
    def from_doc(cls, doc: Any, source: str | None = None) -> "Calibration":
        """Read a calibration document; one-line errors name the field."""
        if not isinstance(doc, dict):
            raise InputError("expected a JSON object", source=source)
        version = doc.get("schemaVersion")
        if version != SCHEMA_VERSION:
            raise InputError(f"calibration schema version {version!r} is not supported "
                             f"(this hyperplace reads version {SCHEMA_VERSION}); refit with "
                             "hyperplace calibrate", source=source, path="schemaVersion")
        if doc.get("kind") != KIND:
            raise InputError(f"expected kind {KIND}, got {doc.get('kind')!r}",
                             source=source, path="kind")

        def coeffs(value: Any, path: str, kind: str) -> list[float]:
            if (not isinstance(value, list) or len(value) != len(COLUMNS[kind])
                    or not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0
                               for x in value)):
                raise InputError(f"expected {len(COLUMNS[kind])} non-negative numbers "
                                 f"({', '.join(COLUMNS[kind])})", source=source, path=path)
            return [float(x) for x in value]

        def kinds(value: Any, path: str) -> dict[str, list[float]]:
            if not isinstance(value, dict) or set(value) != set(KINDS):
                raise InputError(f"expected coefficients for {', '.join(KINDS)}",
                                 source=source, path=path)
            return {k: coeffs(value[k], f"{path}.{k}", k) for k in KINDS}

        def shares(value: Any, path: str) -> dict[str, float]:
            if not isinstance(value, dict) or not all(
                    isinstance(v, (int, float)) and 0 <= v <= 1 for v in value.values()):
                raise InputError("expected fractions in [0, 1] by kind", source=source,
                                 path=path)
            return {str(k): float(v) for k, v in value.items()}

        def _exposure(value: Any, path: str) -> float | None:
            if value is None:
                return None
            if not isinstance(value, (int, float)) or not 0 <= value <= 5:
                raise InputError("expected a number in [0, 5]", source=source, path=path)
            return float(value)

        gpus_doc = doc.get("gpus")
        if not isinstance(gpus_doc, dict) or not gpus_doc:
            raise InputError("expected at least one fitted GPU type", source=source,
                             path="gpus")
        catalog = default_catalog()
        gpus = {}
        for name, g in gpus_doc.items():
            if catalog.find(name) is None:
                raise InputError(f"unknown GPU type {name!r}", source=source,
                                 path=f"gpus.{name}")
            if not isinstance(g, dict):
                raise InputError("expected a mapping", source=source, path=f"gpus.{name}")
            gpus[catalog.get(name).name] = GpuFit(
                coefficients=kinds(g.get("coefficients"), f"gpus.{name}.coefficients"),
                fwd_share=shares(g.get("fwdShare", {}), f"gpus.{name}.fwdShare"),
                rows=int(g.get("rows", 0)), models=list(g.get("models", [])),
                precisions=[str(x) for x in g.get("precisions", [])],
                comm_exposure=_exposure(g.get("commExposure"), f"gpus.{name}.commExposure"),
                held_out=dict(g.get("heldOut") or {}))
        pooled = doc.get("pooled") or {}
        scale = doc.get("stepScale", {}) or {}
        for key, value in scale.items():
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise InputError("expected a positive, finite number", source=source,
                                 path=f"stepScale.{key}")
        return cls(
            gpus=gpus,
            pooled=kinds(pooled.get("coefficients"), "pooled.coefficients"),
            pooled_fwd_share=shares(pooled.get("fwdShare", {}), "pooled.fwdShare"),
            fitted_on=[str(x) for x in doc.get("fittedOn", [])],
            precision={str(k): str(v) for k, v in (doc.get("precision") or {}).items()},
            step_scale={str(k): float(v) for k, v in scale.items()},
            notes=[str(x) for x in doc.get("notes", [])],
            created_by=str(doc.get("createdBy", "")),
        )


def load_calibration(path: str | Path | None = None) -> Calibration:
    """A calibration file, or the bundled one when ``path`` is None."""
    if path is None:
        return default_calibration()
    p = Path(path)
    try:
        size = p.stat().st_size
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=str(path)) from None
    if size > MAX_FILE_BYTES:
        raise InputError(f"file is {size:,} bytes; the limit is {MAX_FILE_BYTES:,}",
                         source=str(path))
    try:
        doc = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read: {exc}", source=str(path)) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON at line {exc.lineno}, column {exc.colno}: "
                         f"{exc.msg}", source=str(path)) from None
    return Calibration.from_doc(doc, source=str(path))


@cache
def default_calibration() -> Calibration:
    """The calibration bundled with hyperplace (fitted on Sailor's profiles)."""
    text = (resources.files("hyperplace.data") / DEFAULT_FILE).read_text()
    return Calibration.from_doc(json.loads(text), source=DEFAULT_FILE)


def write_calibration(calibration: Calibration, path: str | Path) -> None:
    """Write whole or not at all (:func:`hyperplace.io.write_atomic`)."""
    from hyperplace.io import write_atomic

    write_atomic(path, json.dumps(calibration.to_doc(), indent=1) + "\n")
