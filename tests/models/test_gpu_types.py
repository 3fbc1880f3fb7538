"""The GPU catalog: every type the importers meet, with datasheet figures, a source, and the
product strings tools print (GPU Feature Discovery's ``nvidia.com/gpu.product``, nvidia-smi,
the PCI ID repository) as aliases."""

import pytest

from hyperplace.costmodel.hardware import intra_node_bandwidth
from hyperplace.instances.importers import bundled, import_nccl_topology
from hyperplace.instances.importers.nccl_xml import PCI_DEVICE_TYPES, sm_families
from hyperplace.models.gpu import GPUCatalog, builtin_catalog, compute_capability

# (catalog name, dense BF16 TFLOPS, HBM GB, HBM TB/s, NVLink GB/s per GPU) from datasheets
DATASHEET = [
    ("A10", 125, 24, 0.6, 0), ("L4", 121, 24, 0.3, 0), ("L40S", 362, 48, 0.864, 0),
    ("T4", 65, 16, 0.32, 0), ("GH200-96", 989, 96, 4.0, 900), ("GH200-144", 989, 144, 4.9, 900),
    ("H20", 148, 96, 4.0, 900), ("GB200", 2500, 186, 8.0, 1800), ("GB300", 2500, 288, 8.0, 1800),
    ("MI325X", 1307, 256, 6.0, 896), ("MI355X", 2500, 288, 8.0, 1075),
    ("H100-80", 989, 80, 3.35, 900), ("H200-141", 989, 141, 4.8, 900), ("H800", 989, 80, 3.35, 400),
    ("B300", 2250, 288, 8.0, 1800),
]


@pytest.mark.parametrize("name,tflops,hbm,tbs,nvlink", DATASHEET)
def test_datasheet_figures_and_source(name, tflops, hbm, tbs, nvlink):
    t = builtin_catalog()[name]
    assert (t.bf16_tflops, t.hbm_gb, t.hbm_tb_s, t.nvlink_gbps) == (tflops, hbm, tbs, nvlink)
    assert t.source.startswith("https://"), t.source
    assert t.vendor == ("amd" if name.startswith("MI") else "nvidia")


# product strings as GFD labels, nvidia-smi and NVML print them
PRODUCTS = {
    "NVIDIA-H100-80GB-HBM3": "H100-80", "NVIDIA H100 80GB HBM3": "H100-80",
    "NVIDIA-H100-80GB-HBM3-SHARED": "H100-80", "NVIDIA-A100-SXM4-80GB": "A100-80",
    "NVIDIA-A100-SXM4-40GB": "A100-40", "NVIDIA-GB200": "GB200", "NVIDIA-GB300": "GB300",
    "NVIDIA-H200": "H200-141", "NVIDIA H20": "H20", "NVIDIA-A10G": "A10", "NVIDIA A10": "A10",
    "NVIDIA-L4": "L4", "NVIDIA-L40S": "L40S", "Tesla-T4": "T4", "Tesla T4": "T4",
    "Tesla-V100-SXM2-32GB": "V100-32", "NVIDIA-GH200-480GB": "GH200-96",
    "NVIDIA-GH200-144G-HBM3e": "GH200-144", "AMD_Instinct_MI300X_OAM": "MI300X",
    "mi325x": "MI325X", "MI355X": "MI355X", "NVIDIA-B200": "B200", "NVIDIA H800": "H800",
    "NVIDIA B300 SXM6 AC": "B300",
}


@pytest.mark.parametrize("product,name", sorted(PRODUCTS.items()))
def test_vendor_product_strings_are_aliases(product, name):
    assert GPUCatalog().get(product).name == name


def test_unknown_product_is_not_guessed():
    assert GPUCatalog().find("NVIDIA-RTX-PRO-6000") is None
    assert GPUCatalog().find("H100-81") is None


def test_compute_capability_groups_hopper_and_blackwell():
    cat = GPUCatalog()
    assert sm_families(90, cat) == {"H100", "H200", "GH200", "H20", "H800"}
    assert sm_families(100, cat) == {"B200", "GB200"}
    assert compute_capability("MI300X") is None
    assert all(t in cat for t in PCI_DEVICE_TYPES.values())


def test_pcie_only_types_reduce_over_pcie():
    """L4 has no NVLink: a TP all-reduce runs at PCIe speed, not zero."""
    bw, label = intra_node_bandwidth(GPUCatalog().get("L4"), 2, 64e6)
    assert bw > 0 and "PCIe" in label


def test_p4d_efa_is_four_times_100_gbps():
    node = import_nccl_topology(bundled("topology", "aws_p4d-24xl-topo.xml"))
    assert [n.gbps for n in node.nics] == [100.0] * 4
    assert "nic-speed" not in node.labels.get("hyperplace.io/assumed", "")
