"""Base class for domain objects: frozen, unknown fields rejected, camelCase in YAML/JSON."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from hyperplace.models.limits import MAX_STRING_LENGTH

_WARNINGS = ("input that was read but should be changed (an old key's spelling), one line "
             "each naming the field, as the CLI prints them on stderr")
#: The ``warnings`` field of every document and answer that reads input (plans, federated
#: plans, estimates); :data:`OptionalWarnings` where the service leaves an empty one out.
Warnings = Annotated[list[str], Field(default_factory=list, description=_WARNINGS)]
OptionalWarnings = Annotated[list[str] | None, Field(default=None, description=_WARNINGS)]


class HPModel(BaseModel):
    """Frozen, strict about unknown fields, camelCase on the wire like Kubernetes objects."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", alias_generator=to_camel, populate_by_name=True,
        allow_inf_nan=False,  # .inf or NaN in any number is an input error, not a crash later
        str_max_length=MAX_STRING_LENGTH,
    )

    def to_doc(self) -> dict:
        """JSON-ready dict with camelCase keys and defaults left out (round-trips via validate),
        but always with ``apiVersion`` and ``kind`` first when the object has them, so a
        written document says what it is."""
        data = self.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        head = {k: getattr(self, a) for k, a in (("apiVersion", "api_version"), ("kind", "kind"))
                if isinstance(getattr(self, a, None), str)}
        return {**head, **{k: v for k, v in data.items() if k not in head}}

