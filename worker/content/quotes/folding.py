"""Folding text for quote comparison, with a map from the folded text back to the original.

Folded, two texts compare equal when they differ only in:

* Unicode compatibility forms: each character is taken in its NFKD form (two strings are
  NFKC-equal exactly when they are NFKD-equal; the decomposed form lets "é" and "e" + U+0301
  fold alike one character at a time), so ligatures, full-width forms, superscripts and "…"
  (three full stops) fold to their plain letters;
* case (`str.casefold`: "Straße" and "STRASSE" fold alike);
* typographic quotes (‘ ’ ‚ ‛ ′ ` ´ to ', “ ” „ ‟ ″ « » to ") and dashes (hyphen, non-breaking
  hyphen, figure, en and em dashes, the horizontal bar, minus: all to "-"); the space French
  typography puts inside guillemets goes with them ("« Oui »" folds as "\"oui\"");
* whitespace: every run of whitespace (no-break spaces and line breaks included) is one space;
* invisible characters: soft hyphens, zero-width spaces and joiners and byte-order marks are
  dropped.

Offsets are code points (Python string indexes). `Folded.span` maps a folded `[start, end)`
back to the original text's `[start, end)`, covering whole original characters: a match that
starts inside "ß" (folded "ss") starts at that "ß".
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

#: Dropped: they change how text wraps or is encoded, never what it says.
INVISIBLE = "\u00ad\u200b\u200c\u200d\u2060\ufeff"
_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2018\u2019\u201a\u201b\u2032\u0060\u00b4", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f\u2033\u00ab\u00bb", '"'),
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58", "-"),
    }
)


@lru_cache(maxsize=65_536)
def fold_char(char: str) -> str:
    """One character folded: "" (invisible), " " (whitespace), or its folded form."""
    if char in INVISIBLE:
        return ""
    if char.isspace():
        return " "
    if ord(char) in _PUNCTUATION:  # before NFKD, which makes "″" two primes
        return str(_PUNCTUATION[ord(char)])
    decomposed = unicodedata.normalize("NFKD", char)
    folded = unicodedata.normalize("NFKD", decomposed.casefold()).translate(_PUNCTUATION)
    # NFKD of a few spacing marks starts with a space (U+00A8 is " " + U+0308): keep no space
    # that whitespace folding would not have made.
    return folded.replace(" ", "") if len(folded) > 1 else folded


@dataclass(frozen=True)
class Folded:
    """A text folded, and where each folded character came from."""

    text: str
    #: Folded positions where the original and folded texts stop running in step, each with
    #: the original span `[orig_start, orig_end)` the next `length` folded characters stand for.
    _at: tuple[int, ...]
    _orig_start: tuple[int, ...]
    _orig_end: tuple[int, ...]
    _length: tuple[int, ...]

    def start(self, index: int) -> int:
        """Original offset where folded character `index` starts."""
        k = bisect.bisect_right(self._at, index) - 1
        if k < 0:
            return index
        if index < self._at[k] + self._length[k]:
            return self._orig_start[k]
        return self._orig_end[k] + index - self._at[k] - self._length[k]

    def end(self, index: int) -> int:
        """Original offset where folded character `index` ends (exclusive)."""
        k = bisect.bisect_right(self._at, index) - 1
        if k < 0:
            return index + 1
        if index < self._at[k] + self._length[k]:
            return self._orig_end[k]
        return self._orig_end[k] + index - self._at[k] - self._length[k] + 1

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original `[start, end)` of folded `[start, end)` (end > start)."""
        return self.start(start), self.end(end - 1)


#: Guillemets with the space inside them: one token, folded to '"'.
_GUILLEMETS = f"«[\\s\u202f{INVISIBLE}]*|[\\s\u202f{INVISIBLE}]*»"


@lru_cache(maxsize=256)
def _pattern(irregular: str) -> re.Pattern[str]:
    """Guillemets with their inner space; runs of whitespace and invisible characters other
    than one plain space; any other character whose fold is not exactly one character. The
    lookahead lets the scan pass over ordinary letters at one test each."""
    gaps = "\\s" + re.escape(INVISIBLE)
    others = f"|[{re.escape(irregular)}]" if irregular else ""
    places = f"{_GUILLEMETS}|[{gaps}]{{2,}}|[^\\S ]|[{re.escape(INVISIBLE)}]{others}"
    return re.compile(f"(?=[{gaps}{re.escape(irregular)}«»\u202f])(?:{places})")


@lru_cache(maxsize=256)
def _remap(chars: str) -> re.Pattern[str]:
    return re.compile(f"[{re.escape(chars)}]")


def fold(text: str) -> Folded:
    """`text` folded, with its offset map.

    The stretches between the places where lengths differ (whitespace runs, "ß", "…",
    decomposed accents) are case-folded in C (`str.casefold`), and the few characters whose fold
    differs from their case fold (typographic quotes, dashes, full-width forms) replaced by one
    regular expression: a long, mostly plain text folds at C speed, and only those places are
    walked one at a time.
    """
    remap: dict[str, str] = {}
    irregular = []
    for char in set(text):
        if char.isspace() or char in INVISIBLE:
            continue
        folded = fold_char(char)
        if len(folded) != 1:
            irregular.append(char)
        elif folded != char.casefold():
            remap[char.casefold()] = folded
    pieces: list[str] = []
    at: list[int] = []
    starts: list[int] = []
    ends: list[int] = []
    lengths: list[int] = []
    size = previous = 0
    for found in _pattern("".join(sorted(irregular))).finditer(text):
        plain = text[previous : found.start()].casefold()
        pieces.append(plain)
        size += len(plain)
        run = found.group()
        if "«" in run or "»" in run:
            replacement = '"'
        elif len(run) == 1 and not run.isspace() and run not in INVISIBLE:
            replacement = fold_char(run)
        else:
            replacement = " " if any(c.isspace() for c in run) else ""
        pieces.append(replacement)
        at.append(size)
        starts.append(found.start())
        ends.append(found.end())
        lengths.append(len(replacement))
        size += len(replacement)
        previous = found.end()
    pieces.append(text[previous:].casefold())
    joined = "".join(pieces)
    if remap:
        joined = _remap("".join(sorted(remap))).sub(lambda m: remap[m.group()], joined)
    return Folded(joined, tuple(at), tuple(starts), tuple(ends), tuple(lengths))


def fold_quote(quote: str) -> str:
    """A quote folded for searching: folded, without leading or trailing spaces."""
    return fold(quote).text.strip(" ")
