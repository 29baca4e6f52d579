"""Bytes to text the way browsers do it: the WHATWG Encoding Standard's labels, HTML's order.

The one place a body is decoded. Order: a byte-order mark, then the Content-Type charset,
then (for HTML only) `<meta charset>` / `<meta http-equiv>` near the start, then sniffing:
UTF-8 when the bytes are UTF-8, otherwise windows-1252 (HTML's default for unlabelled
legacy pages). Only the Encoding Standard's labels name an encoding (`webencodings` holds its
table); any other label, a codec that is no text encoding ("rot13", "base64", "zlib", "hex",
"uu", "bz2", "quopri", "idna", "punycode"...) or the "replacement" encoding is ignored as if
it were absent. Decoding never raises.
"""

from __future__ import annotations

import codecs
import re

import webencodings

#: How far into a body `<meta charset>` is looked for, in bytes.
META_SCAN_BYTES = 4_096
#: The longest label the Encoding Standard has is 19 characters; anything longer is junk.
MAX_LABEL_CHARS = 40

#: Byte-order marks, longest first (a UTF-32LE mark starts like a UTF-16LE one). UTF-32 is not
#: in the Encoding Standard, but a body that starts with its mark is UTF-32 text, not UTF-16.
BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
#: Encodings a label may name whose Python codecs differ from the Standard's decoders: its GBK
#: decoder is the GB18030 one (a superset of Python's gbk).
_PYTHON_CODECS = {"gbk": "gb18030"}
#: Encoding Standard names `<meta>` may not choose: an ASCII-readable declaration cannot be
#: in UTF-16, and x-user-defined in markup means windows-1252 (HTML, "prescan").
_META_OVERRIDES = {"utf-16le": "utf-8", "utf-16be": "utf-8", "x-user-defined": "windows-1252"}
_META_CHARSET = re.compile(
    rb"""<meta[^>]{0,512}?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]{1,40})""", re.IGNORECASE
)
#: Undefined windows-1252 bytes (0x81, 0x8D, 0x8F, 0x90, 0x9D) are the C1 controls of the same
#: number in the Standard's index; Python's cp1252 refuses them.
_C1_ERRORS = "evidence-windows-1252-c1"


def _c1_controls(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeDecodeError):
        raise error
    return error.object[error.start : error.end].decode("latin-1"), error.end


codecs.register_error(_C1_ERRORS, _c1_controls)


def encoding_name(label: str | None) -> str | None:
    """The Encoding Standard's name for `label` ("latin1" → "windows-1252"), or None.

    None for an empty or unknown label, for "replacement" (its labels name legacy encodings
    that are never decoded), and for anything whose codec is not a text encoding.
    """
    if not label or len(label) > MAX_LABEL_CHARS:
        return None
    encoding = webencodings.lookup(label.strip().strip("\"'"))
    if encoding is None or encoding.name == "replacement":
        return None
    if not getattr(encoding.codec_info, "_is_text_encoding", False):
        return None
    return str(encoding.name)


def python_codec(name: str) -> codecs.CodecInfo:
    """The Python codec that decodes the Encoding Standard's encoding `name`."""
    encoding = webencodings.lookup(name)
    if encoding is None:
        raise LookupError(name)
    if name in _PYTHON_CODECS:
        return codecs.lookup(_PYTHON_CODECS[name])
    return encoding.codec_info


def sniff_bom(body: bytes) -> tuple[str | None, int]:
    """The Python codec a byte-order mark names and the mark's length, or (None, 0)."""
    for bom, codec in BOMS:
        if body.startswith(bom):
            return codec, len(bom)
    return None, 0


def meta_charset(body: bytes) -> str | None:
    """The encoding `<meta charset>` or `<meta http-equiv>` names near the start, or None."""
    match = _META_CHARSET.search(body[:META_SCAN_BYTES])
    if not match:
        return None
    name = encoding_name(match.group(1).decode("ascii", "ignore"))
    return _META_OVERRIDES.get(name, name) if name else None


def decode_with(body: bytes, name: str) -> str:
    """Decode with the Encoding Standard's encoding `name`; bad bytes become U+FFFD."""
    errors = _C1_ERRORS if name == "windows-1252" else "replace"
    return python_codec(name).decode(body, errors)[0]


def _is_utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as error:
        # A body cut at the byte bound may end inside a character: that is still UTF-8.
        return error.reason == "unexpected end of data" and error.start >= len(body) - 3
    return True


def declared_encoding(body: bytes, header_charset: str | None, *, html: bool) -> str | None:
    """The encoding a body declares: the Content-Type charset, else (HTML) `<meta>`."""
    return encoding_name(header_charset) or (meta_charset(body) if html else None)


def decode_body(body: bytes, header_charset: str | None = None, *, html: bool = True) -> str:
    """Decode a body: BOM, else header charset, else (HTML) `<meta>`, else UTF-8 or windows-1252.

    A body that is valid UTF-8 but declared as something it is not valid in (a page served
    with a stale charset) is read as UTF-8.
    """
    bom_codec, bom_len = sniff_bom(body)
    if bom_codec:
        return body[bom_len:].decode(bom_codec, errors="replace")
    declared = declared_encoding(body, header_charset, html=html)
    if declared:
        try:
            return python_codec(declared).decode(body, "strict")[0]
        except UnicodeDecodeError:
            if declared == "utf-8" or not _is_utf8(body):
                return decode_with(body, declared)
    return decode_with(body, "utf-8" if _is_utf8(body) else "windows-1252")
