"""Untrusted text: decode bytes robustly and clean what a page or caption file says."""

import codecs
import re
import unicodedata

#: How far into a body `<meta charset>` is looked for, in bytes.
META_SCAN_BYTES = 4_096

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
#: Labels browsers decode as windows-1252 (WHATWG Encoding Standard).
_AS_CP1252 = frozenset({"iso8859-1", "ascii", "latin-1", "cp1252"})
_META_CHARSET = re.compile(
    rb"""<meta[^>]{0,512}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]{1,40})""", re.IGNORECASE
)
_LINE_SEPARATORS = str.maketrans({"\u2028": "\n", "\u2029": "\n\n", "\x0b": "\n", "\x0c": "\n"})
_SPACES = re.compile(r"[^\S\n]+")
_BLANK_RUNS = re.compile(r"\n{3,}")
#: What `strip_invisible` drops from ASCII text: the C0 controls but tab and newline, and DEL.
_ASCII_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]+")


def codec_for(label: str | None) -> str | None:
    """Return Python's codec name for a charset label, or None when unknown."""
    if not label:
        return None
    try:
        name = codecs.lookup(label.strip().strip("\"'")).name
    except (LookupError, ValueError):
        return None
    return "cp1252" if name in _AS_CP1252 else name


def sniff_bom(body: bytes) -> tuple[str | None, int]:
    """Return the codec a byte-order mark names and the mark's length, or (None, 0)."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name, len(bom)
    return None, 0


def meta_charset(body: bytes) -> str | None:
    """Return the codec named by `<meta charset>` / `<meta http-equiv>` near the start."""
    match = _META_CHARSET.search(body[:META_SCAN_BYTES])
    if not match:
        return None
    codec = codec_for(match.group(1).decode("ascii", "ignore"))
    # A page that says it is UTF-16 in ASCII-compatible bytes is not UTF-16.
    return "utf-8" if codec and codec.startswith("utf-16") else codec


def decode_body(body: bytes, header_charset: str | None = None, *, html: bool = True) -> str:
    """Decode a body: BOM, else header charset, else <meta>, else UTF-8, cp1252, latin-1."""
    bom_codec, bom_len = sniff_bom(body)
    if bom_codec:
        return body[bom_len:].decode(bom_codec, errors="replace")
    declared = codec_for(header_charset) or (meta_charset(body) if html else None)
    if declared:
        try:
            return body.decode(declared)
        except UnicodeDecodeError:
            if declared != "utf-8" and not _looks_utf8(body):
                return body.decode(declared, errors="replace")
    for codec in ("utf-8", "cp1252"):
        try:
            return body.decode(codec)
        except UnicodeDecodeError:
            continue
    return body.decode("latin-1")


def _looks_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _keep(char: str) -> bool:
    """Whether a character survives cleaning (no controls, format or surrogate characters)."""
    if char in "\n\t":
        return True
    return unicodedata.category(char) not in ("Cc", "Cf", "Cs")


def strip_invisible(text: str) -> str:
    """Remove control, zero-width, bidi, BOM, soft-hyphen and tag characters.

    ASCII goes through one regular expression; otherwise each distinct character is judged
    once and one `translate` drops them all (megabytes of text: no Python loop per character).
    """
    if text.isascii():
        return _ASCII_CONTROLS.sub("", text)
    dropped = {ord(c): None for c in set(text) if not _keep(c)}
    return text.translate(dropped) if dropped else text


def clean_text(text: str) -> str:
    """Return untrusted text as NFC, invisible-free, with collapsed spaces and paragraphs kept."""
    text = text.replace("\r\n", "\n").replace("\r", "\n").translate(_LINE_SEPARATORS)
    text = strip_invisible(unicodedata.normalize("NFC", text))
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _BLANK_RUNS.sub("\n\n", "\n".join(lines)).strip()


def clean_inline(text: str | None) -> str | None:
    """Clean a one-line value (title, description): every whitespace run becomes one space."""
    if text is None:
        return None
    cleaned = " ".join(clean_text(text).split())
    return cleaned or None
