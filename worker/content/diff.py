"""What changed in a text between two evidence revisions: a bounded, line-based unified diff.

Why not `difflib.unified_diff` as it is: `SequenceMatcher` without its "autojunk" heuristic
is cubic on texts of many repeated lines (measured: 2 000 lines of "x", "y", "z" against
"y", "x" take 41 s), and with the heuristic it silently treats frequent lines (blank ones,
"[Music]") as unmatchable. So the matcher here keeps exact matching but counts its work (the
candidate positions `find_longest_match` visits); past MAX_MATCH_WORK it stops and answers a
coarse diff instead: the common leading and trailing lines kept, everything between them
replaced (`approximate: true`). The inputs are cut to MAX_INPUT_CHARS / MAX_INPUT_LINES and
the unified text to MAX_OUTPUT_LINES / MAX_OUTPUT_BYTES (`truncated: true`); stored texts are
at most 20 000 characters (the contract's bound), so neither cut is reached by the service's
own revisions. The counts cover every hunk, not only the lines that fit in the output.
"""

from __future__ import annotations

import difflib
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TypedDict

#: Each side is cut to this many characters, then to this many lines, before it is compared.
MAX_INPUT_CHARS = 2_000_000
MAX_INPUT_LINES = 50_000
#: Candidate positions the matcher may visit (about 0.5 s of CPU) before it answers coarsely.
MAX_MATCH_WORK = 2_000_000
#: The unified diff is cut at a line boundary to fit both bounds (UTF-8 bytes).
MAX_OUTPUT_LINES = 5_000
MAX_OUTPUT_BYTES = 262_144
#: Unchanged lines shown around each change, as `diff -u`.
CONTEXT_LINES = 3


class TextDiff(TypedDict):
    """The change from one text to another."""

    #: `diff -u` format: `---`/`+++` headers, then `@@` hunks; "" when the texts are equal.
    unified: str
    lines_added: int
    lines_removed: int
    #: The work bound was hit: the changed region is one replacement, not the smallest diff.
    approximate: bool
    #: An input or the unified text was cut to its bound.
    truncated: bool


class _OverBudget(Exception):
    """Raised inside the matcher when it has used its MAX_MATCH_WORK."""


class _BoundedMatcher(difflib.SequenceMatcher[str]):
    """A SequenceMatcher (no junk heuristic) that raises _OverBudget past a work budget."""

    def __init__(self, a: Sequence[str], b: Sequence[str], budget: int) -> None:
        self.lines, self.budget = (a, b), budget
        self.occurrences = Counter(b)
        super().__init__(None, a, b, autojunk=False)

    def find_longest_match(
        self, alo: int = 0, ahi: int | None = None, blo: int = 0, bhi: int | None = None
    ) -> difflib.Match:
        a = self.lines[0]
        stop = len(a) if ahi is None else ahi
        # The positions the search visits: each line of a's range, and where it occurs in b.
        self.budget -= stop - alo + sum(self.occurrences[line] for line in a[alo:stop])
        if self.budget < 0:
            raise _OverBudget
        return super().find_longest_match(alo, ahi, blo, bhi)


class _EndsMatcher(difflib.SequenceMatcher[str]):
    """A SequenceMatcher that matches only the common leading and trailing lines."""

    def __init__(self, a: Sequence[str], b: Sequence[str]) -> None:
        self.lines = (a, b)
        super().__init__(None, a, b, autojunk=False)

    def get_matching_blocks(self) -> list[difflib.Match]:
        return _ends(*self.lines)


def _ends(a: Sequence[str], b: Sequence[str]) -> list[difflib.Match]:
    """Matching blocks of the common leading and trailing lines only."""
    limit = min(len(a), len(b))
    head = 0
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    blocks = [difflib.Match(0, 0, head)] if head else []
    if tail:
        blocks.append(difflib.Match(len(a) - tail, len(b) - tail, tail))
    return [*blocks, difflib.Match(len(a), len(b), 0)]


def _lines(text: str) -> tuple[list[str], bool]:
    """The text's lines within the input bounds, and whether it was cut."""
    cut = len(text) > MAX_INPUT_CHARS
    lines = text[:MAX_INPUT_CHARS].splitlines()
    if len(lines) > MAX_INPUT_LINES:
        return lines[:MAX_INPUT_LINES], True
    return lines, cut


def _range(start: int, length: int) -> str:
    """A hunk's `start,length` as `diff -u` writes it (1-based; an empty range names the line
    before it)."""
    first = start + 1 if length else start
    return str(first) if length == 1 else f"{first},{length}"


def _unified(
    matcher: difflib.SequenceMatcher[str],
    a: Sequence[str],
    b: Sequence[str],
    labels: tuple[str, str],
) -> Iterator[str]:
    yield f"--- {labels[0]}"
    yield f"+++ {labels[1]}"
    for group in matcher.get_grouped_opcodes(CONTEXT_LINES):
        first, last = group[0], group[-1]
        old = _range(first[1], last[2] - first[1])
        new = _range(first[3], last[4] - first[3])
        yield f"@@ -{old} +{new} @@"
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                yield from (" " + line for line in a[i1:i2])
                continue
            yield from ("-" + line for line in a[i1:i2])
            yield from ("+" + line for line in b[j1:j2])


def _bounded(lines: Iterator[str]) -> tuple[str, bool]:
    """Join lines up to MAX_OUTPUT_LINES and MAX_OUTPUT_BYTES; say whether any were left."""
    kept: list[str] = []
    size = 0
    for line in lines:
        size += len(line.encode()) + 1
        if len(kept) == MAX_OUTPUT_LINES or size > MAX_OUTPUT_BYTES:
            return "\n".join(kept), True
        kept.append(line)
    return "\n".join(kept), False


def diff_text(
    old: str, new: str, labels: tuple[str, str] = ("a", "b"), budget: int = MAX_MATCH_WORK
) -> TextDiff:
    """The line diff from `old` to `new`, its counts, and whether it was cut or approximated.

    Lines are split as `str.splitlines` does, so a text and the same text with a final line
    break compare equal. `labels` name the two sides in the `---`/`+++` headers.
    """
    a, cut_a = _lines(old)
    b, cut_b = _lines(new)
    if a == b:
        return _text_diff("", 0, 0, approximate=False, truncated=cut_a or cut_b)
    matcher: difflib.SequenceMatcher[str] = _BoundedMatcher(a, b, budget)
    try:
        opcodes = matcher.get_opcodes()
    except _OverBudget:
        matcher = _EndsMatcher(a, b)
        opcodes = matcher.get_opcodes()
    approximate = isinstance(matcher, _EndsMatcher)
    removed = sum(i2 - i1 for tag, i1, i2, _, _ in opcodes if tag in ("replace", "delete"))
    added = sum(j2 - j1 for tag, _, _, j1, j2 in opcodes if tag in ("replace", "insert"))
    unified, truncated = _bounded(_unified(matcher, a, b, labels))
    return _text_diff(
        unified, added, removed, approximate=approximate, truncated=cut_a or cut_b or truncated
    )


def _text_diff(
    unified: str, added: int, removed: int, *, approximate: bool, truncated: bool
) -> TextDiff:
    return {
        "unified": unified,
        "lines_added": added,
        "lines_removed": removed,
        "approximate": approximate,
        "truncated": truncated,
    }
