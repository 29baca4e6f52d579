"""The guarded transitions of `worker.store`, against the real database."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from worker import clock, db, store
from worker.results import Content, content_result

pytestmark = pytest.mark.lifecycle


def _new(ttl: timedelta) -> uuid.UUID:
    new = store.NewRetrieval(uuid.uuid4(), uuid.uuid4(), "https://example.org/a", "url_text", None)
    row, created = db.with_transient_retry(
        lambda s: store.create_retrieval(s, new, clock.now(), ttl)
    )
    assert created
    return row.id


def _claim(retrieval_id: uuid.UUID) -> store.Claim:
    claim = db.with_transient_retry(
        lambda s: store.claim(s, retrieval_id, clock.now(), timedelta(seconds=60))
    )
    assert claim is not None
    return claim


def _result() -> dict:
    content = Content(
        text="Some text.", source_url="https://example.org/a", content_kind="document_text"
    )
    return content_result("url_text", content, clock.now())


def _lose_lease(retrieval_id: uuid.UUID) -> None:
    """Make this row's lease run out now (without moving the clock for anyone else)."""
    import sqlalchemy as sa

    from worker.models import Retrieval

    past = clock.now() - timedelta(seconds=1)
    db.with_transient_retry(
        lambda s: s.execute(
            sa.update(Retrieval)
            .where(Retrieval.__table__.c.id == retrieval_id)  # type: ignore[attr-defined]
            .values(lease_until=past)
        )
    )


def _rescue() -> tuple[int, int]:
    from worker.settings import get_settings

    return db.with_transient_retry(
        lambda s: store.rescue_lost(s, clock.now(), get_settings().max_attempts)
    )


def _state(retrieval_id: uuid.UUID) -> tuple[str, int]:
    with db.session_scope(readonly=True) as session:
        row = store.get_retrieval(session, retrieval_id)
        assert row is not None
        return row.state, row.attempt


class TestSettle:
    """Only the claim that holds the row, before valid_until, may settle it."""

    def test_settles_once(self) -> None:
        """The claiming attempt settles; the same settle again is refused."""
        rid = _new(timedelta(hours=1))
        claim = _claim(rid)
        assert db.with_transient_retry(lambda s: store.settle(s, claim, _result(), clock.now()))
        assert not db.with_transient_retry(lambda s: store.settle(s, claim, _result(), clock.now()))
        assert _state(rid) == ("completed", 1)

    def test_second_claim_refused_while_running(self) -> None:
        """A duplicate delivery cannot claim a running retrieval."""
        rid = _new(timedelta(hours=1))
        _claim(rid)
        again = db.with_transient_retry(
            lambda s: store.claim(s, rid, clock.now(), timedelta(seconds=60))
        )
        assert again is None and _state(rid) == ("running", 1)

    def test_stale_attempt_is_fenced(self) -> None:
        """After a rescue and a re-claim, the first attempt's settle writes nothing."""
        rid = _new(timedelta(hours=1))
        first = _claim(rid)
        _lose_lease(rid)
        _rescue()
        second = _claim(rid)
        assert second.attempt == 2
        assert not db.with_transient_retry(lambda s: store.settle(s, first, _result(), clock.now()))
        assert db.with_transient_retry(lambda s: store.settle(s, second, _result(), clock.now()))
        assert _state(rid) == ("completed", 2)

    def test_result_past_valid_until_expires(self) -> None:
        """A result arriving after valid_until is refused and the retrieval is expired."""
        rid = _new(timedelta(seconds=30))
        claim = _claim(rid)
        late = clock.now() + timedelta(seconds=31)
        assert not db.with_transient_retry(lambda s: store.settle(s, claim, _result(), late))
        assert _state(rid) == ("expired", 1)

    def test_lost_on_last_attempt_is_unconfirmed(self) -> None:
        """A lease that runs out on the last attempt ends unconfirmed."""
        from worker.settings import get_settings

        rid = _new(timedelta(hours=1))
        for attempt in range(1, get_settings().max_attempts + 1):
            _claim(rid)
            _lose_lease(rid)
            _rescue()
            expected = "unconfirmed" if attempt == get_settings().max_attempts else "pending"
            assert _state(rid) == (expected, attempt)
