"""``hyperplace split`` through a small Typer app that mounts it, as cli.py does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from hyperplace.commands import split as split_cli

root = typer.Typer()


@root.command()
def noop() -> None:
    """A sibling command, so ``split`` is mounted as a real sub-command group."""


root.add_typer(split_cli.app, name="split")
runner = CliRunner()


def run(*args: str):
    return runner.invoke(root, ["split", *args])


def test_seed_instance_is_six_two_with_symmetric_idle() -> None:
    res = run("--instance", "seed-beijing-shanghai", "--format", "json")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    layers = {s["gpuType"]: s["numLayers"] for s in plan["stages"]}
    assert layers == {"B200": 6, "H100-80": 2}
    assert plan["symmetric"]["layersPerStage"] == [4, 4]
    assert plan["symmetric"]["ratioToOptimal"] > 1.1
    assert max(plan["symmetric"]["idleS"]) > 0


def test_table_output_shows_baselines_and_idle() -> None:
    res = run("--model-name", "seed-8layer", "--stage", "B200x8@beijing",
              "--stage", "H100x8@shanghai", "--link", "beijing-shanghai=100Gbps,20ms")
    assert res.exit_code == 0, res.output
    assert "symmetric split 4/4" in res.output
    assert "symmetric idle per micro-batch" in res.output
    assert "0-5" in res.output and "6-7" in res.output


def test_yaml_model_file_and_solvers(tmp_path: Path) -> None:
    f = tmp_path / "m.yaml"
    f.write_text("apiVersion: hyperplace/v1\nkind: ModelSpec\nmetadata: {name: tiny}\n"
                 "spec: {numLayers: 12, hiddenSize: 4096, numHeads: 32, seqLength: 2048,"
                 " vocabSize: 32000}\n")
    outs = []
    for solver in ("dp", "milp", "cpsat"):
        res = run("--model", str(f), "--stage", "A100x8@x", "--stage", "H100x8@x:tp=4",
                  "--solver", solver, "--format", "json", "--fixed-order")
        assert res.exit_code == 0, res.output
        outs.append(json.loads(res.stdout))
    assert len({round(o["bottleneckS"], 9) for o in outs}) == 1
    assert outs[0]["stages"][1]["tp"] == 4 and outs[0]["stages"][1]["dp"] == 2


def test_profile_model() -> None:
    res = run("--profile", "GPT-Neo-2.7:mb=1", "--stage", "A100-40x1@eth",
              "--stage", "GH200x1@cscs", "--format", "yaml", "--recompute")
    assert res.exit_code == 0, res.output
    assert "feasible: true" in res.stdout


def test_infeasible_says_which_stage_and_by_how_much() -> None:
    res = run("--model-name", "llama3-70b", "--stage", "A100-40x1@a", "--stage", "A100-40x1@b")
    assert res.exit_code == 1
    assert "GB over" in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--model-name", "seed-8layer", "--stage", "B200x0@a"], "0 GPUs"),
        (["--model-name", "seed-8layer", "--stage", "Z900x8@a"], "unknown GPU type 'Z900'"),
        (["--model-name", "seed-8layer", "--stage", "B200@a"], "malformed stage"),
        (["--model-name", "seed-8layer", "--stage", "B200x8@a:tp=3"], "does not divide"),
        (["--model", "/no/such/model.yaml", "--stage", "B200x8@a"], "no such file"),
        (["--model-name", "gpt5", "--stage", "B200x8@a"], "unknown model preset"),
        (["--profile", "BERT", "--stage", "B200x8@a"], "unknown profile"),
        (["--model-name", "seed-8layer", "--stage", "B200x8@a", "--link", "a=fast"],
         "malformed link"),
        (["--model-name", "seed-8layer", "--stage", "B200x8@a", "--stage", "H100x8@b",
          "--link", "a-b=1Qbps"], "malformed bandwidth"),
        (["--model-name", "seed-8layer"], "no stages"),
        (["--model-name", "seed-8layer"] + ["--stage", "B200x8@a"] * 9, "only 8 layers"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    res = run(*args)
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_zero_layers_model_file(tmp_path: Path) -> None:
    f = tmp_path / "zero.yaml"
    f.write_text("kind: ModelSpec\nmetadata: {name: z}\n"
                 "spec: {numLayers: 0, hiddenSize: 64, numHeads: 2, seqLength: 16}\n")
    res = run("--model", str(f), "--stage", "A100x8@x")
    assert res.exit_code == 2
    assert "numLayers" in res.output and "Traceback" not in res.output


def _model_file(tmp_path: Path, spec: str, name: str = "m.yaml") -> str:
    f = tmp_path / name
    f.write_text("apiVersion: hyperplace/v1\nkind: ModelSpec\nmetadata: {name: t}\n" + spec)
    return str(f)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # A model validator's field path goes into the path, without pydantic's prefix.
        ("spec: {numLayers: 4, hiddenSize: 64, numHeads: 2, seqLength: 16,"
         " layerOverrides: [{index: 1}, {index: 7}]}\n",
         "spec.layerOverrides[1].index: 7 is outside 0..3"),
        ("spec: {numLayers: 2, hiddenSize: 64, numHeads: 2, seqLength: 16,"
         " layers: [{name: a, flops: 1, params: 1}]}\n",
         "spec.layers: numLayers is 2 but 1 explicit layers are given"),
        # Counts are integers, not booleans (true was read as one layer).
        ("spec: {numLayers: true, hiddenSize: 64, numHeads: 2, seqLength: 16}\n",
         "spec.numLayers: Input should be a valid integer"),
        # A measured time under a name no stage can match would be ignored silently.
        ("spec: {numLayers: 2, hiddenSize: 64, numHeads: 2, seqLength: 16, layerOverrides:"
         " [{index: 1, measured: [{gpuType: H900, fwdS: 0.1, bwdS: 0.2}]}]}\n",
         "spec.layerOverrides[0].measured[0].gpuType: unknown GPU type 'H900'"),
        ("spec: {numLayers: 2, hiddenSize: 64, numHeads: 2, seqLength: [16\n",
         "malformed YAML: line 5, column 1"),
        ("spec: 3\n", "spec: expected a mapping"),
    ],
)
def test_model_file_errors_name_the_field(tmp_path: Path, spec: str, expected: str) -> None:
    path = _model_file(tmp_path, spec)
    res = run("--model", path, "--stage", "H100x8@a")
    assert res.exit_code == 2, res.output
    assert res.output.strip().startswith(f"error: {path}: {expected}"), res.output
    assert "Value error" not in res.output
    assert len(res.output.strip().splitlines()) == 1


def test_model_file_is_a_directory_or_empty(tmp_path: Path) -> None:
    res = run("--model", str(tmp_path), "--stage", "H100x8@a")
    assert res.exit_code == 2 and "is a directory" in res.output
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    res = run("--model", str(empty), "--stage", "H100x8@a")
    assert res.exit_code == 2 and res.output.strip() == f"error: {empty}: file is empty"


def test_measured_time_under_an_alias_is_used(tmp_path: Path) -> None:
    """``H100`` in a file is the catalog's ``H100-80``: the measured time must price the stage."""
    path = _model_file(tmp_path, "spec: {numLayers: 2, hiddenSize: 1024, numHeads: 16,"
                       " seqLength: 1024, layerOverrides: [{index: 1, measured:"
                       " [{gpuType: H100, tp: 8, fwdS: 0.5, bwdS: 1.0}]}]}\n")
    res = run("--model", path, "--stage", "H100x8@a", "--format", "json")
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["stages"][0]["computeS"] > 1.5  # the measured 1.5 s plus a formula layer


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--microbatches", "0"], "error: --microbatches: must be at least 1, got 0"),
        (["--zero", "4"], "error: --zero: must be 0, 1, 2 or 3, got 4"),
        (["--time-limit", "nan"],
         "error: --time-limit: not a number; give seconds, e.g. 10"),
        (["--time-limit", "0"],
         "error: --time-limit: must be a positive, finite number of seconds, got 0.0"),
        (["--profile", "OPT-350"],
         "error: give exactly one of --model, --model-name or --profile "
         "(got --model-name and --profile)"),
        (["--stage", "H100x8@b", "--link", "a-c=10Gbps"],
         "error: --link: link 'a-c=10Gbps': 'c' is neither a stage nor a cluster "
         "(known: B200x8@a, H100x8@b, a, b)"),
        (["--stage", "H100x8@b:name=x", "--stage", "A100x8@c:name=x"],
         "error: --stage: stage name 'x' is given to two stages"),
        (["--stage", "H100x8@b:tp=0"],
         "error: --stage: stage 'H100x8@b:tp=0': tp: Input should be greater than 0"),
        (["--stage", "H100x99999999999@b"],
         "error: --stage: stage 'H100x99999999999@b' has more than 131,072 GPUs"),
    ],
)
def test_option_errors_say_the_option_once(args: list[str], expected: str) -> None:
    res = run("--model-name", "seed-8layer", "--stage", "B200x8@a", *args)
    assert res.exit_code == 2, res.output
    assert res.output.strip() == expected


def test_profile_and_micro_batch_options_must_agree() -> None:
    res = run("--profile", "OPT-350:mb=2", "--micro-batch-size", "4", "--stage", "A100x8@a")
    assert res.exit_code == 2
    assert res.output.strip() == ("error: --profile: profile 'OPT-350:mb=2' says micro-batch 2 "
                                  "but --micro-batch-size is 4")
    res = run("--profile", "OPT-350", "--micro-batch-size", "2", "--stage", "A100x8@a",
              "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["model"] == "OPT-350:mb=2"


def test_more_stages_than_layers_names_the_option(tmp_path: Path) -> None:
    path = _model_file(tmp_path, "spec: {numLayers: 1, hiddenSize: 64, numHeads: 2,"
                       " seqLength: 16}\n")
    res = run("--model", path, "--stage", "A100x8@a", "--stage", "H100x8@b")
    assert res.exit_code == 2
    assert res.output.strip() == ("error: --stage: 2 stages but the model has only 1 layer: "
                                  "every stage needs a layer (mark some stages :optional)")
    res = run("--model", path, "--stage", "A100x8@a", "--stage", "H100x8@b:optional",
              "--format", "json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["order"] == ["A100x8@a"]
