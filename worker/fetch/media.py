"""Media types: the Content-Type header, and the WHATWG MIME Sniffing rules applied to bodies.

A declared type must be one the contract's output schema lists; a body served with no type is
sniffed; a binary body is refused whatever its label (`media_type`).
"""

from __future__ import annotations

import re

from worker.content.decoding import encoding_name, sniff_bom
from worker.domain.reasons import Reason
from worker.fetch.types import FetchFailure

#: The media types the output schema's `mime_type` allows.
ALLOWED_MIME_TYPES = frozenset(
    {
        "text/html",
        "application/xhtml+xml",
        "text/plain",
        "text/vtt",
        "application/x-subrip",
        "application/srt",
        "text/srt",
    }
)
#: Bytes inspected when sniffing a body (the MIME Sniffing standard's "resource header").
SNIFF_BYTES = 1445
#: The MIME Sniffing standard's "binary data bytes": C0 controls no text holds (TAB, LF, FF,
#: CR and ESC are text; ISO-2022-JP uses ESC). One in the first bytes makes a body binary.
_BINARY_DATA_BYTE = re.compile(rb"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")
_BINARY_DATA_CHAR = re.compile("[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f]")
#: The same without NUL and VT, for WebVTT: its parser turns NUL into U+FFFD and reads VT as
#: an ordinary character (a timings line holding one is dropped, the file is kept), so both
#: are text there, as browsers load such files.
_WEBVTT_BINARY_BYTE = re.compile(rb"[\x01-\x08\x0e-\x1a\x1c-\x1f]")
_WEBVTT_BINARY_CHAR = re.compile("[\x01-\x08\x0e-\x1a\x1c-\x1f]")
#: Encodings whose text is full of 0x00 bytes: after their BOM, characters are checked instead.
_WIDE_CODECS = frozenset({"utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"})

_BINARY_MAGIC = (
    b"\x89PNG",
    b"GIF8",
    b"\xff\xd8\xff",
    b"%PDF-",
    b"PK\x03\x04",
    b"PK\x05\x06",
    b"\x1f\x8b",
    b"BZh",
    b"\xfd7zXZ\x00",
    b"7z\xbc\xaf",
    b"Rar!",
    b"\x7fELF",
    b"MZ",
    b"\x00asm",
    b"RIFF",
    b"OggS",
    b"ID3",
    b"fLaC",
    b"\x1a\x45\xdf\xa3",
    b"wOFF",
    b"wOF2",
    b"\xca\xfe\xba\xbe",
)
_HTML_START = re.compile(
    rb"^\s*<(?:!doctype\s+html|html|head|body|!--|meta|title|p|div)[\s>]", re.I
)
_SRT_START = re.compile(rb"^\s*\d+\r?\n\d{1,2}:\d{2}:\d{2}[,.]\d{3}\s*-->")
_MP4_BOX = re.compile(rb"^....ftyp", re.S)


def parse_content_type(value: str | None) -> tuple[str | None, str | None]:
    """Media type (lower case) and charset (an Encoding Standard name) of a Content-Type."""
    if not value:
        return None, None
    mime, *params = value.split(";")
    charset: str | None = None
    for param in params:
        name, _, raw = param.partition("=")
        if name.strip().lower() == "charset":
            charset = encoding_name(raw)
    return mime.strip().lower() or None, charset


def is_webvtt_body(body: bytes) -> bool:
    """Whether a body opens with the WebVTT signature (after a UTF-8 BOM)."""
    return body.removeprefix(b"\xef\xbb\xbf").startswith(b"WEBVTT")


def looks_binary(body: bytes, *, webvtt: bool = False) -> bool:
    """True for bodies that are not text: a known magic number, or a binary data byte.

    With `webvtt`, NUL and VT are not binary data bytes (the WebVTT parser reads both).

    Text after a UTF-16 or UTF-32 byte-order mark is judged by its characters, since its bytes
    are full of zeros: it is binary when it does not decode or holds a binary data character.
    """
    codec, skip = sniff_bom(body)
    if codec in _WIDE_CODECS:
        pattern = _WEBVTT_BINARY_CHAR if webvtt else _BINARY_DATA_CHAR
        return _wide_text_is_binary(body[skip:SNIFF_BYTES], codec, pattern)
    head = body[:SNIFF_BYTES]
    if head.startswith(_BINARY_MAGIC) or _MP4_BOX.match(head):
        return True
    return (_WEBVTT_BINARY_BYTE if webvtt else _BINARY_DATA_BYTE).search(head) is not None


def _wide_text_is_binary(head: bytes, codec: str, pattern: re.Pattern[str]) -> bool:
    try:
        text = head.decode(codec)
    except UnicodeDecodeError as exc:
        if exc.reason not in ("truncated data", "unexpected end of data"):
            return True
        text = head[: exc.start].decode(codec)  # the sniffed bytes end inside a character
    return pattern.search(text) is not None


def sniff_text_type(body: bytes, path: str) -> str | None:
    """Guess a type for an undeclared body: WebVTT, SRT, HTML, plain text, else None."""
    codec, skip = sniff_bom(body)
    head = body[skip:SNIFF_BYTES]
    if codec in _WIDE_CODECS:
        head = head.decode(codec, errors="ignore").encode()
    lowered = path.lower().split("?")[0]
    if head.lstrip().startswith(b"WEBVTT") or lowered.endswith(".vtt"):
        return "text/vtt"
    if _SRT_START.match(head) or lowered.endswith(".srt"):
        return "application/x-subrip"
    if _HTML_START.match(head):
        return "text/html"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 3:
            return None
    return "text/plain"


def media_type(declared: str | None, body: bytes, path: str) -> str:
    """The checked media type of a body, or FetchFailure(unsupported_media).

    A declared type must be one of the output schema's (`application/octet-stream` is not: a
    browser would not render it as text, nor take it as a `<track>`); only a body served with
    no type at all is sniffed. Binary bodies are refused whatever their label; NUL and VT do
    not make a WebVTT body binary (served as text/vtt, or undeclared with the signature).
    """
    if declared is not None:
        if declared not in ALLOWED_MIME_TYPES:
            raise FetchFailure(Reason.UNSUPPORTED_MEDIA, f"content type {declared}")
        if looks_binary(body, webvtt=declared == "text/vtt"):
            raise FetchFailure(Reason.UNSUPPORTED_MEDIA, f"binary body served as {declared}")
        return declared
    if looks_binary(body, webvtt=is_webvtt_body(body)):
        raise FetchFailure(Reason.UNSUPPORTED_MEDIA, "undeclared binary body")
    sniffed = sniff_text_type(body, path)
    if sniffed is None:
        raise FetchFailure(Reason.UNSUPPORTED_MEDIA, "undeclared body is not text")
    return sniffed
