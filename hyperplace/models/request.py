"""One scheduling round's request: what the CLI's ``solve`` and the service's
``POST /v1/placement`` ask of :func:`~hyperplace.solvers.driver.solve_placement`.

:class:`RoundRequest` holds the round's settings (solver, policy, budget, seed, preemption
or migration, the move limit, hot spares) and validates them once, here: the limits are the
named types below (the service's request body declares its fields with the same types) and
the rules between fields are :meth:`RoundRequest.check_rules`. An error names the field (in
the documents' camelCase: ``hotSpares``, ``maxMoves``), never a command-line flag; the CLI
says which flag that is.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from hyperplace.errors import InputError, from_validation_error
from hyperplace.models.base import HPModel
from hyperplace.models.migration import MigrationPolicy

__all__ = ["BudgetS", "HotSpares", "MaxMoves", "PolicyName", "PreemptionName", "RoundRequest",
           "Seed", "SolverName", "MAX_SEED"]

#: CP-SAT's random seed is a 32-bit signed integer.
MAX_SEED = 2**31 - 1
#: most whole free nodes a leaf keeps for repairs (the largest NVLink tray count we ship x 4)
MAX_HOT_SPARES = 1024
#: most migrations one round may decide
MAX_MOVES = 100_000

SolverName = Literal["auto", "cpsat", "milp", "greedy"]
PolicyName = Literal["performance", "cost"]
PreemptionName = Literal["never", "lower-priority", "reclaim-within-cohort"]
BudgetS = Annotated[float, Field(gt=0, allow_inf_nan=False, description="seconds")]
Seed = Annotated[int, Field(ge=0, le=MAX_SEED, description="solver random seed")]
HotSpares = Annotated[int, Field(ge=0, le=MAX_HOT_SPARES, description=(
    "whole free nodes every leaf keeps free for repairs"))]
MaxMoves = Annotated[int, Field(ge=0, le=MAX_MOVES, description=(
    "with runningMoveable: at most this many migrations (default: no limit)"))]


class RoundRequest(HPModel):
    """The settings of one round (see the module docstring)."""

    solver: SolverName = "auto"
    policy: PolicyName = "performance"
    budget_s: BudgetS = 10.0
    seed: Seed = 0
    preemption: PreemptionName = "never"
    running_moveable: bool = False
    max_moves: MaxMoves | None = None
    hot_spares: HotSpares = 0

    @staticmethod
    def check_rules(preemption: str, running_moveable: bool, max_moves: int | None) -> None:
        """The rules between fields (an InputError naming the field)."""
        if running_moveable and preemption != "never":
            raise InputError("a round either preempts or migrates running jobs, not both",
                             path="runningMoveable")
        if max_moves is not None and not running_moveable:
            raise InputError("only with runningMoveable", path="maxMoves")

    @model_validator(mode="after")
    def _rules(self) -> "RoundRequest":
        self.check_rules(self.preemption, self.running_moveable, self.max_moves)
        return self

    @classmethod
    def of(cls, **fields: Any) -> "RoundRequest":
        """A request from keyword fields; a bad one is an InputError naming its field."""
        try:
            return cls(**fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            rule = (first.get("ctx") or {}).get("error")
            if isinstance(rule, InputError):
                raise InputError(rule.message, path=rule.path) from None
            err = from_validation_error(exc)
            raise InputError(err.message, path=to_camel(err.path) if err.path else None) \
                from None

    def migration(self) -> MigrationPolicy | None:
        """The migration policy of a round whose running jobs may move (else None)."""
        return MigrationPolicy(max_moves=self.max_moves) if self.running_moveable else None

    def solve_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~hyperplace.solvers.driver.solve_placement`."""
        return {"solver": self.solver, "policy": self.policy, "budget_s": self.budget_s,
                "seed": self.seed, "preemption": self.preemption,
                "migration": self.migration(), "hot_spares": self.hot_spares}
