"""The process-wide engine: one per process, however many threads ask for it at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.engine import Engine

from worker.platform.settings import get_settings
from worker.store import db


@pytest.fixture
def fresh_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Engine]]:
    """No engine yet, on a SQLite file of this test's; the engines `make_engine` built."""
    monkeypatch.setenv("EVIDENCE_DATABASE_URL", f"sqlite:///{tmp_path / 'engine.db'}")
    get_settings.cache_clear()
    db.dispose_engine()
    built: list[Engine] = []
    real = db.make_engine

    def slow_make_engine(url: str) -> Engine:
        time.sleep(0.05)  # widen the window in which other threads find no engine either
        built.append(real(url))
        return built[-1]

    monkeypatch.setattr(db, "make_engine", slow_make_engine)
    try:
        yield built
    finally:
        db.dispose_engine()
        for engine in built:
            engine.dispose()
        monkeypatch.undo()
        get_settings.cache_clear()
        db.dispose_engine()


def test_threads_racing_for_the_first_engine_share_one(fresh_engine: list[Engine]) -> None:
    start = threading.Barrier(8)
    seen: list[Engine] = []

    def ask() -> None:
        start.wait()
        seen.append(db.get_engine())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(fresh_engine) == 1
    assert len(seen) == 8 and all(engine is fresh_engine[0] for engine in seen)


def test_disposing_forgets_the_engine_and_its_sessions(fresh_engine: list[Engine]) -> None:
    with db.session_scope() as session:
        assert session.get_bind() is fresh_engine[0]
    db.dispose_engine()
    with db.session_scope() as session:
        assert session.get_bind() is fresh_engine[1] is db.get_engine()
    assert len(fresh_engine) == 2
