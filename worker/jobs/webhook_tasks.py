"""The webhook Celery tasks: thin wrappers over `worker.webhooks.delivery` and the webhook
sweep (`worker.jobs.webhook_outbox`)."""

from __future__ import annotations

import uuid
from typing import Any

from worker.jobs.celery_app import DELIVER_WEBHOOK_TASK, WEBHOOK_SWEEP_TASK, app
from worker.jobs.webhook_outbox import run_webhook_sweep
from worker.webhooks.delivery import run_delivery


@app.task(name=DELIVER_WEBHOOK_TASK)
def deliver(delivery_id: str) -> dict[str, Any]:
    """Send one attempt of a webhook delivery (see `run_delivery`)."""
    return run_delivery(uuid.UUID(delivery_id))


@app.task(name=WEBHOOK_SWEEP_TASK, soft_time_limit=60, time_limit=90, send_events=False)
def sweep() -> dict[str, int]:
    """Fail expired and republish due webhook deliveries (see `run_webhook_sweep`)."""
    return run_webhook_sweep().__dict__
