"""Request bodies of the read side, validated as `get_chunk`, `get_image`, `briefs_get` say."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

import regress
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
)

from api.schemas import INTEGRAL, Kind, Language, UuidText

#: JSON's largest safe integer, the schemas' bound on revision numbers.
MAX_SAFE_INTEGER = 9_007_199_254_740_991
Revision = Annotated[int, Field(gt=0, le=MAX_SAFE_INTEGER), INTEGRAL]
Query = Annotated[str, StringConstraints(min_length=1, max_length=1_000)]
#: No upper bound: the contract's get_chunk and get_image schemas set none (a long id is a miss;
#: the body size limit bounds it).
OpaqueId = Annotated[str, StringConstraints(min_length=1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class _InWorkspace(_Strict):
    workspace_id: UuidText

    @property
    def workspace(self) -> uuid.UUID:
        return uuid.UUID(self.workspace_id)


class ChunkSearchRequest(_InWorkspace):
    """Body of `POST /research-api/chunks/search` (research_chunk_search)."""

    query: Query
    limit: Annotated[int, Field(ge=1, le=50), INTEGRAL] = 10
    kind: Kind | None = None
    language: Language | None = None


class ChunkGetRequest(BaseModel):
    """Body of `POST /research-api/chunks/get` (research_get_chunk)."""

    model_config = ConfigDict(strict=True)

    chunk_id: OpaqueId


class ImageSearchRequest(_InWorkspace):
    """Body of `POST /research-api/images/search` (research_image_search)."""

    query: Query
    limit: Annotated[int, Field(ge=1, le=50), INTEGRAL] = 10


class ImageGetRequest(BaseModel):
    """Body of `POST /research-api/images/get` (research_get_image)."""

    model_config = ConfigDict(strict=True)

    image_id: OpaqueId
    include_bytes: bool = False


class EvidenceRef(_Strict):
    """One cited evidence revision."""

    evidence_id: UuidText
    revision: Revision


class Finding(_Strict):
    """One finding of a brief, with the evidence it rests on."""

    id: UuidText
    statement: Annotated[str, StringConstraints(min_length=1, max_length=4_000)]
    basis: Literal["observed", "inferred", "generated"]
    evidence: Annotated[list[EvidenceRef], Field(max_length=500)]
    uncertainty: Annotated[str, StringConstraints(max_length=1_000)]


class BriefContent(_Strict):
    """A brief's content, exactly as `briefs_get.output.json` describes it."""

    title: Annotated[str, StringConstraints(min_length=1, max_length=200)]
    question: Annotated[str, StringConstraints(min_length=1, max_length=2_000)]
    summary: Annotated[str, StringConstraints(max_length=10_000)]
    findings: Annotated[list[Finding], Field(max_length=100)]
    angles: Annotated[
        list[Annotated[str, StringConstraints(min_length=1, max_length=2_000)]],
        Field(max_length=30),
    ]
    notes: Annotated[str, StringConstraints(max_length=10_000)]
    project_id: UuidText | None
    project_revision: Revision | None
    corpus_snapshot_id: UuidText | None
    language: Annotated[str, StringConstraints(min_length=1, max_length=35)]


class BriefGetRequest(_InWorkspace):
    """Body of `POST /research-api/briefs/get` (sosoapi_research_briefs_get)."""

    id: UuidText
    revision: Revision | None = None

    @field_validator("revision", mode="before")
    @classmethod
    def _no_explicit_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("must be an integer when given")
        return value


class BriefCreateRequest(_InWorkspace):
    """Body of `POST /research-api/briefs/create`."""

    content: BriefContent


class BriefReviseRequest(_InWorkspace):
    """Body of `POST /research-api/briefs/revise`."""

    id: UuidText
    expected_revision: Revision
    content: BriefContent


class BriefReviewRequest(_InWorkspace):
    """Body of `POST /research-api/briefs/review`."""

    id: UuidText
    revision: Revision


class BriefArchiveRequest(_InWorkspace):
    """Body of `POST /research-api/briefs/archive`."""

    id: UuidText


#: A quote to verify: at least one character that is not whitespace, at most 10 000.
MAX_QUOTE_CHARS = 10_000
#: Quotes per verify call.
MAX_QUOTES = 100


#: What the schema's `pattern: "\\S"` means (ECMA-262 whitespace, not Python's `str.isspace`).
_NOT_WHITESPACE = regress.Regex(r"\S", "u")


def _not_blank(value: str) -> str:
    if _NOT_WHITESPACE.find(value) is None:
        raise ValueError("must contain a character that is not whitespace")
    return value


QuoteText = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_QUOTE_CHARS), AfterValidator(_not_blank)
]


class QuoteItem(_Strict):
    """One quote and the evidence revision it claims to come from (latest by default)."""

    evidence_id: UuidText
    revision: Revision | None = None
    quote: QuoteText

    @field_validator("revision", mode="before")
    @classmethod
    def _no_explicit_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("must be an integer when given")
        return value


class QuoteVerifyRequest(_InWorkspace):
    """Body of `POST /research-api/evidence/quotes/verify` (research_verify_quote)."""

    quotes: Annotated[list[QuoteItem], Field(min_length=1, max_length=MAX_QUOTES)]
    #: Characters of context before and after each match.
    context_chars: Annotated[int, Field(ge=0, le=500), INTEGRAL] = 80
