"""Archive the exchanges that produced or confirmed a revision, in the settle's transaction.

The records are on disk (fsync'd) before their index rows are written, and the rows commit
with the settle: a revision's exchange is indexed exactly when the revision is. A settle
rolled back after the write leaves records no row names (harmless; never read through the
index). A payload this workspace already archived is written as a revisit (identical payload
digest), as is a 304 that confirmed a stored revision, so each payload is stored once.

The work is done as the transaction commits, once for all the exchanges it settles (a group
of settles: `worker.retrieval.settles`): one read finds the stored payloads they refer to, one
write and one fsync put their records on disk, one executemany indexes them.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from sqlalchemy import event
from sqlalchemy.orm import Session

from worker.archive import records
from worker.archive.warc_files import WarcFiles
from worker.fetch.exchange import Exchange
from worker.platform.settings import get_settings
from worker.store import archive_index, at_commit

log = structlog.get_logger(__name__)

#: As `worker.retrieval.transitions.AfterSettle`: (session, evidence id, revision, written).
AfterSettle = Callable[[Session, uuid.UUID | None, int | None, bool], None]

#: The index's type for a 304 whose revision has no archived payload (a `response` in the file).
NOT_MODIFIED = "not_modified"

_files: tuple[int, Path, WarcFiles] | None = None


def warc_files() -> WarcFiles:
    """This process's WARC files (a forked child makes its own)."""
    global _files
    directory = get_settings().archive_dir
    if _files is None or _files[0] != os.getpid() or _files[1] != directory:
        _files = (os.getpid(), directory, WarcFiles(directory))
    return _files[2]


def after_settle(
    workspace_id: uuid.UUID,
    retrieval_id: uuid.UUID,
    exchanges: Sequence[Exchange],
    then: AfterSettle | None,
) -> AfterSettle:
    """`then`, followed by archiving `exchanges` under the revision the settle named."""

    def write(
        session: Session, evidence_id: uuid.UUID | None, revision: int | None, written: bool
    ) -> None:
        if then is not None:
            then(session, evidence_id, revision, written)
        if evidence_id is None or revision is None or not exchanges:
            return
        archive(session, workspace_id, retrieval_id, evidence_id, revision, exchanges)

    return write


def archive(
    session: Session,
    workspace_id: uuid.UUID,
    retrieval_id: uuid.UUID,
    evidence_id: uuid.UUID,
    revision: int,
    exchanges: Sequence[Exchange],
) -> None:
    """Archive each exchange as the transaction commits, with every other exchange it settles
    (`write_queued`)."""
    queued: list[_Queued] = session.info.setdefault(_QUEUED, [])
    for exchange in exchanges:
        # The payload's digest, computed once: the look-up's key and the record's header.
        digest = None if exchange.status_code == 304 else records.payload_digest(exchange.body)
        queued.append(_Queued(workspace_id, retrieval_id, evidence_id, revision, exchange, digest))
    at_commit.run_first(session, write_queued)


@dataclass(frozen=True)
class _Queued:
    """An exchange to archive under the revision its settle named."""

    workspace_id: uuid.UUID
    retrieval_id: uuid.UUID
    evidence_id: uuid.UUID
    revision: int
    exchange: Exchange
    #: Its payload's digest; None for a 304 (its payload is the stored revision's).
    digest: str | None

    @property
    def revision_key(self) -> tuple[uuid.UUID, int, str]:
        return (self.evidence_id, self.revision, self.exchange.url)


#: `session.info` key: the exchanges this transaction archives as it commits.
_QUEUED = "archive.capture.queued"


def write_queued(session: Session) -> None:
    """Write the transaction's queued exchanges (run at commit, before its rows are written).

    One read finds the payloads they may refer to (stored before, or earlier in this same
    transaction), the records of every exchange go to this process's file with one write and
    one fsync, and only then are they indexed: one executemany with the transaction's other
    rows. An exchange whose records cannot be built, or a write that fails (a full disk), loses
    its raw records, logged, never the revisions: nothing of them is indexed. A database error
    is the settle's, as ever.
    """
    queued: list[_Queued] = session.info.pop(_QUEUED, [])
    if not queued:
        return
    by_revision = archive_index.find_revisions(
        session, {q.revision_key for q in queued if q.digest is None}
    )
    by_payload = archive_index.find_payloads(
        session, {(q.workspace_id, q.digest) for q in queued if q.digest is not None}
    )
    parts: list[bytes] = []
    rows: list[dict[str, Any]] = []
    size = 0
    for item in queued:
        exchange = item.exchange
        if item.digest is None:
            stored = by_revision.get(item.revision_key)
        else:
            stored = by_payload.get((item.workspace_id, item.digest))
        original = None if stored is None else records.Stored(**stored.__dict__)
        metadata = {
            "retrieval-id": str(item.retrieval_id),
            "evidence-id": str(item.evidence_id),
            "revision": str(item.revision),
            "workspace-id": str(item.workspace_id),
        }
        try:
            built = records.build(exchange, metadata, original, item.digest)
        except Exception as exc:  # noqa: BLE001  (a record warcio refuses: this exchange's)
            log.error("archive_write_failed", error=type(exc).__name__, detail=str(exc)[:200])
            continue
        if exchange.status_code != 304:
            # Later exchanges of this transaction find this payload as if it were indexed.
            mine = archive_index.Original(
                built.record_id if original is None else original.record_id,
                exchange.url,
                exchange.fetched_at,
                built.digest,
            )
            by_revision[item.revision_key] = mine
            if original is None:
                by_payload.setdefault((item.workspace_id, built.digest), mine)
        rows.append(
            {
                "workspace_id": item.workspace_id,
                "retrieval_id": item.retrieval_id,
                "evidence_id": item.evidence_id,
                "revision": item.revision,
                "url": exchange.url,
                "fetched_at": exchange.fetched_at,
                # A 304 for a revision archived before the archive was on: no payload to
                # refer to, so never one a later payload may be deduplicated against.
                "record_type": NOT_MODIFIED
                if original is None and exchange.status_code == 304
                else built.record_type,
                "record_id": built.record_id,
                "payload_digest": built.digest,
                "refers_to": None if original is None else original.record_id,
                "file": "",
                "offset": size + built.offset,
                "length": built.length,
                "group_bytes": len(built.data),
            }
        )
        parts.append(built.data)
        size += len(built.data)
    if not parts:
        return
    try:
        name, offset = warc_files().append(b"".join(parts))
    except Exception as exc:  # noqa: BLE001  (a full disk: the raw records lost, logged)
        log.error("archive_write_failed", error=type(exc).__name__, detail=str(exc)[:200])
        return
    for row in rows:
        row["file"], row["offset"] = name, offset + row["offset"]
    archive_index.insert_many(session, rows)


@event.listens_for(Session, "after_soft_rollback")
def _forget_on_rollback(session: Session, _previous: object) -> None:
    session.info.pop(_QUEUED, None)
