"""What changed between two revisions of one evidence item (`GET …/evidence/{id}/diff`).

The same rules as reading a revision: the key needs the research scope, an item in a
workspace it cannot read is answered exactly like an unknown one (404), and so is a revision
the item does not have. `from` may be after `to` (the diff then runs backwards), and equal
revisions are a valid, empty diff.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

from sqlalchemy.orm import Session

from api.auth import Principal
from api.errors import not_found
from worker.content.cue_diff import match_cues
from worker.content.diff import diff_text
from worker.content.results import SegmentDict
from worker.store import evidence as evidence_store
from worker.store.models import EvidenceRevision

#: The revision's fields a diff compares, as `changed` names them.
COMPARED = ("text", "title", "description", "segments")


def _segments(revision: EvidenceRevision) -> list[SegmentDict]:
    return cast("list[SegmentDict]", revision.segments or [])


def diff_payload(
    evidence_id: uuid.UUID, kind: str, old: EvidenceRevision, new: EvidenceRevision
) -> dict[str, Any]:
    """The diff answer: fields that differ, and the text's or the cues' changes by kind."""
    changed = [name for name in COMPARED if getattr(old, name) != getattr(new, name)]
    text = cues = None
    if kind == "published_captions":
        cues = match_cues(_segments(old), _segments(new))
    else:
        labels = (f"revision {old.revision}", f"revision {new.revision}")
        text = diff_text(old.text or "", new.text or "", labels)
    return {
        "diff": {
            "evidence_id": str(evidence_id),
            "kind": kind,
            "from_revision": old.revision,
            "to_revision": new.revision,
            "from_sha256": old.content_sha256,
            "to_sha256": new.content_sha256,
            "changed": changed,
            "text": text,
            "cues": cues,
            "truncated": (text or cues or {"truncated": False})["truncated"],
        }
    }


def diff_evidence(
    session: Session, principal: Principal, evidence_id: uuid.UUID, old: int, new: int
) -> dict[str, Any]:
    """The changes from revision `old` to revision `new` of an evidence item the key can read."""
    principal.require(None)
    evidence = evidence_store.get_evidence(session, evidence_id)
    if evidence is None or not principal.can_read(evidence.workspace_id):
        raise not_found("no such evidence")
    before = evidence_store.get_revision(session, evidence_id, old)
    after = before if new == old else evidence_store.get_revision(session, evidence_id, new)
    if before is None or after is None:
        raise not_found(f"no such revision: {old if before is None else new}")
    return diff_payload(evidence_id, evidence.kind, before, after)
