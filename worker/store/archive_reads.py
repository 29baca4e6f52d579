"""Reads of the archive's index for what it serves: a revision's archived exchange (its raw
bytes) and a workspace's exchanges (the WACZ export). Read only; the index is written by
`worker.store.archive_index` in the settle's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.store.archive_index import T
from worker.store.evidence import EVIDENCE

#: Ids per `IN (…)` list: well under SQLite's and PostgreSQL's bound parameters.
_CHUNK = 500


@dataclass(frozen=True)
class IndexedExchange:
    """One archived exchange: where its response (or revisit) record lies, and its group's
    size (request, response or revisit, metadata, written together in that order)."""

    record_id: str
    record_type: str
    workspace_id: uuid.UUID
    evidence_id: uuid.UUID
    revision: int
    url: str
    fetched_at: datetime
    payload_digest: str
    refers_to: str | None
    file: str
    offset: int
    length: int
    group_bytes: int


_COLUMNS = (
    T.record_id,
    T.record_type,
    T.workspace_id,
    T.evidence_id,
    T.revision,
    T.url,
    T.fetched_at,
    T.payload_digest,
    T.refers_to,
    T.file,
    T.offset,
    T.length,
    T.group_bytes,
)


def _exchange(row: Any) -> IndexedExchange:
    return IndexedExchange(*row)


def revision_exchanges(
    session: Session, evidence_id: uuid.UUID, revision: int
) -> list[IndexedExchange]:
    """A revision's archived exchanges, first fetched first (the fetch that made it, then the
    304s and unchanged re-fetches that confirmed it)."""
    stmt = (
        sa.select(*_COLUMNS)
        .where(T.evidence_id == evidence_id, T.revision == revision)
        .order_by(T.fetched_at, T.id)
    )
    return [_exchange(row) for row in session.execute(stmt)]


def responses(
    session: Session, workspace_id: uuid.UUID, record_ids: Iterable[str]
) -> dict[str, IndexedExchange]:
    """The workspace's response records among `record_ids` (what revisits refer to)."""
    wanted = sorted(set(record_ids))
    found: dict[str, IndexedExchange] = {}
    for start in range(0, len(wanted), _CHUNK):
        stmt = sa.select(*_COLUMNS).where(
            T.workspace_id == workspace_id,
            T.record_type == "response",
            T.record_id.in_(wanted[start : start + _CHUNK]),
        )
        for row in session.execute(stmt):
            found[row.record_id] = _exchange(row)
    return found


def _in_chunks(base: Any, evidence_ids: Collection[uuid.UUID] | None) -> list[Any]:
    if evidence_ids is None:
        return [base]
    ids = sorted(set(evidence_ids))
    return [
        base.where(T.evidence_id.in_(ids[start : start + _CHUNK]))
        for start in range(0, len(ids), _CHUNK)
    ]


def stored_bytes(
    session: Session, workspace_id: uuid.UUID, evidence_ids: Collection[uuid.UUID] | None
) -> int:
    """The archived bytes of the workspace's exchanges (of `evidence_ids` only, when given),
    summed in the database: an export over its limit is refused before a row is loaded."""
    base = sa.select(sa.func.coalesce(sa.func.sum(T.group_bytes), 0)).where(
        T.workspace_id == workspace_id
    )
    return sum(int(session.execute(stmt).scalar_one()) for stmt in _in_chunks(base, evidence_ids))


def workspace_exchanges(
    session: Session, workspace_id: uuid.UUID, evidence_ids: Collection[uuid.UUID] | None
) -> list[IndexedExchange]:
    """The workspace's archived exchanges (of `evidence_ids` only, when given), by file and
    offset: the order they were written in."""
    base = sa.select(*_COLUMNS).where(T.workspace_id == workspace_id)
    statements = _in_chunks(base, evidence_ids)
    rows = [_exchange(row) for stmt in statements for row in session.execute(stmt)]
    rows.sort(key=lambda r: (r.file, r.offset))
    return rows


def evidence_in_workspace(
    session: Session, workspace_id: uuid.UUID, evidence_ids: Collection[uuid.UUID]
) -> set[uuid.UUID]:
    """Which of `evidence_ids` are evidence items of the workspace."""
    ids = sorted(set(evidence_ids))
    found: set[uuid.UUID] = set()
    for start in range(0, len(ids), _CHUNK):
        stmt = sa.select(EVIDENCE.c.id).where(
            EVIDENCE.c.workspace_id == workspace_id, EVIDENCE.c.id.in_(ids[start : start + _CHUNK])
        )
        found.update(session.execute(stmt).scalars())
    return found
