"""A retrieval as the contract shows it (`evidence_retrieve.output.json`): its row, read.

Shared by the API (every retrieval route and tool) and the worker (webhook payloads), so a
receiver gets exactly what GET answers. The lifecycle's writes are `worker.retrieval`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TypedDict, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.results import EvidenceRef, Result
from worker.domain.clock import as_utc, isoformat
from worker.domain.states import RetrievalState as S
from worker.store.models import OPEN_SQL, Retrieval

RETRIEVAL: sa.Table = Retrieval.__table__  # type: ignore[attr-defined]


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
    # A plain row (`read_row`) has the model's attributes.
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


#: A retrieval row as read (the model's attributes, without building a model object: SQLModel's
#: constructor validates every field, about 1 ms a row on a loaded machine, 1 s per batch).
RetrievalRow = sa.Row[Any]


def get_retrieval(session: Session, retrieval_id: uuid.UUID) -> Retrieval | None:
    return session.get(Retrieval, retrieval_id, populate_existing=True)


#: One retrieval by id as a plain row: its payload needs the columns only, and the ORM's
#: identity map and object construction cost more CPU than the query on this hot path.
_ROW_BY_ID = sa.select(*RETRIEVAL.columns).where(RETRIEVAL.c.id == sa.bindparam("retrieval_id"))


def read_rows(session: Session, retrieval_ids: Sequence[uuid.UUID]) -> list[sa.Row[Any]]:
    """The retrievals' columns as plain rows, in no particular order (unknown ids are missing)."""
    query = sa.select(*RETRIEVAL.columns).where(RETRIEVAL.c.id.in_(set(retrieval_ids)))
    return list(session.execute(query))


def read_row(session: Session, retrieval_id: uuid.UUID) -> sa.Row[Any] | None:
    """The retrieval's columns as a plain row (attributes named as the model's), or None."""
    return session.execute(_ROW_BY_ID, {"retrieval_id": retrieval_id}).one_or_none()


def oldest_open_age(session: Session, now: datetime) -> dict[str, float | None]:
    """Age in seconds of the oldest pending and running retrievals (for health and alerts)."""
    ages: dict[str, float | None] = {}
    for state in (S.PENDING, S.RUNNING):
        oldest = session.execute(
            sa.select(sa.func.min(RETRIEVAL.c.created_at)).where(RETRIEVAL.c.state == state.value)
        ).scalar_one_or_none()
        ages[state.value] = None if oldest is None else age_seconds(now, oldest)
    return ages


def age_seconds(now: datetime, then: datetime) -> float:

    return max(0.0, (now - as_utc(then)).total_seconds())


def count_pending(session: Session) -> int:
    """How many retrievals wait for a worker (one indexed count)."""
    query = sa.select(sa.func.count()).where(RETRIEVAL.c.state == S.PENDING.value)
    return int(session.execute(query).scalar_one())


def count_by_outcome(session: Session) -> list[tuple[str, str, str | None, str | None, int]]:
    """(kind, state, result status, result reason, rows) for every combination present."""
    status_of = RETRIEVAL.c.result["status"].as_string()
    reason_of = RETRIEVAL.c.result["reason"].as_string()
    query = sa.select(RETRIEVAL.c.kind, RETRIEVAL.c.state, status_of, reason_of, sa.func.count())
    query = query.group_by(RETRIEVAL.c.kind, RETRIEVAL.c.state, status_of, reason_of)
    return [
        (kind, state, status, reason, int(count))
        for kind, state, status, reason, count in session.execute(query)
    ]


def pending_by_lane(session: Session, now: datetime) -> dict[str, tuple[int, float | None]]:
    """Per lane: pending retrievals, and the age in seconds of the oldest one (None if none)."""
    query = (
        sa.select(RETRIEVAL.c.lane, sa.func.count(), sa.func.min(RETRIEVAL.c.created_at))
        .where(RETRIEVAL.c.state == S.PENDING.value)
        .group_by(RETRIEVAL.c.lane)
    )
    return {
        lane: (int(n), None if oldest is None else age_seconds(now, oldest))
        for lane, n, oldest in session.execute(query)
    }


def open_by_workspace(session: Session) -> list[tuple[str, str, str, int]]:
    """Open retrievals by (workspace, lane, state)."""
    query = (
        sa.select(RETRIEVAL.c.workspace_id, RETRIEVAL.c.lane, RETRIEVAL.c.state, sa.func.count())
        .where(sa.text(OPEN_SQL))
        .group_by(RETRIEVAL.c.workspace_id, RETRIEVAL.c.lane, RETRIEVAL.c.state)
    )
    return [(str(w), lane, state, int(n)) for w, lane, state, n in session.execute(query)]
