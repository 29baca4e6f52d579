"""Settle many claims in one transaction: each fenced exactly as alone, their rows written together.

A worker settling hundreds of batch retrievals a minute spent most of its database CPU on the
per-statement and per-commit cost of doing it one transaction each (~11 statements and two
commits a retrieval, ~0.5 ms of client CPU apiece). Here one transaction settles a group: one
statement locks every claimed row and reads what fences it, the evidence is written as alone,
one executemany writes the outcomes, one read stages the webhooks, and the passages, images
and request rows of the whole group go out at the commit as one executemany each
(`worker.store.at_commit`).

The fence is the single settle's (`retrievals.settle`): a claim wins only while its row is
still `running` with the attempt that claimed it and before `valid_until`. The rows are locked
first (PostgreSQL `FOR UPDATE`; SQLite runs one writer at a time), so a claim that won the
check still holds when its outcome is written; the outcome UPDATE keeps the same guard, and if
it ever matched fewer rows than won the check, the whole transaction is rolled back
(`retrievals.Fenced`) and the caller settles the group one by one. A claim that lost writes
nothing. Lock order: the group's retrieval rows, then its evidence items in key order (two
groups writing the same items never wait for each other in a cycle).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.content.results import Result, has_content
from worker.domain.clock import as_utc
from worker.domain.states import RetrievalState as S
from worker.retrieval.records import Claim
from worker.retrieval.transitions import SETTLE, AfterSettle, Fenced, settle_claim
from worker.store import db, evidence
from worker.store.retrieval_view import RETRIEVAL
from worker.store.typed import rowcount
from worker.webhooks import records as webhooks

if TYPE_CHECKING:
    from worker.content.images import ImageRef


@dataclass
class SettleJob:
    """One claim's outcome, as `retrievals.settle_claim` takes it."""

    claim: Claim
    result: Result
    now: datetime
    images: Sequence[ImageRef] = ()
    then: AfterSettle | None = None
    stored: tuple[uuid.UUID, int] | None = None


def settle_alone(job: SettleJob) -> bool:
    """Settle `job` in its own transaction (`retrievals.settle_claim`)."""
    return settle_claim(job.claim, job.result, job.now, job.images, job.then, job.stored)


def _holders(postgres: bool) -> sa.Select[tuple[uuid.UUID, str, int, datetime]]:
    stmt = sa.select(
        RETRIEVAL.c.id, RETRIEVAL.c.state, RETRIEVAL.c.attempt, RETRIEVAL.c.valid_until
    ).where(RETRIEVAL.c.id.in_(sa.bindparam("b_ids", expanding=True)))
    return stmt.with_for_update() if postgres else stmt


_HOLDERS = {True: _holders(True), False: _holders(False)}


def still_holds(job: SettleJob, state: str, attempt: int, valid_until: datetime) -> bool:
    """The single settle's fence: still running, on the claiming attempt, before valid_until."""
    return (
        state == S.RUNNING.value
        and attempt == job.claim.attempt
        and as_utc(valid_until) > as_utc(job.now)
    )


def _item_order(job: SettleJob) -> tuple[str, str, str, str]:
    """The key of the evidence item a job writes, as `evidence.record` finds it."""
    workspace = str(job.claim.workspace_id)
    try:
        provenance: dict[str, Any] = dict(job.result.get("provenance", {}))
        url = provenance.get("source_url") or job.claim.url
        language = (provenance.get("language") or "").lower()
        return (workspace, job.claim.kind, evidence.normalise_url(url), language)
    except Exception:  # noqa: BLE001  (only the lock order: one job's URL must not fail the rest)
        return (workspace, job.claim.kind, str(job.claim.url), "")


def settle_many(session: Session, jobs: Sequence[SettleJob]) -> list[bool]:
    """Record every job's outcome in `session`'s transaction; which ones still held their claim.

    A job that lost its claim writes nothing (the caller expires it if it is past
    `valid_until`, as after a single fenced settle). Raises `Fenced` (the transaction must be
    rolled back) if an outcome could not be written after its claim checked as held.
    """
    postgres = db.dialect(session) == db.POSTGRESQL
    ids = sorted({job.claim.retrieval_id for job in jobs})
    rows = {row.id: row for row in session.execute(_HOLDERS[postgres], {"b_ids": ids})}
    won: list[bool] = []
    seen: set[uuid.UUID] = set()
    for job in jobs:
        row = rows.get(job.claim.retrieval_id)
        # Two jobs for one row (a zombie and its successor): at most one can hold the claim.
        holds = (
            row is not None
            and job.claim.retrieval_id not in seen
            and still_holds(job, row.state, row.attempt, row.valid_until)
        )
        if holds:
            seen.add(job.claim.retrieval_id)
        won.append(holds)
    winners = [job for job, holds in zip(jobs, won, strict=True) if holds]
    if not winners:
        return won
    outcomes = []
    for job in sorted(winners, key=_item_order):
        evidence_id, revision, written = _record(session, job)
        if job.then is not None:
            job.then(session, evidence_id, revision, written)
        outcomes.append(
            {
                "b_id": job.claim.retrieval_id,
                "b_attempt": job.claim.attempt,
                "b_now": job.now,
                "b_result": job.result,
                "b_evidence_id": evidence_id,
                "b_revision": revision,
            }
        )
    if rowcount(session.execute(SETTLE, outcomes)) != len(outcomes):
        raise Fenced("a group's outcome lost its claim after the check")
    webhooks.record_settled(
        session, [job.claim.retrieval_id for job in winners], max(job.now for job in winners)
    )
    return won


def _record(session: Session, job: SettleJob) -> tuple[uuid.UUID | None, int | None, bool]:
    """The evidence revision the job's outcome names (written now unless it is stored)."""
    if not has_content(job.result):
        return None, None, False
    if job.stored is not None:
        return job.stored[0], job.stored[1], False
    return evidence.record(
        session,
        job.claim.workspace_id,
        job.claim.kind,
        job.claim.url,
        job.result,
        job.now,
        job.images,
    )
