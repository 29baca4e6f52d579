"""A watch's run, once settled, announced: `evidence.changed`, `watch.failing`, `watch.recovered`.

Each tick (`scheduler.tick`) reads the watches whose last run settled and was not yet reported
(`reported_retrieval_id` behind `last_retrieval_id`), `FOR UPDATE SKIP LOCKED`, and records in
its transaction, through the webhook outbox (`worker.webhooks.events`):

* a run that produced text (`ready` or `partial`) with another revision than the one the watch
  last saw: `evidence.changed`, with both revisions, a bounded diff summary and the diff route's
  path. The first run only sets the baseline; a 304 confirms the same revision: no event.
* a run that did not (any other outcome): `watch.failing`, once, when the watch was not failing
  yet; the next run that produces text sends `watch.recovered`.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.diff import diff_text
from worker.domain.states import SETTLED_STATES
from worker.store import evidence
from worker.store.models import Retrieval
from worker.watches.store import WATCH
from worker.webhooks import events

RETRIEVAL: sa.Table = Retrieval.__table__  # type: ignore[attr-defined]
#: Result statuses that count as a successful run (the source answered with text).
SUCCESS = ("ready", "partial")
#: Most characters of the unified diff an event carries (the route has the whole).
MAX_EXCERPT_CHARS = 2000
#: Most characters of one line of it.
MAX_EXCERPT_LINE_CHARS = 160


def _pending_reports(session: Session, limit: int) -> list[sa.Row[Any]]:
    query = (
        sa.select(
            WATCH,
            RETRIEVAL.c.state.label("run_state"),
            RETRIEVAL.c.result.label("run_result"),
            RETRIEVAL.c.evidence_id.label("run_evidence_id"),
            RETRIEVAL.c.evidence_revision.label("run_revision"),
        )
        .join(RETRIEVAL, RETRIEVAL.c.id == WATCH.c.last_retrieval_id)
        .where(
            sa.or_(
                WATCH.c.reported_retrieval_id.is_(None),
                WATCH.c.reported_retrieval_id != WATCH.c.last_retrieval_id,
            ),
            RETRIEVAL.c.state.in_(sorted(s.value for s in SETTLED_STATES)),
        )
        .limit(limit)
        .with_for_update(of=WATCH, skip_locked=True)
    )
    return list(session.execute(query).all())


def diff_summary(old: str, new: str) -> dict[str, Any]:
    """What changed in the text, bounded: counts and the start of the unified diff, each line
    cut short (paragraphs are long lines: uncut, the first few removed ones would fill it)."""
    diff = diff_text(old, new, ("previous", "new"))
    lines, size, cut = [], 0, diff["truncated"]
    for line in diff["unified"].splitlines():
        if len(line) > MAX_EXCERPT_LINE_CHARS:
            line, cut = line[: MAX_EXCERPT_LINE_CHARS - 1] + "…", True
        if size + len(line) + 1 > MAX_EXCERPT_CHARS:
            cut = True
            break
        lines.append(line)
        size += len(line) + 1
    return {
        "lines_added": diff["lines_added"],
        "lines_removed": diff["lines_removed"],
        "excerpt": "\n".join(lines),
        "excerpt_truncated": cut,
    }


def _changed(
    session: Session, row: sa.Row[Any], evidence_id: uuid.UUID, revision: int
) -> dict[str, Any] | None:
    """The `evidence.changed` data, or None (first run, or the same revision)."""
    previous = row.last_revision
    if previous is None or previous == revision:
        return None
    old = evidence.get_revision(session, evidence_id, previous)
    new = evidence.get_revision(session, evidence_id, revision)
    if old is None or new is None:  # the watch's URL changed: a new baseline
        return None
    return {
        "watch_id": str(row.id),
        "url": row.url,
        "retrieval_id": str(row.last_retrieval_id),
        "evidence_id": str(evidence_id),
        "previous_revision": previous,
        "revision": revision,
        "diff": diff_summary(old.text, new.text),
        "diff_url": (f"/research-api/evidence/{evidence_id}/diff?from={previous}&to={revision}"),
    }


def report_settled(session: Session, now: datetime, limit: int) -> int:
    """Announce the settled, unreported runs of up to `limit` watches; how many were reported."""
    rows = _pending_reports(session, limit)
    for row in rows:
        result = row.run_result or {}
        ok = (
            row.run_state == "completed"
            and result.get("status") in SUCCESS
            and row.run_revision is not None
        )
        retrieval_id = row.last_retrieval_id
        values: dict[str, Any] = {"reported_retrieval_id": retrieval_id}
        if ok:
            changed = _changed(session, row, row.run_evidence_id, row.run_revision)
            if changed is not None:
                events.record_event(
                    session, row.workspace_id, retrieval_id, events.EVIDENCE_CHANGED, changed, now
                )
            if row.failing:
                recovered = {
                    "watch_id": str(row.id),
                    "url": row.url,
                    "retrieval_id": str(retrieval_id),
                    "evidence_id": str(row.run_evidence_id),
                    "revision": row.run_revision,
                }
                events.record_event(
                    session, row.workspace_id, retrieval_id, events.WATCH_RECOVERED, recovered, now
                )
            values |= {"last_revision": row.run_revision, "failing": False}
        else:
            if not row.failing:
                failing = {
                    "watch_id": str(row.id),
                    "url": row.url,
                    "retrieval_id": str(retrieval_id),
                    "state": row.run_state,
                    "status": result.get("status"),
                    "reason": result.get("reason"),
                }
                events.record_event(
                    session, row.workspace_id, retrieval_id, events.WATCH_FAILING, failing, now
                )
            values["failing"] = True
        session.execute(sa.update(WATCH).where(WATCH.c.id == row.id).values(values))
    return len(rows)
