"""Untrusted text: clean what a page or caption file says (decoding: `worker.content.decoding`)."""

import re
import unicodedata

_LINE_SEPARATORS = str.maketrans({"\u2028": "\n", "\u2029": "\n\n", "\x0b": "\n", "\x0c": "\n"})
_SPACES = re.compile(r"[^\S\n]+")
_BLANK_RUNS = re.compile(r"\n{3,}")
#: What `strip_invisible` drops from ASCII text: the C0 controls but tab and newline, and DEL.
_ASCII_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]+")
#: The bidi marks (LRM, RLM, ALM): captions keep them, as mixed-direction lines need them to be
#: shown in the right order, and unlike embeddings, overrides and isolates they open nothing.
BIDI_MARKS = frozenset("\u200e\u200f\u061c")


def _keep(char: str, keep: frozenset[str] = frozenset()) -> bool:
    """Whether a character survives cleaning (no controls, format or surrogate characters)."""
    if char in "\n\t" or char in keep:
        return True
    return unicodedata.category(char) not in ("Cc", "Cf", "Cs")


def strip_invisible(text: str, keep: frozenset[str] = frozenset()) -> str:
    """Remove control, zero-width, bidi, BOM, soft-hyphen and tag characters (but `keep`).

    ASCII goes through one regular expression; otherwise each distinct character is judged
    once and one `translate` drops them all (megabytes of text: no Python loop per character).
    """
    if text.isascii():
        return _ASCII_CONTROLS.sub("", text)
    dropped = {ord(c): None for c in set(text) if not _keep(c, keep)}
    return text.translate(dropped) if dropped else text


def clean_text(text: str, keep: frozenset[str] = frozenset()) -> str:
    """Return untrusted text as NFC, invisible-free (but `keep`), spaces collapsed, paragraphs
    kept."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_LINE_SEPARATORS)
    text = strip_invisible(unicodedata.normalize("NFC", text), keep)
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def clean_inline(text: str | None) -> str | None:
    """Clean a one-line value (title, description): every whitespace run becomes one space."""
    if text is None:
        return None
    cleaned = " ".join(clean_text(text).split())
    return cleaned or None
