"""Every command of the README's "Using it" section runs as written from the repository root.

The commands are read from the README itself (so an edited example is tested as edited) and
run in order, in a copy of ``examples/``, through the console-script entry point in this
process; each must exit 0 without a traceback. The Python example runs too.
"""

from __future__ import annotations

import glob
import re
import shlex
import shutil
from pathlib import Path

import pytest

from cli_run import run_main

ROOT = Path(__file__).resolve().parents[1]


def using_it_blocks() -> tuple[list[str], str]:
    """(shell commands, Python example) of the README's "Using it" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Using it", 1)[1].split("\n## ", 1)[0]
    shell = re.search(r"```\n(.*?)```", section, re.S)
    python = re.search(r"```python\n(.*?)```", section, re.S)
    assert shell and python, "the README's Using it section lost its examples"
    commands: list[str] = []
    pending = ""
    for line in shell.group(1).splitlines():
        line = line.strip()
        if pending:
            line = pending + " " + line
            pending = ""
        if line.endswith("\\"):
            pending = line[:-1].strip()
            continue
        if line and not line.startswith("#"):
            commands.append(line)
    return commands, python.group(1)


def test_readme_lists_commands() -> None:
    commands, _ = using_it_blocks()
    assert len(commands) >= 10 and all(c.startswith("hyperplace ") for c in commands)


def _run(command: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    args: list[str] = []
    for word in shlex.split(command)[1:]:
        args += sorted(glob.glob(word)) if any(ch in word for ch in "*?[") else [word]
    code = run_main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_every_readme_command_runs_as_written(tmp_path: Path, capsys, monkeypatch) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    commands, _ = using_it_blocks()
    for command in commands:
        code, out, err = _run(command, capsys)
        assert code == 0, f"{command}\n{err}"
        assert "Traceback" not in out + err, command
    # what the commands promise to leave behind
    for name in ("plan.yaml", "plan2.yaml", "plan2.svg", "cluster.svg", "mine.yaml",
                 "big.yaml", "lab.yaml", "hn-cluster.yaml", "split.json"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert (tmp_path / "plan2.svg").read_text().startswith("<svg")


def test_readme_predictions_fit_in_memory(capsys) -> None:
    """A README `predict` example shows a configuration that runs: one that does not fit
    prints DOES NOT FIT, which the README's words around it did not say (new user). Memory
    does not depend on the calibration, so the examples run without theirs."""
    commands, _ = using_it_blocks()
    predicts = [c for c in commands if c.startswith("hyperplace predict ")]
    assert any("--calibration" in c for c in predicts)
    for command in predicts:
        words = shlex.split(command)
        if "--calibration" in words:
            at = words.index("--calibration")
            del words[at:at + 2]
        code, out, err = _run(shlex.join(words), capsys)
        assert code == 0, f"{command}\n{err}"
        assert "DOES NOT FIT" not in out, f"{command}\n{out}"


def test_readme_python_example_runs() -> None:
    _, python = using_it_blocks()
    exec(compile(python, "README.md", "exec"), {})  # noqa: S102 - our own README
