"""Index a new evidence revision for the read side, in the transaction that records it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy.orm import Session

from worker.content.images import ImageRef
from worker.content.results import Result
from worker.store import chunks, reports
from worker.store import images as image_store


def index_revision(
    session: Session,
    workspace_id: uuid.UUID,
    evidence_id: uuid.UUID,
    revision: int,
    result: Result,
    images: Sequence[ImageRef] = (),
    *,
    new_item: bool = False,
) -> None:
    """Store the revision's passages and images, and give the item its report id when the
    transaction commits (`reports.number_at_commit`).

    `new_item`: the item was created in this transaction, so it has no report id yet.
    """
    reports.number_at_commit(session, workspace_id, evidence_id, new_item=new_item)
    language = result["provenance"]["language"]
    chunks.record_chunks(
        session, workspace_id, evidence_id, revision, language, result["text"], result["segments"]
    )
    image_store.record_images(session, workspace_id, evidence_id, revision, language, images)
