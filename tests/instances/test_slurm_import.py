"""Slurm topology.conf (tree and block) as Topograph writes them, gres.conf Links=, and an
ibnetdiscover dump of a DGX SuperPOD (tests/data/slurm, provenance line in each file)."""

from collections import Counter
from pathlib import Path

import pytest

from hyperplace.errors import InputError
from hyperplace.instances.importers.slurm import import_slurm, parse_gres_conf, \
    parse_ibnetdiscover, parse_topology_conf
from hyperplace.instances.importing import import_cluster
from hyperplace.instances.registry import instance_from_documents
from hyperplace.io import load_documents

SLURM = Path(__file__).parents[1] / "data" / "slurm"
TREE = SLURM / "topograph-oci-sim-tree.conf"
BLOCK = SLURM / "topograph-dra-block.conf"
IB = SLURM / "ibnetdiscover-superpod.out"


def test_tree_tiers_and_hops(tmp_path):
    tree = parse_topology_conf(TREE.read_text(), str(TREE))
    assert Counter(tree.switches.values()) == {1: 12, 2: 6, 3: 1}
    assert len(tree.nodes) == 96
    text, _ = import_cluster("slurm", [str(TREE)], gpu_type="H100", gpus_per_node=8)
    p = tmp_path / "c.yaml"
    p.write_text(text)
    c = instance_from_documents(load_documents(p), str(p)).clusters[0]
    assert c.network.hop_count("srv1101", "srv1108") == 1   # one leaf
    assert c.network.hop_count("srv1101", "srv1201") == 3   # leaves under spine-1
    assert c.network.hop_count("srv1101", "srv6208") == 5   # through the core


def test_block_file_makes_nvlink_domains_with_the_tree(tmp_path):
    text, summary = import_cluster("slurm", [str(TREE), str(BLOCK)], gpu_type="GB200",
                                   gpus_per_node=4)
    p = tmp_path / "c.yaml"
    p.write_text(text)
    c = instance_from_documents(load_documents(p), str(p)).clusters[0]
    doms = {d.name: d.nodes for d in c.fabric.nvlink_domains}
    assert doms["rack11"] == [f"srv{1101 + i}" for i in range(8)]
    assert c.network.hop_count("srv1101", "srv1108") == 0  # one NVLink domain


def test_ibnetdiscover_superpod():
    fab = parse_ibnetdiscover(IB.read_text(), str(IB))
    assert Counter(fab.switches.values()) == {1: 31, 2: 9}   # 31 leaf, 9 spine NDR switches
    assert len(fab.hosts) == 121 and fab.unnamed == 69
    assert "B11-P1-CUFM-02" not in fab.hosts                  # the UFM server holds no GPUs
    host_links = [(g, n) for (a, b), (g, n) in fab.links.items()
                  if a in fab.hosts or b in fab.hosts]
    assert {g for g, _ in host_links} == {400.0}              # 4xNDR
    nodes, fabric, notes = import_slurm([], ib=[(IB.read_text(), str(IB))], gpu_type="H100")
    assert len(nodes) == 121 and "31 leaf and 9 spine" in notes[0]


def test_gres_links_make_nvlink_pairs():
    # gres.conf(5) form: one line per GPU, Links= counts NVLinks to each GPU (-1: itself)
    text = ("NodeName=dgx1 Name=gpu Type=v100 File=/dev/nvidia0 Links=-1,2,1,0\n"
            "NodeName=dgx1 Name=gpu Type=v100 File=/dev/nvidia1 Links=2,-1,0,1\n"
            "NodeName=dgx1 Name=gpu Type=v100 File=/dev/nvidia2 Links=1,0,-1,2\n"
            "NodeName=dgx1 Name=gpu Type=v100 File=/dev/nvidia3 Links=0,1,2,-1\n")
    g = parse_gres_conf(text, "gres.conf")["dgx1"]
    assert g.gpus == 4 and g.gpu_type == "v100"
    nodes, _, _ = import_slurm([], gres=[(text, "gres.conf")])
    (n,) = nodes
    assert n.gpu_type == "V100-32" and n.nvlink.value == "explicit"
    assert {(p.a, p.b): p.gigabytes_per_second for p in n.nvlink_pairs} == {
        (0, 1): 100.0, (0, 2): 50.0, (1, 3): 50.0, (2, 3): 100.0}


def test_bad_lines_name_the_line():
    with pytest.raises(InputError) as e:
        parse_topology_conf("SwitchName=s1 Switches=s[2-3]\nSwitchName=s2 Nodes=a\n", "t.conf")
    assert "names switch 's3'" in e.value.message
    with pytest.raises(InputError) as e:
        import_cluster("slurm", [str(TREE)])
    assert e.value.path == "--gpu-type"


def test_scontrol_show_nodes_multiline_and_one_line():
    from hyperplace.instances.importers.slurm import parse_scontrol_nodes

    (n,) = parse_scontrol_nodes((SLURM / "scontrol-show-node-gpudev002.txt").read_text(), "s")
    assert (n.name, n.gpus, n.gpu_type, n.used, n.down) == ("gpudev002", 2, "v100", [0, 1], False)
    nodes, _, _ = import_slurm([], scontrol=[((SLURM / "scontrol-show-node-gpudev002.txt")
                                              .read_text(), "s")])
    assert nodes[0].gpu_type.startswith("V100") and nodes[0].allocated == {
        0: "slurm-allocated", 1: "slurm-allocated"}
    # the -o form: one line, GresUsed names the indices, OS= holds spaces
    one = ("NodeName=cg14 Arch=x86_64 CoresPerSocket=16 Gres=gpu:h100:8(S:0-1) "
           "GresUsed=gpu:h100:3(IDX:0-1,5) OS=Linux 5.14 #1 SMP PREEMPT_DYNAMIC State=MIXED "
           "AllocTRES=cpu=4,gres/gpu=3\n"
           "NodeName=cg15 Arch=x86_64 Gres=gpu:h100:8 State=DOWN+DRAIN AllocTRES=\n")
    a, b = parse_scontrol_nodes(one, "o")
    assert a.used == [0, 1, 5] and a.gpu_type == "h100" and b.down


def test_the_topology_guide_example_says_what_it_assumed(tmp_path):
    """Slurm's own two-level example (four spines above every leaf, LinkSpeed given): the
    file says nothing of GPUs or of link rates in Gb/s (LinkSpeed is relative), so the
    import names both assumptions (it named only the NVLink one)."""
    conf = SLURM / "topology-guide-two-level.conf"
    text, summary = import_cluster("slurm", [str(conf)], gpu_type="H100", gpus_per_node=4)
    assert "(assumed, not in the file: gpu-count, nvlink;" in summary
    assert "link speeds are not in topology.conf" in summary and "400 Gb/s" in summary
    p = tmp_path / "c.yaml"
    p.write_text(text)
    c = instance_from_documents(load_documents(p), str(p)).clusters[0]
    assert len(c.nodes) == 16 and c.gpu_count == 64
    assert all(n.labels["hyperplace.io/assumed"] == "nvlink,gpu-count" for n in c.nodes)
    assert c.network.hop_count("tux0", "tux3") == 1
    assert c.network.hop_count("tux0", "tux15") == 3  # leaf, any of four spines, leaf


def test_a_gres_type_naming_a_family_says_which_size_was_taken(tmp_path):
    """gres.conf's Type=a100 names a family of two sizes; it was read as A100-80 without a
    word (the memory decides what fits)."""
    gres = tmp_path / "gres.conf"
    gres.write_text("NodeName=tux[0-15] Name=gpu Type=a100 File=/dev/nvidia[0-3]\n"
                    "NodeName=tux[0-15] Name=shard Count=32\n")
    conf = SLURM / "topology-guide-two-level.conf"
    text, summary = import_cluster("slurm", [str(conf), str(gres)])
    assert "GPU type 'a100' names the A100 family: taken as A100-80 (of A100-40, " \
        "A100-80; --gpu-type chooses)" in summary
    p = tmp_path / "c.yaml"
    p.write_text(text)
    c = instance_from_documents(load_documents(p), str(p)).clusters[0]
    tux0 = next(n for n in c.nodes if n.name == "tux0")
    assert tux0.gpu_type == "A100-80" and tux0.gpu_count == 4
    assert "gpu-memory" in tux0.labels["hyperplace.io/assumed"].split(",")


def test_imports_are_the_same_in_every_process():
    """A written Cluster lists its switches as topology.conf defines them (they came from a
    set, so an imported file changed from one run to the next: a diff of two imports of the
    same file was never empty). Checked in processes with different hash seeds."""
    import os
    import subprocess
    import sys

    conf = SLURM / "topology-guide-two-level.conf"
    code = ("import sys; from hyperplace.instances.importers.slurm import parse_topology_conf; "
            "print(list(parse_topology_conf(open(sys.argv[1]).read(), 'x').switches))")
    seen = {subprocess.run([sys.executable, "-c", code, str(conf)], capture_output=True,
                           text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
            for seed in (1, 2, 3)}
    assert seen == {str([f"s{i}" for i in range(8)]) + "\n"}, seen
    dump = SLURM / "ibnetdiscover-superpod.out"  # an ibnetdiscover dump: cables came from a set
    code = ("import sys; from hyperplace.instances.importers.slurm import parse_ibnetdiscover; "
            "f = parse_ibnetdiscover(open(sys.argv[1]).read(), 'x'); "
            "print(list(f.switches), list(f.links))")
    seen = {subprocess.run([sys.executable, "-c", code, str(dump)], capture_output=True,
                           text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
            for seed in (1, 2, 3)}
    assert len(seen) == 1, seen
