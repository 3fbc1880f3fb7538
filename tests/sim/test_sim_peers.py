"""Faithful peers (#21 item 5): Slurm's tree rule takes "fits" at the level it climbed to,
--switches waits max_switch_wait then runs across leaves, multifactor priority, whole-node
reservations, bf_window at least the longest time limit; queue policies walk in priority
order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hyperplace.baselines import cluster_views, new_state
from hyperplace.baselines.slurm import MAX_SWITCH_WAIT_S, place_job
from hyperplace.instances.generator import model_parallel_job, small_job
from hyperplace.models import Instance
from hyperplace.sim.jobs import SimJob
from hyperplace.sim.policies import SlurmBackfill, make_policy
from hyperplace.sim.simulator import SimConfig, simulate
from hyperplace.check import check
from hyperplace.baselines.common import build_plan, JobOutcome


def fat_tree(nodes_per_leaf: int = 2, leaves: int = 2) -> Instance:
    """``leaves`` leaves of ``nodes_per_leaf`` DGX H100 nodes each."""
    from hyperplace.models import Cluster, FabricGenerator, FabricSpec, InstanceSpec, Node
    from hyperplace.models.job import ObjectMeta

    nodes = [Node(name=f"n{i}", gpu_type="H100-80", gpu_count=8)
             for i in range(nodes_per_leaf * leaves)]
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=nodes_per_leaf, spines=2,
                          uplink_gbps=400.0)
    cluster = Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=gen))
    return Instance(metadata=ObjectMeta(name="t"), spec=InstanceSpec(clusters=[cluster]))


def test_switches_waits_max_switch_wait_then_runs_across_leaves():
    inst = fat_tree()
    # 3 replicas of 8 GPUs, one leaf asked for (maxHopCount 1): 2 nodes per leaf, so it
    # cannot fit on one leaf of the empty cluster
    job = model_parallel_job("big", "m", replicas=3, memory_gb=None, dp_ib_gbps=None,
                             dp_max_hops=1)
    views = cluster_views(inst)
    state = new_state(inst, "slurm-tree-style")
    out = place_job(job, state, views)
    assert not out.units and "--switches=1" in " ".join(out.reasons)
    state = new_state(inst, "slurm-tree-style")
    state.waited_s = {"big": MAX_SWITCH_WAIT_S}
    out = place_job(job, state, views)
    assert out.units and sum(len(g) for g in out.units.values()) == 24
    plan = build_plan(inst.model_copy(update={"spec": inst.spec.model_copy(
        update={"jobs": [job]})}), "slurm-tree-style", {"big": JobOutcome(units=out.units)}, 0.0)
    # the checker names the hop limit it broke (Slurm ran the job across leaves)
    codes = {v.code for v in check(plan, plan_instance(inst, job))}
    assert codes and all("hop" in c for c in codes), codes


def plan_instance(inst: Instance, job) -> Instance:
    return inst.model_copy(update={"spec": inst.spec.model_copy(update={"jobs": [job]})})


def sim_job(name: str, gpus: int, submit: float, work: float) -> SimJob:
    m = small_job(name, "llama3-8b", gpus) if gpus <= 8 else model_parallel_job(
        name, "llama3-70b", replicas=gpus // 8, memory_gb=None, dp_ib_gbps=None)
    return SimJob(name=name, submit_s=submit, work_s=work, gpus=gpus, manifest=m)


def test_multifactor_priority_ranks_age_and_size():
    inst = fat_tree()
    pol = SlurmBackfill(inst)
    from hyperplace.sim.loop import RoundLoop

    loop = RoundLoop(inst, pol)
    old_small, new_big = sim_job("a", 1, 0.0, 100.0), sim_job("b", 32, 3000.0, 100.0)
    for j in (old_small, new_big):
        loop.submit(j, j.submit_s)
    view = loop.view(3600.0)
    # one hour of age is worth 1000/168 points, the whole cluster's size 1000 points
    assert pol.priority(view, new_big) > pol.priority(view, old_small)
    assert [j.name for j in pol.ordered(view)] == ["b", "a"]
    weak = make_policy("slurm-default", inst)
    assert [j.name for j in weak.ordered(view)] == ["a", "b"]


@pytest.mark.parametrize("policy", ["slurm", "slurm-default", "kueue", "volcano", "fifo"])
def test_peers_replay_checked(policy: str):
    inst = fat_tree(nodes_per_leaf=2, leaves=2)
    jobs = [sim_job(f"j{i}", g, 30.0 * i, w) for i, (g, w) in enumerate(
        [(8, 4000), (16, 3000), (32, 2000), (1, 500), (4, 800), (8, 300), (16, 900),
         (2, 100)])]
    run = simulate(inst, jobs, policy, SimConfig(check=True, round_s=60))
    assert run.unfinished == 0
    assert all(r.end_s is not None for r in run.records)


def test_whole_node_reservations_keep_backfill_off_the_reserved_nodes():
    """A reserved 32-GPU job holds whole nodes: a 1-GPU job that would end after the
    reservation starts may not take a GPU of them (per-GPU reservations let it)."""
    inst = fat_tree(nodes_per_leaf=2, leaves=2)
    jobs = [sim_job("running", 24, 0.0, 600.0), sim_job("head", 32, 1.0, 600.0),
            sim_job("small", 1, 2.0, 5000.0)]
    whole = simulate(inst, [*map(_copy, jobs)], "slurm", SimConfig(round_s=60))
    per_gpu = simulate(inst, [*map(_copy, jobs)], "slurm-default", SimConfig(round_s=60))
    start = {r.job.name: r.first_start_s for r in whole.records}
    # whole nodes: the 1-GPU job cannot go on the free node the head's reservation holds
    assert start["small"] >= start["head"]
    start_pg = {r.job.name: r.first_start_s for r in per_gpu.records}
    assert start_pg["small"] <= start["small"]


def _copy(j: SimJob) -> SimJob:
    import copy

    return copy.deepcopy(j)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_backfill_board_counts_equal_the_reference(data):
    """Slurm backfill's array board (``_Board``) gives the reference ``_free_over`` counts
    for every span, through a cycle's starts and reservations in any order."""
    from hyperplace.sim.policies import _Board

    nodes = [f"n{i}" for i in range(data.draw(st.integers(1, 5)))]
    times = st.sampled_from([0.0, 30.0, 60.0, 60.5, 120.0, 300.0, 900.0, 3600.0])
    free_now = {n: list(range(data.draw(st.integers(0, 8)))) for n in nodes}
    releases = {n: [(data.draw(times), data.draw(st.integers(1, 8)))
                    for _ in range(data.draw(st.integers(0, 3)))] for n in nodes}
    reservations: list = []
    board = _Board(list(free_now), free_now, {n: list(v) for n, v in releases.items()})
    before = None  # the last step's start times and rows, asked again after the change
    for _ in range(data.draw(st.integers(1, 12))):
        if before is not None:  # the kept bounds went with the change: these are today's
            arr, rows = before
            gpus = data.draw(st.integers(1, 12))
            fresh = board.upper_sums(arr, rows).tolist()
            assert list(board.may_hold(arr, rows, gpus, first=1)) == [
                t for t, most in zip(arr.tolist(), fresh) if most >= gpus]
        t0 = data.draw(times)
        t1 = t0 + data.draw(st.sampled_from([0.5, 30.0, 60.0, 600.0, 5000.0]))
        want = SlurmBackfill._free_over(t0, t1, free_now, releases, reservations)
        assert board.counts(t0, t1).tolist() == [want[n] for n in nodes]
        # the loop's screen never drops a time whose counts could hold a job: its bound is
        # at least the accepted nodes' clipped counts, for every end
        rows = sorted(data.draw(st.sets(st.integers(0, len(nodes) - 1), min_size=1)))
        starts = sorted({t0, *(data.draw(times) for _ in range(3))})
        upper = board.upper_sums(np.array(starts), np.array(rows)).tolist()
        for t, most in zip(starts, upper):
            for span in (0.5, 30.0, 600.0, 5000.0):
                got = SlurmBackfill._free_over(t, t + span, free_now, releases, reservations)
                assert most >= sum(max(got[nodes[i]], 0) for i in rows)
        # the chunked screen yields exactly the times whose bound holds the job, in order;
        # a second job on the same times and rows reads the kept bounds (a first job that
        # stopped early left only a prefix of them)
        arr, rows_arr = np.array(starts), np.array(rows)
        gpus = data.draw(st.integers(1, 12))
        if data.draw(st.booleans()):
            next(iter(board.may_hold(arr, rows_arr, gpus, first=1)), None)
        for first in (1, 2):
            gpus = data.draw(st.integers(1, 12))
            screened = list(board.may_hold(arr, rows_arr, gpus, first=first))
            assert screened == [t for t, most in zip(starts, upper) if most >= gpus]
        before = (arr, rows_arr)
        n = data.draw(st.sampled_from(nodes))
        k = data.draw(st.integers(1, 8))
        if data.draw(st.booleans()) and free_now[n]:  # a start now on n
            free_now[n] = free_now[n][:-1]
            releases[n].append((t1, k))
            board.take_now(n, len(free_now[n]), t1, k)
        else:  # a reservation
            per = {m: data.draw(st.integers(1, 8)) for m in nodes
                   if m == n or data.draw(st.booleans())}
            reservations.append((t0, t1, per))
            board.reserve(t0, t1, per)


class _Unmemoised(SlurmBackfill):
    """Slurm's backfill asking the tree rule at every (job, time), as before the memo."""

    def _outcome(self, key, place):
        got = super()._outcome(key, place)
        self._outcomes.clear()
        return got


def two_types(leaves: int = 4, per_leaf: int = 2) -> Instance:
    """A fat-tree whose leaves alternate A100 and H100 nodes (8 GPUs each)."""
    from hyperplace.models import Cluster, FabricGenerator, FabricSpec, InstanceSpec, Node
    from hyperplace.models.job import ObjectMeta

    nodes = [Node(name=f"n{i}", gpu_type="H100-80" if (i // per_leaf) % 2 else "A100-80",
                  gpu_count=8) for i in range(leaves * per_leaf)]
    gen = FabricGenerator(type="fat-tree-2", nodes_per_leaf=per_leaf, spines=2,
                          uplink_gbps=400.0)
    return Instance(metadata=ObjectMeta(name="t"), spec=InstanceSpec(clusters=[
        Cluster(name="c", nodes=nodes, fabric=FabricSpec(generator=gen))]))


def _variants(rng, name: str) -> list[tuple[int, object]]:
    """One drawn job in each of its hop-limit variants (same GPUs and type selector)."""
    acc = rng.choice([None, "H100", "A100"])
    if rng.random() < 0.5:
        g, reps = rng.choice([2, 4, 6, 8]), rng.choice([1, 2, 3])
        return [(g * reps, small_job(f"{name}-{h}", "m", g, accelerator=acc, replicas=reps,
                                     max_hops=h)) for h in (None, 0, 1)]
    if rng.random() < 0.5:  # a unit of two nodes: its own hop limit is the job's
        return [(16, model_parallel_job(f"{name}-{h}", "m", replicas=1, tp=16,
                                        memory_gb=None, dp_ib_gbps=None, accelerator=acc,
                                        tp_max_hops=h)) for h in (None, 1)]
    reps = rng.choice([2, 3])
    return [(8 * reps, model_parallel_job(f"{name}-{h}", "m", replicas=reps, memory_gb=None,
                                          dp_ib_gbps=None, accelerator=acc, dp_max_hops=h))
            for h in (None, 1)]


def test_jobs_of_one_memo_key_get_the_same_nodes():
    """The memo's invariant itself: two jobs whose shape (``SlurmBackfill._shape``) and
    free counts on the nodes they accept are equal get the same nodes from the tree rule,
    whichever GPU indices are free (``range(k)`` as for a later time, a random subset as
    now), on a fat-tree of two types, with and without ``max_switch_wait`` run out. A key
    that leaves out anything the rule reads (a hop limit, the between-replica limit, the
    wait, the GPUs) makes some pair disagree."""
    import itertools
    import random

    from hyperplace.sim.policies import _per_node

    rng = random.Random(5)
    inst = two_types()
    pol = SlurmBackfill(inst)
    base = pol.placer.state(inst)
    nodes = [n.name for c in inst.clusters for n in c.nodes]
    seen: dict = {}
    for trial in range(400):
        counts = {n: rng.choice([0, 0, 2, 4, 6, 8]) for n in nodes}
        for (gpus, m), waited, now in itertools.product(
                _variants(rng, f"x{trial}"), (0.0, MAX_SWITCH_WAIT_S), (False, True)):
            job = SimJob(name=m.name, submit_s=0.0, work_s=1.0, gpus=gpus, manifest=m)
            key = (pol._shape(job, waited), tuple(counts[n] for n in pol.eligible(job)))
            free = {n: sorted(rng.sample(range(8), counts[n])) if now
                    else list(range(counts[n])) for n in nodes}
            fs = pol.placer.state_from(base, free)
            fs.waited_s = {job.name: waited}
            got = pol.placer.place(m, fs)
            per = _per_node(got) if got else None
            assert seen.setdefault(key, per) == per, (key, per, seen[key])
    assert len(seen) > 1000 and sum(v is None for v in seen.values()) > 100


def test_backfill_outcome_memo_changes_no_decision():
    """The backfill cycle's memo of the tree rule's outcome per job shape and free counts
    (``SlurmBackfill._outcome``, kept across cycles) starts every job where, when and at
    the speed the rule asked afresh at every time gives: two GPU types and type selectors,
    gangs of whole nodes, one-node and one-leaf (``--switches``) jobs, small jobs, and GPU,
    node and switch failures with their repairs."""
    import random

    rng = random.Random(7)
    inst = two_types()
    jobs = []
    for i in range(90):
        acc = rng.choice([None, None, "H100", "A100"])
        if rng.random() < 0.5:  # one unit: one node (-N 1), one leaf or anywhere
            gpus = rng.choice([1, 2, 4, 6, 8])
            m = small_job(f"j{i}", "llama3-8b", gpus, accelerator=acc,
                          max_hops=rng.choice([None, 0, 1]))
        else:  # gangs of whole nodes, most asking for one leaf (--switches=1)
            gpus = 8 * rng.choice([2, 3])
            m = model_parallel_job(f"j{i}", "llama3-70b", replicas=gpus // 8,
                                   memory_gb=None, dp_ib_gbps=None, accelerator=acc,
                                   dp_max_hops=rng.choice([None, 1, 1]))
        jobs.append(SimJob(name=f"j{i}", submit_s=rng.uniform(0, 6 * 3600), gpus=gpus,
                           manifest=m, work_s=rng.choice([300.0, 900.0, 2400.0, 7200.0])))
    jobs.sort(key=lambda j: j.submit_s)
    cfg = SimConfig(round_s=60, seed=3, failures=3000.0)
    runs = []
    for pol in (SlurmBackfill(inst), _Unmemoised(inst)):
        run = simulate(inst, [*map(_copy, jobs)], pol, cfg)
        runs.append({r.job.name: (r.first_start_s, r.end_s, r.restarts, tuple(r.speeds))
                     for r in run.records})
        assert run.failures  # the hardware failed and came back while jobs waited
    assert runs[0] == runs[1]
    starts = {name: got[0] for name, got in runs[0].items()}
    assert None not in starts.values()  # every job ran
    # and many after waiting: the memo was asked under contention
    assert sum(starts[j.name] > j.submit_s + 60 for j in jobs) > 10


def test_slurm_breaks_a_hop_limit_only_as_upstream_does_and_the_replay_counts_it():
    """A 3-replica job asking for one leaf (maxHopCount 1) on leaves of two nodes: Slurm's
    ``--switches=1`` gives way after max_switch_wait and runs it across leaves. The checked
    replay counts the break on the job (the only rule Slurm's tree plugin cannot keep);
    with nothing tolerated the same replay fails the checker."""
    from hyperplace.sim.loop import CheckFailed

    inst = fat_tree(nodes_per_leaf=2, leaves=2)
    big = model_parallel_job("big", "m", replicas=3, memory_gb=None, dp_ib_gbps=None,
                             dp_max_hops=1)
    jobs = [sim_job("small", 8, 0.0, 600.0),
            SimJob(name="big", submit_s=10.0, work_s=900.0, gpus=24, manifest=big)]
    run = simulate(inst, jobs, "slurm", SimConfig(check=True, round_s=60))
    breaks = {r.job.name: r.rule_breaks for r in run.records}
    assert breaks == {"small": set(), "big": {"replica-hop-count"}}
    first = next(r for r in run.records if r.job.name == "big").first_start_s
    assert first is not None and first >= 10.0 + MAX_SWITCH_WAIT_S
    strict = SlurmBackfill(inst)
    strict.tolerated = frozenset()
    with pytest.raises(CheckFailed, match="replica-hop-count"):
        simulate(inst, [SimJob(name=j.name, submit_s=j.submit_s, work_s=j.work_s, gpus=j.gpus,
                               manifest=j.manifest) for j in jobs], strict,
                 SimConfig(check=True, round_s=60))


@pytest.mark.parametrize("policy", ["kueue", "kueue-strict", "volcano"])
def test_kubernetes_peers_keep_every_hop_limit_of_the_fm_workload(policy: str):
    """200 foundation-model jobs (tensor-parallel groups and pipeline stages of one pod
    template, DataParallel maxHopCount 1) on mixed-a100-h100, every round checked: Kueue
    (one PodSet per template) and Volcano (hard mode) break no rule of any job. Kueue with
    one PodSet per resource group put a job's stages on racks 3 hops apart."""
    from hyperplace.instances import load_instance
    from hyperplace.sim.metrics import summarize
    from hyperplace.sim.run import SimRequest, build_workload

    inst = load_instance("mixed-a100-h100")
    wl, _ = build_workload(SimRequest(trace="philly", workload="fm", load=2.0, limit=200,
                                      repeat=1), inst, 0)
    run = simulate(inst, wl.jobs, policy, SimConfig(check=True, round_s=60))
    s = summarize(run)
    assert run.unfinished == 0 and s["finished"] == 200
    assert s["rule_break_jobs"] == 0 and s["rule_breaks"] == {}


def test_job_rules_read_a_federations_whole_job_and_leave_its_splits_to_it():
    """A federation's policies name units ``cluster:unit``: a job placed whole in one
    member is held to its rules like any other (its hop limit broken here across leaves);
    a job split over members is not (the federation's checker judges each part)."""
    from hyperplace.check import JobRules

    inst = fat_tree(nodes_per_leaf=2, leaves=2)
    job = model_parallel_job("j", "m", replicas=2, memory_gb=None, dp_ib_gbps=None,
                             dp_max_hops=1)
    names = [u.name for u in job.units()]
    spread = {names[0]: [("n0", g) for g in range(8)], names[1]: [("n2", g) for g in range(8)]}
    rules = JobRules(inst)
    assert {v.code for v in rules.start_violations(job, spread)} == {"replica-hop-count"}
    whole = {f"c:{u}": g for u, g in spread.items()}
    assert {v.code for v in rules.start_violations(job, whole)} == {"replica-hop-count"}
    split = {f"a:{names[0]}": spread[names[0]], f"b:{names[1]}": spread[names[1]]}
    assert rules.start_violations(job, split) == []
    packed = {names[0]: [("n0", g) for g in range(8)], names[1]: [("n1", g) for g in range(8)]}
    assert rules.start_violations(job, packed) == []  # one leaf: within the limit


def test_slurm_may_break_a_one_leaf_limit_only_after_max_switch_wait():
    """A checked replay forgives Slurm's rule a between-replica break of a limit of 1
    (``--switches=1``) only once the job has waited max_switch_wait; a spine limit (3: the
    tree plugin has none) at once; Volcano's rule none."""
    from hyperplace.sim.peers import PeerPlacer

    inst = fat_tree()
    slurm, volcano = PeerPlacer(inst, "slurm"), PeerPlacer(inst, "volcano")
    leaf = model_parallel_job("a", "m", replicas=3, memory_gb=None, dp_ib_gbps=None,
                              dp_max_hops=1)
    spine = model_parallel_job("b", "m", replicas=3, memory_gb=None, dp_ib_gbps=None,
                               dp_max_hops=3)
    assert not slurm.tolerates("replica-hop-count", leaf, MAX_SWITCH_WAIT_S - 1)
    assert slurm.tolerates("replica-hop-count", leaf, MAX_SWITCH_WAIT_S)
    assert slurm.tolerates("replica-hop-count", spine, 0.0)
    assert not slurm.tolerates("gpu-reused", spine, 1e9)
    assert not volcano.tolerates("replica-hop-count", spine, 1e9)
