"""Numbers in header values, read strictly: ASCII digits only, and never an unbounded `int()`.

`str.isdigit()` also takes superscripts and other scripts' digits ("²", "٣"), which `int()` then
refuses or reads as numbers no client meant; and `int()` of more than 4 300 digits raises. Both
were 500s (`Prefer: wait=²`, `Cache-Control: max-age=` and 5 000 digits).
"""

from __future__ import annotations

_ASCII_DIGITS = frozenset("0123456789")


def decimal(text: str, cap: int) -> int | None:
    """The non-negative integer `text` spells in ASCII digits, at most `cap`; None otherwise."""
    if not text or not _ASCII_DIGITS.issuperset(text):
        return None
    significant = text.lstrip("0")
    if len(significant) > len(str(cap)):
        return cap  # more digits than the cap has: larger, without converting them
    return min(int(significant or "0"), cap)
