"""Finding a quote in a revision's text: exact, normalized (folded), fuzzy, or none.

In that order, the first that holds:

* `exact`: the quote (less leading and trailing whitespace) occurs in the text as it is;
* `normalized`: it occurs once both are folded (`folding`);
* `fuzzy`: folded, the quote aligns with a stretch of the text (rapidfuzz's
  `partial_ratio_alignment`) leaving no run of the quote or of the text unmatched longer than
  MAX_UNMATCHED_RUN characters, the quote adding no run longer than MAX_ADDED_RUN where the
  text has nothing in its place, and the passage answered (the aligned stretch grown to whole
  words) scores at least FUZZY_THRESHOLD against the quote (`fuzz.ratio`, 0-100: the Indel
  similarity, 100 × (1 − edits / total length));
* `none`.

It fails closed. An exact or normalized match must start and end at word boundaries where the
quote does (so "he said" is not found inside "she said"); a fuzzy one is grown to whole words.
Fuzzy matching needs a quote of at least MIN_FUZZY_CHARS folded characters, and is tried only
where the quote's seeds (short stretches of it, exactly as folded) occur in the text. A quote
stitched from two places leaves one of them unmatched in any one stretch, a run far longer than
MAX_UNMATCHED_RUN: `none`, unless each piece is asked for on its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from rapidfuzz import fuzz
from rapidfuzz.distance import Indel, LCSseq

from worker.content.quotes.folding import Folded, fold, fold_quote

MatchKind = Literal["exact", "normalized", "fuzzy", "none"]

#: Lowest partial_ratio score (0-100) a fuzzy match may have.
FUZZY_THRESHOLD = 90.0
#: Longest run of quote or text characters (folded) a fuzzy alignment may leave unmatched:
#: about three words, the most a light paraphrase changes in one place.
MAX_UNMATCHED_RUN = 24
#: Longest run of characters the quote adds where the text has none (or fewer), at its ends
#: included: about two short words. A clause tacked on from elsewhere is longer.
MAX_ADDED_RUN = 12
#: Shorter quotes (folded) are matched exactly or folded only: too little to align reliably.
MIN_FUZZY_CHARS = 20
#: Seeds: stretches of a twelfth of the quote (SEED_CHARS to MAX_SEED_CHARS folded characters:
#: long enough to be rare in a long text), at most MAX_SEEDS of them, spread over the quote;
#: each is looked for at most MAX_SEED_HITS times.
SEED_CHARS = 8
MAX_SEED_CHARS = 24
MAX_SEEDS = 16
MAX_SEED_HITS = 64
#: Candidate placements of the quote (the most seeded) aligned in full.
MAX_CANDIDATES = 3
#: Matched stretches shorter than this inside an unmatched run do not end it (chance letters).
MIN_ANCHOR = 4


@dataclass(frozen=True)
class Match:
    """Where a quote is in a text: `[start, end)` in code points of the original text."""

    kind: MatchKind
    start: int | None = None
    end: int | None = None
    #: 100.0 for exact and normalized matches, the alignment's score for fuzzy ones.
    score: float | None = None


NONE = Match("none")


def _spaced_word_char(char: str) -> bool:
    """A letter or digit of a script that separates words with spaces (not CJK, Thai...)."""
    return char.isalnum() and ord(char) < 0x0E00


def bounded(text: str, quote: str, start: int, end: int) -> bool:
    """Whether text[start:end] starts and ends at word boundaries where the quote does."""
    if start > 0 and _spaced_word_char(quote[0]) and _spaced_word_char(text[start - 1]):
        return False
    return not (end < len(text) and _spaced_word_char(quote[-1]) and _spaced_word_char(text[end]))


def find_bounded(text: str, quote: str, start: int = 0) -> int:
    """The first occurrence of `quote` in `text` at word boundaries, from `start`; -1 if none."""
    at = text.find(quote, start)
    while at >= 0 and not bounded(text, quote, at, at + len(quote)):
        at = text.find(quote, at + 1)
    return at


def count_bounded(text: str, quote: str, limit: int = 100) -> int:
    """How many times `quote` occurs in `text` at word boundaries (overlaps too), up to `limit`."""
    count, at = 0, find_bounded(text, quote)
    while at >= 0 and count < limit:
        count += 1
        at = find_bounded(text, quote, at + 1)
    return count


def _candidates(folded: str, quote: str) -> list[int]:
    """Folded offsets where the quote may start, most seeded first."""
    size = max(SEED_CHARS, min(MAX_SEED_CHARS, len(quote) // 12))
    last = len(quote) - size
    count = min(MAX_SEEDS, last // size + 1)
    votes: Counter[int] = Counter()
    for k in range(count):
        offset = last * k // max(1, count - 1)
        seed = quote[offset : offset + size]
        at, hits = folded.find(seed), 0
        while at >= 0 and hits < MAX_SEED_HITS:
            # Nearby placements vote together: edits shift a seed by a few characters.
            votes[(at - offset) // MAX_UNMATCHED_RUN] += 1
            at, hits = folded.find(seed, at + 1), hits + 1
    # One seed alone is chance when there are several: a placement needs two to be aligned.
    least = 2 if count > 2 else 1
    ranked = votes.most_common(MAX_CANDIDATES)
    return [bucket * MAX_UNMATCHED_RUN for bucket, n in ranked if n >= least]


def _unmatched(quote: str, stretch: str) -> tuple[int, int, int, int]:
    """(longest unmatched run, longest run the quote adds, offsets in `stretch` of the first
    and last matched character).

    Matched stretches are those of at least MIN_ANCHOR characters. Before the first and after
    the last, only the quote's unmatched characters count (the text around is no part of the
    match); between two, a run is the larger of what either side left unmatched, and the quote
    adds what it has there beyond what the text has. No matched stretch at all:
    (len(quote), len(quote), -1, -1)."""
    ops = list(Indel.opcodes(quote, stretch))
    anchors = [
        i
        for i, op in enumerate(ops)
        if op.tag == "equal" and op.src_end - op.src_start >= MIN_ANCHOR
    ]
    if not anchors:
        return len(quote), len(quote), -1, -1
    first, last = ops[anchors[0]], ops[anchors[-1]]
    # An alignment may pair the quote's first letters with chance letters further back: the
    # match starts where the text, read backwards from the first anchor, stops agreeing.
    head, begin = first.src_start, first.dest_start
    while head > 0 and begin > 0 and quote[head - 1] == stretch[begin - 1]:
        head, begin = head - 1, begin - 1
    tail, finish = last.src_end, last.dest_end
    while tail < len(quote) and finish < len(stretch) and quote[tail] == stretch[finish]:
        tail, finish = tail + 1, finish + 1
    longest = added = max(head, len(quote) - tail)
    for a, b in zip(anchors, anchors[1:], strict=False):
        gap_src = ops[b].src_start - ops[a].src_end
        gap_dest = ops[b].dest_start - ops[a].dest_end
        longest = max(longest, gap_src, gap_dest)
        added = max(added, gap_src - gap_dest)
    return longest, added, begin, finish


def _whole_words(text: str, start: int, end: int) -> tuple[int, int]:
    """`[start, end)` grown to whole words: an approximate match that starts or ends inside a
    word covers that word (the quote's first or last word differs from the text's)."""
    while start > 0 and _spaced_word_char(text[start - 1]) and _spaced_word_char(text[start]):
        start -= 1
    while end < len(text) and _spaced_word_char(text[end - 1]) and _spaced_word_char(text[end]):
        end += 1
    return start, end


def _fuzzy(folded: Folded, quote: str) -> Match:
    best = NONE
    # Edits shift a placement by their runs' lengths at most; the window allows for several.
    margin = len(quote) // 10 + 2 * MAX_UNMATCHED_RUN
    for start in _candidates(folded.text, quote):
        low = max(0, start - margin)
        window = folded.text[low : start + len(quote) + margin + MAX_UNMATCHED_RUN]
        # No stretch of the window can score more than 200 L / (len(quote) + L), L being the
        # quote's longest common subsequence with the whole window: a bound found in
        # microseconds, where an alignment that fails costs milliseconds.
        common = LCSseq.similarity(quote, window)
        if 200 * common / (len(quote) + common) < FUZZY_THRESHOLD:
            continue
        aligned = fuzz.partial_ratio_alignment(quote, window, score_cutoff=FUZZY_THRESHOLD)
        if aligned is None:
            continue
        # Let the stretch grow by a run on each side: partial_ratio's stretch is exactly as
        # long as the quote, so a quote that dropped a word ends short of the source's end.
        lo = max(0, aligned.dest_start - MAX_UNMATCHED_RUN)
        stretch = window[lo : aligned.dest_end + MAX_UNMATCHED_RUN]
        longest, added, first, last = _unmatched(quote, stretch)
        if first < 0 or longest > MAX_UNMATCHED_RUN or added > MAX_ADDED_RUN:
            continue
        begin, end = _whole_words(folded.text, low + lo + first, low + lo + last)
        # The score is that of the quote against the passage answered, as the caller sees it.
        score = fuzz.ratio(quote, folded.text[begin:end])
        if score >= FUZZY_THRESHOLD and (best.score is None or score > best.score):
            best = Match("fuzzy", *folded.span(begin, end), score=round(score, 1))
    return best


def match_quote(text: str, quote: str, folded_text: Callable[[], Folded] | None = None) -> Match:
    """Where `quote` is in `text` (`folded_text`: gives `fold(text)`, when the caller keeps it;
    asked only when the quote is not found as it is)."""
    plain = quote.strip()
    if not plain:
        return NONE
    at = find_bounded(text, plain)
    if at >= 0:
        return Match("exact", at, at + len(plain), 100.0)
    folded = fold(text) if folded_text is None else folded_text()
    needle = fold_quote(plain)
    if not needle:
        return NONE
    at = find_bounded(folded.text, needle)
    if at >= 0:
        return Match("normalized", *folded.span(at, at + len(needle)), score=100.0)
    if len(needle) < MIN_FUZZY_CHARS:
        return NONE
    return _fuzzy(folded, needle)
