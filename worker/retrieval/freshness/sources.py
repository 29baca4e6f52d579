"""Requested URLs and what they last led to (`evidence_source`), and revisions' confirmations.

An evidence item is named by its final URL, known only after a fetch; a retrieval knows only the
URL it was asked for. This table bridges the two, so a retrieval can find the revision its
request led to last time, with the validators to revalidate it and the status the result had.
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.domain.clock import as_utc
from worker.store import at_commit, db
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


def _key(workspace_id: uuid.UUID, kind: str, url: str, language: str | None) -> dict[str, Any]:
    return {
        "workspace_id": workspace_id,
        "kind": kind,
        "url_key": normalise_url(url),
        "language": (language or "").lower(),
    }


_STORED = SOURCE.join(EVIDENCE, EVIDENCE.c.id == SOURCE.c.evidence_id).join(
    REVISION,
    sa.and_(
        REVISION.c.evidence_id == SOURCE.c.evidence_id,
        REVISION.c.revision == SOURCE.c.revision,
    ),
)
_STORED_COLUMNS = [
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
]
#: One read per retrieval: its reuse window, and what its request led to last (if anything).
_FIND = (
    sa.select(RETRIEVAL.c.max_age_seconds, *_STORED_COLUMNS)
    .select_from(
        RETRIEVAL.outerjoin(
            _STORED, sa.and_(*(SOURCE.c[name] == sa.bindparam(f"b_{name}") for name in _KEY))
        )
    )
    .where(RETRIEVAL.c.id == sa.bindparam("b_retrieval_id"))
)


_MAX_AGES = sa.select(RETRIEVAL.c.id, RETRIEVAL.c.max_age_seconds).where(
    RETRIEVAL.c.id.in_(sa.bindparam("b_ids", expanding=True))
)


def find_many(
    session: Session,
    wanted: list[tuple[uuid.UUID, uuid.UUID, str, str, str | None]],
) -> dict[uuid.UUID, tuple[int | None, Any]]:
    """`find` for several retrievals (retrieval_id, workspace_id, kind, url, language) in two
    reads whatever their number, by retrieval id: the reuse window and the stored row (None:
    nothing stored), which `stored_source` reads; a retrieval that is not found is left out."""
    if not wanted:
        return {}
    ids = [item[0] for item in wanted]
    max_ages = {row.id: row.max_age_seconds for row in session.execute(_MAX_AGES, {"b_ids": ids})}
    keys = {item[0]: tuple(_key(*item[1:]).values()) for item in wanted}
    key_columns = [SOURCE.c[name] for name in _KEY]
    stored = (
        sa.select(*key_columns, *_STORED_COLUMNS)
        .select_from(_STORED)
        .where(sa.tuple_(*key_columns).in_(list(set(keys.values()))))
    )
    by_key = {tuple(row[:4]): row for row in session.execute(stored)}
    found: dict[uuid.UUID, tuple[int | None, Any]] = {}
    for retrieval_id, key in keys.items():
        if retrieval_id in max_ages:
            max_age = max_ages[retrieval_id]
            found[retrieval_id] = (None if max_age is None else int(max_age), by_key.get(key))
    return found


def stored_source(row: Any) -> StoredSource:
    """A stored row (of `find_many`) as a StoredSource; raises on one this version cannot
    read (KeyError, TypeError, ValueError)."""
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


def find(
    session: Session,
    retrieval_id: uuid.UUID,
    workspace_id: uuid.UUID,
    kind: str,
    url: str,
    language: str | None,
) -> tuple[int | None, StoredSource | None]:
    """The retrieval's reuse window (None: none), and what its request (workspace, kind,
    requested URL, language) led to last, if anything."""
    params = {f"b_{k}": v for k, v in _key(workspace_id, kind, url, language).items()}
    row = session.execute(_FIND, params | {"b_retrieval_id": retrieval_id}).one_or_none()
    if row is None:
        return None, None
    max_age = None if row.max_age_seconds is None else int(row.max_age_seconds)
    if row.evidence_id is None:
        return max_age, None
    return max_age, stored_source(row)


_CONFIRM_ONLY = (
    sa.update(REVISION)
    .where(
        REVISION.c.evidence_id == sa.bindparam("b_evidence_id"),
        REVISION.c.revision == sa.bindparam("b_revision"),
        sa.or_(REVISION.c.confirmed_at.is_(None), REVISION.c.confirmed_at < sa.bindparam("b_at")),
    )
    .values(confirmed_at=sa.bindparam("b_at"))
)
_CONFIRM = _CONFIRM_ONLY.returning(REVISION.c.created_at)


def confirm_at_commit(
    session: Session, evidence_id: uuid.UUID, revision: int, at: datetime
) -> None:
    """`confirm`, when nothing needs its answer: written as the transaction commits, with the
    transaction's other confirmations (a group of revalidations, one statement)."""
    row = {"b_evidence_id": evidence_id, "b_revision": revision, "b_at": at}
    at_commit.add_rows(session, _CONFIRM_ONLY, [row])


def confirm(session: Session, evidence_id: uuid.UUID, revision: int, at: datetime) -> bool:
    """Note that the revision's content was fetched or confirmed `at` (never moving back).

    True when the revision was first seen `at`: the settle that wrote it is this one (a settle
    writes a new revision's `created_at` from the same instant).
    """
    created = session.execute(
        _CONFIRM, {"b_evidence_id": evidence_id, "b_revision": revision, "b_at": at}
    ).scalar_one_or_none()
    return created is not None and as_utc(created) == as_utc(at)


@functools.cache
def _upsert(dialect: str) -> sa.Insert:
    """INSERT a request's row, or replace what it led to (built once per dialect)."""
    columns = [*_KEY, "evidence_id", "revision", "validators", "outcome", "fetched_at"]
    stmt = db.insert_for(dialect)(SOURCE).values(
        {name: sa.bindparam(f"b_{name}", type_=SOURCE.c[name].type) for name in columns}
    )
    changed = {name: stmt.excluded[name] for name in columns if name not in _KEY}
    return stmt.on_conflict_do_update(index_elements=_KEY, set_=changed)


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
    """Record (or replace) what this request led to `at`, as the transaction commits (with
    the transaction's other requests' rows: nothing reads it back before)."""
    values = {
        **_key(workspace_id, kind, url, language),
        "evidence_id": evidence_id,
        "revision": revision,
        "validators": validators,
        "outcome": outcome,
        "fetched_at": at,
    }
    row = {f"b_{k}": v for k, v in values.items()}
    at_commit.add_rows(session, _upsert(db.dialect(session)), [row])


def confirmations(session: Session, evidence_id: uuid.UUID) -> dict[int, datetime]:
    """When each revision of the item was last fetched or confirmed."""
    rows = session.execute(
        sa.select(REVISION.c.revision, LAST_CONFIRMED.label("at")).where(
            REVISION.c.evidence_id == evidence_id
        )
    )
    return {row.revision: as_utc(row.at) for row in rows}
