"""What of an evidence item a key may read: an item in a workspace it cannot read, and a
revision the item lacks, are answered exactly like an unknown one (404)."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import not_found
from worker.store import evidence as evidence_store
from worker.store.models import Evidence, EvidenceRevision


def readable_item(session: Session, principal: Principal, evidence_id: uuid.UUID) -> Evidence:
    """The item, if the key may read its workspace; else 404 as for an unknown id."""
    item = evidence_store.get_evidence(session, evidence_id)
    if item is None or not principal.can_read(item.workspace_id):
        raise not_found("no such evidence")
    return item


def readable_revision(
    session: Session, principal: Principal, evidence_id: uuid.UUID, revision: int | None
) -> tuple[Evidence, EvidenceRevision]:
    """The item and its revision (the latest when None), as `readable_item`; a revision the
    item lacks is 404."""
    item = readable_item(session, principal, evidence_id)
    row = evidence_store.get_revision(session, evidence_id, revision)
    if row is None:
        raise not_found("no such revision")
    return item, row
