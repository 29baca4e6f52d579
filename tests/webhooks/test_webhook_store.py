"""The delivery outbox's rules, straight against the database: fenced claims and outcomes,
per-endpoint concurrency, the retry window, disabling; the back-off and the signatures."""

from __future__ import annotations

import random
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from standardwebhooks import Webhook

from tests.support.row_locks import Holder, within
from worker.domain import clock
from worker.store import db
from worker.webhooks import dispatch, endpoints, policy, signing
from worker.webhooks import records as store

LEASE = timedelta(seconds=10)
DAY = timedelta(days=1)


def _endpoint(now: datetime, workspace: uuid.UUID | None = None) -> uuid.UUID:
    """An endpoint no worker can reach (nothing here is published)."""
    row = db.with_transient_retry(
        lambda s: endpoints.insert_endpoint(
            s,
            workspace or uuid.uuid4(),
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
            endpoint = endpoints.get_endpoint(session, endpoint_id)
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
        limits = dispatch.Limits(endpoint=2, in_flight=10_000)
        ids = db.with_transient_retry(
            lambda s: dispatch.pick(s, now, timedelta(minutes=1), limits, 10, [endpoint_id])
        )
        assert ids == [due] and _row(due).published_at is not None


def _fail(attempt: store.Attempt, now: datetime, retry_in: timedelta) -> store.FailureOutcome:
    return db.with_transient_retry(
        lambda s: store.failed_attempt(s, attempt, 500, "HTTP 500", now, retry_in, DAY)
    )


class TestWindow:
    """The retry window exactly: from the settle, EVIDENCE_WEBHOOK_RETRY_WINDOW_SECONDS seconds;
    an attempt due at its last instant is still made, and past it the delivery fails."""

    def test_the_default_window_is_a_day_of_seconds(self) -> None:
        from worker.platform.settings import Settings

        assert Settings.model_fields["webhook_retry_window_seconds"].default == 86_400

    def test_a_settle_opens_a_window_of_the_configured_seconds(self) -> None:
        """Recorded at a settle: due at once, retried until exactly the window later."""
        from tests.support.factories import cancel_open, parked
        from worker.platform.settings import get_settings

        workspace, now = uuid.uuid4(), clock.now()
        endpoint_id = _endpoint(now, workspace)
        (retrieval_id,) = parked(workspace)
        try:
            (delivery_id,) = db.with_transient_retry(
                lambda s: store.record_settled(s, [uuid.UUID(retrieval_id)], now)
            )
            row = _row(delivery_id)
            window = timedelta(seconds=get_settings().webhook_retry_window_seconds)
            assert window == timedelta(seconds=60)  # the suite's setting (tests/conftest.py)
            assert clock.as_utc(row.next_attempt_at) == now
            assert clock.as_utc(row.retry_until) == now + window
        finally:
            cancel_open(workspace)
            db.with_transient_retry(lambda s: endpoints.delete_endpoint(s, endpoint_id))

    def test_a_redelivery_opens_a_fresh_window_of_the_configured_seconds(
        self, http: object
    ) -> None:
        """POST …/redeliver: due now, retried until exactly the window later."""
        from tests.support.factories import make_key
        from tests.webhooks.support import Hooks

        workspace, long_ago = uuid.uuid4(), clock.now() - DAY
        endpoint_id = _endpoint(long_ago, workspace)
        delivery_id = _delivery(endpoint_id, long_ago, window=timedelta(seconds=1))
        hooks = Hooks(http, make_key([workspace]))
        try:
            answer = hooks.call("POST", f"/{endpoint_id}/deliveries/{delivery_id}/redeliver")
            assert answer.status_code == 202, answer.text
            delivery = answer.json()["delivery"]
            due, until = (
                datetime.fromisoformat(delivery[name])
                for name in ("next_attempt_at", "retry_until")
            )
            assert until - due == timedelta(seconds=60)
            assert clock.now() - DAY < due <= clock.now()
        finally:
            db.with_transient_retry(lambda s: endpoints.delete_endpoint(s, endpoint_id))

    def test_a_retry_due_at_the_last_instant_is_made_and_its_failure_is_final(self) -> None:
        now = clock.now()
        window = timedelta(seconds=30)
        delivery_id = _delivery(_endpoint(now), now, window=window)
        attempt = _claim(delivery_id, now)
        assert attempt is not None and attempt.retry_until == now + window
        assert _fail(attempt, now, window) == store.FailureOutcome(recorded=True)
        row = _row(delivery_id)
        assert row.state == "pending"
        assert clock.as_utc(row.next_attempt_at) == now + window  # the window's last instant
        last = _claim(delivery_id, now + window)
        assert last is not None and last.attempt == 2
        outcome = _fail(last, now + window, timedelta(microseconds=1))
        assert outcome == store.FailureOutcome(recorded=True, final=True)
        assert _row(delivery_id).state == "failed"

    def test_a_retry_due_past_the_window_fails_the_delivery_now(self) -> None:
        now = clock.now()
        window = timedelta(seconds=30)
        delivery_id = _delivery(_endpoint(now), now, window=window)
        attempt = _claim(delivery_id, now)
        assert attempt is not None
        late = window + timedelta(microseconds=1)
        assert _fail(attempt, now, late) == store.FailureOutcome(recorded=True, final=True)
        row = _row(delivery_id)
        assert (row.state, row.last_error) == ("failed", "HTTP 500")

    def test_the_sweep_fails_a_delivery_only_past_its_window(self) -> None:
        """At retry_until it is still pending (due); a microsecond later the sweep fails it.
        (Instants a day back: no other test's delivery is that old.)"""
        created = clock.now() - 2 * DAY
        window = timedelta(seconds=30)
        delivery_id = _delivery(_endpoint(created), created, window=window)
        db.with_transient_retry(lambda s: store.fail_expired(s, created + window))
        assert _row(delivery_id).state == "pending"
        db.with_transient_retry(
            lambda s: store.fail_expired(s, created + window + timedelta(microseconds=1))
        )
        row = _row(delivery_id)
        assert (row.state, row.last_error) == ("failed", "retry window passed")


class _Edge(random.Random):
    """A random source that always draws the low or the high end of a range."""

    def __init__(self, high: bool) -> None:
        super().__init__(0)
        self.high = high

    def uniform(self, a: float, b: float) -> float:
        return b if self.high else a


class TestPolicy:
    #: (attempt, the ceiling in seconds) for a base of 10 s capped at an hour.
    SCHEDULE = [(1, 10), (2, 20), (3, 40), (4, 80), (8, 1280), (9, 2560), (10, 3600), (60, 3600)]

    @pytest.mark.parametrize(("attempt", "ceiling"), SCHEDULE)
    def test_the_schedule_exactly(self, attempt: int, ceiling: int) -> None:
        """base × 2^(attempt − 1) seconds, capped; the jitter takes off at most half of it."""
        high = policy.retry_delay(attempt, 10.0, 3600.0, _Edge(high=True))
        low = policy.retry_delay(attempt, 10.0, 3600.0, _Edge(high=False))
        assert (high, low) == (timedelta(seconds=ceiling), timedelta(seconds=ceiling / 2))

    def test_the_suites_settings_are_seconds(self) -> None:
        """The suite's base (0.5 s) and cap (1 s), as the deliver task passes them."""
        from worker.platform.settings import get_settings

        settings = get_settings()
        base, cap = settings.webhook_retry_base_seconds, settings.webhook_retry_cap_seconds
        top = [policy.retry_delay(n, base, cap, _Edge(high=True)) for n in (1, 2, 3)]
        assert top == [timedelta(seconds=0.5), timedelta(seconds=1), timedelta(seconds=1)]

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


class TestSweepPastHeldRows:
    """A delivery row another transaction holds (a host cut off while recording an attempt's
    outcome) holds neither the sweep's expiry nor a pick: the others are changed now, the held
    one by a later pass (the sweeper is one process: a wait here stops every sweep)."""

    def test_expiry_past_a_held_delivery(self, row_holder: Holder) -> None:
        created = clock.now() - 2 * DAY
        endpoint_id = _endpoint(created)
        held, free = (_delivery(endpoint_id, created, window=timedelta(seconds=30)) for _ in "ab")
        row_holder.lock("webhook_delivery", held)
        failed = within(
            10, lambda: db.with_transient_retry(lambda s: store.fail_expired(s, clock.now()))
        )
        assert failed == 1
        assert (_row(free).state, _row(held).state) == ("failed", "pending")
        row_holder.release()
        assert db.with_transient_retry(lambda s: store.fail_expired(s, clock.now())) == 1
        assert _row(held).state == "failed"

    def test_a_pick_past_a_held_delivery(self, row_holder: Holder) -> None:
        now = clock.now()
        endpoint_id = _endpoint(now)
        held, free = _delivery(endpoint_id, now), _delivery(endpoint_id, now)
        db.with_transient_retry(lambda s: store.mark_unpublished(s, [held, free]))
        row_holder.lock("webhook_delivery", held)
        limits = dispatch.Limits(endpoint=2, in_flight=10_000)

        def pick() -> list[uuid.UUID]:
            return db.with_transient_retry(
                lambda s: dispatch.pick(s, now, timedelta(minutes=1), limits, 10, [endpoint_id])
            )

        assert within(10, pick) == [free]
        row_holder.release()
        assert pick() == [held]
