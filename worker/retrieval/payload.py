"""A retrieval as the contract shows it (`evidence_retrieve.output.json`).

Shared by the API (every retrieval route and tool) and the worker (webhook payloads), so a
receiver gets exactly what GET answers.
"""

from __future__ import annotations

from typing import Any, TypedDict, cast

import sqlalchemy as sa

from worker.content.results import EvidenceRef, Result
from worker.domain.clock import isoformat
from worker.store.models import Retrieval


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
    # A plain row (`worker.retrieval.records.read_row`) has the model's attributes.
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
