"""NVLink domains from what clusters publish (#24): GFD's nvidia.com/gpu.clique label (via
the Kubernetes reader), a Kueue Topology with a clique level, Volcano HyperNodes whose tier
is an NVLink network, a Slurm topology/block file. Plans on the imported clusters go
through the checker."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hyperplace.check import check
from hyperplace.errors import InputError
from hyperplace.instances.importers.hypernode import hypernodes_to_fabric
from hyperplace.instances.importers.kubernetes import (
    import_kubernetes_nodes,
    levels_from_topology,
)
from hyperplace.instances.importers.nvlink import domains_from_block_conf, expand_hostlist
from hyperplace.models import Cluster, Instance, InstanceSpec, Node
from hyperplace.models.job import ObjectMeta
from hyperplace.solvers.driver import solve_placement
from placement_helpers import job

DATA = Path(__file__).parents[1] / "data"


def _k8s_node(name: str, clique: str, rack: str) -> dict:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                "kubernetes.io/hostname": name, "nvidia.com/gpu.clique": clique,
                "nvidia.com/gpu.product": "NVIDIA-B200", "cloud.provider.com/topology-rack": rack}},
            "status": {"capacity": {"nvidia.com/gpu": "4"}, "allocatable": {"nvidia.com/gpu": "4"}}}


def _solve_tp8(cluster):
    inst = Instance(metadata=ObjectMeta(name="imp"), spec=InstanceSpec(
        clusters=[cluster], jobs=[job("tp8", tp=8, accel="B200", nvlink=1800, mem=100)]))
    plan = solve_placement(inst, solver="greedy", budget_s=5)
    assert plan.admitted == ["tp8"] and check(plan, inst) == []
    return {cluster.network.nvlink_domain_of(g.node).name for g in plan.placements[0].gpus}


def test_gpu_clique_labels_make_nvlink_domains():
    # two cliques of two 4-GPU trays under one leaf: an 8-GPU TP group stays in one clique
    nodes = [_k8s_node(f"t{i}", f"uuid-1.{i // 2}", "leaf-a") for i in range(4)]
    kc = import_kubernetes_nodes([({"kind": "List", "items": nodes}, "")], "nodes.json",
                                 gpu_type="B200")
    domains = kc.cluster.fabric.nvlink_domains
    assert [(d.name, d.nodes) for d in domains] == [("uuid-1.0", ["t0", "t1"]),
                                                    ("uuid-1.1", ["t2", "t3"])]
    assert kc.cluster.network.hop_count("t0", "t1") == 0
    assert kc.cluster.network.hop_count("t0", "t2") == 1
    assert len(_solve_tp8(kc.cluster)) == 1


def test_a_kueue_topology_with_a_clique_level_keeps_it_out_of_the_switches():
    topo = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology",
            "metadata": {"name": "gb"}, "spec": {"levels": [
                {"nodeLabel": "cloud.provider.com/topology-rack"},
                {"nodeLabel": "nvidia.com/gpu.clique"},
                {"nodeLabel": "kubernetes.io/hostname"}]}}
    levels = levels_from_topology(topo, "topo.yaml")
    assert levels == {1: ("cloud.provider.com/topology-rack",)}
    nodes = [_k8s_node(f"t{i}", f"u.{i // 2}", "leaf-a") for i in range(4)]
    kc = import_kubernetes_nodes([({"kind": "List", "items": nodes}, "")], "nodes.json",
                                 gpu_type="B200", levels=levels)
    assert len(kc.cluster.fabric.nvlink_domains) == 2
    assert {s.name for s in kc.cluster.fabric.switches} == {"leaf-a"}


def test_volcano_hypernodes_with_an_nvlink_tier():
    docs = [d for d in yaml.safe_load_all((DATA / "hypernodes_nvl72_tier.yaml").read_text()) if d]
    nodes = [Node(name=f"gb-a-{i:02d}", gpu_type="B200", gpu_count=4) for i in range(4)] + \
        [Node(name=f"h100-{i}", gpu_type="H100-80", gpu_count=8) for i in range(2)]
    fabric = hypernodes_to_fabric(docs, nodes=nodes)
    (rack,) = fabric.nvlink_domains
    assert rack.name == "nvl72-a" and rack.nodes == [f"gb-a-{i:02d}" for i in range(4)]
    assert "nvl72-a" not in {s.name for s in fabric.switches}  # not a switch any more
    c = Cluster(name="c", nodes=nodes, fabric=fabric)
    net = c.network
    assert net.hop_count("gb-a-00", "gb-a-03") == 0      # one NVLink domain
    assert net.hop_count("h100-0", "h100-1") == 1        # one IB leaf
    assert net.hop_count("gb-a-00", "h100-0") == 3       # leaf - spine - leaf
    assert len(_solve_tp8(c)) == 1
    # the same tree read without the NVLink tier is an ordinary switch tier (the old reading)
    plain = [{**d, "metadata": {"name": d["metadata"]["name"]}} for d in docs]
    assert not hypernodes_to_fabric(plain, nodes=nodes).nvlink_domains
    # naming the tier instead of labelling: every tier-1 HyperNode is then an NVLink domain
    gb_only = [d for d in plain if d["metadata"]["name"] != "ib-leaf-h100"]
    spine = gb_only[-1]["spec"]["members"]
    gb_only[-1] = {**gb_only[-1], "spec": {**gb_only[-1]["spec"], "members": spine[:1]}}
    by_tier = hypernodes_to_fabric(gb_only, nodes=nodes[:4], nvlink_tier=1)
    assert [d.name for d in by_tier.nvlink_domains] == ["nvl72-a"]


def test_a_slurm_block_topology_file():
    text = (DATA / "topology_block_nvl72.conf").read_text()
    domains = domains_from_block_conf(text, "topology.conf")
    assert [(d.name, d.nodes) for d in domains] == [
        ("rack-a", ["gb-a-01", "gb-a-02", "gb-a-03", "gb-a-04"]),
        ("rack-b", ["gb-b-01", "gb-b-02", "gb-b-03", "gb-b-04"])]
    assert expand_hostlist("x[1-2,05],y") == ["x1", "x2", "x05", "y"]
    with pytest.raises(InputError, match="not a node of the cluster"):
        domains_from_block_conf(text, "topology.conf", known=["gb-a-01"])
    with pytest.raises(InputError, match="no BlockName"):
        domains_from_block_conf("SwitchName=s1 Nodes=a", "topology.conf")
