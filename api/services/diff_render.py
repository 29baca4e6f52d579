"""A diff's answer from two revisions: loaded, diffed and rendered in a diff process
(`api.services.diff_processes`), so that the API's server processes only wait for the bytes
(loading two 1 000-cue revisions is itself milliseconds of CPU: their JSON decoded)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, cast

from worker.content.cue_diff import match_cues
from worker.content.diff import diff_text
from worker.content.results import SegmentDict
from worker.store import evidence as evidence_store
from worker.store.db import read_only_session

#: The revision's fields a diff compares, as `changed` names them.
COMPARED = ("text", "title", "description", "segments")


@dataclass(frozen=True)
class RevisionFields:
    """What a diff reads of one revision."""

    revision: int
    content_sha256: str
    text: str | None
    title: str | None
    description: str | None
    segments: list[SegmentDict] | None

    @classmethod
    def of(cls, row: Any) -> RevisionFields:
        """The fields of an `EvidenceRevision` row."""
        return cls(
            row.revision,
            row.content_sha256,
            row.text,
            row.title,
            row.description,
            cast("list[SegmentDict] | None", row.segments),
        )


def diff_payload(
    evidence_id: uuid.UUID, kind: str, old: RevisionFields, new: RevisionFields
) -> dict[str, Any]:
    """The diff answer: fields that differ, and the text's or the cues' changes by kind."""
    changed = [name for name in COMPARED if getattr(old, name) != getattr(new, name)]
    text = cues = None
    if kind == "published_captions":
        cues = match_cues(old.segments or [], new.segments or [])
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


def render(evidence_id: uuid.UUID, kind: str, old: RevisionFields, new: RevisionFields) -> bytes:
    """The answer as JSON bytes (the event loop never walks it)."""
    payload = diff_payload(evidence_id, kind, old, new)
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode()


def render_stored(evidence_id: uuid.UUID, kind: str, old: int, new: int) -> bytes | int:
    """The answer for revisions `old` and `new` of a stored item, as JSON bytes; or the number
    of the revision it lacks (the caller answers 404: an exception would have to cross the
    process boundary)."""
    with read_only_session() as session:
        before = evidence_store.get_revision(session, evidence_id, old)
        after = before if new == old else evidence_store.get_revision(session, evidence_id, new)
        if before is None or after is None:
            return old if before is None else new
        first = RevisionFields.of(before)
        second = first if after is before else RevisionFields.of(after)
    return render(evidence_id, kind, first, second)
