"""Celery tasks: thin wrappers that unpack ids and call plain functions."""

from __future__ import annotations

import uuid

from worker.jobs.celery_app import RETRIEVE_NEXT_TASK, RETRIEVE_TASK, SWEEP_TASK, app
from worker.jobs.runner import run_next_batch, run_retrieval
from worker.jobs.sweep import run_sweep


@app.task(name=RETRIEVE_TASK)
def retrieve(retrieval_id: str) -> str:
    """Claim, fetch, extract and settle one retrieval."""
    return run_retrieval(uuid.UUID(retrieval_id))


@app.task(name=RETRIEVE_NEXT_TASK)
def retrieve_next() -> str:
    """Claim the next batch retrieval (round-robin across workspaces), fetch, extract, settle."""
    return run_next_batch()


@app.task(name=SWEEP_TASK, soft_time_limit=60, time_limit=90)
def sweep() -> dict[str, int]:
    """Expire, rescue and republish (see `worker.jobs.sweep`)."""
    return run_sweep().__dict__
