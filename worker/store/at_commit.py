"""Writes a transaction makes as it commits: one call per statement, however many wrote rows.

Passages, images and what each request led to are rows nothing in their transaction reads back.
Queued here instead of written at once, they go out just before the commit as one executemany
per statement, so a transaction that settles many retrievals (`worker.retrieval.settles`) pays the
per-statement cost once, not once a retrieval. Work that must come last (numbering reports,
which holds a workspace's counter lock until the commit) runs after them; work that queues rows
of its own (the archive's writes, one look-up and one fsync for the transaction) runs before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

_ROWS = "at_commit.rows"
_FIRST = "at_commit.first"
_LAST = "at_commit.last"


def add_rows(session: Session, statement: Any, rows: Sequence[dict[str, Any]]) -> None:
    """Execute `statement` with `rows` (with every other transaction's rows for it) at commit."""
    if rows:
        session.info.setdefault(_ROWS, {}).setdefault(statement, []).extend(rows)


def run_first(session: Session, work: Callable[[Session], None]) -> None:
    """Run `work(session)` once at commit, before the queued rows (it may queue more of them;
    registering it twice is once)."""
    first: list[Callable[[Session], None]] = session.info.setdefault(_FIRST, [])
    if work not in first:
        first.append(work)


def run_last(session: Session, work: Callable[[Session], None]) -> None:
    """Run `work(session)` once at commit, after the queued rows (registering it twice is once)."""
    last: list[Callable[[Session], None]] = session.info.setdefault(_LAST, [])
    if work not in last:
        last.append(work)


def flush(session: Session) -> None:
    """Write what is queued now (the commit does it anyway)."""
    for work in session.info.pop(_FIRST, []):
        work(session)
    queued: dict[Any, list[dict[str, Any]]] = session.info.pop(_ROWS, {})
    for statement, rows in queued.items():
        session.execute(statement, rows)
    for work in session.info.pop(_LAST, []):
        work(session)


@event.listens_for(Session, "before_commit")
def _before_commit(session: Session) -> None:
    flush(session)


@event.listens_for(Session, "after_soft_rollback")
def _forget_on_rollback(session: Session, _previous: object) -> None:
    session.info.pop(_ROWS, None)
    session.info.pop(_FIRST, None)
    session.info.pop(_LAST, None)
