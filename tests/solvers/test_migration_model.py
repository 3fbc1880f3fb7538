"""Migrations as decisions of the placement model (#14): every backend against a brute-force
optimum over every set of moved jobs (``placement_oracle.best_with_migrations``), on tiny
rounds; every plan through the independent checker.

An exact backend that says ``optimal`` must reach the oracle's objective 1, then its lost
work and its number of migrations; every plan's objective is at most the oracle's and its
bound at least; greedy's plan (the budget's floor) is valid.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_helpers import instance, job, node
from placement_oracle import best_with_migrations

from hyperplace.check import check
from hyperplace.formulations.placement import PlacementProblem
from hyperplace.models.migration import MigrationPolicy
from hyperplace.models.instance import RunningJob
from hyperplace.models.result import SolveStatus
from hyperplace.solvers.workflows.defrag import defrag, solve_with_migration

EXAMPLES = int(os.environ.get("HP_ORACLE_EXAMPLES", "12"))


def _with_running(inst, running):
    """``running``: (name, manifest or None, checkpoint age, priority) per running job."""
    spec = inst.spec.model_copy(update={"running_jobs": [
        RunningJob(name=n, checkpoint_age_s=age, priority=prio, job=manifest)
        for n, manifest, age, prio in running]})
    return inst.model_copy(update={"spec": spec})


def _two_leaves():
    # leaf 0: n0 (a: 4), n1 (c: 4); leaf 1: n2 (b: 4), n3 free. "big" needs 2 x 8 in a leaf.
    nodes = [node("n0", allocated={g: "a" for g in range(4)}),
             node("n1", allocated={g: "c" for g in range(4)}),
             node("n2", allocated={g: "b" for g in range(4)}), node("n3")]
    inst = instance(nodes, [job("big", replicas=2, dp_hop=2)])
    return _with_running(inst, [("a", job("a", tp=4), 600, 2), ("b", job("b", tp=4), 10, 2),
                                ("c", job("c", tp=4), 600, 2)])


def test_exact_backends_prove_the_cheapest_migration(exact_solver):
    inst = _two_leaves()
    plan = solve_with_migration(inst, solver=exact_solver, budget_s=10)
    assert check(plan, inst) == []
    assert plan.status == SolveStatus.OPTIMAL
    assert [(m.job, m.lost_gpu_seconds, m.for_job) for m in plan.migrations] == [("b", 40, "big")]
    assert plan.objective_terms["migrated_lost_gpu_seconds"] == 40
    assert plan.objective_terms["migrated_jobs"] == 1


def test_the_cheaper_set_of_two_beats_one_costly_move(exact_solver):
    # moving b alone (ages 900 s x 4 GPUs) or a and c together (2 x 4 x 100 s): the pair loses less
    inst = _two_leaves()
    inst = _with_running(inst, [("a", job("a", tp=4), 100, 2), ("b", job("b", tp=4), 900, 2),
                                ("c", job("c", tp=4), 100, 2)])
    plan = solve_with_migration(inst, solver=exact_solver, budget_s=10)
    assert check(plan, inst) == []
    assert plan.status == SolveStatus.OPTIMAL
    assert sorted(m.job for m in plan.migrations) == ["a", "c"]
    assert plan.objective_terms["migrated_lost_gpu_seconds"] == 800


def test_max_moves_and_nothing_moves_for_nothing(exact_solver):
    inst = _with_running(_two_leaves(), [("a", job("a", tp=4), 100, 2),
                                         ("b", job("b", tp=4), 900, 2),
                                         ("c", job("c", tp=4), 100, 2)])
    one = solve_with_migration(inst, solver=exact_solver, budget_s=10, max_moves=1)
    assert check(one, inst) == [] and [m.job for m in one.migrations] == ["b"]
    none = solve_with_migration(inst, solver=exact_solver, budget_s=10, max_moves=0)
    assert none.migrations == [] and "big" not in none.admitted
    idle = solve_with_migration(inst.with_jobs([job("small", tp=2)]), solver=exact_solver,
                                budget_s=10)
    assert idle.migrations == [] and idle.admitted == ["small"]
    assert idle.status == SolveStatus.OPTIMAL


def test_defrag_for_a_job_that_cannot_fit_is_proven(exact_solver):
    inst = _with_running(_two_leaves(), [("a", job("a", tp=4), 600, 2),
                                         ("b", None, 10, 2), ("c", None, 600, 2)])
    result = defrag(inst, "big", solver=exact_solver)
    assert result.migrations == [] and check(result.plan, inst) == []
    assert result.plan.status == SolveStatus.OPTIMAL
    assert "(proven)" in result.plan.pending[0].reasons[0]


def test_a_round_either_preempts_or_migrates():
    with pytest.raises(ValueError, match="preempts or migrates"):
        PlacementProblem(_two_leaves(), preemption="lower-priority", migration=MigrationPolicy())
    with pytest.raises(ValueError, match="max_moves"):
        MigrationPolicy(max_moves=-1)


@st.composite
def migrating_rounds(draw):
    """2-3 nodes of 4 GPUs in leaves of 2 nodes; 1-3 running jobs of 1-4 GPUs with manifests
    (some without), checkpoint ages; 1-2 pending jobs of 2-8 GPUs, some needing one leaf."""
    n_nodes = draw(st.integers(2, 3))
    gpus = [list(range(4)) for _ in range(n_nodes)]
    running = []
    allocated: list[dict[int, str]] = [{} for _ in range(n_nodes)]
    for r in range(draw(st.integers(1, 3))):
        name = f"r{r}"
        size = draw(st.sampled_from([1, 2, 4]))
        where = draw(st.integers(0, n_nodes - 1))
        if len(gpus[where]) < size:
            continue
        for g in gpus[where][:size]:
            allocated[where][g] = name
        gpus[where] = gpus[where][size:]
        manifest = job(name, tp=size) if draw(st.booleans()) or r == 0 else None
        running.append((name, manifest, draw(st.sampled_from([0, 5, 60, 300])),
                        draw(st.integers(1, 3))))
    nodes = [node(f"n{i}", gpus=4, allocated=allocated[i]) for i in range(n_nodes)]
    pending = []
    for k in range(draw(st.integers(1, 2))):
        tp = draw(st.sampled_from([2, 4, 4]))
        replicas = draw(st.integers(1, 2))
        pending.append(job(f"p{k}", tp=tp, replicas=replicas, priority=draw(st.integers(1, 3)),
                           dp_hop=draw(st.sampled_from([None, 0, 2])) if replicas > 1 else None))
    return _with_running(instance(nodes, pending), running)


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(inst=migrating_rounds())
def test_every_backend_against_the_oracle(inst, solvers):
    best = best_with_migrations(inst)
    for solver in solvers:
        # a generous budget: an exact backend must prove its plan (greedy only may)
        plan = solve_with_migration(inst, solver=solver, budget_s=30, workers=1, seed=0)
        assert check(plan, inst) == [], solver
        assert plan.objective <= best[0] + 1e-6, (solver, plan.objective, best)
        assert plan.bound >= best[0] - 1e-6, (solver, plan.bound, best)
        if solver != "greedy":
            assert plan.status == SolveStatus.OPTIMAL, (solver, plan.status, plan.message)
        if plan.status == SolveStatus.OPTIMAL:
            got = (plan.objective, -plan.objective_terms["migrated_lost_gpu_seconds"],
                   -len(plan.migrations), plan.objective_terms["admitted_jobs"])
            assert got == best, (solver, got, best)


@pytest.fixture(scope="module")
def solvers(request) -> list[str]:
    """The backends chosen with ``--solvers``, and ``auto``."""
    chosen = [s for s in request.config.getoption("solvers").split(",") if s]
    return chosen + (["auto"] if "auto" not in chosen else [])


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(inst=migrating_rounds(), moves=st.integers(1, 2))
def test_defrag_without_a_job_against_the_oracle(inst, moves, solvers):
    """``defrag`` without ``--for``: the largest free domain, then lost work, then moves."""
    from placement_oracle import best_free_domain

    from hyperplace.solvers.workflows.defrag import defrag_cluster

    best = best_free_domain(inst.with_jobs([]), moves)
    for solver in [*solvers, "greedy"]:
        r = defrag_cluster(inst, max_moves=moves, solver=solver, budget_s=30)
        assert check(r.plan, inst) == [], solver
        got = (r.plan.objective_terms["largest_free_domain_gpus"],
               -r.plan.objective_terms.get("migrated_lost_gpu_seconds", 0.0),
               -len(r.migrations))
        assert got <= best, (solver, got, best)
        if solver != "greedy":  # a generous budget: an exact backend proves it
            assert r.plan.status == SolveStatus.OPTIMAL, (solver, r.plan.message)
        if r.plan.status == SolveStatus.OPTIMAL:
            assert got == best, (solver, got, best)


def test_a_running_job_holding_more_than_its_manifest_is_refused(tmp_path):
    # "big" holds 4 GPUs but its manifest asks for 2: it would shrink when moved (and a
    # greedy bound of the free GPUs alone was below what migrating it admits). Refused with
    # the field, in the library, with --running, and on the CLI (one line, exit 2)
    import subprocess
    import sys

    import yaml

    from hyperplace.models.instance import Instance

    inst = instance([node("n0", allocated={**{g: "big" for g in range(4)},
                                           **{g: "other" for g in range(4, 8)}})],
                    [job("p2", tp=2)])
    doc = _with_running(inst, [("big", job("big", tp=2), 10, 2)]).model_dump(
        mode="json", by_alias=True, exclude_none=True)
    with pytest.raises(ValueError, match=r"runningJobs\[0\]\.job: the manifest of 'big' asks"):
        Instance.model_validate(doc)
    with pytest.raises(ValueError, match="asks for 2 GPU"):
        inst.with_running_manifests([job("big", tp=2)])
    ok = inst.with_running_manifests([job("big", tp=4)])  # as many as it holds: fine
    assert ok.running_manifests["big"].total_gpus == 4
    path = tmp_path / "i.yaml"
    path.write_text(yaml.safe_dump(doc))
    run = subprocess.run([sys.executable, "-m", "hyperplace.cli", "solve", "-i", str(path),
                          "--running-moveable"], capture_output=True, text=True)
    assert run.returncode == 2, run.stderr
    assert run.stderr.count("\n") == 1 and "asks for 2 GPU(s), but it holds 4" in run.stderr
