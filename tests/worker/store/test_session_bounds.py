"""EVIDENCE_DB_IDLE_TRANSACTION_TIMEOUT_SECONDS: PostgreSQL ends a session of ours that sits idle
inside a transaction past the bound, so a host cut off mid-transaction cannot hold its locks
(and the sweep and every other host behind them) for as long as TCP takes to notice.
EVIDENCE_DB_PEER_TIMEOUT_SECONDS: the server gives up on a silent host's connection, which
also ends a session cut off in the middle of a statement (the idle bound does not apply)."""

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


def shown(url: str, *settings: str) -> tuple[str, ...]:
    """What one session of ours shows for each of `settings`."""
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            return tuple(str(conn.execute(sa.text(f"SHOW {s}")).scalar()) for s in settings)
    finally:
        engine.dispose()


PEER_SETTINGS = ("tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
                 "tcp_user_timeout")  # fmt: skip


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (None, ("10", "3", "6", "30000")),
        ("4.5", ("2", "1", "6", "4500")),
        ("0", None),  # the server's own: whatever it says without our options
    ],
)
def test_every_session_asks_the_server_to_drop_a_silent_peer(
    database_url: str, bound: pytest.MonkeyPatch, setting: str | None, expected: tuple | None
) -> None:
    """Keepalives after a third of the bound, six probes a ninth apart, and data left
    unacknowledged for the whole bound: the session of a host that went silent ends then."""
    if expected is None:
        plain = sa.create_engine(database_url.replace("postgresql://", "postgresql+psycopg://"))
        with plain.connect() as conn:
            expected = tuple(
                str(conn.execute(sa.text(f"SHOW {s}")).scalar()) for s in PEER_SETTINGS
            )
        plain.dispose()
    if setting is not None:
        bound.setenv("EVIDENCE_DB_PEER_TIMEOUT_SECONDS", setting)
    get_settings.cache_clear()
    assert shown(database_url, *PEER_SETTINGS) == expected


def test_the_peer_bound_is_split_so_that_it_adds_up() -> None:
    for seconds in (9.0, 30.0, 90.0):
        options = db.session_options(0, seconds)
        given_up = options["tcp_keepalives_idle"] + (
            options["tcp_keepalives_interval"] * options["tcp_keepalives_count"]
        )
        assert given_up == pytest.approx(seconds, abs=2)
        assert options["tcp_user_timeout"] == seconds * 1000
        assert "idle_in_transaction_session_timeout" not in options
    assert db.session_options(0, 0) == {}


@pytest.mark.parametrize(("setting", "expected"), [(None, "30s"), ("1.5", "1500ms"), ("0", "0")])
def test_every_session_carries_the_bound(
    database_url: str, bound: pytest.MonkeyPatch, setting: str | None, expected: str
) -> None:
    """30 s unless set; 0 leaves the server's own setting (its default: none)."""
    if setting is not None:
        bound.setenv("EVIDENCE_DB_IDLE_TRANSACTION_TIMEOUT_SECONDS", setting)
    get_settings.cache_clear()
    assert shown(database_url, "idle_in_transaction_session_timeout") == (expected,)


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
