"""Evidence items and their immutable revisions.

An evidence item is a source as the service knows it: (workspace, kind, normalised final URL,
declared language). A retrieval with content records a new revision only when the content
fingerprint changed; unchanged content confirms the latest revision.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from worker.models import Evidence, EvidenceRevision

if TYPE_CHECKING:
    from worker.images import ImageRef

E = Evidence.__table__.c  # type: ignore[attr-defined]
R = EvidenceRevision.__table__.c  # type: ignore[attr-defined]

DEFAULT_PORTS = {"https": 443, "http": 80}


def normalise_url(url: str) -> str:
    """Canonical form for identity: lower-case scheme and host, no default port or fragment."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port in (None, DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def fingerprint(result: dict[str, Any]) -> str:
    """SHA-256 of the content a revision holds (not of when or how it was fetched)."""
    content = {
        "text": result["text"],
        "title": result["title"],
        "description": result["description"],
        "segments": result["segments"],
    }
    canonical = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def _insert(session: Session) -> Any:
    return postgresql.insert if session.bind.dialect.name == "postgresql" else sqlite.insert  # type: ignore[union-attr]


def record(
    session: Session,
    workspace_id: uuid.UUID,
    kind: str,
    requested_url: str,
    result: dict[str, Any],
    now: datetime,
    images: Sequence[ImageRef] = (),
) -> tuple[uuid.UUID, int]:
    """Upsert the evidence item for `result` and return (evidence_id, revision) it names.

    A new revision is split into passages and its page's `images` recorded (read side).
    """
    provenance = result["provenance"]
    url_key = normalise_url(provenance["source_url"] or requested_url)
    language = (provenance["language"] or "").lower()
    session.execute(
        _insert(session)(Evidence.__table__)
        .values(
            id=uuid.uuid4(),
            workspace_id=workspace_id,
            kind=kind,
            url_key=url_key,
            language=language,
            latest_revision=0,
            created_at=now,
        )
        .on_conflict_do_nothing(index_elements=["workspace_id", "kind", "url_key", "language"])
    )
    # Lock the item so concurrent writers number revisions one at a time.
    evidence = session.execute(
        sa.select(E.id, E.latest_revision)
        .where(
            E.workspace_id == workspace_id,
            E.kind == kind,
            E.url_key == url_key,
            E.language == language,
        )
        .with_for_update()
    ).one()
    digest = fingerprint(result)
    existing = session.execute(
        sa.select(R.revision).where(R.evidence_id == evidence.id, R.content_sha256 == digest)
    ).scalar_one_or_none()
    if existing is not None:
        return evidence.id, int(existing)
    revision = evidence.latest_revision + 1
    session.execute(
        sa.insert(EvidenceRevision.__table__).values(
            evidence_id=evidence.id,
            revision=revision,
            content_sha256=digest,
            text=result["text"],
            title=result["title"],
            description=result["description"],
            segments=result["segments"],
            provenance=provenance,
            created_at=now,
        )
    )
    session.execute(sa.update(Evidence).where(E.id == evidence.id).values(latest_revision=revision))
    from worker.read_index import index_revision

    index_revision(session, workspace_id, evidence.id, revision, result, images)
    return evidence.id, revision


def get_evidence(session: Session, evidence_id: uuid.UUID) -> Evidence | None:
    return session.get(Evidence, evidence_id)


def get_revision(
    session: Session, evidence_id: uuid.UUID, revision: int | None
) -> EvidenceRevision | None:
    """One revision (the latest when `revision` is None)."""
    stmt = sa.select(EvidenceRevision).where(R.evidence_id == evidence_id)
    stmt = stmt.where(R.revision == revision) if revision else stmt.order_by(R.revision.desc())
    return session.execute(stmt.limit(1)).scalar_one_or_none()


def list_revisions(session: Session, evidence_id: uuid.UUID) -> list[tuple[int, str, datetime]]:
    """(revision, content_sha256, created_at) for every revision, oldest first."""
    rows = session.execute(
        sa.select(R.revision, R.content_sha256, R.created_at)
        .where(R.evidence_id == evidence_id)
        .order_by(R.revision)
    )
    return [(r.revision, r.content_sha256, r.created_at) for r in rows]
