"""Why a job cannot run at all, as codes with their figures; the words are in ``explain``.

The formulation decides *that* a job is impossible while it builds the problem (before any
solver runs) and records a :class:`PendingReason`; :mod:`hyperplace.formulations.explain`
turns it into a sentence an operator can act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ReasonCode(StrEnum):
    """What makes a job impossible in this round, whatever else runs."""

    #: the job spans nodes, but no node link reaches its between-replica rate
    BETWEEN_NODES_UNREACHABLE = "between-nodes-unreachable"
    #: maxHopCount 0 between replicas: all its GPUs on one node, and no node is that large
    JOB_LARGER_THAN_NODE = "job-larger-than-node"
    #: a group with maxHopCount 0 needs more GPUs than its largest eligible node has
    GROUP_LARGER_THAN_NODE = "group-larger-than-node"
    #: a group bound to one NVLink domain (:mod:`.nvlink`) needs more GPUs than the largest
    #: NVLink domain of its types offers (at its NVLink floor)
    NVLINK_DOMAIN_TOO_SMALL = "nvlink-domain-too-small"


@dataclass(frozen=True)
class PendingReason:
    """A reason code and the figures its sentence quotes.

    Parameters
    ----------
    code : ReasonCode
        What is impossible.
    gpus : int
        GPUs the job (or group) needs.
    available : float
        The most the cluster offers (GPUs per node, or Gb/s of the fastest link).
    required : float
        The rate asked for (Gb/s), where it applies.
    group : str
        The resource group concerned, where it applies.
    """

    code: ReasonCode
    gpus: int = 0
    available: float = 0.0
    required: float = 0.0
    group: str = ""
