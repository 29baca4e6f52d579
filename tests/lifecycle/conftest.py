"""Fixtures of the lifecycle tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from worker.store import db


@pytest.fixture
def engine(own_database: str) -> Iterator[sa.Engine]:
    """An engine of the test's own database (which is also the process's, `own_database`)."""
    engine = db.make_engine(own_database)
    try:
        yield engine
    finally:
        engine.dispose()
