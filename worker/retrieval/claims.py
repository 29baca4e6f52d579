"""Claims: a pending retrieval taken by one worker, its attempt counted and leased.

An interactive retrieval is claimed by id (its message names it); a batch-lane message claims
the next retrieval the lane's order picks (`worker.lanes.batch_order`), or a group of them for
a threads-pool worker's threads (`worker.retrieval.claim_group`). A claim is fenced by its
attempt: only that attempt may settle it (`worker.retrieval.transitions`).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.domain.states import RetrievalState as S
from worker.store import db
from worker.store.retrieval_view import RETRIEVAL

if TYPE_CHECKING:
    pass

from worker.lanes import batch_order
from worker.retrieval.records import Claim
from worker.retrieval.transitions import expire_due

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
    order = batch_order.active_batch_workspaces(session)
    if not order:
        return []
    postgres = db.dialect(session) == db.POSTGRESQL
    if postgres and len(order) > 1:  # with one workspace, there is nothing to spread over
        locked = session.execute(batch_order.LOCK_SCHEDULE, {"b_ids": order}).scalar_one_or_none()
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
                batch_order.CLAIM_OLDEST[postgres],
                params | {"b_workspace": workspace_id, "b_limit": share},
            ).all()
            if rows and not postgres:
                session.execute(batch_order.SERVED, {"b_workspace": workspace_id, "b_now": now})
            claims.extend(
                Claim(r.id, r.attempt, r.url, r.kind, r.language or None, workspace_id, "batch")
                for r in rows
            )
            if len(rows) == share:  # it may have more
                still_open.append(workspace_id)
        open_ = still_open  # each round claims more or drops a workspace: it ends
    return claims
