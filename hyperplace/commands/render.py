"""How every command prints for people: tables that fit, a summary first, numbers for people.

One module so that every command answers the same way at any width:

* **Width.** ``COLUMNS`` when it is set (a CI log, ``COLUMNS=200 hyperplace ... | less``),
  else the terminal's width, else 80 (a pipe or a file).
* **Tables.** Each :class:`Column` is *required* (its cells are never cut: the column keeps
  the width its longest cell needs), *optional* (dropped, rightmost first, when the required
  ones need the room; a note under the table names what was left out and how to see it) or
  *text* (reasons, node lists: folds onto more lines within what is left). A required
  column that cannot fit even alone widens the output rather than cutting a cell.
* **Long lists** are capped (:func:`cap`, ``--top N`` / ``--all``) with a line saying how many
  more there are; the summary comes before them.
* **Numbers** (:func:`count`, :func:`num`, :func:`seconds`, ...) carry thousands separators
  and units and never exponent notation; JSON and YAML keep exact values, only tables round.
* **No Python reprs**: :func:`pairs` writes ``{'beijing': 1}`` as ``beijing 1``.
"""

from __future__ import annotations

import os
import shutil
import textwrap
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Literal

from rich.console import Console
from rich.table import Table
from rich.text import Text

# numbers and words for people live a layer down (the library's messages use them too)
from hyperplace.words import count, num, pairs, pct, plural, seconds, words  # noqa: F401

#: Width of output that goes to a pipe or a file when ``COLUMNS`` does not say.
PIPE_WIDTH = 80
#: Rows a long list shows unless ``--top N`` or ``--all`` says otherwise.
DEFAULT_TOP = 20


def width_for(stream: IO[str] | None = None) -> int:
    """``COLUMNS`` if set to a positive number, else the terminal's width, else 80."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    stream = stream or sys.stdout
    try:
        if stream.isatty():
            return shutil.get_terminal_size((PIPE_WIDTH, 24)).columns
    except (AttributeError, ValueError, OSError):
        pass
    return PIPE_WIDTH


class _NoTrailingSpaces:
    """A text stream that drops the spaces rich pads each line with (pipes, logs and diffs
    stay clean); everything else is the wrapped stream's."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            done, self._pending = self._pending.rsplit("\n", 1)
            self._stream.write("\n".join(line.rstrip(" ") for line in done.split("\n")) + "\n")
        return len(text)

    def flush(self) -> None:
        if self._pending:
            self._stream.write(self._pending)
            self._pending = ""
        self._stream.flush()

    def __getattr__(self, name: str) -> object:  # isatty, fileno, encoding, ...
        return getattr(self._stream, name)


def console(*, stderr: bool = False) -> Console:
    """A console for people: the width of :func:`width_for`, no highlighting of numbers,
    no trailing spaces.

    A fresh one per command, on the current ``sys.stdout`` / ``sys.stderr``, so a test
    runner's captured streams are used.
    """
    stream = sys.stderr if stderr else sys.stdout
    return Console(file=_NoTrailingSpaces(stream), width=width_for(stream), highlight=False,
                   soft_wrap=False)


# ---- long lists ---------------------------------------------------------------------------

def cap(items: Sequence, top: int | None, show_all: bool = False) -> tuple[list, int]:
    """The first ``top`` items (all with ``show_all`` or ``top`` None) and how many are left."""
    items = list(items)
    if show_all or top is None or top < 0 or len(items) <= top:
        return items, 0
    return items[:top], len(items) - top


def more_line(hidden: int, what: str, hint: str = "--top N shows more, --all every one") -> str:
    """``... and 7,980 more admitted jobs (--top N shows more, --all every one)``; ``what``
    is singular (``admitted job``)."""
    return f"... and {plural(hidden, what).replace(' ', ' more ', 1)} ({hint})"


# ---- tables -------------------------------------------------------------------------------

Kind = Literal["required", "optional", "text"]


@dataclass(frozen=True)
class Column:
    """One table column. ``kind``: ``required`` cells are never cut (the column is as wide as
    its longest cell); ``optional`` columns are dropped, rightmost first, when the width is
    short; ``text`` columns fold their words onto more lines (at least ``min_width`` wide)."""

    header: str
    kind: Kind = "required"
    justify: Literal["left", "right"] = "left"
    min_width: int = 16
    #: a text column never narrower than this (e.g. the longest name it starts with)
    floor: int = 6


def _cell_width(cell: str | Text) -> int:
    text = cell.plain if isinstance(cell, Text) else cell
    return max((Text(line).cell_len for line in text.split("\n")), default=0)


def _longest_word(text: str) -> int:
    return max((Text(w).cell_len for w in text.split()), default=0)


@dataclass
class Fitted:
    """A table laid out for a width: the rich table, the columns left out, the width used."""

    table: Table
    dropped: list[str]
    width: int


def fit(columns: Sequence[Column], rows: Sequence[Sequence[str | Text]], width: int,
        title: str | None = None) -> Fitted:
    """Lay ``rows`` out in at most ``width`` columns of text (see :class:`Column`)."""
    n = len(columns)
    cells = [[(r[i] if i < len(r) else "") for r in rows] for i in range(n)]
    content = [max((_cell_width(c) for c in cells[i]), default=0) for i in range(n)]
    natural = [max(content[i], Text(columns[i].header).cell_len) for i in range(n)]
    minimum = []
    for i, col in enumerate(columns):
        head = _longest_word(col.header)
        if col.kind == "text":  # words longer than the column fold (nothing is lost)
            minimum.append(max(head, min(natural[i], col.min_width)))
        else:
            minimum.append(max(head, content[i]))

    def overhead(keep: list[int]) -> int:  # borders and one space of padding on each side
        return 1 + 3 * len(keep)

    for i, col in enumerate(columns):
        if col.kind == "text":
            minimum[i] = max(minimum[i], min(col.floor, natural[i]))
    keep = list(range(n))
    dropped: list[str] = []
    optional = [i for i in range(n) if columns[i].kind == "optional"]
    while sum(minimum[i] for i in keep) + overhead(keep) > width and optional:
        i = optional.pop()
        keep.remove(i)
        dropped.append(columns[i].header)
    # still too wide: text columns give up room, the widest first, down to a floor
    floor = {i: max(_longest_word(columns[i].header), columns[i].floor) for i in keep
             if columns[i].kind == "text"}
    for i in floor:
        minimum[i] = max(minimum[i], floor[i])
    while sum(minimum[i] for i in keep) + overhead(keep) > width:
        shrinkable = [i for i in floor if minimum[i] > floor[i]]
        if not shrinkable:
            break
        minimum[max(shrinkable, key=lambda i: minimum[i])] -= 1
    widths = {i: minimum[i] for i in keep}
    room = width - overhead(keep) - sum(widths.values())
    # room goes first to text columns (fewer lines per reason), then to headers (one line)
    for group in ([i for i in keep if columns[i].kind == "text"],
                  [i for i in keep if columns[i].kind != "text"]):
        for i in group:
            if room <= 0:
                break
            add = min(room, natural[i] - widths[i])
            widths[i] += add
            room -= add
    table = Table(title=title, title_justify="left", highlight=False)
    for i in keep:
        col = columns[i]
        # the widths fit every required cell on one line; headers wrap at their spaces
        table.add_column(col.header, justify=col.justify, width=widths[i], overflow="fold")
    for r in rows:
        table.add_row(*[(r[i] if isinstance(r[i], Text) else Text(str(r[i])))
                        if i < len(r) else "" for i in keep])
    used = sum(widths.values()) + overhead(keep)
    return Fitted(table, list(reversed(dropped)), used)


def _emit(out: Console, renderable: object, width: int | None = None) -> None:
    """Print without the trailing spaces rich pads lines with (pipes and logs stay clean)."""
    saved = out.width
    if width is not None and width > saved:
        out.width = width  # print(width=...) cannot widen beyond the console's own width
    try:
        with out.capture() as captured:
            out.print(renderable, crop=False)
    finally:
        out.width = saved
    text = "\n".join(line.rstrip() for line in captured.get().splitlines())
    out.file.write(text + "\n")


def print_table(out: Console, columns: Sequence[Column], rows: Sequence[Sequence[str | Text]],
                title: str | None = None, *, hint: str = "widen the terminal or set COLUMNS",
                ) -> list[str]:
    """Print a fitted table and, when columns were left out, one line naming them."""
    if title:  # a line of its own: a rich title would wrap at the table's width
        print_line(out, title)
    fitted = fit(columns, rows, out.width)
    # a required column wider than the terminal widens the output rather than cut a cell
    _emit(out, fitted.table, max(out.width, fitted.width))
    if fitted.dropped:
        print_line(out, f"(not shown at {out.width} columns: {', '.join(fitted.dropped)}; "
                        f"{hint})")
    return fitted.dropped


def print_summary(out: Console, title: str, rows: Sequence[tuple[str, str]]) -> None:
    """A title and ``label  value`` lines: what a reader needs before any long table."""
    print_line(out, title)
    pad = max((len(label) for label, _ in rows), default=0) + 4
    for label, value in rows:
        lines = textwrap.wrap(value, max(20, out.width - pad), break_long_words=False,
                              break_on_hyphens=False) or [""]
        out.file.write(f"  {label:<{pad - 4}}  {lines[0]}\n")
        for line in lines[1:]:
            out.file.write(" " * pad + line + "\n")


def print_line(out: Console, text: str) -> None:
    """A line of plain text (no markup), wrapped at the console's width at spaces."""
    for para in text.split("\n"):
        lead = len(para) - len(para.lstrip(" "))
        lines = textwrap.wrap(para, max(20, out.width), subsequent_indent=" " * (lead + 2),
                              break_long_words=False, break_on_hyphens=False) or [""]
        out.file.write("\n".join(lines) + "\n")
    out.file.flush()  # before any line on stderr (a pipe buffers stdout)
