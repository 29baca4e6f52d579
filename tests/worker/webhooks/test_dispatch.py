"""What the webhook publishers hand to the broker (`worker.webhooks.dispatch`): only due
deliveries whose endpoint has room, nothing for a busy or backing-off endpoint, the workspaces
taking turns, and at most the fleet's and a workspace's share held at once.

Straight against the database. The rows are due in the future and `pick` is asked at that
time, so the session's sweep (on the real clock) never publishes them meanwhile."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from worker.domain import clock
from worker.store import db
from worker.webhooks import dispatch, endpoints, signing
from worker.webhooks import records as store

REPUBLISH = timedelta(minutes=1)
LEASE = timedelta(seconds=30)


def _later() -> datetime:
    """A moment a day to a year ahead, minutes apart from any other test's (what the others'
    rows hold at their own moment is then nothing at this one)."""
    return clock.now() + timedelta(days=1, minutes=random.randrange(525_600))


def _endpoint(workspace: uuid.UUID, now: datetime) -> uuid.UUID:
    row = db.with_transient_retry(
        lambda s: endpoints.insert_endpoint(
            s,
            workspace,
            "https://hooks.invalid/x",
            ["retrieval.settled"],
            None,
            signing.new_secret(),
            now,
        )
    )
    return uuid.UUID(str(row.id))


def _deliveries(
    workspace: uuid.UUID, endpoint_id: uuid.UUID, due: datetime, count: int
) -> list[uuid.UUID]:
    """`count` pending deliveries due by `due` (oldest first, a second before it) that no
    message carries, as a settle writes them."""
    rows: list[dict[str, Any]] = [
        {
            "id": uuid.uuid4(),
            "endpoint_id": endpoint_id,
            "workspace_id": workspace,
            "retrieval_id": uuid.uuid4(),
            "event_type": store.RETRIEVAL_SETTLED,
            "state": store.PENDING,
            "attempts": 0,
            "next_attempt_at": due - timedelta(seconds=1) + timedelta(microseconds=n),
            "retry_until": due + timedelta(days=1),
            "published_at": None,
            "created_at": due,
        }
        for n in range(count)
    ]
    db.with_transient_retry(lambda s: s.execute(sa.insert(store.DELIVERY), rows))
    return [row["id"] for row in rows]


def _pick(
    now: datetime, endpoint_ids: list[uuid.UUID], limits: dispatch.Limits, limit: int = 500
) -> list[uuid.UUID]:
    return db.with_transient_retry(
        lambda s: dispatch.pick(s, now, REPUBLISH, limits, limit, endpoint_ids),
    )


def _defer(delivery_id: uuid.UUID, now: datetime) -> None:
    db.with_transient_retry(lambda s: store.defer(s, delivery_id, now))


def _claim(delivery_id: uuid.UUID, now: datetime) -> store.Attempt | None:
    return db.with_transient_retry(lambda s: store.claim(s, delivery_id, now, LEASE, 2))


WIDE = dispatch.Limits(endpoint=2, in_flight=10_000)


def test_only_what_the_endpoint_has_room_for_is_published() -> None:
    now = _later()
    workspace = uuid.uuid4()
    endpoint_id = _endpoint(workspace, now)
    ids = _deliveries(workspace, endpoint_id, now, 6)
    first = _pick(now, [endpoint_id], WIDE)
    assert first == ids[:2]  # the oldest due, two: the endpoint's concurrency
    assert _pick(now, [endpoint_id], WIDE) == []  # both still held by their messages


def test_a_busy_endpoints_deferred_deliveries_cost_no_message_until_it_has_room() -> None:
    """A claim refused for a busy endpoint (deferred) is not published again while the
    endpoint's attempts hold it, nor is one backing off before it is due; room brings them."""
    now = _later()
    workspace = uuid.uuid4()
    endpoint_id = _endpoint(workspace, now)
    ids = _deliveries(workspace, endpoint_id, now, 4)
    assert _pick(now, [endpoint_id], WIDE) == ids[:2]
    attempts = [_claim(i, now) for i in ids[:2]]
    assert all(attempts)
    for deferred in ids[2:]:  # a duplicate message found the endpoint busy
        assert _claim(deferred, now) is None
        _defer(deferred, now)
    for moment in (now, now + timedelta(seconds=1), now + timedelta(seconds=20)):
        assert _pick(moment, [endpoint_id], WIDE) == []  # busy: nothing published, none skipped
    first = attempts[0]
    assert first is not None
    retry_in = timedelta(minutes=10)
    outcome = db.with_transient_retry(
        lambda s: store.failed_attempt(s, first, 500, "HTTP 500", now, retry_in, timedelta(days=2))
    )
    assert outcome.recorded and not outcome.final
    # One slot free: the oldest deferred one goes, not the one backing off for ten minutes.
    assert _pick(now + timedelta(seconds=1), [endpoint_id], WIDE) == [ids[2]]
    assert _pick(now + timedelta(seconds=2), [endpoint_id], WIDE) == []


def test_workspaces_take_turns_and_none_holds_more_than_half() -> None:
    """A workspace with eleven endpoints' backlog and another with one endpoint: what is
    published alternates between them, spreads A's share over its endpoints, and A never
    holds more than half of the fleet's slots."""
    # Past every other test's moment: what they published counts as held at any earlier one,
    # and this test's fleet-wide room must be its own.
    now = clock.now() + timedelta(days=400, minutes=random.randrange(525_600))
    a, b = uuid.uuid4(), uuid.uuid4()
    a_endpoints = [_endpoint(a, now) for _ in range(11)]
    for endpoint_id in a_endpoints:
        _deliveries(a, endpoint_id, now - timedelta(seconds=30), 20)  # A's are older
    b_endpoint = _endpoint(b, now)
    b_ids = _deliveries(b, b_endpoint, now, 5)
    limits = dispatch.Limits(endpoint=2, in_flight=8)
    chosen = _pick(now, [*a_endpoints, b_endpoint], limits)
    owner = {i: "b" if i in b_ids else "a" for i in chosen}
    assert [owner[i] for i in chosen[:4]] in (["a", "b", "a", "b"], ["b", "a", "b", "a"])
    assert Counter(owner.values()) == {"a": 4, "b": 2}  # A: half of 8; B: its endpoint's room
    with db.session_scope(readonly=True) as session:
        held = dispatch.held_counts(session, now, REPUBLISH)
    a_held = {ep: n for (ws, ep), n in held.items() if ws == a}
    assert sum(a_held.values()) == 4 and max(a_held.values()) == 1  # one each, in turn
    assert _pick(now, [*a_endpoints, b_endpoint], limits) == []  # A at its half, B at its room


def test_choose_fills_the_fleets_room_least_held_workspace_first() -> None:
    """The pure choice: 3 slots left of 4; the workspace already holding one waits its turn."""
    now = clock.now()
    a, b, ep_a, ep_b = (uuid.uuid4() for _ in range(4))

    class Row:
        def __init__(self, ws: uuid.UUID, ep: uuid.UUID, k: int, due: datetime) -> None:
            self.id, self.workspace_id, self.endpoint_id, self.k = uuid.uuid4(), ws, ep, k
            self.published_at, self.next_attempt_at = None, due

    older = now - timedelta(seconds=1)  # at equal holdings, the older due goes first
    rows: list[Any] = [Row(a, ep_a, 1, older), Row(a, ep_a, 2, older)]
    rows += [Row(b, ep_b, 1, now), Row(b, ep_b, 2, now)]
    held = {(a, uuid.uuid4()): 1}
    chosen = dispatch.choose(rows, held, dispatch.Limits(endpoint=2, in_flight=4), 500)
    assert chosen == [rows[2].id, rows[0].id, rows[3].id]
