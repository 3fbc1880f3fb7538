"""The engine's replay options, checked once for ``hyperplace simulate`` and what-if sweeps.

Each option has its command-line flag (``--horizon``) and its sweep key (``base.horizon``);
:func:`engine_config` checks the values given and returns the
:class:`~hyperplace.sim.simulator.SimConfig` fields they set, so a bad value is the same one
line naming the flag or the key wherever it is given. Not imported by the replays
themselves (the over-time bench hashes what they import).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from hyperplace.errors import InputError


@dataclass(frozen=True)
class Option:
    flag: str          # simulate's flag
    key: str           # the sweep file's key under base
    field: str         # the SimConfig field it sets
    check: Callable[[Any], str | None]  # None when valid, else what is wrong
    convert: Callable[[Any], Any] = lambda v: v


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _whole(lo: int, hi: int) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi
        return None if ok else f"must be a whole number within {lo}..{hi:,}, got {v!r}"
    return check


def _one_of(*names: str) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if v in names else f"use {' or '.join(names)}, got {v!r}"
    return check


#: hours: the most a horizon or a half-life may be (a year: the schedule's steps are a 288th
#: of its horizon, so a longer one plans in steps of more than a day)
MAX_HOURS = 8760.0


def _hours(positive: bool) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        if _number(v) and (v > 0 if positive else v >= 0) and v <= MAX_HOURS:
            return None
        return (f"must be a {'positive' if positive else 'finite, >= 0'} number of hours, at "
                f"most {MAX_HOURS:,.0f}, got {v!r}")
    return check


def _flag(v: Any) -> str | None:
    return None if isinstance(v, bool) else f"must be true or false, got {v!r}"


OPTIONS: tuple[Option, ...] = (
    Option("--horizon", "horizon", "horizon_s", _hours(True), lambda h: float(h) * 3600.0),
    Option("--schedule-window", "scheduleWindow", "schedule_window", _whole(1, 100_000)),
    Option("--schedule-objective", "scheduleObjective", "schedule_objective",
           _one_of("completion", "slowdown")),
    Option("--engine-clock", "engineClock", "engine_clock", _one_of("work", "wall")),
    Option("--preemption", "preemption", "preemption", _one_of("never", "reclaim-within-cohort")),
    Option("--defrag", "defrag", "defrag", _flag),
    Option("--make-room", "makeRoom", "engine_make_room", _flag),
    Option("--half-life", "halfLife", "half_life_s", _hours(False),
           lambda h: float(h) * 3600.0 if h > 0 else None),
    Option("--fair-share-levels", "fairShareLevels", "fair_share_levels", _whole(0, 1000)),
)
#: the sweep keys of :data:`OPTIONS`
KEYS = frozenset(o.key for o in OPTIONS)


def engine_config(values: dict[str, Any], *, by: str = "flag",
                  source: str | None = None) -> dict[str, Any]:
    """The SimConfig fields set by ``values`` (keyed by each option's ``flag`` or ``key``,
    as ``by`` says; options not given are left out); the first bad value raises an
    :class:`InputError` naming it (the flag, or ``base.KEY`` in ``source``)."""
    out: dict[str, Any] = {}
    for opt in OPTIONS:
        name = opt.flag if by == "flag" else opt.key
        if name not in values:
            continue
        v = values[name]
        wrong = opt.check(v)
        if wrong is not None:
            raise InputError(wrong, source=source,
                             path=name if by == "flag" else f"base.{name}")
        out[opt.field] = opt.convert(v)
    return out
