"""EVIDENCE_DB_IDLE_TRANSACTION_TIMEOUT_SECONDS: PostgreSQL ends a session of ours that sits idle
inside a transaction past the bound, so a host cut off mid-transaction cannot hold its locks
(and the sweep and every other host behind them) for as long as TCP takes to notice."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.support.services import create_postgres_database, drop_postgres_database
from worker.platform.settings import get_settings
from worker.store import db

LOCK = 7_300_451


@pytest.fixture
def database_url() -> Iterator[str]:
    name, url = create_postgres_database()
    yield url
    drop_postgres_database(name)


@pytest.fixture
def bound(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    get_settings.cache_clear()
    yield monkeypatch
    monkeypatch.undo()
    get_settings.cache_clear()


def shown(url: str) -> str:
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            return str(conn.execute(sa.text("SHOW idle_in_transaction_session_timeout")).scalar())
    finally:
        engine.dispose()


@pytest.mark.parametrize(("setting", "expected"), [(None, "30s"), ("1.5", "1500ms"), ("0", "0")])
def test_every_session_carries_the_bound(
    database_url: str, bound: pytest.MonkeyPatch, setting: str | None, expected: str
) -> None:
    """30 s unless set; 0 leaves the server's own setting (its default: none)."""
    if setting is not None:
        bound.setenv("EVIDENCE_DB_IDLE_TRANSACTION_TIMEOUT_SECONDS", setting)
    get_settings.cache_clear()
    assert shown(database_url) == expected


def test_a_session_idle_in_a_transaction_loses_its_locks(
    database_url: str, bound: pytest.MonkeyPatch
) -> None:
    """A transaction holding a lock, then silent past the bound (as a host whose link went
    down): the server ends the session, another takes the lock, the silent one learns it lost."""
    bound.setenv("EVIDENCE_DB_IDLE_TRANSACTION_TIMEOUT_SECONDS", "1")
    get_settings.cache_clear()
    engine = db.make_engine(database_url)
    other = sa.create_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with engine.connect() as silent, other.connect() as waiting:
            silent.execute(sa.select(sa.func.pg_advisory_xact_lock(LOCK)))
            take = sa.select(sa.func.pg_try_advisory_xact_lock(LOCK))
            assert waiting.execute(take).scalar() is False
            waiting.rollback()
            deadline = time.monotonic() + 30
            while not waiting.execute(take).scalar():
                waiting.rollback()
                assert time.monotonic() < deadline, "the idle transaction kept its lock"
                time.sleep(0.2)
            with pytest.raises(sa.exc.DBAPIError):
                silent.execute(sa.text("SELECT 1"))
    finally:
        engine.dispose()
        other.dispose()
