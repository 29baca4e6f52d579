"""Request bodies, validated exactly as `evidence_retrieve.input.json` says; batch envelopes.

One rule goes further than the schema's `format: uri`: a `url` must also parse by the WHATWG URL
Standard with a host (`worker.domain.urls`), the parser every later step reads it with.
"""

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
    RootModel,
    StringConstraints,
    WithJsonSchema,
    field_validator,
)

from worker import contract
from worker.domain import urls

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
    # Every later step (guard, evidence key, store) reads the URL by the WHATWG URL Standard,
    # so the door does too: what it cannot read, or reads without a host, is refused here.
    parsed = urls.parse(value)
    if isinstance(parsed, urls.UrlRefusal):
        raise ValueError(f"does not parse as a URL (WHATWG): {parsed.reason}")
    if not parsed.has_host:
        raise ValueError(f"must name a host ({parsed.scheme}: URL without one)")
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


# --- The batch routes (`POST …/retrieve/batch`, `POST …/retrievals/batch-get`) ------------

#: Most items (or ids) one batch request may carry.
MAX_BATCH_ITEMS = 1000
_ITEMS_SCHEMA = {
    "type": "array",
    # Any value is taken at this level: each is then checked as a retrieve body on its own, and
    # a bad one is that item's 400, never the batch's.
    "items": {"anyOf": [{"$ref": "#/components/schemas/RetrieveRequest"}, {}]},
    "minItems": 1,
    "maxItems": MAX_BATCH_ITEMS,
    "description": "Each item exactly a `retrieve` body; each is answered on its own.",
}


class BatchRetrieveRequest(BaseModel):
    """Body of `POST /research-api/evidence/retrieve/batch`.

    Items are checked one by one (a bad item is that item's 400, never the batch's), so the
    envelope only requires a list of 1 to `MAX_BATCH_ITEMS` of them.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    items: Annotated[
        list[Any],
        Field(min_length=1, max_length=MAX_BATCH_ITEMS),
        WithJsonSchema(_ITEMS_SCHEMA),
    ]


class BatchGetRequest(BaseModel):
    """Body of `POST /research-api/evidence/retrievals/batch-get`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    ids: Annotated[list[UuidText], Field(min_length=1, max_length=MAX_BATCH_ITEMS)]


def _contract_retrieval(schema: dict[str, Any]) -> None:

    schema.clear()
    schema.update(contract.load("evidence_retrieve.output.json")["properties"]["retrieval"])


class ContractRetrieval(RootModel[dict[str, Any]]):
    """A retrieval exactly as `evidence_retrieve.output.json` describes `retrieval`."""

    model_config = ConfigDict(json_schema_extra=_contract_retrieval)


class ErrorBody(BaseModel):
    """The contract's error object (`{"error": …}` on its own, or one batch item's error)."""

    code: str
    message: str
    field: str | None = None
    details: dict[str, Any] | None = None


class BatchItemResult(BaseModel):
    """One item's answer: its status as the single route would have answered it, and either
    the retrieval (202 created, 200 already known) or the error (400, 403, 409, 429)."""

    status: Literal[200, 202, 400, 403, 409, 429]
    retrieval: ContractRetrieval | None = None
    error: ErrorBody | None = None


class BatchRetrieveResponse(BaseModel):
    """One result per item, in the order of the items."""

    results: list[BatchItemResult]


class BatchGetResponse(BaseModel):
    """One retrieval per id, in the order of the ids; null for unknown or unreadable ids."""

    retrievals: list[ContractRetrieval | None]


class ErrorResponse(BaseModel):
    """The contract's error envelope."""

    error: ErrorBody
