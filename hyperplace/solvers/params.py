"""Tunables of the solvers and the budgeted driver, each with why it has its value.

Override them from the library::

    from hyperplace.solvers.driver import solve_placement
    from hyperplace.solvers.params import BudgetParams, SolveParams
    plan = solve_placement(instance, budget_s=5,
                           params=SolveParams(budget=BudgetParams(reserve_fraction=0.15)))

The defaults were set when the driver was written and are what
``bench/bench_placement.py --budget 5`` ran with on 2026-11-29 (2 CPUs, AMD EPYC,
``bench/results/placement.md``): every plan there came back within its budget, and the
16,384-GPU x 2,000-job round was proven optimal by HiGHS in 3.07 s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hyperplace.formulations.placement.params import ModelParams


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1 (got {value!r})")


@dataclass(frozen=True)
class BudgetParams:
    """How the driver shares a budget between greedy, the exact backend and the rest.

    Parameters
    ----------
    reserve_fraction : float
        Share of the budget kept back for mapping the solution to GPUs, the inversion fix
        and the explanations. In [0, 1); default 0.08.
    reserve_s : float
        Seconds kept back on top (default 0.1: a floor for small budgets, where 8 % is
        only milliseconds). >= 0.
    greedy_reserve_factor : float
        The reserve also holds this many greedy passes (greedy's first pass, timed), because
        mapping the exact solution back and its inversion fix cost up to about one pass
        (default 1.0). The explanations are not reserved for: they run in what is left, and
        pending jobs whose per-job analysis did not fit say so (#25: the old rule, 1.5 x
        greedy's whole run with both passes and its repair, kept 4.7 s of a 10 s budget at
        131,072 GPUs and the exact model never started). >= 0.
    cpsat_vars_per_second : int
        Piece variables CP-SAT is given per second of budget before the driver judges the
        model hopeless and returns greedy's plan (default 60,000, set by hand; the bench
        rows above run with it).
    milp_vars_per_second : int
        The same for HiGHS through PuLP (default 40,000: PuLP's model writing is slower).
    auto_milp_above_vars : int
        ``auto`` gives models above this estimated size to HiGHS when every node is
        NVSwitch-uniform: the folded count model's LP relaxation is nearly integral there
        and HiGHS proves what CP-SAT cannot in the budget (bench 2026-11-29: 16,384 GPUs x
        2,000 jobs proven optimal in 3.07 s; CP-SAT stopped at feasible). Default 3,000.
    movers_per_second : int
        With ``--running-moveable``, at most this many running jobs per second of budget
        left when the solve starts (reading the files taken off) are movers (at least ``min_movers``), those losing
        least work; the round is then a restriction and never ``optimal``. Each mover adds
        a job to the round (its copy) and a node class per node it holds: building that
        cost ~60 us per mover, and greedy's migration tries grow with it (bench_scale
        --moveable, 16,384 GPUs, 11,445 movers, 2026-11-30; default 3,000: a second left
        spends about 0.18 s on them; 2,000 kept 6,921 of 11,445 movers at a 5 s budget and
        placed 27 of 64 waiting 2 x 8 jobs where all of them placed 59).
    min_movers : int
        At least this many running jobs may move whatever the budget (default 256, set by
        hand: a small round is left whole).
    min_cut_budget_s : float
        Budgets from this size up stop greedy at its deadline (a valid plan of the jobs
        placed so far); smaller ones get one whole greedy pass however long it takes, the
        budget's floor (default 0.2 s, set by hand).
    late_pass_fraction : float
        A greedy pass that starts late gets ``greedy.LATE_PASS_S`` + this share of the
        budget (default 0.05).
    greedy_tail_s_per_job : float
        Seconds per pending job greedy stops early by, for the explanations and the plan
        after it, on an idle machine (times the measured slowdown, ``Budget.slowdown``;
        default 4e-5: measured 26 us a job at 16,000 jobs, once per job shape; 40 us
        kept).
    min_exact_s : float
        The exact backend is not started with less than this left after the model is
        built (default 0.02 s, set by hand).
    bound_tail_s_per_job : float
        Seconds per job the LP bounds stop early by, on top of ``reserve_s``, for the
        explanations and the plan after them, in CPU time (times the slowdown; default
        4e-5, greedy's tail: 131,072 GPUs / 16,384 jobs, load 7-10, the explanations and the
        plan took 0.42-0.46 s of CPU, 2.6e-5-2.8e-5 a job; was 1e-4, a wall figure, which
        scaled by a slowdown of 3 stopped the aggregated bound 5 s before the deadline).
    explain_tail_s_per_item : float
        Seconds per job and free GPU the explanations stop early by, for building the plan,
        on an idle machine (times the slowdown; default 1e-5: about 10 us each).
    slowdown_after_s : float
        The machine's slowdown (``Budget.slowdown``: wall per CPU second of the solve so
        far) is read once this much wall time has passed; before, it is 1 (default 0.2 s,
        set by hand: a shorter window is one context switch away from reading 10x).
    aggregate_s_per_job : float
        What the aggregated model's LP bound (``solvers.backends.aggregate``) costs per job
        of the round in CPU seconds, to judge whether it fits; the driver multiplies it by
        the measured slowdown (``Budget.aggregate_s``) before comparing it with the wall
        time left (default 8e-6: measured 7.8e-6 and 6.7e-6 s of CPU a job on its first
        call in a process at 131,072 GPUs / 16,384 jobs and 262,144 / 32,768,
        fragmentation 0.6, load 1.5, 2026-12-02 12:48 UTC, about 3e-6 on later calls; at
        load 7-12 the bound took 0.3-0.5 s of wall at 16,384 jobs where the slowdown read
        2.4-3.6, so 2.2e-5-3.2e-5 of wall for 8e-6 x the slowdown's 1.9e-5-2.9e-5. Was
        1.5e-5 compared with wall time, and 3e-5 before). >= 0.
    aggregate_share : float
        The aggregated bound runs when its estimated cost is at most this share of what is
        left of the budget (default 0.1: it is cheap, and greedy's plan comes first). In
        [0, 1].
    """

    reserve_fraction: float = 0.08
    reserve_s: float = 0.1
    greedy_reserve_factor: float = 1.0
    cpsat_vars_per_second: int = 60_000
    milp_vars_per_second: int = 40_000
    auto_milp_above_vars: int = 3_000
    movers_per_second: int = 3_000
    min_movers: int = 256
    min_cut_budget_s: float = 0.2
    late_pass_fraction: float = 0.05
    greedy_tail_s_per_job: float = 4e-5
    min_exact_s: float = 0.02
    bound_tail_s_per_job: float = 4e-5
    explain_tail_s_per_item: float = 1e-5
    aggregate_s_per_job: float = 8e-6
    aggregate_share: float = 0.1
    slowdown_after_s: float = 0.2

    def __post_init__(self) -> None:
        if not 0 <= self.reserve_fraction < 1:
            raise ValueError(f"reserve_fraction must be in [0, 1) (got {self.reserve_fraction!r})")
        for name in ("reserve_s", "greedy_reserve_factor", "min_cut_budget_s",
                     "late_pass_fraction", "greedy_tail_s_per_job", "min_exact_s",
                     "bound_tail_s_per_job", "explain_tail_s_per_item", "aggregate_s_per_job",
                     "slowdown_after_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0 (got {getattr(self, name)!r})")
        if not 0 <= self.aggregate_share <= 1:
            raise ValueError(f"aggregate_share must be in [0, 1] (got {self.aggregate_share!r})")
        for name in ("cpsat_vars_per_second", "milp_vars_per_second", "auto_milp_above_vars",
                     "movers_per_second", "min_movers"):
            _positive_int(name, getattr(self, name))

    def vars_per_second(self, backend: str) -> int:
        """Variables per second of budget the driver allows ``backend``."""
        return self.milp_vars_per_second if backend == "milp" else self.cpsat_vars_per_second


@dataclass(frozen=True)
class CpSatParams:
    """CP-SAT settings.

    Parameters
    ----------
    large_model_vars : int
        Above this many variables presolve is cut short (no symmetry, no probing, one
        presolve pass): on large rounds presolve alone could eat the budget, and the greedy
        hint already gives a solution (default 20,000).
    max_deterministic_time : float, optional
        A limit of each search phase in CP-SAT's deterministic time (its work units, which
        do not depend on the machine's load; with one worker the search is then
        reproducible) beside the wall-clock budget: a replay whose decisions must not depend
        on the load sets it and gives the wall clock a ceiling instead of the budget
        (:data:`hyperplace.sim.planning.PLACE_WORK`). None: the wall clock only.
    """

    large_model_vars: int = 20_000
    max_deterministic_time: float | None = None

    def __post_init__(self) -> None:
        _positive_int("large_model_vars", self.large_model_vars)
        d = self.max_deterministic_time
        if d is not None and not (isinstance(d, (int, float)) and not isinstance(d, bool)
                                  and math.isfinite(d) and d > 0):
            raise ValueError(f"max_deterministic_time: must be a positive number or None, "
                             f"got {d!r}")


def cut_by_wall(wall_s: float, work_done: float, limit_s: float, work_s: float) -> bool:
    """Whether a CP-SAT search that proved nothing, given ``limit_s`` seconds and ``work_s``
    deterministic time (``CpSatParams.max_deterministic_time``, the schedule's work limit),
    was stopped by the wall clock rather than by its work limit: it did less work than its
    limit (a search the work limit stops has done at least that much: measured 1.0-1.05 x
    with one worker, about 2 x with two), or it used (nearly) all its seconds. Its own
    ``wall_time`` alone undercounts: a 0.1 s limit stopped it at 0.096 s and a 10 ms one at
    7 ms (OR-Tools 9.15, load 7, #20). The one rule for the schedule's search and the
    placement backend's phases."""
    return work_done < 0.99 * work_s or wall_s >= 0.98 * limit_s


@dataclass(frozen=True)
class GreedyParams:
    """Greedy settings.

    Parameters
    ----------
    max_domain_trials : int
        Domains tried per job, tightest first (default 10,000: every domain that has room
        on the bench's largest fabric).
    probe_domain_trials : int
        Domains tried when the explanations ask whether a pending job fits alone (default
        1,000: the answer is a sentence, not a plan).
    """

    max_domain_trials: int = 10_000
    probe_domain_trials: int = 1_000

    def __post_init__(self) -> None:
        _positive_int("max_domain_trials", self.max_domain_trials)
        _positive_int("probe_domain_trials", self.probe_domain_trials)


@dataclass(frozen=True)
class SolveParams:
    """Every tunable of a placement solve: the model's weights and the solvers'."""

    model: ModelParams = field(default_factory=ModelParams)
    budget: BudgetParams = field(default_factory=BudgetParams)
    cpsat: CpSatParams = field(default_factory=CpSatParams)
    greedy: GreedyParams = field(default_factory=GreedyParams)
