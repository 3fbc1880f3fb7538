"""What every exact backend of a :class:`~hyperplace.formulations.linear.LinearModel` is:
a class that declares what it can do and maps its own statuses to :class:`SolveStatus`.

The driver asks a backend's capabilities (``accepts_hint``), never its name.
"""

from __future__ import annotations

import contextlib
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar, cast

from hyperplace.formulations.linear import LinearModel, RawSolution
from hyperplace.models.result import SolveStatus

T = TypeVar("T")

#: How long Ctrl-C waits for a native solve to honour the stop request before giving up.
STOP_WAIT_S = 10.0


@dataclass(frozen=True)
class BackendOptions:
    """What a caller may hand a backend besides the model and the time limit.

    Parameters
    ----------
    hint : list of int, optional
        A complete assignment to start from (only for backends with ``accepts_hint``).
    seed : int
        Random seed (backends with ``uses_seed``).
    workers : int
        Parallel workers (backends with ``uses_workers``).
    shares : list of float, optional
        Budget share per lexicographic objective (default: half to the first).
    """

    hint: list[int] | None = None
    seed: int = 0
    workers: int = 2
    shares: list[float] | None = None


class Backend(ABC):
    """An exact backend: capabilities, a status map, and :meth:`solve`."""

    #: name used in plans (``solver``) and on the command line
    name: ClassVar[str]
    #: solves integer models exactly (proves optimality)
    integer: ClassVar[bool] = True
    #: solves the lexicographic objectives in turn
    lexicographic: ClassVar[bool] = True
    #: reports a valid bound per objective
    proves_bound: ClassVar[bool] = True
    #: starts from ``BackendOptions.hint``
    accepts_hint: ClassVar[bool] = False
    #: honours ``BackendOptions.seed`` / ``workers``
    uses_seed: ClassVar[bool] = False
    uses_workers: ClassVar[bool] = False
    #: the backend's own status values -> the one vocabulary
    status_map: ClassVar[Mapping[Any, SolveStatus]]

    @abstractmethod
    def solve(self, model: LinearModel, time_limit_s: float,
              options: BackendOptions | None = None) -> RawSolution:
        """Solve ``model`` within ``time_limit_s`` seconds (all objectives together).

        Parameters
        ----------
        model : LinearModel
            The integer model with lexicographic objectives.
        time_limit_s : float
            Wall-clock seconds for every phase together.
        options : BackendOptions, optional
            Hint, seed, workers, phase shares; a hint given to a backend that does not
            accept one is an error.

        Returns
        -------
        RawSolution
            Values (or None), per-objective values and bounds, a :class:`SolveStatus`.
        """

    def _check(self, options: BackendOptions | None) -> BackendOptions:
        options = options or BackendOptions()
        if options.hint is not None and not self.accepts_hint:
            raise ValueError(f"{self.name} does not accept a hint")
        return options


def run_interruptibly(call: Callable[[], T], stop: Callable[[], object]) -> T:
    """Run a blocking native solve so that Ctrl-C stops it.

    Python runs a signal handler only between bytecodes of the main thread, so SIGINT
    during a solve inside C++ (CP-SAT, HiGHS) waited for the solve to end. Here the solve
    runs in a worker thread while the main thread waits in short joins; on Ctrl-C the main
    thread asks the solver to stop (``stop``: CP-SAT's ``stop_search``, HiGHS's
    ``cancelSolve``) until it ends (at most :data:`STOP_WAIT_S`), and raises ``KeyboardInterrupt`` (the
    worker is a daemon thread, so a solver that ignores the request cannot hold the process).
    Off the main thread (a service worker) the call simply runs.
    """
    if threading.current_thread() is not threading.main_thread():
        return call()
    box: dict[str, Any] = {}
    done = threading.Event()  # not Thread.join/is_alive: Ctrl-C during join can leave
    # is_alive() False for a thread that still runs (CPython 3.11)

    def work() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="hyperplace-solve", daemon=True).start()
    try:
        while not done.wait(0.05):
            pass
    except KeyboardInterrupt:
        # ask again until the solve ends: a request made before the native solve started
        # (while it copies the model) or during presolve may be missed or answered late
        give_up = time.perf_counter() + STOP_WAIT_S
        while not done.is_set() and time.perf_counter() < give_up:
            with contextlib.suppress(Exception):
                stop()
            done.wait(0.05)
        raise
    if "error" in box:
        raise box["error"]
    return cast(T, box["value"])
