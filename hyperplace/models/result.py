"""The status vocabulary and solve statistics shared by every solver result."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from hyperplace.models.base import HPModel


class SolveStatus(StrEnum):
    """What a solve returned.

    ``optimal``: proven optimal. ``feasible``: a valid plan, not proven optimal (time limit).
    ``fallback``: the exact backend had no plan within the budget, so the greedy plan is
    returned. ``infeasible``: proven that no valid plan exists. ``no_solution``: the backend
    stopped without a plan and without a proof. ``error``: the backend failed.
    """

    OPTIMAL = "optimal"
    FEASIBLE = "feasible"
    FALLBACK = "fallback"
    INFEASIBLE = "infeasible"
    NO_SOLUTION = "no_solution"
    ERROR = "error"


class SolveStats(HPModel):
    """Statistics every result carries: which solver, how good, how long (camelCase on the
    wire, like every other document)."""

    status: SolveStatus
    solver: str
    objective: int | float | None = None
    bound: int | float | None = Field(default=None, description="best proven bound on the objective")
    gap: float | None = Field(default=None, description="|objective - bound| / max(1, |objective|)")
    objective_gaps: dict[str, float | None] = Field(
        default_factory=dict,
        description="relative gap per lexicographic objective (None: no valid bound)")
    runtime_s: float = 0.0
    budget_s: float | None = None
    message: str = ""


def relative_gap(objective: float | None, bound: float | None) -> float | None:
    """``|bound - objective| / max(1, |objective|)``; None when either is missing."""
    if objective is None or bound is None:
        return None
    return abs(bound - objective) / max(1.0, abs(objective))
