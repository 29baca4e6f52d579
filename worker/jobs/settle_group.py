"""Batch-lane settles of a threads-pool worker, written a group per transaction.

Hundreds of batch retrievals finish in one process at once. A thread that settles while no
other is writing leads: it takes every settle queued so far (its own among them), writes them in
one transaction (`worker.store.settles.settle_many`) and goes on until its own is written, then
hands the lead to the oldest settle still queued. The others wait for theirs. Nothing waits to
fill a group: a lone settle is written at once, and the groups grow with the load, which is
exactly when their per-statement savings matter.

Only the batch lane is grouped: an agent's interactive settle keeps its own transaction, and
never waits behind a group. Should a group's transaction fail for any reason but a lost claim,
its settles are written one by one (`retrievals.settle_claim`), so one bad outcome fails only
its own retrieval, exactly as before.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import structlog
from sqlalchemy.orm import Session

from worker.store import db, retrievals
from worker.store.settles import SettleJob, settle_many

log = structlog.get_logger(__name__)

#: Settles written in one transaction at most (a group's transaction holds its rows' locks).
MAX_GROUP = 32


@dataclass
class _Entry:
    job: SettleJob
    done: threading.Event = field(default_factory=threading.Event)
    finished: bool = False
    won: bool = False
    error: BaseException | None = None


class SettleGroup:
    """Settles from many threads, written together (see the module)."""

    def __init__(self, max_group: int = MAX_GROUP) -> None:
        self._max_group = max_group
        self._lock = threading.Lock()
        self._queue: list[_Entry] = []
        self._leading = False

    def settle(self, job: SettleJob) -> bool:
        """Settle `job` (False when its claim was fenced off); raises what its own write raised."""
        entry = _Entry(job)
        with self._lock:
            self._queue.append(entry)
            lead, self._leading = not self._leading, True
        if not lead:
            entry.done.wait()
        if not entry.finished:  # leading from the start, or handed the lead
            self._lead(entry)
        if entry.error is not None:
            raise entry.error
        return entry.won

    def _lead(self, own: _Entry) -> None:
        while True:
            with self._lock:
                if own.finished:
                    if self._queue:
                        self._queue[0].done.set()  # it finds itself unwritten: it leads
                    else:
                        self._leading = False
                    return
                group = self._queue[: self._max_group]
                del self._queue[: self._max_group]
            self._write(group)

    def _write(self, group: list[_Entry]) -> None:
        """Write `group` and wake its threads; never raises (a thread's error is its own)."""
        try:
            self._write_group(group)
        except BaseException as exc:  # noqa: BLE001  (every waiting thread must wake)
            for entry in group:
                entry.error = entry.error or exc
        finally:
            for entry in group:
                entry.finished = True
                entry.done.set()

    def _write_group(self, group: list[_Entry]) -> None:
        jobs = [entry.job for entry in group]
        try:
            won = db.with_transient_retry(lambda s: settle_many(s, jobs))
        except Exception as exc:  # noqa: BLE001  (each settle is then written on its own)
            log.warning("settle_group_failed", size=len(group), error=type(exc).__name__)
            for entry in group:
                self._write_alone(entry)
            return
        for entry, held in zip(group, won, strict=True):
            entry.won = held
        lost = [entry.job for entry, held in zip(group, won, strict=True) if not held]
        if lost:
            try:
                db.with_transient_retry(lambda s: _expire_lost(s, lost))
            except Exception as exc:  # noqa: BLE001  (the sweep expires them in any case)
                log.warning("settle_group_expire_failed", error=type(exc).__name__)

    @staticmethod
    def _write_alone(entry: _Entry) -> None:
        job = entry.job
        try:
            entry.won = retrievals.settle_claim(
                job.claim, job.result, job.now, job.images, job.then, job.stored
            )
        except Exception as exc:  # noqa: BLE001  (raised again in its own thread)
            entry.error = exc


def _expire_lost(session: Session, lost: list[SettleJob]) -> None:
    """As after a single fenced settle: a claim that lost because it is too late is expired."""
    for job in lost:
        retrievals.expire_due(session, job.now, job.claim.retrieval_id)


_group: SettleGroup | None = None
_group_lock = threading.Lock()


def get() -> SettleGroup:
    """The process's settle group (made on first use, after any fork)."""
    global _group
    with _group_lock:
        if _group is None:
            _group = SettleGroup()
        return _group
