"""Evidence items and their immutable revisions.

An evidence item is a source as the service knows it: (workspace, kind, normalised final URL,
declared language). A retrieval with content records a new revision only when the content
fingerprint changed; unchanged content confirms the latest revision.
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.results import Result
from worker.domain import urls
from worker.store import db
from worker.store.models import MAX_STORED_REVISION, Evidence, EvidenceRevision
from worker.store.read_index import index_revision

if TYPE_CHECKING:
    from worker.content.images import ImageRef

EVIDENCE: sa.Table = Evidence.__table__  # type: ignore[attr-defined]
REVISION: sa.Table = EvidenceRevision.__table__  # type: ignore[attr-defined]


def normalise_url(url: str) -> str:
    """Canonical form for identity: the WHATWG serialisation without the fragment (scheme and
    host lower case, the host IDNA-mapped or the address it names, no default port).

    Never raises: a row stored before the API refused malformed URLs may hold text the standard
    does not read; such text is its own key (no serialisation equals it, since every
    serialisation parses).
    """
    parsed = urls.parse(url)
    if isinstance(parsed, urls.UrlRefusal):
        return url
    return parsed.without_fragment


def fingerprint(result: Result) -> str:
    """SHA-256 of the content a revision holds (not of when or how it was fetched)."""
    content = {
        "text": result["text"],
        "title": result["title"],
        "description": result["description"],
        "segments": result["segments"],
    }
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


_ITEM_KEY = ["workspace_id", "kind", "url_key", "language"]


@functools.cache
def _upsert_item(dialect: str) -> sa.Insert:
    """INSERT the item, or lock the existing one (a no-op DO UPDATE), returning it either way.

    The row lock makes concurrent writers of one item number revisions one at a time. A new
    item is inserted naming revision 1, which the caller records in the same transaction (so
    no second UPDATE); it tells a new item from an existing one by the id that comes back.
    """
    stmt = db.insert_for(dialect)(EVIDENCE).values(
        id=sa.bindparam("b_id"),
        workspace_id=sa.bindparam("b_workspace_id"),
        kind=sa.bindparam("b_kind"),
        url_key=sa.bindparam("b_url_key"),
        language=sa.bindparam("b_language"),
        latest_revision=1,
        created_at=sa.bindparam("b_now"),
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=_ITEM_KEY, set_={"latest_revision": EVIDENCE.c.latest_revision}
    )
    return stmt.returning(EVIDENCE.c.id, EVIDENCE.c.latest_revision)


_FIND_REVISION = sa.select(REVISION.c.revision).where(
    REVISION.c.evidence_id == sa.bindparam("b_evidence_id"),
    REVISION.c.content_sha256 == sa.bindparam("b_sha"),
)
_INSERT_REVISION = sa.insert(REVISION)
_SET_LATEST = (
    sa.update(EVIDENCE)
    .where(EVIDENCE.c.id == sa.bindparam("b_evidence_id"))
    .values(latest_revision=sa.bindparam("b_revision"))
)


class Recorded(NamedTuple):
    """The evidence revision a result with content names."""

    evidence_id: uuid.UUID
    revision: int
    #: Whether this call wrote that revision (False: identical content was stored already).
    written: bool


def record(
    session: Session,
    workspace_id: uuid.UUID,
    kind: str,
    requested_url: str,
    result: Result,
    now: datetime,
    images: Sequence[ImageRef] = (),
) -> Recorded:
    """Upsert the evidence item for `result`, and write its revision unless identical content
    is stored already.

    A new revision is split into passages and its page's `images` recorded (read side).
    """
    provenance = result["provenance"]
    url_key = normalise_url(provenance["source_url"] or requested_url)
    language = (provenance["language"] or "").lower()
    new_id = uuid.uuid4()
    item = session.execute(
        _upsert_item(db.dialect(session)),
        {
            "b_id": new_id,
            "b_workspace_id": workspace_id,
            "b_kind": kind,
            "b_url_key": url_key,
            "b_language": language,
            "b_now": now,
        },
    ).one()
    created = item.id == new_id
    digest = fingerprint(result)
    if not created:
        existing = session.execute(
            _FIND_REVISION, {"b_evidence_id": item.id, "b_sha": digest}
        ).scalar_one_or_none()
        if existing is not None:
            return Recorded(item.id, int(existing), False)
    revision = 1 if created else item.latest_revision + 1
    session.execute(
        _INSERT_REVISION,
        {
            "evidence_id": item.id,
            "revision": revision,
            "content_sha256": digest,
            "text": result["text"],
            "title": result["title"],
            "description": result["description"],
            "segments": result["segments"],
            "provenance": provenance,
            "created_at": now,
        },
    )
    if not created:  # a new item was inserted naming revision 1 already
        session.execute(_SET_LATEST, {"b_evidence_id": item.id, "b_revision": revision})

    index_revision(session, workspace_id, item.id, revision, result, images, new_item=created)
    return Recorded(item.id, revision, True)


def get_evidence(session: Session, evidence_id: uuid.UUID) -> Evidence | None:
    return session.get(Evidence, evidence_id)


def get_revision(
    session: Session, evidence_id: uuid.UUID, revision: int | None
) -> EvidenceRevision | None:
    """One revision (the latest when `revision` is None)."""
    if revision is not None and revision > MAX_STORED_REVISION:
        return None
    stmt = sa.select(EvidenceRevision).where(REVISION.c.evidence_id == evidence_id)
    stmt = (
        stmt.where(REVISION.c.revision == revision)
        if revision
        else stmt.order_by(REVISION.c.revision.desc())
    )
    return session.execute(stmt.limit(1)).scalar_one_or_none()


def list_revisions(session: Session, evidence_id: uuid.UUID) -> list[tuple[int, str, datetime]]:
    """(revision, content_sha256, created_at) for every revision, oldest first."""
    rows = session.execute(
        sa.select(REVISION.c.revision, REVISION.c.content_sha256, REVISION.c.created_at)
        .where(REVISION.c.evidence_id == evidence_id)
        .order_by(REVISION.c.revision)
    )
    return [(row.revision, row.content_sha256, row.created_at) for row in rows]


#: Evidence ids looked up per query (a brief may cite thousands).
LOOKUP_BATCH = 500


def latest_revisions(
    session: Session, workspace_id: uuid.UUID, evidence_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, int]:
    """The latest revision of each of `evidence_ids` that is an item of the workspace."""
    latest: dict[uuid.UUID, int] = {}
    for start in range(0, len(evidence_ids), LOOKUP_BATCH):
        batch = evidence_ids[start : start + LOOKUP_BATCH]
        rows = session.execute(
            sa.select(EVIDENCE.c.id, EVIDENCE.c.latest_revision).where(
                EVIDENCE.c.workspace_id == workspace_id, EVIDENCE.c.id.in_(batch)
            )
        )
        latest.update({row.id: row.latest_revision for row in rows})
    return latest
