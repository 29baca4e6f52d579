"""Split an evidence revision into passages: paragraph-aware for text, cue-aware for captions.

Pure functions. A passage never cuts a paragraph or a cue unless that one paragraph is longer
than the bound on its own (then it is cut at sentence ends, then at words).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from worker.content.results import SegmentDict

#: A passage aims for about this many characters and never exceeds the maximum.
TARGET_CHARS = 900
MAX_CHARS = 1_500
#: A pause between cues at least this long (milliseconds) starts a new caption passage.
CUE_PAUSE_MS = 4_000
#: Passages kept at most per revision (text ≤ 20 000 chars and segments ≤ 1 000 bound it anyway).
MAX_CHUNKS = 400
#: Namespace of chunk ids: uuid5 of (evidence id, revision, ordinal), so an id never changes.
CHUNK_NAMESPACE = uuid.UUID("0b0a5e8e-7c1d-4d53-9a4e-2f0c1d3b7a61")

_PARAGRAPHS = re.compile(r"\n\s*\n|\n")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")


@dataclass(frozen=True)
class Passage:
    """One chunk of a revision, with its cue span for captions."""

    ordinal: int
    text: str
    start_ms: int | None = None
    end_ms: int | None = None


def chunk_id(evidence_id: uuid.UUID, revision: int, ordinal: int) -> str:
    """The durable, opaque id of passage `ordinal` of an evidence revision."""
    return "ch_" + uuid.uuid5(CHUNK_NAMESPACE, f"{evidence_id}/{revision}/{ordinal}").hex


def _split_long(paragraph: str, limit: int = MAX_CHARS) -> list[str]:
    """Cut one over-long paragraph at sentence ends, then at word boundaries."""
    if len(paragraph) <= limit:
        return [paragraph]
    pieces: list[str] = []
    for sentence in _SENTENCE_END.split(paragraph):
        while len(sentence) > limit:
            cut = sentence.rfind(" ", 0, limit + 1)
            cut = cut if cut > limit // 2 else limit
            pieces.append(sentence[:cut].strip())
            sentence = sentence[cut:].strip()
        if sentence:
            pieces.append(sentence)
    return _pack(pieces, " ")


def _pack(units: Iterable[str], joiner: str) -> list[str]:
    """Greedily join units until a passage reaches TARGET_CHARS (never past MAX_CHARS)."""
    passages: list[str] = []
    current = ""
    for unit in units:
        candidate = f"{current}{joiner}{unit}" if current else unit
        if current and (len(current) >= TARGET_CHARS or len(candidate) > MAX_CHARS):
            passages.append(current)
            current = unit
        else:
            current = candidate
    if current:
        passages.append(current)
    return passages


def split_text(text: str) -> list[Passage]:
    """Passages of a document: whole paragraphs packed together, long ones cut at sentences."""
    paragraphs = [p.strip() for p in _PARAGRAPHS.split(text) if p.strip()]
    units = [piece for p in paragraphs for piece in _split_long(p)]
    return [Passage(i, t) for i, t in enumerate(_pack(units, "\n")[:MAX_CHUNKS])]


def split_cues(segments: Sequence[SegmentDict]) -> list[Passage]:
    """Passages of a caption track: whole cues, a new passage at a long pause or the bound."""
    passages: list[Passage] = []
    texts: list[str] = []
    start = end = None
    for cue in segments:
        text = " ".join(str(cue.get("text", "")).split())
        if not text:
            continue
        size = sum(len(t) + 1 for t in texts)
        paused = end is not None and cue["start_ms"] - end >= CUE_PAUSE_MS
        if texts and (paused or size >= TARGET_CHARS or size + len(text) > MAX_CHARS):
            passages.append(Passage(len(passages), " ".join(texts), start, end))
            texts, start = [], None
        if start is None:
            start = int(cue["start_ms"])
        texts.append(text[:MAX_CHARS])
        end = int(cue["end_ms"])
    if texts:
        passages.append(Passage(len(passages), " ".join(texts), start, end))
    return passages[:MAX_CHUNKS]


def split_revision(text: str, segments: Sequence[SegmentDict]) -> list[Passage]:
    """Passages of a revision: by cues when it has segments, else by paragraphs of its text."""
    return split_cues(segments) if segments else split_text(text)
