"""Cluster state across rounds: the simulator's view of the one round state.

:class:`ClusterState` is :class:`~hyperplace.solvers.workflows.session.RoundState` (the one
implementation of "apply a delta, commit a round's starts, keep usage history", shared with
:class:`~hyperplace.solvers.workflows.session.PlacementSession` and the service) as a replay
starts it: from an instance's nodes, fabric and GPU types with every GPU free (the
instance's own running jobs and queue are not used). Its queue holds the simulator's
:class:`~hyperplace.sim.jobs.SimJob` entries (a round sees their manifests), and a job a
failure interrupts goes back to its place in submit order. ``allocated`` holds the GPUs of
running jobs, ``faulty`` every GPU that cannot be used (a failed GPU, every GPU of a failed
node, every GPU of a node attached to a failed switch).
"""

from __future__ import annotations

from hyperplace.models import Instance
from hyperplace.solvers.workflows.session import GPU, RoundState, fresh_node

__all__ = ["GPU", "ClusterState", "fresh_node", "reorder_nodes"]


class ClusterState(RoundState):
    """GPU ownership, failures and the queue of one replay, updated in place between rounds."""

    def __init__(self, instance: Instance, *, half_life_s: float | None = None):
        super().__init__(instance, fresh=True, half_life_s=half_life_s,
                         requeue=lambda job: job.submit_s, manifest=lambda job: job.manifest)


def reorder_nodes(instance: Instance, fast_first: bool) -> Instance:
    """The same clusters with nodes listed fastest GPU type first (or last).

    Peer rules walk nodes in list order, so the order decides which GPU type they fill
    first. The fabric is materialised (switches and links listed) so that reordering the
    nodes does not rewire it.
    """
    from hyperplace.costmodel.speed import rank_speed
    from hyperplace.models import FabricSpec

    clusters = []
    for c in instance.clusters:
        net = c.network
        speed = {n.name: rank_speed(instance.catalog.get(n.gpu_type), instance.catalog)
                 for n in c.nodes}
        nodes = sorted(c.nodes, key=lambda n: -speed[n.name] if fast_first else speed[n.name])
        fabric = FabricSpec(switches=list(net.switches), links=list(net.links))
        clusters.append(c.model_copy(update={"nodes": nodes, "fabric": fabric}))
        for k in ("network", "node_by_name"):
            clusters[-1].__dict__.pop(k, None)
    out = instance.model_copy(update={"spec": instance.spec.model_copy(
        update={"clusters": clusters})})
    for k in ("node_index", "federation"):
        out.__dict__.pop(k, None)
    return out
