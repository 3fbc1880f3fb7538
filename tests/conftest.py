"""Shared fixtures: kept small on purpose (each test module owns its helpers)."""

from __future__ import annotations

from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"


@pytest.fixture
def seed_job_path() -> Path:
    """The seed's FoundationModelTrainingJob manifest, verbatim."""
    return DATA / "seed_job.yaml"
