"""The open ceiling's tally: an upper bound that spares the count far from the ceiling and
never lets a workspace past it (`worker.lanes.open_tally`)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.domain import clock
from worker.domain.states import RetrievalState as S
from worker.lanes import open_tally
from worker.retrieval import records as retrievals
from worker.retrieval import single_retrieval
from worker.store import db
from worker.store.models import OpenTally, Retrieval

# A database of its own: its rows wait in the batch lane, where any spare token the session's
# worker holds (another test's cancelled row) would claim and settle them, freeing room.
pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services", "own_database")]

TTL = timedelta(hours=1)
LIMIT = 10
R = Retrieval.__table__.c  # type: ignore[attr-defined]
T = OpenTally.__table__.c  # type: ignore[attr-defined]


def record(workspace: uuid.UUID, wanted: int, limit: int = LIMIT) -> int:
    """Record as many of `wanted` single retrievals as the ceiling allows, each in its own
    transaction as the API does; how many it took."""
    taken = 0
    for _ in range(wanted):
        request = retrievals.NewRetrieval(
            workspace, uuid.uuid4(), "https://example.org/", "url_text", None
        )
        try:
            single_retrieval.record_single(request, clock.now(), TTL, limit, 0)
        except retrievals.OverQuota as refused:
            assert refused.reason == retrievals.OVER_OPEN
            continue
        taken += 1
    return taken


def tally(workspace: uuid.UUID) -> tuple[int, int] | None:
    """(counted, added) over the workspace's shards; None when it has no tally."""
    rows = db.with_transient_retry(
        lambda s: s.execute(
            sa.select(T.shard, T.counted, T.added, T.ceiling).where(T.workspace_id == workspace)
        ).all()
    )
    if not rows:
        return None
    assert sorted(r.shard for r in rows) == list(range(open_tally.SHARDS))
    for row in rows:  # no shard past its share of the ceiling it was split under
        assert row.counted + row.added <= open_tally.share(row.shard, row.ceiling)
    return sum(r.counted for r in rows), sum(r.added for r in rows)


def bound(workspace: uuid.UUID) -> int | None:
    counts = tally(workspace)
    return None if counts is None else sum(counts)


def close(workspace: uuid.UUID, how_many: int) -> None:
    """Settle `how_many` of the workspace's open retrievals the way a cancel does."""

    def write(session: Session) -> None:
        ids = session.execute(
            sa.select(R.id).where(R.workspace_id == workspace, R.state == S.PENDING.value)
            .limit(how_many)
        ).scalars().all()  # fmt: skip
        session.execute(
            sa.update(Retrieval)
            .where(R.id.in_(list(ids)))
            .values(state=S.CANCELLED.value, settled_at=clock.now())
        )

    db.with_transient_retry(write)


def open_count(workspace: uuid.UUID) -> int:
    return db.with_transient_retry(lambda s: open_tally.count(s, workspace, 10**6))


class TestTally:
    def test_first_retrieval_counts_then_the_bound_grows_without_counting(
        self, workspace: uuid.UUID
    ) -> None:
        """No tally: the exact count starts it; below the ceiling each new one only adds."""
        assert tally(workspace) is None
        assert record(workspace, 1) == 1
        assert tally(workspace) == (0, 1)
        assert record(workspace, 4) == 4
        assert bound(workspace) == 5  # a shard without room counted again: still 5

    def test_the_ceiling_holds_exactly(self, workspace: uuid.UUID) -> None:
        """Ten of ten: the eleventh is refused, and nothing past the ceiling was recorded."""
        assert record(workspace, 12) == LIMIT
        assert open_count(workspace) == LIMIT

    def test_room_comes_back_through_an_exact_count(self, workspace: uuid.UUID) -> None:
        """Closed retrievals leave the bound high (it over-estimates); at the bound's ceiling
        the exact count finds the room and starts the tally again from the truth."""
        assert record(workspace, LIMIT) == LIMIT
        close(workspace, 3)
        assert bound(workspace) == LIMIT
        assert record(workspace, 5) == 3
        # The last two counted, found no room, and were rolled back with what they wrote:
        # the tally is where the third left it, a bound at the ceiling (the next one counts).
        assert bound(workspace) == LIMIT
        assert open_count(workspace) == LIMIT

    def test_a_lower_ceiling_applies_at_once(self, workspace: uuid.UUID) -> None:
        """The bound is compared with the ceiling of the moment: lowering it is never late."""
        assert record(workspace, 4) == 4
        assert record(workspace, 1, limit=3) == 0
        # Refused: nothing it wrote stays, and the bound (4) is still above the truth.
        assert bound(workspace) == 4
        assert record(workspace, 10, limit=6) == 2
        assert open_count(workspace) == 6

    def test_shards_split_under_another_ceiling_take_nothing(self, workspace: uuid.UUID) -> None:
        """Shards split under 10 hold 0 or 1 of the 4 open; under a ceiling of 5 each share is
        1: a shard that checked only its share would take a retrieval per empty shard."""
        assert record(workspace, 4) == 4
        assert record(workspace, 8, limit=5) == 1
        assert open_count(workspace) == 5

    def test_fits_reads_without_taking(self, workspace: uuid.UUID) -> None:
        """The rate-refused path asks whether one more fits and leaves the tally as it was."""
        assert record(workspace, 2) == 2
        before = tally(workspace)
        fits = db.with_transient_retry(lambda s: open_tally.fits(s, workspace, LIMIT))
        full = db.with_transient_retry(lambda s: open_tally.fits(s, workspace, 2))
        assert (fits, full) == (True, False)
        assert tally(workspace) == before

    def test_batch_takes_the_room_left(self, workspace: uuid.UUID) -> None:
        """A batch gets what is left under the ceiling, in order; the rest is refused."""
        assert record(workspace, 7) == 7
        url = "https://example.org/"
        requests = [
            retrievals.NewRetrieval(workspace, uuid.uuid4(), url, "url_text", None)
            for _ in range(5)
        ]
        outcome = db.with_transient_retry(
            lambda s: retrievals.create_batch_within_quota(
                s, workspace, requests, clock.now(), TTL, LIMIT, rate_room=100
            )
        )
        assert {r.mutation_id for r in requests[:3]} == set(outcome.created)
        assert set(outcome.refused.values()) == {retrievals.OVER_OPEN}
        assert open_count(workspace) == LIMIT

    def test_a_batch_at_the_ceiling_keeps_no_tally(self, workspace: uuid.UUID) -> None:
        """A count that reached the ceiling knows only "at least that many": no bound is kept
        from it, so a raised ceiling is counted afresh."""
        assert record(workspace, LIMIT) == LIMIT
        request = retrievals.NewRetrieval(
            workspace, uuid.uuid4(), "https://example.org/", "url_text", None
        )
        outcome = db.with_transient_retry(
            lambda s: retrievals.create_batch_within_quota(
                s, workspace, [request], clock.now(), TTL, LIMIT, rate_room=100
            )
        )
        assert outcome.refused == {request.mutation_id: retrievals.OVER_OPEN}
        assert tally(workspace) is None
        assert record(workspace, 3, limit=LIMIT + 2) == 2

    def test_concurrent_requests_never_pass_the_ceiling(self, workspace: uuid.UUID) -> None:
        """Eight threads racing 40 single creations, half the room closing meanwhile: the
        workspace never has more open than the ceiling, and every created row is counted."""
        import threading

        taken: list[int] = []

        def race() -> None:
            taken.append(record(workspace, 5))

        threads = [threading.Thread(target=race) for _ in range(8)]
        for thread in threads:
            thread.start()
        close(workspace, 5)
        for thread in threads:
            thread.join(60)
        assert open_count(workspace) <= LIMIT
        assert LIMIT <= sum(taken) <= LIMIT + 5
