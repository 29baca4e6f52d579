"""Reading archived exchanges back from the WARC files, through the index's offsets.

Each record is its own gzip member, and an exchange's records (request, response or revisit,
metadata) were appended as one group, so a group is a byte range that any WARC reader takes as
it is. The index names the response (or revisit) record's offset and length and the group's
size; the request's start is found from them and the metadata record's length (one small gzip
member), then checked: the request and the metadata must both be concurrent to the record the
index names. Everything is read in bounded chunks, never a whole file.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from warcio.archiveiterator import ArchiveIterator

from worker.archive.warc_files import locate
from worker.store.archive_reads import IndexedExchange

CHUNK = 64 * 1024


class ArchiveUnreadable(Exception):
    """The index names bytes that are not there or not what it says (a file purged, moved,
    or written in another layout)."""


@dataclass(frozen=True)
class Span:
    """Where one exchange's whole group lies: `[start, end)` of `path`."""

    path: Path
    start: int
    end: int


def _path(directory: Path, name: str) -> Path:
    path = locate(directory, name)
    if not path.exists():
        raise ArchiveUnreadable(f"archive file {name} is gone")
    return path


def _member_length(handle: BinaryIO, start: int) -> int:
    """The length of the gzip member at `start`."""
    handle.seek(start)
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    consumed = 0
    while not inflater.eof:
        chunk = handle.read(CHUNK)
        if not chunk:
            raise ArchiveUnreadable("a record's gzip member is cut short")
        try:
            inflater.decompress(chunk)
        except zlib.error as error:
            raise ArchiveUnreadable(f"not a gzip member: {error}") from None
        consumed += len(chunk) - len(inflater.unused_data)
    return consumed


def _first_record(handle: BinaryIO, start: int) -> Any:
    handle.seek(start)
    try:
        return next(iter(ArchiveIterator(handle)))
    except (StopIteration, Exception) as error:  # noqa: BLE001 (warcio's many parse errors)
        raise ArchiveUnreadable(f"no WARC record at {start}: {type(error).__name__}") from None


def group_span(directory: Path, exchange: IndexedExchange) -> Span:
    """The byte range of `exchange`'s request, response or revisit, and metadata records."""
    path = _path(directory, exchange.file)
    end_of_main = exchange.offset + exchange.length
    with path.open("rb") as handle:
        metadata_length = _member_length(handle, end_of_main)
        request_length = exchange.group_bytes - exchange.length - metadata_length
        start = exchange.offset - request_length
        if request_length <= 0 or start < 0:
            raise ArchiveUnreadable("the index's group size does not fit the records")
        for at, rec_type in ((start, "request"), (end_of_main, "metadata")):
            record = _first_record(handle, at)
            concurrent = record.rec_headers.get_header("WARC-Concurrent-To")
            if record.rec_type != rec_type or concurrent != exchange.record_id:
                raise ArchiveUnreadable(f"no {rec_type} record of {exchange.record_id} at {at}")
    return Span(path, start, end_of_main + metadata_length)


def copy_span(span: Span, out: BinaryIO) -> Iterator[bytes]:
    """Copy `span` to `out` in chunks; yields each chunk copied (for digests)."""
    with span.path.open("rb") as handle:
        handle.seek(span.start)
        left = span.end - span.start
        while left:
            chunk = handle.read(min(CHUNK, left))
            if not chunk:
                raise ArchiveUnreadable(f"{span.path.name} ends before its indexed records")
            out.write(chunk)
            left -= len(chunk)
            yield chunk


@dataclass
class Payload:
    """An open response record: its HTTP headers and its payload, read in chunks."""

    status: str
    content_type: str | None
    truncated: bool
    record: Any

    def chunks(self) -> Iterator[bytes]:
        while True:
            chunk = self.record.raw_stream.read(CHUNK)
            if not chunk:
                return
            yield chunk


@contextmanager
def open_payload(directory: Path, exchange: IndexedExchange) -> Iterator[Payload]:
    """The response record `exchange` names, open for reading its payload (as received: the
    body the fetcher read, decoded from its Content-Encoding)."""
    path = _path(directory, exchange.file)
    with path.open("rb") as handle:
        record = _first_record(handle, exchange.offset)
        if record.rec_type != "response" or (
            record.rec_headers.get_header("WARC-Record-ID") != exchange.record_id
        ):
            raise ArchiveUnreadable(f"no response record {exchange.record_id} in {path.name}")
        http = record.http_headers
        yield Payload(
            status=http.get_statuscode() if http is not None else "",
            content_type=http.get_header("Content-Type") if http is not None else None,
            truncated=record.rec_headers.get_header("WARC-Truncated") is not None,
            record=record,
        )
