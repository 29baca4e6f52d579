"""At start the API sizes its thread pool and opens its database and broker connections."""

from __future__ import annotations

import anyio.to_thread
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.exc import OperationalError

from api.http import app
from api.services import retrievals
from tests.conftest import Env
from worker.store import db


class TestWarmUp:
    def test_fills_the_pool(self, env: Env) -> None:
        """After warm-up the pool holds open connections, ready for the first requests."""
        if env.db_kind != "postgres":
            pytest.skip("SQLite opens its file per connection; there is no pool to fill")
        db.dispose_engine()
        retrievals.warm_up()
        engine = db.get_engine()
        assert engine.pool.checkedin() == min(engine.pool.size(), retrievals.WARM_CONNECTIONS)  # type: ignore[attr-defined]

    def test_an_unreachable_database_does_not_stop_it(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A database that is down at start is left to the requests (503), not raised."""

        def down() -> None:
            raise OperationalError("SELECT 1", {}, Exception("connection refused"))

        monkeypatch.setattr(db, "get_engine", down)
        retrievals.warm_up()  # returns

    def test_runs_when_the_app_starts(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """The app's lifespan runs the warm-up once, before serving."""
        calls: list[int] = []
        monkeypatch.setattr(retrievals, "warm_up", lambda: calls.append(1))
        with TestClient(app.create_app()) as client:
            assert calls == [1]
            assert client.get("/healthz").status_code == 200


class TestThreadPool:
    def test_sized_at_start(self) -> None:
        """Sync routes share API_THREADS worker threads, not anyio's default 40."""
        with TestClient(app.create_app()) as client:
            limiter = client.portal.call(anyio.to_thread.current_default_thread_limiter)  # type: ignore[union-attr]
            assert limiter.total_tokens == app.API_THREADS == 8
            assert client.get("/healthz").status_code == 200


class TestCollector:
    def test_start_up_objects_are_frozen(self) -> None:
        """After start, what lives as long as the process is out of the collector's scans."""
        import gc

        gc.unfreeze()
        assert gc.get_freeze_count() == 0
        try:
            with TestClient(app.create_app()) as client:
                assert gc.get_freeze_count() > 10_000  # the modules, the app, the pools
                assert client.get("/healthz").status_code == 200
        finally:
            gc.unfreeze()
