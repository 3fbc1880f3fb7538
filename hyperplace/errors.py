"""One error type for bad input, so the CLI and the service can report it in one line."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError


class InputError(ValueError):
    """Input a person must fix: names the file, the field path and what is wrong."""

    def __init__(self, message: str, *, source: str | None = None, path: str | None = None):
        self.source = source
        self.path = path
        self.message = message
        super().__init__(self.one_line())

    def one_line(self) -> str:
        where = ": ".join(p for p in (self.source, self.path) if p)
        return f"{where}: {self.message}" if where else self.message


class DeprecatedKey(FutureWarning):
    """A file used a key's old spelling: it is read, and the warning (one ``warning:`` line
    from the CLI) names the file, the path and the key to write now."""


class ConflictError(InputError):
    """Valid input that contradicts the current state (a GPU another job holds, a job already
    queued): the service answers 409 rather than 422."""


def known_words(value: str, names: Sequence[str], shown: int = 3) -> str:
    """A short "what is known" for an unknown name, to keep an error on one short line:
    the closest known names (else the first few) and how many there are, e.g.
    ``21 known, closest: H100-80, H200-141`` (a whole list made lines of 200-300 columns)."""
    import difflib

    names = list(names)
    close = difflib.get_close_matches(value, names, n=shown, cutoff=0.4)
    if len(names) <= shown:
        return "known: " + ", ".join(names)
    if close:
        return f"{len(names)} known, closest: " + ", ".join(close)
    return f"{len(names)} known, e.g. " + ", ".join(names[:shown])


def field_path(loc: Sequence[int | str]) -> str:
    """Render a pydantic location tuple as ``spec.resourceGroups[0].gpusPerGroup``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


_CONTAINERS = (list, tuple, dict, set, frozenset)


def _model_in(tp: Any) -> Any:
    """The pydantic model an annotation is (through Optional, Annotated and unions)."""
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    if get_origin(tp) in _CONTAINERS:
        return None
    return next((m for m in map(_model_in, get_args(tp)) if m is not None), None)


def _element(tp: Any) -> Any:
    """The element (value) type of a list, tuple or dict annotation, or None."""
    if get_origin(tp) in _CONTAINERS:
        return get_args(tp)[-1]
    return next((e for e in map(_element, get_args(tp)) if e is not None), None)


def fields_at(model: Any, loc: Sequence[int | str]) -> list[str]:
    """The keys (aliases) the model accepts at ``loc`` (a pydantic location), or [] where
    no model is (a dict's keys, a union's tag)."""
    tp: Any = model
    for part in loc:
        m = _model_in(tp)
        if m is not None and isinstance(part, str):
            info = next((f for n, f in m.model_fields.items() if part in (n, f.alias)), None)
            if info is None:
                return []
            tp = info.annotation
        else:
            tp = _element(tp)
            if tp is None:
                return []
    m = _model_in(tp)
    return [f.alias or n for n, f in m.model_fields.items()] if m is not None else []


def problem_message(err: Mapping[str, Any], errors: Sequence[Mapping[str, Any]],
                    model: Any = None) -> str:
    """One pydantic problem in words: ``unknown field 'gpuTyp' (did you mean 'gpuType'?)``
    (the closest required field missing beside it, else the model's closest field),
    ``required field is missing``, else pydantic's own message."""
    import difflib

    kind = err.get("type")
    if kind == "missing":
        return "required field is missing"
    if kind != "extra_forbidden":
        return str(err.get("msg", "invalid value"))
    loc = tuple(err.get("loc", ()))
    key, parent = str(loc[-1]) if loc else "?", loc[:-1]
    missing = [str(e["loc"][-1]) for e in errors if e.get("type") == "missing"
               and tuple(e.get("loc", ()))[:-1] == parent]
    close = difflib.get_close_matches(key, missing, n=1, cutoff=0.6)
    if not close and model is not None:
        loc_in_model = [p for p in parent if not (isinstance(p, str) and p.startswith("function-"))]
        close = difflib.get_close_matches(key, fields_at(model, loc_in_model), n=1, cutoff=0.6)
    return f"unknown field {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")


def first_problem(errors: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The problem to tell first: a required field missing beside an unknown one is a typo,
    so the unknown key (where the person wrote it) goes first."""
    first = errors[0]
    if first.get("type") == "missing":
        parent = tuple(first.get("loc", ()))[:-1]
        for e in errors:
            if e.get("type") == "extra_forbidden" and tuple(e.get("loc", ()))[:-1] == parent:
                return e
    return first


def typos_first(errors: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The problems with :func:`first_problem` first (for a service's list of problems)."""
    if not errors:
        return []
    first = first_problem(errors)
    return [first, *(e for e in errors if e is not first)]


def from_validation_error(
    exc: ValidationError, *, source: str | None = None, prefix: str = "", model: Any = None
) -> InputError:
    """The first problem of a pydantic error as an :class:`InputError` (one line, one fix);
    ``model`` (the model validated) lets an unknown field name its closest known one."""
    errors = exc.errors()
    err = first_problem(errors)
    loc = [p for p in err.get("loc", ()) if not (isinstance(p, str) and p.startswith("function-"))]
    path = field_path(loc)
    if prefix:
        path = f"{prefix}.{path}" if path and not path.startswith("[") else f"{prefix}{path}"
    msg = problem_message(err, errors, model)
    extra = len(errors) - 1
    if extra:
        msg += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return InputError(msg, source=source, path=path or None)
