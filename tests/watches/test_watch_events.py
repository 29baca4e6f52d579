"""Watch events end to end: a loopback origin whose page changes, the session's worker running
each watch run, the webhook outbox delivering signed events to a loopback receiver.

Runs are started by the scheduler's tick at instants ahead of real time, one slot apart (beat's
own ticks, at real time, find the watch not yet due), and published to the batch lane as beat's
would be; the worker revalidates and settles them; a later tick announces each settled run.
"""

from __future__ import annotations

import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
import sqlalchemy as sa

from tests.conftest import Env
from tests.support.factories import make_key
from tests.support.pages import article
from tests.support.services import wait_for
from tests.support.tls_site import Page, send
from tests.support.webhook_receiver import Inbox, Received
from tests.watches.support import Watches
from tests.webhooks.support import Hooks

EVENTS = ["evidence.changed", "watch.failing", "watch.recovered"]


@dataclass
class Origin:
    """A page that changes when the test says, with an ETag; honours If-None-Match."""

    version: int = 1
    status: int = 200
    seen: list[int] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def etag(self) -> str:
        return f'"v{self.version}"'

    def __call__(self, handler: BaseHTTPRequestHandler) -> None:
        with self.lock:
            if self.status != 200:
                status = self.status
            elif handler.headers.get("If-None-Match") == self.etag:
                status = 304
            else:
                status = 200
            self.seen.append(status)
        if status == 304:
            handler.send_response(304)
            handler.send_header("ETag", self.etag)
            handler.end_headers()
            return
        if status != 200:
            send(handler, Page(b"gone", "text/plain", status))
            return
        marker = f"Edition {self.version} of the lake survey."
        body = article("Lake survey", marker=marker).encode()
        send(handler, Page(body, "text/html; charset=utf-8", 200, {"ETag": self.etag}))


def _watch_row(watch_id: str) -> Any:
    from worker.store import db
    from worker.watches.store import WATCH

    with db.session_scope(readonly=True) as session:
        return session.execute(sa.select(WATCH).where(WATCH.c.id == uuid.UUID(watch_id))).one()


def _retrieval(retrieval_id: uuid.UUID) -> Any:
    from worker.store import db
    from worker.store.models import Retrieval

    t = Retrieval.__table__  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        return session.execute(sa.select(t).where(t.c.id == retrieval_id)).one()


class Runner:
    """Runs a watch's next slot through the real worker and reports it."""

    def __init__(self, watch: dict[str, Any]) -> None:
        self.watch_id = watch["id"]
        self.slot = datetime.fromisoformat(watch["next_run_at"].replace("Z", "+00:00"))
        self.interval = timedelta(seconds=watch["interval_seconds"])

    def _tick(self) -> Any:
        from worker.jobs import outbox
        from worker.store import db
        from worker.watches import scheduler

        report = db.with_transient_retry(lambda s: scheduler.tick(s, self.slot))
        if report.created:
            outbox.publish(report.created, "batch")
        return report

    def run(self) -> Any:
        """One run: started, settled by the worker, announced; the settled retrieval."""
        from worker.jobs import outbox
        from worker.jobs.watch_tasks import run_tick

        self._tick()
        row = _watch_row(self.watch_id)
        retrieval_id = row.last_retrieval_id

        def completed() -> bool:
            # A batch token runs the lane's next retrieval, round-robin across workspaces:
            # another test's runs, parked ahead of real time, may take it. Another token then.
            outbox.publish([retrieval_id], "batch")
            return bool(_retrieval(retrieval_id).state == "completed")

        wait_for(completed, timeout=60, interval=1.0)

        def reported() -> bool:
            # A tick at real time, as beat's: it announces what settled (its events due now)
            # and starts nothing (the watch's next slot is ahead of real time).
            run_tick()
            return bool(_watch_row(self.watch_id).reported_retrieval_id == retrieval_id)

        wait_for(reported, timeout=30)
        self.slot += self.interval
        return _retrieval(retrieval_id)


def _events(inbox: Inbox, secret: str) -> list[dict[str, Any]]:
    return [request.verify(secret) for request in inbox.received]


def _settle_deliveries(inbox: Inbox, count: int) -> list[Received]:
    """Wait for `count` deliveries, then a moment more to see that no other follows."""
    received = inbox.wait_for(count, timeout=60)
    time.sleep(2)  # not a timing assertion: any extra delivery would show in the count
    return received


@pytest.mark.usefixtures("services")
def test_changes_failures_and_recovery_are_announced_once(
    env: Env, http: object, workspace: uuid.UUID
) -> None:
    from worker.domain import clock

    origin = Origin()
    url = env.site.add(f"/watched/{uuid.uuid4().hex}", origin)
    key = make_key([workspace])
    inbox = Inbox(env.receiver)
    created = Hooks(http, key).create(workspace, inbox.url, events=EVENTS)
    secret = created["secret"]
    watch = Watches(http, key).create(workspace, url, interval_seconds=300)
    runner = Runner(watch)

    first = runner.run()  # the baseline: revision 1, no event
    assert first.result["status"] == "ready" and first.evidence_revision == 1
    origin.version = 2
    second = runner.run()  # changed: revision 2, one evidence.changed
    assert second.evidence_revision == 2 and second.evidence_id == first.evidence_id
    (changed,) = _settle_deliveries(inbox, 1)
    event = changed.verify(secret)
    assert event["type"] == "evidence.changed"
    data = event["data"]
    assert data["watch_id"] == watch["id"] and data["evidence_id"] == str(first.evidence_id)
    assert (data["previous_revision"], data["revision"]) == (1, 2)
    assert data["retrieval_id"] == str(second.id)
    assert data["diff"]["lines_added"] >= 1 and data["diff"]["lines_removed"] >= 1
    excerpt = data["diff"]["excerpt"]
    assert "\n-Edition 1 of" in excerpt and "\n+Edition 2 of" in excerpt
    assert len(excerpt) <= 2000 and data["diff"]["excerpt_truncated"] is True
    assert data["diff_url"] == f"/research-api/evidence/{first.evidence_id}/diff?from=1&to=2"
    full = http.get(data["diff_url"], headers={"Authorization": f"Bearer {key}"})  # type: ignore[attr-defined]
    assert full.status_code == 200, full.text

    third = runner.run()  # unchanged: a 304, the same revision, no event
    assert origin.seen[-1] == 304 and third.evidence_revision == 2
    origin.status = 404
    runner.run()  # failing: one watch.failing
    runner.run()  # still failing: nothing more
    origin.status = 200
    recovered_run = runner.run()  # recovered: one watch.recovered
    assert recovered_run.result["status"] == "ready"
    received = _settle_deliveries(inbox, 3)
    events = _events(inbox, secret)
    assert [e["type"] for e in events] == ["evidence.changed", "watch.failing", "watch.recovered"]
    failing, recovered = events[1]["data"], events[2]["data"]
    assert failing["watch_id"] == watch["id"] and failing["reason"] == "not_found"
    assert recovered["revision"] == 2 and recovered["retrieval_id"] == str(recovered_run.id)
    assert len({r.headers["webhook-id"] for r in received}) == 3
    row = _watch_row(watch["id"])
    assert row.failing is False and row.last_revision == 2
    assert clock.now() < clock.as_utc(row.next_run_at)  # beat's ticks never ran it
