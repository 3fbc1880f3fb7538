"""The lexicographic integer model of a placement round, built one constraint family at a
time by :class:`PlacementModelBuilder`.

Variables (all integer):

* ``run[b]``: how many jobs of bundle ``b`` run (a bundle is one job, or interchangeable
  single-piece jobs);
* ``z[job, domain]``: the job lies in that domain of its between-replica hop limit;
* ``k[job, group, size, node class]``: pieces of that size on nodes of a uniform class;
  ``w[job, group, node, GPUs]``: one exact GPU set on a non-uniform node (DGX-1, PCIe);
* ``y[job, group, domain]``: units of a group in that domain of the group's own hop limit;
* ``touch[job, domain]``, ``open[node class]``, ``openleaf[leaf]``: what objectives 2 and 3
  count;
* ``stop[running job]``: a running job the round may preempt is stopped (with
  ``--preemption``), a running job the round may move is migrated (with ``--running-moveable``; its copy's
  ``run`` equals it, see :mod:`.migration`).

Each family is one method of the builder; families a later feature adds (quotas,
preemption) go in as methods of their own between :meth:`PlacementModelBuilder._job` and
:meth:`PlacementModelBuilder._objectives`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from hyperplace.formulations.linear import LinearModel, Objective
from hyperplace.formulations.placement.domains import DomainKey
from hyperplace.formulations.placement.problem import PlacementProblem
from hyperplace.formulations.placement.quotas import overdraft
from hyperplace.formulations.placement.views import JobView, NodeClass, NodeView, UnitClass

Terms = list[tuple[int, int]]


@dataclass
class PieceVar:
    """A piece variable: pieces of ``piece`` GPUs of unit class ``uclass`` on ``node_class``
    (a count), or, on a non-uniform node, whether the exact GPU set ``clique`` is used."""

    uclass: int
    piece: int
    node_class: int
    var: int
    clique: tuple[int, ...] | None = None
    unit: int | None = None  # flexible pieces: the unit (index in its class) they belong to


@dataclass
class PlacementModel:
    """The encoded :class:`LinearModel` and the index maps needed to read a solution."""

    problem: PlacementProblem
    lm: LinearModel
    run: dict[int, int]  # bundle leader job -> var (how many jobs of the bundle run)
    bundles: dict[int, list[int]]  # bundle leader -> its jobs in queue order
    class_alias: dict[int, int]  # unit class of a bundled job -> the leader's unit class
    job_domain: dict[tuple[int, DomainKey], int]  # (job, domain) -> var
    unit_domain: dict[tuple[int, DomainKey], int]  # (class, domain) -> var
    pieces: list[PieceVar]
    touch: dict[tuple[int, DomainKey], int]  # (job, leaf or spine domain) -> var
    opened_nodes: dict[int, int]  # node class -> var
    opened_leaf: dict[DomainKey, int]
    objective_names: list[str]
    eligible_pieces: dict[int, list[PieceVar]] = field(default_factory=dict)
    # flexible units: (class, unit index, domain of the unit's hop limit) -> var
    flex_unit_domain: dict[tuple[int, int, DomainKey], int] = field(default_factory=dict)
    # pooled classes: (class, domain of the unit's hop limit or None for all, pattern) -> var
    pattern_vars: dict[tuple[int, DomainKey | None, int], int] = field(default_factory=dict)
    # auxiliary = ceil(sum(coef * var) / divisor): how hints complete the auxiliaries
    aux_links: list[tuple[int, Terms, int]] = field(default_factory=list)
    # auxiliaries with other rules (quota borrowing and lending, fair share), run after those
    derived: list[Callable[[list[int]], None]] = field(default_factory=list)
    stop: dict[int, int] = field(default_factory=dict)  # stoppable job -> var (1 = stopped)

    def complete(self, primary: dict[int, int]) -> list[int]:
        """A full assignment from primary values (run, domains, pieces), auxiliaries derived."""
        values = [0] * self.lm.num_vars
        for v, x in primary.items():
            values[v] = x
        for aux, terms, divisor in self.aux_links:
            total = sum(c * values[v] for v, c in terms)
            values[aux] = min(self.lm.ubs[aux], -(-total // divisor))
        for rule in self.derived:
            rule(values)
        return values


@dataclass
class _JobBlock:
    """What the builder knows about one bundle while it encodes it."""

    job: int
    view: JobView
    run: int
    size: int  # jobs in the bundle
    spans: bool
    eligible: dict[tuple[int, int], list[tuple[NodeClass, int]]] = field(default_factory=dict)
    domains: set[DomainKey] = field(default_factory=set)
    in_domain: dict[DomainKey, int] = field(default_factory=dict)  # z variables
    touched_leaf: dict[DomainKey, list[int]] = field(default_factory=lambda: defaultdict(list))
    touched_spine: dict[DomainKey, list[int]] = field(default_factory=lambda: defaultdict(list))


PiecesBySize = dict[int, list[tuple[int, NodeClass]]]


class PlacementModelBuilder:
    """Encodes a :class:`PlacementProblem` as a lexicographic :class:`LinearModel`.

    Parameters
    ----------
    problem : PlacementProblem
        The round to encode.
    """

    def __init__(self, problem: PlacementProblem):
        p = problem
        self.p = p
        self.params = p.params
        self.lm = LinearModel()
        self.run: dict[int, int] = {}
        self.bundles = {b[0]: b for b in p.bundles}
        self.class_alias = {p.jobs[j].classes[0].index: p.jobs[b[0]].classes[0].index
                            for b in p.bundles if len(b) > 1 for j in b}
        self.job_domain: dict[tuple[int, DomainKey], int] = {}
        self.unit_domain: dict[tuple[int, DomainKey], int] = {}
        self.flex_unit_domain: dict[tuple[int, int, DomainKey], int] = {}
        self.pattern_vars: dict[tuple[int, DomainKey | None, int], int] = {}
        self.pieces: list[PieceVar] = []
        self.touch: dict[tuple[int, DomainKey], int] = {}
        self.per_class_pieces: dict[int, list[PieceVar]] = defaultdict(list)
        self.aux_links: list[tuple[int, Terms, int]] = []
        self.cap_terms: dict[int, Terms] = defaultdict(list)  # node class -> (var, piece size)
        self.gpu_terms: dict[tuple[int, int], list[int]] = defaultdict(list)  # (class, GPU)
        self.opened_nodes: dict[int, int] = {}
        self.opened_leaf: dict[DomainKey, int] = {}
        self.obj_demand_by_level: dict[float, Terms] = defaultdict(list)
        self.obj_comm: Terms = []
        self.obj_frag: Terms = []
        self.obj_policy: Terms = []
        self.obj_fair: Terms = []
        self.derived: list[Callable[[list[int]], None]] = []
        # job -> (var, GPUs per unit of the var, GPU type name): what quotas count
        self.job_gpu_terms: dict[int, list[tuple[int, int, str]]] = defaultdict(list)
        # stoppable job -> stop var (any family's), and the objectives after objective 1
        self.stop: dict[int, int] = {v.index: self.lm.bool(f"stop[{v.name}]") for v in p.stoppable}
        self.obj_lost: Terms = []
        self.obj_victims: Terms = []
        self.obj_moves: Terms = []
        self.obj_free_domain: Terms = []
        self._used_vars: dict[int, int | None] = {}  # node class -> nodes its pieces open
        self.per_node_class_cliques: dict[int, list[PieceVar]] = defaultdict(list)

    def build(self) -> PlacementModel:
        """Every constraint family in turn, then the objectives."""
        for j, members in self.bundles.items():
            self._job(j, members)
        self._capacity()
        self._gpu_exclusive()
        self._open_clique_nodes()
        self._open_leaves()
        self._stops()
        for ext in self.p.extensions:  # preemption: a stop needs a stopper
            ext.after_stop_rows(self)
        self._quotas()
        self._fair_share()
        for ext in self.p.extensions:  # hot spares, free-domain growth: .extensions
            ext.rows(self)
        self._objectives()
        return PlacementModel(
            problem=self.p, lm=self.lm, run=self.run, bundles=self.bundles,
            class_alias=self.class_alias, job_domain=self.job_domain,
            unit_domain=self.unit_domain, pieces=self.pieces, touch=self.touch,
            opened_nodes=self.opened_nodes, opened_leaf=self.opened_leaf,
            objective_names=[o.name for o in self.lm.objectives],
            eligible_pieces=dict(self.per_class_pieces), aux_links=self.aux_links,
            derived=self.derived, stop=self.stop, flex_unit_domain=self.flex_unit_domain,
            pattern_vars=self.pattern_vars)

    # ---- per job --------------------------------------------------------------------
    def _job(self, j: int, members: list[int]) -> None:
        """A bundle: its run variable, then (unless impossible) domains, pieces, gangs,
        unit domains, domain membership and the leaves it touches."""
        block = self._run_var(j, members)
        if block is None:
            return
        self._eligible_node_classes(block)
        if not self._job_domains(block):
            return
        for uc in block.view.classes:
            if uc.flexible:
                self._flexible_units(block, uc)
                continue
            by_size = self._pieces(block, uc)
            self._gangs(block, uc, by_size)
            self._unit_domains(block, uc, by_size)
            self._job_domain_membership(block, uc, by_size)
        self._touch(block)

    def _run_var(self, j: int, members: list[int]) -> _JobBlock | None:
        """``run`` in [0, bundle size]; fixed to 0 for a job that cannot run at all. Its
        demand term goes to objective 1 of its priority level."""
        jv = self.p.jobs[j]
        n_jobs = len(members)
        r = self.lm.var(f"run[{jv.name}]" + (f"+{n_jobs - 1}" if n_jobs > 1 else ""), 0, n_jobs)
        self.run[j] = r
        if jv.impossible:
            self.lm.eq([(r, 1)], 0, f"impossible[{jv.name}]")
            return None
        if jv.migrant is None:  # a mover's copy keeps running demand, not new demand
            self.obj_demand_by_level[jv.priority].append((r, jv.gpus))
        return _JobBlock(job=j, view=jv, run=r, size=n_jobs, spans=self.p.needs_fabric(jv))

    def _eligible_node_classes(self, block: _JobBlock) -> None:
        """Per (unit class, piece size): the node classes a piece may use and how many
        such pieces fit on one of their nodes (the problem's eligibility rule)."""
        p, jv = self.p, block.view
        for uc in jv.classes:
            keys = p.node_class_keys if p.alike_nodes_alike(jv, uc) else \
                [None] * len(p.node_classes)
            for size in uc.size_options:
                found = []
                known: dict[tuple[object, ...], int] = {}  # nodes alike take alike pieces
                for nc, key in zip(p.node_classes, keys):
                    capacity = known.get(key, -1) if key is not None else -1
                    if capacity < 0:
                        capacity = p.piece_capacity(uc, size, nc.rep) \
                            if p.node_eligible(jv, uc, nc.rep) else 0
                        if key is not None:
                            known[key] = capacity
                    if capacity > 0:
                        found.append((nc, capacity))
                block.eligible[(uc.index, size)] = found

    def _job_domains(self, block: _JobBlock) -> bool:
        """Candidate domains of the job's hop limit (those with eligible nodes and, when it
        spans nodes, enough bandwidth); with several, ``z`` picks exactly one when the job
        runs. Returns False (and fixes ``run`` to 0) when there is none."""
        p, jv = self.p, block.view
        members: dict[DomainKey, dict[str, NodeView]] = defaultdict(dict)
        for found in block.eligible.values():
            for nc, _ in found:
                for n in nc.nodes:
                    for d in p.domains_of(n, jv.hop_limit, job_level=True):
                        members[d].setdefault(n.name, n)
        for d, nodes in members.items():
            if block.spans and jv.min_ib_gbps and \
                    p.domain_bandwidth(list(nodes.values())) < jv.min_ib_gbps:
                continue
            block.domains.add(d)
        if len(block.domains) > 1 and jv.num_pieces > 1:  # one piece is always in one domain
            for d in sorted(block.domains):
                block.in_domain[d] = self.lm.bool(f"z[{jv.name},{d}]")
                self.job_domain[(block.job, d)] = block.in_domain[d]
            self.lm.eq([(v, 1) for v in block.in_domain.values()] + [(block.run, -1)], 0,
                       f"onedomain[{jv.name}]")
        elif not block.domains:
            self.lm.eq([(block.run, 1)], 0, f"nodomain[{jv.name}]")
            return False
        return True

    def _pieces(self, block: _JobBlock, uc: UnitClass) -> PiecesBySize:
        """Piece variables of a unit class: a count per uniform node class, one boolean per
        qualifying GPU set on a non-uniform node; only in the job's candidate domains."""
        p, jv = self.p, block.view
        by_size: PiecesBySize = defaultdict(list)
        for size in uc.size_options:
            per_unit = max(pat.count(size) for pat in (uc.patterns or (tuple(uc.pieces),)))
            for nc, capacity in block.eligible[(uc.index, size)]:
                if not any(d in block.domains
                           for d in p.domains_of(nc.rep, jv.hop_limit, job_level=True)):
                    continue
                if nc.uniform:
                    ub = min(block.size * uc.count * per_unit, capacity * nc.multiplicity)
                    v = self.lm.var(f"k[{jv.name},{uc.group},{size},nc{nc.index}]", 0, ub)
                    self._add_piece(PieceVar(uc.index, size, nc.index, v))
                    self.job_gpu_terms[block.job].append((v, size, nc.rep.gpu_type.name))
                    self.cap_terms[nc.index].append((v, size))
                    by_size[size].append((v, nc))
                    continue
                rep = nc.rep
                for clique in rep.cliques(size, uc.min_nvlink_gbps, rep.reachable, parts=uc.parts):
                    if rep.stoppable and not self._may_use(block.job, rep, clique):
                        continue
                    v = self.lm.bool(f"w[{jv.name},{uc.group},{rep.name},{clique}]")
                    self._add_piece(PieceVar(uc.index, size, nc.index, v, clique))
                    self.job_gpu_terms[block.job].append((v, size, rep.gpu_type.name))
                    for g in clique:
                        self.gpu_terms[(nc.index, g)].append(v)
                    by_size[size].append((v, nc))
        return by_size

    def _add_piece(self, pv: PieceVar) -> None:
        self.pieces.append(pv)
        self.per_class_pieces[pv.uclass].append(pv)
        if pv.clique is not None:
            self.per_node_class_cliques[pv.node_class].append(pv)

    def _gangs(self, block: _JobBlock, uc: UnitClass, by_size: PiecesBySize) -> None:
        """Gang: each piece size is placed exactly ``count x (pieces per unit)`` times per
        running job, or not at all. Also records the leaves and spines the pieces touch and
        their policy cost (objective 4)."""
        p, jv = self.p, block.view
        if uc.pooled:
            self._pattern_gangs(block, uc, by_size)
        piece_cost = self.params.piece_weight * self.params.traffic_weight(jv.traffic_class) \
            if uc.pooled else 0
        for size in uc.size_options:
            placed = by_size.get(size, [])
            if not uc.pooled:
                per_unit = uc.pieces.count(size)
                self.lm.eq([(v, 1) for v, _ in placed] + [(block.run, -uc.count * per_unit)], 0,
                           f"gang[{jv.name},{uc.group},{size}]")
            for v, nc in placed:
                if piece_cost:
                    self.obj_comm.append((v, piece_cost))
                n0 = nc.rep
                block.touched_leaf[n0.leaf].append(v)
                if n0.attach_gbps is not None and 3 in n0.cluster.network.radii:
                    block.touched_spine[p.domain(n0, 3)].append(v)
                self.obj_policy.append((v, size * p.policy_penalty(n0.gpu_type)))

    def _pattern_gangs(self, block: _JobBlock, uc: UnitClass, by_size: PiecesBySize) -> None:
        """Gang of a pooled class (:attr:`UnitClass.pooled`): ``q[pattern]`` units take each
        cut pattern, ``count`` units in all when the job runs, and the pieces of each size
        are exactly what the chosen patterns hold."""
        jv = block.view
        qs = []
        for k, pat in enumerate(uc.patterns):
            q = self.lm.var(f"q[{jv.name},{uc.group},{'+'.join(map(str, pat))}]", 0,
                            uc.count * block.size)
            self.pattern_vars[(uc.index, None, k)] = q
            qs.append(q)
        self.lm.eq([(q, 1) for q in qs] + [(block.run, -uc.count)], 0,
                   f"patterns[{jv.name},{uc.group}]")
        for size in uc.size_options:
            self.lm.eq([(v, 1) for v, _ in by_size.get(size, [])] +
                       [(q, -pat.count(size)) for q, pat in zip(qs, uc.patterns) if size in pat],
                       0, f"gang[{jv.name},{uc.group},{size}]")

    def _unit_domains(self, block: _JobBlock, uc: UnitClass, by_size: PiecesBySize) -> None:
        """A multi-node unit with a hop limit tighter than the job's: ``y`` counts its units
        per domain of that limit, and each unit's pieces lie in one such domain (for a
        pooled class, per cut pattern and domain)."""
        p, jv = self.p, block.view
        if not (uc.multi_node and uc.hop_limit is not None and uc.hop_limit != jv.hop_limit):
            return
        if uc.pooled:
            self._pattern_unit_domains(block, uc, by_size)
            return
        ydom: dict[DomainKey, int] = {}
        for size in sorted(set(uc.pieces)):
            for _, nc in by_size.get(size, []):
                ud = p.domain(nc.rep, uc.hop_limit)
                if ud not in ydom:
                    ydom[ud] = self.lm.var(f"y[{jv.name},{uc.group},{ud}]", 0, uc.count)
                    self.unit_domain[(uc.index, ud)] = ydom[ud]
        self.lm.eq([(v, 1) for v in ydom.values()] + [(block.run, -uc.count)], 0,
                   f"unitdomains[{jv.name},{uc.group}]")
        for size in sorted(set(uc.pieces)):
            per_unit = uc.pieces.count(size)
            by_dom: dict[DomainKey, list[int]] = defaultdict(list)
            for v, nc in by_size.get(size, []):
                by_dom[p.domain(nc.rep, uc.hop_limit)].append(v)
            for ud, yv in ydom.items():
                self.lm.eq([(v, 1) for v in by_dom.get(ud, [])] + [(yv, -per_unit)], 0,
                           f"unitdomain[{jv.name},{uc.group},{ud},{size}]")

    def _pattern_unit_domains(self, block: _JobBlock, uc: UnitClass,
                              by_size: PiecesBySize) -> None:
        """Per cut pattern and domain of the unit's hop limit, ``y`` units; the pieces of
        each size in a domain are exactly what its units' patterns hold."""
        p, jv = self.p, block.view
        doms = sorted({p.domain(nc.rep, uc.hop_limit)
                       for size in uc.size_options for _, nc in by_size.get(size, [])})
        ys: dict[tuple[int, DomainKey], int] = {}
        for k, pat in enumerate(uc.patterns):
            for ud in doms:
                ys[(k, ud)] = self.lm.var(
                    f"y[{jv.name},{uc.group},{'+'.join(map(str, pat))},{ud}]", 0, uc.count)
                self.pattern_vars[(uc.index, ud, k)] = ys[(k, ud)]
            self.lm.eq([(ys[(k, ud)], 1) for ud in doms] +
                       [(self.pattern_vars[(uc.index, None, k)], -1)], 0,
                       f"unitdomains[{jv.name},{uc.group},{k}]")
        for size in uc.size_options:
            by_dom: dict[DomainKey, list[int]] = defaultdict(list)
            for v, nc in by_size.get(size, []):
                by_dom[p.domain(nc.rep, uc.hop_limit)].append(v)
            for ud in doms:
                self.lm.eq([(v, 1) for v in by_dom.get(ud, [])] +
                           [(ys[(k, ud)], -pat.count(size))
                            for k, pat in enumerate(uc.patterns) if size in pat], 0,
                           f"unitdomain[{jv.name},{uc.group},{ud},{size}]")

    def _job_domain_membership(self, block: _JobBlock, uc: UnitClass,
                               by_size: PiecesBySize) -> None:
        """Pieces only in the job's chosen domain: pieces in ``d`` <= total x ``z[d]``.

        On non-tree fabrics a node class may lie in several (overlapping) domains: its
        pieces then need one of them chosen, pieces <= total x (sum of their ``z``).
        """
        if not block.in_domain:
            return
        p, jv = self.p, block.view
        per_dom: dict[tuple[DomainKey, ...], list[int]] = defaultdict(list)
        for size in uc.size_options:
            for v, nc in by_size.get(size, []):
                ds = tuple(d for d in p.domains_of(nc.rep, jv.hop_limit, job_level=True)
                           if d in block.in_domain)
                per_dom[ds].append(v)
        total = uc.count * uc.max_pieces
        for ds, vs in per_dom.items():
            self.lm.add([(v, 1) for v in vs] + [(block.in_domain[d], -total) for d in ds], hi=0,
                        name=f"indomain[{jv.name},{uc.group},{'|'.join(ds)}]")

    def _flexible_units(self, block: _JobBlock, uc: UnitClass) -> None:
        """Pieces of a flexible class, one set of variables per unit (see
        :attr:`UnitClass.flexible`): on a uniform node class a count per piece size, on a
        non-uniform node a boolean per qualifying GPU set with at most one set per unit and
        node (the unit's GPUs on one node form one clique at the floor; on uniform nodes
        below the floor one GPU per node, which the capacity rows of a class of several
        such nodes count only in total: the mapping may then drop the job, and the plan
        says so). Per unit: its pieces
        hold exactly its GPUs when the job runs (gang), lie in one domain of the unit's own
        hop limit when that is tighter than the job's, and in the job's chosen domain.
        Every piece costs ``piece_weight`` x the job's traffic weight in objective 2, so
        units are cut into as few pieces as the free GPUs allow."""
        p, jv = self.p, block.view
        eligible = {nc.index: nc for found in (block.eligible.get((uc.index, s), [])
                                               for s in uc.size_options) for nc, _ in found}
        classes = [nc for nci, nc in sorted(eligible.items())
                   if any(d in block.domains
                          for d in p.domains_of(nc.rep, jv.hop_limit, job_level=True))]
        own_domains = uc.hop_limit is not None and uc.hop_limit != jv.hop_limit
        piece_cost = self.params.piece_weight * self.params.traffic_weight(jv.traffic_class)
        for i, unit in enumerate(uc.units):
            tag = f"{jv.name},{unit.name}"
            placed: list[tuple[int, int, NodeClass]] = []  # (var, size, node class)
            for nc in classes:
                if nc.uniform:
                    self._flexible_counts(uc, i, tag, nc, placed)
                else:
                    self._flexible_cliques(block, uc, i, tag, nc, placed)
            self.lm.eq([(v, size) for v, size, _ in placed] + [(block.run, -uc.size)], 0,
                       f"gang[{tag}]")
            self._flexible_terms(block, placed, piece_cost)
            if own_domains:
                self._flexible_unit_domain(block, uc, i, placed)
            if block.in_domain:
                self._flexible_in_domain(block, uc, tag, placed)

    def _flexible_counts(self, uc: UnitClass, i: int, tag: str, nc: NodeClass,
                         placed: list[tuple[int, int, NodeClass]]) -> None:
        """Unit ``i``'s pieces on a uniform node class: a count per piece size."""
        p, rep = self.p, nc.rep
        for size in uc.sizes_on(rep):
            capacity = p.piece_capacity(uc, size, rep)
            if capacity < 1:
                continue
            per_node = capacity if uc.merges_on(rep) else 1
            ub = min(uc.size // size, per_node * nc.multiplicity)
            v = self.lm.var(f"k[{tag},{size},nc{nc.index}]", 0, ub)
            self._add_piece(PieceVar(uc.index, size, nc.index, v, unit=i))
            self.cap_terms[nc.index].append((v, size))
            placed.append((v, size, nc))

    def _flexible_cliques(self, block: _JobBlock, uc: UnitClass, i: int, tag: str,
                          nc: NodeClass, placed: list[tuple[int, int, NodeClass]]) -> None:
        """Unit ``i``'s pieces on a non-uniform node: a boolean per qualifying GPU set, at
        most one set per unit and node."""
        rep = nc.rep
        on_node = []
        for size in uc.sizes_on(rep):
            for clique in rep.cliques(size, uc.min_nvlink_gbps, rep.reachable):
                if rep.stoppable and not self._may_use(block.job, rep, clique):
                    continue
                v = self.lm.bool(f"w[{tag},{rep.name},{clique}]")
                self._add_piece(PieceVar(uc.index, size, nc.index, v, clique, unit=i))
                for g in clique:
                    self.gpu_terms[(nc.index, g)].append(v)
                placed.append((v, size, nc))
                on_node.append(v)
        if len(on_node) > 1:
            self.lm.add([(v, 1) for v in on_node], hi=1, name=f"onepiece[{tag},{rep.name}]")

    def _flexible_terms(self, block: _JobBlock, placed: list[tuple[int, int, NodeClass]],
                        piece_cost: int) -> None:
        """A flexible unit's pieces in the domains it touches and in objectives 2 and 4."""
        p = self.p
        for v, size, nc in placed:
            n0 = nc.rep
            block.touched_leaf[n0.leaf].append(v)
            if n0.attach_gbps is not None and 3 in n0.cluster.network.radii:
                block.touched_spine[p.domain(n0, 3)].append(v)
            self.obj_policy.append((v, size * p.policy_penalty(n0.gpu_type)))
            self.job_gpu_terms[block.job].append((v, size, n0.gpu_type.name))
            if piece_cost:
                self.obj_comm.append((v, piece_cost))

    def _flexible_in_domain(self, block: _JobBlock, uc: UnitClass, tag: str,
                            placed: list[tuple[int, int, NodeClass]]) -> None:
        """A flexible unit's pieces lie in the job's chosen domain."""
        p, jv = self.p, block.view
        per_dom: dict[tuple[DomainKey, ...], list[int]] = defaultdict(list)
        for v, _, nc in placed:
            ds = tuple(d for d in p.domains_of(nc.rep, jv.hop_limit, job_level=True)
                       if d in block.in_domain)
            per_dom[ds].append(v)
        for ds, vs in per_dom.items():
            self.lm.add([(v, 1) for v in vs] + [(block.in_domain[d], -uc.size) for d in ds],
                        hi=0, name=f"indomain[{tag},{'|'.join(ds)}]")

    def _flexible_unit_domain(self, block: _JobBlock, uc: UnitClass, i: int,
                              placed: list[tuple[int, int, NodeClass]]) -> None:
        """One domain of the unit's own hop limit holds all of unit ``i``'s pieces: a
        boolean per candidate domain, one chosen when the job runs, and pieces only in a
        chosen one (on non-tree fabrics a node may lie in several)."""
        p, jv = self.p, block.view
        unit = uc.units[i]
        ydom: dict[DomainKey, int] = {}
        per_dom: dict[tuple[DomainKey, ...], list[int]] = defaultdict(list)
        for v, _, nc in placed:
            ds = p.domains_of(nc.rep, uc.hop_limit)
            for d in ds:
                if d not in ydom:
                    ydom[d] = self.lm.bool(f"y[{jv.name},{unit.name},{d}]")
                    self.flex_unit_domain[(uc.index, i, d)] = ydom[d]
            per_dom[ds].append(v)
        self.lm.eq([(v, 1) for v in ydom.values()] + [(block.run, -1)], 0,
                   f"unitdomains[{jv.name},{unit.name}]")
        for ds, vs in per_dom.items():
            self.lm.add([(v, 1) for v in vs] + [(ydom[d], -uc.size) for d in ds], hi=0,
                        name=f"unitdomain[{jv.name},{unit.name},{'|'.join(ds)}]")

    def _touch(self, block: _JobBlock) -> None:
        """Objective 2: a boolean per leaf and spine domain the job's pieces touch, weighted
        by its traffic class (a spine counts ``spine_touch_factor`` leaves)."""
        jv = block.view
        if jv.num_pieces == 1:
            return  # a single piece touches exactly one leaf: a constant
        big = jv.num_pieces
        weight = self.params.traffic_weight(jv.traffic_class)
        for kind, touched in (("leaf", block.touched_leaf), ("spine", block.touched_spine)):
            if len(touched) <= 1 and kind == "spine":
                continue
            factor = self.params.spine_touch_factor if kind == "spine" else 1
            for d, vs in touched.items():
                t = self.lm.bool(f"touch[{jv.name},{d}]")
                self.touch[(block.job, d)] = t
                self.lm.add([(v, 1) for v in vs] + [(t, -big)], hi=0, name=f"touch[{jv.name},{d}]")
                self.aux_links.append((t, [(v, 1) for v in vs], big))
                self.obj_comm.append((t, weight * factor))

    # ---- shared resources -------------------------------------------------------------
    def _capacity(self) -> None:
        """Per uniform node class: per-size rows (exact for sizes that divide each other)
        and the total; whole free nodes opened count for objective 3."""
        for nci, terms in self.cap_terms.items():
            nc = self.p.node_classes[nci]
            if nc.rep.stoppable:
                continue  # a node hosting stoppable jobs: see _stops
            f, m = nc.free_per_node, nc.multiplicity
            for s in sorted({s for _, s in terms}, reverse=True):
                big = [(v, size) for v, size in terms if size >= s]
                if all(size % s == 0 for _, size in big):
                    # pieces that are multiples of s use at most s*floor(f/s) GPUs of a node
                    self.lm.add(big, hi=m * s * (f // s), name=f"cap[nc{nci},{s}]")
                else:
                    self.lm.add([(v, 1) for v, _ in big], hi=m * (f // s), name=f"cap[nc{nci},#{s}]")
            self.lm.add(list(terms), hi=m * f, name=f"cap[nc{nci}]")
            if nc.rep.fully_free:
                o = self.lm.var(f"open[nc{nci}]", 0, m)
                self.opened_nodes[nci] = o
                self.lm.add(list(terms) + [(o, -nc.rep.node.gpu_count)], hi=0, name=f"open[nc{nci}]")
                self.aux_links.append((o, list(terms), nc.rep.node.gpu_count))
                self.obj_frag.append((o, self.params.node_open_weight))

    def _gpu_exclusive(self) -> None:
        """On non-uniform nodes: each GPU in at most one chosen GPU set."""
        for (nci, g), vs in self.gpu_terms.items():
            if g in self.p.node_classes[nci].rep.stoppable:
                continue  # a stoppable job's GPU: see _stops
            self.lm.add([(v, 1) for v in vs], hi=1, name=f"gpu[nc{nci},{g}]")

    def _open_clique_nodes(self) -> None:
        """Objective 3 on non-uniform whole free nodes: opened when any GPU set is used."""
        clique_vars: dict[int, list[int]] = defaultdict(list)
        for pv in self.pieces:
            if pv.clique is not None:
                clique_vars[pv.node_class].append(pv.var)
        for nci, vs in clique_vars.items():
            if self.p.node_classes[nci].rep.fully_free:
                o = self.lm.bool(f"open[nc{nci}]")
                self.opened_nodes[nci] = o
                self.lm.add([(v, 1) for v in vs] + [(o, -len(vs))], hi=0, name=f"open[nc{nci}]")
                self.aux_links.append((o, [(v, 1) for v in vs], len(vs)))
                self.obj_frag.append((o, self.params.node_open_weight))

    def _open_leaves(self) -> None:
        """Objective 3: a whole free leaf domain opened costs ``leaf_open_weight``."""
        leaf_vars: dict[DomainKey, list[int]] = defaultdict(list)
        for pv in self.pieces:
            leaf = self.p.node_classes[pv.node_class].leaf
            if self.p.leaf_fully_free.get(leaf) and not leaf.is_single_node:
                leaf_vars[leaf].append(pv.var)
        for leaf, vs in leaf_vars.items():
            o = self.lm.bool(f"openleaf[{leaf}]")
            self.opened_leaf[leaf] = o
            big_leaf = max(1, sum(self.lm.ubs[v] for v in vs))
            self.lm.add([(v, 1) for v in vs] + [(o, -big_leaf)], hi=0, name=f"openleaf[{leaf}]")
            self.aux_links.append((o, [(v, 1) for v in vs], big_leaf))
            self.obj_frag.append((o, self.params.leaf_open_weight))

    # ---- sharing: stops (preemption, migration, repair) ------------------------------------
    def _may_use(self, job: int, n: NodeView, gpus: tuple[int, ...]) -> bool:
        """Job ``job`` may use these GPUs of ``n``: each is free or held by a stoppable
        job whose GPUs it may use once stopped."""
        held = self.p.stoppable
        return all(g not in n.stoppable or job in held[n.stoppable[g]].allowed for g in gpus)

    def _stops(self) -> None:
        """Running jobs the round may stop (``stop[v]``, gang: all their GPUs at once): the
        families' own stop rows (:meth:`RoundExtension.stop_rows
        <hyperplace.formulations.placement.extensions.RoundExtension.stop_rows>`: migration
        ties each mover to its copy; preemption counts every running job in objective 1),
        then the rows every stop shares (:meth:`StopsJobs.shared_rows
        <hyperplace.formulations.placement.stoppable.StopsJobs.shared_rows>`: lost work, and
        the capacity rows of the nodes hosting stoppable jobs)."""
        p = self.p
        stops = p.stops_jobs
        if not p.stoppable or stops is None:
            return
        for ext in p.extensions:
            ext.stop_rows(self)
        stops.shared_rows(self)

    # ---- sharing: quotas and fair share ----------------------------------------------------
    def _queue_terms(self) -> dict[tuple[str, str], Terms]:
        """GPUs admitted now per (queue, quota key), as terms over the piece variables."""
        book = self.p.quotas
        terms: dict[tuple[str, str], Terms] = defaultdict(list)
        for j, vs in self.job_gpu_terms.items():
            queue = self.p.jobs[j].queue
            for v, gpus, gpu_type in vs:
                for key in book.keys_for(queue, gpu_type):
                    terms[(queue, key)].append((v, gpus))
        return terms

    def _quotas(self) -> None:
        """Per queue and key: admitted now <= headroom. Per cohort and key: borrowing
        ``b >= use - nominal`` is covered by lending ``l <= min(lendable, nominal - use + b)``
        (``sum b - sum l <= overdraft the running jobs already have``); see ``quotas.py``."""
        book = self.p.quotas
        if not book.active:
            return
        terms = self._queue_terms()
        stopper = self.p.stops_jobs  # a stopped job no longer counts against its queue
        freed = stopper.quota_terms(self) if stopper is not None else {}
        # what may leave the cohort for good (a mover's copy counts its GPUs again)
        stops = freed if stopper is not None and stopper.leaves_for_good else {}
        for row in book.rows:
            t = terms.get((row.queue, row.key), [])
            if t and not row.over:  # a limit the running jobs exceed: no further use at all
                t = t + freed.get((row.queue, row.key), [])
            if t:
                self.lm.add(list(t), hi=int(math.floor(row.headroom + 1e-9)),
                            name=f"quota[{row.queue},{row.key}]")
        big = int(max(1, self.p.free_gpus + sum(book.running.values())))
        for c in book.cohort_rows:
            pool: Terms = []
            rules: list[tuple[int, int, Terms, float, float, float, int]] = []
            for q in c.members:
                quota = q.quotas[c.key]
                t = terms.get((q.name, c.key), []) + freed.get((q.name, c.key), [])
                run = c.running.get(q.name, 0)
                # a queue with stoppable jobs may stop borrowing (its own row keeps b >= use - nominal)
                b_lo = 0 if q.name in self._stopping_queues else \
                    int(max(0, math.ceil(run - quota.nominal)))
                b = self.lm.var(f"borrow[{q.name},{c.key}]", b_lo, max(b_lo, _cap(quota.borrowing_limit, big)))
                lend = self.lm.var(f"lend[{q.name},{c.key}]", 0, _cap(quota.lendable, big))
                nominal_left = int(math.floor(quota.nominal - run))
                # use - b <= nominal  and  l + use - b <= nominal
                self.lm.add(list(t) + [(b, -1)], hi=nominal_left, name=f"own[{q.name},{c.key}]")
                self.lm.add(list(t) + [(b, -1), (lend, 1)], hi=nominal_left,
                            name=f"lendable[{q.name},{c.key}]")
                pool += [(b, 1), (lend, -1)]
                rules.append((b, lend, list(t), run, quota.nominal, quota.lendable, b_lo))
            # the overdraft the running jobs already have may stay, not grow: with stoppable
            # jobs, the overdraft of the jobs that surely keep running (every stoppable job
            # stopped), a bound that holds whichever of them are stopped
            credit = {(q.name, c.key): -float(len(stops[(q.name, c.key)]))
                      for q in c.members if stops.get((q.name, c.key))}
            slack = max(0.0, overdraft(c, credit)) if credit else c.slack
            self.lm.add(pool, hi=int(math.floor(slack + 1e-9)), name=f"cohort[{c.cohort},{c.key}]")
            self.derived.append(_borrow_rule(rules, self.lm.ubs))
        for ext in self.p.extensions:  # preemption: the reclaim rule's rows
            ext.quota_rows(self, terms, freed, big)

    @property
    def _stopping_queues(self) -> set[str]:
        return {v.queue for v in self.p.stoppable}

    def _fair_share(self) -> None:
        """Objective after priority: GPUs admitted within each queue's remaining fair share,
        ``g[q] <= admitted now`` and ``g[q] <= max(0, share - running)``."""
        book = self.p.quotas
        if not book.active or len(book.shares) < 2:
            return
        per_queue: dict[str, Terms] = defaultdict(list)
        for j, vs in self.job_gpu_terms.items():
            if self.p.is_copy(j):  # a migrated job held its GPUs already
                continue
            per_queue[self.p.jobs[j].queue] += [(v, gpus) for v, gpus, _ in vs]
        for queue, share in sorted(book.shares.items()):
            room = int(math.floor(share - book.running_total.get(queue, 0)))
            if room <= 0 or not per_queue.get(queue):
                continue
            g = self.lm.var(f"fair[{queue}]", 0, room)
            self.lm.add([(g, 1)] + [(v, -c) for v, c in per_queue[queue]], hi=0,
                        name=f"fair[{queue}]")
            self.aux_links.append((g, per_queue[queue], 1))
            self.obj_fair.append((g, 1))

    def nodes_used(self, nc: NodeClass) -> int | None:
        """The nodes of a class that the round's pieces open (one variable per class, shared
        by the families that count them; None when no piece may go there). See
        :meth:`HotSpares.rows <hyperplace.formulations.placement.spares.HotSpares.rows>`
        for the rows and why they are exact for divisible sizes."""
        if nc.index in self._used_vars:
            return self._used_vars[nc.index]
        u: int | None = None
        if nc.uniform:
            terms = self.cap_terms.get(nc.index)
            if terms:
                f, m = nc.rep.node.gpu_count, nc.multiplicity
                u = self.lm.var(f"used[nc{nc.index}]", 0, m)
                rows: list[tuple[Terms, int]] = [(list(terms), f)]
                sizes = sorted({size for _, size in terms})
                if any(f % a or b % a for a, b in zip(sizes, [*sizes[1:], f])):
                    rows += [([(v, 1) for v, size in terms if size >= s], f // s) for s in sizes]
                for k, (row, per_node) in enumerate(rows):
                    self.lm.add(row + [(u, -per_node)], hi=0, name=f"used[nc{nc.index},{k}]")
                self.derived.append(_ceil_max_rule(u, rows, m))
        else:
            vs = [pv.var for pv in self.per_node_class_cliques.get(nc.index, [])]
            if vs:
                u = self.lm.bool(f"used[nc{nc.index}]")
                self.lm.add([(v, 1) for v in vs] + [(u, -len(vs))], hi=0,
                            name=f"used[nc{nc.index}]")
                self.aux_links.append((u, [(v, 1) for v in vs], len(vs)))
        self._used_vars[nc.index] = u
        return u

    # ---- objectives -----------------------------------------------------------------
    def _objectives(self) -> None:
        """Strictly lexicographic: weighted demand per priority phase (running jobs included
        when the round may preempt), then, with preemption, lost work and the number of
        victims, then fair share, admitted jobs, communication, fragmentation, policy.

        Lost work comes right after objective 1 (all its phases) and before everything else:
        which victims to stop is decided by priority first (a victim's GPUs count in its own
        level, so a lower-priority victim is always stopped before a higher one), then by
        the work it loses, then by how many are stopped; only among plans that stop the
        same work do fair share and the lower objectives choose."""
        p = self.p
        obj_jobs = [(r, 1) for j, r in self.run.items()
                    if not p.jobs[j].impossible and not p.is_copy(j)]
        demand = [Objective([(v, p.phase_weights[lvl] * g) for lvl in phase
                             for v, g in self.obj_demand_by_level[lvl]], f"demand_phase{i}", "max")
                  for i, phase in enumerate(p.priority_phases)]
        fair = [Objective(self.obj_fair, "fair_share", "max")] if self.obj_fair else []
        # the extensions' objectives in hook order (repair: GPUs placed; defrag: the largest
        # free domain; migration: the moves' cost; preemption: lost work, then stops)
        preempt = [o for ext in p.extensions for o in ext.objectives(self)]
        self.lm.objectives = [
            *demand,
            *preempt,
            *fair,
            Objective(obj_jobs, "admitted_jobs", "max"),
            Objective(self.obj_comm, "communication", "min"),
            Objective(self.obj_frag, "fragmentation", "min"),
            Objective(self.obj_policy, "policy", "min"),
        ]


def _cap(limit: float, big: int) -> int:
    return big if not math.isfinite(limit) else int(math.floor(limit))


def _borrow_rule(rules: list[tuple[int, int, Terms, float, float, float, int]], ubs: list[int]
                 ) -> Callable[[list[int]], None]:
    """Hint completion for a cohort: each queue borrows what it uses above its nominal quota
    and lends what it leaves unused (up to its lending limit)."""
    def rule(values: list[int]) -> None:
        for b, lend, terms, run, nominal, lendable, b_lo in rules:
            use = run + sum(c * values[v] for v, c in terms)
            values[b] = min(ubs[b], max(b_lo, int(math.ceil(use - nominal))))
            values[lend] = max(0, min(ubs[lend], int(math.floor(min(lendable, nominal - use + values[b])))))
    return rule


def _ceil_max_rule(aux: int, rows: list[tuple[Terms, int]], ub: int
                   ) -> Callable[[list[int]], None]:
    """Hint completion: ``aux`` = the largest ``ceil(sum(coef x var) / divisor)`` of the
    rows (capped at ``ub``)."""
    def rule(values: list[int]) -> None:
        values[aux] = min(ub, max(-(-sum(c * values[v] for v, c in row) // d) for row, d in rows))
    return rule


def build_model(problem: PlacementProblem) -> PlacementModel:
    """Encode the round as a lexicographic integer model (see :class:`PlacementModelBuilder`)."""
    return PlacementModelBuilder(problem).build()
