"""A receiver answering 500 with NUL bytes in its body (`\x00boom\x00`): PostgreSQL refused the
attempt's bookkeeping, so the delivery stayed pending with no error, was sent again every
minute without back-off, and its endpoint was never disabled. Now the error is stored (NUL
replaced), the delivery backs off, and the endpoint is disabled like any failing one."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest

from tests.support.services import wait_for
from tests.support.webhook_receiver import Inbox
from tests.webhooks.support import Hooks
from worker.platform.settings import get_settings
from worker.webhooks.policy import JITTER

pytestmark = pytest.mark.usefixtures("services")


def test_nul_in_a_receivers_answer_is_recorded_and_backs_off(
    hooks: Hooks, workspace: uuid.UUID, inbox: Inbox, settle: Callable[[str], str]
) -> None:
    webhook_id = hooks.create(workspace, inbox.url)["webhook"]["id"]
    inbox.answer(500, b"\x00boom\x00")
    retrieval_id = settle("cancelled")

    def between(delivery: dict[str, Any]) -> tuple[datetime, datetime]:
        due, last = (
            datetime.fromisoformat(delivery[k]) for k in ("next_attempt_at", "last_attempt_at")
        )
        return due, last

    def failed_twice() -> dict[str, Any] | None:
        """The delivery after its second or a later failure was recorded, read between two
        attempts (while one is being sent, `last_attempt_at` is already past the old due)."""
        for delivery in hooks.deliveries(webhook_id):
            if delivery["retrieval_id"] != retrieval_id or delivery["attempts"] < 2:
                continue
            if delivery["last_error"] is None or delivery["next_attempt_at"] is None:
                continue
            due, last = between(delivery)
            return delivery if due > last else None
        return None

    delivery: dict[str, Any] = wait_for(failed_twice, timeout=30, interval=0.1)  # type: ignore[assignment]
    assert delivery["state"] == "pending" and delivery["last_status"] == 500
    assert delivery["last_error"] == "HTTP 500: \ufffdboom\ufffd"
    # Backed off: the next attempt is due at least the schedule's least delay after the last.
    due, last = between(delivery)
    least = get_settings().webhook_retry_base_seconds * (1 - JITTER)
    assert (due - last).total_seconds() >= least - 0.01

    def disabled() -> dict[str, Any] | None:
        webhook = hooks.call("GET", f"/{webhook_id}").json()["webhook"]
        return None if webhook["enabled"] else webhook

    webhook: dict[str, Any] = wait_for(disabled, timeout=30, interval=0.5)  # type: ignore[assignment]
    assert "HTTP 500: \ufffdboom\ufffd" in webhook["disabled_reason"]
