"""A retrieval submitted alone (`POST /retrieve`), recorded within its workspace's quotas.

On PostgreSQL a new retrieval takes one round trip. psycopg's pipeline mode sends the BEGIN,
the INSERT, the batch-schedule row, the open-tally reservation and the COMMIT together, and
reads their results once. SQLAlchemy cannot pipeline: it reads each result before it sends the
next statement, so the same transaction took three round trips (BEGIN, the INSERT, the
reservation with the COMMIT) and twice the CPU (docs/execution-model.md). The pipeline runs
SQLAlchemy's own compiled INSERT (`retrievals.insert_one`) and the tally's own reservation
(`open_tally.reserving_block`), so what is written is decided in one place.

Whatever the pipeline does not settle takes the general path, `retrievals.create_within_quota`,
which decides as it always has: a known mutation_id (the pipeline recorded nothing), no room in
the tally (it rolled back), a connection that failed, a write rate already spent, SQLite.
"""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any, cast

import psycopg
import sqlalchemy as sa
from psycopg.rows import namedtuple_row
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Dialect

from worker.lanes import open_tally
from worker.lanes.batch_order import SCHEDULE, remember_scheduled, scheduled_workspaces
from worker.retrieval.records import (
    NewRetrieval,
    create_within_quota,
    insert_one,
    new_row_values,
)
from worker.store import db
from worker.store.models import LANE_BATCH, LANE_INTERACTIVE
from worker.store.retrieval_view import RETRIEVAL, RetrievalRow


def record_single(
    request: NewRetrieval,
    now: datetime,
    ttl: timedelta,
    open_limit: int,
    interactive_limit: int,
    rate_ok: bool = True,
) -> tuple[RetrievalRow, bool]:
    """Record a single retrieval within its workspace's quotas; (row, created). Committed.

    PostgreSQL: the pipeline first. Otherwise, or when it settles nothing,
    `create_within_quota` in a transaction of its own, which on PostgreSQL reserves with the
    COMMIT; when that finds no room, it runs again deciding by the exact count.
    """

    # One id for every attempt at this request: a row of this mutation_id with this id was
    # committed by an earlier attempt whose answer the connection lost (a backend cut during
    # its COMMIT), so it was created by this call, not replayed.
    retrieval_id = uuid.uuid4()

    def attempt(at_commit: bool) -> tuple[RetrievalRow, bool]:
        row, created = db.with_transient_retry(
            lambda s: create_within_quota(
                s,
                request,
                now,
                ttl,
                open_limit,
                interactive_limit,
                rate_ok,
                at_commit,
                retrieval_id=retrieval_id,
            )
        )
        return row, created or row.id == retrieval_id

    engine = db.get_engine()
    if rate_ok and engine.dialect.name == db.POSTGRESQL:
        row, no_room = _pipelined(
            engine, request, now, ttl, open_limit, interactive_limit, retrieval_id
        )
        if row is not None:
            return row, True
        if no_room:
            return attempt(False)
    try:
        return attempt(True)
    except open_tally.NoRoomAtCommit:
        return attempt(False)


#: The schedule row a workspace's first batch-lane retrieval needs, written only if the
#: transaction's retrieval landed in the batch lane and the workspace has none (read first, as
#: `retrievals.note_batch_work` does: an INSERT meeting a row that a claim is updating waits).
_SCHEDULE_IF_BATCH = (
    postgresql.insert(SCHEDULE)
    .from_select(
        ["workspace_id", "served_at"],
        sa.select(sa.bindparam("b_workspace", type_=sa.Uuid), sa.null()).where(
            sa.exists().where(
                RETRIEVAL.c.id == sa.bindparam("b_id", type_=sa.Uuid),
                RETRIEVAL.c.lane == LANE_BATCH,
            ),
            ~sa.exists().where(SCHEDULE.c.workspace_id == sa.bindparam("b_workspace")),
        ),
    )
    .on_conflict_do_nothing()
)


@functools.cache
def _compiled(statement: Any, dialect: Dialect) -> tuple[str, dict[str, Any]]:
    """A statement as psycopg takes it: its SQL and its parameters' values as compiled (the
    literals SQLAlchemy binds, and None for those the caller gives)."""
    compiled = statement.compile(dialect=dialect)
    return compiled.string, dict(compiled.params)


@contextlib.contextmanager
def _autocommit(connection: psycopg.Connection[Any]) -> Iterator[None]:
    """The connection in autocommit mode for the block, then as the pool keeps it."""
    connection.autocommit = True
    try:
        yield
    finally:
        if not connection.closed:
            connection.autocommit = False


def _pipelined(
    engine: sa.Engine,
    request: NewRetrieval,
    now: datetime,
    ttl: timedelta,
    open_limit: int,
    interactive_limit: int,
    retrieval_id: uuid.UUID,
) -> tuple[RetrievalRow | None, bool]:
    """Record a new retrieval in one round trip: (its row, False); (None, True) when the tally
    had no room, and the transaction rolled back; (None, False) when nothing was recorded: the
    mutation_id is known, or the database failed (the general path meets it again and says;
    it knows the row as this request's by `retrieval_id` if the COMMIT went through)."""
    values = new_row_values(request, now, ttl, LANE_INTERACTIVE, retrieval_id)  # lane: the INSERT
    workspace = request.workspace_id
    insert_sql, params = _compiled(insert_one(db.POSTGRESQL, True), engine.dialect)
    params = {**params, **{f"b_{k}": v for k, v in values.items()}}
    params.update(b_workspace=workspace, b_cap=interactive_limit)
    scheduled = workspace in scheduled_workspaces(engine)
    reserve = open_tally.reserving_block(workspace, 1, open_limit, if_row=values["id"])
    try:
        with db.driver_connection() as connection, _autocommit(connection):
            cursor = connection.cursor(row_factory=namedtuple_row)
            try:
                # Explicit BEGIN and COMMIT (the connection in autocommit): psycopg's own
                # BEGIN and commit() each wait for their answer, one round trip apiece.
                with connection.pipeline():
                    connection.execute("BEGIN")
                    cursor.execute(insert_sql, params)
                    if not scheduled:
                        schedule_sql, schedule_params = _compiled(
                            _SCHEDULE_IF_BATCH, engine.dialect
                        )
                        connection.execute(
                            schedule_sql,
                            schedule_params | {"b_workspace": workspace, "b_id": values["id"]},
                        )
                    connection.execute(reserve)
                    connection.execute("COMMIT")
            except psycopg.Error as exc:
                connection.execute("ROLLBACK")
                if exc.sqlstate == open_tally.NO_ROOM_SQLSTATE:
                    return None, True
                raise
            row: Any = cursor.fetchone()
    except (psycopg.Error, sa.exc.DBAPIError):
        return None, False
    if row is not None and row.lane == LANE_BATCH and not scheduled:
        remember_scheduled(engine, [workspace])  # committed now
    # A named tuple of the row's columns: the attributes callers read of a SQLAlchemy row.
    return cast("RetrievalRow | None", row), False
