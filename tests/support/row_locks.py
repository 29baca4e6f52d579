"""Rows held by another connection's open transaction (what a worker host cut off in the
middle of a statement leaves behind), and a check that a statement does not wait on them."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import TypeVar

import sqlalchemy as sa

from tests.support.slowdown import scaled

T = TypeVar("T")


class Holder:
    """A transaction of its own connection, locking rows until `release`."""

    def __init__(self, url: str) -> None:
        self._engine = sa.create_engine(url)
        self._connection = self._engine.connect()
        self._transaction = self._connection.begin()

    def lock(self, table: str, row_id: uuid.UUID) -> None:
        self._connection.execute(
            sa.text(f"SELECT id FROM {table} WHERE id = :id FOR UPDATE"), {"id": row_id}
        )

    def release(self) -> None:
        if self._transaction.is_active:
            self._transaction.rollback()
        self._connection.close()
        self._engine.dispose()


def within(seconds: float, fn: Callable[[], T]) -> T:
    """`fn`'s answer, which must come within `seconds` on a quiet machine: a statement that
    waits on a held row never answers while it is held."""
    answers: list[T] = []
    thread = threading.Thread(target=lambda: answers.append(fn()), daemon=True)
    thread.start()
    thread.join(scaled(seconds))
    assert answers, f"still waiting after {seconds} s: the statement waits on a held row"
    return answers[0]
