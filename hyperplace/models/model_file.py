"""Reading a ModelSpec from a YAML or JSON document, with one-line errors naming the file."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from hyperplace.errors import InputError, from_validation_error, known_words
from hyperplace.io import load_documents
from hyperplace.models.gpu import GPUCatalog, default_catalog
from hyperplace.models.model_spec import MeasuredTime, ModelSpec


# A field path a model validator put at the start of its message ("layerOverrides[2].index: ").
_PATH_PREFIX = re.compile(r"^([A-Za-z_]\w*(?:\[\d+\])*(?:\.[A-Za-z_]\w*(?:\[\d+\])*)*): (.+)$",
                          re.S)


def input_error_from_validation(exc: ValidationError, *, source: str | None = None,
                                prefix: str = "") -> InputError:
    """A pydantic error as one line, with a model validator's field path moved into the path.

    Pydantic reports ``raise ValueError("layerOverrides[2].index: ...")`` from a model
    validator at the model's own location, as ``Value error, layerOverrides[2].index: ...``;
    people need ``spec.layerOverrides[2].index: ...`` and no "Value error" noise.
    """
    err = from_validation_error(exc, source=source, prefix=prefix)
    message = err.message.removeprefix("Value error, ")
    path = err.path
    match = _PATH_PREFIX.match(message)
    if match:
        sub, message = match.group(1), match.group(2)
        path = sub if not path else (f"{path}{sub}" if sub.startswith("[") else f"{path}.{sub}")
    return InputError(message.splitlines()[0], source=err.source, path=path)


def model_from_doc(doc: Any, source: str | None = None,
                   catalog: GPUCatalog | None = None) -> ModelSpec:
    """Read ``{apiVersion: hyperplace/v1, kind: ModelSpec, metadata: {name}, spec: {...}}``.

    A bare spec mapping (with ``name``) is accepted too, so quick files stay short. Measured
    times must name GPU types the catalog knows: a time filed under a name no stage can
    match would otherwise be ignored without a word.
    """
    if not isinstance(doc, dict):
        raise InputError("expected a mapping (apiVersion/kind/metadata/spec)", source=source)
    if "spec" in doc or "kind" in doc:
        if doc.get("apiVersion", "hyperplace/v1") != "hyperplace/v1":
            raise InputError(f"unsupported apiVersion {doc.get('apiVersion')!r}",
                             source=source, path="apiVersion")
        if doc.get("kind", "ModelSpec") != "ModelSpec":
            raise InputError(f"expected kind ModelSpec, got {doc.get('kind')!r}",
                             source=source, path="kind")
        extra = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
        if extra:
            raise InputError("unknown field", source=source, path=sorted(extra)[0])
        spec = doc.get("spec")
        if not isinstance(spec, dict):
            raise InputError("required field is missing" if spec is None
                             else "expected a mapping", source=source, path="spec")
        meta = doc.get("metadata") or {}
        body = dict(spec)
        if "name" not in body and isinstance(meta, dict) and meta.get("name"):
            body["name"] = meta["name"]
        prefix = "spec"
    else:
        body, prefix = doc, ""
    try:
        model = ModelSpec.model_validate(body)
    except ValidationError as exc:
        raise input_error_from_validation(exc, source=source, prefix=prefix) from None
    return _canonical_measured_gpu_types(model, catalog or default_catalog(), source, prefix)


def _canonical_measured_gpu_types(model: ModelSpec, catalog: GPUCatalog, source: str | None,
                                  prefix: str) -> ModelSpec:
    """Measured times filed under catalog names (``H100`` -> ``H100-80``), since stages are
    matched to measurements by catalog name; an unknown name is an error."""
    head = f"{prefix}." if prefix else ""

    def canonical(measured: list[MeasuredTime], where: str) -> list[MeasuredTime]:
        out = []
        for j, m in enumerate(measured):
            gpu = catalog.find(m.gpu_type)
            if gpu is None:
                raise InputError(
                    f"unknown GPU type {m.gpu_type!r} ({known_words(m.gpu_type, catalog.names())})",
                    source=source, path=f"{head}{where}.measured[{j}].gpuType")
            out.append(m.model_copy(update={"gpu_type": gpu.name}))
        return out

    update: dict[str, Any] = {}
    if model.layers is not None:
        update["layers"] = [layer.model_copy(update={
            "measured": canonical(layer.measured, f"layers[{i}]")})
            for i, layer in enumerate(model.layers)]
    update["layer_overrides"] = [o if o.measured is None else o.model_copy(update={
        "measured": canonical(o.measured, f"layerOverrides[{i}]")})
        for i, o in enumerate(model.layer_overrides)]
    return model.model_copy(update=update)


def load_model_file(path: str | Path) -> ModelSpec:
    """A ModelSpec from a YAML or JSON file, with one-line errors naming the file."""
    docs = load_documents(path)
    if len(docs) > 1:
        raise InputError(f"expected one ModelSpec document, found {len(docs)}", source=str(path))
    return model_from_doc(docs[0], source=str(path))
