"""Importers on the bundled real files (read through importlib.resources) and on broken copies.

Expected figures are either counted from the file in the test itself or are the vendor
figures the module docstrings cite; a broken file must give one InputError naming it.
"""

from __future__ import annotations

import csv
import io
import re
from collections import Counter
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml

from hyperplace.errors import InputError
from hyperplace.instances.importers import (
    CLOUD_SHAPES,
    bundled,
    dump_hypernodes,
    fabric_to_hypernodes,
    hypernodes_to_fabric,
    import_alibaba_gpu2023_nodes,
    import_alibaba_gpu2023_pods,
    import_alibaba_pai2020_machines,
    import_cloud_shape,
    import_hypernodes,
    import_nccl_topology,
    import_nvidia_smi_topo,
    import_nvlink_link_matrix,
    read_link_matrix,
)
from hyperplace.instances.importers.alibaba import SKIPPED_LABEL, TRACE_GPU_TYPES
from hyperplace.instances.importers.nccl_xml import ASSUMED_LABEL
from hyperplace.models import (
    Cluster,
    FabricGenerator,
    FabricSpec,
    GPUCatalog,
    Instance,
    Node,
    NVLinkTopology,
    default_catalog,
)
from hyperplace.models.node import DGX1_LINKS

DATA = Path(__file__).parents[1] / "data"
SHARED = Path(__file__).resolve().parents[3] / "shared"  # shared/ sits beside the checkout
SCHEMAS = Path(__file__).parents[1] / "data" / "schemas"  # shipped with the tests (PROVENANCE.md)
CATALOG = default_catalog()


def topo(name: str) -> Any:
    return bundled("topology", name)


def trace(name: str) -> Any:
    return bundled("traces", name)


def broken(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def pair_gbps(node: Node) -> dict[tuple[int, int], float]:
    t = CATALOG.get(node.gpu_type)
    return node.pair_bandwidths(t.nvlink_per_link_gbps, t.nvlink_gbps, t.pcie_gbps)


# ---- nvidia-smi topo -m ---------------------------------------------------------------

@pytest.mark.parametrize("fixture, family, nv, per_pair, nics", [
    ("dgx_a100_nvidia_smi_topo.txt", "A100", 12, 600.0, 12),
    ("dgx_h100_nvidia_smi_topo.txt", "H100", 18, 900.0, 10),  # NIC columns of the matrix
])
def test_nvidia_smi_fixture(fixture: str, family: str, nv: int, per_pair: float, nics: int) -> None:
    text = topo(fixture).read_text()
    node = import_nvidia_smi_topo(topo(fixture))
    assert node.gpu_count == 8
    assert CATALOG.get(node.gpu_type).family == family
    assert node.nvlink == NVLinkTopology.EXPLICIT
    # every NV cell appears twice in the symmetric matrix
    assert len(node.nvlink_pairs) == len(re.findall(rf"\bNV{nv}\b", text)) // 2 == 28
    assert set(pair_gbps(node).values()) == {per_pair}
    header = next(line for line in text.splitlines() if "GPU0" in line)
    assert len(re.findall(r"\bmlx5_\d+\b", header)) == nics
    # the compute rails (PIX/PXB to a GPU) count; storage/management ports are listed apart
    assert len(node.nics) == 8
    assert len(node.labels["hyperplace.io/other-nics"].split(",")) == nics - 8
    assert node.labels[ASSUMED_LABEL] == "gpu-type,nic-speed"


def test_nvidia_smi_nics_closest_gpus() -> None:
    a100 = import_nvidia_smi_topo(topo("dgx_a100_nvidia_smi_topo.txt"), gpu_type="A100-80",
                                  nic_gbps=200, nics="all")
    by_name = {n.name: n.gpus for n in a100.nics}
    assert by_name["mlx5_0"] == by_name["mlx5_1"] == [0, 1]      # PXB to GPU0/1
    assert by_name["mlx5_8"] == [6, 7]
    assert by_name["mlx5_4"] == by_name["mlx5_11"] == []          # SYS to every GPU: storage
    assert a100.gpu_type == "A100-80" and ASSUMED_LABEL not in a100.labels
    compute = import_nvidia_smi_topo(topo("dgx_a100_nvidia_smi_topo.txt"), gpu_type="A100-80",
                                     nic_gbps=200, nics="gpu-attached")
    assert len(compute.nics) == 8 and compute.nic_gbps_per_gpu == 200

    h100 = import_nvidia_smi_topo(topo("dgx_h100_nvidia_smi_topo.txt"), gpu_type="H100-80",
                                  nics="all")
    by_name = {n.name: n.gpus for n in h100.nics}
    assert all(by_name[f"mlx5_{i}"] == [i] for i in range(8))    # one PIX NIC per GPU
    assert by_name["mlx5_8"] == [0, 1, 2, 3]                       # NODE: socket 0's storage NIC
    assert {n.gbps for n in h100.nics} == {CATALOG.get("H100-80").nic_gbps}


def test_nvidia_smi_guess_is_conservative() -> None:
    node = import_nvidia_smi_topo(topo("dgx_h100_nvidia_smi_topo.txt"))
    assert node.gpu_type == "H100-80"  # NV18 also fits H200 and B200; the guess promises least
    a100 = import_nvidia_smi_topo(topo("dgx_a100_nvidia_smi_topo.txt"))
    assert a100.gpu_type == "A100-40"


def test_nvidia_smi_space_aligned_copy_reads_the_same(tmp_path: Path) -> None:
    text = topo("dgx_h100_nvidia_smi_topo.txt").read_text().replace("\t", "   ")
    spaced = import_nvidia_smi_topo(broken(tmp_path, "h100.txt", text), name="x")
    tabbed = import_nvidia_smi_topo(topo("dgx_h100_nvidia_smi_topo.txt"), name="x")
    assert spaced == tabbed


def _h100_lines() -> list[str]:
    return topo("dgx_h100_nvidia_smi_topo.txt").read_text().splitlines()


def test_nvidia_smi_row_with_wrong_column_count(tmp_path: Path) -> None:
    lines = _h100_lines()
    i = next(k for k, line in enumerate(lines) if line.startswith("GPU3"))
    lines[i] = lines[i].rsplit("\t", 4)[0]  # the affinity cells and the last NIC's cell
    path = broken(tmp_path, "short_row.txt", "\n".join(lines))
    with pytest.raises(InputError) as err:
        import_nvidia_smi_topo(path)
    assert "short_row.txt" in str(err.value) and f"line {i + 1}" in str(err.value)
    assert "GPU3" in str(err.value)


@pytest.mark.parametrize("edit, expect", [
    (lambda t: t.replace("NV18\tNV18\tNV18\tPIX", "NV18\tNV18\tNVX\tPIX", 1), "unknown path"),
    (lambda t: t.replace("GPU0\t X \tNV18", "GPU0\t X \tSYS", 1), "GPU1-GPU0 is NV18"),
    (lambda t: "# only a comment\n", "no nvidia-smi topology matrix"),
    (lambda t: "", "file is empty"),
])
def test_nvidia_smi_malformed(tmp_path: Path, edit: Any, expect: str) -> None:
    path = broken(tmp_path, "bad_topo.txt", edit(topo("dgx_h100_nvidia_smi_topo.txt").read_text()))
    with pytest.raises(InputError, match=expect) as err:
        import_nvidia_smi_topo(path)
    assert err.value.source == str(path)


def test_nvidia_smi_without_nvlink_needs_gpu_type(tmp_path: Path) -> None:
    text = re.sub(r"NV18", "SYS", topo("dgx_h100_nvidia_smi_topo.txt").read_text())
    path = broken(tmp_path, "pcie.txt", text)
    with pytest.raises(InputError, match="pass gpu_type"):
        import_nvidia_smi_topo(path)
    node = import_nvidia_smi_topo(path, gpu_type="H100-80")
    assert node.nvlink == NVLinkTopology.PCIE
    assert set(pair_gbps(node).values()) == {CATALOG.get("H100-80").pcie_gbps}


# ---- NCCL topology XML ------------------------------------------------------------------

def _file_nic_count(text: str, bare_are_nics: bool) -> int:
    """NICs counted straight from the XML text: <net> ports, NIC-class PCI devices without
    <net>, and (p5) bare PCI leaves."""
    nets = len(re.findall(r"<net\s", text))
    nic_pci = len(re.findall(r'class="0x020[07]00"', text)) if nets == 0 else 0
    bare = len(re.findall(r'<pci busid="[^"]+" link_speed="[^"]+" link_width="\d+"/>', text))
    return nets + nic_pci + (bare if bare_are_nics else 0)


# shape: (GPUs, type, NVLink kind, pair GB/s, NICs, NIC Gb/s)
CLOUD_EXPECTED = {
    "azure-ndv2": (8, "V100-32", NVLinkTopology.HYBRID_CUBE_MESH, {50.0, 100.0, 32.0}, 1, 100.0),
    "azure-ndv4": (8, "A100-40", NVLinkTopology.NVSWITCH, {600.0}, 8, 200.0),
    "azure-ndv5": (8, "H100-80", NVLinkTopology.NVSWITCH, {900.0}, 8, 400.0),
    "azure-ncv4": (4, "A100-80", NVLinkTopology.PCIE, {64.0}, 1, 100.0),
    "aws-p4d": (8, "A100-40", NVLinkTopology.NVSWITCH, {600.0}, 4, 100.0),
    "aws-p4de": (8, "A100-80", NVLinkTopology.NVSWITCH, {600.0}, 4, 100.0),
    "aws-p5": (8, "H100-80", NVLinkTopology.NVSWITCH, {900.0}, 32, 100.0),
}


@pytest.mark.parametrize("shape", sorted(CLOUD_SHAPES))
def test_nccl_cloud_shapes(shape: str) -> None:
    gpus, gtype, kind, pair_set, nics, nic_gbps = CLOUD_EXPECTED[shape]
    spec = CLOUD_SHAPES[shape]
    node = import_cloud_shape(shape)
    text = topo(spec.file).read_text()
    assert node.gpu_count == gpus
    if "GPUs are not reported" not in text:
        gpu_elements = len(re.findall(r'<pci [^>]*\bclass="0x030200"', text))
        assert node.gpu_count == gpu_elements
    assert node.gpu_type == gtype and node.nvlink == kind
    assert set(pair_gbps(node).values()) == pair_set
    assert len(node.nics) == nics == _file_nic_count(text, spec.bare_pci_devices == "nic")
    assert {n.gbps for n in node.nics} == {nic_gbps}
    assert node.labels["node.kubernetes.io/instance-type"] == spec.instance_type


def test_nccl_speed_read_from_file_in_mbps() -> None:
    node = import_nccl_topology(topo("azure_ncv4-topo.xml"))
    assert 'speed="100000"' in topo("azure_ncv4-topo.xml").read_text()
    assert [n.gbps for n in node.nics] == [100.0]       # 100000 Mb/s
    assert node.nics[0].gpus == [0]                        # same CPU as GPU 0
    assert node.gpu_type == "A100-80"                     # PCI device 0x20b5 (A100 80GB PCIe)
    assert ASSUMED_LABEL not in node.labels                # NVLink and speed are in the file


def test_nccl_type_from_pci_device_id() -> None:
    p4d = import_nccl_topology(topo("aws_p4d-24xl-topo.xml"))
    p4de = import_nccl_topology(topo("aws_p4de-24xl-topo.xml"))
    assert (p4d.gpu_type, p4de.gpu_type) == ("A100-40", "A100-80")  # 0x20b0 / 0x20b2
    assert p4d.labels[ASSUMED_LABEL] == "nvlink"  # EFA 0xefa0 is 100 Gb/s: not assumed
    assert [n.gbps for n in p4d.nics] == [100.0] * 4
    assert [n.gpus for n in p4d.nics] == [[0, 1], [2, 3], [4, 5], [6, 7]]  # one per PCIe switch


def test_nccl_nvswitch_links_from_file() -> None:
    node = import_nccl_topology(DATA / "nccl_nvswitch_2gpu_topo.xml")
    assert node.nvlink == NVLinkTopology.NVSWITCH
    assert node.nvlink_gbps == 12 * CATALOG.get("A100-80").nvlink_per_link_gbps == 600.0
    assert node.gpu_type == "A100-80"
    assert {n.name: (n.gbps, n.gpus) for n in node.nics} == {"mlx5_0": (200.0, [0]),
                                                              "mlx5_1": (200.0, [1])}


def test_nccl_gpu_to_gpu_links_from_file() -> None:
    node = import_nccl_topology(DATA / "nccl_gpu_pairs_topo.xml")
    assert node.gpu_type == "V100-16" and node.nvlink == NVLinkTopology.EXPLICIT
    bw = pair_gbps(node)
    assert (bw[(0, 1)], bw[(0, 2)], bw[(1, 3)], bw[(2, 3)]) == (100.0, 50.0, 50.0, 100.0)
    assert bw[(0, 3)] == CATALOG.get("V100-16").pcie_gbps
    assert [(n.gbps, n.gpus) for n in node.nics] == [(100.0, [0, 1])]


def test_nccl_truncated_xml(tmp_path: Path) -> None:
    text = topo("azure_ndv4-topo.xml").read_text()
    path = broken(tmp_path, "ndv4_truncated.xml", text[: len(text) // 2])
    with pytest.raises(InputError, match="malformed XML: line") as err:
        import_nccl_topology(path, gpu_type="A100-40")
    assert "ndv4_truncated.xml" in err.value.one_line()


@pytest.mark.parametrize("fixture, kwargs, expect", [
    ("azure_ndv4-topo.xml", {}, "pass gpu_type"),
    ("aws_p5.48xl-topo.xml", {"gpu_type": "H100-80"}, "pass gpu_count"),
    ("azure_ncv4-topo.xml", {"gpu_type": "H100-80"}, "sm 80"),
    ("aws_p4d-24xl-topo.xml", {"gpu_count": 4}, "lists 8 GPUs"),
    ("azure_ndv4-topo.xml", {"gpu_type": "Z9000"}, "unknown GPU type"),
])
def test_nccl_missing_or_contradicting_facts(fixture: str, kwargs: dict[str, Any],
                                             expect: str) -> None:
    with pytest.raises(InputError, match=expect) as err:
        import_nccl_topology(topo(fixture), **kwargs)
    assert fixture in err.value.one_line()


def test_nccl_wrong_root_and_bad_speed(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="expected <system>"):
        import_nccl_topology(broken(tmp_path, "x.xml", "<topology/>"))
    text = topo("azure_ncv4-topo.xml").read_text().replace('speed="100000"', 'speed="fast"')
    with pytest.raises(InputError, match="not a number"):
        import_nccl_topology(broken(tmp_path, "ncv4.xml", text))


def test_unknown_cloud_shape() -> None:
    with pytest.raises(InputError, match="unknown cloud shape"):
        import_cloud_shape("gcp-a3")


# ---- DGX-1 link matrix ------------------------------------------------------------------

def test_dgx1_matrix() -> None:
    gpus, links = read_link_matrix(topo("dgx1_v100_nvlink_links.csv"))
    assert gpus == 8
    assert links == DGX1_LINKS                       # the model's table is this file
    per_gpu = Counter[int]()
    for (i, j), k in links.items():
        per_gpu[i] += k
        per_gpu[j] += k
    assert set(per_gpu.values()) == {6}                # 6 NVLinks per V100

    node = import_nvlink_link_matrix(topo("dgx1_v100_nvlink_links.csv"))
    bw = pair_gbps(node)
    one = {bw[p] for p, k in links.items() if k == 1}
    two = {bw[p] for p, k in links.items() if k == 2}
    assert one == {50.0} and two == {100.0} and two == {2 * x for x in one}
    pcie = CATALOG.get(node.gpu_type).pcie_gbps
    assert all(bw[p] == pcie for p in combinations(range(8), 2) if p not in links)
    mesh = Node(name="m", gpu_type=node.gpu_type, gpu_count=8,
                nvlink=NVLinkTopology.HYBRID_CUBE_MESH)
    assert pair_gbps(mesh) == bw


@pytest.mark.parametrize("edit, expect", [
    (lambda rows: rows[:3] + [rows[3] + ",0"] + rows[4:], "line 4: row has 9 link columns"),
    (lambda rows: rows[:3] + [rows[3].replace(",2,", ",x,", 1)] + rows[4:], "not an integer"),
    (lambda rows: rows[:-1], "8 GPU columns but 7 rows"),
    (lambda rows: [rows[0], rows[1].replace("0,2", "0,1", 1)] + rows[2:], "symmetric"),
])
def test_dgx1_malformed(tmp_path: Path, edit: Any, expect: str) -> None:
    rows = topo("dgx1_v100_nvlink_links.csv").read_text().strip().splitlines()
    path = broken(tmp_path, "links.csv", "\n".join(edit(rows)) + "\n")
    with pytest.raises(InputError, match=expect) as err:
        import_nvlink_link_matrix(path)
    assert err.value.source == str(path)


# ---- Volcano HyperNodes -----------------------------------------------------------------

def _eight_nodes() -> list[Node]:
    return [Node(name=f"node-{i}", gpu_type="H100-80", gpu_count=8,
                 labels={"rack": "c"} if i >= 6 else {}) for i in range(8)]


def test_hypernode_fixture_hops_follow_tiers() -> None:
    nodes = _eight_nodes()
    fabric = import_hypernodes(DATA / "hypernodes_two_tier.yaml", nodes=nodes)
    assert {s.name: s.tier for s in fabric.switches} == {
        "leaf-a": 1, "leaf-b": 1, "leaf-c": 1, "spine-0": 2}
    net = Cluster(name="c", nodes=nodes, fabric=fabric).network
    assert net.hop_count("node-0", "node-3") == 1      # exactMatch, one leaf
    assert net.hop_count("node-4", "node-5") == 1      # regexMatch
    assert net.hop_count("node-6", "node-7") == 1      # labelMatch
    assert net.hop_count("node-0", "node-4") == 3      # leaf-spine-leaf
    assert net.hop_count("node-5", "node-6") == 3
    assert net.radii == [1, 3]


@pytest.mark.parametrize("edit, expect", [
    (lambda d: d[0]["spec"]["members"][1].update(type="Rack"),
     r"documents\[0\]\.spec\.members\[1\]\.type: unknown member type 'Rack'"),
    (lambda d: d[3]["spec"].update(tier=1), "must be below 'spine-0'"),
    (lambda d: d[1]["spec"]["members"][0]["selector"]["regexMatch"].update(pattern="^node-[3-5]$"),
     "member of both 'leaf-a' and 'leaf-b'"),
    (lambda d: d[0]["spec"]["members"][0]["selector"]["exactMatch"].update(name="node-99"),
     "no node named 'node-99'"),
    (lambda d: d[0]["spec"]["members"][0]["selector"].update(regexMatch={"pattern": "x"}),
     "exactly one of"),
    (lambda d: d[2].update(kind="Node"), r"documents\[2\]\.kind: expected HyperNode"),
    (lambda d: d[3]["spec"].pop("tier"), r"spec\.tier: required"),
])
def test_hypernode_malformed(tmp_path: Path, edit: Any, expect: str) -> None:
    docs = list(yaml.safe_load_all((DATA / "hypernodes_two_tier.yaml").read_text()))
    edit(docs)
    path = broken(tmp_path, "bad_hypernodes.yaml", yaml.safe_dump_all(docs))
    with pytest.raises(InputError, match=expect) as err:
        import_hypernodes(path, nodes=_eight_nodes())
    assert err.value.source == str(path)


def test_hypernode_regex_needs_node_names_and_yaml_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="regexMatch needs the list of node names"):
        import_hypernodes(DATA / "hypernodes_two_tier.yaml")
    with pytest.raises(InputError, match="labelMatch needs the nodes' labels"):
        import_hypernodes(DATA / "hypernodes_two_tier.yaml", nodes=[f"node-{i}" for i in range(8)])
    with pytest.raises(InputError, match="malformed YAML: line"):
        import_hypernodes(broken(tmp_path, "h.yaml", "kind: HyperNode\n  spec: [\n"))


def _check(value: Any, schema: dict[str, Any], path: str, problems: list[str]) -> None:
    """The structural part of an OpenAPI v3 schema: types, required, enums, bounds, patterns;
    fields the schema does not declare are reported too (the API server would drop them)."""
    types = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool,
             "number": (int, float)}
    t = schema.get("type")
    if t and (not isinstance(value, types[t]) or (t == "integer" and isinstance(value, bool))):
        problems.append(f"{path}: expected {t}, got {type(value).__name__}")
        return
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{path}: {value!r} not in {schema['enum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 10**9):
            problems.append(f"{path}: length {len(value)} out of bounds")
        if "pattern" in schema and not re.search(schema["pattern"], value):
            problems.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if isinstance(value, int) and "minimum" in schema and value < schema["minimum"]:
        problems.append(f"{path}: {value} < {schema['minimum']}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            problems.append(f"{path}: fewer than {schema['minItems']} items")
        for i, item in enumerate(value):
            _check(item, schema.get("items", {}), f"{path}[{i}]", problems)
    if isinstance(value, dict):
        for req in schema.get("required", []):
            if req not in value:
                problems.append(f"{path}.{req}: required")
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if props is not None and key in props:
                _check(item, props[key], f"{path}.{key}", problems)
            elif isinstance(extra, dict):
                _check(item, extra, f"{path}.{key}", problems)
            elif props is not None:
                problems.append(f"{path}.{key}: not in the schema")


def _hypernode_schema() -> dict[str, Any]:
    path = SCHEMAS / "topology.volcano.sh_hypernodes.yaml"
    crd = yaml.safe_load(path.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    return version["schema"]["openAPIV3Schema"]


def test_schema_check_catches_problems() -> None:
    schema = _hypernode_schema()
    bad = {"apiVersion": "topology.volcano.sh/v1alpha1", "kind": "HyperNode",
           "metadata": {"name": "x"},
           "spec": {"tier": "1", "members": [{"type": "Rack", "selector": {
               "exactMatch": {"name": "Bad_Name"}}}], "colour": "blue"}}
    problems: list[str] = []
    _check(bad, schema, "", problems)
    assert any("spec.tier: expected integer" in p for p in problems)
    assert any("'Rack' not in" in p for p in problems)
    assert any("does not match" in p for p in problems)
    assert any("colour: not in the schema" in p for p in problems)


@pytest.mark.parametrize("generator, tiers", [
    (FabricGenerator(type="fat-tree-2", nodes_per_leaf=4, spines=2), {1: 3, 2: 1}),
    (FabricGenerator(type="fat-tree-3", nodes_per_leaf=2, leaves_per_pod=2), {1: 5, 2: 3, 3: 1}),
    (FabricGenerator(type="superpod-rail", nodes_per_su=3, sus_per_spine_group=2),
     {1: 4, 2: 2, 3: 1}),
])
def test_fabric_to_hypernodes_round_trip(tmp_path: Path, generator: FabricGenerator,
                                         tiers: dict[int, int]) -> None:
    nodes = [Node(name=f"gpu-{i:02d}", gpu_type="H100-80", gpu_count=8) for i in range(10)]
    cluster = Cluster(name="Cluster_A", nodes=nodes, fabric=FabricSpec(generator=generator))
    docs = fabric_to_hypernodes(cluster)
    assert Counter(d["spec"]["tier"] for d in docs) == tiers
    schema = _hypernode_schema()
    for doc in docs:
        problems: list[str] = []
        _check(doc, schema, doc["metadata"]["name"], problems)
        assert problems == []
    path = broken(tmp_path, "hn.yaml", dump_hypernodes(docs))
    back = Cluster(name="back", nodes=nodes, fabric=import_hypernodes(path, nodes=nodes))
    for a, b in combinations([n.name for n in nodes], 2):
        assert back.network.hop_count(a, b) == cluster.network.hop_count(a, b), (a, b)


def test_fabric_to_hypernodes_odd_node_names() -> None:
    nodes = [Node(name=n, gpu_type="A100-80", gpu_count=8) for n in ("GPU_Node.1", "node-2")]
    cluster = Cluster(name="c", nodes=nodes,
                      fabric=FabricSpec(generator=FabricGenerator(type="fat-tree-2")))
    docs = fabric_to_hypernodes(cluster)
    selectors = [m["selector"] for m in docs[0]["spec"]["members"]]
    assert {"regexMatch": {"pattern": r"^GPU_Node\.1$"}} in selectors  # not a DNS-1123 name
    fabric = hypernodes_to_fabric(docs, nodes=nodes)
    assert Cluster(name="c", nodes=nodes, fabric=fabric).network.hop_count(
        "GPU_Node.1", "node-2") == 1


# ---- Alibaba traces -----------------------------------------------------------------------

def _csv(name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(trace(name).read_text())))


def test_alibaba_2023_nodes() -> None:
    rows = _csv("alibaba_gpu2023_nodes.csv")
    cluster, extra = import_alibaba_gpu2023_nodes(trace("alibaba_gpu2023_nodes.csv"))
    assert cluster.gpu_count == sum(int(r["gpu"]) for r in rows) == 6212
    gpu_rows = [r for r in rows if int(r["gpu"]) > 0]
    assert len(cluster.nodes) == len(gpu_rows)
    assert cluster.labels[SKIPPED_LABEL] == str(len(rows) - len(gpu_rows)) == "310"
    # T4 and A10 are the catalog's datasheet rows; only what it lacks is declared
    assert {t.name for t in extra} == {"P100", "G2", "G3"}
    assert all(t in default_catalog() and t not in TRACE_GPU_TYPES for t in ("T4", "A10"))
    by_model = Counter[str]()
    for r in gpu_rows:
        by_model[r["model"]] += int(r["gpu"])
    by_type = Counter[str]()
    for n in cluster.nodes:
        by_type[n.gpu_type] += n.gpu_count
    assert by_type["V100-16"] == by_model["V100M16"] and by_type["V100-32"] == by_model["V100M32"]
    assert all(by_type[m] == by_model[m] for m in ("T4", "P100", "A10", "G2", "G3"))
    catalog = GPUCatalog(extra)
    assert all(n.gpu_type in catalog for n in cluster.nodes)
    # the cluster is usable as an instance once its extra types are declared
    inst = Instance.model_validate({"metadata": {"name": "ali"},
                                    "spec": {"gpuTypes": [t.to_doc() for t in extra],
                                             "clusters": [cluster.to_doc()]}})
    assert inst.clusters[0].gpu_count == 6212


def test_alibaba_generated_fabric_keeps_models_together() -> None:
    cluster, _ = import_alibaba_gpu2023_nodes(trace("alibaba_gpu2023_nodes.csv"))
    net = cluster.network
    assert net.kind == "fat-tree-2" and net.radii == [1, 3]
    for dom in net.domains(1).values():
        models = {cluster.node_by_name[n].labels["hyperplace.io/trace-gpu-model"] for n in dom}
        assert len(models) <= 2  # sorted by model: a leaf holds one model except at a boundary
    first, last = cluster.nodes[0].name, cluster.nodes[-1].name
    assert net.hop_count(first, last) == 3


def test_alibaba_pai2020_machines() -> None:
    rows = _csv("alibaba_pai2020_machine_spec.csv")
    cluster, extra = import_alibaba_pai2020_machines(trace("alibaba_pai2020_machine_spec.csv"))
    assert cluster.gpu_count == sum(int(r["cap_gpu"]) for r in rows) == 6742
    assert len(cluster.nodes) == sum(1 for r in rows if int(r["cap_gpu"]) > 0)
    assert cluster.labels[SKIPPED_LABEL] == str(sum(1 for r in rows if r["gpu_type"] == "CPU"))
    assert {t.name for t in extra} == {"P100", "MISC"}  # T4: the catalog's row
    assert {n.gpu_type for n in cluster.nodes} == {"T4", "P100", "MISC", "V100-16", "V100-32"}


@pytest.mark.parametrize("line, expect", [
    ("openb-node-9999,32000,262144,8,H9000", "line 3: node openb-node-9999: unknown GPU model 'H9000'"),
    ("openb-node-9999,32000,262144,eight,G2", "line 3: gpu='eight' is not a number"),
    ("openb-node-9999,32000", "line 3: expected 5 columns"),
])
def test_alibaba_nodes_malformed(tmp_path: Path, line: str, expect: str) -> None:
    head = "sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0001,96000,786432,8,G2\n"
    path = broken(tmp_path, "nodes.csv", head + line + "\n")
    with pytest.raises(InputError, match=expect) as err:
        import_alibaba_gpu2023_nodes(path)
    assert err.value.source == str(path)


def test_alibaba_missing_column(tmp_path: Path) -> None:
    path = broken(tmp_path, "spec.csv", "machine,gpu_type,cap_gpu\nm1,T4,2\n")
    with pytest.raises(InputError, match="missing column 'cap_cpu'"):
        import_alibaba_pai2020_machines(path)


def test_alibaba_pods_to_jobs() -> None:
    rows = _csv("alibaba_gpu2023_pods_sample.csv")
    whole = [r for r in rows if int(r["num_gpu"]) >= 1 and int(r["gpu_milli"]) == 1000]
    jobs = import_alibaba_gpu2023_pods(trace("alibaba_gpu2023_pods_sample.csv"))
    assert len(jobs) == len(whole) == 1454
    assert [j.name for j in jobs] == [r["name"] for r in whole]
    assert [j.total_gpus for j in jobs] == [int(r["num_gpu"]) for r in whole]
    levels = {"LS": 3, "Guaranteed": 3, "Burstable": 2, "BE": 1}
    assert [j.priority for j in jobs] == [levels[r["qos"]] for r in whole]
    for job, row in zip(jobs, whole):
        (unit,) = job.units()
        assert unit.gpus == int(row["num_gpu"])
        if not row["gpu_spec"]:
            assert unit.gpu_types is None
    dup = next(i for i, r in enumerate(whole) if r["gpu_spec"] == "V100M16|V100M32|V100M32")
    assert jobs[dup].units()[0].gpu_types == "V100-16|V100-32"
    t4 = next(i for i, r in enumerate(whole) if r["gpu_spec"] == "T4")
    assert GPUCatalog([*import_alibaba_gpu2023_nodes(trace("alibaba_gpu2023_nodes.csv"))[1]]
                      ).get("T4").matches(jobs[t4].units()[0].gpu_types or "")
    capped = import_alibaba_gpu2023_pods(trace("alibaba_gpu2023_pods_sample.csv"), limit=25)
    assert capped == jobs[:25]
    pending = import_alibaba_gpu2023_pods(trace("alibaba_gpu2023_pods_sample.csv"),
                                          phases={"Pending"})
    assert len(pending) == sum(1 for r in whole if r["pod_phase"] == "Pending")


def test_alibaba_pods_malformed(tmp_path: Path) -> None:
    head = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,"
            "deletion_time,scheduled_time,queue_s,duration_s\n")
    path = broken(tmp_path, "pods.csv", head + "p1,1000,1000,2,1000,,Gold,Running,1,2,1,0,1\n")
    with pytest.raises(InputError, match="line 2: unknown qos 'Gold'"):
        import_alibaba_gpu2023_pods(path)
    path = broken(tmp_path, "pods2.csv", head + "p1,1000,1000,2,1000,X1,LS,Running,1,2,1,0,1\n")
    with pytest.raises(InputError, match="unknown GPU model 'X1'"):
        import_alibaba_gpu2023_pods(path)


# ---- bundled copies -------------------------------------------------------------------------

def test_every_bundled_file_has_provenance() -> None:
    text = bundled("", "PROVENANCE.md").read_text()
    for category in ("topology", "traces"):
        for f in bundled(category, "").iterdir():
            assert f.name in text, f"{category}/{f.name} missing from PROVENANCE.md"


def _recorded_sha256() -> dict[str, str]:
    """tests/data/shared_data.sha256: the originals' checksums (``sha256sum`` lines)."""
    lines = (Path(__file__).parents[1] / "data" / "shared_data.sha256").read_text().splitlines()
    return {name: digest for digest, name in
            (line.split("  ", 1) for line in lines if line and not line.startswith("#"))}


def test_bundled_copies_are_unmodified() -> None:
    import hashlib

    recorded = _recorded_sha256()
    copies = {f"{category}/{f.name}": f for category in ("topology", "traces")
              for f in bundled(category, "").iterdir()}
    assert set(copies) == set(recorded)  # every bundled copy has its original's checksum
    for name, f in copies.items():
        assert hashlib.sha256(f.read_bytes()).hexdigest() == recorded[name], name
    shared = SHARED / "data"
    if shared.exists():  # beside a checkout with shared/: the record matches the originals
        for name, digest in recorded.items():
            assert hashlib.sha256((shared / name).read_bytes()).hexdigest() == digest, name
