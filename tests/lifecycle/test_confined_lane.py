"""Malformed legacy rows among batch items, through the real worker: they hold no lane back.

Rows recorded before the API parsed URLs by the WHATWG rules may hold URLs no later step can
read, and a stored source this version cannot read. Here such rows are written straight into
the database (no API) among well-formed batch items, and the lane's tokens published, as the
sweep would: every well-formed item settles from its own page as if they were absent, every
malformed one settles `blocked/unsafe_url`, and nothing stays open.
"""

from __future__ import annotations

import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from tests.conftest import Env
from tests.support.pages import article
from tests.support.tls_site import TLSSite
from worker.domain import clock
from worker.jobs import outbox
from worker.lanes import batch_order
from worker.retrieval import records as retrievals
from worker.store import db

pytestmark = [pytest.mark.lifecycle, pytest.mark.usefixtures("services")]

T = retrievals.RETRIEVAL.c
#: The URLs the outside checks found accepted, each of which stopped the batch lane.
MALFORMED = [
    "https://::1/",
    "https://93.184.215.14:443:22/",
    "https://93.184.215.14:99999/",
    "https://127.0.0.1:+443/",
    "https://93.184.215.14:443abc/",
]
#: Only catches a row that never settles (the worker runs two threads on a shared machine).
SETTLE_BOUND_SECONDS = 240


def _legacy_batch(workspace: uuid.UUID, urls: list[str]) -> list[uuid.UUID]:
    """Batch rows recorded directly, in order, and one lane token each published."""
    now = clock.now()
    rows = []
    for n, url in enumerate(urls):
        new = retrievals.NewRetrieval(workspace, uuid.uuid4(), url, "url_text", None)
        rows.append(
            retrievals.new_row_values(
                new, now + timedelta(microseconds=n), timedelta(hours=1), "batch"
            )
        )

    def write(session: Session) -> None:
        session.execute(sa.insert(retrievals.RETRIEVAL), rows)
        batch_order.note_batch_work(session, [workspace])

    db.with_transient_retry(write)
    ids = [row["id"] for row in rows]
    outbox.publish(ids, "batch")  # what the broker misses, the sweep publishes again
    return ids


def _settled(ids: list[uuid.UUID]) -> dict[uuid.UUID, Any]:
    """The rows once none is pending or running (the bound only catches one that never is)."""
    deadline = time.monotonic() + SETTLE_BOUND_SECONDS
    while True:
        with db.session_scope(readonly=True) as session:
            rows = session.execute(sa.select(T.id, T.state, T.result).where(T.id.in_(ids))).all()
        open_ = [row for row in rows if row.state in ("pending", "running")]
        if not open_:
            return {row.id: row for row in rows}
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(open_)} of {len(ids)} never settled")
        time.sleep(0.2)


def _pages(site: TLSSite, count: int) -> list[str]:
    tag = uuid.uuid4().hex
    return [
        site.page(f"/confined/{tag}/{n}", article(f"Lane {n}", marker=f"{tag}-{n}"))
        for n in range(count)
    ]


def _check(ids: list[uuid.UUID], urls: list[str], malformed: set[str]) -> None:
    rows = _settled(ids)
    for rid, url in zip(ids, urls, strict=True):
        row = rows[rid]
        outcome = (row.state, row.result["status"], row.result["reason"])
        if url in malformed:
            assert outcome == ("completed", "blocked", "unsafe_url"), (url, outcome)
        else:
            assert outcome[:2] == ("completed", "ready"), (url, row.result)
            assert row.result["provenance"]["source_url"] == url


def test_one_malformed_url_at_position_15_of_31(site: TLSSite) -> None:
    """31 batch items, `https://::1/` at position 15: the 30 others complete from their pages
    (the lane stopped there for good: 15 completed, 16 pending), the malformed one is
    blocked."""
    urls = _pages(site, 30)
    urls.insert(15, MALFORMED[0])
    _check(_legacy_batch(uuid.uuid4(), urls), urls, {MALFORMED[0]})


def test_every_malformed_url_found_among_batch_items(site: TLSSite) -> None:
    """The five URLs the outside checks found, spread among 20 well-formed items of one
    workspace and 5 of another (round-robin claims mix them in groups)."""
    urls = _pages(site, 20)
    for n, url in enumerate(MALFORMED):
        urls.insert(2 + 5 * n, url)
    other = _pages(site, 5)
    ids = _legacy_batch(uuid.uuid4(), urls)
    other_ids = _legacy_batch(uuid.uuid4(), other)
    _check(ids + other_ids, urls + other, set(MALFORMED))


def test_a_stored_source_that_cannot_be_read_holds_no_lane_back(site: TLSSite, env: Env) -> None:
    """A stored source whose validators are not JSON (SQLite stores whatever it was given):
    reading it failed the whole claim group, every time. Batch items of its request among
    others: each settles from its page (the unreadable source is no source), the others as
    if it were absent."""
    if env.db_kind != "sqlite":
        pytest.skip("PostgreSQL's jsonb never holds text that is not JSON")
    from worker.store.models import EvidenceSource

    source = EvidenceSource.__table__  # type: ignore[attr-defined]
    workspace = uuid.uuid4()
    urls = _pages(site, 12)
    first = _legacy_batch(workspace, [urls[0]])
    _check(first, [urls[0]], set())
    db.with_transient_retry(
        lambda s: s.execute(
            sa.update(source)
            .where(source.c.workspace_id == workspace)
            .values(validators=sa.literal_column("'{not json'"))
        )
    )
    again = [urls[0], *urls[1:6], urls[0], *urls[6:]]
    _check(_legacy_batch(workspace, again), again, set())
