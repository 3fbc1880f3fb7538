"""``hyperplace instances import``: a Cluster file from each format real clusters use, which
``validate`` accepts and ``solve`` can place jobs on."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_run import run_main

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "hyperplace" / "data"

CASES = [
    (["--from", "nvidia-smi", str(ROOT / "examples" / "nvidia-smi-topo.txt"), "--count", "4"],
     "4 nodes, 32 GPUs (A100-40), fabric fat-tree-2 (assumed, not in the file: gpu-type"),
    (["--from", "nccl-xml", str(DATA / "topology" / "azure_ndv4-topo.xml"), "--gpu-type",
      "A100-80"], "1 node, 8 GPUs (A100-80)"),
    (["--from", "dgx1", str(DATA / "topology" / "dgx1_v100_nvlink_links.csv"), "--count", "2"],
     "2 nodes, 16 GPUs (V100-32)"),
    (["--from", "hypernode", str(ROOT / "examples" / "hypernodes.yaml"), "--gpu-type", "H100"],
     "8 nodes, 64 GPUs (H100-80), fabric explicit"),
    (["--from", "alibaba", str(DATA / "traces" / "alibaba_pai2020_machine_spec.csv")],
     "GPUs (MISC, P100, T4, V100-16, V100-32)"),
]


@pytest.mark.parametrize("args,summary", CASES, ids=[c[0][1] for c in CASES])
def test_import_writes_a_cluster_file_that_validates(tmp_path: Path, capsys, args: list[str],
                                                      summary: str) -> None:
    out = tmp_path / "cluster.yaml"
    assert run_main(["instances", "import", *args, "-o", str(out)]) == 0
    _, err = capsys.readouterr()
    assert summary in err
    assert run_main(["validate", str(out)]) == 0
    assert "ok (Cluster" in capsys.readouterr().out


def test_imported_nodes_take_a_queue(tmp_path: Path, capsys) -> None:
    out = tmp_path / "lab.yaml"
    assert run_main(["instances", "import", "--from", "nvidia-smi",
                     str(ROOT / "examples" / "nvidia-smi-topo.txt"), "--count", "4",
                     "-o", str(out)]) == 0
    assert run_main(["solve", "--cluster", str(out), "--jobs",
                     str(ROOT / "examples" / "queue" / "bert-finetune.yaml"), "--budget", "10",
                     "-f", "json"]) == 0
    assert '"job": "bert-finetune"' in capsys.readouterr().out


@pytest.mark.parametrize("args,needle", [
    (["--from", "nccl-xml", str(DATA / "topology" / "azure_ndv4-topo.xml")], "give --gpu-type"),
    (["--from", "hypernode", str(ROOT / "tests" / "data" / "hypernodes_two_tier.yaml"),
      "--gpu-type", "H100"], "needs the nodes themselves: give --nodes-from"),
    (["--from", "hypernode", str(ROOT / "examples" / "hypernodes.yaml")], "--gpu-type"),
    (["--from", "alibaba", str(ROOT / "examples" / "nvidia-smi-topo.txt")],
     "not an Alibaba machine list"),
    (["--from", "nvidia-smi", str(ROOT / "examples" / "nvidia-smi-topo.txt"), "--count",
      "200000"], "more than the limit of 1,048,576"),
    (["--from", "tpu", "x"], "--from"),
], ids=["nccl-no-type", "hypernode-regex", "hypernode-no-type", "alibaba-wrong", "count",
        "format"])
def test_import_errors_are_one_line(tmp_path: Path, capsys, args: list[str],
                                    needle: str) -> None:
    out = tmp_path / "x.yaml"
    assert run_main(["instances", "import", *args, "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and needle in err, err
    assert not out.exists()
