"""Celery tasks: thin wrappers that unpack ids and call plain functions."""

from __future__ import annotations

import uuid
from typing import Any

from worker.jobs import flower_tasks
from worker.jobs.batch_tokens import run_next_batch
from worker.jobs.celery_app import RETRIEVE_NEXT_TASK, RETRIEVE_TASK, SWEEP_TASK, app
from worker.jobs.sweep import run_sweep
from worker.retrieval.run import run_retrieval


@app.task(name=RETRIEVE_TASK)
def retrieve(retrieval_id: str) -> dict[str, Any]:
    """Claim, fetch, extract and settle one retrieval; return its outcome (for Flower, logs)."""
    return run_retrieval(uuid.UUID(retrieval_id))


@app.task(name=RETRIEVE_NEXT_TASK)
def retrieve_next() -> dict[str, Any] | None:
    """Claim the next batch retrieval (round-robin across workspaces), fetch, extract, settle;
    return its outcome (the retrievals it ran after it are listed on their own)."""
    return flower_tasks.delivered_outcome(run_next_batch())


# No task events for the sweep: one every few seconds would bury the retrievals in Flower's
# task list. The sweeper still shows as a worker (heartbeats), and logs what each sweep did.
@app.task(name=SWEEP_TASK, soft_time_limit=60, time_limit=90, send_events=False)
def sweep() -> dict[str, int]:
    """Expire, rescue and republish (see `worker.jobs.sweep`)."""
    return run_sweep().__dict__
