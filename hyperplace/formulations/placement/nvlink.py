"""Multi-node NVLink domains in the placement round (#24): which units they bind, their
domain keys, eligibility and the reason a unit cannot have one.

The round sees an NVLink domain (:class:`~hyperplace.models.nvlink.NVLinkDomain`, an NVL72
rack) through its trays' leaf: a tray's :attr:`NodeView.leaf` is the domain
(``cluster/nvl:<name>``), so node classes fold per rack, objective 3 counts whole free
racks ("keep whole racks free for the jobs that need them") and hot spares are kept per
rack (:mod:`.spares`). What this module adds:

* :func:`binding`: a unit that must span trays and either has an NVLink floor or declares
  ``maxHopCount: 0`` is *NVLink-bound*: all of its pieces lie in one NVLink domain. The
  class gets the unit hop limit 0, whose domain of a tray is its NVLink domain
  (:func:`zero_hop_domain`: the NVLink switch layer counts as the job's own), so the
  model's unit-domain rows, greedy's unit domains and the mapping back all keep the unit in
  one rack without a rule of their own;
* :func:`tray_eligible`: a bound unit may use a tray only when the domain's per-GPU NVLink
  rate meets its floor and the domain is large enough to hold it;
* the reason code ``NVLINK_DOMAIN_TOO_SMALL`` when no domain is large enough.

Partitions (``partitionTrays``) act as domains of their own: a partition's trays are the
NVLink domain a bound unit may use.
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from hyperplace.formulations.placement.domains import DomainKey
from hyperplace.formulations.placement.reasons import PendingReason, ReasonCode
from hyperplace.models.job import GangUnit
from hyperplace.models.nvlink import NVLinkDomain

if TYPE_CHECKING:
    from hyperplace.formulations.placement.problem import PlacementProblem
    from hyperplace.formulations.placement.views import NodeView, UnitClass


def domain_of(n: NodeView) -> NVLinkDomain | None:
    """The multi-node NVLink domain holding node ``n`` (None: an ordinary node)."""
    net = n.cluster.network
    return net.nvlink_domain_of(n.name) if net.nvlink_domains else None


def domain_gbps(n: NodeView, d: NVLinkDomain) -> float:
    """Per-GPU NVLink GB/s between trays of ``d`` (the domain's figure, else the GPU's)."""
    return d.gbps_per_gpu if d.gbps_per_gpu is not None else n.gpu_type.nvlink_gbps


def zero_hop_domain(n: NodeView) -> DomainKey | None:
    """A tray's domain for hop limit 0: its NVLink domain (or partition: the tray's leaf,
    :meth:`~hyperplace.models.fabric.Fabric.leaf_of`), None for an ordinary node (whose
    hop-0 domain is the node itself)."""
    return n.leaf if domain_of(n) is not None else None


class NVLinkRound:
    """What the round knows about its NVLink domains, computed once per problem.

    Parameters
    ----------
    p : PlacementProblem
        The round.
    """

    def __init__(self, p: PlacementProblem):
        self.p = p

    @cached_property
    def active(self) -> bool:
        """Some node of the round is a tray of a multi-node NVLink domain."""
        return any(c.network.nvlink_domains for c in self.p.instance.clusters)

    @cached_property
    def _capacity(self) -> dict[str, list[tuple[int, float, str]]]:
        """GPU type -> (GPUs a unit may use in a domain, per-GPU GB/s, domain) per domain
        (a partition's trays when the domain is partitioned; spare trays left out)."""
        out: dict[str, list[tuple[int, float, str]]] = {}
        seen: set[tuple[str, str]] = set()
        for n in self.p.nodes:
            d = domain_of(n)
            if d is None or (n.cluster.name, d.name) in seen:
                continue
            seen.add((n.cluster.name, d.name))
            trays = d.partition_trays or len(d.nodes)
            trays = min(trays, d.usable_trays)
            out.setdefault(n.gpu_type.name, []).append(
                (trays * n.node.gpu_count, domain_gbps(n, d), d.name))
        return out

    def largest(self, unit: GangUnit | UnitClass) -> tuple[int, str]:
        """(GPUs, domain) of the largest NVLink domain whose GPUs suit ``unit`` and whose
        NVLink rate meets its floor; (0, "") when there is none."""
        best = (0, "")
        for t in self.p.eligible_types(unit.gpu_types, unit.min_memory_gb):
            for gpus, gbps, name in self._capacity.get(t, ()):
                if gbps + 1e-9 >= unit.min_nvlink_gbps and gpus > best[0]:
                    best = (gpus, name)
        return best

    def has_domains_for(self, unit: GangUnit) -> bool:
        """Some NVLink domain's GPUs suit ``unit`` (type and memory)."""
        return any(t in self._capacity
                   for t in self.p.eligible_types(unit.gpu_types, unit.min_memory_gb))

    def binding(self, unit: GangUnit, largest_node: int) -> bool:
        """The unit must lie in one NVLink domain: a slice (:mod:`hyperplace.models.slices`),
        or a unit larger than a node of its types that asks for NVLink (a floor) or for one
        node (``maxHopCount: 0``); and NVLink domains of its GPU types exist."""
        if not self.active:
            return False
        if unit.slice_pods:  # a slice lies in one NVLink domain, whatever its size
            return self.has_domains_for(unit)
        if unit.gpus <= largest_node or unit.gpus < 2:
            return False
        if unit.min_nvlink_gbps <= 0 and unit.max_hop_count != 0:
            return False
        return self.has_domains_for(unit)

    def reason(self, unit: GangUnit) -> PendingReason | None:
        """Why a bound unit cannot run at all (no NVLink domain large enough), or None."""
        gpus, name = self.largest(unit)
        if gpus >= unit.gpus:
            return None
        return PendingReason(ReasonCode.NVLINK_DOMAIN_TOO_SMALL, gpus=unit.gpus,
                             available=gpus, group=unit.group, required=unit.min_nvlink_gbps)

    def tray_eligible(self, uc: UnitClass, n: NodeView) -> bool:
        """A piece of a bound unit may sit on ``n``: never on an ordinary node (its hop-0
        domain is the node, which a bound unit, larger than a node, cannot fill), on a tray
        when its domain's NVLink rate meets the floor and the domain can hold the unit."""
        d = domain_of(n)
        if d is None:
            return n.node.gpu_count >= uc.size
        if domain_gbps(n, d) + 1e-9 < uc.min_nvlink_gbps:
            return False
        trays = min(d.partition_trays or len(d.nodes), d.usable_trays)
        return trays * n.node.gpu_count >= uc.size
