"""The guarded transitions of `worker.retrieval.records`, against the real database."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.support.row_locks import Holder, within
from worker.content.results import Content, content_result
from worker.domain import clock
from worker.retrieval import claims, transitions
from worker.retrieval import records as retrievals
from worker.store import db, retrieval_view

pytestmark = pytest.mark.lifecycle


def _new(ttl: timedelta, workspace_id: uuid.UUID | None = None) -> uuid.UUID:
    workspace_id = workspace_id or uuid.uuid4()
    new = retrievals.NewRetrieval(
        workspace_id, uuid.uuid4(), "https://example.org/a", "url_text", None
    )
    row, created = db.with_transient_retry(
        lambda s: retrievals.create_retrieval(s, new, clock.now(), ttl)
    )
    assert created
    return row.id


def _claim(retrieval_id: uuid.UUID) -> retrievals.Claim:
    claim = db.with_transient_retry(
        lambda s: claims.claim(s, retrieval_id, clock.now(), timedelta(seconds=60))
    )
    assert claim is not None
    return claim


def _result(text: str = "Some text.") -> dict:
    content = Content(text=text, source_url="https://example.org/a", content_kind="document_text")
    return content_result("url_text", content, clock.now())


def _evidence_of(retrieval_id: uuid.UUID) -> tuple[uuid.UUID | None, int | None]:
    with db.session_scope(readonly=True) as session:
        row = retrieval_view.get_retrieval(session, retrieval_id)
        assert row is not None
        return row.evidence_id, row.evidence_revision


def _revision_texts(workspace_id: uuid.UUID) -> list[tuple[int, str]]:
    import sqlalchemy as sa

    from worker.store.models import Evidence, EvidenceRevision

    e, r = Evidence.__table__.c, EvidenceRevision.__table__.c  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        rows = session.execute(
            sa.select(r.revision, r.text)
            .join_from(EvidenceRevision.__table__, Evidence.__table__, e.id == r.evidence_id)
            .where(e.workspace_id == workspace_id)
            .order_by(r.revision)
        )
        return [(row.revision, row.text) for row in rows]


def _lose_lease(retrieval_id: uuid.UUID) -> None:
    """Make this row's lease run out now (without moving the clock for anyone else)."""
    import sqlalchemy as sa

    from worker.store.models import Retrieval

    past = clock.now() - timedelta(seconds=1)
    db.with_transient_retry(
        lambda s: s.execute(
            sa.update(Retrieval)
            .where(Retrieval.__table__.c.id == retrieval_id)  # type: ignore[attr-defined]
            .values(lease_until=past)
        )
    )


def _rescue() -> tuple[int, int]:
    from worker.platform.settings import get_settings

    return db.with_transient_retry(
        lambda s: transitions.rescue_lost(s, clock.now(), get_settings().max_attempts)
    )


def _state(retrieval_id: uuid.UUID) -> tuple[str, int]:
    with db.session_scope(readonly=True) as session:
        row = retrieval_view.get_retrieval(session, retrieval_id)
        assert row is not None
        return row.state, row.attempt


class TestSettle:
    """Only the claim that holds the row, before valid_until, may settle it."""

    def test_settles_once(self) -> None:
        """The claiming attempt settles; the same settle again is refused."""
        rid = _new(timedelta(hours=1))
        claim = _claim(rid)
        assert transitions.settle_claim(claim, _result(), clock.now())
        assert not transitions.settle_claim(claim, _result(), clock.now())
        assert _state(rid) == ("completed", 1)

    def test_second_claim_refused_while_running(self) -> None:
        """A duplicate delivery cannot claim a running retrieval."""
        rid = _new(timedelta(hours=1))
        _claim(rid)
        again = db.with_transient_retry(
            lambda s: claims.claim(s, rid, clock.now(), timedelta(seconds=60))
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
        assert not transitions.settle_claim(first, _result(), clock.now())
        assert transitions.settle_claim(second, _result(), clock.now())
        assert _state(rid) == ("completed", 2)

    def test_fenced_settle_leaves_no_evidence(self) -> None:
        """A zombie's content is rolled back with its settle: no revision, no link."""
        workspace = uuid.uuid4()
        rid = _new(timedelta(hours=1), workspace)
        first = _claim(rid)
        _lose_lease(rid)
        _rescue()
        second = _claim(rid)
        assert not transitions.settle_claim(first, _result("Zombie text."), clock.now())
        assert _revision_texts(workspace) == []
        assert _evidence_of(rid) == (None, None)
        assert transitions.settle_claim(second, _result("Fresh text."), clock.now())
        assert _revision_texts(workspace) == [(1, "Fresh text.")]
        assert _evidence_of(rid)[1] == 1

    def test_revisions_follow_content(self) -> None:
        """Same content names the same revision; new content the next one; old content its own."""
        workspace = uuid.uuid4()
        named = []
        for text in ("One.", "One.", "Two.", "One."):
            rid = _new(timedelta(hours=1), workspace)
            assert transitions.settle_claim(_claim(rid), _result(text), clock.now())
            named.append(_evidence_of(rid))
        assert [revision for _, revision in named] == [1, 1, 2, 1]
        assert len({evidence_id for evidence_id, _ in named}) == 1
        assert _revision_texts(workspace) == [(1, "One."), (2, "Two.")]

    def test_result_past_valid_until_expires(self) -> None:
        """A result arriving after valid_until is refused and the retrieval is expired."""
        rid = _new(timedelta(seconds=30))
        claim = _claim(rid)
        late = clock.now() + timedelta(seconds=31)
        assert not transitions.settle_claim(claim, _result(), late)
        assert _state(rid) == ("expired", 1)

    @pytest.mark.usefixtures("own_database")  # the session's sweep would publish its re-pends
    def test_lost_on_last_attempt_is_unconfirmed(self) -> None:
        """A lease that runs out on the last attempt ends unconfirmed."""
        from worker.platform.settings import get_settings

        rid = _new(timedelta(hours=1))
        for attempt in range(1, get_settings().max_attempts + 1):
            _claim(rid)
            _lose_lease(rid)
            _rescue()
            expected = "unconfirmed" if attempt == get_settings().max_attempts else "pending"
            assert _state(rid) == (expected, attempt)


@pytest.mark.usefixtures("own_database")  # the session's worker must not claim its batch rows
class TestLaneAtInsert:
    """`create_retrieval(interactive_limit=N)`: the insert itself puts a single in the batch
    lane once its workspace has N open interactive retrievals."""

    @staticmethod
    def _create(
        workspace_id: uuid.UUID, mutation_id: uuid.UUID | None = None
    ) -> tuple[retrieval_view.RetrievalRow, bool]:
        new = retrievals.NewRetrieval(
            workspace_id, mutation_id or uuid.uuid4(), "https://example.org/a", "url_text", None
        )
        return db.with_transient_retry(
            lambda s: retrievals.create_retrieval(
                s, new, clock.now(), timedelta(hours=1), interactive_limit=2
            )
        )

    def test_lane_follows_the_open_interactive_count(self) -> None:
        import sqlalchemy as sa

        from worker.store.models import BatchSchedule

        workspace, other = uuid.uuid4(), uuid.uuid4()
        first, second = self._create(workspace), self._create(workspace)
        assert [first[0].lane, second[0].lane] == ["interactive", "interactive"]
        third, created = self._create(workspace)
        assert created and third.lane == "batch"
        assert self._create(other)[0].lane == "interactive"  # another workspace's count
        with db.session_scope(readonly=True) as session:  # the batch lane serves it in turn
            schedule = BatchSchedule.__table__.c  # type: ignore[attr-defined]
            query = sa.select(schedule.workspace_id).where(schedule.workspace_id == workspace)
            assert session.execute(query).scalar_one_or_none() == workspace
        # A replay answers the row as it was recorded, whatever the count says now.
        replay, created = self._create(workspace, third.mutation_id)
        assert not created and (replay.id, replay.lane) == (third.id, "batch")
        # Settled work no longer counts: below the limit again, singles are interactive.
        assert transitions.settle_claim(_claim(first[0].id), _result(), clock.now())
        assert self._create(workspace)[0].lane == "interactive"


class TestSweepPastHeldRows:
    """A row another transaction holds does not hold the sweep's statements: a host cut off
    while it sends its settle keeps its group's rows locked until the database drops its
    session, and every other lost claim must still be rescued (and expiry still done) now."""

    def test_lost_claims_rescued_past_a_held_one(self, row_holder: Holder) -> None:
        held, free = _new(timedelta(hours=1)), _new(timedelta(hours=1))
        for rid in (held, free):
            _claim(rid)
            _lose_lease(rid)
        row_holder.lock("retrieval", held)
        repended, _ = within(10, _rescue)
        assert repended == 1
        assert _state(free) == ("pending", 1) and _state(held) == ("running", 1)

    def test_rescued_once_its_holder_ends(self, row_holder: Holder) -> None:
        """The held row is left to a later sweep, which finds it free."""
        rid = _new(timedelta(hours=1))
        _claim(rid)
        _lose_lease(rid)
        row_holder.lock("retrieval", rid)
        assert within(10, _rescue) == (0, [])
        row_holder.release()
        assert _rescue()[0] == 1 and _state(rid) == ("pending", 1)

    def test_expiry_past_a_held_row(self, row_holder: Holder) -> None:
        held, free = _new(timedelta(seconds=30)), _new(timedelta(seconds=30))
        row_holder.lock("retrieval", held)
        later = clock.now() + timedelta(minutes=1)
        expired = within(
            10, lambda: db.with_transient_retry(lambda s: transitions.expire_due(s, later))
        )
        assert expired == [free]
        assert _state(free) == ("expired", 0) and _state(held) == ("pending", 0)
