"""The archived exchange: every revision's fetch as WARC 1.1 records that warcio reads back.

Retrievals run through the worker's own entry point (`runner.run_retrieval`: claim, fetch from
the loopback site, extract, settle) in this process, with the archive in the test's own
directory. warcio's ArchiveIterator reads every indexed record back and its digests are
recomputed; a 304 and an unchanged re-fetch add a revisit, never a second copy of the payload;
a file torn by a kill mid-write is cut back to whole records before anyone reads it.
"""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session
from warcio.archiveiterator import ArchiveIterator

from tests.lifecycle.test_freshness import Origin, completed, run, serve
from tests.support.factories import Api
from tests.support.pages import article
from tests.support.tls_site import TLSSite


@pytest.fixture
def archive_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from worker.platform.settings import get_settings

    directory = tmp_path / "archive"
    monkeypatch.setattr(get_settings(), "archive_dir", directory)
    return directory


def rows(retrieval_ids: list[str]) -> list[Any]:
    from worker.store import db
    from worker.store.archive_index import ARCHIVE_RECORD, T

    ids = [uuid.UUID(r) for r in retrieval_ids]
    stmt = sa.select(ARCHIVE_RECORD).where(T.retrieval_id.in_(ids)).order_by(T.fetched_at)
    return db.with_transient_retry(lambda s: list(s.execute(stmt)))


def sha256(data: bytes) -> str:
    return "sha256:" + base64.b32encode(hashlib.sha256(data).digest()).decode()


def read_record(directory: Path, row: Any) -> tuple[Any, bytes]:
    """The record an index row names, read by warcio from its offset, and its payload."""
    from worker.archive.warc_files import locate

    with locate(directory, row.file).open("rb") as handle:
        handle.seek(row.offset)
        record = next(iter(ArchiveIterator(handle)))
        payload = record.raw_stream.read()
        return record, payload


def all_records(directory: Path) -> list[Any]:
    """Every record of every file, read through (the archive as another tool sees it), each
    block and payload digest checked by warcio (as `warcio check` does)."""
    found = []
    for path in sorted(directory.iterdir()):
        with path.open("rb") as handle:
            for record in ArchiveIterator(handle, check_digests=True):
                payload = record.raw_stream.read()
                record.raw_stream.read()  # to the end: the digests are checked there
                assert record.digest_checker.passed is not False, record.digest_checker.problems
                if record.rec_type in ("response", "request", "metadata"):
                    assert record.digest_checker.passed is True, record.rec_type
                found.append((record.rec_type, record.rec_headers, payload))
    return found


def test_revision_archived_then_revisited(
    api: Api, site: TLSSite, workspace: uuid.UUID, archive_dir: Path
) -> None:
    """A first fetch writes request, response and metadata; the 304 revalidation and an
    unchanged re-fetch (no validators) each add a revisit, not a second payload copy."""
    body = article("Archived lakes").encode()
    origin = Origin(body, etag='"v1"')
    url = serve(site, origin)
    first = completed(api, run(workspace, url))
    second = completed(api, run(workspace, url))  # a 304
    origin.etag = None  # now a full fetch of the same bytes
    third = completed(api, run(workspace, url))
    assert origin.statuses() == [200, 304, 200]
    found = rows([first["id"], second["id"], third["id"]])
    assert [r.record_type for r in found] == ["response", "revisit", "revisit"]
    response = found[0]
    assert response.payload_digest == sha256(body)
    assert response.evidence_id == uuid.UUID(first["evidence"]["evidence_id"])
    for revisit in found[1:]:
        assert revisit.refers_to == response.record_id
        assert revisit.payload_digest == response.payload_digest
    record, payload = read_record(archive_dir, response)
    assert payload == body
    assert record.rec_headers.get_header("WARC-Payload-Digest") == sha256(body)
    assert record.rec_headers.get_header("WARC-Record-ID") == response.record_id
    assert record.http_headers.get_statuscode() == "200"
    assert record.http_headers.get_header("ETag") == '"v1"'
    for revisit in found[1:]:
        record, payload = read_record(archive_dir, revisit)
        assert record.rec_type == "revisit" and payload == b""
        assert record.rec_headers.get_header("WARC-Refers-To") == response.record_id
    not_modified, _ = read_record(archive_dir, found[1])
    assert not_modified.http_headers.get_statuscode() == "304"
    # Read through: one payload copy, every block digest right, the metadata tying it together.
    records = all_records(archive_dir)
    kinds = [kind for kind, _, _ in records]
    assert kinds.count("response") == 1 and kinds.count("revisit") == 2
    assert kinds.count("request") == 3 and kinds.count("metadata") == 3
    for kind, headers, payload in records:
        assert headers.get_header("WARC-Date")
        if kind == "response":
            assert sha256(payload) == headers.get_header("WARC-Payload-Digest")
        if kind == "metadata":
            fields = payload.decode()
            assert f"evidence-id: {first['evidence']['evidence_id']}" in fields
            assert "revision: 1" in fields


def test_cookies_are_not_archived(
    api: Api, site: TLSSite, workspace: uuid.UUID, archive_dir: Path
) -> None:
    """Set-Cookie from the origin is dropped from the archived response."""
    from tests.support.tls_site import Page, send

    def handler(h: Any) -> None:
        send(h, Page(article("Cookie lakes").encode(), "text/html", 200, {"Set-Cookie": "s=1"}))

    url = site.add(f"/cookie/{uuid.uuid4().hex}", handler)
    retrieval = completed(api, run(workspace, url))
    (row,) = rows([retrieval["id"]])
    record, _ = read_record(archive_dir, row)
    assert record.http_headers.get_header("Set-Cookie") is None
    assert record.http_headers.get_header("Content-Type") == "text/html"


WRITER = """
import sys, pathlib
from worker.archive.warc_files import WarcFiles
files = WarcFiles(pathlib.Path(sys.argv[1]))
files.append(bytes.fromhex(sys.argv[2]))
sys.stdout.write("ready\\n"); sys.stdout.flush()
sys.stdin.readline()
"""


def test_torn_tail_after_kill_is_cut_before_reading(tmp_path: Path) -> None:
    """A writer killed (kill -9) with half a record at its file's end: recovery cuts the
    file back to its whole records, and warcio then reads every one."""
    import io

    from worker.archive import records, warc_files
    from worker.domain import clock
    from worker.fetch.exchange import Exchange

    exchange = Exchange(
        url="https://example.test/a",
        fetched_at=clock.now(),
        request_headers=((b"Host", b"example.test"),),
        http_version="HTTP/1.1",
        status_code=200,
        reason="OK",
        response_headers=((b"Content-Type", b"text/html"),),
        body=b"<p>whole</p>" * 200,
        truncated=False,
    )
    built = records.build(exchange, {"revision": "1"}, None)
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), built.data.hex()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
    (open_file,) = tmp_path.glob("*.open")
    assert warc_files.recover(tmp_path) == []  # its writer still holds it
    # The kill lands mid-append: the next group's first half is on disk.
    with open_file.open("ab") as handle:
        handle.write(built.data[: len(built.data) // 2])
    # Read through as it stands, the torn group is misread (an error, or a short record).
    seen: list[Any] = []
    try:
        for record in ArchiveIterator(io.BytesIO(open_file.read_bytes())):
            payload = record.raw_stream.read()
            seen.append((record.rec_type, sha256(payload) if record.rec_type == "response" else ""))
    except Exception as exc:  # noqa: BLE001
        seen.append(type(exc).__name__)
    assert seen[:3] != seen[3:]
    writer.kill()
    writer.wait()
    assert writer.stdin is not None
    writer.stdin.close()
    writer.stdout.close()
    (sealed,) = warc_files.recover(tmp_path)
    assert not list(tmp_path.glob("*.open"))
    # Cut after the last whole member: the torn group's request record (whole) stays, unindexed.
    assert sealed.stat().st_size == len(built.data) + built.offset
    with sealed.open("rb") as handle:
        kinds = [(r.rec_type, r.raw_stream.read()) for r in ArchiveIterator(handle)]
    assert [kind for kind, _ in kinds] == ["request", "response", "metadata", "request"]
    assert kinds[1][1] == exchange.body
    assert os.path.exists(warc_files.locate(tmp_path, sealed.name))


def test_writers_alike_in_host_pid_and_second_take_names_of_their_own(tmp_path: Path) -> None:
    """A process restarted under the same host name and pid (a container's) within the second
    it last began a file: its new file must not take that file's name, which the index holds
    (and which the exclusive create would refuse). Two writers in one process stand in."""
    from worker.archive.warc_files import WarcFiles

    first, second = WarcFiles(tmp_path), WarcFiles(tmp_path)
    names = {first.append(b"one")[0], second.append(b"two")[0]}
    first.close()
    second.close()
    assert len(names) == 2
    assert {p.name for p in tmp_path.glob("*.warc.gz")} == names


def test_batch_through_the_worker_is_archived(
    api: Api, site: TLSSite, workspace: uuid.UUID, services: object, env: Any
) -> None:
    """Through the batch route and the real worker (settles written in groups): each page's
    revision has its response archived, a malformed item archives nothing, and the same page
    fetched again unchanged adds a revisit that names the first response."""
    from tests.support.factories import body

    bodies = [article(f"Batch lake {n} {uuid.uuid4().hex}").encode() for n in range(4)]
    urls = [serve(site, Origin(page)) for page in bodies]
    items: list[Any] = [body(url, workspace) for url in urls]
    items.insert(2, {**body(urls[0], workspace), "colour": "blue"})
    items.insert(3, body("ftp://files.example/lakes.txt", workspace))
    results = api.batch(items).json()["results"]
    assert [r["status"] for r in results] == [202, 202, 400, 202, 202, 202]
    refused = results.pop(3)["retrieval"]["id"]
    ids = [r["retrieval"]["id"] for r in results if r["status"] == 202]
    done = [completed(api, i) for i in ids]
    assert api.wait(refused)["result"]["status"] != "ready"
    directory = env.tmp / "archive"
    found = {str(r.retrieval_id): r for r in rows([*ids, refused])}
    assert set(found) == set(ids)  # the refused URL fetched nothing
    for retrieval, page in zip(done, bodies, strict=True):
        row = found[retrieval["id"]]
        assert row.record_type == "response"
        assert str(row.evidence_id) == retrieval["evidence"]["evidence_id"]
        record, payload = read_record(directory, row)
        assert payload == page
        assert record.rec_headers.get_header("WARC-Payload-Digest") == sha256(page)
    again = completed(api, api.post(body(urls[0], workspace)).json()["retrieval"]["id"])
    (revisit,) = rows([again["id"]])
    assert revisit.record_type == "revisit"
    assert revisit.refers_to == found[ids[0]].record_id


def test_304_for_a_revision_archived_before_is_kept_apart(
    api: Api,
    site: TLSSite,
    workspace: uuid.UUID,
    archive_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A revision fetched while the archive was off, then confirmed by a 304: the 304 is
    archived as received, indexed apart, never a payload a later empty page dedups against."""
    from worker.platform.settings import get_settings

    origin = Origin(article("Lakes before the archive").encode(), etag='"b1"')
    url = serve(site, origin)
    monkeypatch.setattr(get_settings(), "archive_enabled", False)
    first = completed(api, run(workspace, url))
    monkeypatch.setattr(get_settings(), "archive_enabled", True)
    second = completed(api, run(workspace, url))
    assert origin.statuses() == [200, 304]
    assert rows([first["id"]]) == []
    (row,) = rows([second["id"]])
    assert row.record_type == "not_modified" and row.refers_to is None
    record, payload = read_record(archive_dir, row)
    assert record.rec_type == "response" and payload == b""
    assert record.http_headers.get_statuscode() == "304"


def test_one_transaction_stores_a_payload_once(archive_dir: Path) -> None:
    """Two exchanges of one payload settled in one transaction (a group of settles): the
    second is a revisit of the first, though neither row is written before the commit."""
    from worker.archive import capture
    from worker.domain import clock
    from worker.fetch.exchange import Exchange
    from worker.store import db

    workspace, body = uuid.uuid4(), b"<p>same payload</p>" * 50
    exchanges = [
        Exchange(
            url=f"https://example.test/{n}",
            fetched_at=clock.now(),
            request_headers=(),
            http_version="HTTP/1.1",
            status_code=200,
            reason="OK",
            response_headers=((b"Content-Type", b"text/html"),),
            body=body,
            truncated=False,
        )
        for n in range(2)
    ]
    retrievals = [uuid.uuid4(), uuid.uuid4()]

    def settle_both(session: Any) -> None:
        for retrieval_id, exchange in zip(retrievals, exchanges, strict=True):
            capture.archive(session, workspace, retrieval_id, uuid.uuid4(), 1, [exchange])

    db.with_transient_retry(settle_both)
    first, second = (rows([str(r)])[0] for r in retrievals)
    assert (first.record_type, second.record_type) == ("response", "revisit")
    assert second.refers_to == first.record_id
    assert read_record(archive_dir, second)[0].rec_headers.get_header(
        "WARC-Refers-To-Target-URI"
    ) == ("https://example.test/0")


def _exchange(url: str, body: bytes, status: int = 200, headers: Any = None) -> Any:
    from worker.domain import clock
    from worker.fetch.exchange import Exchange

    return Exchange(
        url=url,
        fetched_at=clock.now(),
        request_headers=((b"Accept", b"*/*"),),
        http_version="HTTP/1.1",
        status_code=status,
        reason="OK" if status == 200 else "Not Modified",
        response_headers=((b"Content-Type", b"text/html"),) if headers is None else headers,
        body=body,
        truncated=False,
    )


def test_a_group_of_settles_is_archived_with_one_read_of_each_kind_and_one_write(
    archive_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A transaction settling many retrievals (a group of settles) archives all its exchanges
    as it commits: one look-up of the 304s' revisions, one of the payloads, one write (and
    fsync). Each still refers to the right stored payload (stored before, or earlier in this
    transaction), and a malformed exchange loses only its own records."""
    from structlog.testing import capture_logs

    from worker.archive import capture, warc_files
    from worker.store import db

    workspace = uuid.uuid4()
    old_page, old_copy = "https://example.test/old", "https://example.test/copy"
    old, copied, new = uuid.uuid4(), uuid.uuid4(), [uuid.uuid4() for _ in range(2)]
    broken = uuid.uuid4()
    stored_body, new_body = b"<p>stored payload</p>" * 40, b"<p>new payload</p>" * 40
    first = uuid.uuid4()
    db.with_transient_retry(
        lambda s: capture.archive(s, workspace, first, old, 1, [_exchange(old_page, stored_body)])
    )
    (stored,) = rows([str(first)])
    group = {  # retrieval id: (evidence id, its exchange)
        uuid.uuid4(): (old, _exchange(old_page, b"", 304)),
        uuid.uuid4(): (copied, _exchange(old_copy, stored_body)),
        uuid.uuid4(): (new[0], _exchange("https://example.test/new/0", new_body)),
        # Malformed: a header value that is not bytes, which no record can be built from.
        uuid.uuid4(): (broken, _exchange("https://example.test/bad", b"x", 200, ((b"A", 1),))),
        uuid.uuid4(): (new[1], _exchange("https://example.test/new/1", new_body)),
    }
    reads: list[str] = []
    appends: list[int] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "archive_record" in statement:
            reads.append(statement)

    real_append = warc_files.WarcFiles.append

    def counted(self: Any, data: bytes) -> tuple[str, int]:
        appends.append(len(data))
        return real_append(self, data)

    def settle_group(session: Any) -> None:
        for retrieval_id, (evidence_id, exchange) in group.items():
            capture.archive(session, workspace, retrieval_id, evidence_id, 1, [exchange])

    monkeypatch.setattr(warc_files.WarcFiles, "append", counted)
    sa.event.listen(db.get_engine(), "before_cursor_execute", seen)
    try:
        with capture_logs() as logs:
            db.with_transient_retry(settle_group)
    finally:
        sa.event.remove(db.get_engine(), "before_cursor_execute", seen)
    assert len(reads) == 2, reads
    assert len(appends) == 1
    assert [e["event"] for e in logs] == ["archive_write_failed"]
    found = {row.retrieval_id: row for row in rows([str(r) for r in group])}
    ids = list(group)
    assert ids[3] not in found  # the malformed one: nothing indexed, the others written
    not_modified, copy, fresh, again = (found[i] for i in (ids[0], ids[1], ids[2], ids[4]))
    assert (not_modified.record_type, not_modified.refers_to) == ("revisit", stored.record_id)
    assert not_modified.payload_digest == stored.payload_digest == sha256(stored_body)
    assert (copy.record_type, copy.refers_to) == ("revisit", stored.record_id)
    assert (fresh.record_type, fresh.refers_to) == ("response", None)
    assert (again.record_type, again.refers_to) == ("revisit", fresh.record_id)
    record, payload = read_record(archive_dir, not_modified)
    assert record.rec_headers.get_header("WARC-Profile").endswith("server-not-modified")
    assert record.http_headers.get_statuscode() == "304"
    record, payload = read_record(archive_dir, fresh)
    assert payload == new_body
    assert record.rec_headers.get_header("WARC-Record-ID") == fresh.record_id
    record, _ = read_record(archive_dir, again)
    assert record.rec_headers.get_header("WARC-Refers-To") == fresh.record_id
    assert record.rec_headers.get_header("WARC-Refers-To-Target-URI") == fresh.url
    # Read through: every record whole, its digests right; the payloads stored once each.
    kinds = [kind for kind, _, _ in all_records(archive_dir)]
    assert kinds.count("response") == 2 and kinds.count("revisit") == 3
    assert kinds.count("request") == kinds.count("metadata") == 5


def test_a_rolled_back_settle_archives_nothing(archive_dir: Path) -> None:
    """Exchanges queued in a transaction that rolls back are not written by the session's
    next transaction (a group settle rolled back is settled again one by one)."""
    from worker.archive import capture
    from worker.store import db

    workspace, dropped, kept = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    with Session(db.get_engine()) as session:
        session.execute(sa.select(1))  # the settle's statements: a transaction begun
        exchange = _exchange("https://example.test/dropped", b"<p>dropped</p>")
        capture.archive(session, workspace, dropped, uuid.uuid4(), 1, [exchange])
        session.rollback()
        exchange = _exchange("https://example.test/kept", b"<p>kept</p>")
        capture.archive(session, workspace, kept, uuid.uuid4(), 1, [exchange])
        session.commit()
    assert rows([str(dropped)]) == []
    (row,) = rows([str(kept)])
    assert read_record(archive_dir, row)[1] == b"<p>kept</p>"
    assert [kind for kind, _, _ in all_records(archive_dir)] == ["request", "response", "metadata"]


def test_a_body_cut_at_the_bound_is_marked_truncated(
    api: Api,
    site: TLSSite,
    workspace: uuid.UUID,
    archive_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A body past the fetch's byte bound: the bytes read, marked `WARC-Truncated: length`;
    the wire's Content-Length kept renamed (it described the whole body)."""
    from worker.fetch.shared import get_fetcher
    from worker.platform.settings import get_settings

    bound = 40_000
    # The process's fetcher keeps the settings it was made with, which an earlier test may
    # have made before the settings were read anew: bound both.
    monkeypatch.setattr(get_settings(), "fetch_max_bytes", bound)
    monkeypatch.setattr(get_fetcher().settings, "fetch_max_bytes", bound)
    body = article("Long lakes", paragraphs=200).encode()
    assert len(body) > bound
    retrieval = api.wait(run(workspace, serve(site, Origin(body))))
    assert retrieval["result"]["status"] in ("ready", "partial"), retrieval["result"]
    (row,) = rows([retrieval["id"]])
    record, payload = read_record(archive_dir, row)
    assert payload == body[:bound]
    assert record.rec_headers.get_header("WARC-Truncated") == "length"
    assert record.rec_headers.get_header("WARC-Payload-Digest") == sha256(body[:bound])
    assert record.http_headers.get_header("Content-Length") is None
    assert record.http_headers.get_header("X-Archive-Orig-Content-Length") == str(len(body))


def test_a_failed_archive_write_loses_the_record_not_the_revision(
    api: Api,
    site: TLSSite,
    workspace: uuid.UUID,
    archive_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The archive's disk full (or any write refused): the retrieval completes with its
    revision; nothing is indexed for it, and the next write goes through."""
    from worker.archive import warc_files

    def full(self: object, data: bytes) -> tuple[str, int]:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(warc_files.WarcFiles, "append", full)
        failed = completed(api, run(workspace, serve(site, Origin(article("Full").encode()))))
    assert failed["evidence"]["revision"] == 1
    assert rows([failed["id"]]) == []
    after = completed(api, run(workspace, serve(site, Origin(article("Room again").encode()))))
    assert len(rows([after["id"]])) == 1
