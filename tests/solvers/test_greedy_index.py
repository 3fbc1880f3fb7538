"""Greedy's free-GPU index: the leaves' bit sets stay equal to the per-leaf counts they
mirror, and best fit's leaf order over them is the order its rule defines (the job's leaves
first, whole racks last, then the domain's leaf order), as the scan over the counts gave it."""

from __future__ import annotations

import random

import pytest

from hyperplace.formulations.placement import PlacementProblem
from hyperplace.instances.generator import generate
from hyperplace.instances.nvl72 import generate_nvl72
from hyperplace.formulations.mapping import Assignment, PlacedUnit
from hyperplace.solvers.heuristics.greedy import (
    State,
    _one_pass,
    fix_inversions,
    job_orders,
    solve_greedy,
)
from hyperplace.solvers.params import GreedyParams
from placement_helpers import instance, job, node


def _problems() -> list[PlacementProblem]:
    return [PlacementProblem(generate(1024, 120, ["H100-80", "A100-80"], 0.6, 3)),
            PlacementProblem(generate(2048, 200, ["H100-80", "A100-80"], 0.4, 5), hot_spares=1),
            PlacementProblem(generate_nvl72(4, 30, 0.5, 2))]


def _scramble(state: State, p: PlacementProblem, rng: random.Random, steps: int) -> None:
    """Take and give back random GPUs, as passes, probes and the inversion fix do."""
    held: list[tuple[str, tuple[int, ...]]] = []
    names = [n.name for n in p.nodes]
    for _ in range(steps):
        if held and rng.random() < 0.4:
            state.give(*held.pop(rng.randrange(len(held))))
            continue
        name = rng.choice(names)
        free = state.free[name]
        if free:
            gpus = tuple(rng.sample(free, rng.randint(1, len(free))))
            state.take(name, gpus)
            held.append((name, gpus))


def _old_order(state: State, types: list[str], f: int, untouched: bool,
               leaves: list, job_leaves: set) -> list:
    """The order the scan over ``leaves_with`` gave (the rule as first written)."""
    pos = {leaf: i for i, leaf in enumerate(leaves)}
    found: set = set()
    for t in types:
        found.update(state.leaves_with.get((t, f, untouched), ()))
    cands = [leaf for leaf in found if leaf in pos and (not untouched or state.may_open(leaf))]
    return sorted(cands, key=lambda leaf: (leaf not in job_leaves, state.whole_rack(leaf),
                                           pos[leaf]))


@pytest.mark.parametrize("case", range(3))
def test_bit_sets_mirror_the_counts_and_give_the_rule_order(case: int) -> None:
    p = _problems()[case]
    rng = random.Random(case)
    state = State(p)
    domains = [leaves for hop in (None, 0, 1, 2) for leaves in
               p.leaves_by_domain(hop, True).values()]
    all_leaves = list(p.nodes_by_leaf)
    # a list out of the round's order takes the general path and must give the same order
    domains.append(list(reversed(all_leaves)))
    types = sorted(p.types_present)
    checked = 0
    for _ in range(6):
        _scramble(state, p, rng, 60)
        for key, counts in state.leaves_with.items():
            assert state.masks.get(key, 0) == sum(1 << state.rank[leaf] for leaf in counts)
        for _ in range(40):
            leaves = rng.choice(domains)
            mine = set(rng.sample(leaves, min(len(leaves), rng.randint(0, 2))))
            ts = rng.sample(types, rng.randint(1, len(types)))
            f, untouched = rng.randint(1, p.max_gpus_per_node), rng.random() < 0.5
            mask = 0
            for t in ts:
                mask |= state.masks.get((t, f, untouched), 0)
            domain, ordered = state.domain_mask(leaves)
            mask &= domain
            if untouched and state.openings:
                mask = state.openable(mask)
            got = list(state.in_order(mask, ordered, leaves, mine)) if mask else []
            assert got == _old_order(state, ts, f, untouched, leaves, mine)
            checked += bool(got)
    assert checked > 20  # the orders compared were not all empty


def test_greedy_plan_passes_the_checker_on_every_kind() -> None:
    from hyperplace.check import check
    from hyperplace.solvers.driver import solve_placement

    for p in _problems():
        a = solve_greedy(p)
        assert a.units
        plan = solve_placement(p.instance, solver="greedy", budget_s=30,
                               hot_spares=p.hot_spares)
        assert check(plan, p.instance) == []


@pytest.mark.parametrize("case", range(3))
def test_the_state_is_a_function_of_the_free_gpus(case: int) -> None:
    # takes and gives that end where they began leave the index as a fresh state's: best
    # fit's choices depend on the free GPUs, not on the searches before
    p = _problems()[case]
    state = State(p)
    held: list[tuple[str, tuple[int, ...]]] = []
    rng = random.Random(10 + case)
    for name in rng.sample([n.name for n in p.nodes], min(40, len(p.nodes))):
        free = state.free[name]
        if free:
            gpus = tuple(rng.sample(free, rng.randint(1, len(free))))
            state.take(name, gpus)
            held.append((name, gpus))
    rng.shuffle(held)
    for name, gpus in held:
        state.give(name, gpus)
    fresh = State(p)
    assert state.free == fresh.free
    nonzero = {leaf: {t: {k: b for k, b in by.items() if b} for t, by in types.items()}
               for leaf, types in state.index.items()}
    assert {leaf: {t: by for t, by in types.items() if by} for leaf, types in nonzero.items()
            if any(types.values())} == \
        {leaf: {t: dict(by) for t, by in types.items() if by} for leaf, types in
         fresh.index.items() if any(types.values())}
    assert {k: m for k, m in state.masks.items() if m} == \
        {k: m for k, m in fresh.masks.items() if m}


def _inverted_rounds() -> list[tuple[PlacementProblem, Assignment]]:
    """Rounds whose inversion fix searches with lower-priority jobs released: generated full
    clusters (every such search fails there) and a hand-made one where it succeeds (a
    low-priority job on one of two nodes blocks a high-priority 2-node job)."""
    out = []
    for gpus, jobs, seed in [(1024, 150, 2), (2048, 300, 0), (2048, 300, 3)]:
        p = PlacementProblem(generate(gpus, jobs, ["H100-80", "A100-80"], 0.6, seed))
        out.append((p, _one_pass(p, job_orders(p)[1], GreedyParams())))
    p = PlacementProblem(instance([node("n0"), node("n1")],
                                  [job("low", tp=8, priority="low"),
                                   job("high", tp=8, replicas=2, priority="high")],
                                  nodes_per_leaf=1))
    low = p.jobs[0]
    out.append((p, Assignment(units={0: [PlacedUnit(low.classes[0].index, "tp/0",
                                                    [("n0", tuple(range(8)))])]})))
    return out


def test_the_level_probe_skips_only_searches_that_fail(monkeypatch) -> None:
    from hyperplace.check import check
    from hyperplace.formulations.mapping import to_plan
    from hyperplace.models.result import SolveStats, SolveStatus
    from hyperplace.solvers.heuristics import greedy as greedy_module

    verdicts: list[bool] = []
    real = greedy_module._LevelProbe.fits

    def counted(self, jv, trials):
        verdicts.append(real(self, jv, trials))
        return verdicts[-1]

    for p, start in _inverted_rounds():
        monkeypatch.setattr(greedy_module._LevelProbe, "fits", counted)
        fixed = fix_inversions(p, start)
        # without the probe every release search runs: the same plan, in the same order
        monkeypatch.setattr(greedy_module._LevelProbe, "fits", lambda self, jv, trials: True)
        searched = fix_inversions(p, start)
        assert list(searched.units.items()) == list(fixed.units.items())
        stats = SolveStats(status=SolveStatus.FEASIBLE, solver="greedy")
        assert check(to_plan(p, fixed, stats, {}), p.instance) == []
    assert True in verdicts and verdicts.count(False) >= 3  # both kinds of search were met
    assert list(fixed.units) == [1]  # the hand-made round: high in, low out


@pytest.mark.parametrize("case", range(3))
def test_a_rounds_later_states_are_copies_of_its_fresh_one(case: int) -> None:
    # the first state of a round is indexed from the views, the later ones are copied from
    # it; what an earlier state took does not leak into them
    from hyperplace.solvers.heuristics import greedy as greedy_module

    p = _problems()[case]
    first = State(p)
    _scramble(first, p, random.Random(case), 80)
    _scramble(State(p), p, random.Random(case + 1), 80)  # a copy, changed
    later = State(p)
    greedy_module._FRESH.pop(p)
    built = State(p)  # indexed from the views again
    for name in ("free", "index", "leaves_with", "masks", "leaf_free"):
        assert getattr(later, name) == getattr(built, name), name
    assert later.index is not built.index and later.free is not first.free
    assert [type(r) for r in later.openings] == [type(r) for r in built.openings]
    assert all(a is not b for a, b in zip(later.openings, first.openings))
    assert [later.may_open(leaf) for leaf in later.leaf_at] == \
        [built.may_open(leaf) for leaf in built.leaf_at]
