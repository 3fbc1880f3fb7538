"""``nvidia-smi topo -m`` as current drivers print it, from real public outputs
(tests/data/nvidia-smi, provenance line in each file): the empty ``GPU NUMA ID`` cell (one
more cell than headers), a ``$ nvidia-smi topo -m`` prompt and other text before the matrix,
the header's terminal styling, space-aligned pastes, product names printed beside the matrix,
bond and storage NICs left out of the compute bandwidth, per-file --gpu-type, stdin."""

from pathlib import Path

import pytest

from cli_run import run_main
from hyperplace.errors import InputError
from hyperplace.instances.importers import import_nvidia_smi_topo
from hyperplace.instances.importing import import_cluster

SMI = Path(__file__).parents[1] / "data" / "nvidia-smi"
B300 = SMI / "b300-sxm6-nv18-sglang-26039.txt"
H800 = SMI / "h800-nv8-sglang-28424.txt"
H100 = SMI / "dgx-h100-nv18-12nic-talos.txt"


def test_current_layout_with_empty_numa_cell_and_header_styling():
    node = import_nvidia_smi_topo(B300)
    assert node.gpu_type == "B300"  # "GPU 0..7: NVIDIA B300 SXM6 AC" printed beside it
    assert node.gpu_count == 8 and len(node.nvlink_pairs) == 28
    assert {p.gigabytes_per_second for p in node.nvlink_pairs} == {1800.0}  # NV18 x 100 GB/s (NVLink 5)
    assert [n.name for n in node.nics] == [f"mlx5_{i}" for i in range(10, 18)]
    assert [n.gpus for n in node.nics] == [[g] for g in range(8)]
    assert node.labels["hyperplace.io/other-nics"] == "mlx5_bond_0"
    assert "gpu-type" not in node.labels.get("hyperplace.io/assumed", "")


def test_space_aligned_h800_nv8_bond_is_not_compute():
    node = import_nvidia_smi_topo(H800)
    assert node.gpu_type == "H800"
    assert {p.gigabytes_per_second for p in node.nvlink_pairs} == {400.0}  # NV8 x 50
    assert len(node.nics) == 8 and "mlx5_bond_0" not in [n.name for n in node.nics]
    # the per-GPU compute bandwidth counts the 8 rails only
    assert node.nic_gbps_per_gpu == pytest.approx(sum(n.gbps for n in node.nics) / 8)
    assert len(node.nics) * node.nics[0].gbps / 8 == node.nic_gbps_per_gpu


def test_storage_nics_left_out_and_guess_is_labelled():
    node = import_nvidia_smi_topo(H100)
    assert node.gpu_type == "H100-80"  # NV18 guessed, and said so
    assert node.labels["hyperplace.io/assumed"].startswith("gpu-type")
    assert [n.name for n in node.nics] == ["NIC0", "NIC3", "NIC4", "NIC5", "NIC6", "NIC9",
                                           "NIC10", "NIC11"]
    assert node.labels["hyperplace.io/other-nics"] == "NIC1,NIC2,NIC7,NIC8"
    assert import_nvidia_smi_topo(H100, gpu_type="H200").gpu_type == "H200-141"


def test_prompt_line_before_the_matrix(tmp_path):
    p = tmp_path / "topo.txt"
    p.write_text("$ nvidia-smi topo -m\n" + H100.read_text())
    assert import_nvidia_smi_topo(p).gpu_count == 8


def test_short_row_is_one_line_with_the_line_number(tmp_path):
    lines = H100.read_text().splitlines()
    lines[3] = "\t".join(lines[3].split("\t")[:12])
    p = tmp_path / "cut.txt"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as e:
        import_nvidia_smi_topo(p)
    assert "line 4: row GPU1 has 11 columns" in e.value.message


def test_per_file_gpu_type_and_no_hint_when_given():
    text, summary = import_cluster("nvidia-smi", [str(H100), str(H800)],
                                   gpu_type=["H200", "H800"])
    assert "2 nodes, 16 GPUs (H200-141, H800)" in summary
    assert "give --gpu-type" not in summary
    with pytest.raises(InputError) as e:
        import_cluster("nvidia-smi", [str(H100), str(H800), str(B300)], gpu_type=["H200", "H800"])
    assert e.value.path == "--gpu-type"


def test_stdin(capsys, monkeypatch):
    import io
    import sys

    import hyperplace.io as hio

    monkeypatch.setattr(hio, "_stdin_data", None)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(H800.read_bytes())))
    code = run_main(["instances", "import", "--from", "nvidia-smi", "-"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "gpuType: H800" in out.out and "name: stdin" in out.out


def test_nccl_files_without_gpus_take_count_and_type_per_file(tmp_path):
    """AWS g5.48xl and p5 NCCL files list no <gpu>: --gpu-count and --gpu-type per file."""
    from hyperplace.instances.importers import bundled

    g5 = Path(__file__).parents[1] / "data" / "nccl" / "aws_g5.48xl-topo.xml"
    with pytest.raises(InputError) as e:
        import_cluster("nccl-xml", [str(g5)])
    assert "give --gpu-count" in e.value.message
    p5 = tmp_path / "p5.xml"
    p5.write_bytes(bundled("topology", "aws_p5.48xl-topo.xml").read_bytes())
    text, summary = import_cluster("nccl-xml", [str(g5), str(p5)], gpu_count=[8, 8],
                                   gpu_type=["A10G", "H100"])
    assert "2 nodes, 16 GPUs (A10, H100-80)" in summary
    assert "gpuType: A10" in text and "nvlink: pcie" in text  # A10G: PCIe only
