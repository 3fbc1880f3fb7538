"""Why a job stayed pending, in words a person can act on.

All pending-reason wording lives here: the formulation records *that* a job cannot run as
:class:`~hyperplace.formulations.placement.PendingReason` codes, and this module renders
them and the reasons found after solving (not enough GPUs of a type, no NVLink set large
enough, no domain large enough, outranked by other jobs, fragmented).
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

from hyperplace.formulations.mapping import Assignment
from hyperplace.formulations.placement import (
    DomainKey,
    JobView,
    NodeView,
    PendingReason,
    PlacementProblem,
    ReasonCode,
    UnitClass,
)
from hyperplace.formulations.placement.quotas import Inadmissible, QuotaBook

#: Past this many job shapes, the "does it fit alone?" probe is skipped (it costs a greedy
#: trial per shape); the static reasons are still given.
MAX_CONTENTION_PROBES = 400

#: ``fits_alone(job)``: whether the job could be placed on the round's free GPUs if it were
#: the only one (the solver that owns the placement rules answers it, e.g. greedy's).
FitProbe = Callable[[JobView], bool]
#: ``held_by_spares(job)``: the leaves whose hot spares the job would need to be placed on
#: what the plan leaves free (empty: the spare rule is not what keeps it out).
SpareProbe = Callable[[JobView], list[DomainKey]]


def _hop_words(h: int | None) -> str:
    return "anywhere in one cluster" if h is None else f"maxHopCount {h}"


def render_reason(reason: PendingReason) -> str:
    """The sentence for a reason code found while building the problem.

    Parameters
    ----------
    reason : PendingReason
        The code and its figures.

    Returns
    -------
    str
        One sentence naming what is missing and how much is there.
    """
    if reason.code == ReasonCode.BETWEEN_NODES_UNREACHABLE:
        return (f"needs >= {reason.required:g} Gb/s between its nodes "
                f"(minInfiniBandBandwidthGbps), but the fastest node link of its GPU types is "
                f"{reason.available:g} Gb/s, and its {reason.gpus} GPUs do not fit on one node")
    if reason.code == ReasonCode.JOB_LARGER_THAN_NODE:
        return (f"all {reason.gpus} GPUs must share one node (maxHopCount 0 between replicas), "
                f"but nodes have at most {reason.available:g} GPUs")
    if reason.code == ReasonCode.GROUP_LARGER_THAN_NODE:
        return (f"group {reason.group} needs {reason.gpus} GPUs with maxHopCount 0 (one node), "
                f"but the largest eligible node has {reason.available:g} GPUs")
    if reason.code == ReasonCode.NVLINK_DOMAIN_TOO_SMALL:
        floor = f" at >= {reason.required:g} GB/s per GPU" if reason.required else ""
        return (f"group {reason.group} needs {reason.gpus} GPUs in one NVLink domain{floor}, "
                f"but the largest NVLink domain of its GPU types offers "
                f"{reason.available:g}")
    raise ValueError(f"no wording for reason code {reason.code!r}")


class _Facts:
    """Aggregates of the round's initial free state, computed once."""

    def __init__(self, p: PlacementProblem):
        self.p = p
        self.free_by_type: dict[str, int] = defaultdict(int)
        self.nodes_by_type: dict[str, list[NodeView]] = defaultdict(list)
        for n in p.nodes:
            self.free_by_type[n.gpu_type.name] += len(n.free)
            self.nodes_by_type[n.gpu_type.name].append(n)
        self._clique: dict[tuple[object, ...], tuple[int, NodeView | None]] = {}
        self._domains: dict[tuple[object, ...], dict[str, int]] = {}
        self._distinct: dict[str, list[NodeView]] = {}

    def largest_piece(self, uc: UnitClass, types: frozenset[str]) -> tuple[int, NodeView | None]:
        """The largest free GPU set a piece of ``uc`` could get on one node, and where
        (``uc``'s first piece size when one fits)."""
        piece, bw = uc.pieces[0], uc.min_nvlink_gbps
        key = (types, piece, bw, uc.multi_node, uc.parts)
        if key not in self._clique:
            best, where = 0, None
            for t in types:
                # a node alike an earlier one (same pairs, GPUs, free count) gets no larger
                # set, so it cannot be the first of a larger one: 16,384 nodes are a few dozen
                nodes = self.nodes_by_type[t] if uc.nvlink_bound else self.distinct(t)
                for n in nodes:
                    if not self.p.gpus_eligible(uc, n):
                        continue
                    k = piece if n.max_disjoint(piece, bw, parts=uc.parts) >= 1 \
                        else n.largest_clique(bw)
                    if k > best:
                        best, where = k, n
                    if best >= piece:
                        break
                if best >= piece:
                    break
            self._clique[key] = (best, where)
        return self._clique[key]

    def distinct(self, t: str) -> list[NodeView]:
        """The nodes of type ``t`` in order, a node left out when an earlier one has the
        same uniform pair rate, GPU count and free count (what the piece checks of
        :meth:`largest_piece` read of a node, its tray aside); nodes with differing pairs
        all kept."""
        found = self._distinct.get(t)
        if found is None:
            seen: set[tuple[object, ...]] = set()
            found = []
            for n in self.nodes_by_type[t]:
                if n.uniform_gbps is not None:
                    key = (n.uniform_gbps, n.node.gpu_count, len(n.free))
                    if key in seen:
                        continue
                    seen.add(key)
                found.append(n)
            self._distinct[t] = found
        return found

    def domain_free(self, types: frozenset[str], hop: int | None) -> dict[str, int]:
        """Free GPUs of ``types`` per domain of hop limit ``hop``."""
        key = (types, hop)
        if key not in self._domains:
            out: dict[str, int] = defaultdict(int)
            for t in types:
                for n in self.nodes_by_type[t]:
                    for d in self.p.domains_of(n, hop, job_level=True):
                        out[d] += len(n.free)
            self._domains[key] = dict(out)
        return self._domains[key]


def explain(p: PlacementProblem, assignment: Assignment, deadline: float | None = None,
            fits_alone: FitProbe | None = None,
            held_by_spares: SpareProbe | None = None,
            skipped: set[int] | None = None) -> dict[int, list[str]]:
    """Reasons for every job the assignment leaves out.

    Jobs of one shape (:meth:`PlacementProblem.job_shape`: the same units, requirements and
    queue) get the same analysis, done once: the reasons that hold on an empty round and
    whether the job fits alone on the round's free GPUs depend on nothing else, and whom it
    lost to depends on its GPU types and priority only. A queue of 16,000 jobs has a few
    dozen shapes.

    Parameters
    ----------
    p : PlacementProblem
        The round.
    assignment : Assignment
        The plan's placements (job index -> units); jobs in its ``untried`` were never
        searched (greedy ran out of time first) and are told so.
    deadline : float, optional
        A ``time.perf_counter()`` value: past it the per-shape analysis stops, so that
        explanations never break a solve's budget; the jobs left get a cheaper reason that
        is still true and says that the analysis was skipped.
    fits_alone : FitProbe, optional
        Whether a job fits alone on the round's free GPUs; without it, contention is not
        analysed per job.
    held_by_spares : SpareProbe, optional
        With hot spares: the leaves whose spares alone keep the job out (it would fit on
        what the plan leaves free if they could be opened); such a job is told so.
    skipped : set, optional
        Filled with the jobs whose per-job analysis was skipped (the deadline passed, or
        their shape was past :data:`MAX_CONTENTION_PROBES`): their plan entry says so.

    Returns
    -------
    dict
        Job index -> reasons, for every job not in ``assignment``.
    """
    ex = _Explainer(p, assignment, fits_alone, held_by_spares, skipped)
    out: dict[int, list[str]] = {}
    for jv in p.pending:
        if jv.index not in assignment.units:
            out[jv.index] = ex.reasons(jv, deadline is not None and time.perf_counter() >= deadline)
    return out


class _Explainer:
    """The per-shape analyses of :func:`explain`, each done once, and the probes spent."""

    def __init__(self, p: PlacementProblem, assignment: Assignment,
                 fits_alone: FitProbe | None, held_by_spares: SpareProbe | None,
                 skipped: set[int] | None) -> None:
        self.p, self.a, self.skipped = p, assignment, skipped
        self.fits_alone, self.held_by_spares = fits_alone, held_by_spares
        self.facts = _Facts(p)
        self.rivals_by_types: dict[frozenset[str], list[JobView]] = {}
        self.static: dict[tuple[object, ...], list[str]] = {}  # shape -> on an empty round
        self.alone: dict[tuple[object, ...], bool] = {}  # shape -> fits alone on the free GPUs
        self.lost: dict[tuple[frozenset[str], int], list[str]] = {}  # (types, priority) -> rivals
        self.spared: dict[tuple[object, ...], list[DomainKey]] = {}  # shape -> leaves it needs
        self.probes = 0
        self.quota_use = _admitted_quota_use(p, assignment) if p.quotas.active else {}

    def reasons(self, jv: JobView, late: bool) -> list[str]:
        """Why ``jv`` is pending; ``late``: past the deadline (cheaper reasons)."""
        p, a = self.p, self.a
        reasons = [render_reason(r) for r in jv.impossible]
        if jv.index in a.notes:
            reasons.append(f"dropped when mapping to GPUs: {a.notes[jv.index]}")
        shape = p.job_shape(jv)
        # late too: why a job cannot fit the free GPUs at all is cheap (counts, once per
        # shape) and truer than "analysis skipped" (a job that never fits said "budget spent")
        if not reasons:
            if shape not in self.static:
                self.static[shape] = _static_reasons(p, self.facts, jv)
            reasons = list(self.static[shape])
        if not reasons and p.quotas.active:
            reasons = _quota_reasons(p, jv, a, self.quota_use)
        if not reasons:
            reasons = self._spares(jv, shape, late)
        if not reasons and jv.index in a.untried:
            reasons = ["not tried: the time budget ran out before the search reached it "
                       "(jobs are tried highest priority first); a larger budget would try it"]
        return reasons or self._contention(jv, shape, late)

    def _spares(self, jv: JobView, shape: tuple[object, ...], late: bool) -> list[str]:
        """With hot spares: the leaves whose spares alone keep the job out, if any."""
        p = self.p
        if self.held_by_spares is None or late or self.probes >= MAX_CONTENTION_PROBES:
            return []
        if shape not in self.spared:
            self.probes += 1
            self.spared[shape] = self.held_by_spares(jv)
        spares = p.hot_spare_rule
        if not self.spared[shape] or spares is None:
            return []
        return [spares.held_back_reason(self.spared[shape])]

    def _contention(self, jv: JobView, shape: tuple[object, ...], late: bool) -> list[str]:
        """Whom the job lost to when it fits alone, else that it is fragmented; or that the
        analysis was skipped (and why)."""
        p = self.p
        if self.fits_alone is not None and shape not in self.alone and \
                self.probes < MAX_CONTENTION_PROBES and not late:
            self.probes += 1
            self.alone[shape] = self.fits_alone(jv)
        if shape in self.alone and self.alone[shape]:
            key = (p.types_for(jv.classes), jv.priority)
            if key not in self.lost:
                self.lost[key] = _contention(p, jv, self.a, self.rivals_by_types)
            return list(self.lost[key])
        if shape in self.alone:
            desc = " + ".join(f"{uc.count}x{uc.size}" for uc in jv.classes)
            return [f"fragmented: enough eligible GPUs are free, but not as {desc} "
                    f"GPUs meeting the NVLink and {_hop_words(jv.hop_limit)} "
                    "constraints together"]
        why = ("the time budget was spent; a larger budget gives the full reason"
               if late else "no fit probe was given" if self.fits_alone is None
               else f"more than {MAX_CONTENTION_PROBES} distinct job shapes")
        if self.skipped is not None:
            self.skipped.add(jv.index)
        return [f"not admitted in this plan (per-job analysis skipped: {why})"]


def _static_reasons(p: PlacementProblem, facts: _Facts, jv: JobView) -> list[str]:
    """Reasons that hold on an empty round: the request cannot fit the free GPUs at all."""
    reasons: list[str] = []
    for uc in jv.classes:
        types = p.eligible_types(uc.gpu_types, uc.min_memory_gb)
        sel = _selector_words(uc.gpu_types, types)
        if not types:
            reasons.append(_missing_gpus(p, uc, sel))
            continue
        free = sum(facts.free_by_type[t] for t in types)
        need = uc.size * uc.count
        if free < need:
            reasons.append(f"group {uc.group} needs {need} {sel} GPUs; {free} are free")
            continue
        if uc.cut:
            reasons.extend(_flexible_reason(p, jv, uc, types, sel))
        else:
            reasons.extend(_nvlink_reason(facts, uc, types, sel))
    if reasons:
        return reasons
    types = p.types_for(jv.classes)
    by_dom = facts.domain_free(types, jv.hop_limit)
    if by_dom and max(by_dom.values()) < jv.gpus:
        d, f = max(by_dom.items(), key=lambda t: t[1])
        shape = " + ".join(f"{uc.count}x{uc.size}" for uc in jv.classes)
        reasons.append(f"gang of {shape} GPUs within {_hop_words(jv.hop_limit)}: the largest such "
                       f"domain ({d}) has {f} free eligible GPUs")
    return reasons


def _selector_words(selector: str | None, types: frozenset[str] | None = None) -> str:
    """A GPU selector in words: ``A100`` stays; a combined one (a group's type and a
    toleration, ``H100&h100|a100``) names the types of the round it matches (``H100-80``),
    or, when none does, its parts (``H100 and A100``: no type is both); None -> ``any``."""
    if not selector:
        return "any"
    if "&" not in selector and "|" not in selector:
        return selector
    if types:
        return " or ".join(sorted(types))
    return " and ".join(" or ".join(part.split("|")) for part in selector.split("&"))


def _missing_gpus(p: PlacementProblem, uc: UnitClass, sel: str) -> str:
    """What is missing when no GPU type of the round suits a group: the nodes, the type
    (with the types there are), or the memory (with the most there is)."""
    if not p.nodes:
        return f"group {uc.group} needs {sel} GPUs; the cluster has no nodes"
    have: dict[str, int] = defaultdict(int)
    for n in p.nodes:
        have[n.gpu_type.name] += n.node.gpu_count
    kinds = ", ".join(f"{t} x{c}" for t, c in sorted(have.items()))
    of_type = p.eligible_types(uc.gpu_types, 0.0)
    if not of_type:
        return (f"group {uc.group} needs {sel} GPUs; the cluster has none of that type "
                f"(it has {kinds})")
    largest = max(of_type, key=lambda t: p.types_present[t].hbm_gb)
    return (f"group {uc.group} needs {sel} GPUs with >= {uc.min_memory_gb:g} GB; the cluster "
            f"has none (the most is {p.types_present[largest].hbm_gb:g} GB on {largest})")


def _nvlink_reason(facts: _Facts, uc: UnitClass, types: frozenset[str], sel: str) -> list[str]:
    """The largest free NVLink set when it is too small for the group's first piece."""
    piece = uc.pieces[0]
    best, where = facts.largest_piece(uc, types)
    if best >= piece:
        return []
    on = f" on node {where.name}" if where else ""
    if not uc.min_nvlink_gbps:
        why = "" if uc.multi_node else (
            " (a unit that fits in one node spans nodes only without an NVLink floor and "
            "with maxHopCount >= 1 declared for its group)")
        return [f"needs {piece}x{sel} on one node{why}; the largest such free set is "
                f"{best} GPUs{on}"]
    bw = f" with >= {uc.min_nvlink_gbps:g} GB/s between every pair"
    return [f"needs {piece}x{sel} in one NVLink domain{bw}; the largest such free set is "
            f"{best} GPUs{on}"]


def _flexible_reason(p: PlacementProblem, jv: JobView, uc: UnitClass, types: frozenset[str],
                     sel: str) -> list[str]:
    """A unit cut into pieces needs, in one domain of its hop limit, nodes whose free GPUs
    can hold its pieces (on each node one set whose every pair meets the NVLink floor):
    say so when even the best domain has too few."""
    hop = uc.hop_limit if uc.hop_limit is not None else jv.hop_limit
    usable: dict[object, int] = defaultdict(int)
    for n in p.nodes:
        if n.gpu_type.name not in types or not n.free or not p.gpus_eligible(uc, n):
            continue
        k = n.largest_clique(uc.min_nvlink_gbps)
        for d in p.domains_of(n, hop, job_level=True):
            usable[d] += k
    best = max(usable.values(), default=0)
    if best >= uc.size:
        return []
    if uc.nvlink_bound:  # one NVLink domain (an NVL72 rack), :mod:`.placement.nvlink`
        return [nvlink_words(uc, sel, usable)]
    bw = (f", the GPUs of each node >= {uc.min_nvlink_gbps:g} GB/s apart pairwise"
          if uc.min_nvlink_gbps else "")
    skipped = uc.pooled and any(n.gpu_type.name in types and n.free and not uc.stacks_on(n)
                                for n in p.nodes)
    why = (f" (with {uc.count} units the group is cut into shared patterns, which need "
           f"nodes whose every GPU pair meets the floor; {p.params.flexible_max_units} units "
           "or fewer are cut on any node)") if skipped else ""
    return [f"group {uc.group} needs {uc.size} {sel} GPUs in pieces on nodes{bw}, within "
            f"{_hop_words(hop)}; the most such free GPUs in one domain is {best}{why}"]


def nvlink_words(uc: UnitClass, sel: str, usable: dict[object, int]) -> str:
    """``group tp needs 64 GPUs in one NVLink domain (GB200, >= 1800 GB/s per GPU); the
    largest free domain has 48, in rack r07``."""
    floor = f" ({sel}, >= {uc.min_nvlink_gbps:g} GB/s per GPU)" if uc.min_nvlink_gbps \
        else f" ({sel})"
    racks: dict[str, int] = {}
    for d, f in usable.items():
        name = d.fabric_domain if isinstance(d, DomainKey) else None
        if name and name.startswith("nvl:"):
            racks[name[4:]] = f
    if not racks:
        return f"group {uc.group} needs {uc.size} GPUs in one NVLink domain{floor}; " \
               "no NVLink domain of those GPUs has free GPUs"
    d, f = max(racks.items(), key=lambda t: (t[1], t[0]))
    return (f"group {uc.group} needs {uc.size} GPUs in one NVLink domain{floor}; the "
            f"largest free domain has {f}, in rack {d}")


def _admitted_quota_use(p: PlacementProblem, assignment: Assignment
                        ) -> dict[tuple[str, str], float]:
    """GPUs the assignment admits per (queue, quota key)."""
    use: dict[tuple[str, str], float] = {}
    for j, units in assignment.units.items():
        for u in units:
            for node, gpus in u.pieces:
                for qkey, n in p.quotas.usage(p.jobs[j].queue, p.node_by_name[node].gpu_type.name,
                                              len(gpus)).items():
                    use[qkey] = use.get(qkey, 0) + n
    return use


def _quota_reasons(p: PlacementProblem, jv: JobView, assignment: Assignment,
                   use: dict[tuple[str, str], float]) -> list[str]:
    """The queue's quota (or its cohort's lending) holds the job back on every GPU type it
    could use: name the queue, the key, what is in use and what the cohort can lend; or,
    when the queue can never admit it (:meth:`QuotaBook.inadmissible`), say that."""
    book = p.quotas
    blocked: list[str] = []
    for t in sorted(p.types_for(jv.classes)):
        trial = dict(use)
        for qkey, n in book.usage(jv.queue, t, jv.gpus).items():
            trial[qkey] = trial.get(qkey, 0) + n
        if book.allows(trial):
            return []  # some type has room: not the quota
        blocked.append(t)
    if not blocked or book.queues is None or jv.queue not in book.queues.queues:
        return []
    never = book.inadmissible(jv.queue, blocked, jv.gpus)
    if never is not None:  # never, whatever runs: say that, not what is in use now
        return [inadmissible_reason(book, never)]
    queue = book.queues.queues[jv.queue]
    # the first type the queue could admit it on once enough is free: its first key
    t = next(t for t in blocked if book.never_on(jv.queue, t, jv.gpus) is None)
    key = book.keys_for(jv.queue, t)[0]
    quota = queue.quotas[key]
    in_use = book.running.get((jv.queue, key), 0) + use.get((jv.queue, key), 0)
    words = (f"queue {jv.queue}: {in_use:g} of {quota.nominal:g} {key} nominal in use, "
             f"needs {jv.gpus} more")
    if queue.cohort is None:
        return [words + " and has no cohort to borrow from"]
    lend = 0.0
    for row in book.cohort_rows:
        if row.key == key and any(q.name == jv.queue for q in row.members):
            for q in row.members:
                qq = q.quotas[key]
                u = row.running.get(q.name, 0) + use.get((q.name, key), 0)
                if q.name != jv.queue:
                    lend += min(qq.lendable, max(0.0, qq.nominal - u))
    limit = "" if quota.borrowing_limit == float("inf") else \
        f", borrowing limit {quota.borrowing_limit:g}"
    return [words + f"; cohort {queue.cohort} has {lend:g} to lend{limit}"]


def inadmissible_reason(book: QuotaBook, never: Inadmissible) -> str:
    """The pending reason of a job its queue can never admit (``never``)."""
    uncovered = f"no quota covers {'/'.join(never.uncovered)} GPUs"
    if not never.capped:
        return f"queue {never.queue}: {uncovered}"
    assert book.queues is not None
    queue = book.queues.queues[never.queue]
    _, key, most = never.capped[0]
    quota = queue.quotas[key]
    kind = "GPUs" if key == "*" else f"{key} GPUs"
    how = (f"nominal {quota.nominal:g} + borrowing limit {quota.borrowing_limit:g}: a Volcano "
           "Queue's capability, a Kueue ClusterQueue's nominalQuota + borrowingLimit"
           if queue.cohort is not None else
           f"nominal {quota.nominal:g}, and no cohort to borrow from")
    text = (f"queue {never.queue} may never hold more than {most:g} {kind} ({how}) and the "
            f"job asks {never.gpus}: it cannot be admitted in this queue")
    others = sorted({f"{c:g}" + ("" if k == "*" else f" {k}")
                     for _, k, c in never.capped[1:] if k != key})
    if others:
        text += f" (nor more than {', '.join(others)} GPUs on its other types)"
    return text + (f"; {uncovered}" if never.uncovered else "")


def _contention(p: PlacementProblem, jv: JobView, assignment: Assignment,
                cache: dict[frozenset[str], list[JobView]]) -> list[str]:
    types = p.types_for(jv.classes)
    if types not in cache:
        found = [p.jobs[j] for j, units in assignment.units.items()
                 if any(p.node_by_name[node].gpu_type.name in types
                        for u in units for node, _ in u.pieces)]
        cache[types] = sorted(found, key=lambda r: (-r.priority, -r.gpus))
    rivals = cache[types]
    if not rivals:
        return ["not admitted within the time budget (it fits alone; try a larger budget)"]
    # name the jobs at the same or a higher priority first: they are the ones that outrank it
    ranked = [r for r in rivals if r.priority >= jv.priority] or rivals
    names = ", ".join(f"{r.name} (priority {r.priority}, {r.gpus} GPUs)" for r in ranked[:3])
    more = f" and {len(ranked) - 3} more" if len(ranked) > 3 else ""
    verb = "outranked by" if ranked[0].priority >= jv.priority else "left out in favour of"
    return [f"{verb} {names}{more}, which took the {'/'.join(sorted(types))} GPUs it needs; "
            "it fits alone on this round's free GPUs"]
