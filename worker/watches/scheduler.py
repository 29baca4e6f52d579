"""One scheduler tick: the due watches' runs recorded as batch-lane retrievals, in one transaction.

Due watches are read `FOR UPDATE SKIP LOCKED` (two ticks at once, say a second beat in a lock
hand-over, each take their own watches and never wait on each other), soonest first, at most
`EVIDENCE_WATCH_TICK_BATCH`. Each gets one run for the latest slot due (`schedule.due_run`): a
retrieval whose mutation_id is derived from the watch and that slot, so a tick repeated for the
same slot (a crash after the commit, before the watch row's update could be seen) is a replay of
the same retrieval, never a second one. Runs are recorded as a batch is
(`records.create_batch_within_quota`): in the batch lane, within the workspace's open ceiling,
a run the ceiling refuses is left due for the next tick. Publishing the new ids is the caller's
(`worker.jobs.watch_tasks`), after the commit. Before the runs, the tick announces the runs
that settled since (`events.report_settled`).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.domain import clock
from worker.lanes import quota_overrides
from worker.platform.settings import get_settings
from worker.retrieval import records
from worker.watches import events, schedule
from worker.watches.store import WATCH


@dataclass
class TickReport:
    """What one tick did."""

    #: Retrievals this tick created (to publish), and runs that were replays of known ones.
    created: list[uuid.UUID] = field(default_factory=list)
    replayed: int = 0
    #: Runs the workspace's open ceiling refused (left due).
    refused: int = 0
    #: Slots counted as missed.
    missed: int = 0
    #: Settled runs announced (`events.report_settled`).
    reported: int = 0


def _due(session: Session, now: datetime, limit: int) -> list[sa.Row[Any]]:
    query = (
        sa.select(WATCH)
        .where(WATCH.c.enabled, WATCH.c.next_run_at <= now)
        .order_by(WATCH.c.next_run_at)
        .limit(limit)
        .with_for_update(skip_locked=True)
    )
    return list(session.execute(query).all())


def _open_limit(session: Session, workspace_id: uuid.UUID) -> int:
    override = quota_overrides.get_override(session, workspace_id)
    if override is not None and override.open_retrievals is not None:
        return override.open_retrievals
    return get_settings().quota_open_retrievals


def tick(session: Session, now: datetime, limit: int | None = None) -> TickReport:
    """Start the runs of the watches due at `now` (the caller commits, then publishes)."""
    settings = get_settings()
    ttl = timedelta(seconds=settings.receipt_ttl_seconds)
    batch = limit or settings.watch_tick_batch
    report = TickReport(reported=events.report_settled(session, now, batch))
    rows = _due(session, now, batch)
    by_workspace: dict[uuid.UUID, list[tuple[sa.Row[Any], schedule.Run, uuid.UUID]]]
    by_workspace = defaultdict(list)
    for row in rows:
        # SQLite returns naive datetimes (UTC): compared with `now` as such.
        next_run_at = clock.as_utc(row.next_run_at)
        run = schedule.due_run(row.id, row.interval_seconds, next_run_at, now)
        if run is not None:
            mutation = schedule.run_mutation_id(row.id, run.slot)
            by_workspace[row.workspace_id].append((row, run, mutation))
    for workspace_id, runs in sorted(by_workspace.items()):  # one lock order
        requests = [
            records.NewRetrieval(workspace_id, mutation, row.url, row.kind, row.language or None)
            for row, _, mutation in runs
        ]
        outcome = records.create_batch_within_quota(
            session, workspace_id, requests, now, ttl, _open_limit(session, workspace_id), len(runs)
        )
        for row, run, mutation in runs:
            made = outcome.created.get(mutation) or outcome.existing.get(mutation)
            if made is None:
                report.refused += 1
                continue
            if mutation in outcome.created:
                report.created.append(made.id)
            else:
                report.replayed += 1
            report.missed += run.missed
            session.execute(
                sa.update(WATCH)
                .where(WATCH.c.id == row.id)
                .values(
                    last_run_at=run.slot,
                    next_run_at=run.next_run_at,
                    missed_runs=WATCH.c.missed_runs + run.missed,
                    last_retrieval_id=made.id,
                )
            )
    return report
