"""Classification at the edge: exceptions, HTTP statuses and media types to contract reasons.

Everything the network can throw is translated here, once (`map_fetch_errors`), so the rest
of the service only ever sees `FetchFailure` with a contract `Reason`.
"""

from __future__ import annotations

import re
import ssl
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import brotli
import httpcore
import httpx
import structlog

from worker.content.decoding import encoding_name, sniff_bom
from worker.fetch.egress import EgressBlocked, ResolutionFailed
from worker.fetch.types import FetchFailure
from worker.reasons import Reason

log = structlog.get_logger(__name__)

#: Retry-After used when the header is absent or unparseable, in seconds.
DEFAULT_RETRY_AFTER_SECONDS = 60
#: Bounds applied to any Retry-After, in seconds.
MIN_RETRY_AFTER_SECONDS = 1
MAX_RETRY_AFTER_SECONDS = 86_400

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
#: The same without NUL, for WebVTT: its parser turns NUL into U+FFFD, so NUL is text there.
_BINARY_DATA_BYTE_BUT_NUL = re.compile(rb"[\x01-\x08\x0b\x0e-\x1a\x1c-\x1f]")
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


@dataclass
class Trail:
    """Where a fetch got to, for `source_url` of failures."""

    responded_url: str | None = None


@contextmanager
def map_fetch_errors(trail: Trail) -> Iterator[None]:
    """Translate network, TLS, protocol and decoding errors into `FetchFailure` (once)."""
    try:
        yield
    except FetchFailure as failure:
        if failure.source_url is None:
            failure.source_url = trail.responded_url
        if failure.reason is Reason.UNSAFE_URL:
            _log_refusal(failure.detail)
        raise
    except EgressBlocked as exc:
        _log_refusal(str(exc))
        raise FetchFailure(Reason.UNSAFE_URL, str(exc), trail.responded_url) from exc
    except ResolutionFailed as exc:
        raise FetchFailure(Reason.EGRESS_UNAVAILABLE, f"DNS: {exc}", trail.responded_url) from exc
    except (httpcore.TimeoutException, httpx.TimeoutException) as exc:
        detail = str(exc) or type(exc).__name__
        raise FetchFailure(Reason.TIMEOUT, detail, trail.responded_url) from exc
    except (httpcore.ConnectError, httpx.ConnectError, ssl.SSLError) as exc:
        detail = f"connect/TLS: {exc or type(exc).__name__}"
        raise FetchFailure(Reason.EGRESS_UNAVAILABLE, detail, trail.responded_url) from exc
    except (httpcore.ProtocolError, httpcore.NetworkError, httpx.TransportError) as exc:
        detail = f"{type(exc).__name__}: {exc}"
        raise FetchFailure(Reason.UNAVAILABLE, detail, trail.responded_url) from exc
    except (zlib.error, brotli.error) as exc:
        detail = f"corrupt content-encoding: {exc}"
        raise FetchFailure(Reason.UNAVAILABLE, detail, trail.responded_url) from exc
    except httpx.InvalidURL as exc:
        raise FetchFailure(Reason.UNSAFE_URL, str(exc), trail.responded_url) from exc


def _log_refusal(rule: str) -> None:
    """Say which guard rule refused a target (the result only says `unsafe_url`): an attempt at
    a metadata service or a private network is worth an operator's attention. The rule names the
    host or address, never the URL, whose query may carry tokens."""
    log.warning("egress_refused", rule=rule)


def parse_retry_after(value: str | None, now: datetime | None = None) -> int:
    """Seconds to wait from a Retry-After value (delta or HTTP-date), clamped; default 60."""
    text = (value or "").strip()
    seconds: float | None = None
    if text.isdigit() and text.isascii():
        seconds = int(text[:12])
    elif text:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            when = None
        if when is not None:
            when = when if when.tzinfo else when.replace(tzinfo=UTC)
            seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds is None:
        return DEFAULT_RETRY_AFTER_SECONDS
    return int(min(max(seconds, MIN_RETRY_AFTER_SECONDS), MAX_RETRY_AFTER_SECONDS))


def status_failure(status: int, url: str, retry_after: str | None = None) -> FetchFailure | None:
    """The failure a final (non-redirect) status means, or None for 2xx."""
    if 200 <= status < 300:
        return None
    detail = f"HTTP {status}"
    if status in (401, 403):
        return FetchFailure(Reason.ACCESS_DENIED, detail, url)
    if status in (404, 410):
        return FetchFailure(Reason.NOT_FOUND, detail, url)
    if status == 429:
        seconds = parse_retry_after(retry_after)
        return FetchFailure(Reason.RATE_LIMITED, detail, url, retry_after_seconds=seconds)
    return FetchFailure(Reason.UNAVAILABLE, detail, url)


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


def looks_binary(body: bytes, *, nul_is_text: bool = False) -> bool:
    """True for bodies that are not text: a known magic number, or a binary data byte.

    With `nul_is_text` (WebVTT), NUL is not a binary data byte.

    Text after a UTF-16 or UTF-32 byte-order mark is judged by its characters, since its bytes
    are full of zeros: it is binary when it does not decode or holds a binary data character.
    """
    codec, skip = sniff_bom(body)
    if codec in _WIDE_CODECS:
        return _wide_text_is_binary(body[skip:SNIFF_BYTES], codec)
    head = body[:SNIFF_BYTES]
    if head.startswith(_BINARY_MAGIC) or _MP4_BOX.match(head):
        return True
    pattern = _BINARY_DATA_BYTE_BUT_NUL if nul_is_text else _BINARY_DATA_BYTE
    return pattern.search(head) is not None


def _wide_text_is_binary(head: bytes, codec: str) -> bool:
    try:
        text = head.decode(codec)
    except UnicodeDecodeError as exc:
        if exc.reason not in ("truncated data", "unexpected end of data"):
            return True
        text = head[: exc.start].decode(codec)  # the sniffed bytes end inside a character
    return _BINARY_DATA_CHAR.search(text) is not None


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
    no type at all is sniffed. Binary bodies are refused whatever their label; NUL alone does
    not make a WebVTT body binary (served as text/vtt, or undeclared with the signature).
    """
    if declared is not None:
        if declared not in ALLOWED_MIME_TYPES:
            raise FetchFailure(Reason.UNSUPPORTED_MEDIA, f"content type {declared}")
        if looks_binary(body, nul_is_text=declared == "text/vtt"):
            raise FetchFailure(Reason.UNSUPPORTED_MEDIA, f"binary body served as {declared}")
        return declared
    if looks_binary(body, nul_is_text=is_webvtt_body(body)):
        raise FetchFailure(Reason.UNSUPPORTED_MEDIA, "undeclared binary body")
    sniffed = sniff_text_type(body, path)
    if sniffed is None:
        raise FetchFailure(Reason.UNSUPPORTED_MEDIA, "undeclared body is not text")
    return sniffed
