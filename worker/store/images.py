"""Images of evidence revisions: recorded with the revision, searched over their captions."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.images import ImageRef
from worker.store import at_commit, fulltext, reports
from worker.store.read_models import EvidenceImage

IMAGE: sa.Table = EvidenceImage.__table__  # type: ignore[attr-defined]
_INSERT_IMAGE = sa.insert(IMAGE)
#: Namespace of image ids: uuid5 of (evidence id, revision, ordinal).
IMAGE_NAMESPACE = uuid.UUID("5d0c6a2e-1f43-4b7e-8c2a-9e6f3b1d4c27")
MAX_LIMIT = 50


def image_id(evidence_id: uuid.UUID, revision: int, ordinal: int) -> str:
    """The durable, opaque id of image `ordinal` of an evidence revision."""
    return "im_" + uuid.uuid5(IMAGE_NAMESPACE, f"{evidence_id}/{revision}/{ordinal}").hex


def record_images(
    session: Session,
    workspace_id: uuid.UUID,
    evidence_id: uuid.UUID,
    revision: int,
    language: str | None,
    images: Sequence[ImageRef],
) -> int:
    """Store the images a new revision's page showed; return how many."""
    config = fulltext.ts_config(language)
    if images:  # written with the transaction's other images as it commits
        at_commit.add_rows(
            session,
            _INSERT_IMAGE,
            [
                {
                    "image_id": image_id(evidence_id, revision, ordinal),
                    "workspace_id": workspace_id,
                    "evidence_id": evidence_id,
                    "revision": revision,
                    "ordinal": ordinal,
                    "url": ref.url,
                    "caption": ref.caption,
                    "alt": ref.alt,
                    "copyright": ref.copyright,
                    "format": ref.format,
                    "ts_config": config,
                }
                for ordinal, ref in enumerate(images)
            ],
        )
    return len(images)


def _hit(row: Any, score: float) -> dict[str, Any]:
    return {
        **reports.report_fields(row, score),
        "url": row.url,
        "caption": row.caption,
        "copyright": row.copyright,
        "format": row.format,
        "image_id": row.image_id,
    }


def _columns() -> sa.Select[Any]:
    return sa.select(
        IMAGE.c.image_id,
        IMAGE.c.url,
        IMAGE.c.caption,
        IMAGE.c.copyright,
        IMAGE.c.format,
        IMAGE.c.workspace_id,
    )


def search_images(
    session: Session, workspace_id: uuid.UUID, query: str, *, limit: int = 10
) -> list[dict[str, Any]]:
    """Images of the workspace's latest revisions whose caption or alt text match, best first."""
    base = reports.filter_evidence(reports.with_report(_columns(), IMAGE), IMAGE)
    base = base.where(IMAGE.c.workspace_id == workspace_id)
    configs = session.execute(
        sa.select(IMAGE.c.ts_config).where(IMAGE.c.workspace_id == workspace_id).distinct()
    ).scalars()
    found = fulltext.ranked(session, base, IMAGE, query, configs)
    if found is None:
        return []
    stmt, score = found
    rows = session.execute(
        stmt.add_columns(score).order_by(score.desc(), IMAGE.c.seq).limit(min(limit, MAX_LIMIT))
    )
    return [_hit(row, row.score) for row in rows]


def get_image(session: Session, image_id_: str) -> tuple[uuid.UUID, dict[str, Any]] | None:
    """(workspace_id, image) for an id, with score 0.0; None when unknown."""
    stmt = reports.with_report(_columns(), IMAGE).where(IMAGE.c.image_id == image_id_)
    row = session.execute(stmt).one_or_none()
    return None if row is None else (row.workspace_id, _hit(row, 0.0))
