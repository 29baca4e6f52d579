"""Which pending webhook deliveries go to the broker now: due ones whose endpoint has room,
shared between workspaces.

A message is only worth sending when its claim can succeed: the delivery is due, no attempt
holds it, and its endpoint has fewer than `EVIDENCE_WEBHOOK_ENDPOINT_CONCURRENCY` deliveries
*held* (leased by an attempt, or published within `EVIDENCE_REPUBLISH_AFTER_SECONDS` and not yet
claimed). So a backlog of deliveries that are backing off, or that wait behind a busy endpoint,
costs no message and no worker time until one can be attempted. Across endpoints, at most
`EVIDENCE_WEBHOOK_MAX_IN_FLIGHT` deliveries are held at once, and one workspace at most half of
that: what is published is chosen round-robin, the workspace holding the fewest first, and each
workspace's endpoints in turn, so one workspace's failing endpoints never hold every slot.

`pick` runs under a transaction-scoped lock (PostgreSQL's advisory lock; SQLite serialises
writers anyway), so two publishers never both fill the same room, and marks what it chose
published with a guarded UPDATE; the caller hands the ids to the broker after its commit.
"""

from __future__ import annotations

import heapq
import uuid
from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.store import db
from worker.store.models import WebhookDelivery, WebhookEndpoint
from worker.store.row_locks import unheld

ENDPOINT: sa.Table = WebhookEndpoint.__table__  # type: ignore[attr-defined]
DELIVERY: sa.Table = WebhookDelivery.__table__  # type: ignore[attr-defined]
PENDING = "pending"
#: The advisory lock publishers take (an arbitrary constant: "whpub" in ASCII).
_LOCK_KEY = 0x7768707562


@dataclass(frozen=True)
class Limits:
    """How much may be held at once: per endpoint, in all, and by one workspace."""

    endpoint: int
    in_flight: int

    @property
    def workspace(self) -> int:
        """A workspace holds at most half the slots: the other half is always for the rest."""
        return max(1, self.in_flight // 2)


def _held(now: datetime, republish_after: timedelta) -> Any:
    """A pending delivery an attempt holds, or a message published recently carries."""
    return sa.or_(DELIVERY.c.lease_until >= now, DELIVERY.c.published_at >= now - republish_after)


def held_counts(
    session: Session, now: datetime, republish_after: timedelta
) -> dict[tuple[uuid.UUID, uuid.UUID], int]:
    """Held deliveries per (workspace, endpoint)."""
    query = (
        sa.select(DELIVERY.c.workspace_id, DELIVERY.c.endpoint_id, sa.func.count())
        .where(DELIVERY.c.state == PENDING, _held(now, republish_after))
        .group_by(DELIVERY.c.workspace_id, DELIVERY.c.endpoint_id)
    )
    return {(ws, ep): int(n) for ws, ep, n in session.execute(query).all()}


def _candidates(
    session: Session,
    now: datetime,
    republish_after: timedelta,
    per_endpoint: int,
    endpoint_ids: Collection[uuid.UUID] | None,
) -> list[sa.Row[Any]]:
    """Each enabled endpoint's first `per_endpoint` due deliveries that nothing holds, with their
    rank `k` in the endpoint (oldest due first)."""
    enabled = sa.select(ENDPOINT.c.id).where(ENDPOINT.c.enabled.is_(True))
    if endpoint_ids is not None:
        enabled = enabled.where(ENDPOINT.c.id.in_(list(endpoint_ids)))
    k = sa.func.row_number().over(
        partition_by=DELIVERY.c.endpoint_id, order_by=(DELIVERY.c.next_attempt_at, DELIVERY.c.id)
    )
    due = (
        sa.select(
            DELIVERY.c.id,
            DELIVERY.c.workspace_id,
            DELIVERY.c.endpoint_id,
            DELIVERY.c.published_at,
            DELIVERY.c.next_attempt_at,
            k.label("k"),
        )
        .where(
            DELIVERY.c.state == PENDING,
            DELIVERY.c.next_attempt_at <= now,
            sa.or_(DELIVERY.c.lease_until.is_(None), DELIVERY.c.lease_until < now),
            sa.or_(
                DELIVERY.c.published_at.is_(None),
                DELIVERY.c.published_at < now - republish_after,
            ),
            DELIVERY.c.endpoint_id.in_(enabled),
        )
        .subquery()
    )
    return list(session.execute(sa.select(due).where(due.c.k <= per_endpoint)).all())


def choose(
    rows: list[sa.Row[Any]],
    held: dict[tuple[uuid.UUID, uuid.UUID], int],
    limits: Limits,
    limit: int,
    queued: int = 0,
) -> list[uuid.UUID]:
    """The deliveries to publish, in order: within each endpoint's room, the workspaces taking
    turns (the one holding fewest first), each workspace's endpoints taking turns.

    `queued` messages wait in the broker: as many of the candidates published long ago (whose
    message may be among them) are left for a later sweep.
    """
    endpoint_held: Counter[uuid.UUID] = Counter()
    workspace_held: Counter[uuid.UUID] = Counter()
    for (ws, ep), n in held.items():
        endpoint_held[ep] += n
        workspace_held[ws] += n
    stale = sum(1 for row in rows if row.published_at is not None)
    keep_stale = max(0, stale - queued)
    lines: dict[uuid.UUID, list[sa.Row[Any]]] = defaultdict(list)
    for row in sorted(rows, key=lambda r: (r.k, r.next_attempt_at, r.endpoint_id)):
        if row.k > limits.endpoint - endpoint_held[row.endpoint_id]:
            continue  # the endpoint's room is taken
        if row.published_at is not None:
            if keep_stale <= 0:
                continue
            keep_stale -= 1
        lines[row.workspace_id].append(row)
    room = min(limit, limits.in_flight - sum(workspace_held.values()))
    turns = [(workspace_held[ws], line[0].next_attempt_at, ws) for ws, line in lines.items()]
    heapq.heapify(turns)
    taken: Counter[uuid.UUID] = Counter()
    chosen: list[uuid.UUID] = []
    while turns and len(chosen) < room:
        holding, _, ws = heapq.heappop(turns)
        line = lines[ws]
        if holding >= limits.workspace or taken[ws] >= len(line):
            continue
        chosen.append(line[taken[ws]].id)
        taken[ws] += 1
        if taken[ws] < len(line):
            heapq.heappush(turns, (holding + 1, line[taken[ws]].next_attempt_at, ws))
    return chosen


def pick(
    session: Session,
    now: datetime,
    republish_after: timedelta,
    limits: Limits,
    limit: int,
    endpoint_ids: Collection[uuid.UUID] | None = None,
    queued: int = 0,
) -> list[uuid.UUID]:
    """Choose what to publish now (of `endpoint_ids`' deliveries, or of every endpoint's) and
    mark it published; the ids this transaction won, to publish after its commit."""
    if endpoint_ids is not None and not endpoint_ids:
        return []
    if db.dialect(session) == db.POSTGRESQL:
        # Held until this transaction ends: the next publisher counts what this one marked.
        session.execute(sa.select(sa.func.pg_advisory_xact_lock(_LOCK_KEY)))
    held = held_counts(session, now, republish_after)
    rows = _candidates(session, now, republish_after, limits.endpoint, endpoint_ids)
    chosen = choose(rows, held, limits, limit, queued)
    if not chosen:
        return []
    still_due = (
        DELIVERY.c.id.in_(chosen)
        & (DELIVERY.c.state == PENDING)
        & sa.or_(DELIVERY.c.published_at.is_(None), DELIVERY.c.published_at < now - republish_after)
        & sa.or_(DELIVERY.c.lease_until.is_(None), DELIVERY.c.lease_until < now)
    )
    # A chosen row another transaction holds (its attempt recording an outcome) is left to the
    # next pick rather than waited on: the sweeper runs this too (`row_locks.unheld`).
    won = session.execute(
        sa.update(DELIVERY)
        .where(unheld(DELIVERY.c.id, still_due))
        .values(published_at=now)
        .returning(DELIVERY.c.id)
    )
    order = {delivery_id: i for i, delivery_id in enumerate(chosen)}
    return sorted(won.scalars(), key=order.__getitem__)
