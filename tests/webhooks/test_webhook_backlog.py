"""One workspace's backlog of failing deliveries, through the real worker and loopback receivers:
it costs no message until a delivery can be attempted, holds no more than its share, and does
not stop another workspace's retrievals or deliveries (issue 37)."""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from datetime import timedelta

import pytest
import redis
import sqlalchemy as sa

from tests.conftest import Env
from tests.support.factories import Api, body, cancel_open, make_key, parked
from tests.support.pages import article
from tests.support.tls_site import TLSSite
from tests.support.webhook_receiver import Inbox
from tests.webhooks.support import Hooks
from worker.domain import clock
from worker.platform.settings import get_settings
from worker.store import db
from worker.webhooks import dispatch

pytestmark = pytest.mark.usefixtures("services")


class Held:
    """Samples, until stopped, the most deliveries leased (attempts in flight) and held
    (`dispatch.held_counts`) at once per endpoint, held per workspace, and the messages waiting
    on the webhooks queue."""

    def __init__(self, env: Env) -> None:
        self.leased: Counter[uuid.UUID] = Counter()
        self.endpoint: Counter[uuid.UUID] = Counter()
        self.workspace: Counter[uuid.UUID] = Counter()
        self.queued = 0
        self._broker = redis.Redis.from_url(env.broker_url)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        republish_after = timedelta(seconds=get_settings().republish_after_seconds)
        while not self._stop.wait(0.05):
            now = clock.now()
            leased = (
                sa.select(dispatch.DELIVERY.c.endpoint_id, sa.func.count())
                .where(
                    dispatch.DELIVERY.c.state == "pending", dispatch.DELIVERY.c.lease_until >= now
                )
                .group_by(dispatch.DELIVERY.c.endpoint_id)
            )
            with db.session_scope(readonly=True) as session:
                held = dispatch.held_counts(session, now, republish_after)
                for ep, n in session.execute(leased).all():
                    self.leased[ep] = max(self.leased[ep], int(n))
            workspaces: Counter[uuid.UUID] = Counter()
            for (ws, ep), n in held.items():
                self.endpoint[ep] = max(self.endpoint[ep], n)
                workspaces[ws] += n
            for ws, n in workspaces.items():
                self.workspace[ws] = max(self.workspace[ws], n)
            self.queued = max(self.queued, int(self._broker.llen("webhooks")))  # type: ignore[arg-type]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._broker.close()


def _log_size(env: Env) -> int:
    return (env.tmp / "worker.log").stat().st_size


def _skipped(env: Env, since: int) -> list[uuid.UUID]:
    """Deliveries whose message the session's worker found nothing to do for, since `since`."""
    with (env.tmp / "worker.log").open("rb") as log:
        log.seek(since)
        lines = log.read().decode(errors="replace").splitlines()
    return [
        uuid.UUID(event["delivery_id"])
        for line in lines
        if '"webhook_claim_skipped"' in line
        and (event := json.loads(line)).get("event") == "webhook_claim_skipped"
    ]


def _enabled(delivery_ids: list[uuid.UUID]) -> list[bool]:
    """Whether each delivery's endpoint is enabled now."""
    query = (
        sa.select(dispatch.ENDPOINT.c.enabled)
        .join(dispatch.DELIVERY, dispatch.DELIVERY.c.endpoint_id == dispatch.ENDPOINT.c.id)
        .where(dispatch.DELIVERY.c.id.in_(delivery_ids))
    )
    with db.session_scope(readonly=True) as session:
        return [bool(enabled) for (enabled,) in session.execute(query)]


def test_a_failing_backlog_costs_no_churn_and_does_not_stop_another_workspace(
    env: Env, http: object, hooks: Hooks, workspace: uuid.UUID, site: TLSSite
) -> None:
    """A: seven endpoints that answer 500, hang past the sender's bound or refuse the
    connection, and 30 settled retrievals (210 deliveries, failing and backing off). Meanwhile
    B's retrievals complete and its endpoint gets each delivery on the first attempt; no
    message is published that its claim refuses (but for an endpoint disabled meanwhile); no
    endpoint ever holds more than its concurrency, A no more than half the fleet's slots, the
    queue no more than all of them."""
    settings = get_settings()
    failing = [Inbox(env.receiver) for _ in range(3)]
    hanging = [Inbox(env.receiver) for _ in range(2)]
    for inbox in failing:
        inbox.answer(500)
    for inbox in hanging:
        inbox.hang(5)
    urls = [i.url for i in failing + hanging]
    urls += [f"https://127.0.0.1:{env.closed_port}/refused/{n}" for n in range(2)]
    a_endpoints = [hooks.create(workspace, url)["webhook"]["id"] for url in urls]
    b = uuid.uuid4()
    b_key = make_key([b])
    b_hooks, b_client, b_inbox = Hooks(http, b_key), Api(http, b_key), Inbox(env.receiver)
    b_endpoint = b_hooks.create(b, b_inbox.url)["webhook"]["id"]
    log_start = _log_size(env)
    held = Held(env)
    try:
        parked(workspace, count=30)
        cancel_open(workspace)  # 30 settles: 210 deliveries to A's endpoints
        for inbox in failing + hanging:
            inbox.wait_for(1)  # A's backlog is being attempted
        ids = []
        for n in range(3):
            path = f"/backlog/{uuid.uuid4().hex}"
            page = site.page(path, article(f"Beside a backlog {n}", marker=path))
            ids.append(b_client.post(body(page, b)).json()["retrieval"]["id"])
        for retrieval_id in ids:
            assert b_client.wait(retrieval_id)["state"] == "completed"
        b_inbox.wait_for(3)
        deliveries = b_hooks.deliveries(b_endpoint)
        assert {d["retrieval_id"] for d in deliveries} == set(ids)
        assert all(d["state"] == "delivered" and d["attempts"] == 1 for d in deliveries)
        # Messages are published only when they can be attempted. Claims are refused for
        # endpoints disabled meanwhile (failing for EVIDENCE_WEBHOOK_DISABLE_AFTER_SECONDS, 8 s
        # here), and for the rare message that waited past EVIDENCE_REPUBLISH_AFTER_SECONDS and
        # was published again as lost (as before: at most one held set's worth on a slow
        # machine). Before, most of the 210 deliveries' messages found their endpoint busy,
        # every sweep: hundreds of refusals.
        skipped = _skipped(env, log_start)
        refused_enabled = sum(_enabled(skipped))
        assert refused_enabled <= settings.webhook_max_in_flight, skipped
    finally:
        held.stop()
        for inbox in hanging:
            inbox.ok()
        for webhook_id in a_endpoints:
            assert hooks.call("DELETE", f"/{webhook_id}").status_code == 204
    a_ids = {uuid.UUID(i) for i in a_endpoints}
    concurrency = settings.webhook_endpoint_concurrency
    assert max(n for ep, n in held.leased.items() if ep in a_ids) <= concurrency
    # Held: attempts and messages. A message that waited longer than
    # EVIDENCE_REPUBLISH_AFTER_SECONDS (4 s here, in a two-thread worker) is taken for lost and
    # its delivery's room given again, so allow one such twin per slot; before, all 30.
    assert max(n for ep, n in held.endpoint.items() if ep in a_ids) <= 2 * concurrency
    assert held.workspace[workspace] <= settings.webhook_max_in_flight // 2
    assert held.queued <= settings.webhook_max_in_flight
