"""Dump every plan the engine makes on the bundled, peer and a few generated instances as
JSON without run-time fields, to prove a restructuring leaves plans identical.

Usage::

    .venv/bin/python bench/dump_plans.py OUT_DIR [--quick]
    diff -r BEFORE_DIR AFTER_DIR

Each file is ``solve(...).to_doc()`` (what ``hyperplace solve --format json`` writes) minus
``runtimeS`` and ``message`` (timing-dependent), one per (instance, solver). CP-SAT runs with
one worker so that its answer is deterministic; every peer rule's plan (seed 0) too. Then the workflows (:func:`workflows`) on
two moveable generated instances, unless ``--no-workflows``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hyperplace.baselines import BASELINES  # noqa: E402
from hyperplace.benchkit.peer_cases import PEER_CASES, load_peer_case  # noqa: E402
from hyperplace.instances.generator import generate  # noqa: E402
from hyperplace.instances.registry import list_instances, load_instance  # noqa: E402
from hyperplace.solvers.driver import solve_placement  # noqa: E402

RUNTIME_FIELDS = ("runtimeS", "message")
GENERATED = [  # (gpus, jobs, fragmentation, size_scale)
    (256, 30, 0.5, 1), (512, 60, 0.9, 1), (1024, 40, 0.3, 8), (1024, 100, 0.9, 1)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--quick", action="store_true", help="skip instances above 2,000 GPUs")
    ap.add_argument("--no-workflows", action="store_true",
                    help="skip the workflows (preemption, migration, defrag, repair)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.no_workflows:
        workflows(args.out)
    cases = [(i.name, lambda n=i.name: load_instance(n), i.gpus) for i in list_instances()]
    cases += [(n, lambda n=n: load_peer_case(n), 0) for n in PEER_CASES]
    cases += [(f"gen-{g}g-{j}j-f{f}-x{s}",
               lambda g=g, j=j, f=f, s=s: generate(g, j, ["H100-80", "A100-80"], f, 1,
                                                   size_scale=s), g)
              for g, j, f, s in GENERATED]
    for name, load, gpus in cases:
        if args.quick and gpus > 2000:
            continue
        inst = load()
        for solver in ("greedy", "auto", "cpsat", "milp"):
            _dump(args.out, f"{name}.{solver}",
                  solve_placement(inst, solver=solver, budget_s=20, seed=0, workers=1))
        for rule in BASELINES:  # the peers' plans: built by the same plan builder
            _dump(args.out, f"{name}.peer-{rule}", BASELINES[rule](inst, seed=0))


def _dump(out: Path, name: str, plan) -> None:
    doc = plan.to_doc()
    for key in RUNTIME_FIELDS:
        doc.pop(key, None)
    (out / f"{name}.json").write_text(json.dumps(doc, indent=1, sort_keys=True))
    print(name, doc["status"], doc.get("objective"), flush=True)


def workflows(out: Path) -> None:
    """The workflows on the bench's moveable instances (``bench_scale.with_movers``: every
    running job has a manifest and a checkpoint age): preemption under both policies,
    migration, defragmentation (whole cluster, and for the first pending job) and repair of
    the first node holding a running job under the three strategies. Greedy and HiGHS
    only: the workflows do not take CP-SAT's worker count, and two workers are not
    deterministic."""
    import importlib.util

    from hyperplace.solvers.workflows.defrag import defrag, defrag_cluster, solve_with_migration
    from hyperplace.solvers.workflows.repair import repair

    spec = importlib.util.spec_from_file_location("bench_scale", ROOT / "bench" / "bench_scale.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    for gpus, jobs, frag in ((128, 12, 0.8), (256, 20, 0.8)):
        inst = bench.with_movers(generate(gpus, jobs, bench.TYPES, frag, 3), 3)
        tag = f"wf-{gpus}g-{jobs}j-f{frag}"
        first_pending = inst.spec.jobs[0].metadata.name
        hit = next(n.name for c in inst.spec.clusters for n in c.nodes if n.allocated)
        for solver in ("greedy", "milp"):
            for policy in ("lower-priority", "reclaim-within-cohort"):
                _dump(out, f"{tag}.preempt-{policy}.{solver}",
                      solve_placement(inst, solver=solver, budget_s=20, seed=0, workers=1,
                                      preemption=policy))
            _dump(out, f"{tag}.migrate.{solver}",
                  solve_with_migration(inst, solver=solver, budget_s=20, max_moves=3))
            _dump(out, f"{tag}.defrag-cluster.{solver}",
                  defrag_cluster(inst, max_moves=2, solver=solver, budget_s=20).plan)
            _dump(out, f"{tag}.defrag-for.{solver}",
                  defrag(inst, first_pending, max_moves=2, solver=solver, budget_s=20).plan)
            for strategy in ("minimal", "replace-all", "replace-everything"):
                _dump(out, f"{tag}.repair-{strategy}.{solver}",
                      repair(inst, [(hit, None)], strategy=strategy, solver=solver,
                             budget_s=20).plan)


if __name__ == "__main__":
    main()
