"""``hyperplace instances ...`` and ``hyperplace validate``: output, exit codes, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hyperplace.cli import app
from hyperplace.instances import BUNDLED, load_instance

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

INSTANCE = """\
apiVersion: hyperplace/v1
kind: Instance
metadata: {name: tiny}
spec:
  clusters:
    - name: c
      nodes:
        - {name: n0, gpuType: H100-80, gpuCount: 8}
        - {name: n1, gpuType: H100-80, gpuCount: 8}
      fabric:
        switches: [{name: leaf0}]
        links:
          - {a: n0, b: leaf0, gbps: 400}
          - {a: n1, b: leaf0, gbps: 400}
"""

# A valid request no 8-GPU node can ever satisfy: validate must accept it.
IMPOSSIBLE_JOB = """\
apiVersion: ai.example.com/v1alpha1
kind: FoundationModelTrainingJob
metadata: {name: tp16-on-one-node}
spec:
  model: llama3-120b
  resourceGroups:
    - name: tp
      type: TensorParallel
      gpusPerGroup: 16
      gpuRequirements: {acceleratorType: H100, minNVLinkBandwidthGbpsPerPair: 900}
      interNodeConnectivity: {maxHopCount: 0}
---
apiVersion: ai.example.com/v1alpha1
kind: FoundationModelTrainingJob
metadata: {name: wants-mi300x}
spec:
  model: llama3-70b
  resourceGroups:
    - {name: dp, type: DataParallel, gpusPerGroup: 8,
       gpuRequirements: {acceleratorType: MI300X}}
"""

HYPERNODE = """\
apiVersion: topology.volcano.sh/v1alpha1
kind: HyperNode
metadata: {name: s0}
spec:
  tier: 1
  members:
    - type: Node
      selector:
        exactMatch: {name: n0}
"""

# (name, file text, expected "error: FILE: <this>" prefix after the file name)
BAD_INPUTS = [
    ("malformed", "kind: Instance\nspec: [unclosed\n", "malformed YAML: line 3"),
    ("empty", "   \n", "file is empty"),
    ("unknown-kind", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
     "kind: unknown kind 'ConfigMap'"),
    ("unknown-field", INSTANCE.replace("metadata: {name: tiny}",
                                       "metadata: {name: tiny}\ncolour: blue"),
     "colour: unknown field"),
    ("wrong-type", INSTANCE.replace("gpuCount: 8}\n        - {name: n1",
                                    "gpuCount: eight}\n        - {name: n1"),
     "spec.clusters[0].nodes[0].gpuCount: Input should be a valid integer"),
    ("negative-count", INSTANCE.replace("gpuCount: 8}\n        - {name: n1",
                                        "gpuCount: -8}\n        - {name: n1"),
     "spec.clusters[0].nodes[0].gpuCount: Input should be greater than 0"),
    ("unknown-gpu", INSTANCE.replace("n0, gpuType: H100-80", "n0, gpuType: H900"),
     "spec.clusters[0].nodes[0].gpuType: unknown GPU type 'H900'"),
    ("missing-switch", INSTANCE.replace("{a: n1, b: leaf0", "{a: n1, b: leaf9"),
     "spec.clusters[0].fabric.links[1].b: 'leaf9' is neither a switch nor a node"),
    ("negative-bandwidth", INSTANCE.replace("{a: n1, b: leaf0, gbps: 400}",
                                            "{a: n1, b: leaf0, gbps: -400}"),
     "spec.clusters[0].fabric.links[1].gbps: Input should be greater than 0"),
    ("bad-job-document", IMPOSSIBLE_JOB.replace("gpusPerGroup: 8", "gpusPerGroup: 0"),
     "document 2: spec.resourceGroups[0].gpusPerGroup: Input should be greater than 0"),
    ("bad-hypernode", HYPERNODE.replace("tier: 1", "tier: top"),
     "documents[0].spec.tier: required, an integer"),
]


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(("name", "text", "problem"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, name: str, text: str,
                                          problem: str) -> None:
    path = _file(tmp_path, name, text)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {path}: {problem}"), lines[0]
    assert "Traceback" not in result.stderr


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = runner.invoke(app, ["validate", str(missing)])
    assert (result.exit_code, result.stderr) == (2, f"error: {missing}: no such file\n")
    result = runner.invoke(app, ["instances", "show", str(missing)])
    assert result.exit_code == 2 and result.stderr.startswith(f"error: {missing}: no such file")


def test_validate_stops_at_the_first_bad_file(tmp_path: Path, seed_job_path: Path) -> None:
    good = _file(tmp_path, "good", INSTANCE)
    bad = _file(tmp_path, "bad", "")
    result = runner.invoke(app, ["validate", str(good), str(bad), str(seed_job_path)])
    assert result.exit_code == 2
    assert result.stdout.splitlines() == [
        f"{good}: ok (Instance tiny, 1 cluster(s), 2 nodes, 16 GPUs (16 free), 0 pending jobs)"]


def test_validate_accepts_every_kind_and_impossible_requests(tmp_path: Path,
                                                             seed_job_path: Path) -> None:
    cluster = INSTANCE.replace("kind: Instance", "kind: Cluster").replace(
        "  clusters:\n    - name: c\n", "").replace("\n      ", "\n  ")
    files = [_file(tmp_path, "instance", INSTANCE), _file(tmp_path, "cluster", cluster),
             _file(tmp_path, "impossible", IMPOSSIBLE_JOB), seed_job_path,
             _file(tmp_path, "hypernode", HYPERNODE)]
    result = runner.invoke(app, ["validate", *map(str, files)])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split(": ok (")[0] for line in lines] == list(map(str, files))
    assert "Cluster tiny, 2 nodes, 16 GPUs (16 free)" in lines[1]
    assert "2 FoundationModelTrainingJobs, 24 GPUs requested" in lines[2]
    assert "1 FoundationModelTrainingJob, 160 GPUs requested" in lines[3]
    assert "1 HyperNode, tier 1" in lines[4]


def test_list_shows_every_bundled_instance() -> None:
    result = runner.invoke(app, ["instances", "list"])
    assert result.exit_code == 0, result.output
    for name in BUNDLED:
        if (ROOT / "hyperplace/data" / f"{name}.yaml").is_file():
            assert name in result.stdout


def test_show_prints_state_tiers_and_fragmentation() -> None:
    result = runner.invoke(app, ["instances", "show", "superpod-h100-4su", "--top", "2"])
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "fragmentation" in out and "H100-80" in out and "superpod-rail" in out
    assert "top 2 of 4 (--all for every one)" in out
    every = runner.invoke(app, ["instances", "show", "superpod-h100-4su", "--all"]).stdout
    assert all(f"t1:su0{i}-leaf0" in every for i in range(4))
    data = json.loads(runner.invoke(app, ["instances", "show", "dgx1-v100", "--json"]).stdout)
    assert data["largestFreeNvlinkSet"] == {"V100-32": 4}


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_export_loads_back_identically(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"mixed.{fmt}"
    result = runner.invoke(app, ["instances", "export", "mixed-a100-h100", "--format", fmt,
                                 "--output", str(out)])
    assert result.exit_code == 0, result.output
    assert load_instance(str(out)) == load_instance("mixed-a100-h100")
    stdout = runner.invoke(app, ["instances", "export", "mixed-a100-h100", "-f", fmt]).stdout
    assert stdout == out.read_text()


def test_export_unknown_format() -> None:
    result = runner.invoke(app, ["instances", "export", "dgx1-v100", "--format", "xml"])
    assert result.exit_code == 2 and "'xml' is not one of" in result.stderr


def test_generate_writes_the_same_file_for_the_same_seed(tmp_path: Path) -> None:
    paths = [tmp_path / "a.yaml", tmp_path / "b.yaml"]
    for path in paths:
        result = runner.invoke(app, ["instances", "generate", "--gpus", "128", "--jobs", "20",
                                     "--gpu-types", "H100,A100-80", "--load", "0.4",
                                     "--seed", "5", "-o", str(path)])
        assert result.exit_code == 0, result.output
        assert "16 nodes, 128 GPUs" in result.stdout
    assert paths[0].read_bytes() == paths[1].read_bytes()
    inst = load_instance(str(paths[0]))
    assert len(inst.jobs) == 20
    assert sum(len(n.allocated) for c in inst.clusters for n in c.nodes) == round(0.4 * 128)


def test_generate_names_the_held_share_apart_from_the_fragmentation(tmp_path: Path) -> None:
    """--load is the share held by running jobs (the README's "fragmentation 0.6" rows);
    the printed fragmentation is instances show's (free GPUs off whole free nodes): both
    printed and named, so that --load 0.6 no longer reads as "fragmentation 1.00"."""
    for share, held, off in (("0.6", "0.60", "1.00"), ("0.1", "0.10", "0.12")):
        result = runner.invoke(app, ["instances", "generate", "--gpus", "4096", "--jobs", "4",
                                     "--load", share, "--seed", "1",
                                     "-o", str(tmp_path / "g.json")])
        assert result.exit_code == 0, result.output
        assert f"({held} held by running jobs (--load)," in result.stdout
        assert f"of them {off} off whole free nodes (instances show's fragmentation)" in \
            result.stdout
        assert "fragmentation 1.00" not in result.stdout


def test_generate_rejects_an_unknown_gpu_type(tmp_path: Path) -> None:
    result = runner.invoke(app, ["instances", "generate", "--gpus", "64", "--jobs", "1",
                                 "--gpu-types", "H100,TPUv5", "-o", str(tmp_path / "x.yaml")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: gpu_types[1]: unknown GPU type 'TPUv5'")


def test_real_process_exit_code_and_no_traceback(tmp_path: Path) -> None:
    """The installed console script, not CliRunner: what a user's shell sees."""
    bad = _file(tmp_path, "bad", INSTANCE.replace("gbps: 400}\n          - {a: n1",
                                                  "gbps: -1}\n          - {a: n1"))
    exe = ROOT / ".venv/bin/hyperplace"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "hyperplace.cli"]
    proc = subprocess.run([*cmd, "validate", str(bad)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr == (f"error: {bad}: spec.clusters[0].fabric.links[0].gbps: "
                           "Input should be greater than 0\n")
    proc = subprocess.run([*cmd, "instances", "show", str(tmp_path / "missing.yaml")],
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr.count("\n")) == (2, 1)
    assert "Traceback" not in proc.stderr


def test_validate_accepts_hypernodes_with_regex_selectors_alone() -> None:
    """A HyperNode file is checked on its own: regex/label selectors resolve against a cluster
    later, so validate must not demand a node list the user cannot give it."""
    from hyperplace.cli import app as cli_app

    path = Path(__file__).parents[1] / "data" / "hypernodes_two_tier.yaml"
    result = CliRunner().invoke(cli_app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "HyperNode" in result.output
