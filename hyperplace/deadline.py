"""When a command's time budget started: at process start, so that reading the input counts.

``hyperplace solve --budget B`` promises a plan within B seconds of the command starting,
reading and writing included. The driver works with ``time.perf_counter()`` deadlines;
:func:`process_start` gives the perf-counter value of the moment this process started.
"""

from __future__ import annotations

import os
import time

_IMPORTED = time.perf_counter()
_AS_COMMAND = False
# The most start-up counted before this module's import. A process can be forked long before
# it execs hyperplace: `bash -c 'pip install ... && hyperplace solve'` execs its last command
# in the shell's own process, whose start time is the shell's. Interpreter start-up and the
# imports before this module take well under this on a cold cache (measured ~0.3 s warm).
MAX_STARTUP_S = 2.0


def started_as_command() -> None:
    """Declare this process a ``hyperplace`` command (the console-script entry calls it):
    budgets then run from process start. Called in-process (tests, a service), a command's
    budget runs from when the command function starts."""
    global _AS_COMMAND
    _AS_COMMAND = True


def is_command() -> bool:
    """True in a ``hyperplace`` command's own process (see :func:`started_as_command`)."""
    return _AS_COMMAND


def loaded_at() -> float:
    """``time.perf_counter()`` value at which hyperplace was loaded (this module imported)."""
    return _IMPORTED


def process_start() -> float:
    """``time.perf_counter()`` value at which this process started.

    On Linux the start time is read from ``/proc/self/stat`` (clock ticks since boot,
    10 ms resolution) against ``CLOCK_BOOTTIME``, but never more than ``MAX_STARTUP_S``
    before this module was imported (the process may have been forked long before it
    exec'd hyperplace); elsewhere it is the moment this module was first imported (the
    interpreter's own start-up, ~50 ms, is then not counted).
    """
    try:
        with open("/proc/self/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        # field 22 (starttime); the command name (field 2) may hold spaces: split after ')'
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        elapsed = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED
    if not 0 <= elapsed < 86_400:
        return _IMPORTED
    return max(time.perf_counter() - elapsed, _IMPORTED - MAX_STARTUP_S)


def command_deadline(budget_s: float, write_reserve_s: float, since: float | None = None
                     ) -> float:
    """The perf-counter deadline of a solve whose command has ``budget_s`` seconds and keeps
    ``write_reserve_s`` of them for writing its output: from process start when this process
    is the command (:func:`started_as_command`), else from ``since`` (default: now)."""
    start = process_start() if _AS_COMMAND else (time.perf_counter() if since is None
                                                  else since)
    return start + budget_s - write_reserve_s


#: CPU seconds per pending job and per free GPU (a plan lists every placed GPU and every
#: pending job) that serialising and writing a plan takes, by format, on an idle machine;
#: :class:`~hyperplace.solvers.budget.Budget` scales them by the measured slowdown. 131,072
#: GPUs / 16,384 jobs, fragmentation 0.6 (52,428 free GPUs, 16,101 admitted), 2026-12-02
#: load 7-10: JSON 0.16-0.18 s of CPU in `hyperplace solve` (dump and write), 0.29 s alone
#: (2.3e-6-4.3e-6 an item; 5e-6 kept; it was 8e-6, unscaled), YAML 4.87 s alone (7.1e-5 an
#: item, 1.2e-4 kept: YAML's representer is Python even with libyaml, 17x JSON). A table
#: (``--format table``) prints the top rows only: JSON's figure is kept for it.
WRITE_S_PER_ITEM = {"json": 5e-6, "yaml": 1.2e-4, "table": 5e-6}


def write_reserve_s(instance, fmt: str = "json") -> float:
    """Seconds kept back from a solve for writing its plan in ``fmt`` (json, yaml or
    table), on an idle machine: 0.05 s plus :data:`WRITE_S_PER_ITEM` per pending job and per
    free GPU."""
    free = sum(n.free_count for c in instance.clusters for n in c.nodes)
    return 0.05 + WRITE_S_PER_ITEM.get(fmt, max(WRITE_S_PER_ITEM.values())) * \
        (free + len(instance.jobs))
