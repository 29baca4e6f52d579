"""Purge raw records past `EVIDENCE_ARCHIVE_RETENTION_DAYS`; the extracted evidence stays.

Index rows of exchanges fetched before the cutoff are deleted, except a response a kept
revisit still refers to (its payload is the revisit's). A sealed WARC file of this host's
directory is deleted once no index row names it and it was last written before the cutoff,
so every record in it is old. The sweep runs it at most once per `EVERY_SECONDS` per process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.store import db
from worker.store.archive_index import ARCHIVE_RECORD, T
from worker.store.typed import rowcount

#: How often a process's sweep purges (the retention is counted in days).
EVERY_SECONDS = 600.0
_last_run: float | None = None


@dataclass(frozen=True)
class Purged:
    """What one purge removed."""

    rows: int
    files: int
    bytes: int


def due(now_monotonic: float | None = None) -> bool:
    """Whether this process's sweep should purge now (and note that it does)."""
    global _last_run
    now_monotonic = time.monotonic() if now_monotonic is None else now_monotonic
    if _last_run is not None and now_monotonic - _last_run < EVERY_SECONDS:
        return False
    _last_run = now_monotonic
    return True


def purge_rows(session: Session, cutoff: datetime) -> int:
    """Delete the index rows fetched before `cutoff` that no kept revisit refers to."""
    kept = ARCHIVE_RECORD.alias("kept")
    referred = sa.select(kept.c.refers_to).where(
        kept.c.fetched_at >= cutoff, kept.c.refers_to.is_not(None)
    )
    stmt = sa.delete(ARCHIVE_RECORD).where(
        T.fetched_at < cutoff,
        sa.or_(T.record_type != "response", T.record_id.not_in(referred)),
    )
    return rowcount(session.execute(stmt))


def purge_files(session: Session, directory: Path, cutoff: datetime) -> tuple[int, int]:
    """Delete sealed files of `directory` last written before `cutoff` that no row names."""
    if not directory.is_dir():
        return 0, 0
    files = removed = 0
    limit = cutoff.timestamp()
    for path in directory.glob("*.warc.gz"):  # sealed only: never an `.open` one
        stat = path.stat()
        if stat.st_mtime >= limit:
            continue
        named = session.execute(sa.select(T.id).where(T.file == path.name).limit(1)).first()
        if named is None:
            path.unlink(missing_ok=True)
            files += 1
            removed += stat.st_size
    return files, removed


def purge(directory: Path, now: datetime, days: float) -> Purged:
    """Purge rows, and once their deletion is committed, the files no row names."""
    cutoff = now - timedelta(days=days)
    rows = db.with_transient_retry(lambda s: purge_rows(s, cutoff))
    files, removed = db.with_transient_retry(lambda s: purge_files(s, directory, cutoff))
    return Purged(rows, files, removed)
