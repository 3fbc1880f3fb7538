"""Domain objects (pydantic v2, frozen, unknown fields rejected). No solver imports here."""

from hyperplace.models.cluster import (
    Cluster,
    FabricGenerator,
    FabricSpec,
    Federation,
    InterClusterLink,
)
from hyperplace.models.fabric import Fabric, Link, Switch
from hyperplace.models.gpu import GPUCatalog, GPUType, default_catalog
from hyperplace.models.hyperjob import HyperJob, ReplicatedJob, SplitPolicy
from hyperplace.models.instance import Instance, InstanceSpec
from hyperplace.models.job import GangUnit, GroupType, ResourceGroup, TrainingJob
from hyperplace.models.node import NIC, GPUPair, Node, NVLinkTopology
from hyperplace.models.plan import GPURef, PendingJob, PlacementPlan, UnitPlacement
from hyperplace.models.result import SolveStats, SolveStatus

__all__ = [
    "Cluster", "Fabric", "FabricGenerator", "FabricSpec", "Federation", "GangUnit", "GPUCatalog",
    "GPUPair", "GPURef", "GPUType", "GroupType", "HyperJob", "ReplicatedJob", "SplitPolicy", "Instance", "InstanceSpec", "InterClusterLink",
    "Link", "NIC", "Node", "NVLinkTopology", "PendingJob", "PlacementPlan", "ResourceGroup",
    "SolveStats", "SolveStatus", "Switch", "TrainingJob", "UnitPlacement", "default_catalog",
]
