"""Retrieval persistence: idempotent create, fenced claim and settle, cancel.

Every state change is one guarded UPDATE whose WHERE clause states the transition it allows
(`worker.domain.states`), so concurrent workers, duplicate deliveries, cancels and the sweep can
race freely: the database lets exactly one of them win.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.results import Result, cancelled_result, has_content
from worker.domain.clock import as_utc
from worker.domain.states import RetrievalState as S
from worker.domain.states import sources_of
from worker.lanes import open_tally
from worker.store import db, evidence
from worker.store.models import (
    BATCH_PENDING_SQL,
    LANE_BATCH,
    LANE_INTERACTIVE,
    OPEN_SQL,
    BatchSchedule,
    Retrieval,
)
from worker.store.retrieval_view import RetrievalRow
from worker.store.typed import rowcount
from worker.webhooks import records as webhooks

if TYPE_CHECKING:
    from worker.content.images import ImageRef

RETRIEVAL: sa.Table = Retrieval.__table__  # type: ignore[attr-defined]
SCHEDULE: sa.Table = BatchSchedule.__table__  # type: ignore[attr-defined]
#: Advisory lock class of a workspace's quota check (PostgreSQL's two-key form: class, id).
QUOTA_LOCK_CLASS = 16_001

# The worker's two statements per delivery, built once (bound parameters are prefixed `b_`:
# SQLAlchemy reserves the column names for the SET clause).
_CLAIM = (
    sa.update(RETRIEVAL)
    .where(
        RETRIEVAL.c.id == sa.bindparam("b_id"),
        RETRIEVAL.c.state == S.PENDING.value,
        RETRIEVAL.c.valid_until > sa.bindparam("b_now"),
    )
    .values(
        state=S.RUNNING.value,
        attempt=RETRIEVAL.c.attempt + 1,
        lease_until=sa.bindparam("b_lease_until"),
    )
    .returning(
        RETRIEVAL.c.attempt,
        RETRIEVAL.c.url,
        RETRIEVAL.c.kind,
        RETRIEVAL.c.language,
        RETRIEVAL.c.workspace_id,
    )
)
#: The fenced settle: the outcome, only for the attempt that claimed it, before valid_until.
SETTLE = (
    sa.update(RETRIEVAL)
    .where(
        RETRIEVAL.c.id == sa.bindparam("b_id"),
        RETRIEVAL.c.state == S.RUNNING.value,
        RETRIEVAL.c.attempt == sa.bindparam("b_attempt"),
        RETRIEVAL.c.valid_until > sa.bindparam("b_now"),
    )
    .values(
        state=S.COMPLETED.value,
        result=sa.bindparam("b_result", type_=RETRIEVAL.c.result.type),
        settled_at=sa.bindparam("b_now"),
        lease_until=None,
        evidence_id=sa.bindparam("b_evidence_id", type_=RETRIEVAL.c.evidence_id.type),
        evidence_revision=sa.bindparam("b_revision", type_=sa.Integer),
    )
)


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
            note_batch_work(session, [request.workspace_id])
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
        note_batch_work(session, [workspace_id])
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


#: Workspaces this process saw a committed schedule row of, per engine (rows are never
#: deleted): a busy workspace's next retrievals skip the read. Forgotten when it grows past
#: SCHEDULED_CACHE_SIZE, and with the engine (another database).
_scheduled: weakref.WeakKeyDictionary[Any, set[uuid.UUID]] = weakref.WeakKeyDictionary()
SCHEDULED_CACHE_SIZE = 100_000


def scheduled_workspaces(bind: Any) -> set[uuid.UUID]:
    """Workspaces known to have a committed schedule row in `bind`'s database."""
    return _scheduled.setdefault(bind, set())


def remember_scheduled(bind: Any, workspace_ids: Sequence[uuid.UUID]) -> None:
    """Note workspaces whose schedule row is committed (read, or written and committed)."""
    scheduled = scheduled_workspaces(bind)
    if len(scheduled) + len(workspace_ids) > SCHEDULED_CACHE_SIZE:
        scheduled.clear()
    scheduled.update(workspace_ids)


def note_batch_work(session: Session, workspace_ids: Sequence[uuid.UUID]) -> None:
    """Make sure each workspace has a schedule row (never served yet: it comes first).

    Read first: an INSERT that meets an existing row waits for whichever claim is updating
    it (its `served_at`) to commit, and a busy workspace's row is almost always being updated.
    Only rows read are remembered, not those inserted here: this transaction may roll back.
    """
    bind = session.get_bind()
    scheduled = scheduled_workspaces(bind)
    wanted = [w for w in dict.fromkeys(workspace_ids) if w not in scheduled]
    if not wanted:
        return
    known = set(
        session.execute(
            sa.select(SCHEDULE.c.workspace_id).where(SCHEDULE.c.workspace_id.in_(wanted))
        ).scalars()
    )
    remember_scheduled(bind, list(known))
    rows = [{"workspace_id": w, "served_at": None} for w in wanted if w not in known]
    if rows:
        session.execute(db.insert_for(db.dialect(session))(SCHEDULE).on_conflict_do_nothing(), rows)


def mark_unpublished(session: Session, ids: Sequence[uuid.UUID]) -> None:
    """The broker did not take them: leave them to the sweep, which publishes NULLs first."""
    if ids:
        session.execute(
            sa.update(Retrieval)
            .where(RETRIEVAL.c.id.in_(list(ids)), RETRIEVAL.c.state == S.PENDING.value)
            .values(published_at=None)
        )


def mark_published(session: Session, ids: list[uuid.UUID], now: datetime) -> None:
    """Note that these retrievals were handed to the broker."""
    if ids:
        session.execute(
            sa.update(Retrieval)
            .where(RETRIEVAL.c.id.in_(ids), RETRIEVAL.c.state == S.PENDING.value)
            .values(published_at=now)
        )


def claim(
    session: Session, retrieval_id: uuid.UUID, now: datetime, lease: timedelta
) -> Claim | None:
    """Move pending → running and bump the attempt; None when someone else has it or it ended."""
    row = session.execute(
        _CLAIM, {"b_id": retrieval_id, "b_now": now, "b_lease_until": now + lease}
    ).one_or_none()
    if row is None:
        expire_due(session, now, retrieval_id)
        return None
    return Claim(
        retrieval_id, row.attempt, row.url, row.kind, row.language or None, row.workspace_id
    )


# --- The batch lane: round-robin across workspaces, oldest first within one ---------------


def _active_batch_query() -> Any:
    """Workspaces with pending batch retrievals, least recently served first (never first).

    A loose index scan of `ix_retrieval_batch_pending`: one probe per workspace, however many
    rows each has queued. `(SELECT workspace_id … ORDER BY workspace_id LIMIT 1)` rather than
    min(): PostgreSQL has no min(uuid), and both databases answer it from the index alone.
    """
    first = (
        sa.select(RETRIEVAL.c.workspace_id)
        .where(sa.text(BATCH_PENDING_SQL))
        .order_by(RETRIEVAL.c.workspace_id)
        .limit(1)
        .scalar_subquery()
    )
    active = sa.select(first.label("workspace_id")).cte("active", recursive=True)
    inner = RETRIEVAL.alias("r")
    following = (
        sa.select(inner.c.workspace_id)
        .where(
            sa.text("r.lane = 'batch' AND r.state = 'pending'"),
            inner.c.workspace_id > active.c.workspace_id,
        )
        .order_by(inner.c.workspace_id)
        .limit(1)
        .scalar_subquery()
    )
    active = active.union_all(sa.select(following).where(active.c.workspace_id.is_not(None)))
    S_ = SCHEDULE.c
    return (
        sa.select(active.c.workspace_id)
        .select_from(active.outerjoin(SCHEDULE, S_.workspace_id == active.c.workspace_id))
        .where(active.c.workspace_id.is_not(None))
        .order_by(sa.nulls_first(S_.served_at.asc()), active.c.workspace_id)
    )


# The batch claim's statements, built once (a claim per batch retrieval; building them each
# time cost more CPU than running them).
_ACTIVE_BATCH = _active_batch_query()
#: PostgreSQL: the least recently served schedule row among the given ones that no other
#: claimer holds, locked, so concurrent claims spread over workspaces.
_LOCK_SCHEDULE = (
    sa.select(SCHEDULE.c.workspace_id)
    .where(SCHEDULE.c.workspace_id.in_(sa.bindparam("b_ids", expanding=True)))
    .order_by(sa.nulls_first(SCHEDULE.c.served_at.asc()), SCHEDULE.c.workspace_id)
    .limit(1)
    .with_for_update(skip_locked=True)
)
_SERVED = (
    sa.update(SCHEDULE)
    .where(SCHEDULE.c.workspace_id == sa.bindparam("b_workspace"))
    .values(served_at=sa.bindparam("b_now"))
)


def _claim_oldest_statement(skip_locked: bool) -> Any:
    """Claim a workspace's `b_limit` oldest pending batch retrievals nobody else is claiming."""
    oldest = (
        sa.select(RETRIEVAL.c.id)
        .where(
            RETRIEVAL.c.workspace_id == sa.bindparam("b_workspace"),
            sa.text(BATCH_PENDING_SQL),
            RETRIEVAL.c.valid_until > sa.bindparam("b_now"),
        )
        .order_by(RETRIEVAL.c.created_at)
        .limit(sa.bindparam("b_limit", type_=sa.Integer))
    )
    if skip_locked:
        # Picked once, in a materialised CTE: as a plain `IN (subquery)`, PostgreSQL may run
        # the locking subquery again for each row it updates, claiming more than `b_limit`.
        oldest = oldest.with_for_update(skip_locked=True)
        picked: Any = oldest.cte("picked").prefix_with("MATERIALIZED", dialect="postgresql")
        oldest = sa.select(picked.c.id)
    return (
        sa.update(RETRIEVAL)
        .where(RETRIEVAL.c.id.in_(oldest), RETRIEVAL.c.state == S.PENDING.value)
        .values(
            state=S.RUNNING.value,
            attempt=RETRIEVAL.c.attempt + 1,
            lease_until=sa.bindparam("b_lease_until"),
        )
        .returning(
            RETRIEVAL.c.id,
            RETRIEVAL.c.attempt,
            RETRIEVAL.c.url,
            RETRIEVAL.c.kind,
            RETRIEVAL.c.language,
            RETRIEVAL.c.workspace_id,
        )
    )


def _claim_oldest_and_serve() -> Any:
    """PostgreSQL: the claim, and the workspace's `served_at` when it claimed a row, in one
    statement (a data-modifying CTE): one round trip fewer per batch retrieval.

    The schedule row is skipped when another claim holds it: that claim is marking the same
    workspace served at about the same instant. Waiting for it instead made every claim of a
    busy workspace wait for the one before it to commit (the row lock lasts the transaction).
    """
    claimed = _claim_oldest_statement(True).cte("claimed")
    free_row = (
        sa.select(SCHEDULE.c.workspace_id)
        .where(SCHEDULE.c.workspace_id.in_(sa.select(claimed.c.workspace_id)))
        .with_for_update(skip_locked=True)
    )
    served = (
        sa.update(SCHEDULE)
        .where(SCHEDULE.c.workspace_id.in_(free_row))
        .values(served_at=sa.bindparam("b_now"))
        .cte("served")
    )
    return sa.select(claimed).add_cte(served)


#: By dialect (True: PostgreSQL, whose statement also records the workspace as served).
_CLAIM_OLDEST = {True: _claim_oldest_and_serve(), False: _claim_oldest_statement(False)}


def active_batch_workspaces(session: Session) -> list[uuid.UUID]:
    """Workspaces with pending batch retrievals, least recently served first."""
    return list(session.execute(_ACTIVE_BATCH).scalars())


def claim_next_batch(session: Session, now: datetime, lease: timedelta) -> Claim | None:
    """Claim the next batch retrieval: the oldest one of the least recently served workspace.

    Each batch message asks for "the next one", so every workspace with queued batch work gets
    every n-th claim (round-robin) however long its own queue is. Fenced like `claim`: the row
    moves pending → running with attempt + 1 in one guarded statement. PostgreSQL takes rows
    with `FOR UPDATE SKIP LOCKED` (concurrent claimers never wait for or take the same row);
    SQLite runs writers one at a time (`BEGIN IMMEDIATE`), which needs no skipping. None when
    the batch lane is empty (the message was a spare one: duplicates are harmless).
    """
    claims = claim_next_batches(session, now, lease, 1)
    return claims[0] if claims else None


def claim_next_batches(
    session: Session, now: datetime, lease: timedelta, count: int
) -> list[Claim]:
    """Claim up to `count` next batch retrievals at once, as `count` claims in a row would:
    round-robin over the workspaces, least recently served first, oldest first within each
    (one statement per workspace for its share; a workspace with fewer rows than its share
    leaves the rest to the others). Fewer when the lane has fewer rows nobody holds.
    """
    order = active_batch_workspaces(session)
    if not order:
        return []
    postgres = db.dialect(session) == db.POSTGRESQL
    if postgres and len(order) > 1:  # with one workspace, there is nothing to spread over
        locked = session.execute(_LOCK_SCHEDULE, {"b_ids": order}).scalar_one_or_none()
        if locked is not None:
            order = [locked, *(w for w in order if w != locked)]
    params = {"b_now": now, "b_lease_until": now + lease}
    claims: list[Claim] = []
    open_ = order
    while open_ and len(claims) < count:
        wanted = count - len(claims)
        shares = [wanted // len(open_) + (n < wanted % len(open_)) for n in range(len(open_))]
        still_open = []
        for workspace_id, share in zip(open_, shares, strict=True):
            if share == 0:
                still_open.append(workspace_id)
                continue
            rows = session.execute(
                _CLAIM_OLDEST[postgres], params | {"b_workspace": workspace_id, "b_limit": share}
            ).all()
            if rows and not postgres:
                session.execute(_SERVED, {"b_workspace": workspace_id, "b_now": now})
            claims.extend(
                Claim(r.id, r.attempt, r.url, r.kind, r.language or None, workspace_id, "batch")
                for r in rows
            )
            if len(rows) == share:  # it may have more
                still_open.append(workspace_id)
        open_ = still_open  # each round claims more or drops a workspace: it ends
    return claims


class Fenced(Exception):
    """The settle lost its claim (cancel, expiry, a newer attempt): its writes are rolled back."""


def settle(
    session: Session,
    claim: Claim,
    result: Result,
    now: datetime,
    images: Sequence[ImageRef] = (),
    stored: tuple[uuid.UUID, int] | None = None,
) -> tuple[uuid.UUID | None, int | None, bool]:
    """Record the outcome of `claim` in `session`'s transaction; raise `Fenced` if it lost.

    Returns the evidence (item id, revision) the outcome names, (None, None) without content,
    and whether this settle wrote that revision.
    `stored` names the existing revision a result with content is (a reuse or a revalidation
    answers with a stored revision's content): nothing is written for it but the outcome.

    Otherwise the evidence revision (if the result has content) is written first. Then one
    UPDATE sets the outcome and the revision it names, matching only the attempt that claimed
    and only before `valid_until`. When that UPDATE matches nothing, `Fenced` makes the caller
    roll the whole transaction back, so a late zombie or a result past the receipt's lifetime
    leaves no trace. Lock order is always the evidence item, then the retrieval row.
    """
    evidence_id = revision = None
    new = False
    if has_content(result) and stored is not None:
        evidence_id, revision = stored
    elif has_content(result):
        evidence_id, revision, new = evidence.record(
            session, claim.workspace_id, claim.kind, claim.url, result, now, images
        )
    won = session.execute(
        SETTLE,
        {
            "b_id": claim.retrieval_id,
            "b_attempt": claim.attempt,
            "b_now": now,
            "b_result": result,
            "b_evidence_id": evidence_id,
            "b_revision": revision,
        },
    )
    if not rowcount(won):
        raise Fenced(str(claim.retrieval_id))
    webhooks.record_settled(session, [claim.retrieval_id], now)
    return evidence_id, revision, new


#: Work done in the settle's own transaction once it won: (session, evidence id, revision,
#: whether the settle wrote that revision).
AfterSettle = Callable[[Session, uuid.UUID | None, int | None, bool], None]


def settle_claim(
    claim: Claim,
    result: Result,
    now: datetime,
    images: Sequence[ImageRef] = (),
    then: AfterSettle | None = None,
    stored: tuple[uuid.UUID, int] | None = None,
) -> bool:
    """Settle `claim` in its own transaction; False when it was fenced off.

    A fenced settle writes nothing; if the retrieval is past `valid_until` it is expired instead
    (too late is too late: past valid_until a retrieval is expired, not completed). `then`
    runs in the same transaction after a settle that won
    (`worker.retrieval.freshness.revalidation`).
    """

    def write(session: Session) -> None:
        evidence_id, revision, new = settle(session, claim, result, now, images, stored)
        if then is not None:
            then(session, evidence_id, revision, new)

    try:
        db.with_transient_retry(write)
    except Fenced:
        db.with_transient_retry(lambda s: expire_due(s, now, claim.retrieval_id))
        return False
    return True


def cancel(session: Session, row: Retrieval, now: datetime) -> Retrieval | None:
    """Cancel `row` if it is still pending or running; the cancelled row, or None if settled."""
    cancelled = session.execute(
        sa.update(Retrieval)
        .where(
            RETRIEVAL.c.id == row.id,
            RETRIEVAL.c.state.in_([s.value for s in sources_of(S.CANCELLED)]),
        )
        .values(
            state=S.CANCELLED.value,
            result=cancelled_result(row.kind, now),  # type: ignore[arg-type]
            settled_at=now,
            lease_until=None,
        )
        .returning(*RETRIEVAL.columns)
    ).one_or_none()
    if cancelled is None:
        return None
    webhooks.record_settled(session, [row.id], now)
    return Retrieval(**cancelled._mapping)


def expire_due(
    session: Session, now: datetime, retrieval_id: uuid.UUID | None = None
) -> list[uuid.UUID]:
    """Expire open retrievals whose `valid_until` has passed; return their ids."""
    stmt = sa.update(Retrieval).where(
        RETRIEVAL.c.state.in_([s.value for s in sources_of(S.EXPIRED)]),
        RETRIEVAL.c.valid_until <= now,
    )
    if retrieval_id is not None:
        stmt = stmt.where(RETRIEVAL.c.id == retrieval_id)
    values = stmt.values(state=S.EXPIRED.value, settled_at=now, lease_until=None)
    expired = list(session.execute(values.returning(RETRIEVAL.c.id)).scalars())
    webhooks.record_settled(session, expired, now)
    return expired


def rescue_lost(
    session: Session, now: datetime, max_attempts: int, retrieval_id: uuid.UUID | None = None
) -> tuple[int, list[uuid.UUID]]:
    """Leases that ran out (of every row, or of `retrieval_id` only): back to pending while
    attempts remain, else unconfirmed.

    Returns (how many were re-pended, the ids that became unconfirmed). Re-pended rows get
    `published_at = NULL` so the same sweep publishes them again, in their own lane.
    """
    lost = (RETRIEVAL.c.state == S.RUNNING.value) & (RETRIEVAL.c.lease_until < now)
    if retrieval_id is not None:
        lost = lost & (RETRIEVAL.c.id == retrieval_id)
    retried = session.execute(
        sa.update(Retrieval)
        .where(lost, RETRIEVAL.c.attempt < max_attempts)
        .values(state=S.PENDING.value, lease_until=None, published_at=None)
    )
    gave_up = session.execute(
        sa.update(Retrieval)
        .where(lost, RETRIEVAL.c.attempt >= max_attempts)
        .values(state=S.UNCONFIRMED.value, settled_at=now, lease_until=None)
        .returning(RETRIEVAL.c.id)
    ).scalars()
    unconfirmed = list(gave_up)
    webhooks.record_settled(session, unconfirmed, now)
    return rowcount(retried), unconfirmed


def due_for_sweep(session: Session, now: datetime, limit: int) -> list[uuid.UUID]:
    """Open retrievals past `valid_until`, and running ones whose lease ran out: what the
    sweep's expiry and rescue would change, for doing it one row at a time."""
    query = (
        sa.select(RETRIEVAL.c.id)
        .where(
            sa.or_(
                RETRIEVAL.c.state.in_([s.value for s in sources_of(S.EXPIRED)])
                & (RETRIEVAL.c.valid_until <= now),
                (RETRIEVAL.c.state == S.RUNNING.value) & (RETRIEVAL.c.lease_until < now),
            )
        )
        .limit(limit)
    )
    return list(session.execute(query).scalars())


def give_back(session: Session, claim: Claim, now: datetime, max_attempts: int) -> str | None:
    """A claim whose run failed, given back at once rather than when its lease runs out: to
    pending while attempts remain (`published_at` NULL: the next sweep publishes it again),
    else `unconfirmed`, as `rescue_lost` would. Fenced by the claim's attempt; the state it
    went to, or None when the claim was no longer held."""
    held = (
        (RETRIEVAL.c.id == claim.retrieval_id)
        & (RETRIEVAL.c.state == S.RUNNING.value)
        & (RETRIEVAL.c.attempt == claim.attempt)
    )
    if claim.attempt < max_attempts:
        back = session.execute(
            sa.update(Retrieval)
            .where(held)
            .values(state=S.PENDING.value, lease_until=None, published_at=None)
        )
        return S.PENDING.value if rowcount(back) else None
    gave_up = session.execute(
        sa.update(Retrieval)
        .where(held)
        .values(state=S.UNCONFIRMED.value, settled_at=now, lease_until=None)
    )
    if not rowcount(gave_up):
        return None
    webhooks.record_settled(session, [claim.retrieval_id], now)
    return S.UNCONFIRMED.value


def due_for_publish(
    session: Session, now: datetime, republish_after: timedelta, limit: int
) -> list[tuple[uuid.UUID, str]]:
    """Pending retrievals never published, or published long enough ago to be presumed lost.

    (id, lane) pairs: the sweep publishes each to its own lane's queue.
    """
    stmt = (
        sa.select(RETRIEVAL.c.id, RETRIEVAL.c.lane)
        .where(
            RETRIEVAL.c.state == S.PENDING.value,
            sa.or_(
                RETRIEVAL.c.published_at.is_(None), RETRIEVAL.c.published_at < now - republish_after
            ),
        )
        .order_by(RETRIEVAL.c.published_at.is_not(None), RETRIEVAL.c.created_at)
        .limit(limit)
    )
    if session.bind.dialect.name == "postgresql":  # type: ignore[union-attr]
        stmt = stmt.with_for_update(skip_locked=True)
    return [(row.id, row.lane) for row in session.execute(stmt)]


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


def unpublished_among(session: Session, ids: list[uuid.UUID]) -> set[uuid.UUID]:
    """Which of `ids` were never handed to the broker."""
    if not ids:
        return set()
    query = sa.select(RETRIEVAL.c.id).where(
        RETRIEVAL.c.id.in_(ids), RETRIEVAL.c.published_at.is_(None)
    )
    return set(session.execute(query).scalars())


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


def count_pending_by_lane(session: Session) -> dict[str, int]:
    """Pending retrievals by lane."""
    query = (
        sa.select(RETRIEVAL.c.lane, sa.func.count())
        .where(RETRIEVAL.c.state == S.PENDING.value)
        .group_by(RETRIEVAL.c.lane)
    )
    return {lane: int(n) for lane, n in session.execute(query)}
