"""The federation driver: shapes, greedy, CP-SAT, verification as placed, the plan.

``federate(problem, budget_s=10, solver="auto")``:

1. enumerate each job's admissible shapes (``shapes.py``), each part probed as placed;
2. greedy: jobs by priority, each takes its most preferred shape whose clusters still
   place it (engine + checker on the clusters it touches, with the jobs already taken);
3. ``auto``/``cpsat``: the lexicographic CP-SAT model of ``formulation.py`` hinted with the
   greedy answer; its answer is verified per cluster by the placement engine and the
   checker, and any combination the engine cannot place is cut off and the model re-solved
   while the budget lasts;
   ``optimal`` means proven over the enumerated shapes (``shapes.py`` says which shapes
   are enumerated and where the enumeration is capped); when the budget cut the
   enumeration short the status is at best ``feasible`` and the bound counts every job;
4. the verified answer (or greedy's, marked ``fallback``) becomes a :class:`FederationPlan`
   with, per job, the even split and Karmada's Aggregated division priced by the same cost
   model for comparison, and every pending job's reasons.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from hyperplace.federation import karmada
from hyperplace.federation.asplaced import (
    VERIFY_BUDGET_S,
    ClusterPlacement,
    Location,
    Part,
    Prober,
    locations,
    place,
    sub_job,
    sub_job_name,
)
from hyperplace.federation.formulation import (
    Candidate,
    FederationData,
    build_data,
    fits_totals,
    greedy_order,
    solve_cpsat,
)
from hyperplace.federation.pricing import Price, Pricer
from hyperplace.federation.problem import FederatedJob, FederationProblem
from hyperplace.federation.shapes import JobShapes, Shape, enumerate_shapes
from hyperplace.models.federation import (
    Alternative,
    FederatedJobPlan,
    FederationMeta,
    FederationPlan,
    PendingFederatedJob,
    Prediction,
    StageRange,
    StepParts,
    SubJob,
    Verification,
    WanUse,
)
from hyperplace.models.plan import GPURef
from hyperplace.models.result import SolveStatus, relative_gap

SOLVERS = ("auto", "cpsat", "greedy")
# Share of the budget for enumerating shapes (probes and splits) before only monolithic
# shapes are enumerated for the remaining jobs.
ENUMERATION_SHARE = 0.55
# Share of the budget kept back after the solve for verification, the Karmada comparison
# and building the plan (a 16-cluster round overran a 10 s budget by 0.01 s without it).
RESERVE_FRACTION = 0.1
MAX_VERIFY_ROUNDS = 8
KARMADA_PLACE_BUDGET_S = 0.3
MAX_GREEDY_TRIES = 8
COST_MODEL_NOTE = ("step times from hyperplace's layer-split cost model (solve_split): "
                   "per-layer times of the model fitted on measured large runs (or measured "
                   "per-layer times where a profile exists), 1F1B pipeline, NVLink/IB/WAN "
                   "transfers")


@dataclass
class RoundState:
    """Verification memo: which sets of parts each cluster can place together."""

    problem: FederationProblem
    budget_end: float
    memo: dict[tuple, ClusterPlacement] = field(default_factory=dict)
    engine_calls: int = 0

    def verify(self, data: FederationData, chosen: list[int]) -> tuple[bool, list[int] | None,
                                                                       dict[str, ClusterPlacement]]:
        """Place every cluster's sub-jobs together; on failure return a no-good cut
        (:func:`no_good`) of the failing cluster's sub-jobs.

        A cluster's answer is memoised by the sub-jobs it was asked to place (each job's
        :func:`parts_on` it), not by the candidates: candidates that differ only elsewhere
        get the same answer here, which is what makes the cut valid."""
        per_cluster: dict[str, list[int]] = {}
        for i in chosen:
            for cl in data.candidates[i].clusters:
                per_cluster.setdefault(cl, []).append(i)
        placements: dict[str, ClusterPlacement] = {}
        for cl, idx in sorted(per_cluster.items()):
            jobs, names = [], []
            for i in idx:
                c = data.candidates[i]
                for part in c.shape.parts:
                    if part.location.cluster == cl:
                        jobs.append(sub_job(c.job, part))
                        names.append(sub_job_name(c.job, cl))
            key = (cl, tuple(sorted((data.candidates[i].job.name,
                                     parts_on(data.candidates[i], cl)) for i in idx)))
            if key not in self.memo:
                self.engine_calls += 1
                left = self.budget_end - time.perf_counter()
                self.memo[key] = place(self.problem.instance, cl, jobs,
                                       budget_s=max(0.2, min(VERIFY_BUDGET_S, left / 2)))
            cp = self.memo[key]
            if not cp.ok_for(names):
                return False, no_good(data, cl, idx), placements
            placements[cl] = cp
        return True, None, placements


def parts_on(c: Candidate, cluster: str) -> tuple[tuple[str, tuple[int, ...], int], ...]:
    """What candidate ``c`` asks of ``cluster``: its parts there (GPU type, pipeline
    positions, replicas), which make the sub-job the engine is asked to place."""
    return tuple(sorted((p.location.gpu_type, p.positions, p.replicas)
                        for p in c.shape.parts if p.location.cluster == cluster))


def no_good(data: FederationData, cluster: str, failed: list[int]) -> list[int]:
    """The cut after ``cluster`` could not place the sub-jobs of candidates ``failed``
    together: every candidate of those jobs that asks the same of ``cluster``, whatever it
    puts elsewhere. The encoder allows at most (jobs in the cut - 1) of them (one candidate
    per job), so every assignment that overloads ``cluster`` so (or with more besides) is
    excluded at once; the cut of the failing candidates alone (review R12) excluded one
    combination a round, and a job split between the cluster and any of k others came back
    k times (k = 4 spokes took the 8 verification rounds and fell back to greedy)."""
    cut: list[int] = []
    for i in failed:
        c = data.candidates[i]
        asks = parts_on(c, cluster)
        cut += [k for k in data.by_job[c.job.name]
                if parts_on(data.candidates[k], cluster) == asks]
    return cut


def _greedy(data: FederationData, state: RoundState) -> list[int]:
    chosen: list[int] = []
    jobs = sorted({c.job.name: c.job for c in data.candidates}.values(),
                  key=lambda j: (-j.priority, -j.gpus, j.name))
    for job in jobs:
        tries = 0
        for i in greedy_order(data, data.by_job.get(job.name, [])):
            if not fits_totals(data, chosen, i):
                continue
            tries += 1
            ok, _, _ = state.verify(data, [*chosen, i])
            if ok:
                chosen.append(i)
                break
            if tries >= MAX_GREEDY_TRIES or time.perf_counter() > state.budget_end:
                break
    return chosen


def federate(problem: FederationProblem, *, budget_s: float = 10.0, solver: str = "auto",
             seed: int = 0, placements_out: dict[str, ClusterPlacement] | None = None,
             pricer: Pricer | None = None, compare: bool = True) -> FederationPlan:
    """Decide one federation round of ``problem`` within about ``budget_s`` seconds.

    ``placements_out``, when given, receives each member cluster's verified placement of
    the chosen sub-jobs (plan and the instance it was solved on), for callers that start
    them (the simulator, :mod:`hyperplace.fedsim`) and check them independently.
    ``pricer``: a :class:`Pricer` of this federation kept by a caller that decides round
    after round (its layer splits depend on the job and the locations, not on what is
    free, so they are priced once per replay instead of once per round). ``compare=False``
    skips the Karmada comparison figures of the plan (``karmada_aggregated``: 'not
    computed'), which are priced and probed after the decision, outside the budget."""
    if solver not in SOLVERS:
        raise ValueError(f"unknown solver {solver!r}; use one of {', '.join(SOLVERS)}")
    start = time.perf_counter()
    end = start + budget_s
    instance = problem.instance
    catalog = instance.catalog
    prober = Prober(instance)
    if pricer is None:
        pricer = Pricer(instance.federation, catalog)
    notes: list[str] = []
    all_shapes: dict[str, JobShapes] = {}
    ordered = sorted(problem.jobs, key=lambda j: (-j.priority, -j.gpus, j.name))
    # each job gets a fair slice of the enumeration time (unused time carries over),
    # higher priorities first
    for k, job in enumerate(ordered):
        slice_end = start + ENUMERATION_SHARE * budget_s * (k + 1) / len(ordered)
        js = enumerate_shapes(job, instance, prober, pricer, catalog, problem.max_slowdown,
                              deadline=slice_end)
        if js.truncated:
            notes.append(f"{job.name}: split shapes only partly enumerated (budget)")
        all_shapes[job.name] = js
    data = build_data(instance, problem.jobs, {k: v.shapes for k, v in all_shapes.items()},
                      catalog, problem.policy)
    state = RoundState(problem, end)
    greedy = _greedy(data, state)
    chosen, status, name, bound = greedy, SolveStatus.FEASIBLE, "greedy", None
    message = ""
    if solver != "greedy" and data.candidates:
        for _ in range(MAX_VERIFY_ROUNDS):
            left = end - time.perf_counter()
            if left - RESERVE_FRACTION * budget_s <= 0.05:
                message = "cpsat: no time left; greedy's verified answer returned"
                status, name = SolveStatus.FALLBACK, "greedy (fallback from cpsat)"
                chosen = greedy
                break
            # keep back a share for verification, the comparisons and the plan itself
            picked, st, values, b1 = solve_cpsat(data, left * 0.8 - RESERVE_FRACTION * budget_s,
                                                 hint=greedy, seed=seed)
            if picked is None:
                message = f"cpsat: {st}; greedy's verified answer returned"
                status, name, chosen = SolveStatus.FALLBACK, "greedy (fallback from cpsat)", greedy
                break
            ok, cut, _ = state.verify(data, picked)
            if ok:
                g_score = sum(data.demand(data.candidates[i]) for i in greedy)
                p_score = sum(data.demand(data.candidates[i]) for i in picked)
                if p_score < g_score:  # cannot happen unless a cut removed greedy's answer
                    status, chosen = SolveStatus.FALLBACK, greedy
                    name = "greedy (fallback from cpsat)"
                    message = "cpsat's verified answer admits less than greedy's"
                else:
                    chosen, name = picked, "cpsat"
                    status = SolveStatus.OPTIMAL if st == "optimal" else SolveStatus.FEASIBLE
                    bound = b1 if st != "optimal" else p_score
                break
            assert cut is not None
            data.cuts.append(cut)
            message = f"{len(data.cuts)} combination(s) the engine could not place were cut off"
        else:
            status, name, chosen = SolveStatus.FALLBACK, "greedy (fallback from cpsat)", greedy
            message = "cpsat answers kept failing verification; greedy's verified answer returned"
    ok, _, placements = state.verify(data, chosen)
    assert ok, "a chosen combination must have been verified"
    if placements_out is not None:
        placements_out.update(placements)
    objective = float(sum(data.demand(data.candidates[i]) for i in chosen))
    truncated = any(js.truncated for js in all_shapes.values())
    if status == SolveStatus.OPTIMAL and truncated:
        # proven over the shapes enumerated, but the budget cut the enumeration short
        status = SolveStatus.FEASIBLE
    if status == SolveStatus.OPTIMAL:
        bound = objective
    if bound is None or truncated:
        # valid whatever was enumerated: every job admitted
        bound = float(sum(data.weights[j.priority] * j.gpus for j in problem.jobs))
    karmada_alts = karmada_round(problem, prober, pricer) if compare else {
        j.name: Alternative(name="karmada-aggregated", feasible=False,
                            note="not computed (the caller asked for no comparison)")
        for j in problem.jobs}
    plan_jobs = [_job_plan(problem, data.candidates[i], placements, all_shapes,
                           karmada_alts[data.candidates[i].job.name])
                 for i in sorted(chosen, key=lambda i: (-data.candidates[i].job.priority,
                                                        data.candidates[i].job.name))]
    admitted = {data.candidates[i].job.name for i in chosen}
    pending = [_pending(job, all_shapes[job.name], data, chosen) for job in ordered
               if job.name not in admitted]
    pending += [PendingFederatedJob(job=name, reasons=[why])
                for name, why in problem.unpriced.items()]
    stats_msg = "; ".join(x for x in [message, *notes] if x)
    return FederationPlan(
        metadata=FederationMeta(name=f"{instance.name}-federation", instance=instance.name),
        status=status, solver=name, policy=problem.policy, objective=objective, bound=bound,
        gap=relative_gap(objective, bound), runtime_s=time.perf_counter() - start,
        budget_s=budget_s, message=stats_msg, cost_model=COST_MODEL_NOTE, jobs=plan_jobs,
        pending=pending,
    )


# ---------------------------------------------------------------------------- mapping


def _prediction(price: Price, penalty: float | None) -> Prediction:
    return Prediction(
        step_time_s=price.step_time_s, tokens_per_s=price.tokens_per_s,
        parts=StepParts(pipeline_s=price.pipeline_s, bottleneck_s=price.bottleneck_s,
                        wan_transfer_s=price.wan_transfer_s,
                        dp_sync_intra_s=price.dp_sync_intra_s,
                        dp_sync_inter_s=price.dp_sync_inter_s),
        layers_per_stage=price.layers_per_stage, penalty_vs_best_monolithic=penalty,
        configuration=price.configuration)


def _sub_jobs(job: FederatedJob, shape: Shape, placements: dict[str, ClusterPlacement]
              ) -> list[SubJob]:
    stage_of = {s.position: s for s in shape.price.stages}
    out = []
    for part in shape.parts:
        cl = part.location.cluster
        name = sub_job_name(job, cl)
        plan = placements[cl].plan
        gpus: list[GPURef] = []
        units: list[str] = []
        for p in plan.placements:
            if p.job != name:
                continue
            group, _, rep = p.unit.partition("/")
            glob = f"{group}/{part.first_replica + int(rep)}" if rep.isdigit() else p.unit
            units.append(glob)
            gpus.extend(p.gpus)
        stages = []
        for pos in part.positions:
            sp = stage_of.get(pos)
            if shape.kind == "data-parallel" or sp is None:
                # every replica runs the whole pipeline with the split of this cluster's type
                sp = next((s for s in shape.price.stages if s.position == pos), None)
            first, last = (sp.first_layer, sp.last_layer) if sp else (0, job.model.num_layers - 1)
            stages.append(StageRange(position=pos, first_layer=first, last_layer=last,
                                     group=job.stage_groups[pos].name,
                                     compute_s=sp.compute_s if sp else 0.0,
                                     transfer_s=sp.transfer_s if sp else 0.0,
                                     load_s=sp.load_s if sp else 0.0))
        out.append(SubJob(
            name=name, cluster=cl, gpu_type=part.location.gpu_type, gpus=gpus, stages=stages,
            dp_ranks=list(range(part.first_replica, part.first_replica + part.replicas)),
            units=units, nodes=list(dict.fromkeys(g.node for g in gpus)),
        ))
    return out


def karmada_round(problem: FederationProblem, prober: Prober, pricer: Pricer,
                  rule: str = "aggregated") -> dict[str, Alternative]:
    """Karmada's division applied job by job in priority order (as its scheduler takes
    bindings one at a time) on cluster totals, each job's GPUs then taken from the totals;
    every division priced by the same cost model with an even layer split (Karmada divides
    pods, not layers) and probed as placed. ``rule``: ``aggregated`` or ``static-weight``
    (equal weights, karmada.static_weight)."""
    inst = problem.instance
    catalog = inst.catalog
    free: dict[Location, int] = {}
    for c in inst.clusters:
        for n in c.nodes:
            loc = Location(c.name, catalog.get(n.gpu_type).name)
            free[loc] = free.get(loc, 0) + n.free_count
    out: dict[str, Alternative] = {}
    divided: dict[str, tuple[FederatedJob, list[Part]]] = {}
    name = f"karmada-{rule}"
    for job in sorted(problem.jobs, key=lambda j: (-j.priority, j.name)):
        group = job.affinity_groups(problem.cluster_names)[0]
        best_loc: dict[str, Location] = {}
        for loc in locations(inst, job, group.clusters, catalog):
            cur = best_loc.get(loc.cluster)
            if cur is None or free[loc] > free[cur]:
                best_loc[loc.cluster] = loc
        by_replica = job.replicas > 1
        unit = job.replica_gpus if by_replica else job.unit_gpus(0)
        want = job.replicas if by_replica else job.stages
        avail = {cl: karmada.totals_estimate(free[loc], unit) for cl, loc in best_loc.items()}
        if rule == "aggregated":
            division = karmada.aggregated(want, avail)
        else:
            division = karmada.static_weight(want, {cl: 1 for cl in best_loc})
            if any(n > avail[cl] for cl, n in division.items()):
                division = None
        if not division:
            out[job.name] = Alternative(
                name=name, feasible=False,
                note=f"cluster totals hold {sum(avail.values())} of {want} "
                     f"{'replicas' if by_replica else 'stages'}" if rule == "aggregated" else
                     "the equal-weight division exceeds some cluster's free GPUs")
            continue
        ordered = [(best_loc[cl], n) for cl, n in division.items()]
        parts: list[Part] = []
        if by_replica:
            price = pricer.data_parallel(job, ordered)
            first = 0
            for loc, n in ordered:
                parts.append(Part(loc, tuple(range(job.stages)), n, first))
                first += n
        else:
            price = pricer.pipeline(job, ordered)
            pos = 0
            for loc, n in ordered:
                parts.append(Part(loc, tuple(range(pos, pos + n)), job.replicas))
                pos += n
        for loc, n in ordered:  # Karmada books the replicas against the totals
            free[loc] -= n * unit
        if not price.feasible:
            out[job.name] = Alternative(name=name, feasible=False, division=division,
                                        note=price.reason)
            continue
        step = price.even_step_time_s or price.step_time_s
        placeable = all(prober.fits(job, p) for p in parts)
        note = "even layer split over the division" if placeable else (
            "the totals-based estimate picked a cluster where the placement engine cannot "
            "place the units (domains, NVLink cliques or hop limits)")
        if placeable:
            divided[job.name] = (job, parts)
        out[job.name] = Alternative(name=name, feasible=True, step_time_s=step,
                                    tokens_per_s=price.tokens_per_step / step,
                                    division=division, placeable_as_placed=placeable,
                                    note=note)
    # Karmada books divisions against totals only: place every cluster's share of all
    # divisions together, as the member clusters would have to
    by_cluster: dict[str, list[tuple[FederatedJob, Part]]] = {}
    for job, parts in divided.values():
        for part in parts:
            by_cluster.setdefault(part.location.cluster, []).append((job, part))
    for cl, items in by_cluster.items():
        if len(items) < 2:
            continue
        placed = place(inst, cl, [sub_job(j, part) for j, part in items],
                       budget_s=KARMADA_PLACE_BUDGET_S)
        for job, _ in items:
            if not placed.ok_for([sub_job_name(job, cl)]) and out[job.name].placeable_as_placed:
                out[job.name] = out[job.name].model_copy(update={
                    "placeable_as_placed": False,
                    "note": f"each part fits alone, but {cl} cannot place it beside the other "
                            "jobs Karmada divided onto it (totals booked, not placements)"})
    return out


def _job_plan(problem: FederationProblem, cand, placements, all_shapes,
              karmada_alt: Alternative) -> FederatedJobPlan:
    job: FederatedJob = cand.job
    shape: Shape = cand.shape
    price = shape.price
    js: JobShapes = all_shapes[job.name]
    best = js.best_monolithic
    best_alt = Alternative(
        name="best-monolithic", feasible=best is not None,
        step_time_s=best[1].step_time_s if best else None,
        tokens_per_s=best[1].tokens_per_s if best else None,
        ratio_to_engine=(best[1].step_time_s / price.step_time_s) if best else None,
        division={best[0]: job.stages * job.replicas} if best else {},
        layers_per_stage=best[1].layers_per_stage if best else [],
        note=js.best_note or "the fastest single cluster that could hold the job if idle")
    even = price.even_step_time_s
    even_alt = Alternative(
        name="even-split", feasible=even is not None, step_time_s=even,
        tokens_per_s=price.tokens_per_step / even if even else None,
        ratio_to_engine=even / price.step_time_s if even else None,
        division={cl: sum(1 for s in price.stages if s.location.cluster == cl)
                  for cl in shape.clusters},
        note="the same clusters and GPUs with layers split evenly across stages")
    fed = problem.instance.federation
    wan = [WanUse(a=a, b=b, gbps_needed=g, gbps_capacity=fed.link(a, b).gbps)
           for (a, b), g in price.wan_gbps.items()]
    subs = _sub_jobs(job, shape, placements)
    violations = sum(len(placements[cl].violations) for cl in shape.clusters)
    return FederatedJobPlan(
        job=job.name, kind=job.kind, priority=job.priority, model=job.model.name,
        shape=shape.kind, clusters=shape.clusters, affinity_group=shape.affinity_name,
        gpus=job.gpus, pipeline_stages=job.stages, replicas=job.replicas, sub_jobs=subs,
        predicted=_prediction(price, shape.penalty), best_monolithic=best_alt,
        even_split=even_alt,
        karmada_aggregated=karmada_alt.model_copy(update={
            "ratio_to_engine": karmada_alt.step_time_s / price.step_time_s
            if karmada_alt.step_time_s else None}),
        wan=wan,
        verification=Verification(
            placement_status={cl: placements[cl].plan.status.value for cl in shape.clusters},
            checker_violations=violations),
        notes=[n for n in (js.best_note, job.model_note) if n],
    )


def _pending(job: FederatedJob, js: JobShapes, data: FederationData, chosen: list[int]
             ) -> PendingFederatedJob:
    if not js.shapes:
        reasons = list(dict.fromkeys(js.refused))[:8] or ["no cluster accepts the job"]
        return PendingFederatedJob(job=job.name, reasons=reasons)
    taken = sorted({data.candidates[i].job.name for i in chosen})
    reasons = [f"{len(js.shapes)} admissible shape(s) (best: {js.shapes[0].describe()}), but "
               f"none fits beside the jobs admitted this round"
               + (f" ({', '.join(taken)})" if taken else "")
               + ": GPUs, WAN capacity or the placement engine's verification"]
    reasons += list(dict.fromkeys(js.refused))[:4]
    return PendingFederatedJob(job=job.name, reasons=reasons)
