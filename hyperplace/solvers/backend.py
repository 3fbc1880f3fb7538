"""What every exact backend of a :class:`~hyperplace.formulations.linear.LinearModel` is:
a class that declares what it can do and maps its own statuses to :class:`SolveStatus`.

The driver asks a backend's capabilities (``accepts_hint``), never its name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from hyperplace.formulations.linear import LinearModel, RawSolution
from hyperplace.models.result import SolveStatus


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
