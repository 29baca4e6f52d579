"""Fault-injection suite (`make test-faults`): each test breaks something real, then checks."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.conftest import Env
from tests.faults.history import History
from tests.support.factories import Api, make_key
from tests.support.pages import article, slow
from tests.support.tls_site import TLSSite


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/faults/" in str(item.fspath):
            item.add_marker(pytest.mark.fault)
            item.add_marker(pytest.mark.usefixtures("services"))


@pytest.fixture
def history(http: object, workspace: uuid.UUID) -> History:
    """A recorded client for a fresh workspace."""
    return History(Api(http, make_key([workspace])), workspace)


@pytest.fixture
def max_attempts() -> int:
    from worker.platform.settings import get_settings

    return get_settings().max_attempts


@pytest.fixture
def pages(site: TLSSite) -> Iterator[callable]:  # type: ignore[valid-type]
    """Make fresh article URLs; `slow=True` trickles the body over ~`seconds`."""
    site.add("/ft/slow", slow)

    def make(slow_seconds: float | None = None) -> str:
        if slow_seconds:
            return site.url(f"/ft/slow?s={slow_seconds}&n={uuid.uuid4().hex}")
        path = f"/ft/{uuid.uuid4().hex}"
        return site.page(path, article("Fault test", marker=path))

    yield make


@pytest.fixture(autouse=True)
def _services_restored(env: Env, services: object) -> Iterator[None]:
    """Whatever a test broke, the next one starts with Redis, worker and beat running."""
    yield
    if not env.redis.ping():
        env.redis.start()
    if not services.worker.alive():  # type: ignore[attr-defined]
        services.start_worker()  # type: ignore[attr-defined]
    if not services.sweeper.alive():  # type: ignore[attr-defined]
        services.sweeper.start()  # type: ignore[attr-defined]
    if not services.beat.alive():  # type: ignore[attr-defined]
        services.beat.start()  # type: ignore[attr-defined]
