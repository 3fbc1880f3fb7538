"""Numbers and words for people, shared by the library's messages and the commands' tables.

Pure functions, no output: thousands separators and units, never exponent notation for
counts, plurals, mappings in words (``beijing 1, shanghai 1``, not a dict repr). The
commands' rendering (:mod:`hyperplace.commands.render`) re-exports them; library modules
(``solvers/workflows/why.py``) import them from here, a layer below the CLI.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

def count(n: int | float | None) -> str:
    """``15446`` -> ``15,446``; None -> ``-``."""
    if n is None:
        return "-"
    return f"{int(round(n)):,}"


def num(x: float | None, digits: int = 2) -> str:
    """A number for a table: whole numbers as counts (``38,213,812,345``, never ``3.8e+10``),
    others with ``digits`` decimals and thousands separators; None or NaN -> ``-``."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if float(x).is_integer() and abs(x) < 1e18:
        return f"{int(x):,}"
    return f"{x:,.{digits}f}"


def seconds(s: float | None) -> str:
    """A duration with its unit: ``0.25 s``, ``12.5 min``, ``3.4 h``, ``2.1 days``."""
    if s is None:
        return "-"
    if abs(s) < 60:
        return f"{s:.2f} s" if abs(s) < 10 else f"{s:.1f} s"
    if abs(s) < 3600:
        return f"{s / 60:.1f} min"
    if abs(s) < 86400 * 2:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:,.1f} days"


def pct(x: float | None, digits: int = 1) -> str:
    """A share as a percentage: ``0.0963`` -> ``9.6%``."""
    return "-" if x is None else f"{x * 100:.{digits}f}%"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 job``, ``2 jobs``, ``1,024 GPUs`` (``many`` for irregular plurals)."""
    return f"{count(n)} {word if n == 1 else (many or word + 's')}"


def pairs(mapping: Mapping[str, object], sep: str = ", ") -> str:
    """``{'beijing': 1, 'shanghai': 1}`` -> ``beijing 1, shanghai 1`` (no Python reprs)."""
    def value(v: object) -> str:
        if isinstance(v, bool):
            return "yes" if v else "no"
        if isinstance(v, (int, float)):
            return num(v)
        if hasattr(v, "value"):  # an enum
            return str(getattr(v, "value"))
        return str(v)
    return sep.join(f"{k} {value(v)}" for k, v in mapping.items()) or "-"


def words(items: Iterable[str], conj: str = "and") -> str:
    """``[a]`` -> ``a``; ``[a, b]`` -> ``a and b``; ``[a, b, c]`` -> ``a, b and c``."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + f" {conj} " + items[-1]
