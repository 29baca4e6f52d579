"""An original URL's revisions in one workspace, oldest first: what Memento (RFC 7089) lists.

One URL may be several evidence items (kinds, languages); each of their revisions is a memento
of it. Read only; `api.services.memento` turns them into TimeMaps and TimeGate answers.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple, get_args

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.results import Kind
from worker.store.evidence import EVIDENCE, REVISION

#: Every kind an item can have. Naming them all lets the identity index (workspace, kind,
#: url_key, language) find the URL's items directly instead of reading every item of the
#: workspace (bench/memento_lookup.py).
KINDS = get_args(Kind)


class UrlRevision(NamedTuple):
    evidence_id: uuid.UUID
    revision: int
    created_at: datetime


def lookup(workspace_id: uuid.UUID, url_key: str) -> sa.Select[tuple[uuid.UUID, int, datetime]]:
    """Every revision of the workspace's items at `url_key`, by `created_at`, then item and
    revision (a stable order for revisions recorded at one instant)."""
    return (
        sa.select(REVISION.c.evidence_id, REVISION.c.revision, REVISION.c.created_at)
        .join(EVIDENCE, EVIDENCE.c.id == REVISION.c.evidence_id)
        .where(
            EVIDENCE.c.workspace_id == workspace_id,
            EVIDENCE.c.kind.in_(KINDS),
            EVIDENCE.c.url_key == url_key,
        )
        .order_by(REVISION.c.created_at, REVISION.c.evidence_id, REVISION.c.revision)
    )


def url_revisions(session: Session, workspace_id: uuid.UUID, url_key: str) -> list[UrlRevision]:
    """`lookup`'s rows."""
    rows = session.execute(lookup(workspace_id, url_key))
    return [UrlRevision(row.evidence_id, row.revision, row.created_at) for row in rows]
