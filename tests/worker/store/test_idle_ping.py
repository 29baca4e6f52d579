"""Pooled PostgreSQL connections: pinged at checkout only after sitting idle.

A connection the database dropped while idle is replaced before use; one checked in a moment
ago is used without the round trip (the API's requests each paid it, under load for nothing).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from tests.support.services import (
    POSTGRES_ADMIN_URL,
    create_postgres_database,
    drop_postgres_database,
)
from worker.store import db


@pytest.fixture
def pings() -> list[int]:
    """One entry per ping the `engine` fixture's pool sent."""
    return []


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch, pings: list[int]) -> Iterator[Engine]:
    """An engine as the API builds it, on a database of this test's; its pings are counted."""
    name, url = create_postgres_database()
    monkeypatch.setattr(db, "_pre_ping", True)
    built = db.make_engine(url)
    real = built.dialect.do_ping

    def counted(dbapi_connection: Any) -> bool:
        pings.append(1)
        return real(dbapi_connection)

    monkeypatch.setattr(built.dialect, "do_ping", counted)
    try:
        yield built
    finally:
        built.dispose()
        drop_postgres_database(name)


def _backend_pid(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(pid: int) -> None:
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def test_a_connection_back_a_moment_ago_is_not_pinged(engine: Engine, pings: list[int]) -> None:
    first = _backend_pid(engine)
    assert [_backend_pid(engine) for _ in range(5)] == [first] * 5
    assert pings == []


def test_an_idle_connection_is_pinged_and_replaced_when_the_database_dropped_it(
    engine: Engine, pings: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _backend_pid(engine)
    _terminate(first)
    monkeypatch.setattr(db, "IDLE_PING_SECONDS", 0.0)  # every checkout now finds it idle
    # Without the ping this read fails on the dropped connection.
    second = _backend_pid(engine)
    assert second != first
    assert pings, "the idle connection was not tested"


def test_an_idle_live_connection_is_pinged_and_kept(
    engine: Engine, pings: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _backend_pid(engine)
    monkeypatch.setattr(db, "IDLE_PING_SECONDS", 0.0)
    assert _backend_pid(engine) == first
    assert len(pings) == 1


def test_workers_skip_the_ping(monkeypatch: pytest.MonkeyPatch) -> None:
    name, url = create_postgres_database()
    monkeypatch.setattr(db, "_pre_ping", False)
    monkeypatch.setattr(db, "IDLE_PING_SECONDS", 0.0)
    built = db.make_engine(url)
    try:
        first = _backend_pid(built)
        _terminate(first)
        with pytest.raises(sa.exc.OperationalError):
            _backend_pid(built)  # no ping: the dropped connection fails its first use
    finally:
        built.dispose()
        drop_postgres_database(name)
