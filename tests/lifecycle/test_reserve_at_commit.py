"""PostgreSQL: a single retrieval's reservation in the open tally travels with its COMMIT
(`open_tally.reserve_and_commit`, on `single_retrieval.record_single`'s general path). SQLite
reserves before its COMMIT (one writer at a time anyway), so this module runs on PostgreSQL
only (not in the Makefile's SQLITE_TESTS)."""

from __future__ import annotations

import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.lifecycle.test_open_tally import LIMIT, TTL, close, open_count, record, tally
from worker.domain import clock
from worker.lanes import open_tally
from worker.retrieval import records as retrievals
from worker.retrieval import single_retrieval
from worker.store import db

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services", "own_database")]


def _new(workspace: uuid.UUID) -> retrievals.NewRetrieval:
    return retrievals.NewRetrieval(
        workspace, uuid.uuid4(), "https://example.org/", "url_text", None
    )


class TestReserveAtCommit:
    """A single retrieval's reservation travels with its COMMIT."""

    def test_the_reservation_and_the_commit_are_one_statement(
        self, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """With room in the tally, nothing is sent after the reservation: it carries the
        COMMIT, so the tally's row is locked only while the server commits."""
        monkeypatch.setattr(open_tally, "_pick", lambda: 0)  # a shard with room
        assert record(workspace, 1) == 1  # starts the tally by an exact count
        statements: list[str] = []

        def seen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
            statements.append(statement)

        def write(session: Session) -> None:
            retrievals.create_within_quota(
                session, _new(workspace), clock.now(), TTL, LIMIT, 0, reserve_at_commit=True
            )

        engine = db.get_engine()
        sa.event.listen(engine, "before_cursor_execute", seen)
        try:
            db.with_transient_retry(write)
        finally:
            sa.event.remove(engine, "before_cursor_execute", seen)
        assert "UPDATE open_tally" in statements[-1] and "shard = 0" in statements[-1]
        assert statements[-1].endswith("COMMIT")
        assert not any("open_tally" in s for s in statements[:-1])
        assert tally(workspace) == (0, 2)
        assert open_count(workspace) == 2

    def test_no_room_at_commit_rolls_the_insert_back(self, workspace: uuid.UUID) -> None:
        """No tally yet: the reservation finds no row, and the row inserted before it is gone."""

        def write(session: Session) -> None:
            retrievals.create_within_quota(
                session, _new(workspace), clock.now(), TTL, LIMIT, 0, reserve_at_commit=True
            )

        with pytest.raises(open_tally.NoRoomAtCommit):
            db.with_transient_retry(write)
        assert open_count(workspace) == 0 and tally(workspace) is None

    def test_a_full_tally_refuses_at_commit_and_the_exact_count_decides(
        self, workspace: uuid.UUID
    ) -> None:
        """At the ceiling, `record_single` is refused at commit, then counts: over quota."""
        assert record(workspace, LIMIT) == LIMIT
        with pytest.raises(retrievals.OverQuota):
            single_retrieval.record_single(_new(workspace), clock.now(), TTL, LIMIT, 0)
        assert open_count(workspace) == LIMIT
        close(workspace, 1)  # room again, which only the exact count can see
        single_retrieval.record_single(_new(workspace), clock.now(), TTL, LIMIT, 0)
        assert open_count(workspace) == LIMIT

    def test_one_workspace_reserves_in_several_rows(self, workspace: uuid.UUID) -> None:
        """Singles of one workspace spread over the tally's shards (so they seldom wait for
        each other's commit), and the shards add up to what was recorded."""
        assert record(workspace, 40, limit=1000) == 40
        T = open_tally.TALLY.c
        added = db.with_transient_retry(
            lambda s: dict(
                s.execute(sa.select(T.shard, T.added).where(T.workspace_id == workspace)).all()
            )
        )
        assert sum(1 for n in added.values() if n) >= 4, added
        assert sum(added.values()) == 40
