"""Engines and sessions for PostgreSQL and the embedded SQLite default, and the dialect choice."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import psycopg
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from worker.platform.ranked_gate import RankedGate
from worker.platform.settings import get_settings

T = TypeVar("T")
#: The two dialects the service runs on; `dialect(session)` says which one a session uses.
POSTGRESQL = "postgresql"
SQLITE = "sqlite"

#: How long SQLite waits on a lock before "database is locked" (seconds).
SQLITE_BUSY_TIMEOUT_SECONDS = 30
#: Attempts at a short transaction that hit a transient lock or a dropped connection.
TRANSIENT_ATTEMPTS = 4
#: Test pooled connections that sat idle with a round trip before use (see `skip_pre_ping`).
_pre_ping = True
#: A pooled connection idle at least this long is pinged at checkout (`_ping_if_idle`).
IDLE_PING_SECONDS = 1.0
#: Unanswered keepalive probes after which the server drops a silent host's session.
KEEPALIVE_PROBES = 6
#: How long a checkout waits for a pooled PostgreSQL connection (see `queue_for_connections`).
_pool_timeout = 5.0
#: What a threads-pool worker's retrievals wait for a connection: they hold one only for a
#: claim or a settle (milliseconds), so hundreds in flight share the pool by queueing briefly.
WORKER_POOL_TIMEOUT_SECONDS = 30.0


def is_sqlite(engine: Engine) -> bool:
    return engine.dialect.name == SQLITE


def dialect(session: Session) -> str:
    """The dialect `session` talks to: POSTGRESQL or SQLITE."""
    return session.get_bind().dialect.name


def ping(session: Session) -> None:
    """One round trip to the database (raises when it cannot be reached)."""
    session.execute(sa.text("SELECT 1"))


def insert_for(dialect_name: str) -> Callable[[sa.Table], postgresql.Insert | sqlite.Insert]:
    """The dialect's `insert`, which has ON CONFLICT (the generic one has not)."""
    return postgresql.insert if dialect_name == POSTGRESQL else sqlite.insert


def _configure_sqlite(engine: Engine) -> None:
    """WAL, a busy timeout, and BEGIN IMMEDIATE so writers queue instead of failing."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # let SQLAlchemy's BEGIN below drive it
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_SECONDS * 1000}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # Readers take no lock (WAL gives them a snapshot); writers queue for the lock up front,
        # so two writers never deadlock upgrading a shared lock.
        readonly = connection.get_execution_options().get("readonly", False)
        connection.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")


def make_engine(url: str) -> Engine:
    """Build an engine for `url`, creating the SQLite file's folder when needed."""
    if url.startswith("sqlite"):
        path = sa.engine.make_url(url).database
        if path and path != ":memory:":
            # An unusable folder surfaces as the driver's OperationalError on connect (a 503).
            with contextlib.suppress(OSError):
                Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = sa.create_engine(
            url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False}
        )
        _configure_sqlite(engine)
        return engine
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url.removeprefix("postgresql://")
    settings = get_settings()
    pool_size = settings.db_pool_size
    connect_args: dict[str, Any] = {"connect_timeout": 5}
    if not settings.db_prepared_statements:
        connect_args["prepare_threshold"] = None  # psycopg never prepares: pgbouncer-safe
    options = session_options(
        settings.db_idle_transaction_timeout_seconds, settings.db_peer_timeout_seconds
    )
    if options:
        connect_args["options"] = " ".join(f"-c {name}={value}" for name, value in options.items())
    engine = sa.create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_timeout=_pool_timeout,
        connect_args=connect_args,
    )
    if _pre_ping:
        _ping_if_idle(engine)
    return engine


def session_options(idle_in_transaction: float, peer_timeout: float) -> dict[str, int]:
    """The server settings each session of ours asks for (0 seconds: the server's own).

    `peer_timeout` bounds how long the server keeps a session whose host went silent: with
    nothing to send (waiting for the rest of a statement), keepalive probes start after a
    third of it and give up after six more ninths; with data unacknowledged, the user timeout.
    """
    options: dict[str, int] = {}
    if idle_in_transaction:
        options["idle_in_transaction_session_timeout"] = round(idle_in_transaction * 1000)
    if peer_timeout:
        options["tcp_keepalives_idle"] = max(1, round(peer_timeout / 3))
        options["tcp_keepalives_interval"] = max(1, round(peer_timeout / 9))
        options["tcp_keepalives_count"] = KEEPALIVE_PROBES
        options["tcp_user_timeout"] = round(peer_timeout * 1000)
    return options


def _ping_if_idle(engine: Engine) -> None:
    """Test a pooled connection before use when it sat in the pool for IDLE_PING_SECONDS.

    A connection the database dropped while it was idle (a restart, an idle timeout) is
    replaced before a request uses it, as `pool_pre_ping` would; one checked in a moment ago
    is used as it is. Under load every connection comes back within milliseconds, and the
    `SELECT 1` per checkout was a round trip in each request (the writes' transactions retry on
    a dropped connection anyway: `with_transient_retry`).
    """

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["checked_in_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("checked_in_at")
        if idle_since is None or time.monotonic() - idle_since < IDLE_PING_SECONDS:
            return  # new, or back a moment ago
        try:
            engine.dialect.do_ping(dbapi_connection)  # what pool_pre_ping runs
        except Exception as exc:  # the database went away: connect anew
            raise sa.exc.InvalidatePoolError(type(exc).__name__) from exc


_engine: Engine | None = None
_factories: dict[bool, sessionmaker[Session]] = {}
#: Threads that ask for the engine at once get the same one (`lru_cache` would let each build
#: its own on a miss: the spare engines' pools were dropped with their connections open).
_engine_lock = threading.Lock()


def get_engine() -> Engine:
    """The process-wide engine for the configured database."""
    global _engine
    engine = _engine
    if engine is None:
        with _engine_lock:
            if _engine is None:
                _engine = make_engine(get_settings().database_url)
            engine = _engine
    return engine


#: A read-only session's connection options. On PostgreSQL, autocommit: each statement runs
#: on a snapshot of its own, as under READ COMMITTED in a transaction, and the driver sends no
#: BEGIN before the first nor ROLLBACK at the end (each a round trip of its own: two of a
#: poll's three). SQLite's `readonly` begins without the write lock.
_READ_ONLY: dict[str, dict[str, Any]] = {
    SQLITE: {"readonly": True},
    POSTGRESQL: {"readonly": True, "isolation_level": "AUTOCOMMIT"},
}


def _session_factory(readonly: bool = False) -> sessionmaker[Session]:
    factory = _factories.get(readonly)
    if factory is None:  # two threads may both build one: sessionmakers hold no connections
        engine = get_engine()
        options = _READ_ONLY.get(engine.dialect.name, {"readonly": True})
        bind = engine.execution_options(**options) if readonly else engine
        factory = _factories.setdefault(readonly, sessionmaker(bind, expire_on_commit=False))
    return factory


@contextmanager
def session_scope(readonly: bool = False) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on error.

    `readonly=True` is for sessions that only read: on SQLite they take no write lock.
    """
    session = _session_factory(readonly)()
    try:
        with session.begin():
            yield session
    finally:
        session.close()


def read_session() -> Session:
    """A session for reads only (no write lock on SQLite); the caller closes it."""
    return _session_factory(True)()


#: Threads-pool workers: transactions run at once, admitted in lane order (`queue_for_connections`).
_turns: RankedGate | None = None
_holding = threading.local()


@contextmanager
def _turn() -> Iterator[None]:
    """Wait for this thread's turn to use a connection, interactive work first.

    Hundreds of retrievals in flight share a pool of `EVIDENCE_DB_POOL_SIZE` connections (plus
    as many in bursts). SQLAlchemy's pool serves its waiters in no particular order, so under
    load an agent's claim or settle waited behind every batch retrieval's (seconds, measured).
    The gate admits `EVIDENCE_DB_POOL_SIZE` transactions at once, by rank; the pool's overflow
    stays for everything else. A transaction inside another's turn runs in it.
    """
    gate = _turns
    if gate is None or getattr(_holding, "turn", False):
        yield
        return
    if not gate.acquire(WORKER_POOL_TIMEOUT_SECONDS):
        raise PoolTimeout(f"no database connection within {WORKER_POOL_TIMEOUT_SECONDS:.0f} s")
    _holding.turn = True
    try:
        yield
    finally:
        _holding.turn = False
        gate.release()


@contextmanager
def driver_connection() -> Iterator[psycopg.Connection[Any]]:
    """A pooled PostgreSQL connection's own psycopg connection, for what SQLAlchemy cannot
    send: a pipeline of statements in one round trip. The pool's reset rolls back whatever the
    caller leaves open; a connection psycopg reports lost is discarded instead of pooled.
    """
    with _turn():
        pooled = get_engine().raw_connection()
        try:
            yield pooled.driver_connection  # type: ignore[misc]
        except psycopg.OperationalError:
            pooled.invalidate()
            raise
        finally:
            pooled.close()


def with_transient_retry(fn: Callable[[Session], T], attempts: int = TRANSIENT_ATTEMPTS) -> T:
    """Run `fn` in its own transaction, retrying a few times on a lock or a dropped connection."""
    with _turn():
        return _with_transient_retry(fn, attempts)


def _with_transient_retry(fn: Callable[[Session], T], attempts: int) -> T:
    delay = 0.05
    for attempt in range(1, attempts + 1):
        try:
            with session_scope() as session:
                return fn(session)
        except (OperationalError, DBAPIError) as exc:
            if attempt == attempts or not _is_transient(exc):
                raise
            time.sleep(delay)
            delay *= 4
    raise AssertionError("unreachable")


def _is_transient(exc: DBAPIError) -> bool:
    if exc.connection_invalidated or isinstance(exc, OperationalError):
        return True
    return "locked" in str(exc.orig).lower()


def skip_pre_ping() -> None:
    """Stop testing idle pooled connections before use (worker processes).

    Every worker transaction runs under `with_transient_retry`, which retries on a dropped
    connection anyway. The API keeps it: its reads have no retry of their own.
    """
    global _pre_ping
    _pre_ping = False
    dispose_engine()


def queue_for_connections() -> None:
    """Let this process's threads wait their turn for a connection (threads-pool workers)."""
    global _pool_timeout, _turns
    _pool_timeout = WORKER_POOL_TIMEOUT_SECONDS
    _turns = RankedGate(get_settings().db_pool_size)
    dispose_engine()


def dispose_engine() -> None:
    """Forget the engine (after a fork, or when tests change the database URL)."""
    global _engine
    with _engine_lock:
        engine, _engine = _engine, None
        _factories.clear()
    if engine is not None:
        engine.dispose()


@contextlib.contextmanager
def read_only_session() -> Iterator[Session]:
    """A read-only session, closed at the end.

    A read-only session never commits: closing rolls back, and a connection the database
    dropped meanwhile must not fail a response that has already been computed.
    """
    session = read_session()
    try:
        yield session
    finally:
        with contextlib.suppress(DBAPIError):
            session.close()
