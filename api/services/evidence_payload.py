"""Turn rows into the contract's payloads."""

from __future__ import annotations

from typing import Any

from worker.domain.clock import as_utc, isoformat
from worker.store.models import Evidence, EvidenceRevision
from worker.store.retrieval_view import RetrievalDoc, RetrievalPayload, retrieval_payload

__all__ = ["RetrievalDoc", "RetrievalPayload", "evidence_payload", "retrieval_payload"]


def evidence_payload(
    evidence: Evidence,
    revision: EvidenceRevision,
    revisions: list[tuple[int, str, Any]],
    confirmed: dict[int, Any] | None = None,
) -> dict[str, Any]:
    """One evidence revision with the list of all revisions, each with when it was first seen
    (`first_seen_at`, as `created_at`) and last fetched or confirmed (`last_confirmed_at`)."""
    seen = confirmed or {}
    return {
        "evidence": {
            "evidence_id": str(evidence.id),
            "workspace_id": str(evidence.workspace_id),
            "kind": evidence.kind,
            "url": evidence.url_key,
            "language": evidence.language or None,
            "revision": revision.revision,
            "latest_revision": evidence.latest_revision,
            "content_sha256": revision.content_sha256,
            "text": revision.text,
            "title": revision.title,
            "description": revision.description,
            "segments": revision.segments,
            "provenance": revision.provenance,
            "created_at": isoformat(as_utc(revision.created_at)),
            "last_confirmed_at": isoformat(seen.get(revision.revision, revision.created_at)),
            "revisions": [
                {
                    "revision": n,
                    "content_sha256": digest,
                    "created_at": isoformat(at),
                    "first_seen_at": isoformat(at),
                    "last_confirmed_at": isoformat(seen.get(n, at)),
                }
                for n, digest, at in revisions
            ],
        }
    }
