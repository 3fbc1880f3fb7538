"""What every command shares: one-line errors, output files, formats, interruption.

The vocabulary an operator meets is the same everywhere: ``-o/--output FILE`` writes a
file (whole or not at all, see :func:`hyperplace.io.write_atomic`), ``--format`` says
yaml or json and must agree with the file's suffix, ``--budget SECONDS`` bounds a solve.

Exit codes: 0 done, 1 violations found or no feasible split, 2 bad input, 130 interrupted.
"""

from __future__ import annotations

import math
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer
from rich.console import Console

from hyperplace.errors import InputError
from hyperplace.io import write_atomic

if TYPE_CHECKING:
    from hyperplace.models.request import RoundRequest

F = TypeVar("F", bound=Callable[..., Any])


class Format(StrEnum):
    """``--format`` of commands that print a table or write a document."""

    table = "table"
    json = "json"
    yaml = "yaml"

EXIT_OK, EXIT_VIOLATIONS, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

EXIT_CODES_HELP = ("Exit codes: 0 done; 1 check found violations or no split fits; "
                   "2 bad input (one line on stderr); 130 interrupted (nothing written).")

_SUFFIX_FORMATS = {".json": "json", ".yaml": "yaml", ".yml": "yaml"}


def fail(exc: InputError) -> None:
    """Print ``error: FILE: field.path: problem`` on stderr and exit 2."""
    print(f"error: {exc.one_line()}", file=sys.stderr)
    raise typer.Exit(EXIT_BAD_INPUT)


def one_line_errors(func: F) -> F:
    """Report :class:`InputError` as one line and exit 2 (no traceback, even under tests)."""

    @wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except InputError as exc:
            fail(exc)

    return wrapper  # type: ignore[return-value]


def file_format(fmt: str | None, output: str | Path | None, *, option: str = "--format",
                default: str = "yaml") -> str:
    """The document format of an output file: ``--format`` and the suffix must agree.

    No ``--format``: the suffix decides (``.json`` json, otherwise yaml). A ``--format``
    that contradicts a ``.json``/``.yaml``/``.yml`` suffix is an error, never a silent choice.
    """
    by_suffix = _SUFFIX_FORMATS.get(Path(output).suffix.lower()) if output is not None else None
    if fmt is None or fmt == "table":
        return by_suffix or default
    if by_suffix is not None and by_suffix != fmt:
        raise InputError(f"{fmt} does not match the file name {str(output)!r} "
                         f"(a {Path(str(output)).suffix} file is {by_suffix}); change one",
                         path=option)
    return fmt


def pick_output(output: str | Path | None, deprecated: str | Path | None,
                old: str = "--out") -> str | None:
    """``-o/--output``, or the old spelling kept as a hidden alias (not both)."""
    if output is not None and deprecated is not None:
        raise InputError(f"give -o/--output once ({old} is its old spelling)", path=old)
    value = output if output is not None else deprecated
    return None if value is None else str(value)


def write_output(path: str | Path, text: str, what: str = "") -> None:
    """Write ``text`` whole or not at all and say so on stderr."""
    write_atomic(path, text)
    print(f"wrote {path}{': ' + what if what else ''}", file=sys.stderr)


def output_dir(path: Path) -> Path:
    """Create an output folder (and its parents); a failure is one line naming it."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create: {exc.strerror or exc}", source=str(path)) from None
    return path


#: the command-line flag of each round request field (hyperplace.models.request)
ROUND_FLAGS = {"solver": "--solver", "policy": "--policy", "budgetS": "--budget",
               "seed": "--seed", "preemption": "--preemption",
               "runningMoveable": "--running-moveable", "maxMoves": "--max-moves",
               "hotSpares": "--hot-spares"}


def round_request(**fields: Any) -> "RoundRequest":
    """The library's round request from a command's options; a bad one names its flag."""
    from hyperplace.models.request import RoundRequest

    try:
        return RoundRequest.of(**fields)
    except InputError as exc:
        flag = ROUND_FLAGS.get(exc.path or "", exc.path)
        message = exc.message
        for field, other in ROUND_FLAGS.items():
            message = message.replace(field, other)
        raise InputError(message, path=flag) from None


def check_budget(budget: float, option: str = "--budget", minimum: float = 0.0) -> float:
    """A budget option's seconds: a number (not nan), finite, positive, at least ``minimum``."""
    if math.isnan(budget):
        raise InputError("not a number; give seconds, e.g. 10", path=option)
    if not math.isfinite(budget) or budget <= 0:
        raise InputError(f"must be a positive, finite number of seconds, got {budget}",
                         path=option)
    if budget < minimum:
        raise InputError(f"must be at least {minimum:g} s, got {budget:g}", path=option)
    return budget


@contextmanager
def interruptible() -> Iterator[None]:
    """Ctrl-C during the block ends the command with exit 130 and nothing written.

    A native solver may swallow SIGINT and return normally (with whatever it had); the
    handler records the signal so the command stops before it writes anything anyway.
    """
    interrupted = False
    previous = None

    def handler(signum: int, frame: Any) -> None:
        nonlocal interrupted
        interrupted = True
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread (e.g. a test runner's worker): no handler
        previous = None
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt


def console() -> Console:
    """A console for tables at the width of :func:`hyperplace.commands.render.width_for`
    (``COLUMNS``, else the terminal's, else 80 when piped)."""
    from hyperplace.commands.render import console as render_console

    return render_console()


#: Options that mean the same in every command that has them, documented once here.
FORMAT_HELP = ("stdout as table, json or yaml; with -o, the file's format (must agree with its "
               "suffix)")
BUDGET_HELP = "time budget in seconds for the solve (greedy's plan if nothing better in time)"
CLUSTER_HELP = "Cluster or Instance file (with --jobs)"
JOBS_HELP = "jobs file (multi-document YAML) or directory of them (with --cluster)"
TOP_HELP = "rows of each long list to show (a line says how many more there are)"
ALL_HELP = "show every row of the long lists (as -o FILE or --format json/yaml keep them)"


def check_repeated_options(root: Any, args: list[str]) -> None:
    """Refuse an option that takes one value given more than once (``solve --jobs a.yaml
    --jobs b.yaml``): click keeps the last and drops the others without a word, so a
    job file was silently left out of the round. Options declared repeatable (``--queues``,
    ``--policy``) and flags are not checked. ``root``: the click command tree; ``args``:
    the command line after the program name.

    Raises InputError naming the option and the values given."""
    # duck-typed: typer vendors its own click (typer._click), not the click package
    cmd, i = root, 0
    while hasattr(cmd, "commands") and i < len(args):
        sub = cmd.commands.get(args[i]) if not args[i].startswith("-") else None
        i += 1
        if sub is not None:
            cmd = sub
    if hasattr(cmd, "commands") or not hasattr(cmd, "params"):
        return
    single = {name: p for p in cmd.params if getattr(p, "param_type_name", "") == "option"
              and not p.multiple and not p.is_flag and not p.count and p.nargs == 1
              for name in p.opts}
    seen: dict[str, list[str]] = {}
    params: dict[str, Any] = {}
    while i < len(args):
        token = args[i]
        if token == "--":
            break
        name, _, value = token.partition("=") if token.startswith("--") else (token, "", "")
        param = single.get(name)
        if param is not None:
            if not value and i + 1 < len(args):
                value = args[i + 1]
                i += 1
            seen.setdefault(max(param.opts, key=len), []).append(value)
            params[max(param.opts, key=len)] = param
        i += 1
    for name, values in seen.items():
        if len(values) > 1:
            files = getattr(getattr(params[name], "type_descriptor", None), "annotation",
                            None) is Path
            hint = " (several job files: put them in one directory)" if (
                name == "--jobs" and files) else ""
            raise InputError(f"given {len(values)} times ({', '.join(values)}), but it takes "
                             f"one value: the last would be used and the others ignored{hint}",
                             path=name)
