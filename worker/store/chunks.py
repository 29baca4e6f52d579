"""Passages of evidence revisions: recorded with the revision, searched with full-text search."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.chunking import chunk_id, split_revision
from worker.content.results import SegmentDict
from worker.store import at_commit, fulltext, reports
from worker.store.read_models import EvidenceChunk

CHUNK: sa.Table = EvidenceChunk.__table__  # type: ignore[attr-defined]
_INSERT_CHUNK = sa.insert(CHUNK)
#: Hits returned at most per search.
MAX_LIMIT = 50


def record_chunks(
    session: Session,
    workspace_id: uuid.UUID,
    evidence_id: uuid.UUID,
    revision: int,
    language: str | None,
    text: str,
    segments: Sequence[SegmentDict],
) -> int:
    """Split a new revision into passages and store them; return how many."""
    passages = split_revision(text, segments)
    config = fulltext.ts_config(language)
    if passages:  # written with the transaction's other passages as it commits
        at_commit.add_rows(
            session,
            _INSERT_CHUNK,
            [
                {
                    "chunk_id": chunk_id(evidence_id, revision, p.ordinal),
                    "workspace_id": workspace_id,
                    "evidence_id": evidence_id,
                    "revision": revision,
                    "ordinal": p.ordinal,
                    "text": p.text,
                    "start_ms": p.start_ms,
                    "end_ms": p.end_ms,
                    "char_start": p.char_start,
                    "char_end": p.char_end,
                    "ts_config": config,
                }
                for p in passages
            ],
        )
    return len(passages)


def _hit(row: Any, score: float) -> dict[str, Any]:
    """A chunk as the read tools show it, with its anchor in its revision (extra fields, which
    the contract's chunk schema allows): cite it back with `evidence_id`, `revision` and
    `[char_start, char_end)`."""
    return {
        **reports.report_fields(row, score),
        "text": row.text,
        "chunk_id": row.chunk_id,
        "evidence_id": str(row.evidence_id),
        "revision": int(row.revision),
        "char_start": row.char_start,
        "char_end": row.char_end,
    }


#: The columns every hit carries beside its report's.
_HIT_COLUMNS = (
    CHUNK.c.chunk_id,
    CHUNK.c.text,
    CHUNK.c.evidence_id,
    CHUNK.c.revision,
    CHUNK.c.char_start,
    CHUNK.c.char_end,
)


def anchors(
    session: Session, evidence_id: uuid.UUID, revision: int
) -> list[tuple[str, int | None, int | None]]:
    """(chunk_id, char_start, char_end) of every passage of one revision, in order."""
    rows = session.execute(
        sa.select(CHUNK.c.chunk_id, CHUNK.c.char_start, CHUNK.c.char_end)
        .where(CHUNK.c.evidence_id == evidence_id, CHUNK.c.revision == revision)
        .order_by(CHUNK.c.ordinal)
    )
    return [(row.chunk_id, row.char_start, row.char_end) for row in rows]


def search_chunks(
    session: Session,
    workspace_id: uuid.UUID,
    query: str,
    *,
    kind: str | None = None,
    language: str | None = None,
    limit: int = 10,
) -> list[dict[str, Any]]:
    """Passages of the workspace's latest revisions that match `query`, best first."""
    base = reports.with_report(sa.select(*_HIT_COLUMNS), CHUNK)
    base = reports.filter_evidence(base, CHUNK, kind=kind, language=language)
    base = base.where(CHUNK.c.workspace_id == workspace_id)
    configs = session.execute(
        sa.select(CHUNK.c.ts_config).where(CHUNK.c.workspace_id == workspace_id).distinct()
    ).scalars()
    found = fulltext.ranked(session, base, CHUNK, query, configs)
    if found is None:
        return []
    stmt, score = found
    rows = session.execute(
        stmt.add_columns(score).order_by(score.desc(), CHUNK.c.seq).limit(min(limit, MAX_LIMIT))
    )
    return [_hit(row, row.score) for row in rows]


def get_chunk(session: Session, chunk_id_: str) -> tuple[uuid.UUID, dict[str, Any]] | None:
    """(workspace_id, chunk) for an id, with score 0.0; None when unknown."""
    stmt = reports.with_report(sa.select(CHUNK.c.workspace_id, *_HIT_COLUMNS), CHUNK)
    row = session.execute(stmt.where(CHUNK.c.chunk_id == chunk_id_)).one_or_none()
    return None if row is None else (row.workspace_id, _hit(row, 0.0))
