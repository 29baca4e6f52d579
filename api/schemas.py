"""Request bodies, validated exactly as `evidence_retrieve.input.json` says."""

from __future__ import annotations

import re
import uuid
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)

# Checked with `fullmatch`, never `match` against a `$`: Python's `$` also matches before a
# final newline, so "<uuid>\n" would pass the check and then fail `uuid.UUID()` as a 500.
#: RFC 3986 absolute URI: a scheme, then only URI characters and well-formed %-escapes.
_URI = re.compile(
    r"[A-Za-z][A-Za-z0-9+.\-]*:(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*"
)
_UUID = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")
#: The input schema's pattern. pydantic-core checks it with Rust's regex engine, whose `$` is
#: the end of the text (as in ECMA-262), so "en\n" is refused.
LANGUAGE_PATTERN = r"^[a-zA-Z]{2,8}(?:-[a-zA-Z0-9]{1,8})*$"


def _uri(value: str) -> str:
    if not _URI.fullmatch(value):
        raise ValueError("must be an absolute URI (RFC 3986)")
    return value


def _uuid(value: str) -> str:
    if not _UUID.fullmatch(value):
        raise ValueError("must be a UUID")
    return value


def _uuid_param(value: object) -> object:
    # uuid.UUID alone would also take braces, URNs and bare hex: ids in a path take the one form
    # the bodies take, so every odd spelling is a 400 naming the parameter.
    return _uuid(value) if isinstance(value, str) else value


def _integral(value: Any) -> Any:
    """JSON has one kind of number: 2.0 is the integer 2, as JSON Schema's `integer` says."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: Accepts 2.0 for an integer field (strict models refuse it otherwise; strings stay refused).
#: It goes after a field's bounds, so they stay in the field's JSON Schema.
INTEGRAL = BeforeValidator(_integral)
Url = Annotated[str, StringConstraints(max_length=2048), AfterValidator(_uri)]
UuidText = Annotated[str, AfterValidator(_uuid)]
#: A path parameter holding an id.
UuidParam = Annotated[uuid.UUID, BeforeValidator(_uuid_param)]
Language = Annotated[str, StringConstraints(min_length=1, max_length=35, pattern=LANGUAGE_PATTERN)]
Kind = Literal["url_text", "published_captions"]


class RetrieveRequest(BaseModel):
    """Body of `POST /research-api/evidence/retrieve`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    url: Url
    kind: Kind
    language: Language | None = Field(default=None)
    workspace_id: UuidText
    mutation_id: UuidText

    @field_validator("language", mode="before")
    @classmethod
    def _no_explicit_null(cls, value: Any) -> Any:
        if value is None:
            raise ValueError("must be a string when given")
        return value

    @property
    def workspace(self) -> uuid.UUID:
        return uuid.UUID(self.workspace_id)

    @property
    def mutation(self) -> uuid.UUID:
        return uuid.UUID(self.mutation_id)
