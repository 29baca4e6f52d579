"""The archive under kill -9: no torn record left for a reader, no revision without its record.

The whole worker (its process group) is killed while retrievals of large pages run and their
WARC records are being appended, its file given the start of a torn record as a kill inside a
write may leave; it is restarted, the lease and the sweep re-run what it held. Then every
revision the retrievals settled has its exchange indexed, every index row's record reads back
(warcio) with its digest, the dead writer's file was cut back to its whole records and sealed
by the restarted worker, and every WARC file of the session reads through to its end.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from warcio.archiveiterator import ArchiveIterator

from tests.conftest import Env, Services
from tests.faults.history import History
from tests.faults.test_faults import submit
from tests.support.pages import article
from tests.support.services import wait_for
from tests.support.slowdown import scaled
from tests.support.tls_site import TLSSite


def unlocked(directory: Path) -> list[Path]:
    """The `.open` WARC files no live process holds (their writers are dead)."""
    found = []
    for path in sorted(directory.glob("*.warc.gz.open")):
        with path.open("rb") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            fcntl.flock(handle, fcntl.LOCK_UN)
            found.append(path)
    return found


def sha256(data: bytes) -> str:
    return "sha256:" + base64.b32encode(hashlib.sha256(data).digest()).decode()


def test_killed_worker_leaves_whole_records_and_every_revision_archived(
    history: History, services: Services, site: TLSSite, env: Env, max_attempts: int
) -> None:
    from worker.archive import warc_files
    from worker.store import db
    from worker.store.archive_index import ARCHIVE_RECORD, T
    from worker.store.evidence import EVIDENCE, REVISION

    # Large pages (about 1 MB each): their records take a while to compress and write.
    urls = [
        site.page(f"/fa/{uuid.uuid4().hex}", article(f"Archive fault {n}", paragraphs=400))
        for n in range(24)
    ]
    directory = env.tmp / "archive"
    ids = submit(history, urls)

    def indexed_any(session: object) -> bool:
        wanted = sa.select(T.id).where(T.retrieval_id.in_([uuid.UUID(i) for i in ids])).limit(1)
        return session.execute(wanted).first() is not None  # type: ignore[attr-defined]

    # Killed once it has archived one of them (so it holds an open file).
    wait_for(lambda: db.with_transient_retry(indexed_any), timeout=30)
    time.sleep(scaled(0.2))
    services.worker.kill_group()
    # Its lock goes once the killed worker process has exited (after the supervisor).
    wait_for(lambda: unlocked(directory), timeout=10)
    # A kill inside a write leaves part of a record behind: each dead writer's file gets the
    # start of a gzip member, as the kernel may have kept it.
    torn: dict[Path, int] = {}
    for path in unlocked(directory):
        whole = path.read_bytes()
        torn[path] = len(whole)
        with path.open("ab") as handle:
            handle.write(whole[:40])
    services.start_worker()  # its first file recovers the dead writers' files
    history.check(max_attempts)

    def read(session: object) -> tuple[list[tuple[uuid.UUID, int]], list[object]]:
        revisions = list(
            session.execute(  # type: ignore[attr-defined]
                sa.select(REVISION.c.evidence_id, REVISION.c.revision)
                .join(EVIDENCE, EVIDENCE.c.id == REVISION.c.evidence_id)
                .where(EVIDENCE.c.workspace_id == history.workspace)
            )
        )
        archived = list(
            session.execute(  # type: ignore[attr-defined]
                sa.select(ARCHIVE_RECORD).where(T.retrieval_id.in_([uuid.UUID(i) for i in ids]))
            )
        )
        return revisions, archived

    revisions, archived = db.with_transient_retry(read)
    assert len(revisions) == len(urls)
    indexed = {(row.evidence_id, row.revision) for row in archived}  # type: ignore[attr-defined]
    assert {tuple(r) for r in revisions} <= indexed  # no revision without its exchange
    for row in archived:
        path = warc_files.locate(directory, row.file)  # type: ignore[attr-defined]
        with path.open("rb") as handle:
            handle.seek(row.offset)  # type: ignore[attr-defined]
            record = next(iter(ArchiveIterator(handle)))
            payload = record.raw_stream.read()
        assert record.rec_headers.get_header("WARC-Payload-Digest") == sha256(payload)
    # The dead writers' files were cut back to their whole records and sealed by the
    # restarted worker; every file reads through.
    assert torn, "no killed writer left a file"
    for path, length in torn.items():
        sealed = path.with_name(path.name.removesuffix(warc_files.OPEN_SUFFIX))
        assert not path.exists() and sealed.stat().st_size == length
    for path in sorted(Path(directory).glob("*.warc.gz")):
        with path.open("rb") as handle:
            for record in ArchiveIterator(handle):
                record.raw_stream.read()
