"""Reading and writing documents (YAML or JSON) with one-line errors for bad input.

Inputs have documented limits, refused at once with the limit named (see ``README.md``,
"Limits"): a file holds at most :data:`MAX_INPUT_BYTES` bytes, YAML aliases expand to at
most :data:`MAX_ALIASES` references and :data:`MAX_EXPANDED_NODES` values in all, mappings
and lists nest at most :data:`MAX_DEPTH` levels, text is UTF-8, and a mapping never repeats a
key (YAML would keep the last one without a word). The service (``hyperplace serve``) applies
the same depth limit to every request body, checked before the body is parsed.

Outputs are written whole or not at all: :func:`write_atomic` writes a temporary file in the
target's directory and renames it into place, so a full disk or Ctrl-C leaves the previous
file as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any, TypeVar

import pydantic_core
import yaml
from pydantic import BaseModel, ValidationError

from hyperplace.errors import InputError, from_validation_error

try:  # the C parser is ~10x faster on large generated instances
    _BaseLoader: Any = yaml.CSafeLoader
    _Dumper: Any = yaml.CSafeDumper
except AttributeError:  # pragma: no cover - pyyaml without libyaml
    _BaseLoader = yaml.SafeLoader
    _Dumper = yaml.SafeDumper

M = TypeVar("M", bound=BaseModel)

#: Largest input file read (bytes). A 131,072-GPU generated instance is about 10 MB.
MAX_INPUT_BYTES = 64 * 1024 * 1024
#: Most YAML alias references (``*name``) in one file.
MAX_ALIASES = 10_000
#: Most values (mappings, lists and scalars) a file may hold once its aliases are expanded.
MAX_EXPANDED_NODES = 5_000_000
#: Deepest nesting of mappings and lists in one document (a bundled instance nests 8 levels,
#: a Kubernetes Pod about 12); deeper input is refused before anything recurses over it.
MAX_DEPTH = 64

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(_BaseLoader):
    """The safe loader (C parser where available) that refuses a key repeated in a mapping.

    Only the constructor is Python in ``CSafeLoader``, so overriding ``construct_mapping``
    works with either parser. Keys brought in by a ``<<`` merge may be overridden, as YAML
    intends; a key written twice in the same mapping may not.
    """

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == _MERGE_TAG:
                    continue
                if isinstance(key_node, yaml.ScalarNode):  # cheap: no second construction
                    key: Any = (key_node.tag, key_node.value)
                else:
                    key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:  # unhashable key: the base class reports it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {_key_text(key)!r} (YAML would keep only the last)",
                        key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._tags: dict[tuple[Any, Any, Any], Any] = {}

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        """The resolver's tag, remembered per (kind, value, implicit): it depends on nothing
        else while the loader has no path resolvers (the safe loader has none), and a
        generated instance repeats a few thousand values over a million scalars."""
        key = (kind, value, implicit)
        tag = self._tags.get(key)
        if tag is None:
            tag = super().resolve(kind, value, implicit)
            if not self.yaml_path_resolvers:
                self._tags[key] = tag
        return tag


_Loader = _StrictLoader

_STR, _INT, _NULL, _BOOL, _FLOAT, _SEQ, _MAP = (f"tag:yaml.org,2002:{t}" for t in (
    "str", "int", "null", "bool", "float", "seq", "map"))


class _NotPlain(Exception):
    """A document :func:`_plain_document` leaves to the loader's own constructor."""


def _plain_document(loader: Any, node: Any) -> Any:
    """The document of a composed ``node`` as the safe constructor would build it, for the
    common case: mappings and lists of strings, integers, floats, booleans and nulls, at most
    :data:`MAX_DEPTH` deep, no merge keys, no key repeated (no aliases: the caller checks).

    Anything else raises :class:`_NotPlain` and the loader's constructor (the strict one,
    which reports a repeated key with its line) builds the document instead. The safe
    constructor is generic Python, a call chain per value: at 131,072 GPUs it took most of
    the 5.8 s a YAML instance took to read.
    """
    bools = loader.bool_values
    construct_int = loader.construct_yaml_int
    construct_float = loader.construct_yaml_float
    scalar_node = yaml.ScalarNode

    def build(n: Any, depth: int) -> Any:
        if type(n) is scalar_node:
            tag, v = n.tag, n.value
            if tag == _STR:
                return v
            if tag == _INT:
                return int(v) if v.isascii() and v.isdigit() and (v[0] != "0" or v == "0") \
                    else construct_int(n)
            if tag == _NULL:
                return None
            if tag == _BOOL:
                return bools[v.lower()]
            if tag == _FLOAT:
                return construct_float(n)
            raise _NotPlain
        if depth >= MAX_DEPTH:
            raise _NotPlain
        if n.tag == _SEQ and type(n) is yaml.SequenceNode:
            return [build(c, depth + 1) for c in n.value]
        if n.tag == _MAP and type(n) is yaml.MappingNode:
            out = {}
            for k, v in n.value:
                if type(k) is not scalar_node or k.tag == _MERGE_TAG:
                    raise _NotPlain
                out[build(k, depth + 1)] = build(v, depth + 1)
            if len(out) != len(n.value):
                raise _NotPlain  # a repeated key: the strict constructor says where
            return out
        raise _NotPlain

    return build(node, 1)


def _load_yaml(text: str, plain: bool) -> tuple[list[Any], bool]:
    """``yaml.load_all`` with the strict loader; ``plain`` (no aliases): each document built
    by :func:`_plain_document` where it can. Also whether every document was (then each is
    within :data:`MAX_DEPTH` already)."""
    if not plain:
        return list(yaml.load_all(text, Loader=_Loader)), False
    loader = _Loader(text)
    every = True
    try:
        docs = []
        while loader.check_node():
            node = loader.get_node()
            try:
                docs.append(_plain_document(loader, node))
            except _NotPlain:
                every = False
                docs.append(loader.construct_document(node))
        return docs, every
    finally:
        loader.dispose()


def _key_text(key: Any) -> Any:
    return key[1] if isinstance(key, tuple) and len(key) == 2 and isinstance(key[0], str) \
        and key[0].startswith("tag:") else key


def _json_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)  # in C; the Python loop below runs only when a key repeats
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r} (JSON would keep only the last)")
            seen.add(key)
    return out


def _json_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows")


def json_depth(data: bytes | str) -> int:
    """How deep the mappings and lists of a JSON text nest, without parsing it (brackets
    inside strings do not count). Linear and in C (bytes.replace and numpy): a 30 MB body in
    a fraction of a second; malformed text gets a number too (the parser reports it)."""
    import numpy as np

    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    if b"[" not in raw and b"{" not in raw:
        return 0
    if b"\\" in raw:  # escapes, left to right: an escaped backslash, then an escaped quote
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    arr = np.frombuffer(raw, dtype=np.uint8)
    opens = (arr == ord("[")) | (arr == ord("{"))
    where = np.flatnonzero(opens | (arr == ord("]")) | (arr == ord("}")))
    quotes = np.flatnonzero(arr == ord('"'))  # each remaining quote opens or closes a string
    outside = (np.searchsorted(quotes, where) & 1) == 0
    step = np.where(opens[where[outside]], 1, -1)
    return int(np.cumsum(step).max(initial=0)) if step.size else 0


def check_depth(data: bytes | str, source: str | None = None) -> None:
    """Refuse a JSON text nested deeper than :data:`MAX_DEPTH` (InputError)."""
    depth = json_depth(data)
    if depth > MAX_DEPTH:
        raise InputError(f"nested {depth} levels deep; at most {MAX_DEPTH} (the input limit)",
                         source=source)


def _check_tree_depth(docs: list[Any], src: str) -> None:
    """The same limit on parsed (YAML) documents, without recursion."""
    stack: list[tuple[Any, int]] = [(d, 1) for d in docs if isinstance(d, (dict, list))]
    seen: set[int] = set()
    while stack:
        obj, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"nested more than {MAX_DEPTH} levels deep (the input limit)",
                             source=src)
        if id(obj) in seen:  # an alias: sized once
            continue
        seen.add(id(obj))
        for child in (obj.values() if isinstance(obj, dict) else obj):
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))


def loads_json(text: str) -> Any:
    """``json.loads`` that refuses duplicate keys and NaN/Infinity (ValueError)."""
    return json.loads(text, object_pairs_hook=_json_pairs, parse_constant=_json_constant)


#: The file name that means standard input (``kubectl get nodes -o json | hyperplace ... -``).
STDIN = "-"
#: (the stream read, its bytes, how many were asked): the stream itself, not its id(), which
#: a later stream may reuse once this one is freed (a test's replaced stdin then read the
#: previous one's bytes); fewer bytes than asked: the whole stream
_stdin_data: tuple[Any, bytes, int] | None = None


def is_stdin(path: str | os.PathLike[str] | Any) -> bool:
    return isinstance(path, (str, os.PathLike)) and os.fspath(path) == STDIN


def _read_stdin(limit: int) -> bytes:
    """Standard input, read once (several readers of ``-`` in one command see the same
    text), at most one byte past ``limit`` (a reader allowing more than an earlier one
    reads on where that one stopped)."""
    import sys

    global _stdin_data
    if _stdin_data is None or _stdin_data[0] is not sys.stdin:
        _stdin_data = (sys.stdin, sys.stdin.buffer.read(limit + 1), limit + 1)
    stream, data, asked = _stdin_data
    if len(data) == asked < limit + 1:  # cut by a smaller limit: read on
        data += stream.buffer.read(limit + 1 - asked)
        _stdin_data = (stream, data, limit + 1)
    return data


def read_text_limited(path: str | Path, source: str | None = None, *,
                      limit: int = MAX_INPUT_BYTES) -> str:
    """A file's text, refusing more than ``limit`` bytes (default :data:`MAX_INPUT_BYTES`;
    a trace's is larger) and invalid UTF-8.

    A regular file over the limit is refused by its size, unread; anything else is read at
    most one byte past the limit, so ``/dev/zero`` or a fifo is refused at once. ``-`` is
    standard input.
    """
    src = source or str(path)
    try:
        if is_stdin(path):
            data = _read_stdin(limit)
            src = source or "<stdin>"
        else:
            with open(path, "rb") as fh:
                st = os.fstat(fh.fileno())
                big = stat.S_ISREG(st.st_mode) and st.st_size > limit
                data = b"" if big else fh.read(limit + 1)
                if big:
                    raise InputError(f"file is {st.st_size:,} bytes, larger than the input "
                                     f"limit of {limit:,} bytes", source=src)
    except IsADirectoryError:
        raise InputError("is a directory, expected a file", source=src) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", source=src) from None
    if len(data) > limit:
        raise InputError(f"file is larger than the input limit of {limit:,} bytes",
                         source=src)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"not UTF-8 text: byte {exc.start} (line {line}) is invalid",
                         source=src) from None


_ALIAS_TOKEN = re.compile(r"\*[^\s,\[\]{}]+")


def _check_aliases(text: str, src: str) -> bool:
    """Refuse more than :data:`MAX_ALIASES` alias references; True when the file has any.

    The regex over-counts (a ``*`` inside a string), so a high count is confirmed on the
    parser's events, which stop at the first alias past the limit.
    """
    if "&" not in text or "*" not in text:
        return False
    rough = 0
    for _ in _ALIAS_TOKEN.finditer(text):  # stops counting past the limit
        rough += 1
        if rough > MAX_ALIASES:
            break
    if rough == 0:
        return False
    if rough <= MAX_ALIASES:
        return True
    count = 0
    try:
        for event in yaml.parse(text, Loader=_BaseLoader):
            if isinstance(event, yaml.AliasEvent):
                count += 1
                if count > MAX_ALIASES:
                    raise InputError(f"more than {MAX_ALIASES:,} YAML alias references "
                                     "(the input limit)", source=src)
    except yaml.YAMLError:
        pass  # reported with its line and column by the loader below
    return count > 0


def _check_expanded_size(docs: list[Any], src: str) -> None:
    """Refuse documents whose aliases expand past :data:`MAX_EXPANDED_NODES` values.

    Shared (aliased) objects are sized once and counted at every reference, which is what
    validating or writing them out costs; so an alias bomb is refused without expanding it.
    """
    sizes: dict[int, int] = {}
    limit = MAX_EXPANDED_NODES
    stack: list[tuple[Any, bool]] = [(d, False) for d in docs]
    while stack:
        obj, done = stack.pop()
        if not isinstance(obj, (dict, list)):
            continue
        key = id(obj)
        if key in sizes:
            continue
        children = list(obj.values()) if isinstance(obj, dict) else obj
        if not done:
            stack.append((obj, True))
            stack.extend((c, False) for c in children if isinstance(c, (dict, list))
                         and id(c) not in sizes)
            continue
        total = 1 + sum(sizes.get(id(c), 1) for c in children)
        if isinstance(obj, dict):
            total += len(obj)  # the keys
        if total > limit:
            raise InputError(f"YAML aliases expand to more than {limit:,} values "
                             "(the input limit)", source=src)
        sizes[key] = total
    if sum(sizes.get(id(d), 1) for d in docs) > limit:
        raise InputError(f"YAML aliases expand to more than {limit:,} values (the input limit)",
                         source=src)


def _json_fast_path(text: str) -> Any:
    """A YAML file that is JSON (JSON is YAML) read by the JSON parser, else None.

    Even with libyaml, YAML construction runs in Python: a 131,072-GPU instance takes
    seconds as YAML and a quarter of a second as JSON. Anything that is not valid JSON goes
    to the YAML loader as before (errors, duplicate keys included, are reported as YAML's).
    """
    if text.lstrip()[:1] not in ("{", "["):
        return None
    try:
        return loads_json(text)
    except ValueError:
        return None


def load_documents(path: str | Path) -> list[dict[str, Any]]:
    """All documents of a YAML (multi-document) or JSON file; errors name the file."""
    p = Path(path)
    src = str(path)
    if is_stdin(path):
        src = "<stdin>"
    elif not p.exists():
        raise InputError("no such file", source=src)
    elif p.is_dir():
        raise InputError("is a directory, expected a file", source=src)
    text = read_text_limited(path if is_stdin(path) else p, src)
    if not text.strip():
        raise InputError("file is empty", source=src)
    try:
        if p.suffix == ".json" or text.lstrip()[:1] in ("{", "["):
            check_depth(text, src)
        data = _json_fast_path(text) if p.suffix != ".json" else loads_json(text)
        if data is not None:
            docs = data if isinstance(data, list) else [data]
        else:
            has_aliases = _check_aliases(text, src)
            loaded, plain = _load_yaml(text, plain=not has_aliases)
            docs = [d for d in loaded if d is not None]
            if not plain:
                _check_tree_depth(docs, src)
            if has_aliases:
                _check_expanded_size(docs, src)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InputError(f"malformed YAML: {where}{problem}", source=src) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}",
                         source=src) from None
    except InputError:
        raise
    except ValueError as exc:  # duplicate JSON key, NaN
        raise InputError(f"malformed JSON: {exc}", source=src) from None
    except RecursionError:
        raise InputError("nested too deeply", source=src) from None
    if not docs:
        raise InputError("file holds no document", source=src)
    for i, d in enumerate(docs):
        if not isinstance(d, dict):
            what = {bool: "true/false", int: "a number", float: "a number", str: "a string",
                    list: "a list", type(None): "empty"}.get(type(d), type(d).__name__)
            raise InputError(f"document {i + 1} is {what}, expected a mapping (key: value "
                             "lines, or a JSON object)", source=src)
    return docs


def parse(model: type[M], doc: dict[str, Any], *, source: str | None = None,
          prefix: str = "") -> M:
    """Validate one document as ``model``; a failure becomes a one-line :class:`InputError`."""
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise from_validation_error(exc, source=source, prefix=prefix, model=model) from None
    except RecursionError:
        raise InputError("nested too deeply", source=source) from None


def write_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all.

    The text goes to a temporary file in the same directory (same filesystem), is flushed
    to disk, then renamed over ``path``; on any failure, Ctrl-C included, the temporary
    file is removed and a previous ``path`` is left as it was.
    """
    target = Path(path)
    src = str(path)
    if target.is_dir():
        raise InputError("is a directory, expected a file to write", source=src)
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise InputError(f"cannot write: no such directory {str(directory)!r}", source=src)
    tmp_name: str | None = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                        dir=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if target.exists():
            with contextlib.suppress(OSError):
                os.chmod(tmp_name, target.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            with contextlib.suppress(OSError):
                os.chmod(tmp_name, 0o666 & ~umask)
        os.replace(tmp_name, target)
        tmp_name = None
    except OSError as exc:
        raise InputError(f"cannot write: {exc.strerror or exc}", source=src) from None
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)


def dump_yaml(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def to_document(model: BaseModel) -> dict[str, Any]:
    """camelCase dict without defaults, but always with ``apiVersion`` and ``kind`` first,
    so that a written document says what it is and loads back by kind."""
    data = model.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    head = {k: getattr(model, a) for k, a in (("apiVersion", "api_version"), ("kind", "kind"))
            if isinstance(getattr(model, a, None), str)}
    return {**head, **{k: v for k, v in data.items() if k not in head}}


def _doc(model: BaseModel) -> dict[str, Any]:
    to_doc = getattr(model, "to_doc", None)
    return to_doc() if to_doc else model.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def dump(model: BaseModel | list[BaseModel], fmt: str = "yaml") -> str:
    """A model (or list of models) as YAML or JSON with camelCase keys."""
    if isinstance(model, list):
        data: Any = [_doc(m) for m in model]
    else:
        data = _doc(model)
    if fmt == "json":
        # pydantic-core's serializer writes the same text as json.dumps(indent=2) (non-ASCII
        # kept as UTF-8) about 7x faster: a 65,536-GPU plan in 0.12 s instead of 0.8 s
        return pydantic_core.to_json(data, indent=2).decode() + "\n"
    if fmt == "yaml":
        return dump_yaml(data)
    raise InputError(f"unknown format {fmt!r}; use yaml or json")
