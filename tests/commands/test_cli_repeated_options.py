"""An option that takes one value, given twice, is refused (click kept the last silently)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli_run import run_main

from hyperplace import cli
from hyperplace.commands.common import check_repeated_options
from hyperplace.errors import InputError

EXAMPLES = Path(__file__).parents[2] / "examples"


def test_solve_with_two_jobs_files_is_refused_not_half_read(capsys):
    """`solve --jobs a.yaml --jobs b.yaml` solved b's jobs only: a's job was in neither the
    admitted nor the pending list, and nothing said so."""
    a, b = EXAMPLES / "queue" / "llama3-8b-lora.yaml", EXAMPLES / "queue" / "bert-finetune.yaml"
    code = run_main(["solve", "--cluster", str(EXAMPLES / "my-cluster.yaml"), "--jobs", str(a),
                     "--jobs", str(b), "--budget", "5"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert err == (f"error: --jobs: given 2 times ({a}, {b}), but it takes one value: the last "
                   "would be used and the others ignored (several job files: put them in one "
                   "directory)\n")


def _leaves(cmd, path=()):
    if hasattr(cmd, "commands"):
        for name, sub in cmd.commands.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield path, cmd


def test_every_single_valued_option_of_every_command_is_checked():
    """Each command's options that take one value, given twice (as --opt x and --opt=y),
    are refused naming the option; repeatable options and flags are left to the command."""
    checked = 0
    for path, cmd in _leaves(cli._command()):
        for p in cmd.params:
            if getattr(p, "param_type_name", "") != "option" or p.is_flag or p.count:
                continue
            name = max(p.opts, key=len)
            args = [*path, name, "x", f"{name}=y"] if name.startswith("--") else \
                [*path, name, "x", name, "y"]
            if p.multiple:
                check_repeated_options(cli._command(), args)  # --queues, --policy: fine
                continue
            with pytest.raises(InputError) as err:
                check_repeated_options(cli._command(), args)
            assert err.value.path == name and "given 2 times (x, y)" in err.value.message
            checked += 1
    assert checked > 50  # every command's --output, --budget, --instance, ...


def test_an_options_value_and_what_follows_a_double_dash_are_not_counted():
    check_repeated_options(cli._command(), ["solve", "--instance", "--instance"])
    check_repeated_options(cli._command(), ["solve", "--budget", "2", "--", "--budget", "3"])
    check_repeated_options(cli._command(), ["simulate", "--policy", "fifo", "--policy", "slurm"])
