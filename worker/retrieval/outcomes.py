"""What one delivery of a retrieval task did: its small, JSON-serialisable return value.

Celery marks every delivery SUCCESS, whatever became of the retrieval. The return value travels
in the worker's task-succeeded event (Flower's task list shows it) and in the worker's
"Task ... succeeded" log line, so it is where an operator reads how the retrieval ended.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Literal

#: What this delivery did: settled the retrieval, lost its claim (a cancel, expiry or newer
#: attempt came first: nothing it produced was recorded), or found nothing to claim (a duplicate
#: or late delivery of a retrieval that is running elsewhere or already settled), or failed (its
#: run raised: the claim was given back, `runner.give_back`).
Delivery = Literal["settled", "fenced", "skipped", "failed"]


def task_outcome(
    retrieval_id: uuid.UUID,
    delivery: Delivery,
    state: str | None,
    result: Mapping[str, Any] | None = None,
    attempt: int | None = None,
) -> dict[str, Any]:
    """The task's return value: the retrieval as recorded after this delivery, and the delivery.

    `state`, `status` and `reason` describe the retrieval's row (`state` is None when there is
    no such row); `attempt` is this delivery's claim (None when it claimed nothing). Never the
    page text: the value is logged and kept in Flower.
    """
    # Status and reason first: Flower's task list shows the start of the value in one line.
    return {
        "status": (result or {}).get("status"),
        "reason": (result or {}).get("reason"),
        "state": state,
        "delivery": delivery,
        "attempt": attempt,
        "retrieval_id": str(retrieval_id),
    }
