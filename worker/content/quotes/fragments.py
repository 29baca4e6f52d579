"""Text-fragment links to a quoted passage (WICG Text Fragments: `url#:~:text=…`).

The directive is `text=[prefix-,]textStart[,textEnd][,-suffix]`, each term percent-encoded, `-`,
`&` and `,` included (they are the directive's syntax). A browser matches terms case-insensitively,
at word boundaries, and a term never spans two blocks (paragraphs): so a passage on one line of
the revision's text, up to MAX_EXACT_CHARS long, is quoted whole (`textStart`), and a longer one
or one that crosses lines by its first and last EDGE_WORDS words (`textStart,textEnd`).

A browser takes the first place in the page where the directive matches. When the directive
would match more than that one place in the revision's text, it gains words before (`prefix-`)
and after (`-suffix`), as many as needed up to MAX_CONTEXT_WORDS, so that it names the quoted
place alone. The page may show text the revision does
not (menus, footers): the check is against the revision's text, the best knowledge we have.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import islice
from urllib.parse import quote as percent

from worker.content.quotes.folding import Folded, fold, fold_quote
from worker.content.quotes.matching import bounded, find_bounded

#: Passages on one line up to this many characters are quoted whole.
MAX_EXACT_CHARS = 300
#: Words of a long passage's first and last lines that stand for it.
EDGE_WORDS = 5
#: Words of context tried before and after, in turn.
CONTEXT_STEPS = (0, 2, 4, 8)
MAX_CONTEXT_WORDS = CONTEXT_STEPS[-1]
_WORD = re.compile(r"\S+")


def encode(term: str) -> str:
    """A term percent-encoded for a text directive: `-`, `&`, `,` and all but unreserved."""
    return percent(term, safe="").replace("-", "%2D")


def _needle(words: tuple[str, ...]) -> str:
    return fold_quote(" ".join(words))


def _preceded(text: str, at: int, words: str) -> bool:
    """Whether folded `words` end just before `at`, with at most a space between (a folded
    text has single spaces only)."""
    end = at - 1 if at > 0 and text[at - 1] == " " else at
    start = end - len(words)
    return not words or (text.startswith(words, start) and bounded(text, words, start, end))


def _followed(text: str, at: int, words: str) -> bool:
    """Whether folded `words` follow `at`, with at most a space between."""
    start = at + 1 if text.startswith(" ", at) else at
    end = start + len(words)
    return not words or (text.startswith(words, start) and bounded(text, words, start, end))


def matches(
    folded: Folded,
    start: tuple[str, ...],
    end: tuple[str, ...] | None,
    prefix: tuple[str, ...],
    suffix: tuple[str, ...],
) -> Iterator[tuple[int, int]]:
    """The ranges (of the original text) a browser could highlight for this directive, in
    order: it takes the first. Compared folded (a browser's matching ignores case and
    collapses whitespace; our folding goes a little further, which errs towards context)."""
    text = folded.text
    first, last = _needle(start), _needle(end) if end else ""
    before, after = _needle(prefix) if prefix else "", _needle(suffix) if suffix else ""
    at, closing = find_bounded(text, first), -1
    while at >= 0:
        stop = at + len(first)
        if last:
            if closing < stop:  # the next end after this start (found once for many starts)
                closing = find_bounded(text, last, stop)
            if closing < 0:
                return
            stop = closing + len(last)
        if _preceded(text, at, before) and _followed(text, stop, after):
            yield folded.span(at, stop)
        at = find_bounded(text, first, at + 1)


def terms(passage: str) -> tuple[tuple[str, ...], tuple[str, ...] | None]:
    """(textStart, textEnd or None) of a passage, as words."""
    lines = [line.split() for line in passage.splitlines() if line.strip()]
    if not lines:
        return (), None
    if len(lines) == 1 and len(passage) <= MAX_EXACT_CHARS:
        return tuple(lines[0]), None
    if len(lines) == 1 and len(lines[0]) <= 2 * EDGE_WORDS:
        return tuple(lines[0]), None  # a few very long words: whole, there is no shorter way
    return tuple(lines[0][:EDGE_WORDS]), tuple(lines[-1][-EDGE_WORDS:])


def directive(text: str, start: int, end: int, folded: Folded | None = None) -> str | None:
    """The `text=…` directive for `text[start:end]` (`folded`: `fold(text)`, when the caller
    keeps it); None when there is nothing to quote."""
    first, last = terms(text[start:end])
    if not first:
        return None
    folded = fold(text) if folded is None else folded
    before = [m.group() for m in _WORD.finditer(text, max(0, start - 400), start)]
    after = [m.group() for m in _WORD.finditer(text, end, end + 400)]
    prefix: tuple[str, ...] = ()
    suffix: tuple[str, ...] = ()
    for n in CONTEXT_STEPS:
        prefix = tuple(before[-n:]) if n else ()
        suffix = tuple(after[:n])
        found = [at for at, _ in islice(matches(folded, first, last, prefix, suffix), 2)]
        if found == [start]:
            break
    parts = [encode(" ".join(first))]
    if last is not None:
        parts.append(encode(" ".join(last)))
    if prefix:
        parts.insert(0, encode(" ".join(prefix)) + "-")
    if suffix:
        parts.append("-" + encode(" ".join(suffix)))
    return "text=" + ",".join(parts)


def fragment_url(
    url: str, text: str, start: int, end: int, folded: Folded | None = None
) -> str | None:
    """`url#:~:text=…` for `text[start:end]` (the page at `url` is the revision's source)."""
    found = directive(text, start, end, folded)
    return None if found is None else f"{url.split('#', 1)[0]}#:~:{found}"
