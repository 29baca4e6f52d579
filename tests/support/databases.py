"""Throwaway databases of the suite's kind, for tests that need one of their own."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from tests.support.services import create_postgres_database, drop_postgres_database


@contextlib.contextmanager
def fresh_database(kind: str, directory: Path) -> Iterator[str]:
    """An empty database (`postgres` or `sqlite`, in `directory`); its URL; dropped after."""
    if kind == "postgres":
        name, url = create_postgres_database()
        try:
            yield url
        finally:
            drop_postgres_database(name)
    else:
        yield f"sqlite:///{directory / 'fresh.db'}"
