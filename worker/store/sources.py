"""Requested URLs and what they last led to (`evidence_source`), and revisions' confirmations.

An evidence item is named by its final URL, known only after a fetch; a retrieval knows only the
URL it was asked for. This table bridges the two, so a retrieval can find the revision its
request led to last time, with the validators to revalidate it and the status the result had.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.clock import as_utc
from worker.store import db
from worker.store.evidence import EVIDENCE, REVISION, normalise_url
from worker.store.models import EvidenceSource, Retrieval

SOURCE: sa.Table = EvidenceSource.__table__  # type: ignore[attr-defined]
RETRIEVAL: sa.Table = Retrieval.__table__  # type: ignore[attr-defined]
_KEY = ["workspace_id", "kind", "url_key", "language"]
#: When a revision was last fetched or confirmed: `confirmed_at`, else when it was first seen.
LAST_CONFIRMED = sa.func.coalesce(REVISION.c.confirmed_at, REVISION.c.created_at)


@dataclass(frozen=True)
class StoredSource:
    """What a request led to last time: the revision's content, validators and status."""

    evidence_id: uuid.UUID
    revision: int
    latest_revision: int
    validators: list[Any]
    outcome: dict[str, Any]
    text: str
    title: str | None
    description: str | None
    segments: list[Any]
    provenance: dict[str, Any]
    last_confirmed: datetime


@dataclass(frozen=True)
class Settled:
    """The evidence revision a settled retrieval named, and whether it was new then."""

    evidence_id: uuid.UUID
    revision: int
    settled_at: datetime
    new: bool


def _key(workspace_id: uuid.UUID, kind: str, url: str, language: str | None) -> dict[str, Any]:
    return {
        "workspace_id": workspace_id,
        "kind": kind,
        "url_key": normalise_url(url),
        "language": (language or "").lower(),
    }


_FIND = (
    sa.select(
        SOURCE.c.evidence_id,
        SOURCE.c.revision,
        SOURCE.c.validators,
        SOURCE.c.outcome,
        EVIDENCE.c.latest_revision,
        REVISION.c.text,
        REVISION.c.title,
        REVISION.c.description,
        REVISION.c.segments,
        REVISION.c.provenance,
        LAST_CONFIRMED.label("last_confirmed"),
    )
    .join(EVIDENCE, EVIDENCE.c.id == SOURCE.c.evidence_id)
    .join(
        REVISION,
        sa.and_(
            REVISION.c.evidence_id == SOURCE.c.evidence_id,
            REVISION.c.revision == SOURCE.c.revision,
        ),
    )
    .where(*(SOURCE.c[name] == sa.bindparam(f"b_{name}") for name in _KEY))
)


def find(
    session: Session, workspace_id: uuid.UUID, kind: str, url: str, language: str | None
) -> StoredSource | None:
    """What this request (workspace, kind, requested URL, language) led to last, if anything."""
    params = {f"b_{k}": v for k, v in _key(workspace_id, kind, url, language).items()}
    row = session.execute(_FIND, params).one_or_none()
    if row is None:
        return None
    return StoredSource(
        evidence_id=row.evidence_id,
        revision=row.revision,
        latest_revision=row.latest_revision,
        validators=list(row.validators),
        outcome=dict(row.outcome),
        text=row.text,
        title=row.title,
        description=row.description,
        segments=list(row.segments),
        provenance=dict(row.provenance),
        last_confirmed=as_utc(row.last_confirmed),
    )


def max_age_of(session: Session, retrieval_id: uuid.UUID) -> int | None:
    """The reuse window the client sent with this retrieval (None: none)."""
    value = session.execute(
        sa.select(RETRIEVAL.c.max_age_seconds).where(RETRIEVAL.c.id == retrieval_id)
    ).scalar_one_or_none()
    return None if value is None else int(value)


def settled_revision(session: Session, retrieval_id: uuid.UUID) -> Settled | None:
    """The revision a completed retrieval named; `new` when that settle created it.

    The settle writes the revision's `created_at` and the retrieval's `settled_at` from one
    instant, so they are equal exactly when this retrieval's content was a new revision.
    """
    row = session.execute(
        sa.select(
            RETRIEVAL.c.evidence_id,
            RETRIEVAL.c.evidence_revision,
            RETRIEVAL.c.settled_at,
            REVISION.c.created_at,
        )
        .join(
            REVISION,
            sa.and_(
                REVISION.c.evidence_id == RETRIEVAL.c.evidence_id,
                REVISION.c.revision == RETRIEVAL.c.evidence_revision,
            ),
        )
        .where(RETRIEVAL.c.id == retrieval_id)
    ).one_or_none()
    if row is None or row.settled_at is None:
        return None
    settled_at = as_utc(row.settled_at)
    return Settled(
        row.evidence_id, row.evidence_revision, settled_at, as_utc(row.created_at) == settled_at
    )


def confirm(session: Session, evidence_id: uuid.UUID, revision: int, at: datetime) -> None:
    """Note that the revision's content was fetched or confirmed `at` (never moving back)."""
    session.execute(
        sa.update(REVISION)
        .where(
            REVISION.c.evidence_id == evidence_id,
            REVISION.c.revision == revision,
            sa.or_(REVISION.c.confirmed_at.is_(None), REVISION.c.confirmed_at < at),
        )
        .values(confirmed_at=at)
    )


def remember(
    session: Session,
    workspace_id: uuid.UUID,
    kind: str,
    url: str,
    language: str | None,
    *,
    evidence_id: uuid.UUID,
    revision: int,
    validators: list[Any],
    outcome: dict[str, Any],
    at: datetime,
) -> None:
    """Record (or replace) what this request led to `at`."""
    values = {
        **_key(workspace_id, kind, url, language),
        "evidence_id": evidence_id,
        "revision": revision,
        "validators": validators,
        "outcome": outcome,
        "fetched_at": at,
    }
    stmt = db.insert_for(db.dialect(session))(SOURCE).values(values)
    changed = {k: v for k, v in values.items() if k not in _KEY}
    session.execute(stmt.on_conflict_do_update(index_elements=_KEY, set_=changed))


def confirmations(session: Session, evidence_id: uuid.UUID) -> dict[int, datetime]:
    """When each revision of the item was last fetched or confirmed."""
    rows = session.execute(
        sa.select(REVISION.c.revision, LAST_CONFIRMED.label("at")).where(
            REVISION.c.evidence_id == evidence_id
        )
    )
    return {row.revision: as_utc(row.at) for row in rows}
