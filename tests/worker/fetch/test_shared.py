"""The process's fetcher is closed when the process stops: a pool child's exit, the API's end."""

from __future__ import annotations

import os
import uuid

from celery import signals
from fastapi.testclient import TestClient

from api.http import app
from tests.support.tls_site import TLSSite
from worker.fetch import shared
from worker.fetch.fetcher import Fetcher
from worker.jobs import celery_app


def used_fetcher(site: TLSSite) -> Fetcher:
    """The process's fetcher after one fetch, with its keep-alive connection pooled."""
    fetcher = shared.get_fetcher()
    fetcher.fetch(site.page(f"/process/{uuid.uuid4().hex}", "<p>pooled</p>"))
    assert len(fetcher.client._transport.connections) == 1  # type: ignore[attr-defined]
    return fetcher


def closed(fetcher: Fetcher) -> bool:
    return fetcher.client.is_closed and not fetcher.client._transport.connections  # type: ignore[attr-defined]


def test_close_fetcher_closes_it_and_the_next_is_fresh(site: TLSSite) -> None:
    fetcher = used_fetcher(site)
    shared.close_fetcher()
    assert closed(fetcher)
    fresh = shared.get_fetcher()
    try:
        assert fresh is not fetcher and not fresh.client.is_closed
    finally:
        shared.close_fetcher()


def test_a_pool_child_closes_it_before_exiting(site: TLSSite) -> None:
    """Billiard ends a child with os._exit, which would drop its connections unclosed."""
    assert celery_app.app is not None  # the signal handlers are connected on import
    fetcher = used_fetcher(site)
    signals.worker_process_shutdown.send(sender=None, pid=os.getpid(), exitcode=0)
    assert closed(fetcher)


def test_the_api_closes_it_when_it_stops(site: TLSSite) -> None:
    """The read side fetches image bytes with the process's fetcher: the lifespan closes it."""
    with TestClient(app.create_app()):
        fetcher = used_fetcher(site)
    assert closed(fetcher)
