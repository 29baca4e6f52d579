"""Research briefs with immutable revisions: create, revise, review, archive, read.

Every content write adds a revision; `revise` is optimistic (it names the revision it read and
loses to any write since). A finding may only cite evidence revisions of the same workspace.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any, Literal, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.results import EvidenceRef
from worker.domain.clock import isoformat
from worker.store import evidence
from worker.store.models import MAX_STORED_REVISION
from worker.store.read_models import Brief, BriefRevision

BRIEF: sa.Table = Brief.__table__  # type: ignore[attr-defined]
BRIEF_REVISION: sa.Table = BriefRevision.__table__  # type: ignore[attr-defined]


class Finding(TypedDict):
    """One finding of a brief, with the evidence revisions it rests on."""

    id: str
    statement: str
    basis: Literal["observed", "inferred", "generated"]
    evidence: list[EvidenceRef]
    uncertainty: str


class BriefContent(TypedDict):
    """A brief's content: exactly the keys of `briefs_get.output.json`'s `content`."""

    title: str
    question: str
    summary: str
    findings: list[Finding]
    angles: list[str]
    notes: str
    project_id: str | None
    project_revision: int | None
    corpus_snapshot_id: str | None
    language: str


class BriefDoc(TypedDict):
    """`brief` of `briefs_get.output.json`: a brief at one revision."""

    id: str
    workspace_id: str
    revision: int
    archived: bool
    created_at: str
    updated_at: str
    content: BriefContent
    reviewed_revision: int | None


class BriefError(Exception):
    """Base of the brief store's refusals."""


class BriefMissing(BriefError):
    """Raised when the brief does not exist in that workspace."""


class StaleRevision(BriefError):
    """Raised when `expected_revision` is not the brief's latest revision."""


class BriefArchived(BriefError):
    """Raised when a write targets an archived brief."""


class UnknownRevision(BriefError):
    """Raised when a review names a revision the brief does not have."""


class BadEvidence(BriefError):
    """Raised when a finding cites an evidence revision outside the workspace; names the field."""

    def __init__(self, field: str) -> None:
        super().__init__(field)
        self.field = field


def _references(content: BriefContent) -> Iterator[tuple[str, uuid.UUID, int]]:
    """(field path, evidence_id, revision) of every evidence reference in `content`."""
    for i, finding in enumerate(content.get("findings", [])):
        for j, ref in enumerate(finding.get("evidence", [])):
            path = f"content.findings[{i}].evidence[{j}]"
            yield path, uuid.UUID(str(ref["evidence_id"])), int(ref["revision"])


def check_evidence(session: Session, workspace_id: uuid.UUID, content: BriefContent) -> None:
    """Raise BadEvidence unless every reference names an evidence revision of the workspace."""
    refs = list(_references(content))
    ids = list({evidence_id for _, evidence_id, _ in refs})
    latest = evidence.latest_revisions(session, workspace_id, ids)
    for path, evidence_id, revision in refs:
        if evidence_id not in latest:
            raise BadEvidence(f"{path}.evidence_id")
        # Revisions are numbered 1, 2, … and never removed.
        if not 1 <= revision <= latest[evidence_id]:
            raise BadEvidence(f"{path}.revision")


def _add_revision(
    session: Session, brief_id: uuid.UUID, revision: int, content: BriefContent, now: datetime
) -> None:
    session.execute(
        sa.insert(BRIEF_REVISION).values(
            brief_id=brief_id, revision=revision, content=content, created_at=now
        )
    )


def create_brief(
    session: Session, workspace_id: uuid.UUID, content: BriefContent, now: datetime
) -> uuid.UUID:
    """Create a brief at revision 1; return its id."""
    check_evidence(session, workspace_id, content)
    brief_id = uuid.uuid4()
    session.execute(
        sa.insert(BRIEF).values(
            id=brief_id,
            workspace_id=workspace_id,
            latest_revision=1,
            archived=False,
            created_at=now,
            updated_at=now,
        )
    )
    _add_revision(session, brief_id, 1, content, now)
    return brief_id


def _current(session: Session, workspace_id: uuid.UUID, brief_id: uuid.UUID) -> Any:
    row = session.execute(
        sa.select(BRIEF.c.latest_revision, BRIEF.c.archived).where(
            BRIEF.c.id == brief_id, BRIEF.c.workspace_id == workspace_id
        )
    ).one_or_none()
    if row is None:
        raise BriefMissing(str(brief_id))
    return row


def revise_brief(
    session: Session,
    workspace_id: uuid.UUID,
    brief_id: uuid.UUID,
    expected_revision: int,
    content: BriefContent,
    now: datetime,
) -> int:
    """Add a revision on top of `expected_revision`; return the new revision number."""
    current = _current(session, workspace_id, brief_id)
    if current.archived:
        raise BriefArchived(str(brief_id))
    check_evidence(session, workspace_id, content)
    if expected_revision >= MAX_STORED_REVISION:  # never the latest (nor is the one after it)
        raise StaleRevision(str(brief_id))
    won = session.execute(
        sa.update(Brief)
        .where(
            BRIEF.c.id == brief_id,
            BRIEF.c.latest_revision == expected_revision,
            BRIEF.c.archived.is_(False),
        )
        .values(latest_revision=expected_revision + 1, updated_at=now)
        .returning(BRIEF.c.latest_revision)
    ).scalar_one_or_none()
    if won is None:
        raise StaleRevision(str(brief_id))
    _add_revision(session, brief_id, int(won), content, now)
    return int(won)


def review_brief(
    session: Session, workspace_id: uuid.UUID, brief_id: uuid.UUID, revision: int, now: datetime
) -> None:
    """Mark `revision` as the reviewed one."""
    current = _current(session, workspace_id, brief_id)
    if current.archived:
        raise BriefArchived(str(brief_id))
    if not 1 <= revision <= current.latest_revision:
        raise UnknownRevision(str(revision))
    session.execute(
        sa.update(Brief)
        .where(BRIEF.c.id == brief_id)
        .values(reviewed_revision=revision, updated_at=now)
    )


def archive_brief(
    session: Session, workspace_id: uuid.UUID, brief_id: uuid.UUID, now: datetime
) -> None:
    """Archive the brief (idempotent: archiving twice changes nothing more)."""
    current = _current(session, workspace_id, brief_id)
    if not current.archived:
        session.execute(
            sa.update(Brief).where(BRIEF.c.id == brief_id).values(archived=True, updated_at=now)
        )


def read_brief(
    session: Session, workspace_id: uuid.UUID, brief_id: uuid.UUID, revision: int | None = None
) -> BriefDoc | None:
    """The brief at its latest (or an exact) revision, shaped as briefs_get's `brief`."""
    brief = session.execute(
        sa.select(Brief).where(BRIEF.c.id == brief_id, BRIEF.c.workspace_id == workspace_id)
    ).scalar_one_or_none()
    if brief is None:
        return None
    wanted = revision or brief.latest_revision
    if wanted > MAX_STORED_REVISION:
        return None
    row = session.get(BriefRevision, (brief_id, wanted))
    if row is None:
        return None
    updated = brief.updated_at if wanted == brief.latest_revision else row.created_at
    return {
        "id": str(brief.id),
        "workspace_id": str(brief.workspace_id),
        "revision": row.revision,
        "archived": bool(brief.archived),
        "created_at": isoformat(brief.created_at),
        "updated_at": isoformat(updated),
        # The column holds the content a write stored, which was a BriefContent.
        "content": cast(BriefContent, row.content),
        "reviewed_revision": brief.reviewed_revision,
    }
