"""Deliveries through a real worker to real loopback HTTPS receivers, every signature verified
with the `standardwebhooks` reference library."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.conftest import Env
from tests.support.factories import Api, body
from tests.support.pages import article
from tests.support.schemas import validate_retrieval_payload
from tests.support.services import wait_for
from tests.support.tls_site import Page, TLSSite
from tests.support.webhook_receiver import Inbox
from tests.webhooks.support import Hooks

pytestmark = pytest.mark.usefixtures("services")


def _register(hooks: Hooks, workspace: uuid.UUID, inbox: Inbox) -> tuple[str, str]:
    created = hooks.create(workspace, inbox.url)
    return created["webhook"]["id"], created["secret"]


def _delivery(hooks: Hooks, webhook_id: str, retrieval_id: str) -> dict[str, Any] | None:
    for delivery in hooks.deliveries(webhook_id):
        if delivery["retrieval_id"] == retrieval_id:
            return delivery
    return None


def _wait_delivery(
    hooks: Hooks,
    webhook_id: str,
    retrieval_id: str,
    done: Callable[[dict[str, Any]], bool],
    timeout: float = 30,
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        delivery = _delivery(hooks, webhook_id, retrieval_id)
        return delivery if delivery is not None and done(delivery) else None

    return wait_for(check, timeout=timeout, interval=0.2)  # type: ignore[return-value]


def _delivered(delivery: dict[str, Any]) -> bool:
    return bool(delivery["state"] == "delivered")


class TestDelivery:
    def test_every_settled_state_is_delivered_signed_as_get_answers(
        self,
        hooks: Hooks,
        client: Api,
        workspace: uuid.UUID,
        inbox: Inbox,
        site: TLSSite,
        settle: Callable[[str], str],
    ) -> None:
        """completed, cancelled, expired, unconfirmed: one signed request each, whose data is
        the retrieval exactly as GET answers it, valid against the contract's output schema."""
        webhook_id, secret = _register(hooks, workspace, inbox)
        path = f"/wh/{uuid.uuid4().hex}"
        completed = client.post(body(site.page(path, article("Hook", marker=path)), workspace))
        ids = {"completed": completed.json()["retrieval"]["id"]}
        ids |= {state: settle(state) for state in ("cancelled", "expired", "unconfirmed")}
        received = inbox.wait_for(4)
        by_retrieval = {}
        for request in received:
            payload = request.verify(secret)
            assert payload["type"] == "retrieval.settled"
            validate_retrieval_payload(payload["data"])
            retrieval = payload["data"]["retrieval"]
            assert payload["timestamp"] == retrieval["settled_at"]
            by_retrieval[retrieval["id"]] = (request, payload)
        assert set(by_retrieval) == set(ids.values())
        for state, retrieval_id in ids.items():
            request, payload = by_retrieval[retrieval_id]
            assert payload["data"] == client.get(retrieval_id).json()
            assert payload["data"]["retrieval"]["state"] == state
            delivery = _wait_delivery(hooks, webhook_id, retrieval_id, _delivered)
            assert request.headers["webhook-id"] == delivery["id"]
            assert delivery["attempts"] == 1 and delivery["next_attempt_at"] is None
        _check_metrics(hooks.client)

    def test_receiver_down_then_back_is_delivered_once_it_returns(
        self,
        env: Env,
        hooks: Hooks,
        workspace: uuid.UUID,
        inbox: Inbox,
        settle: Callable[[str], str],
    ) -> None:
        """Connection refused: retried with back-off (the delivery says why and when next);
        once the receiver listens again on its port, it gets the event, same id."""
        webhook_id, secret = _register(hooks, workspace, inbox)
        env.receiver.stop()
        try:
            retrieval_id = settle("cancelled")
            failing = _wait_delivery(hooks, webhook_id, retrieval_id, lambda d: d["attempts"] >= 2)
            assert failing["state"] == "pending" and failing["last_error"]
            assert failing["next_attempt_at"] is not None
        finally:
            env.receiver.start()
        delivery = _wait_delivery(hooks, webhook_id, retrieval_id, _delivered)
        (request,) = inbox.wait_for(1)
        assert request.verify(secret)["data"]["retrieval"]["id"] == retrieval_id
        assert request.headers["webhook-id"] == delivery["id"]

    def test_500_is_retried_with_the_same_id_until_it_succeeds(
        self, hooks: Hooks, workspace: uuid.UUID, inbox: Inbox, settle: Callable[[str], str]
    ) -> None:
        """Each 500 is recorded (status, error) and retried with the same id, until a 2xx.

        The receiver itself decides what each request gets: 500 to the first two whatever
        happens, and 500 until the test has read a recorded failure, 204 after. (A delivery's
        `attempts` counts claims, made before the send: waiting on it raced the send.)"""
        webhook_id, secret = _register(hooks, workspace, inbox)
        recovered = threading.Event()
        answered: list[int] = []
        lock = threading.Lock()

        def plan(_: BaseHTTPRequestHandler) -> Page:
            with lock:
                ok = len(answered) >= 2 and recovered.is_set()
                answered.append(204 if ok else 500)
            return Page(b"", "", 204) if ok else Page(b"receiver broke", "text/plain", 500)

        inbox.plan = plan
        retrieval_id = settle("cancelled")
        failing = _wait_delivery(
            hooks, webhook_id, retrieval_id, lambda d: d["last_status"] is not None
        )
        assert (failing["state"], failing["last_status"]) == ("pending", 500), failing
        assert failing["last_error"] == "HTTP 500: receiver broke"
        assert failing["next_attempt_at"] is not None
        recovered.set()
        delivery = _wait_delivery(hooks, webhook_id, retrieval_id, _delivered)
        assert (delivery["last_status"], delivery["last_error"]) == (204, None)
        requests = inbox.received
        assert answered == [500] * (len(answered) - 1) + [204] and len(answered) >= 3
        assert len(requests) == len(answered) == delivery["attempts"]
        assert {r.headers["webhook-id"] for r in requests} == {delivery["id"]}
        for request in requests:
            request.verify(secret)

    def test_a_hanging_receiver_is_cut_off_and_blocks_no_other_endpoint(
        self,
        env: Env,
        hooks: Hooks,
        workspace: uuid.UUID,
        inbox: Inbox,
        settle: Callable[[str], str],
    ) -> None:
        """A receiver that never answers in time: each attempt ends at the total bound (a
        timeout), while another endpoint of the workspace gets its delivery at once."""
        slow_id, _ = _register(hooks, workspace, inbox)
        fast = Inbox(env.receiver)
        fast_id, fast_secret = _register(hooks, workspace, fast)
        inbox.hang(30)
        retrieval_id = settle("cancelled")
        (request,) = fast.wait_for(1)
        request.verify(fast_secret)
        assert _wait_delivery(hooks, fast_id, retrieval_id, _delivered)["attempts"] == 1
        failing = _wait_delivery(
            hooks,
            slow_id,
            retrieval_id,
            lambda d: d["attempts"] >= 1 and d["last_error"] is not None,
        )
        assert failing["state"] == "pending" and "timeout" in failing["last_error"], failing
        inbox.ok()
        _wait_delivery(hooks, slow_id, retrieval_id, _delivered)

    def test_a_redirect_to_a_private_address_is_refused(
        self,
        hooks: Hooks,
        workspace: uuid.UUID,
        inbox: Inbox,
        env: Env,
        settle: Callable[[str], str],
    ) -> None:
        """A redirect is never followed (a signed body goes only where it was registered)."""
        target = Inbox(env.receiver)
        webhook_id, _ = _register(hooks, workspace, inbox)
        inbox.answer(307, headers={"Location": "https://10.0.0.1/steal"})
        retrieval_id = settle("cancelled")
        failing = _wait_delivery(
            hooks,
            webhook_id,
            retrieval_id,
            lambda d: d["attempts"] >= 1 and d["last_error"] is not None,
        )
        assert failing["last_status"] == 307
        assert failing["last_error"].startswith("redirect refused"), failing
        inbox.answer(302, headers={"Location": target.url})
        _wait_delivery(hooks, webhook_id, retrieval_id, lambda d: d["last_status"] == 302)
        assert target.received == []
        assert hooks.call("DELETE", f"/{webhook_id}").status_code == 204

    def test_rotation_signs_with_both_secrets_during_the_grace(
        self, hooks: Hooks, workspace: uuid.UUID, inbox: Inbox, settle: Callable[[str], str]
    ) -> None:
        webhook_id, old = _register(hooks, workspace, inbox)
        new = hooks.call("POST", f"/{webhook_id}/rotate-secret").json()["secret"]
        settle("cancelled")
        (request,) = inbox.wait_for(1)
        assert request.verify(old) == request.verify(new)
        assert len(request.headers["webhook-signature"].split(" ")) == 2

    def test_redelivery_sends_the_same_id_again(
        self, hooks: Hooks, workspace: uuid.UUID, inbox: Inbox, settle: Callable[[str], str]
    ) -> None:
        webhook_id, secret = _register(hooks, workspace, inbox)
        retrieval_id = settle("cancelled")
        delivery = _wait_delivery(hooks, webhook_id, retrieval_id, _delivered)
        answer = hooks.call("POST", f"/{webhook_id}/deliveries/{delivery['id']}/redeliver")
        assert answer.status_code == 202 and answer.json()["delivery"]["state"] == "pending"
        first, second = inbox.wait_for(2)
        assert first.body == second.body
        assert first.headers["webhook-id"] == second.headers["webhook-id"] == delivery["id"]
        second.verify(secret)
        again = _wait_delivery(hooks, webhook_id, retrieval_id, _delivered)
        assert again["attempts"] == 2

    def test_an_endpoint_failing_too_long_is_disabled_and_says_why(
        self, hooks: Hooks, workspace: uuid.UUID, inbox: Inbox, settle: Callable[[str], str]
    ) -> None:
        """Past EVIDENCE_WEBHOOK_DISABLE_AFTER_SECONDS (8 s here) of failures it is disabled;
        enabling it again resumes the pending delivery."""
        webhook_id, _ = _register(hooks, workspace, inbox)
        inbox.answer(503)
        retrieval_id = settle("cancelled")

        def disabled() -> dict[str, Any] | None:
            webhook = hooks.call("GET", f"/{webhook_id}").json()["webhook"]
            return None if webhook["enabled"] else webhook

        webhook = wait_for(disabled, timeout=30, interval=0.5)
        assert "HTTP 503" in webhook["disabled_reason"]  # type: ignore[index]
        inbox.ok()
        hooks.call("PATCH", f"/{webhook_id}", json={"enabled": True})
        _wait_delivery(hooks, webhook_id, retrieval_id, _delivered)

    def test_other_workspaces_settles_are_not_sent(
        self, hooks: Hooks, workspace: uuid.UUID, inbox: Inbox, http: object, site: TLSSite
    ) -> None:
        """An endpoint hears only its own workspace: another's retrieval sends it nothing,
        while its own next one arrives."""
        from tests.support.factories import make_key, parked

        webhook_id, secret = _register(hooks, workspace, inbox)
        other = uuid.uuid4()
        (foreign,) = parked(other)
        assert Api(http, make_key([other])).cancel(foreign).status_code == 200
        (own,) = parked(workspace)
        assert Api(http, hooks.key).cancel(own).status_code == 200
        _wait_delivery(hooks, webhook_id, own, _delivered)
        assert [r.verify(secret)["data"]["retrieval"]["id"] for r in inbox.received] == [own]


def _check_metrics(http: Any) -> None:
    """/metrics counts deliveries by state and times attempts by outcome."""
    from api.http import metrics

    metrics.WEBHOOKS._cached = None  # read now, not the last scrape's cached figures
    text = http.get("/metrics").text
    assert 'evidence_webhook_deliveries{state="delivered"}' in text
    delivered = [
        line
        for line in text.splitlines()
        if line.startswith('evidence_webhook_attempt_duration_seconds_count{outcome="delivered"}')
    ]
    assert delivered and float(delivered[0].split()[-1]) >= 4
