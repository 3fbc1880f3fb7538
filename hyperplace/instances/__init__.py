"""Instances: bundled scenarios, files people write, and seeded synthetic ones.

The public surface other modules use: :data:`DEFAULT_INSTANCE`, :func:`list_instances`,
:func:`load_instance`, :func:`load_cluster_and_jobs`, :func:`generate` and :func:`summarize`.
Imports are lazy because :mod:`hyperplace.models.gpu` reads its catalog from this package's
data directory, and importing the models from here eagerly would make that a cycle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

DEFAULT_INSTANCE = "mixed-a100-h100"

if TYPE_CHECKING:
    from hyperplace.instances.generator import generate
    from hyperplace.instances.registry import (
        BUNDLED,
        InstanceInfo,
        list_instances,
        load_cluster_and_jobs,
        load_instance,
        validate_file,
    )
    from hyperplace.instances.summary import InstanceSummary, summarize

_LAZY = {
    "generate": "generator",
    "BUNDLED": "registry",
    "InstanceInfo": "registry",
    "list_instances": "registry",
    "load_cluster_and_jobs": "registry",
    "load_instance": "registry",
    "validate_file": "registry",
    "InstanceSummary": "summary",
    "summarize": "summary",
}

__all__ = ["DEFAULT_INSTANCE", *_LAZY]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hyperplace.instances' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"hyperplace.instances.{module}"), name)
