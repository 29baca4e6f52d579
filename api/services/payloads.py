"""Turn rows into the contract's payloads."""

from __future__ import annotations

from typing import Any, TypedDict, cast

import sqlalchemy as sa

from worker.clock import as_utc, isoformat
from worker.content.results import EvidenceRef, Result
from worker.store.models import Evidence, EvidenceRevision, Retrieval


class RetrievalDoc(TypedDict):
    """`retrieval` of `evidence_retrieve.output.json`: one retrieval as it stands."""

    id: str
    workspace_id: str
    mutation_id: str
    state: str
    kind: str | None
    created_at: str
    settled_at: str | None
    valid_until: str
    result: Result | None
    evidence: EvidenceRef | None


class RetrievalPayload(TypedDict):
    """What the retrieval routes and the evidence_retrieve tool answer."""

    retrieval: RetrievalDoc


def retrieval_payload(row: Retrieval | sa.Row[Any]) -> RetrievalPayload:
    # A plain row (`worker.store.retrievals.read_row`) has the model's attributes.
    """`{"retrieval": …}` exactly as `evidence_retrieve.output.json` describes it."""
    evidence: EvidenceRef | None = None
    if row.evidence_id is not None and row.evidence_revision is not None:
        evidence = {"evidence_id": str(row.evidence_id), "revision": row.evidence_revision}
    # The column holds the JSON `worker.content.results` built: a Result, or NULL while open.
    result = cast("Result | None", row.result)
    return {
        "retrieval": {
            "id": str(row.id),
            "workspace_id": str(row.workspace_id),
            "mutation_id": str(row.mutation_id),
            "state": row.state,
            "kind": row.kind,
            "created_at": isoformat(row.created_at),
            "settled_at": isoformat(row.settled_at) if row.settled_at else None,
            "valid_until": isoformat(row.valid_until),
            "result": result,
            "evidence": evidence,
        }
    }


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
