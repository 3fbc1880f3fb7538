"""Independent checkers: placement plans (:mod:`.placement`) and layer splits (:mod:`.split`).

Both recompute every rule from the domain models instead of sharing code with the
formulations that produced the answers, so a bug there cannot vouch for itself.
"""

from hyperplace.check.placement import JobRules, Violation, check, format_violations
from hyperplace.check.split import check_split

__all__ = ["JobRules", "Violation", "check", "check_split", "format_violations"]
