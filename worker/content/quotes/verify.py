"""One quote checked against one revision: the match, where it is, and how to show it.

`Source` is what a check needs of a revision (its text, its page's URL, its chunks' anchors and
its cues); it folds the text and places the cues once, however many quotes it is asked about.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from worker.content.quotes.cues import Span, cue_spans
from worker.content.quotes.folding import Folded, fold
from worker.content.quotes.fragments import fragment_url
from worker.content.quotes.matching import count_bounded, match_quote

#: Characters of context before and after a match, by default and at most.
CONTEXT_CHARS = 80
MAX_CONTEXT_CHARS = 500
_EDGE_WORD = re.compile(r"^\S*\s+|\s+\S*$")


@dataclass(frozen=True)
class ChunkAnchor:
    """One chunk of the revision and its `[char_start, char_end)` (None: recorded before
    chunks had anchors)."""

    chunk_id: str
    char_start: int | None
    char_end: int | None


@dataclass
class Source:
    """A revision as a quote check sees it."""

    text: str
    #: The live page (a text-fragment link points there); None for captions.
    page_url: str | None
    revision_url: str
    chunks: Sequence[ChunkAnchor] = ()
    segments: Sequence[Mapping[str, Any]] = field(default_factory=list)

    @cached_property
    def folded(self) -> Folded:
        return fold(self.text)

    @cached_property
    def cues(self) -> list[Span | None]:
        return cue_spans(self.text, self.segments) if self.segments else []


def _context(text: str, start: int, end: int, chars: int) -> tuple[str, str]:
    """Up to `chars` characters before and after, cut back to whole words when cut."""
    before = text[max(0, start - chars) : start]
    after = text[end : end + chars]
    if start - chars > 0 and not text[start - chars - 1].isspace():
        before = _EDGE_WORD.sub("", before, count=1) if " " in before else before
    if end + chars < len(text) and not text[end + chars].isspace():
        after = re.sub(r"\s+\S*$", "", after) if " " in after else after
    return before, after


def _overlaps(span: tuple[int | None, int | None], start: int, end: int) -> bool:
    low, high = span
    return low is not None and high is not None and low < end and high > start


def verify(source: Source, quote: str, context_chars: int = CONTEXT_CHARS) -> dict[str, Any]:
    """The answer about one quote (without the evidence id and revision, which the caller adds)."""
    found = match_quote(source.text, quote, lambda: source.folded)
    answer: dict[str, Any] = {
        "match": found.kind,
        "score": found.score,
        "start": found.start,
        "end": found.end,
        "text": None,
        "occurrences": 0,
        "chunk_ids": [],
        "cues": [],
        "context_before": None,
        "context_after": None,
        "fragment_url": None,
        "revision_url": source.revision_url,
    }
    if found.start is None or found.end is None:
        return answer
    start, end = found.start, found.end
    passage = source.text[start:end]
    before, after = _context(source.text, start, end, context_chars)
    answer.update(
        text=passage,
        occurrences=count_bounded(source.text, passage),
        chunk_ids=[
            c.chunk_id for c in source.chunks if _overlaps((c.char_start, c.char_end), start, end)
        ],
        context_before=before,
        context_after=after,
    )
    if source.segments:
        answer["cues"] = [
            {
                "index": index,
                "start_ms": int(source.segments[index]["start_ms"]),
                "end_ms": int(source.segments[index]["end_ms"]),
                "text": str(source.segments[index]["text"]),
            }
            for index, span in enumerate(source.cues)
            if span is not None and _overlaps(span, start, end)
        ]
    elif source.page_url:
        answer["fragment_url"] = fragment_url(
            source.page_url, source.text, start, end, source.folded
        )
    return answer
