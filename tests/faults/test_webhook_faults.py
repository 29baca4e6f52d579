"""Webhook deliveries under faults: a broker outage and a worker killed mid-send lose nothing,
and every attempt of a delivery carries the same `webhook-id`."""

from __future__ import annotations

import threading
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.conftest import Env, Services
from tests.support.factories import Api, make_key, parked
from tests.support.services import wait_for
from tests.support.slowdown import scaled
from tests.support.tls_site import Page
from tests.support.webhook_receiver import Inbox
from tests.webhooks.support import Hooks


def _setup(http: object, env: Env) -> tuple[uuid.UUID, Hooks, Inbox, str, str]:
    workspace = uuid.uuid4()
    hooks = Hooks(http, make_key([workspace]))
    inbox = Inbox(env.receiver)
    created = hooks.create(workspace, inbox.url)
    return workspace, hooks, inbox, created["webhook"]["id"], created["secret"]


def _all_delivered(hooks: Hooks, webhook_id: str, count: int) -> list[dict[str, Any]] | None:
    deliveries = hooks.deliveries(webhook_id)
    done = [d for d in deliveries if d["state"] == "delivered"]
    return deliveries if len(done) == count == len(deliveries) else None


class TestWebhookFaults:
    def test_broker_outage_during_settles_loses_no_delivery(
        self, http: object, env: Env, services: Services
    ) -> None:
        """Settles while Redis is down record their deliveries; once it is back the sweep
        publishes them and each arrives, signed, under its delivery's id."""
        workspace, hooks, inbox, webhook_id, secret = _setup(http, env)
        client = Api(http, hooks.key)
        ids = parked(workspace, 3)
        env.redis.stop()
        try:
            for retrieval_id in ids:
                assert client.cancel(retrieval_id).status_code == 200
            recorded = hooks.deliveries(webhook_id)
            assert sorted(d["retrieval_id"] for d in recorded) == sorted(ids)
            assert all(d["state"] == "pending" and d["attempts"] == 0 for d in recorded)
        finally:
            env.redis.start()
        deliveries = wait_for(lambda: _all_delivered(hooks, webhook_id, 3), timeout=60)
        by_id = {d["id"]: d["retrieval_id"] for d in deliveries}  # type: ignore[union-attr]
        for request in inbox.received:
            payload = request.verify(secret)
            assert by_id[request.headers["webhook-id"]] == payload["data"]["retrieval"]["id"]
        assert {r.headers["webhook-id"] for r in inbox.received} == set(by_id)

    def test_worker_killed_mid_send_redelivers_with_the_same_id(
        self, http: object, env: Env, services: Services
    ) -> None:
        """SIGKILL of the worker while the receiver holds the request: the lease runs out, the
        sweep republishes, a restarted worker sends it again (attempt 2, same webhook-id)."""
        workspace, hooks, inbox, webhook_id, secret = _setup(http, env)
        gate = threading.Event()

        def held(_: BaseHTTPRequestHandler) -> Page:
            gate.wait(scaled(30))
            return Page(b"", "", 204)

        inbox.plan = held
        (retrieval_id,) = parked(workspace)
        assert Api(http, hooks.key).cancel(retrieval_id).status_code == 200
        inbox.wait_for(1)
        services.worker.kill_group()
        gate.set()
        services.start_worker()
        (delivery,) = wait_for(lambda: _all_delivered(hooks, webhook_id, 1), timeout=60)  # type: ignore[misc]
        assert delivery["attempts"] == 2
        assert len(inbox.received) == 2
        for request in inbox.received:
            assert request.headers["webhook-id"] == delivery["id"]
            assert request.verify(secret)["data"]["retrieval"]["id"] == retrieval_id
