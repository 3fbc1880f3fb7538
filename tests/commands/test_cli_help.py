"""Every command's help, walked (#26): readable at 80 columns (nothing cut, no line wider, no
reStructuredText markup), every accepted value listed, one help text per shared option."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hyperplace.cli import app

from test_cli_vocabulary import commands  # every command, walked once

runner = CliRunner()




ALL = list(commands())
IDS = [" ".join(p) or "hyperplace" for p, _ in ALL]
MARKUP = re.compile(r"``|:(class|mod|func|meth|data):`")


def options(cmd: Any) -> list[Any]:
    # typer may vendor its own click: match by class name, not by click's classes
    return [p for p in cmd.params if type(p).__name__.endswith("Option")
            and not getattr(p, "hidden", False)]


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=IDS)
def test_help_fits_80_columns_and_cuts_nothing(path: list[str]) -> None:
    result = runner.invoke(app, [*path, "-h"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    text = result.output
    wide = [line for line in text.splitlines() if len(line) > 80]
    assert not wide, wide
    assert "…" not in text, "help cut with an ellipsis"
    assert not MARKUP.search(text), "reStructuredText markup in help"
    listing = text.split("\nCommands:\n", 1)[1] if "\nCommands:\n" in text else ""
    cut = [line for line in listing.splitlines() if line.rstrip().endswith("...")]
    assert not cut, f"command list cut: {cut}"


@pytest.mark.parametrize("path,cmd", ALL, ids=IDS)
def test_accepted_values_are_listed(path: list[str], cmd: Any) -> None:
    """Options with a fixed set of values show them, in the metavar (choices) or the help."""
    ctx = type(typer.main.get_command(app).make_context("hyperplace", [],
                                                        resilient_parsing=True))(cmd)
    for opt in options(cmd):
        record = opt.get_help_record(ctx)
        text = " ".join(record) if record else ""
        if "--format" in opt.opts:  # its values in <a|b|c>, or named in the help
            assert re.search(r"<[\w|-]+\|[\w|-]+>", text) or (
                "json" in text and "yaml" in text), (path, text)
        if "--solver" in opt.opts:
            assert re.search(r"auto\W.*\|", text) or "auto, " in text, (path, text)
        if "--policy" in opt.opts:
            assert re.search(r"\w+\|\w+|, \w+", text), (path, text)


def test_simulate_policy_help_names_every_policy() -> None:
    from hyperplace.sim.policies import ALIASES, POLICIES

    cmd = dict(ALL_BY_PATH)["simulate"]
    help_text = next(o.help for o in options(cmd) if "--policy" in o.opts)
    assert help_text
    missing = [p for p in (*POLICIES, *ALIASES) if not re.search(
        rf"(^|[\s(,]){re.escape(p)}([\s),;]|$)", help_text)]
    assert not missing, f"simulate --policy help does not name {missing}"


ALL_BY_PATH = [(" ".join(p), c) for p, c in ALL]

#: Options every command that has them describes in the same words (documented once).
SHARED = ("--top", "--all")


def test_shared_options_are_documented_once() -> None:
    from hyperplace.commands.common import ALL_HELP, TOP_HELP

    expected = {"--top": TOP_HELP, "--all": ALL_HELP}
    seen = 0
    for path, cmd in ALL:
        if path not in (["solve"], ["instances", "show"]):  # the long lists of #26
            continue
        for opt in options(cmd):
            for name in SHARED:
                if name in opt.opts:
                    seen += 1
                    assert opt.help == expected[name], (path, name, opt.help)
    assert seen == 4
    # commands that solve one round from an instance say these options in the same words
    from hyperplace.commands.common import BUDGET_HELP, CLUSTER_HELP, FORMAT_HELP, JOBS_HELP

    by_path = dict(ALL_BY_PATH)
    same = {"--format": (FORMAT_HELP, ("solve", "defrag", "repair")),
            "--budget": (BUDGET_HELP, ("solve", "defrag")),
            "--cluster": (CLUSTER_HELP, ("solve", "why")),
            "--jobs": (JOBS_HELP, ("solve", "why"))}
    for name, (text, paths) in same.items():
        for path in paths:
            opt = next(o for o in options(by_path[path]) if name in o.opts)
            assert opt.help == text, (path, name, opt.help)
    for path, cmd in ALL:
        for opt in options(cmd):
            if "--budget" in opt.opts:
                assert "second" in (opt.help or ""), (path, opt.help)
            if "--output" in opt.opts:
                assert opt.help, path


def test_completion_is_offered() -> None:
    """typer's completion: the options are in -h, and the completion protocol answers (as a
    shell's completion script asks it: no shell detection involved)."""
    text = runner.invoke(app, ["-h"]).output
    assert "--install-completion" in text and "--show-completion" in text
    result = runner.invoke(app, [], prog_name="hyperplace", env={
        "_HYPERPLACE_COMPLETE": "complete_bash", "COMP_WORDS": "hyperplace sol",
        "COMP_CWORD": "1"})
    assert result.exit_code == 0 and "solve" in result.output.split(), result.output
    result = runner.invoke(app, [], prog_name="hyperplace", env={
        "_HYPERPLACE_COMPLETE": "complete_bash", "COMP_WORDS": "hyperplace solve --run",
        "COMP_CWORD": "2"})
    assert "--running-moveable" in result.output.split(), result.output
