"""Batch-lane settles of a threads-pool worker, written a group per transaction.

Hundreds of batch retrievals finish in one process at once; their settles are written together
(`worker.retrieval.grouped`, `worker.retrieval.settles.settle_many`). Only the batch lane is
grouped: an agent's interactive settle keeps its own transaction, and never waits behind a group.
Should a group's transaction fail for any reason but a lost claim, its settles are written one by
one (`transitions.settle_claim`), so one bad outcome fails only its own retrieval, exactly as
before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog
from sqlalchemy.orm import Session

from worker.retrieval import transitions
from worker.retrieval.grouped import Grouped, one_per_process
from worker.retrieval.settles import SettleJob, settle_alone, settle_many
from worker.store import db

log = structlog.get_logger(__name__)

#: Settles written in one transaction at most (a group's transaction holds its rows' locks).
MAX_GROUP = 32


def write(jobs: Sequence[SettleJob]) -> list[bool | BaseException]:
    """Settle `jobs` in one transaction (one by one if that fails); whether each won its claim."""
    try:
        won = db.with_transient_retry(lambda s: settle_many(s, jobs))
    except Exception as exc:  # noqa: BLE001  (each settle is then written on its own)
        log.warning("settle_group_failed", size=len(jobs), error=type(exc).__name__)
        return [_write_alone(job) for job in jobs]
    lost = [job for job, held in zip(jobs, won, strict=True) if not held]
    if lost:
        try:
            db.with_transient_retry(lambda s: _expire_lost(s, lost))
        except Exception as exc:  # noqa: BLE001  (the sweep expires them in any case)
            log.warning("settle_group_expire_failed", error=type(exc).__name__)
    return list(won)


def _write_alone(job: SettleJob) -> bool | BaseException:
    try:
        return settle_alone(job)
    except Exception as exc:  # noqa: BLE001  (raised again in its own thread)
        return exc


def _expire_lost(session: Session, lost: list[SettleJob]) -> None:
    """As after a single fenced settle: a claim that lost because it is too late is expired."""
    for job in lost:
        transitions.expire_due(session, job.now, job.claim.retrieval_id)


def group(max_group: int = MAX_GROUP) -> Grouped[SettleJob, bool]:
    """A settle group (the process's is `get()`)."""
    return Grouped(write, max_group)


#: The process's settle group.
get: Callable[[], Grouped[SettleJob, bool]] = one_per_process(group)
