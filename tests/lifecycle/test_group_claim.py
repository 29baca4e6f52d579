"""Batch claims taken several at a time (`claims.claim_next_batches`): round-robin over the
workspaces as single claims would be, oldest first, and never a row twice or more than asked.

Each test has a database of its own: a claim of "the next" batch retrieval takes any
workspace's, so other tests' rows must not be in its lane."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.domain import clock
from worker.retrieval import claims
from worker.retrieval import records as retrievals

pytestmark = pytest.mark.lifecycle

LEASE = timedelta(seconds=60)


def _queue(engine: sa.Engine, workspace: uuid.UUID, count: int) -> list[uuid.UUID]:
    """`count` pending batch retrievals of `workspace`, oldest first."""
    with Session(engine) as session, session.begin():
        now = clock.now()
        return [
            retrievals.create_retrieval(
                session,
                retrievals.NewRetrieval(
                    workspace, uuid.uuid4(), f"https://example.org/{n}", "url_text", None
                ),
                now + timedelta(microseconds=n),
                timedelta(hours=1),
                "batch",
            )[0].id
            for n in range(count)
        ]


def _claim(engine: sa.Engine, count: int) -> list[retrievals.Claim]:
    with Session(engine) as session, session.begin():
        return claims.claim_next_batches(session, clock.now(), LEASE, count)


def test_shares_go_round_robin_oldest_first(engine: sa.Engine) -> None:
    first, second = sorted([uuid.uuid4(), uuid.uuid4()])  # never served: in id order
    queued = {first: _queue(engine, first, 3), second: _queue(engine, second, 3)}
    claims = _claim(engine, 5)
    by_workspace = {w: [c.retrieval_id for c in claims if c.workspace_id == w] for w in queued}
    assert by_workspace == {first: queued[first][:3], second: queued[second][:2]}
    assert {c.attempt for c in claims} == {1} and {c.lane for c in claims} == {"batch"}
    # `first` has none left: the next claim is `second`'s last row, then the lane is empty.
    [last] = _claim(engine, 1)
    assert last.retrieval_id == queued[second][2]
    assert _claim(engine, 4) == []


def test_a_short_queue_leaves_its_share_to_the_others(engine: sa.Engine) -> None:
    short, long = sorted([uuid.uuid4(), uuid.uuid4()])
    _queue(engine, short, 1)
    long_ids = _queue(engine, long, 5)
    claims = _claim(engine, 4)
    assert [c.workspace_id for c in claims].count(short) == 1
    assert [c.retrieval_id for c in claims if c.workspace_id == long] == long_ids[:3]


def test_concurrent_claimers_never_share_a_row_nor_take_more_than_asked(
    engine: sa.Engine,
) -> None:
    """Eight threads claiming 1 to 4 at a time until the lane is empty: every row claimed
    exactly once, on attempt 1, and no call got more than it asked for."""
    workspaces = [uuid.uuid4() for _ in range(3)]
    queued = {rid for w in workspaces for rid in _queue(engine, w, 20)}
    taken: list[uuid.UUID] = []
    oversized: list[int] = []
    lock = threading.Lock()

    def claimer(count: int) -> None:
        while claims := _claim(engine, count):
            with lock:
                taken.extend(c.retrieval_id for c in claims)
                if len(claims) > count:
                    oversized.append(len(claims))

    threads = [threading.Thread(target=claimer, args=(1 + n % 4,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not oversized
    assert sorted(taken) == sorted(queued)
    with Session(engine) as session:
        rows = session.execute(
            sa.select(retrievals.RETRIEVAL.c.state, retrievals.RETRIEVAL.c.attempt)
        ).all()
    assert {tuple(row) for row in rows} == {("running", 1)}


def test_a_claim_group_answers_each_thread_or_none(engine: sa.Engine) -> None:
    """Five threads' claims taken together over three queued rows: three claims, each with
    its freshness look-up, and None for the two left over (as a claim of an empty lane)."""
    from worker.retrieval import claim_group

    ids = _queue(engine, uuid.uuid4(), 3)
    answers = claim_group.take([None] * 5)
    claimed = [a for a in answers if isinstance(a, tuple)]
    assert answers[3:] == [None, None] and len(claimed) == 3
    assert sorted(claim.retrieval_id for claim, _ in claimed) == sorted(ids)
    assert all(found == (None, None) for _, found in claimed)  # nothing retrieved before
