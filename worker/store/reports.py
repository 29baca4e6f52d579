"""Evidence items as "reports": a stable integer id, and the columns every hit shows."""

from __future__ import annotations

import functools
import uuid
from datetime import date
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.clock import as_utc
from worker.store import db
from worker.store.models import Evidence, EvidenceRevision
from worker.store.read_models import EvidenceReport

EVIDENCE: sa.Table = Evidence.__table__  # type: ignore[attr-defined]
REVISION: sa.Table = EvidenceRevision.__table__  # type: ignore[attr-defined]
REPORT: sa.Table = EvidenceReport.__table__  # type: ignore[attr-defined]


@functools.cache
def _insert_report(dialect: str) -> sa.Insert:
    return (
        db.insert_for(dialect)(REPORT)
        .values(evidence_id=sa.bindparam("b_evidence_id"))
        .on_conflict_do_nothing(index_elements=["evidence_id"])
    )


def ensure_report(session: Session, evidence_id: uuid.UUID) -> None:
    """Give an evidence item its integer report id (once)."""
    session.execute(_insert_report(db.dialect(session)), {"b_evidence_id": evidence_id})


def with_report(stmt: sa.Select[Any], table: sa.Table) -> sa.Select[Any]:
    """Join a passage/image table to its evidence item, revision and report id."""
    return (
        stmt.add_columns(
            REPORT.c.report_id,
            REVISION.c.title,
            REVISION.c.created_at.label("revised_at"),
            EVIDENCE.c.url_key,
        )
        .select_from(table)
        .join(EVIDENCE, EVIDENCE.c.id == table.c.evidence_id)
        .join(
            REVISION,
            (REVISION.c.evidence_id == table.c.evidence_id)
            & (REVISION.c.revision == table.c.revision),
        )
        .join(REPORT, REPORT.c.evidence_id == table.c.evidence_id)
    )


def filter_evidence(
    stmt: sa.Select[Any], table: sa.Table, *, kind: str | None = None, language: str | None = None
) -> sa.Select[Any]:
    """Keep latest revisions only, of one kind and language (primary subtag matches) if given."""
    stmt = stmt.where(table.c.revision == EVIDENCE.c.latest_revision)
    if kind:
        stmt = stmt.where(EVIDENCE.c.kind == kind)
    if language:
        tag = language.lower()
        stmt = stmt.where(sa.or_(EVIDENCE.c.language == tag, EVIDENCE.c.language.like(f"{tag}-%")))
    return stmt


def report_fields(row: Any, score: float) -> dict[str, Any]:
    """report_id, title, date and score of a hit, as the read tools show them."""
    revised: date = as_utc(row.revised_at).date()
    return {
        "report_id": int(row.report_id),
        "title": row.title or row.url_key,
        "date": revised.isoformat(),
        "score": float(score),
    }
