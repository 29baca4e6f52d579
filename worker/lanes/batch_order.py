"""The batch lane's order: round-robin across workspaces, oldest first within one.

Each workspace with batch work has a schedule row (`served_at`); a claim takes the least
recently served workspace's oldest pending batch retrievals and marks it served, so one
workspace's thousands of URLs never keep another's few waiting behind them (docs/fairness.md).
These are the statements, built once (building them per claim cost more CPU than running
them); the claim itself is `worker.retrieval.claims.claim_next_batches`.
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.domain.states import RetrievalState as S
from worker.store import db
from worker.store.models import (
    BATCH_PENDING_SQL,
    BatchSchedule,
    Retrieval,
)

if TYPE_CHECKING:
    pass


RETRIEVAL: sa.Table = Retrieval.__table__  # type: ignore[attr-defined]
SCHEDULE: sa.Table = BatchSchedule.__table__  # type: ignore[attr-defined]

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
ACTIVE_BATCH = _active_batch_query()


#: PostgreSQL: the least recently served schedule row among the given ones that no other
#: claimer holds, locked, so concurrent claims spread over workspaces.
LOCK_SCHEDULE = (
    sa.select(SCHEDULE.c.workspace_id)
    .where(SCHEDULE.c.workspace_id.in_(sa.bindparam("b_ids", expanding=True)))
    .order_by(sa.nulls_first(SCHEDULE.c.served_at.asc()), SCHEDULE.c.workspace_id)
    .limit(1)
    .with_for_update(skip_locked=True)
)


SERVED = (
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
CLAIM_OLDEST = {True: _claim_oldest_and_serve(), False: _claim_oldest_statement(False)}


def active_batch_workspaces(session: Session) -> list[uuid.UUID]:
    """Workspaces with pending batch retrievals, least recently served first."""
    return list(session.execute(ACTIVE_BATCH).scalars())
