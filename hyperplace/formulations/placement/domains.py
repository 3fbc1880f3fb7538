"""Domain keys: which part of a cluster a node is in, for a hop limit.

A :class:`DomainKey` names a cluster, one fabric domain of it (a leaf, a spine group), or a
single node. It *is* its text (a ``str`` subclass), so it hashes and sorts at string speed
in the model's and greedy's hot loops and prints the same in variable names and reasons,
while code asks its fields (``cluster``, ``fabric_domain``, ``node``) instead of parsing it.
"""

from __future__ import annotations

from hyperplace.models.cluster import Cluster


class DomainKey(str):
    """``cluster``, ``cluster/<fabric domain>`` or ``cluster/node:<name>``.

    Build one with :meth:`whole_cluster`, :meth:`fabric` or :meth:`single_node`.
    """

    cluster: str
    fabric_domain: str | None
    node: str | None

    def __new__(cls, text: str, cluster: str, fabric_domain: str | None,
                node: str | None) -> DomainKey:
        obj = super().__new__(cls, text)
        obj.cluster = cluster
        obj.fabric_domain = fabric_domain
        obj.node = node
        return obj

    def __getnewargs__(self) -> tuple[str, str, str | None, str | None]:  # type: ignore[override]
        return (str(self), self.cluster, self.fabric_domain, self.node)

    @classmethod
    def whole_cluster(cls, cluster: str) -> DomainKey:
        """The whole of ``cluster`` (no hop limit)."""
        return cls(cluster, cluster, None, None)

    @classmethod
    def fabric(cls, cluster: str, domain: str) -> DomainKey:
        """A fabric domain (a leaf group, a spine group) of ``cluster``."""
        return cls(f"{cluster}/{domain}", cluster, domain, None)

    @classmethod
    def single_node(cls, cluster: str, node: str) -> DomainKey:
        """One node: hop limit 0, or a node that is not on the fabric."""
        return cls(f"{cluster}/node:{node}", cluster, None, node)

    @property
    def is_single_node(self) -> bool:
        """True when the domain is one node."""
        return self.node is not None

    @property
    def label(self) -> str:
        """The key without its cluster (as topology assignments list it)."""
        if self.node is not None:
            return f"node:{self.node}"
        return self.fabric_domain if self.fabric_domain is not None else self.cluster


def radius_for(cluster: Cluster, hop_limit: int | None) -> int | None:
    """The fabric radius that a hop limit allows.

    Parameters
    ----------
    cluster : Cluster
        The cluster whose fabric tiers are used.
    hop_limit : int or None
        A ``maxHopCount``; None means no limit.

    Returns
    -------
    int or None
        The largest tier radius <= ``hop_limit``; 0 for one node; None for the whole
        cluster (no limit, or the top tier is one domain anyway).
    """
    if hop_limit is None:
        return None
    radii = cluster.network.radii
    fitting = [r for r in radii if r <= hop_limit]
    if not fitting:
        return 0
    if fitting[-1] == radii[-1] and len(cluster.network.domains(radii[-1])) <= 1:
        return None
    return fitting[-1]
