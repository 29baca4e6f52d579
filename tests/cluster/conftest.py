"""The cluster suite (`make test-cluster`): hosts as network namespaces (tests/cluster/hosts.py).

Needs root and `ip` (iproute2) to make namespaces, and PostgreSQL; skipped otherwise, saying
which is missing. `make test` leaves these tests out (marker `cluster`).
"""

from __future__ import annotations

import os
import shutil
import signal
from collections.abc import Iterator
from types import FrameType

import pytest

from tests.cluster.hosts import Cluster
from tests.conftest import Env


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/cluster/" in str(item.fspath):
            item.add_marker(pytest.mark.cluster)


def missing_requirement(env: Env) -> str | None:
    """Why the cluster cannot be built here, or None."""
    if os.geteuid() != 0:
        return "the cluster suite needs root (it makes network namespaces, veths and a bridge)"
    if shutil.which("ip") is None:
        return "the cluster suite needs `ip` (iproute2) to make network namespaces"
    if env.db_kind != "postgres":
        return "the cluster suite runs on PostgreSQL only (hosts share one database)"
    return None


def _interrupted(signum: int, frame: FrameType | None) -> None:
    """SIGTERM as Ctrl-C: pytest then runs the finalizers that remove the namespaces."""
    raise KeyboardInterrupt


@pytest.fixture(scope="session")
def cluster(env: Env) -> Iterator[Cluster]:
    """Services, three worker hosts (not started: `cluster.start_worker(host)`) and the origin.

    Session-wide (building it takes seconds); each test leaves it as it found it (`reset`).
    """
    reason = missing_requirement(env)
    if reason:
        pytest.skip(reason)
    previous = signal.signal(signal.SIGTERM, _interrupted)
    running = Cluster(env.tmp / "cluster", workers=3)
    try:
        yield running.start()
    finally:
        running.close()
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture(autouse=True)
def _cluster_reset(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").reset()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed cluster test shows the end of every host's logs."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    cluster = getattr(item, "funcargs", {}).get("cluster")
    if report.when == "call" and report.failed and isinstance(cluster, Cluster):
        report.sections.append(("cluster logs", cluster.logs(40)))
