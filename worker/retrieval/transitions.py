"""The retrieval's state changes after its claim: settle, cancel, expire, rescue, give back.

Every one is a guarded UPDATE whose WHERE clause states the transition it allows
(`worker.domain.states`), so concurrent workers, duplicate deliveries, cancels and the sweep
can race freely: the database lets exactly one of them win. A settle that wins records the
webhook deliveries of its retrieval in the same transaction (`worker.webhooks.records`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.results import Result, cancelled_result, has_content
from worker.domain.states import RetrievalState as S
from worker.domain.states import sources_of
from worker.retrieval.records import Claim
from worker.store import db, evidence
from worker.store.models import (
    Retrieval,
)
from worker.store.retrieval_view import RETRIEVAL
from worker.store.row_locks import unheld
from worker.store.typed import rowcount
from worker.webhooks import records as webhooks

if TYPE_CHECKING:
    from worker.content.images import ImageRef


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
    """Expire open retrievals whose `valid_until` has passed and no transaction holds
    (`row_locks.unheld`); return their ids."""
    due = RETRIEVAL.c.state.in_([s.value for s in sources_of(S.EXPIRED)]) & (
        RETRIEVAL.c.valid_until <= now
    )
    if retrieval_id is not None:
        due = due & (RETRIEVAL.c.id == retrieval_id)
    stmt = sa.update(Retrieval).where(unheld(RETRIEVAL.c.id, due))
    values = stmt.values(state=S.EXPIRED.value, settled_at=now, lease_until=None)
    expired = list(session.execute(values.returning(RETRIEVAL.c.id)).scalars())
    webhooks.record_settled(session, expired, now)
    return expired


def rescue_lost(
    session: Session, now: datetime, max_attempts: int, retrieval_id: uuid.UUID | None = None
) -> tuple[int, list[uuid.UUID]]:
    """Leases that ran out (of every row, or of `retrieval_id` only, and no transaction
    holds: `row_locks.unheld`): back to pending while attempts remain, else unconfirmed.

    Returns (how many were re-pended, the ids that became unconfirmed). Re-pended rows get
    `published_at = NULL` so the same sweep publishes them again, in their own lane.
    """
    lost = (RETRIEVAL.c.state == S.RUNNING.value) & (RETRIEVAL.c.lease_until < now)
    if retrieval_id is not None:
        lost = lost & (RETRIEVAL.c.id == retrieval_id)
    retried = session.execute(
        sa.update(Retrieval)
        .where(unheld(RETRIEVAL.c.id, lost & (RETRIEVAL.c.attempt < max_attempts)))
        .values(state=S.PENDING.value, lease_until=None, published_at=None)
    )
    gave_up = session.execute(
        sa.update(Retrieval)
        .where(unheld(RETRIEVAL.c.id, lost & (RETRIEVAL.c.attempt >= max_attempts)))
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
