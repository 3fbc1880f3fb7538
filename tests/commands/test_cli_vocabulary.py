"""One vocabulary for every command an operator meets: each option has help text, a command
that writes says -o/--output, a time budget is --budget, and -h works everywhere."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hyperplace.cli import app

runner = CliRunner()


def commands() -> Iterator[tuple[list[str], Any]]:
    def walk(cmd: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*path, name])

    yield from walk(typer.main.get_command(app), [])


def visible_options(cmd: Any) -> list[Any]:
    return [p for p in cmd.params if type(p).__name__.endswith("Option")
            and not getattr(p, "hidden", False)]


ALL = list(commands())
IDS = [" ".join(p) or "hyperplace" for p, _ in ALL]


@pytest.mark.parametrize("path,cmd", ALL, ids=IDS)
def test_every_option_has_help(path: list[str], cmd: Any) -> None:
    missing = [p.opts[0] for p in visible_options(cmd) if not p.help]
    assert not missing, f"hyperplace {' '.join(path)}: options without help: {missing}"
    assert cmd.help or not path, f"hyperplace {' '.join(path)} has no help text"


@pytest.mark.parametrize("path,cmd", ALL, ids=IDS)
def test_one_spelling_for_output_and_budget(path: list[str], cmd: Any) -> None:
    spellings = {o for p in visible_options(cmd) for o in p.opts}
    assert not spellings & {"--out", "--time-limit", "--timeout"}, (path, spellings)
    if "-o" in spellings:
        assert "--output" in spellings, path


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=IDS)
def test_dash_h_shows_help(path: list[str]) -> None:
    result = runner.invoke(app, [*path, "-h"])
    assert result.exit_code == 0, result.output
    assert "Usage" in result.output


def test_seeds_outside_their_range_are_refused(tmp_path, capsys):
    from cli_run import run_main

    for args in (["instances", "generate", "--gpus", "64", "--jobs", "2", "--seed", "-1",
                  "-o", str(tmp_path / "g.yaml")],
                 ["instances", "generate", "--gpus", "64", "--jobs", "2", "--seed",
                  "3000000000", "-o", str(tmp_path / "g.yaml")],
                 ["simulate", "--instance", "mixed-a100-h100", "--seed", "-1"]):
        assert run_main(args) == 2, args
        assert "--seed" in capsys.readouterr().err
    assert not (tmp_path / "g.yaml").exists()
