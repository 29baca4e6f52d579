"""Split an evidence revision into passages: paragraph-aware for text, cue-aware for captions.

Pure functions. A passage never cuts a paragraph or a cue unless that one paragraph is longer
than the bound on its own (then it is cut at sentence ends, then at words).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from worker.content.quotes.cues import cue_spans
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

_LINES = re.compile(r"[^\n]+")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s+")


@dataclass(frozen=True)
class Passage:
    """One chunk of a revision, with its cue span for captions and its anchor in the text.

    `text` is the revision's text from `char_start` to `char_end` (code points); a caption
    passage whose cues the text does not say (cut at its bound) has no anchor and keeps its
    cues' words.
    """

    ordinal: int
    text: str
    start_ms: int | None = None
    end_ms: int | None = None
    char_start: int | None = None
    char_end: int | None = None


def chunk_id(evidence_id: uuid.UUID, revision: int, ordinal: int) -> str:
    """The durable, opaque id of passage `ordinal` of an evidence revision."""
    return "ch_" + uuid.uuid5(CHUNK_NAMESPACE, f"{evidence_id}/{revision}/{ordinal}").hex


Span = tuple[int, int]


def _stripped(text: str, start: int, end: int) -> Span | None:
    """`[start, end)` less the whitespace at its ends; None when nothing is left."""
    piece = text[start:end]
    lead = len(piece) - len(piece.lstrip())
    kept = len(piece.strip())
    return (start + lead, start + lead + kept) if kept else None


def _split_long(text: str, span: Span, limit: int = MAX_CHARS) -> list[Span]:
    """Cut one over-long paragraph at sentence ends, then at word boundaries."""
    if span[1] - span[0] <= limit:
        return [span]
    pieces: list[Span] = []
    cuts = [m.start() for m in _SENTENCE_END.finditer(text, *span)] + [span[1]]
    begin = span[0]
    for cut_at in cuts:
        sentence = _stripped(text, begin, cut_at)
        begin = cut_at
        while sentence is not None and sentence[1] - sentence[0] > limit:
            low = sentence[0]
            cut = text.rfind(" ", low, low + limit + 1) - low
            cut = cut if cut > limit // 2 else limit
            pieces.append(_stripped(text, low, low + cut) or (low, low + cut))
            sentence = _stripped(text, low + cut, sentence[1])
        if sentence is not None:
            pieces.append(sentence)
    return _pack(pieces)


def _pack(units: Iterable[Span]) -> list[Span]:
    """Greedily join units until a passage reaches TARGET_CHARS (never past MAX_CHARS)."""
    passages: list[Span] = []
    current: Span | None = None
    for unit in units:
        if current is None:
            current = unit
            continue
        size, joined = current[1] - current[0], unit[1] - current[0]
        if size >= TARGET_CHARS or joined > MAX_CHARS:
            passages.append(current)
            current = unit
        else:
            current = (current[0], unit[1])
    if current is not None:
        passages.append(current)
    return passages


def split_text(text: str) -> list[Passage]:
    """Passages of a document: whole paragraphs packed together, long ones cut at sentences."""
    lines = [_stripped(text, m.start(), m.end()) for m in _LINES.finditer(text)]
    units = [piece for line in lines if line is not None for piece in _split_long(text, line)]
    return [
        Passage(i, text[s:e], char_start=s, char_end=e)
        for i, (s, e) in enumerate(_pack(units)[:MAX_CHUNKS])
    ]


def split_cues(segments: Sequence[SegmentDict], text: str = "") -> list[Passage]:
    """Passages of a caption track: whole cues, a new passage at a long pause or the bound.

    Each passage is anchored in `text` (the revision's) from its first placed cue's start to
    its last's end (`worker.content.quotes.cues`), and is that stretch of the text."""
    spans = cue_spans(text, segments) if text else [None] * len(segments)
    passages: list[Passage] = []
    texts: list[str] = []
    placed: list[Span] = []
    start = end = None

    def close() -> None:
        anchor = (placed[0][0], placed[-1][1]) if placed else None
        words = " ".join(texts) if anchor is None else text[anchor[0] : anchor[1]]
        low, high = anchor if anchor is not None else (None, None)
        passages.append(Passage(len(passages), words, start, end, low, high))

    for cue, span in zip(segments, spans, strict=True):
        cue_text = " ".join(str(cue.get("text", "")).split())
        if not cue_text:
            continue
        size = sum(len(t) + 1 for t in texts)
        paused = end is not None and cue["start_ms"] - end >= CUE_PAUSE_MS
        if texts and (paused or size >= TARGET_CHARS or size + len(cue_text) > MAX_CHARS):
            close()
            texts, placed, start = [], [], None
        if start is None:
            start = int(cue["start_ms"])
        texts.append(cue_text[:MAX_CHARS])
        if span is not None:
            placed.append(span)
        end = int(cue["end_ms"])
    if texts:
        close()
    return passages[:MAX_CHUNKS]


def split_revision(text: str, segments: Sequence[SegmentDict]) -> list[Passage]:
    """Passages of a revision: by cues when it has segments, else by paragraphs of its text."""
    return split_cues(segments, text) if segments else split_text(text)
