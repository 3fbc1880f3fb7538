"""Tunables of the placement formulation, each with why it has its value.

Every weight here shapes a lower lexicographic objective (2-4) or caps an enumeration; none
changes which plans are valid. Override them from the library::

    from hyperplace.formulations.placement import ModelParams, PlacementProblem
    problem = PlacementProblem(instance, params=ModelParams(leaf_open_weight=4))
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelParams:
    """Weights of objectives 2-4 and the clique-enumeration cap.

    Parameters
    ----------
    traffic_weight_tp : int
        Communication weight (objective 2) of a job with a multi-node tensor-parallel unit.
        Default 100: TP exchanges activations every layer, about two orders of magnitude
        more traffic per step than PP's boundary activations (Megatron-LM's analysis, see
        the cost model in ``models/model_spec.py``), so one more leaf touched by a TP job
        outweighs any number of PP or DP touches in a round of < 10 jobs per leaf.
    traffic_weight_pp : int
        Weight of a job with a pipeline-parallel group (default 10, one order above DP).
    traffic_weight_dp : int
        Weight of every other job (default 1: gradient all-reduce once per step).
    traffic_weight_ep : int
        Weight of a job with a multi-node ExpertParallel unit (default 100, as TP): per MoE
        layer it sends every token's activation to top-k experts and back, forward and
        backward (four all-to-alls, ``costmodel.collectives.moe_step_alltoall_s``), the same
        order as TP's per-layer all-reduces (top-2 to top-8: 1-4x their bytes), so its
        units stay in as few NVLink domains (racks, for trays) as the free GPUs allow.
    spine_touch_factor : int
        A spine domain touched costs this many leaf touches (default 3: leaf-spine-leaf is
        3 hops against 1 within a leaf, the hop-count definition of the README).
    node_open_weight : int
        Fragmentation weight (objective 3) of opening a whole free node (default 1).
    leaf_open_weight : int
        Fragmentation weight of opening a whole free leaf domain. Default 8: a leaf opened
        is worse than filling the 8 nodes of a typical leaf one by one, so partly used
        leaves fill first and whole leaves stay free for large gangs.
    policy_scale : int
        Per-GPU penalty (objective 4) of the least preferred GPU type; the preferred one
        costs 0 (default 10: ten steps resolve the bench's GPU types, whose TFLOPS x MFU
        and prices differ by >= 10 %).
    piece_weight : int
        Communication weight (objective 2) of one piece of a unit cut across nodes, in
        units of the job's traffic weight (default 1: one more node in a unit's collective
        costs as much as one more leaf touched), so a unit is cut into as few pieces as
        the free GPUs allow.
    flexible_max_units : int
        Classes (a group's units) of at most this many units get flexible pieces, one set
        of piece variables per unit (default 4); larger classes keep node-sized pieces so
        that the model stays small at scale (a restriction, valid plans).
    max_clique_enum : int
        GPU sets enumerated per (node, piece size, NVLink floor) on non-uniform nodes
        (DGX-1, PCIe, explicit). Default 5,000: C(8, 4) = 70 on a DGX-1 is far below it,
        and it keeps a 16-GPU explicit node's model under a second; past the cap the model
        is a restriction (valid plans, possibly not optimal).
    """

    traffic_weight_tp: int = 100
    traffic_weight_pp: int = 10
    traffic_weight_dp: int = 1
    traffic_weight_ep: int = 100
    spine_touch_factor: int = 3
    node_open_weight: int = 1
    leaf_open_weight: int = 8
    policy_scale: int = 10
    piece_weight: int = 1
    flexible_max_units: int = 4
    max_clique_enum: int = 5000

    def __post_init__(self) -> None:
        for name in ("traffic_weight_tp", "traffic_weight_pp", "traffic_weight_dp",
                     "traffic_weight_ep",
                     "spine_touch_factor", "node_open_weight", "leaf_open_weight",
                     "policy_scale", "piece_weight", "flexible_max_units"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0 (got {value!r})")
        if isinstance(self.max_clique_enum, bool) or not isinstance(self.max_clique_enum, int) \
                or self.max_clique_enum < 1:
            raise ValueError(f"max_clique_enum must be an integer >= 1 (got {self.max_clique_enum!r})")

    def traffic_weight(self, traffic_class: str) -> int:
        """Weight of a traffic class ``"tp"``, ``"ep"``, ``"pp"`` or ``"dp"``."""
        return {"tp": self.traffic_weight_tp, "ep": self.traffic_weight_ep,
                "pp": self.traffic_weight_pp, "dp": self.traffic_weight_dp}[traffic_class]
