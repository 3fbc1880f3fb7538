"""Base class for domain objects: frozen, unknown fields rejected, camelCase in YAML/JSON."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class HPModel(BaseModel):
    """Frozen, strict about unknown fields, camelCase on the wire like Kubernetes objects."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True
    )

    def to_doc(self) -> dict:
        """JSON-ready dict with camelCase keys, defaults left out (round-trips via validate)."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)
