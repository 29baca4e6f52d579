"""Where each caption cue is in a caption revision's text.

A caption revision's text is its cues' lines joined, with what rolling captions repeat said
once (`worker.content.captions.collapse_rolling`), cut at the text bound. The cues are placed
in it by aligning words: each cue's words, less those that repeat the end of the cue before
(as the text drops them), are aligned with the text's words (rapidfuzz's Indel alignment over
word sequences), and a cue's span runs from its first to its last aligned word.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from rapidfuzz.distance import Indel

_WORD = re.compile(r"\S+")

Span = tuple[int, int]


def _repeated(previous: list[str], current: list[str]) -> int:
    """How many leading words of `current` repeat the end of `previous` (two or more, or all)."""
    for k in range(min(len(previous), len(current)), 0, -1):
        if previous[-k:] == current[:k] and (k >= 2 or k == len(current)):
            return k
    return 0


def cue_spans(text: str, segments: Sequence[Mapping[str, Any]]) -> list[Span | None]:
    """Each cue's `[start, end)` in `text`, or None for a cue the text does not say (all its
    words repeat the cue before, or the text was cut before it)."""
    found = [(m.start(), m.end()) for m in _WORD.finditer(text)]
    words: list[str] = []
    owner: list[int] = []
    previous: list[str] = []
    for index, segment in enumerate(segments):
        current = str(segment.get("text", "")).split()
        for word in current[_repeated(previous, current) :]:
            words.append(word)
            owner.append(index)
        previous = current
    spans: list[Span | None] = [None] * len(segments)
    for op in Indel.opcodes(words, [text[s:e] for s, e in found]):
        if op.tag != "equal":
            continue
        for k in range(op.src_end - op.src_start):
            cue = owner[op.src_start + k]
            start, end = found[op.dest_start + k]
            known = spans[cue]
            spans[cue] = (start, end) if known is None else (min(known[0], start), end)
    return spans
