"""The delivery outbox's rules, straight against the database: fenced claims and outcomes,
per-endpoint concurrency, the retry window, disabling; the back-off and the signatures."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from standardwebhooks import Webhook

from worker import clock
from worker.store import db
from worker.store import webhooks as store
from worker.webhooks import policy, signing

LEASE = timedelta(seconds=10)
DAY = timedelta(days=1)


def _endpoint(now: datetime) -> uuid.UUID:
    """An endpoint no worker can reach (nothing here is published)."""
    row = db.with_transient_retry(
        lambda s: store.insert_endpoint(
            s,
            uuid.uuid4(),
            "https://hooks.invalid/x",
            ["retrieval.settled"],
            None,
            signing.new_secret(),
            now,
        )
    )
    return uuid.UUID(str(row.id))


def _delivery(endpoint_id: uuid.UUID, now: datetime, window: timedelta = DAY) -> uuid.UUID:
    """A due delivery row, written directly (record_settled would publish it)."""
    import sqlalchemy as sa

    delivery_id = uuid.uuid4()
    values: dict[str, Any] = {
        "id": delivery_id,
        "endpoint_id": endpoint_id,
        "workspace_id": uuid.uuid4(),
        "retrieval_id": uuid.uuid4(),
        "event_type": store.RETRIEVAL_SETTLED,
        "state": store.PENDING,
        "attempts": 0,
        "next_attempt_at": now,
        "retry_until": now + window,
        "published_at": now,
        "created_at": now,
    }
    db.with_transient_retry(lambda s: s.execute(sa.insert(store.DELIVERY).values(values)))
    return delivery_id


def _claim(delivery_id: uuid.UUID, now: datetime, concurrency: int = 2) -> store.Attempt | None:
    return db.with_transient_retry(lambda s: store.claim(s, delivery_id, now, LEASE, concurrency))


def _row(delivery_id: uuid.UUID) -> Any:
    with db.session_scope(readonly=True) as session:
        return store.get_delivery(session, delivery_id)


class TestClaims:
    def test_one_attempt_per_claim_and_late_outcomes_are_fenced(self) -> None:
        now = clock.now()
        delivery_id = _delivery(_endpoint(now), now)
        first = _claim(delivery_id, now)
        assert first is not None and first.attempt == 1
        assert _claim(delivery_id, now) is None  # leased: a duplicate message does nothing
        later = now + LEASE + timedelta(seconds=1)
        second = _claim(delivery_id, later)  # the first worker died: its lease ran out
        assert second is not None and second.attempt == 2
        assert not db.with_transient_retry(lambda s: store.delivered(s, first, 200, later))
        assert db.with_transient_retry(lambda s: store.delivered(s, second, 204, later))
        row = _row(delivery_id)
        assert (row.state, row.attempts, row.last_status) == ("delivered", 2, 204)
        assert _claim(delivery_id, later + LEASE * 2) is None

    def test_an_endpoint_has_at_most_its_concurrency_in_flight(self) -> None:
        now = clock.now()
        endpoint_id = _endpoint(now)
        ids = [_delivery(endpoint_id, now) for _ in range(3)]
        other = _delivery(_endpoint(now), now)
        assert _claim(ids[0], now) is not None and _claim(ids[1], now) is not None
        assert _claim(ids[2], now) is None
        assert _claim(other, now) is not None  # another endpoint is not held up
        db.with_transient_retry(lambda s: store.defer(s, ids[2], now))
        assert _row(ids[2]).published_at is None  # the next sweep publishes it again

    def test_failures_retry_then_fail_past_the_window_and_disable_the_endpoint(self) -> None:
        now = clock.now()
        endpoint_id = _endpoint(now)
        delivery_id = _delivery(endpoint_id, now, window=timedelta(seconds=30))
        attempt = _claim(delivery_id, now)
        assert attempt is not None
        outcome = db.with_transient_retry(
            lambda s: store.failed_attempt(
                s, attempt, 500, "HTTP 500", now, timedelta(seconds=5), timedelta(seconds=60)
            )
        )
        assert outcome == store.FailureOutcome(recorded=True, final=False, disabled=False)
        row = _row(delivery_id)
        assert row.state == "pending" and row.published_at is None
        assert clock.as_utc(row.next_attempt_at) == now + timedelta(seconds=5)
        assert _claim(delivery_id, now + timedelta(seconds=4)) is None  # not due yet
        late = now + timedelta(seconds=90)
        attempt = _claim(delivery_id, late)
        assert attempt is not None and attempt.attempt == 2
        outcome = db.with_transient_retry(
            lambda s: store.failed_attempt(
                s, attempt, None, "timeout", late, timedelta(seconds=5), timedelta(seconds=60)
            )
        )
        assert outcome == store.FailureOutcome(recorded=True, final=True, disabled=True)
        assert _row(delivery_id).state == "failed"
        with db.session_scope(readonly=True) as session:
            endpoint = store.get_endpoint(session, endpoint_id)
        assert endpoint is not None and not endpoint.enabled
        assert "last error: timeout" in endpoint.disabled_reason

    def test_the_sweep_fails_what_outlived_its_window_and_publishes_what_is_due(self) -> None:
        now = clock.now()
        endpoint_id = _endpoint(now)
        stale = _delivery(endpoint_id, now - timedelta(minutes=5), window=timedelta(minutes=1))
        due = _delivery(endpoint_id, now)
        db.with_transient_retry(lambda s: store.mark_unpublished(s, [due]))
        assert db.with_transient_retry(lambda s: store.fail_expired(s, now)) >= 1
        assert _row(stale).state == "failed"
        with db.session_scope() as session:
            ids, never = store.due_for_publish(session, now, timedelta(minutes=1), 10_000)
        assert due in ids and due in never and stale not in ids


class TestPolicy:
    @pytest.mark.parametrize("attempt", [1, 2, 5, 40])
    def test_back_off_doubles_up_to_the_cap_with_jitter(self, attempt: int) -> None:
        ceiling = min(3600.0, 10.0 * 2 ** (attempt - 1))
        rng = random.Random(attempt)
        for _ in range(50):
            delay = policy.retry_delay(attempt, 10.0, 3600.0, rng).total_seconds()
            assert ceiling * (1 - policy.JITTER) <= delay <= ceiling


class TestSigning:
    def test_each_active_secret_signs_and_the_reference_library_verifies(self) -> None:
        old, new = signing.new_secret(), signing.new_secret()
        body = '{"type":"retrieval.settled"}'
        headers = signing.headers([new, old], "a-delivery-id", clock.now(), body)
        assert headers["webhook-signature"].count("v1,") == 2
        for secret in (old, new):
            assert Webhook(secret).verify(body, headers) == {"type": "retrieval.settled"}
        with pytest.raises(Exception, match="signature"):
            Webhook(signing.new_secret()).verify(body, headers)
