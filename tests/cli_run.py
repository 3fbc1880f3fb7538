"""Run ``hyperplace ARGS`` through the console-script entry point (``cli.main``) in-process.

The entry point declares the process a command, whose budgets then run from process start;
in a test the process is pytest, started long ago, so that declaration is suppressed and
budgets run from when the command starts, as for a command started just now.
"""

from __future__ import annotations

import sys
from unittest import mock

from hyperplace import cli, deadline


def run_main(args: list[str]) -> int:
    """Exit code of ``hyperplace ARGS`` (output goes to the captured stdout/stderr)."""
    old = sys.argv
    sys.argv = ["hyperplace", *args]
    try:
        with mock.patch.object(deadline, "started_as_command", lambda: None):
            cli.main()
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old
