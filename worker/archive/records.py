"""WARC 1.1 records of one exchange, built with warcio: each record its own gzip member.

What is kept: the request and response status lines and headers as they were sent and received,
except cookies (`Cookie`, `Set-Cookie`, `Set-Cookie2` are dropped: an origin's session is not
evidence, and it may be a credential). The body is the one the fetcher read: decoded from its
Content-Encoding and cut at the fetch's byte bound, so the headers that described the encoded
bytes (`Content-Encoding`, `Content-Length`, `Transfer-Encoding`) are kept renamed with the
`X-Archive-Orig-` prefix web archives use, and a cut body carries `WARC-Truncated: length`.
Digests are sha256 (base32, as warcio and pywb write them).
"""

from __future__ import annotations

import base64
import hashlib
import io
import uuid
import zlib
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import urlsplit

from warcio.recordbuilder import RecordBuilder
from warcio.statusandheaders import StatusAndHeaders
from warcio.timeutils import datetime_to_iso_date
from warcio.utils import Digester
from warcio.warcwriter import WARCWriter

from worker.fetch.exchange import Exchange, RawHeaders

WARC_VERSION = "WARC/1.1"
#: Headers never archived: cookies an origin set or we sent.
DROPPED = frozenset({b"cookie", b"set-cookie", b"set-cookie2"})
#: Headers that described the bytes on the wire, not the decoded body kept.
RENAMED = frozenset({b"content-encoding", b"content-length", b"transfer-encoding"})
RENAMED_PREFIX = b"X-Archive-Orig-"
#: A revisit for a 304 that confirmed a stored payload (RFC 7232's "not modified").
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
IDENTICAL_PROFILE = RecordBuilder.REVISIT_PROFILE_1_1


#: zlib's fastest level: the archive's work for a fetched page 1.1 ms of CPU instead of 1.5 ms
#: at zlib's default (6), for WARC files 10 % larger (warcio's own level 9 cost 0.33 ms more
#: than 6 for 1 % less; docs/archive.md).
GZIP_LEVEL = 1


class _Sha256Writer(WARCWriter):  # type: ignore[misc]
    """warcio's writer with sha256 block digests (its default is sha1), each record its own
    gzip member at `GZIP_LEVEL`."""

    def __init__(self, out: io.BytesIO) -> None:
        super().__init__(out, gzip=False, warc_version=WARC_VERSION)

    @staticmethod
    def _create_digester() -> Digester:
        return Digester("sha256")

    def write_record(self, record: object, params: object = None) -> None:
        plain = io.BytesIO()
        self._write_warc_record(plain, record)
        member = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, zlib.MAX_WBITS + 16)
        self.out.write(member.compress(plain.getvalue()) + member.flush())


def payload_digest(body: bytes) -> str:
    """`WARC-Payload-Digest` of `body`: `sha256:` and the base32 digest."""
    return "sha256:" + base64.b32encode(hashlib.sha256(body).digest()).decode("ascii")


def _header_lines(raw: RawHeaders, *, response: bool) -> list[tuple[str, str]]:
    lines = []
    for name, value in raw:
        lowered = name.lower()
        if lowered in DROPPED:
            continue
        if response and lowered in RENAMED:
            name = RENAMED_PREFIX + name
        lines.append((name.decode("latin-1"), value.decode("latin-1")))
    return lines


def _request_line(exchange: Exchange) -> str:
    """`GET /path?query` of the exchange's URL (the origin form, as HTTP/1.1 sends it)."""
    parts = urlsplit(exchange.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return f"GET {target}"


@dataclass(frozen=True)
class Stored:
    """A payload already archived, which a revisit record refers to."""

    record_id: str
    url: str
    fetched_at: datetime
    digest: str


@dataclass(frozen=True)
class Built:
    """The bytes of one exchange's records, and where its response or revisit lies in them."""

    data: bytes
    record_id: str
    record_type: str
    digest: str
    #: The response or revisit record's offset and length within `data`.
    offset: int
    length: int


def build(
    exchange: Exchange,
    metadata: dict[str, str],
    stored: Stored | None,
    digest: str | None = None,
) -> Built:
    """request, response (or revisit when `stored` holds the same payload, or for a 304),
    and a metadata record, concurrent to the response, with `metadata`'s fields. `digest`:
    the body's `payload_digest` when the caller has it already."""
    buffer = io.BytesIO()
    writer = _Sha256Writer(buffer)
    date = datetime_to_iso_date(exchange.fetched_at.replace(tzinfo=None), use_micros=True)
    record_id = f"<urn:uuid:{uuid.uuid4()}>"
    http_headers = StatusAndHeaders(
        f"{exchange.status_code} {exchange.reason}".strip(),
        _header_lines(exchange.response_headers, response=True),
        protocol=exchange.http_version,
    )
    common = {"WARC-Date": date}
    not_modified = exchange.status_code == 304
    if not_modified and stored:
        digest = stored.digest
    elif digest is None:
        digest = payload_digest(exchange.body)
    if stored is not None:
        profile = NOT_MODIFIED_PROFILE if not_modified else IDENTICAL_PROFILE
        main = writer.create_revisit_record(
            exchange.url,
            digest,
            stored.url,
            datetime_to_iso_date(stored.fetched_at.replace(tzinfo=None), use_micros=True),
            http_headers=http_headers,
            warc_headers_dict={
                **common,
                "WARC-Record-ID": record_id,
                "WARC-Refers-To": stored.record_id,
            },
        )
        main.rec_headers.replace_header("WARC-Profile", profile)
        record_type = "revisit"
    else:
        headers = {**common, "WARC-Record-ID": record_id, "WARC-Payload-Digest": digest}
        if exchange.truncated:
            headers["WARC-Truncated"] = "length"
        main = writer.create_warc_record(
            exchange.url,
            "response",
            payload=io.BytesIO(exchange.body),
            length=len(exchange.body),
            http_headers=http_headers,
            warc_headers_dict=headers,
        )
        record_type = "response"
    request = writer.create_warc_record(
        exchange.url,
        "request",
        http_headers=StatusAndHeaders(
            _request_line(exchange),
            _header_lines(exchange.request_headers, response=False),
            protocol=exchange.http_version,
            is_http_request=True,
        ),
        warc_headers_dict={**common, "WARC-Concurrent-To": record_id},
    )
    fields = "".join(f"{k}: {v}\r\n" for k, v in metadata.items()).encode()
    meta = writer.create_warc_record(
        exchange.url,
        "metadata",
        payload=io.BytesIO(fields),
        length=len(fields),
        warc_content_type="application/warc-fields",
        warc_headers_dict={**common, "WARC-Concurrent-To": record_id},
    )
    writer.write_record(request)
    offset = buffer.tell()
    writer.write_record(main)
    length = buffer.tell() - offset
    writer.write_record(meta)
    return Built(buffer.getvalue(), record_id, record_type, digest, offset, length)
