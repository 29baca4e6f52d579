"""Batch-lane claims of a threads-pool worker, taken a group per transaction.

When a batch starts, or a delivered message fills the idle threads (`spare_tokens.fan_out`),
dozens of threads of one process claim at once. Each claim was a transaction of its own (the
lane's workspaces, the claim, the freshness look-up, the commit); here the threads' claims are
taken together (`worker.retrieval.grouped`): one read of the lane's workspaces and one claiming
statement per workspace for the whole group (`claims.claim_next_batches`, round-robin as
as many single claims would be), each claim's look-up, one commit. A thread whose claim found
nothing left gets None, as a single claim of an empty lane does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

import structlog
from sqlalchemy.orm import Session

from worker.domain import clock
from worker.platform import confine
from worker.platform.settings import get_settings
from worker.retrieval import claims
from worker.retrieval import records as retrievals
from worker.retrieval.freshness import revalidation as freshness
from worker.retrieval.grouped import Grouped, one_per_process
from worker.store import db

log = structlog.get_logger(__name__)

#: Claims taken in one transaction at most.
MAX_GROUP = 32

Claimed = tuple[retrievals.Claim, freshness.Found] | None
LookUps = Callable[[Session, Sequence[retrievals.Claim]], list[freshness.Found]]


def take(requests: Sequence[None]) -> list[Claimed | BaseException]:
    """Claim one batch retrieval per request, in one transaction (None for those left over).

    Should the group's look-up fail for any reason but the database itself (one claimed row's
    stored URL or source this version cannot read), the transaction is rolled back, claiming
    nothing, and the group is claimed again with each look-up on its own (`look_up_each`): the
    failing claim then finds nothing, and is still claimed, so its attempts count as any
    other's and it cannot hold its lane back.
    """
    lease = timedelta(seconds=get_settings().lease_seconds)

    def claiming(look_ups: LookUps) -> Callable[[Session], list[Claimed]]:
        def work(session: Session) -> list[Claimed]:
            taken = claims.claim_next_batches(session, clock.now(), lease, len(requests))
            return list(zip(taken, look_ups(session, taken), strict=True))

        return work

    try:
        claimed = db.with_transient_retry(claiming(freshness.look_up_many))
    except Exception as exc:
        if confine.group_wide(exc):
            raise
        log.warning("claim_group_look_up_failed", size=len(requests), error=type(exc).__name__)
        claimed = db.with_transient_retry(claiming(look_up_each))
    answers: list[Claimed | BaseException] = list(claimed)
    return answers + [None] * (len(requests) - len(answers))


def look_up_each(session: Session, taken: Sequence[retrievals.Claim]) -> list[freshness.Found]:
    """Each claim's look-up on its own, in a savepoint: one that fails finds nothing (a full
    retrieval), and leaves the transaction as it was for the others."""
    found: list[freshness.Found] = []
    for claim in taken:
        try:
            with session.begin_nested():
                found.append(freshness.look_up(session, claim))
        except Exception as exc:
            if confine.group_wide(exc):
                raise
            confine.record("claim", "nothing_found", exc, retrieval_id=str(claim.retrieval_id))
            found.append((None, None))
    return found


#: The process's claim group.
get: Callable[[], Grouped[None, Claimed]] = one_per_process(lambda: Grouped(take, MAX_GROUP))
