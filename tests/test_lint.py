"""ruff and mypy on the package, with the configuration in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_ruff_is_clean():
    result = _run("ruff", "check", "hyperplace")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean():
    result = _run("mypy", "--no-error-summary")
    assert result.returncode == 0, result.stdout + result.stderr
