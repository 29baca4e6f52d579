"""Build `result` objects that match `evidence_retrieve.output.json` exactly.

Every settled retrieval's `result` is made here, so the shape (required keys, bounds, the
reason/status table, at most ten distinct warnings) is enforced in one place. `Result`,
`Provenance`, `SegmentDict` and `EvidenceRef` type that JSON wherever it travels (the pipeline,
the runner, the store, the API's payloads, the MCP tools).
"""

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Literal, TypedDict

from worker.domain.clock import isoformat
from worker.domain.reasons import FAILURE_STATUS, PARTIAL_PRIORITY, PARTIAL_REASONS, Reason, Status

PARSER_VERSION = "research-public-retrieval/v1"
MAX_TEXT_CHARS = 20_000
MAX_TITLE_CHARS = 200
MAX_DESCRIPTION_CHARS = 2_000
MAX_SEGMENTS = 1_000
MAX_WARNINGS = 10
MAX_URL_CHARS = 2_048
MAX_LANGUAGE_CHARS = 35
MAX_RETRY_AFTER_SECONDS = 86_400
LANGUAGE_TAG = re.compile(r"[a-zA-Z]{2,8}(?:-[a-zA-Z0-9]{1,8})*")

Kind = Literal["url_text", "published_captions"]
ContentKind = Literal["document_text", "metadata_only", "published_caption_file", "none"]
CaptionFormat = Literal["webvtt", "subrip"]
LanguageSource = Literal["publisher_declared", "unknown"]


class SegmentDict(TypedDict):
    """One timed cue of `result.segments`, as JSON."""

    start_ms: int
    end_ms: int
    text: str


class Provenance(TypedDict):
    """`result.provenance`: where and how the content was obtained."""

    source_url: str | None
    retrieved_at: str
    mime_type: str | None
    parser_version: str
    content_kind: ContentKind
    caption_format: CaptionFormat | None
    language: str | None
    language_source: LanguageSource
    platform_native_verified: bool


class Result(TypedDict):
    """A settled retrieval's `result`: exactly the keys of the contract's output schema.

    `status`, `reason` and `warnings` hold `worker.domain.reasons.Status` and `Reason` values.
    """

    kind: Kind
    status: str
    text: str
    title: str | None
    description: str | None
    segments: list[SegmentDict]
    provenance: Provenance
    reason: str | None
    warnings: list[str]
    retry_after_seconds: int | None


class EvidenceRef(TypedDict):
    """An evidence revision named by a retrieval (`retrieval.evidence`) or a brief's finding."""

    evidence_id: str
    revision: int


@dataclass(frozen=True)
class Segment:
    """One timed caption cue."""

    start_ms: int
    end_ms: int
    text: str

    def as_dict(self) -> SegmentDict:
        return {"start_ms": self.start_ms, "end_ms": self.end_ms, "text": self.text}


@dataclass
class Content:
    """What the pipeline produced from a source, before it becomes a `result`."""

    text: str = ""
    title: str | None = None
    description: str | None = None
    segments: Sequence[Segment] = ()
    source_url: str | None = None
    mime_type: str | None = None
    content_kind: ContentKind = "none"
    caption_format: CaptionFormat | None = None
    language: str | None = None
    #: Content-level reasons (text_limited, invalid_cues, …), most important first or any order.
    reasons: list[Reason] = field(default_factory=list)


def clip(value: str | None, limit: int) -> str | None:
    """Return `value` stripped and cut to `limit` characters, or None when empty."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    return value[:limit].rstrip() or None


def cut_at_word(text: str, limit: int = MAX_TEXT_CHARS) -> tuple[str, bool]:
    """Cut `text` to at most `limit` characters at a word boundary; say whether it was cut."""
    if len(text) <= limit:
        return text, False
    head = text[: limit + 1]
    cut = max(head.rfind(" "), head.rfind("\n"))
    if cut < limit // 2:
        cut = limit
    return text[:cut].rstrip(), True


def _distinct(reasons: Iterable[Reason]) -> list[Reason]:
    seen: list[Reason] = []
    for reason in reasons:
        if reason not in seen:
            seen.append(reason)
    return seen


def _language_tag(value: str | None) -> str | None:
    """Return `value` when it is a schema-valid language tag, else None."""
    if value and len(value) <= MAX_LANGUAGE_CHARS and LANGUAGE_TAG.fullmatch(value):
        return value
    return None


def _source_url(value: str | None) -> str | None:
    """Return the source URL when the schema can carry it (≤ 2 048 characters, no spaces)."""
    if value and len(value) <= MAX_URL_CHARS and not any(c.isspace() for c in value):
        return value
    return None


def _segments(segments: Sequence[Segment]) -> list[SegmentDict]:
    """Keep at most MAX_SEGMENTS schema-valid segments (timed forwards, with text)."""
    kept = []
    for segment in segments[:MAX_SEGMENTS]:
        text = segment.text.strip()[:MAX_TEXT_CHARS]
        if segment.start_ms >= 0 and segment.end_ms > segment.start_ms and text:
            kept.append(Segment(segment.start_ms, segment.end_ms, text).as_dict())
    return kept


def _provenance(content: Content, retrieved_at: datetime) -> Provenance:
    language = _language_tag(content.language)
    return {
        "source_url": _source_url(content.source_url),
        "retrieved_at": isoformat(retrieved_at),
        "mime_type": content.mime_type,
        "parser_version": PARSER_VERSION,
        "content_kind": content.content_kind,
        "caption_format": content.caption_format,
        "language": language,
        "language_source": "publisher_declared" if language else "unknown",
        "platform_native_verified": False,
    }


def content_result(kind: Kind, content: Content, retrieved_at: datetime) -> Result:
    """Build a `ready`/`partial` result from usable content (or `empty` when there is none)."""
    text, cut = cut_at_word(content.text)
    reasons = list(content.reasons)
    if cut:
        reasons.append(Reason.TEXT_LIMITED)
    segments = _segments(content.segments)
    if len(content.segments) > MAX_SEGMENTS:
        reasons.append(Reason.CUES_LIMITED)
    reasons = _distinct(reasons)
    if not text and not segments and Reason.METADATA_ONLY not in reasons:
        empty = Reason.NO_CAPTIONS if kind == "published_captions" else Reason.NO_TEXT
        return failure_result(kind, empty, retrieved_at, content=content, warnings=reasons)
    partial = [r for r in PARTIAL_PRIORITY if r in reasons]
    reason = partial[0] if partial else None
    warnings = [r for r in reasons if r != reason]
    return _result(
        kind,
        Status.PARTIAL if reason else Status.READY,
        reason,
        content,
        retrieved_at,
        text=text,
        segments=segments,
        warnings=warnings,
    )


def failure_result(
    kind: Kind,
    reason: Reason,
    retrieved_at: datetime,
    *,
    content: Content | None = None,
    warnings: Iterable[Reason] = (),
    retry_after_seconds: int | None = None,
) -> Result:
    """Build a result that carries no text: blocked, unsupported, empty, unavailable, …"""
    status = FAILURE_STATUS[reason]
    content = replace(content or Content(), content_kind="none")
    retry = retry_after_seconds if status is Status.RATE_LIMITED else None
    if status is Status.RATE_LIMITED:
        retry = DEFAULT_RETRY_AFTER_SECONDS if retry is None else retry
        retry = min(max(retry, 1), MAX_RETRY_AFTER_SECONDS)
    return _result(
        kind,
        status,
        reason,
        content,
        retrieved_at,
        text="",
        segments=[],
        warnings=[w for w in warnings if w != reason],
        retry_after_seconds=retry,
    )


DEFAULT_RETRY_AFTER_SECONDS = 60


def _result(
    kind: Kind,
    status: Status,
    reason: Reason | None,
    content: Content,
    retrieved_at: datetime,
    *,
    text: str,
    segments: list[SegmentDict],
    warnings: Iterable[Reason],
    retry_after_seconds: int | None = None,
) -> Result:
    return {
        "kind": kind,
        "status": status.value,
        "text": text,
        "title": clip(content.title, MAX_TITLE_CHARS),
        "description": clip(content.description, MAX_DESCRIPTION_CHARS),
        "segments": segments,
        "provenance": _provenance(content, retrieved_at),
        "reason": reason.value if reason else None,
        "warnings": [w.value for w in _distinct(warnings)][:MAX_WARNINGS],
        "retry_after_seconds": retry_after_seconds,
    }


def cancelled_result(kind: Kind, at: datetime) -> Result:
    """The result a cancelled retrieval carries."""
    return failure_result(kind, Reason.CANCELLED, at)


def has_content(result: Result) -> bool:
    """Whether a result carries text or segments, and so names an evidence revision."""
    return result["status"] in (Status.READY, Status.PARTIAL) and bool(
        result["text"] or result["segments"]
    )


__all__ = [
    "PARTIAL_REASONS",
    "Content",
    "EvidenceRef",
    "Provenance",
    "Result",
    "Segment",
    "SegmentDict",
    "content_result",
    "failure_result",
    "cancelled_result",
    "has_content",
    "cut_at_word",
    "clip",
]
