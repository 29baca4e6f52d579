"""The archive's index: where each archived exchange's records lie in the WARC files.

One row per exchange: its response (or revisit) record's file, offset and length, its payload
digest, and the bytes of its whole group (request, response or revisit, metadata). Payloads are
content-addressed per workspace: a digest already indexed is archived again as a revisit.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session
from sqlmodel import SQLModel

from worker.store import at_commit
from worker.store.models import UTC_DATETIME

ARCHIVE_RECORD = sa.Table(
    "archive_record",
    SQLModel.metadata,
    sa.Column("id", sa.Uuid(), primary_key=True),
    sa.Column("workspace_id", sa.Uuid(), nullable=False),
    sa.Column("retrieval_id", sa.Uuid(), nullable=False),
    sa.Column("evidence_id", sa.Uuid(), nullable=False),
    sa.Column("revision", sa.Integer(), nullable=False),
    sa.Column("url", sa.Text(), nullable=False),
    sa.Column("fetched_at", UTC_DATETIME, nullable=False),
    sa.Column("record_type", sa.String(16), nullable=False),
    sa.Column("record_id", sa.String(64), nullable=False),
    sa.Column("payload_digest", sa.String(64), nullable=False),
    sa.Column("refers_to", sa.String(64), nullable=True),
    sa.Column("file", sa.String(255), nullable=False),
    sa.Column("offset", sa.BigInteger(), nullable=False),
    sa.Column("length", sa.BigInteger(), nullable=False),
    sa.Column("group_bytes", sa.BigInteger(), nullable=False),
    sa.Index("ix_archive_record_digest", "workspace_id", "payload_digest"),
    sa.Index("ix_archive_record_revision", "evidence_id", "revision"),
    sa.Index("ix_archive_record_fetched", "fetched_at"),
    sa.Index("ix_archive_record_file", "file"),
)
T = ARCHIVE_RECORD.c


@dataclass(frozen=True)
class Original:
    """An archived response record a revisit may refer to."""

    record_id: str
    url: str
    fetched_at: datetime
    digest: str


#: A revisit row stands for the response it refers to.
_ORIGINAL = sa.func.coalesce(T.refers_to, T.record_id)


_INSERT = sa.insert(ARCHIVE_RECORD)


#: The first response record of each (workspace, payload digest) asked for. Built once: a
#: statement's construction costs more client CPU than its execution.
_PAYLOADS = (
    sa.select(T.workspace_id, T.record_id, T.url, T.fetched_at, T.payload_digest)
    .where(sa.tuple_(T.workspace_id, T.payload_digest).in_(sa.bindparam("b_keys", expanding=True)))
    .where(T.record_type == "response")
    .order_by(T.fetched_at)
)


def find_payloads(
    session: Session, keys: Collection[tuple[uuid.UUID, str]]
) -> dict[tuple[uuid.UUID, str], Original]:
    """The first response record of this workspace with payload `digest`, for many (workspace,
    digest) keys in one read; a key not archived is left out (rows this transaction has not
    written yet are not read: the caller knows those)."""
    if not keys:
        return {}
    found: dict[tuple[uuid.UUID, str], Original] = {}
    for row in session.execute(_PAYLOADS, {"b_keys": list(keys)}):
        key = (row.workspace_id, row.payload_digest)
        found.setdefault(key, Original(row.record_id, row.url, row.fetched_at, row.payload_digest))
    return found


def _latest_per_revision() -> sa.Select[Any]:
    latest = sa.func.row_number().over(
        partition_by=(T.evidence_id, T.revision, T.url), order_by=T.fetched_at.desc()
    )
    keys = sa.tuple_(T.evidence_id, T.revision, T.url)
    ranked = (
        sa.select(
            T.evidence_id,
            T.revision,
            T.url,
            _ORIGINAL.label("original"),
            T.fetched_at,
            T.payload_digest,
            latest.label("n"),
        )
        .where(keys.in_(sa.bindparam("b_keys", expanding=True)))
        .subquery()
    )
    return sa.select(ranked).where(ranked.c.n == 1)


#: The latest row of each (evidence id, revision, URL) asked for (every 304 adds one).
_REVISIONS = _latest_per_revision()


def find_revisions(
    session: Session, keys: Collection[tuple[uuid.UUID, int, str]]
) -> dict[tuple[uuid.UUID, int, str], Original]:
    """The response record each revision's URL was archived with (for a 304's revisit), for
    many (evidence id, revision, URL) keys in one read; a key not archived is left out."""
    if not keys:
        return {}
    return {
        (row.evidence_id, row.revision, row.url): Original(
            row.original, row.url, row.fetched_at, row.payload_digest
        )
        for row in session.execute(_REVISIONS, {"b_keys": list(keys)})
    }


def insert_many(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    """Index archived exchanges as the transaction commits (with every other row queued for
    it: one executemany)."""
    at_commit.add_rows(session, _INSERT, [{"id": uuid.uuid4(), **row} for row in rows])


def bytes_by_workspace(session: Session) -> dict[uuid.UUID, int]:
    """Archived bytes per workspace (every group's request, response or revisit, metadata)."""
    stmt = sa.select(T.workspace_id, sa.func.sum(T.group_bytes)).group_by(T.workspace_id)
    return {ws: int(total or 0) for ws, total in session.execute(stmt)}


def count_by_type(session: Session) -> dict[str, int]:
    """Archived exchanges by record type (response, revisit, not_modified)."""
    stmt = sa.select(T.record_type, sa.func.count()).group_by(T.record_type)
    return {kind: int(n) for kind, n in session.execute(stmt)}
