"""One solve's time budget: every deadline rule of the driver in one place, its constants in
:class:`~hyperplace.solvers.params.BudgetParams` (each with why it has its value).

The budget runs from the loaded instance to the plan, explanations included. Greedy runs
first and stops early enough for what follows it; the exact backend gets what is left after
the reserve (:meth:`Budget.reserve`: mapping back, the inversion fix and the
explanations); the LP bounds and the explanations stop in time for the plan to be built.

What is kept for building and writing the plan follows one rule: each tail is an idle
machine's CPU figure times the machine's measured slowdown (:meth:`Budget.slowdown`: this
solve's wall seconds per CPU second so far, the problem build first; never lowered):

- greedy stops ``reserve_s + greedy_tail_s_per_job x pending x slowdown`` before the plan
  deadline (:meth:`Budget.greedy_deadline`: the bounds, explanations and plan after it);
- the LP bounds ``reserve_s + bound_tail_s_per_job x jobs x slowdown`` before it;
- the explanations ``explain_tail_s_per_item x (jobs + placeable GPUs) x slowdown`` before
  it (:meth:`Budget.plan_tail_s`: building the plan, which lists every placed GPU and every
  pending job; placeable: the free GPUs, at most what the jobs ask);
- the aggregated bound is estimated at ``aggregate_s_per_job x jobs x slowdown``;
- the plan deadline itself is the caller's less ``(slowdown - 1) x write_s``: the caller
  (the CLI, ``hyperplace.deadline.write_reserve_s``, by the format it writes) took its
  idle figure for serialising and writing the plan off already.

On a loaded machine every phase takes that many times its CPU time (131,072 GPUs / 16,384
jobs at load 8-11: building the plan 1.0-2.5 s of wall for 0.4-0.8 s of CPU), and the
unscaled tails were overrun (#25 review R1: 11.8 s of wall at budget 10, the plan's
runtimeS saying 9.3 s). The figures and where they were measured: ``BudgetParams``,
``hyperplace.deadline.WRITE_S_PER_ITEM``; the rows: ``bench/results/scale.md``, "The budget
promise under load".
"""

from __future__ import annotations

import time
from collections.abc import Callable

from hyperplace.solvers.params import BudgetParams


class Budget:
    """The deadlines of one solve of ``budget_s`` seconds started now.

    ``deadline``: a ``time.perf_counter()`` value the plan must be ready by when that is
    sooner than ``budget_s`` from now (the CLI passes process start + budget - the time it
    keeps for writing, so that the budget covers reading the files too). ``write_s``: that
    time for writing, an idle machine's figure already taken off ``deadline``; the plan is
    made ready ``(slowdown - 1) x write_s`` earlier still (:attr:`deadline`).
    ``clock``/``cpu_clock``: wall and CPU clocks (None: ``time.perf_counter`` and
    ``time.process_time`` as they are when the budget is made, not as they were when this
    module was imported, so a patched clock reaches every budget; tests inject others).
    """

    def __init__(self, budget_s: float, params: BudgetParams, deadline: float | None = None,
                 clock: Callable[[], float] | None = None,
                 cpu_clock: Callable[[], float] | None = None,
                 write_s: float = 0.0) -> None:
        self.budget_s = budget_s
        self.params = params
        self.clock = clock = clock or time.perf_counter
        self.cpu_clock = cpu_clock = cpu_clock or time.process_time
        self.write_s = write_s
        self.start = clock()
        self.cpu_start = cpu_clock()
        self.end = self.start + budget_s if deadline is None else \
            min(deadline, self.start + budget_s)
        self.slow = 1.0

    def slowdown(self) -> float:
        """How many wall seconds a CPU second of this solve takes now: its wall time per
        CPU second since it started (the problem build first), once ``slowdown_after_s``
        of wall has passed (1 before: a short window is noise), never lowered (an exact
        backend's threads add CPU faster than wall; what it measured before stands)."""
        wall = self.clock() - self.start
        if wall >= self.params.slowdown_after_s:
            cpu = self.cpu_clock() - self.cpu_start
            self.slow = max(self.slow, wall / max(cpu, 1e-6))
        return self.slow

    @property
    def deadline(self) -> float:
        """When the plan must be ready: the caller's deadline, less the caller's writing
        scaled by the slowdown on top of its idle figure."""
        return self.end - (self.slowdown() - 1.0) * self.write_s

    def left(self) -> float:
        """Seconds to the deadline (negative once past it)."""
        return self.deadline - self.clock()

    @property
    def reading_s(self) -> float:
        """What the caller's deadline took off the budget (start-up, reading the files)."""
        return self.budget_s - (self.deadline - self.start)

    def max_movers(self) -> int:
        """Movers a migrating round may have: as many as what is left of the budget affords
        (every mover is a job and node classes more), at least ``min_movers``."""
        p = self.params
        return max(p.min_movers, int(p.movers_per_second * max(0.0, self.left())))

    @property
    def cuts_greedy(self) -> bool:
        """Greedy stops at its deadline (below ``min_cut_budget_s`` it makes one whole pass:
        the budget's floor)."""
        return self.budget_s >= self.params.min_cut_budget_s

    def greedy_deadline(self, pending: int) -> float | None:
        """When greedy (and the heuristics after it) stop, for ``pending`` pending jobs: in
        time for the bounds, the explanations and the plan, ``reserve_s +
        greedy_tail_s_per_job x pending x slowdown`` before :attr:`deadline`; None: one
        whole pass. (It kept ``reserve_fraction`` of the budget too, unscaled, as a margin
        for load: with the tail scaled it stopped greedy 3 s early at 131,072 GPUs, load 9.)"""
        if not self.cuts_greedy:
            return None
        p = self.params
        return self.deadline - p.reserve_s - self.slowdown() * p.greedy_tail_s_per_job * pending

    @property
    def late_pass_s(self) -> float:
        """What a greedy pass that starts late gets on top of ``greedy.LATE_PASS_S``."""
        return self.params.late_pass_fraction * self.budget_s

    def reserve(self, greedy_pass_s: float) -> float:
        """THE reserve: seconds kept back from the exact backend for mapping its solution to
        GPUs and its inversion fix (about one greedy pass over the queue; greedy's first
        pass took ``greedy_pass_s``): ``reserve_s + reserve_fraction x budget +
        greedy_reserve_factor x greedy_pass_s``.

        The explanations get no share of it: they run in what is left before the plan is
        built (:meth:`explain_deadline`), and a pending job whose per-job analysis did not
        fit says so in the plan (``PendingJob.analysis: skipped``)."""
        p = self.params
        return p.reserve_s + p.reserve_fraction * self.budget_s + \
            p.greedy_reserve_factor * greedy_pass_s

    def exact_need_s(self, est_vars: int, vars_per_second: int) -> float:
        """Seconds the exact backend's model of ``est_vars`` variables needs (the rate the
        driver judges it by, :meth:`exact_fits`)."""
        return est_vars / vars_per_second

    def second_pass_ok(self, exact_need_s: float, first_pass_s: float) -> bool:
        """Whether greedy's second pass (about as long as its first, ``first_pass_s``) may
        run: yes when the exact model could not run anyway, or still fits after it; no when
        the second pass would take the time the exact model needs."""
        without = self.left() - self.reserve(first_pass_s)
        if without < exact_need_s:
            return True  # greedy's plan is the answer: make it the better of two passes
        return without - 1.2 * first_pass_s >= exact_need_s

    def exact_left(self, reserve: float) -> float:
        """Seconds the exact backend may use now (never negative)."""
        return max(0.0, self.left() - reserve)

    def exact_fits(self, est_vars: int, vars_per_second: int, reserve: float) -> bool:
        """A model of ``est_vars`` variables is worth starting with what is left."""
        return est_vars <= vars_per_second * self.exact_left(reserve)

    def solve_limit(self, reserve: float) -> float | None:
        """The exact backend's time limit once its model is built; None when less than
        ``min_exact_s`` is left."""
        limit = self.left() - reserve
        return None if limit <= self.params.min_exact_s else limit

    def aggregate_fits(self, jobs: int) -> bool:
        """The aggregated model's bound (about ``aggregate_s_per_job`` a job) is worth
        computing now: it costs at most ``aggregate_share`` of what is left (its estimate,
        :meth:`aggregate_s`, in wall seconds)."""
        return self.aggregate_s(jobs) <= self.params.aggregate_share * self.left()

    def aggregate_s(self, jobs: int) -> float:
        """Wall seconds the aggregated bound is estimated to take for ``jobs`` jobs: its
        idle CPU figure (``aggregate_s_per_job``) times the slowdown, plus 5 ms."""
        return self.slowdown() * self.params.aggregate_s_per_job * jobs + 0.005

    def aggregate_fits_late(self, jobs: int, free_gpus: int) -> bool:
        """The aggregated bound's second chance, once the plan is chosen (phase 3, before the
        model's LP relaxation): only the explanations, which stop at their own deadline and
        say which jobs got no full reason, come after it, so it runs when its estimated cost
        fits whole before :meth:`explain_deadline` (the time the plan is built in is kept;
        its own HiGHS call stops there too)."""
        return self.aggregate_s(jobs) <= self.explain_deadline(jobs, free_gpus) - self.clock()

    def bounds_deadline(self, jobs: int) -> float:
        """When the LP bounds stop: in time for the explanations and the plan (their idle
        figure times the slowdown)."""
        return self.deadline - self.params.reserve_s - \
            self.slowdown() * self.params.bound_tail_s_per_job * jobs

    def plan_tail_s(self, jobs: int, free_gpus: int) -> float:
        """Seconds kept for building the plan of ``jobs`` jobs that may place ``free_gpus``
        GPUs (every placed GPU and every pending job is written; the driver passes
        ``driver.placeable_gpus``: the free GPUs, at most what the jobs ask):
        ``explain_tail_s_per_item x (jobs + free_gpus) x slowdown``."""
        return self.slowdown() * self.params.explain_tail_s_per_item * (jobs + free_gpus)

    def explain_deadline(self, jobs: int, free_gpus: int) -> float:
        """When the explanations stop: in time for the plan to be built
        (:meth:`plan_tail_s`)."""
        return self.deadline - self.plan_tail_s(jobs, free_gpus)

    def elapsed(self) -> float:
        return self.clock() - self.start
