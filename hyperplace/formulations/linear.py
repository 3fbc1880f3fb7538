"""A backend-independent integer linear model: the one thing every backend encodes.

Formulations (placement, layer split, ...) write their problem once into a
:class:`LinearModel`; ``solvers.backends.cpsat`` and ``solvers.backends.milp`` translate it to OR-Tools CP-SAT
and PuLP (HiGHS or CBC). Objectives are *lexicographic*: a list solved in order, each later
one under the constraint that the earlier ones keep their best value.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hyperplace.models.result import SolveStatus


@dataclass(slots=True)
class Constraint:
    terms: list[tuple[int, int]]  # (variable index, integer coefficient)
    lo: float  # -inf allowed
    hi: float  # +inf allowed
    name: str = ""


@dataclass(slots=True)
class Objective:
    """Minimise ``sum(coef * var)`` (maximisation is written with negated coefficients)."""

    terms: list[tuple[int, int]]
    name: str
    sense: str = "min"  # "min" | "max"


@dataclass
class LinearModel:
    """Integer variables with bounds, linear constraints, lexicographic objectives."""

    names: list[str] = field(default_factory=list)
    lbs: list[int] = field(default_factory=list)
    ubs: list[int] = field(default_factory=list)
    constraints: list[Constraint] = field(default_factory=list)
    objectives: list[Objective] = field(default_factory=list)

    def var(self, name: str, lb: int, ub: int) -> int:
        """A new integer variable in ``[lb, ub]``; returns its index."""
        if ub < lb:
            raise ValueError(f"variable {name}: empty domain [{lb}, {ub}]")
        self.names.append(name)
        self.lbs.append(int(lb))
        self.ubs.append(int(ub))
        return len(self.names) - 1

    def bool(self, name: str) -> int:
        """A new 0/1 variable; returns its index."""
        return self.var(name, 0, 1)

    def add(self, terms: list[tuple[int, int]], lo: float = float("-inf"),
            hi: float = float("inf"), name: str = "") -> None:
        """``lo <= sum(coef * var) <= hi``; an empty row must hold already (else ValueError).

        A variable listed more than once has its coefficients summed into one term (HiGHS
        refuses a row with a repeated index, PuLP keeps only one of the coefficients)."""
        if len(terms) > 1 and len({i for i, _ in terms}) < len(terms):
            merged: dict[int, int] = {}
            for i, c in terms:
                merged[i] = merged.get(i, 0) + c
            terms = [(i, c) for i, c in merged.items() if c]
        if terms:
            self.constraints.append(Constraint(terms, lo, hi, name))
        elif lo > 0 or hi < 0:
            raise ValueError(f"constraint {name}: empty and violated")

    def eq(self, terms: list[tuple[int, int]], rhs: float, name: str = "") -> None:
        """``sum(coef * var) == rhs``."""
        self.add(terms, rhs, rhs, name)

    @property
    def num_vars(self) -> int:
        """Number of variables."""
        return len(self.names)

    def evaluate(self, terms: list[tuple[int, int]], values: list[int]) -> int:
        """``sum(coef * values[var])`` over ``terms``."""
        return sum(c * values[i] for i, c in terms)

    def violated(self, values: list[int]) -> list[str]:
        """Constraints a full assignment breaks (used to vet hints and backend answers)."""
        bad = []
        for i, (lb, ub) in enumerate(zip(self.lbs, self.ubs)):
            if not lb <= values[i] <= ub:
                bad.append(f"bounds of {self.names[i]}")
        for c in self.constraints:
            v = self.evaluate(c.terms, values)
            if v < c.lo - 1e-6 or v > c.hi + 1e-6:
                bad.append(c.name or "constraint")
        return bad


@dataclass
class RawSolution:
    """What a backend returns: values (or None), per-objective values and bounds, status."""

    values: list[int] | None
    status: SolveStatus  # optimal | feasible | infeasible | no_solution | error
    objective_values: list[float] = field(default_factory=list)
    objective_bounds: list[float | None] = field(default_factory=list)
    message: str = ""
    #: phases the wall clock cut (:attr:`PhaseResult.wall_cut`) or left no time to run
    #: (counted for every backend; for one given a deterministic limit, a solve with any is
    #: not reproducible: the driver says so in the plan only then)
    wall_cuts: int = 0


def phase_limits(n: int, shares: list[float] | None = None) -> list[float]:
    """Budget shares of ``n`` lexicographic phases: most to the first, the rest split evenly."""
    return shares or ([0.5] + [0.5 / max(1, n - 1)] * (n - 1) if n > 1 else [1.0])


def phase_time(k: int, shares: list[float], remaining: float) -> float:
    """Seconds for phase ``k``: its share of what is left (later phases inherit unused time)."""
    if k == len(shares) - 1:
        return remaining
    rest = sum(shares[k:]) or 1.0
    return remaining * shares[k] / rest


@dataclass
class PhaseResult:
    """One lexicographic phase as a backend solved it."""

    status: SolveStatus  # optimal | feasible | infeasible | no_solution | error
    values: list[int] | None = None
    value: float | None = None
    bound: float | None = None
    message: str = ""
    #: stopped by its wall-clock limit before its deterministic one (set only by a backend
    #: given a deterministic limit: CP-SAT's ``max_deterministic_time``)
    wall_cut: bool = False


def solve_lexicographic(model: LinearModel, time_limit_s: float, start: float,
                        phase: Callable[[int, Objective, float], PhaseResult],
                        fix: Callable[[int, Objective, float, bool], None],
                        min_phase_s: float, shares: list[float] | None = None) -> RawSolution:
    """The phase loop every backend shares: solve objective k in its share of the time left,
    then ``fix`` it (to its value when proven, no worse than the incumbent otherwise) before
    the next. A phase without a new solution ends the loop with the incumbent."""
    shares = phase_limits(len(model.objectives), shares)
    values: list[int] | None = None
    obj_values: list[float] = []
    obj_bounds: list[float | None] = []
    overall = SolveStatus.OPTIMAL
    cuts = 0
    for k, obj in enumerate(model.objectives):
        remaining = time_limit_s - (time.perf_counter() - start)
        if remaining <= min_phase_s:
            overall = SolveStatus.FEASIBLE if values is not None else SolveStatus.NO_SOLUTION
            cuts += len(model.objectives) - k
            break
        result = phase(k, obj, phase_time(k, shares, remaining))
        cuts += result.wall_cut
        if result.status in (SolveStatus.OPTIMAL, SolveStatus.FEASIBLE) and result.values is not None:
            values = result.values
            obj_values.append(float(result.value or 0.0))
            obj_bounds.append(result.bound)
            if result.status != SolveStatus.OPTIMAL:
                overall = SolveStatus.FEASIBLE
            fix(k, obj, float(result.value or 0.0), result.status == SolveStatus.OPTIMAL)
        elif values is None:
            return RawSolution(None, result.status, message=result.message, wall_cuts=cuts)
        else:
            overall = SolveStatus.FEASIBLE
            break
    return RawSolution(values, overall, obj_values, obj_bounds, wall_cuts=cuts)
