"""Session-wide real services: database, Redis broker, loopback HTTPS site, worker and beat.

The environment is fixed in `pytest_configure`, before any test module imports the service,
because the Celery app and the settings read it once per process.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.row_locks import Holder
from tests.support.services import (
    Process,
    RedisServer,
    create_postgres_database,
    drop_postgres_database,
    free_port,
    wait_for,
)
from tests.support.slowdown import ENV_VAR, factor, scaled
from tests.support.tls_site import TLSSite

#: Short lifecycle knobs so leases, sweeps and expiry take seconds, not hours.
TEST_ENV = {
    "EVIDENCE_SWEEP_INTERVAL_SECONDS": "1",
    "EVIDENCE_REPUBLISH_AFTER_SECONDS": "4",
    "EVIDENCE_LEASE_GRACE_SECONDS": "0.5",
    "EVIDENCE_MAX_ATTEMPTS": "2",
    "EVIDENCE_LOG_JSON": "true",
    "EVIDENCE_LOG_LEVEL": "INFO",
    "EVIDENCE_WEBHOOK_RETRY_BASE_SECONDS": "0.5",
    "EVIDENCE_WEBHOOK_RETRY_CAP_SECONDS": "1",
    "EVIDENCE_WEBHOOK_RETRY_WINDOW_SECONDS": "60",
    "EVIDENCE_WEBHOOK_DISABLE_AFTER_SECONDS": "8",
    # Beat's watch tick (15 s by default) is what the end-to-end watch test waits for.
    "EVIDENCE_WATCH_TICK_SECONDS": "2",
    # The suite's workers share the CPU with its own processes (pytest, its clients): at a
    # nice-0 program's weight, not the deployment's 20, which yields to every one of them.
    "EVIDENCE_WORKER_CPU_WEIGHT": "100",
}

#: The work's own bounds, in seconds on a quiet machine: the session stretches them by its
#: slowdown (tests/support/slowdown.py), so an ordinary page never times out on a busy one.
#: Tests of a timeout stretch their hostile servers alike, keeping them far past these.
SCALED_TEST_ENV = {
    "EVIDENCE_FETCH_TOTAL_TIMEOUT_SECONDS": 6.0,
    "EVIDENCE_FETCH_READ_TIMEOUT_SECONDS": 3.0,
    "EVIDENCE_FETCH_CONNECT_TIMEOUT_SECONDS": 2.0,
    "EVIDENCE_EXTRACT_BUDGET_SECONDS": 3.0,
    "EVIDENCE_TIME_LIMIT_MARGIN_SECONDS": 1.0,
    "EVIDENCE_WEBHOOK_CONNECT_TIMEOUT_SECONDS": 1.0,
    "EVIDENCE_WEBHOOK_READ_TIMEOUT_SECONDS": 1.5,
    "EVIDENCE_WEBHOOK_TOTAL_TIMEOUT_SECONDS": 2.0,
}


def session_env() -> dict[str, str]:
    """Every setting the suite gives its processes, the bounds scaled to this machine."""
    return {**TEST_ENV, **{k: f"{scaled(v):g}" for k, v in SCALED_TEST_ENV.items()}}


#: robots.txt of the second test origin: our product token may not fetch /private/.
ROBOTS_TXT = "User-agent: *\nDisallow: /private/\n"


class Env:
    """What the session set up."""

    db_kind: str
    db_name: str | None
    database_url: str
    broker_url: str
    redis: RedisServer
    site: TLSSite
    #: A second origin (its own robots.txt), and an allowed port where nothing listens.
    robots_site: TLSSite
    #: Webhook receivers (POST routes), restartable on the same port.
    receiver: TLSSite
    closed_port: int
    tmp: Path


ENV = Env()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--db",
        default=os.environ.get("EVIDENCE_TEST_DB", "postgres"),
        choices=["postgres", "sqlite"],
        help="database the suite runs against",
    )


def _runs_tests(config: pytest.Config) -> bool:
    """False in the process that only hands tests out to others (`-n N`): each of those runs
    them against services of its own, set up here."""
    return hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)


def pytest_configure(config: pytest.Config) -> None:
    factor()  # measured here once; pytest-xdist's processes inherit it
    if not _runs_tests(config):
        return
    ENV.tmp = Path(tempfile.mkdtemp(prefix="evidence-tests-"))
    ENV.db_kind = config.getoption("--db")
    if ENV.db_kind == "postgres":
        ENV.db_name, ENV.database_url = create_postgres_database()
    else:
        ENV.db_name = None
        ENV.database_url = f"sqlite:///{ENV.tmp / 'evidence.db'}"
    ENV.redis = RedisServer(ENV.tmp).start()
    ENV.broker_url = ENV.redis.url
    ENV.site = TLSSite().start()
    ENV.robots_site = TLSSite(ca=ENV.site.ca).start()
    ENV.robots_site.page("/robots.txt", ROBOTS_TXT, "text/plain")
    ENV.receiver = TLSSite(ca=ENV.site.ca).start()
    ENV.closed_port = free_port()
    ca_path = ENV.site.write_ca(ENV.tmp / "ca.pem")
    os.environ.update(session_env())
    os.environ.update(
        {
            "EVIDENCE_DATABASE_URL": ENV.database_url,
            "EVIDENCE_BROKER_URL": ENV.broker_url,
            "EVIDENCE_EGRESS_ALLOW_CIDRS": "127.0.0.1/32",
            "EVIDENCE_CA_BUNDLE": str(ca_path),
            # Every process's WARC files in the session's directory, never the checkout's var/.
            "EVIDENCE_ARCHIVE_DIR": str(ENV.tmp / "archive"),
            "EVIDENCE_FETCH_ALLOWED_PORTS": ",".join(
                str(p)
                for p in (ENV.site.port, ENV.robots_site.port, ENV.receiver.port, ENV.closed_port)
            ),
        }
    )
    from worker.store.migrate import upgrade

    upgrade(ENV.database_url)


def pytest_report_header(config: pytest.Config) -> str:
    return f"slowdown: {factor()} ({ENV_VAR}; limits and waits scaled by it)"


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    """pytest-randomly's seed again at the end: its header line is hidden under `-q` (as `make
    test` runs), and a failure in a shuffled order is replayed only with that seed."""
    if config.pluginmanager.hasplugin("randomly"):
        seed = config.getoption("randomly_seed")
        terminalreporter.write_line(
            f"Using --randomly-seed={seed} (replay: -p randomly --randomly-seed={seed})"
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """pytest-timeout's limit (pyproject.toml) is for a hung test, so it stretches with the
    machine like every other wait; a test's own `timeout` mark stands."""
    limit = float(config.getini("timeout") or 0)
    if not limit:
        return
    for item in items:
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(scaled(limit)))


def pytest_unconfigure(config: pytest.Config) -> None:
    if not _runs_tests(config) or not hasattr(ENV, "site"):
        return
    ENV.site.stop()
    ENV.robots_site.stop()
    ENV.receiver.stop()
    ENV.redis.stop()
    from worker.store import db

    db.dispose_engine()
    if ENV.db_name:
        drop_postgres_database(ENV.db_name)
    shutil.rmtree(ENV.tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def env() -> Env:
    return ENV


@pytest.fixture(scope="session")
def site() -> TLSSite:
    return ENV.site


#: Lines of the worker's and sweeper's logs shown with a failed test that used them.
LOG_TAIL_LINES = 80


def _ping_worker() -> bool:
    """Whether a worker answers a ping, asked on a connection of its own: a test that
    restarted Redis leaves this process's pooled broker connections dead."""
    from worker.jobs.celery_app import app

    with app.connection_for_write() as connection:
        return bool(app.control.ping(timeout=0.5, connection=connection))


class Services:
    """The session's worker and beat, restartable by fault tests."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        name = uuid.uuid4().hex[:6]
        self.worker = Process(
            [
                "worker",
                "--queues",
                "retrievals,retrievals-batch,webhooks",
                "--concurrency",
                "2",
                "--hostname",
                f"w-{name}@%h",
            ],
            tmp / "worker.log",
        )
        self.sweeper = Process(
            ["worker", "--queues", "sweep", "--concurrency", "1", "--hostname", f"s-{name}@%h"],
            tmp / "sweeper.log",
        )
        self.beat = Process(["beat", "--schedule", str(tmp / "beat-schedule")], tmp / "beat.log")

    def start_worker(self) -> None:
        self.worker.start()
        wait_for(_ping_worker, timeout=60, interval=0.5)

    def restart_worker(self) -> None:
        self.worker.kill_group()
        self.start_worker()

    def stop(self) -> None:
        self.worker.stop()
        self.sweeper.stop()
        self.beat.stop()

    def processes(self) -> dict[str, Process]:
        return {"worker": self.worker, "sweeper": self.sweeper, "beat": self.beat}

    def revive(self) -> dict[str, str]:
        """Restart whatever has exited; return the last lines of each dead one's log."""
        dead = {}
        for name, process in self.processes().items():
            if not process.alive():
                dead[name] = "\n".join(process.log().splitlines()[-15:])
                if process is self.worker:
                    self.start_worker()
                else:
                    process.start()
        return dead


@pytest.fixture(scope="session")
def services(env: Env) -> Iterator[Services]:
    """Real Celery workers (both retrieval lanes: prefork, 2 children; sweep: 1) and beat."""
    running = Services(env.tmp)
    try:  # one that fails to start must not leave the others running after the session
        running.sweeper.start()
        running.start_worker()
        running.beat.start()
        yield running
    finally:
        running.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test that ran against the worker and sweeper shows the end of their logs."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if report.when != "call" or not report.failed:
        return
    if "services" not in getattr(item, "fixturenames", ()) or not hasattr(ENV, "tmp"):
        return
    for name in ("worker", "sweeper"):
        path = ENV.tmp / f"{name}.log"
        if path.exists():
            tail = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
            report.sections.append((f"{name} log, last {LOG_TAIL_LINES} lines", "\n".join(tail)))


@pytest.fixture(autouse=True)
def _services_survive(request: pytest.FixtureRequest) -> Iterator[None]:
    """A worker, sweeper or beat that exits during a test fails that test, not all later ones.

    Tests that kill a process on purpose restart it themselves; any other exit is a defect (a
    broker outage must never end a worker), so the test fails with the log's tail, and the
    process is restarted for the tests after it.
    """
    yield
    if "services" not in request.fixturenames:
        return
    services: Services = request.getfixturevalue("services")
    dead = services.revive()
    if dead:
        tails = "\n".join(f"--- {name} ---\n{tail}" for name, tail in dead.items())
        pytest.fail(f"exited during the test: {', '.join(dead)}\n{tails}", pytrace=False)


@pytest.fixture(scope="session")
def http() -> Iterator[object]:
    """The API in-process (same code as `evidence api`), through Starlette's test client."""
    from fastapi.testclient import TestClient

    from api.http.app import app

    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def workspace() -> uuid.UUID:
    return uuid.uuid4()


@pytest.fixture
def api(http: object, workspace: uuid.UUID) -> object:
    """A client with a fresh key for a fresh workspace, validating every payload."""
    from tests.support.factories import Api, make_key

    return Api(http, make_key([workspace]))


@pytest.fixture
def own_database(env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A migrated database of the suite's kind that only this test uses, as the process's own
    (`db.get_engine`) while it runs; its URL. For tests whose rows the session's sweep and
    worker must not touch (they publish and claim any pending row of the suite's database)."""
    from tests.support.databases import fresh_database
    from worker.platform.settings import get_settings
    from worker.store import db
    from worker.store.migrate import upgrade

    with fresh_database(env.db_kind, tmp_path) as url:
        upgrade(url)
        monkeypatch.setenv("EVIDENCE_DATABASE_URL", url)
        get_settings.cache_clear()
        db.dispose_engine()
        try:
            yield url
        finally:
            monkeypatch.undo()
            get_settings.cache_clear()
            db.dispose_engine()


@pytest.fixture
def row_holder(env: Env, own_database: str) -> Iterator[Holder]:
    """Row locks of another connection's open transaction in the test's own database, held
    until `release` or the test's end (PostgreSQL only: SQLite runs one writer at a time)."""
    if env.db_kind != "postgres":
        pytest.skip("row locks are PostgreSQL's: SQLite runs one writer at a time")
    holder = Holder(own_database)
    try:
        yield holder
    finally:
        holder.release()
