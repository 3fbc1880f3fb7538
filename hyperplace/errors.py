"""One error type for bad input, so the CLI and the service can report it in one line."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError


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


def from_validation_error(
    exc: ValidationError, *, source: str | None = None, prefix: str = ""
) -> InputError:
    """The first problem of a pydantic error as an :class:`InputError` (one line, one fix)."""
    err = exc.errors()[0]
    loc = [p for p in err.get("loc", ()) if not (isinstance(p, str) and p.startswith("function-"))]
    path = field_path(loc)
    if prefix:
        path = f"{prefix}.{path}" if path and not path.startswith("[") else f"{prefix}{path}"
    msg = err.get("msg", "invalid value")
    if err.get("type") == "extra_forbidden":
        msg = "unknown field"
    elif err.get("type") == "missing":
        msg = "required field is missing"
    extra = len(exc.errors()) - 1
    if extra:
        msg += f" (and {extra} more problem{'s' if extra > 1 else ''})"
    return InputError(msg, source=source, path=path or None)
