"""PostgreSQL: a single retrieval recorded in one round trip (`single_retrieval.record_single`),
and every case the pipeline leaves to the general path. SQLite always takes the general path
(`test_open_tally` runs there too), so this module runs on PostgreSQL only (not in the
Makefile's SQLITE_TESTS)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa

from tests.lifecycle.test_open_tally import LIMIT, TTL, open_count, record, tally
from worker.domain import clock
from worker.lanes import batch_order, open_tally
from worker.retrieval import records as retrievals
from worker.retrieval import single_retrieval
from worker.store import db
from worker.store.models import LANE_BATCH, LANE_INTERACTIVE, BatchSchedule, Retrieval

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services", "own_database")]

R = Retrieval.__table__.c  # type: ignore[attr-defined]
SCHEDULE = BatchSchedule.__table__.c  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def _shard_with_room(monkeypatch: pytest.MonkeyPatch) -> None:
    """Reserve in shard 0, which has room for the two these tests take after the first (the
    tally's shards each hold an eighth of LIMIT; a random one may be full, and then the
    pipeline rightly leaves the retrieval to the exact count)."""
    monkeypatch.setattr(open_tally, "_pick", lambda: 0)


def _new(workspace: uuid.UUID, url: str = "https://example.org/") -> retrievals.NewRetrieval:
    return retrievals.NewRetrieval(workspace, uuid.uuid4(), url, "url_text", None)


def _record(request: retrievals.NewRetrieval, interactive_limit: int = 100) -> tuple[Any, bool]:
    return single_retrieval.record_single(request, clock.now(), TTL, LIMIT, interactive_limit)


def _rows(workspace: uuid.UUID) -> list[Any]:
    return db.with_transient_retry(
        lambda s: list(s.execute(sa.select(R.id, R.lane).where(R.workspace_id == workspace)))
    )


def _scheduled(workspace: uuid.UUID) -> bool:
    count = db.with_transient_retry(
        lambda s: s.execute(
            sa.select(sa.func.count()).where(SCHEDULE.workspace_id == workspace)
        ).scalar_one()
    )
    return bool(count == 1)


@contextlib.contextmanager
def _traced(tmp_path: Path) -> Iterator[list[str]]:
    """The messages this process exchanges with PostgreSQL in the block (libpq's trace of each
    pooled connection while it is checked out), one line each, filled in at the end."""
    trace = tmp_path / "wire.log"
    engine = db.get_engine()
    files: dict[int, Any] = {}
    lines: list[str] = []

    def checkout(dbapi: Any, _record: Any, _proxy: Any) -> None:
        files[id(dbapi)] = trace.open("a")  # open while libpq writes to it
        dbapi.pgconn.trace(files[id(dbapi)].fileno())
        dbapi.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)

    def checkin(dbapi: Any, _record: Any) -> None:
        file = files.pop(id(dbapi), None)
        if file is not None:
            dbapi.pgconn.untrace()  # writes out what libpq buffered
            file.close()

    sa.event.listen(engine, "checkout", checkout)
    sa.event.listen(engine, "checkin", checkin)
    try:
        yield lines
    finally:
        sa.event.remove(engine, "checkout", checkout)
        sa.event.remove(engine, "checkin", checkin)
        lines.extend(trace.read_text().splitlines() if trace.exists() else [])


def _sent(lines: list[str], message: str) -> int:
    """How many `message`s this process sent (libpq marks them F, for frontend)."""
    return sum(1 for line in lines if line.split("\t")[:1] == ["F"] and f"\t{message}" in line)


def _spy_pipeline(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, bool]]:
    """What each pipelined attempt came to, in order."""
    outcomes: list[tuple[Any, bool]] = []
    pipelined = single_retrieval._pipelined

    def spy(*args: Any) -> tuple[Any, bool]:
        outcomes.append(pipelined(*args))
        return outcomes[-1]

    monkeypatch.setattr(single_retrieval, "_pipelined", spy)
    return outcomes


class TestOneRoundTrip:
    def test_a_new_retrieval_is_one_round_trip(
        self, workspace: uuid.UUID, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """BEGIN, the INSERT, the schedule row, the reservation and the COMMIT go out before
        one Sync: the server answers them all at once. SQLAlchemy sends nothing itself."""
        assert record(workspace, 1) == 1  # starts the tally by an exact count
        outcomes = _spy_pipeline(monkeypatch)
        statements: list[str] = []

        def seen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
            statements.append(statement)

        sa.event.listen(db.get_engine(), "before_cursor_execute", seen)
        try:
            with _traced(tmp_path) as lines:
                row, created = _record(_new(workspace))
        finally:
            sa.event.remove(db.get_engine(), "before_cursor_execute", seen)
        assert created and row.lane == LANE_INTERACTIVE
        assert [outcome[0].id for outcome in outcomes] == [row.id]
        assert statements == []
        assert _sent(lines, "Sync") == 1, lines
        sent = "\n".join(line for line in lines if line.startswith("F"))
        for statement in ('"BEGIN"', "INSERT INTO retrieval", "INSERT INTO batch_schedule"):
            assert statement in sent
        assert "UPDATE open_tally" in sent and '"COMMIT"' in sent
        assert tally(workspace) == (0, 2)  # reserved, in the same commit
        assert row.id in {r.id for r in _rows(workspace)}

    def test_the_row_reads_as_the_general_paths(self, workspace: uuid.UUID) -> None:
        """The pipeline's row has every attribute of SQLAlchemy's, with the same values."""
        assert record(workspace, 1) == 1
        request = _new(workspace)
        row, created = _record(request)
        again, created_again = _record(request)  # a replay: the general path's row
        assert created and not created_again
        for column in R:
            assert getattr(row, column.name) == getattr(again, column.name), column.name


class TestLeftToTheGeneralPath:
    def test_a_replay_records_nothing_more(self, workspace: uuid.UUID) -> None:
        request = _new(workspace)
        first, created = _record(request)
        second, created_again = _record(request)
        assert created and not created_again and second.id == first.id
        assert len(_rows(workspace)) == 1
        assert tally(workspace) == (0, 1)  # the replay reserved nothing

    def test_a_changed_replay_is_a_conflict(self, workspace: uuid.UUID) -> None:
        request = _new(workspace)
        _record(request)
        changed = retrievals.NewRetrieval(
            workspace, request.mutation_id, "https://example.org/other", "url_text", None
        )
        with pytest.raises(retrievals.MutationConflict):
            _record(changed)
        assert len(_rows(workspace)) == 1

    def test_no_tally_rolls_the_pipeline_back_and_the_count_decides(
        self, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A workspace's first retrieval finds no tally: the pipeline's insert is rolled back,
        and the exact count records it (once) and starts the tally."""
        outcomes = _spy_pipeline(monkeypatch)
        row, created = _record(_new(workspace))
        assert outcomes == [(None, True)]
        assert created and [r.id for r in _rows(workspace)] == [row.id]
        assert tally(workspace) == (0, 1)

    def test_at_the_ceiling_it_is_refused(self, workspace: uuid.UUID) -> None:
        assert record(workspace, LIMIT) == LIMIT
        with pytest.raises(retrievals.OverQuota):
            _record(_new(workspace))
        assert open_count(workspace) == LIMIT

    def test_a_lost_connection_is_recorded_by_the_general_path(
        self, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Every pooled connection's backend is terminated (as by a database restart): the
        pipeline fails on its connection, which is discarded, and the general path records
        the retrieval on a new one, once."""
        assert record(workspace, 1) == 1
        monkeypatch.setattr(db, "IDLE_PING_SECONDS", 3600.0)  # no ping finds them first
        outcomes = _spy_pipeline(monkeypatch)
        url = db.get_engine().url.set(drivername="postgresql")
        with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as own:
            own.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        row, created = _record(_new(workspace))
        assert outcomes == [(None, False)]
        assert created
        assert sorted(r.id == row.id for r in _rows(workspace)) == [False, True]

    def test_a_commit_whose_answer_was_lost_is_still_created(
        self, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A backend cut while it commits: the row is committed, the answer lost, and the
        general path then meets the row. It carries this request's id, so the call created
        it (202, published), not replayed it; the same request again is a replay."""
        _record(_new(workspace))  # starts the tally
        pipelined = single_retrieval._pipelined

        def answer_lost(*args: Any) -> tuple[Any, bool]:
            row, no_room = pipelined(*args)
            assert row is not None and not no_room  # committed
            return None, False  # as when the connection drops before the answer arrives

        monkeypatch.setattr(single_retrieval, "_pipelined", answer_lost)
        request = _new(workspace)
        row, created = _record(request)
        assert created
        assert [r.id for r in _rows(workspace)].count(row.id) == 1
        monkeypatch.undo()
        again, created_again = _record(request)
        assert again.id == row.id and not created_again


class TestLanes:
    def test_the_first_batch_lane_retrieval_writes_the_schedule_row(
        self, workspace: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        _record(_new(workspace))  # an interactive one starts the tally
        assert not _scheduled(workspace)
        outcomes = _spy_pipeline(monkeypatch)
        row, created = _record(_new(workspace), interactive_limit=0)
        assert created and row.lane == LANE_BATCH
        assert [outcome[0].id for outcome in outcomes] == [row.id]  # the pipeline wrote it
        assert _scheduled(workspace)
        assert workspace in batch_order.scheduled_workspaces(db.get_engine())

    def test_an_interactive_retrieval_writes_none(self, workspace: uuid.UUID) -> None:
        _record(_new(workspace))  # starts the tally
        row, created = _record(_new(workspace), interactive_limit=100)
        assert created and row.lane == LANE_INTERACTIVE
        assert not _scheduled(workspace)
        assert workspace not in batch_order.scheduled_workspaces(db.get_engine())

    def test_no_room_leaves_no_schedule_row(self, workspace: uuid.UUID) -> None:
        """The schedule row is written in the transaction the reservation rolls back."""
        row, no_room = single_retrieval._pipelined(
            db.get_engine(), _new(workspace), clock.now(), TTL, LIMIT, 0, uuid.uuid4()
        )
        assert (row, no_room) == (None, True)  # no tally yet
        assert not _scheduled(workspace) and _rows(workspace) == []
        assert workspace not in batch_order.scheduled_workspaces(db.get_engine())
