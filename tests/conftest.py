"""Shared fixtures: kept small on purpose (each test module owns its helpers)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

# Under CI (CI=true) property tests draw the same examples every run, so a green main stays
# green; locally they keep exploring new examples (and keep the failures they find).
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI", "").lower() == "true":
    settings.load_profile("ci")

DATA = Path(__file__).parent / "data"


@pytest.fixture
def seed_job_path() -> Path:
    """The seed's FoundationModelTrainingJob manifest, verbatim."""
    return DATA / "seed_job.yaml"
