"""Recording retrievals: an idempotent create per mutation_id, within the workspace's quotas.

A retrieval is written once per (workspace, mutation_id): a replay finds the row it wrote, a
different request under the same id is a conflict. The open-retrievals ceiling is decided in
the creating transaction (`worker.lanes.open_tally`); batch-lane rows also note their
workspace's place in the lane's order (`worker.lanes.batch_order`). The `Claim` of a recorded
retrieval is taken by `worker.retrieval.claims` and settled by `worker.retrieval.transitions`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.domain.states import RetrievalState as S
from worker.lanes import batch_order, open_tally
from worker.store import db
from worker.store.models import (
    LANE_BATCH,
    LANE_INTERACTIVE,
    OPEN_SQL,
    Retrieval,
)
from worker.store.retrieval_view import RETRIEVAL, RetrievalRow

if TYPE_CHECKING:
    pass

#: Advisory lock class of a workspace's quota check (PostgreSQL's two-key form: class, id).
QUOTA_LOCK_CLASS = 16_001


class MutationConflict(Exception):
    """Raised when a known (workspace_id, mutation_id) arrives with a different payload."""


@dataclass(frozen=True)
class NewRetrieval:
    """What a client asked for."""

    workspace_id: uuid.UUID
    mutation_id: uuid.UUID
    url: str
    kind: str
    language: str | None
    #: Reuse window (`Cache-Control: max-age=N`): not part of what the mutation identifies.
    max_age_seconds: int | None = None

    @property
    def language_key(self) -> str:
        """Language tags compare case-insensitively ("EN" and "en" are one request)."""
        return (self.language or "").lower()


@dataclass(frozen=True)
class Claim:
    """A worker's hold on a retrieval; `attempt` fences the settle."""

    retrieval_id: uuid.UUID
    attempt: int
    url: str
    kind: str
    language: str | None
    workspace_id: uuid.UUID
    #: The lane it was claimed from (`models.LANES`): what its work queues behind.
    lane: str = "interactive"


#: Columns a new retrieval is inserted with (`_row_values`).
_NEW_COLUMNS = (
    "id",
    "workspace_id",
    "mutation_id",
    "url",
    "kind",
    "language",
    "state",
    "lane",
    "attempt",
    "published_at",
    "created_at",
    "valid_until",
    "max_age_seconds",
)


#: Open interactive retrievals of workspace `b_workspace`, counting at most `b_cap` rows.
_OPEN_INTERACTIVE = sa.select(sa.func.count()).select_from(
    sa.select(sa.literal(1))
    .where(
        RETRIEVAL.c.workspace_id == sa.bindparam("b_workspace"),
        RETRIEVAL.c.lane == LANE_INTERACTIVE,
        sa.text(OPEN_SQL),
    )
    .limit(sa.bindparam("b_cap", type_=sa.Integer))
    .subquery()
)


@cache
def insert_one(dialect: str, laned: bool = False) -> Any:
    """The single create's statement, built once per dialect (it runs on every POST).

    `laned`: the statement picks the lane itself, batch once the workspace has `b_cap` open
    interactive retrievals (`_OPEN_INTERACTIVE`), so a POST needs no round trip to count.
    """
    insert = db.insert_for(dialect)
    values: dict[str, Any] = {
        name: sa.bindparam(f"b_{name}", type_=RETRIEVAL.c[name].type) for name in _NEW_COLUMNS
    }
    if laned:
        full = _OPEN_INTERACTIVE.scalar_subquery() >= sa.bindparam("b_cap", type_=sa.Integer)
        values["lane"] = sa.case((full, LANE_BATCH), else_=LANE_INTERACTIVE)
    return (
        insert(RETRIEVAL)
        .values(values)
        .on_conflict_do_nothing(index_elements=["workspace_id", "mutation_id"])
        .returning(*RETRIEVAL.columns)
    )


_BY_MUTATION = sa.select(*RETRIEVAL.columns).where(
    RETRIEVAL.c.workspace_id == sa.bindparam("b_workspace"),
    RETRIEVAL.c.mutation_id == sa.bindparam("b_mutation"),
)


def create_retrieval(
    session: Session,
    request: NewRetrieval,
    now: datetime,
    ttl: timedelta,
    lane: str = LANE_INTERACTIVE,
    interactive_limit: int | None = None,
    retrieval_id: uuid.UUID | None = None,
) -> tuple[RetrievalRow, bool]:
    """Record `request` once; return the row and whether this call created it.

    The UNIQUE(workspace_id, mutation_id) constraint decides races: INSERT … ON CONFLICT DO
    NOTHING, then (only when it did nothing) read whichever row won and compare its payload.
    A new row is marked published at once, optimistically: the caller publishes right after
    the commit and clears the mark if that fails (`mark_unpublished`); a crash in between is
    caught by the sweep, which republishes pending rows whose publish is old.

    With `interactive_limit`, the insert itself puts the row in the batch lane when the
    workspace already has that many open interactive retrievals (`lane` is then ignored).
    """
    laned = interactive_limit is not None
    stmt = insert_one(session.bind.dialect.name, laned)  # type: ignore[union-attr]
    values = new_row_values(request, now, ttl, lane, retrieval_id)
    params = {f"b_{k}": v for k, v in values.items()}
    if laned:
        params.update(b_workspace=request.workspace_id, b_cap=interactive_limit)
    inserted = session.execute(stmt, params).one_or_none()
    if inserted is not None:
        if inserted.lane == LANE_BATCH:
            batch_order.note_batch_work(session, [request.workspace_id])
        return inserted, True
    row = session.execute(
        _BY_MUTATION, {"b_workspace": request.workspace_id, "b_mutation": request.mutation_id}
    ).one()
    check_same_request(row, request)
    return row, False


def new_row_values(
    request: NewRetrieval,
    now: datetime,
    ttl: timedelta,
    lane: str,
    retrieval_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """The columns a new retrieval is inserted with (`insert_one`'s `b_` parameters); its id
    is `retrieval_id`, or a new one."""
    return {
        "id": retrieval_id or uuid.uuid4(),
        "workspace_id": request.workspace_id,
        "mutation_id": request.mutation_id,
        "url": request.url,
        "kind": request.kind,
        "language": request.language_key,
        "state": S.PENDING.value,
        "lane": lane,
        "attempt": 0,
        "published_at": now,
        "created_at": now,
        "valid_until": now + ttl,
        "max_age_seconds": request.max_age_seconds,
    }


def check_same_request(row: Retrieval | RetrievalRow, request: NewRetrieval) -> None:
    """Raise `MutationConflict` unless `row` records exactly what `request` asks for."""
    if (row.url, row.kind, row.language) != (request.url, request.kind, request.language_key):
        raise MutationConflict(str(request.mutation_id))


# --- Quotas: the open-retrievals ceiling, decided in the creating transaction -------------


#: Why a new retrieval was refused: its workspace's open ceiling, or its write rate.
OVER_OPEN, OVER_RATE = "open", "rate"


class OverQuota(Exception):
    """A new retrieval the workspace's quotas do not allow now (`reason`: OVER_OPEN/OVER_RATE)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class OpenCount:
    """A workspace's open (pending + running) retrievals, counted up to a cap."""

    total: int
    interactive: int


_LOCK = sa.select(
    sa.func.pg_advisory_xact_lock(QUOTA_LOCK_CLASS, sa.bindparam("b_key", type_=sa.Integer))
)
_OPEN_ROWS = (
    sa.select(RETRIEVAL.c.lane)
    .where(RETRIEVAL.c.workspace_id == sa.bindparam("b_workspace"), sa.text(OPEN_SQL))
    .limit(sa.bindparam("b_cap", type_=sa.Integer))
    .subquery()
)
_COUNT_OPEN = sa.select(
    sa.func.count(),
    sa.func.coalesce(sa.func.sum(sa.case((_OPEN_ROWS.c.lane == LANE_INTERACTIVE, 1), else_=0)), 0),
)


def lock_workspace(session: Session, workspace_id: uuid.UUID) -> None:
    """Serialise quota decisions of one workspace until the transaction ends.

    PostgreSQL: a transaction-scoped advisory lock, so two concurrent requests cannot both see
    room for their retrievals and together exceed the ceiling. SQLite needs none: a writing
    transaction holds the database's one write lock from its start (`BEGIN IMMEDIATE`).
    """
    if session.bind.dialect.name == "postgresql":  # type: ignore[union-attr]
        session.execute(
            _LOCK, {"b_key": int.from_bytes(workspace_id.bytes[:4], "big", signed=True)}
        )


def count_open(session: Session, workspace_id: uuid.UUID, cap: int) -> OpenCount:
    """Open retrievals of the workspace, counting at most `cap` rows (enough to decide)."""
    total, inter = session.execute(_COUNT_OPEN, {"b_workspace": workspace_id, "b_cap": cap}).one()
    return OpenCount(int(total), int(inter))


def find_existing(
    session: Session, workspace_id: uuid.UUID, mutation_ids: Sequence[uuid.UUID]
) -> dict[uuid.UUID, RetrievalRow]:
    """The workspace's retrievals for these mutation ids, by mutation id."""
    if not mutation_ids:
        return {}
    query = sa.select(*RETRIEVAL.columns).where(
        RETRIEVAL.c.workspace_id == workspace_id, RETRIEVAL.c.mutation_id.in_(list(mutation_ids))
    )
    return {row.mutation_id: row for row in session.execute(query)}


def create_within_quota(
    session: Session,
    request: NewRetrieval,
    now: datetime,
    ttl: timedelta,
    open_limit: int,
    interactive_limit: int,
    rate_ok: bool = True,
    reserve_at_commit: bool = False,
    retrieval_id: uuid.UUID | None = None,
) -> tuple[RetrievalRow, bool]:
    """Record a single retrieval if its workspace's quotas allow; (row, created).

    `rate_ok` says whether the write rate granted it (the caller asked Redis). A replay of a
    known mutation_id is answered whatever the quotas say: it adds nothing (it is how a client
    polls). A workspace with `interactive_limit` open interactive retrievals already is looping
    over the single route: the new one joins the batch lane (a bounded count, taken by the
    insert itself: the lane is advice, not a quota).

    The row is inserted, then its room under the ceiling reserved in the workspace's tally
    (`open_tally.reserve`: one UPDATE, whose row lock is the only wait between the
    workspace's requests, and only until the commit). When the tally shows no room, the
    workspace's quota lock is taken and the open rows counted; over the ceiling, `OverQuota`
    rolls the insert back with the transaction.

    `reserve_at_commit` (PostgreSQL): the reservation is sent with the COMMIT
    (`open_tally.reserve_and_commit`), which ends the transaction, or raises `NoRoomAtCommit`.
    `retrieval_id`: the new row's id (the same in every attempt at one request).
    """
    if not rate_ok:
        return _refused_unless_replay(session, request, open_limit)
    row, created = create_retrieval(
        session, request, now, ttl, interactive_limit=interactive_limit, retrieval_id=retrieval_id
    )
    if not created:
        return row, created
    if reserve_at_commit and db.dialect(session) == db.POSTGRESQL:
        open_tally.reserve_and_commit(session, request.workspace_id, 1, open_limit)
        return row, created
    if open_tally.reserve(session, request.workspace_id, 1, open_limit):
        return row, created
    lock_workspace(session, request.workspace_id)
    if not open_tally.recount(session, request.workspace_id, 1, open_limit, own=1):
        # Undone here, not only by the rollback the exception causes: a caller that records
        # several in one transaction and goes on after a refusal keeps nothing refused.
        session.execute(sa.delete(Retrieval).where(RETRIEVAL.c.id == row.id))
        raise OverQuota(OVER_OPEN)
    return row, created


def _refused_unless_replay(
    session: Session, request: NewRetrieval, open_limit: int
) -> tuple[RetrievalRow, bool]:
    """Over the write rate: the known row of a replay, else `OverQuota` (over the ceiling too,
    the ceiling's reason, as Retry-After is longer for it)."""
    known = find_existing(session, request.workspace_id, [request.mutation_id])
    row = known.get(request.mutation_id)
    if row is not None:
        check_same_request(row, request)
        return row, False
    # Only the refusal's reason: a read, no lock (nothing is written).
    raise OverQuota(
        OVER_RATE if open_tally.fits(session, request.workspace_id, open_limit) else OVER_OPEN
    )


@dataclass
class BatchOutcome:
    """What one workspace's share of a batch came to, by mutation id."""

    created: dict[uuid.UUID, RetrievalRow]
    existing: dict[uuid.UUID, RetrievalRow]
    #: New items the quotas refused, and why (OVER_OPEN or OVER_RATE).
    refused: dict[uuid.UUID, str]


def create_batch_within_quota(
    session: Session,
    workspace_id: uuid.UUID,
    requests: Sequence[NewRetrieval],
    now: datetime,
    ttl: timedelta,
    open_limit: int,
    rate_room: int,
) -> BatchOutcome:
    """Record one workspace's batch items in the batch lane, as many as its quotas allow.

    Few statements for the whole batch: the lock, one read of the known mutation ids, the room
    under the ceiling (`open_tally`), one multi-row INSERT … ON CONFLICT DO NOTHING, one
    schedule upsert. Known items are answered whatever the quotas (the caller compares their
    payloads: a conflict is that item's 409); new ones get the room in order: at most
    `rate_room` (the tokens the write rate granted) and what is left under the open ceiling,
    the rest are refused.
    """
    lock_workspace(session, workspace_id)
    mutations = list(dict.fromkeys(r.mutation_id for r in requests))
    existing = find_existing(session, workspace_id, mutations)
    firsts: dict[uuid.UUID, NewRetrieval] = {}
    for request in requests:
        if request.mutation_id not in existing:
            firsts.setdefault(request.mutation_id, request)
    new = list(firsts.values())
    open_room = open_tally.room(session, workspace_id, min(len(new), rate_room), open_limit)
    accepted = new[:open_room]
    refused = {
        r.mutation_id: OVER_RATE if index >= rate_room else OVER_OPEN
        for index, r in enumerate(new)
        if index >= len(accepted)
    }
    created = _insert_many(session, accepted, now, ttl, LANE_BATCH)
    raced = [r.mutation_id for r in accepted if r.mutation_id not in created]
    existing |= find_existing(session, workspace_id, raced)
    if created:
        batch_order.note_batch_work(session, [workspace_id])
    return BatchOutcome(created, existing, refused)


def _insert_many(
    session: Session, requests: Sequence[NewRetrieval], now: datetime, ttl: timedelta, lane: str
) -> dict[uuid.UUID, RetrievalRow]:
    if not requests:
        return {}
    stmt = (
        db.insert_for(db.dialect(session))(RETRIEVAL)
        .on_conflict_do_nothing(index_elements=["workspace_id", "mutation_id"])
        .returning(*RETRIEVAL.columns)
    )
    # One microsecond apart, in the order given: the batch lane runs a workspace's retrievals
    # oldest first, and the items of one batch in the order they came.
    values = [
        new_row_values(request, now + timedelta(microseconds=n), ttl, lane)
        for n, request in enumerate(requests)
    ]
    rows = session.execute(stmt, values).all()
    return {row.mutation_id: row for row in rows}


# --- The batch lane: round-robin across workspaces, oldest first within one ---------------
