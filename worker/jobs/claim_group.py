"""Batch-lane claims of a threads-pool worker, taken a group per transaction.

When a batch starts, or a delivered message fills the idle threads (`spare_tokens.fan_out`),
dozens of threads of one process claim at once. Each claim was a transaction of its own (the
lane's workspaces, the claim, the freshness look-up, the commit); here the threads' claims are
taken together (`worker.jobs.grouped`): one read of the lane's workspaces and one claiming
statement per workspace for the whole group (`retrievals.claim_next_batches`, round-robin as
as many single claims would be), each claim's look-up, one commit. A thread whose claim found
nothing left gets None, as a single claim of an empty lane does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

from sqlalchemy.orm import Session

from worker import clock
from worker.jobs import freshness
from worker.jobs.grouped import Grouped, one_per_process
from worker.settings import get_settings
from worker.store import db, retrievals

#: Claims taken in one transaction at most.
MAX_GROUP = 32

Claimed = tuple[retrievals.Claim, freshness.Found] | None


def take(requests: Sequence[None]) -> list[Claimed | BaseException]:
    """Claim one batch retrieval per request, in one transaction (None for those left over)."""
    lease = timedelta(seconds=get_settings().lease_seconds)

    def work(session: Session) -> list[tuple[retrievals.Claim, freshness.Found]]:
        claims = retrievals.claim_next_batches(session, clock.now(), lease, len(requests))
        return list(zip(claims, freshness.look_up_many(session, claims), strict=True))

    claimed: list[Claimed | BaseException] = list(db.with_transient_retry(work))
    return claimed + [None] * (len(requests) - len(claimed))


#: The process's claim group.
get: Callable[[], Grouped[None, Claimed]] = one_per_process(lambda: Grouped(take, MAX_GROUP))
