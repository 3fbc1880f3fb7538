"""``hyperplace split`` through a small Typer app that mounts it, as cli.py does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from hyperplace import split_cli

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
        (["--model", "/no/such/model.yaml", "--stage", "B200x8@a"], "file not found"),
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
