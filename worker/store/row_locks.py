"""Statements over many rows that must not wait on any one of them.

A sweep's UPDATE takes every row its condition matches. A row locked by a transaction that
cannot end (a worker host cut off in the middle of a statement keeps its rows until the
database drops the session, EVIDENCE_DB_PEER_TIMEOUT_SECONDS) would hold the whole
statement, and with it every other row's change and every later sweep of the one-process
sweeper. `unheld` narrows such a statement to the rows nobody holds now (PostgreSQL
`FOR UPDATE SKIP LOCKED`; SQLite runs one writer at a time, and drops the clause); a row
skipped is taken by the next sweep once its holder ends.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa


def unheld(key: sa.ColumnElement[Any], condition: sa.ColumnElement[bool]) -> sa.ColumnElement[bool]:
    """`condition`, for the rows matching it that no other transaction holds (`key`: the
    table's primary key column)."""
    free = sa.select(key).where(condition).with_for_update(skip_locked=True)
    return condition & key.in_(free)
