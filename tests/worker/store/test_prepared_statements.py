"""EVIDENCE_DB_PREPARED_STATEMENTS: psycopg prepares repeated statements on the server unless
it is off, which pgbouncer in transaction mode before 1.21 needs (deploy/README.md): a
statement prepared on one server connection would be looked for on another."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from tests.support.services import create_postgres_database, drop_postgres_database
from worker.platform.settings import get_settings
from worker.store import db


@pytest.fixture
def database_url() -> Iterator[str]:
    name, url = create_postgres_database()
    yield url
    drop_postgres_database(name)


def prepared_after_repeats(url: str) -> int:
    """How many statements the server holds prepared for a pooled connection that ran one
    parameterised query ten times."""
    engine = db.make_engine(url)
    try:
        with engine.connect() as conn:
            for n in range(10):
                conn.execute(sa.text("SELECT :n + 1"), {"n": n}).scalar_one()
            return int(
                conn.execute(sa.text("SELECT count(*) FROM pg_prepared_statements")).scalar_one()
            )
    finally:
        engine.dispose()


@pytest.mark.parametrize(("setting", "prepares"), [("true", True), ("false", False)])
def test_prepared_statements_follow_the_setting(
    database_url: str, monkeypatch: pytest.MonkeyPatch, setting: str, prepares: bool
) -> None:
    monkeypatch.setenv("EVIDENCE_DB_PREPARED_STATEMENTS", setting)
    get_settings.cache_clear()
    try:
        assert (prepared_after_repeats(database_url) > 0) is prepares
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
