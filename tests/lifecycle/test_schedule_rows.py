"""Schedule rows of the batch lane (`batch_order.note_batch_work`): each workspace with batch
work has one, and a process that saw a workspace's committed row reads it no more."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.lanes import batch_order
from worker.store import db
from worker.store.models import BatchSchedule

pytestmark = pytest.mark.lifecycle

SCHEDULE: sa.Table = BatchSchedule.__table__  # type: ignore[attr-defined]


def _note(engine: sa.Engine, workspace: uuid.UUID, commit: bool = True) -> list[str]:
    """Note batch work of `workspace` in one transaction; the statements it ran."""
    statements: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        statements.append(statement)

    sa.event.listen(engine, "before_cursor_execute", seen)
    try:
        with Session(engine) as session:
            batch_order.note_batch_work(session, [workspace])
            session.commit() if commit else session.rollback()
    finally:
        sa.event.remove(engine, "before_cursor_execute", seen)
    return [s for s in statements if "batch_schedule" in s]


def _rows(engine: sa.Engine, workspace: uuid.UUID) -> int:
    with engine.connect() as conn:
        query = sa.select(sa.func.count()).where(SCHEDULE.c.workspace_id == workspace)
        return int(conn.execute(query).scalar_one())


def test_a_row_read_once_is_not_read_again(engine: sa.Engine) -> None:
    workspace = uuid.uuid4()
    assert len(_note(engine, workspace)) == 2  # read, then insert: the first batch work
    assert _rows(engine, workspace) == 1
    assert len(_note(engine, workspace)) == 1  # read: now known to be committed
    assert _note(engine, workspace) == []
    assert _rows(engine, workspace) == 1


def test_a_row_inserted_by_a_rolled_back_transaction_is_not_remembered(
    engine: sa.Engine,
) -> None:
    workspace = uuid.uuid4()
    assert len(_note(engine, workspace, commit=False)) == 2
    assert _rows(engine, workspace) == 0
    assert len(_note(engine, workspace)) == 2  # inserted again, for good this time
    assert _rows(engine, workspace) == 1


def test_another_database_is_read_afresh(engine: sa.Engine, own_database: str) -> None:
    workspace = uuid.uuid4()
    _note(engine, workspace)
    _note(engine, workspace)
    assert _note(engine, workspace) == []
    other = db.make_engine(own_database)  # a new engine, as after `db.dispose_engine()`
    try:
        assert len(_note(other, workspace)) == 1
    finally:
        other.dispose()
