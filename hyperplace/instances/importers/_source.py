"""Where importer input comes from: a path on disk or a file bundled with the package.

Importers accept either, so tests and bundled instances read the package-data copies through
``importlib.resources`` (which also works from a wheel or a zip) while users pass paths.
"""

from __future__ import annotations

import os
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from hyperplace.errors import InputError

Source = str | os.PathLike[str] | Traversable


def bundled(category: str, name: str) -> Traversable:
    """A data file shipped with hyperplace, e.g. ``bundled("topology", "azure_ndv4-topo.xml")``."""
    return resources.files("hyperplace.data") / category / name


def source_name(source: Source) -> str:
    """What error messages call the input: the path as given, or the bundled file's name."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return f"<bundled>/{source.name}"


def read_text(source: Source) -> tuple[str, str]:
    """(text, name for messages); a missing, unreadable or empty file is an InputError."""
    from hyperplace.io import is_stdin, read_text_limited

    if is_stdin(source):
        text = read_text_limited(source)
        if not text.strip():
            raise InputError("file is empty", source="<stdin>")
        return text, "<stdin>"
    name = source_name(source)
    target: Traversable | Path = Path(source) if isinstance(source, (str, os.PathLike)) else source
    if not target.is_file():
        raise InputError("no such file" if not target.is_dir() else "is a directory, expected a file",
                         source=name)
    try:
        raw = target.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=name) from None
    text = raw.decode("utf-8", errors="replace")
    if not text.strip():
        raise InputError("file is empty", source=name)
    return text, name
