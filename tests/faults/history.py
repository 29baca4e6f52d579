"""Record every client operation, then check the service's promises against the history.

Like Jepsen: clients log what they asked and what they were told (an error that says nothing
about the outcome is ambiguous, not a failure), and a checker runs over the log and the final
database once the fault has cleared.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import httpx
import sqlalchemy as sa

from tests.support.factories import LEAK_PATTERNS, SETTLED, Api
from tests.support.slowdown import scaled
from worker.domain import clock
from worker.store import db
from worker.store.models import EvidenceRevision, Retrieval

#: Status codes the contract allows on the retrieval routes.
ALLOWED_CODES = {200, 202, 400, 401, 403, 404, 409, 422, 503}


def describe_open(row: Retrieval) -> tuple[str, ...]:
    """An open row, for a stuck report: id, state, attempt, and how far its lease and its last
    publication are from now (a lease that ran out long ago says the sweep is not rescuing)."""

    def ago(at: datetime | None) -> str:
        return "-" if at is None else f"{(clock.now() - at).total_seconds():+.1f}s ago"

    return (str(row.id), row.state, str(row.attempt), f"lease_until {ago(row.lease_until)}",
            f"published {ago(row.published_at)}")  # fmt: skip


@dataclass
class Op:
    """One client operation and what it was told."""

    action: str
    key: str
    status: int | None
    body: dict[str, Any] | None
    at: float
    retry_after: str | None = None
    #: When it was sent (`at` is when its answer came): ops that overlap may be answered in
    #: either order.
    started: float = 0.0


@dataclass
class History:
    """A thread-safe log of operations against one workspace."""

    api: Api
    workspace: uuid.UUID
    ops: list[Op] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _record(self, action: str, key: str, call: Any) -> httpx.Response | None:
        started = time.monotonic()
        try:
            response = call()
        except (httpx.HTTPError, OSError):
            # Ambiguous: the request may or may not have been recorded.
            self._append(Op(action, key, None, None, time.monotonic(), started=started))
            return None
        payload = response.json() if response.content else None
        retry_after = response.headers.get("Retry-After")
        status = response.status_code
        self._append(Op(action, key, status, payload, time.monotonic(), retry_after, started))
        return response

    def _append(self, op: Op) -> None:
        with self._lock:
            self.ops.append(op)

    def post(self, payload: dict[str, Any]) -> httpx.Response | None:
        return self._record("post", payload["mutation_id"], lambda: self.api.post(payload))

    def get(self, retrieval_id: str) -> httpx.Response | None:
        return self._record("get", retrieval_id, lambda: self.api.get(retrieval_id))

    def cancel(self, retrieval_id: str) -> httpx.Response | None:
        return self._record("cancel", retrieval_id, lambda: self.api.cancel(retrieval_id))

    def accepted(self) -> dict[str, str]:
        """mutation_id → retrieval id, for every POST answered 2xx."""
        return {
            op.key: op.body["retrieval"]["id"]
            for op in self.ops
            if op.action == "post" and op.status in (200, 202) and op.body
        }

    # Checking.
    def rows(self) -> list[Retrieval]:
        with db.session_scope(readonly=True) as session:
            return list(
                session.execute(
                    sa.select(Retrieval).where(
                        Retrieval.__table__.c.workspace_id == self.workspace  # type: ignore[attr-defined]
                    )
                ).scalars()
            )

    def wait_settled(self, timeout: float) -> list[Retrieval]:
        """I1 no stuck: poll until every row of the workspace is settled, within `timeout`
        seconds on a quiet machine (stretched by the session's slowdown, as every wait is)."""
        timeout = scaled(timeout)
        deadline = time.monotonic() + timeout
        while True:
            rows = self.rows()
            open_rows = [r for r in rows if r.state not in SETTLED]
            if not open_rows:
                for row in rows:
                    self.get(str(row.id))
                return rows
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"I1 stuck: {len(open_rows)} open after {timeout:g} s: "
                    f"{[describe_open(r) for r in open_rows[:5]]}"
                )
            time.sleep(0.25)

    def check(self, max_attempts: int, settle_timeout: float = 60) -> list[Retrieval]:
        """Check I1–I5 over the history and the database; return the settled rows."""
        rows = self.wait_settled(settle_timeout)
        self._check_codes()
        self._check_one_per_mutation(rows)
        self._check_nothing_lost(rows, max_attempts)
        self._check_settle_once()
        check_revisions(self.workspace)
        return rows

    def _check_codes(self) -> None:
        """I4: every answer is in the contract's set; a 503 is the `upstream_unavailable`
        envelope with a Retry-After of whole seconds (>= 1), so a client knows when to retry."""
        for op in self.ops:
            assert op.status is None or op.status in ALLOWED_CODES, op
            if op.body is not None:
                assert not LEAK_PATTERNS.search(str(op.body)), op
            if op.status == 503:
                assert op.body is not None and op.body["error"]["code"] == "upstream_unavailable"
                assert op.retry_after is not None and op.retry_after.isdigit(), op
                assert int(op.retry_after) >= 1, op

    def _check_one_per_mutation(self, rows: list[Retrieval]) -> None:
        """I2: one row per mutation_id; every 2xx for it named the same retrieval."""
        per_mutation: dict[str, set[str]] = defaultdict(set)
        for op in self.ops:
            if op.action == "post" and op.status in (200, 202) and op.body:
                per_mutation[op.key].add(op.body["retrieval"]["id"])
        for mutation, ids in per_mutation.items():
            assert len(ids) == 1, f"I2: {mutation} answered with {ids}"
        counts: dict[uuid.UUID, int] = defaultdict(int)
        for row in rows:
            counts[row.mutation_id] += 1
        assert all(n == 1 for n in counts.values()), counts

    def _check_nothing_lost(self, rows: list[Retrieval], max_attempts: int) -> None:
        """I5: every accepted mutation exists and settled, with settled_at, within attempts."""
        by_id = {str(r.id): r for r in rows}
        for mutation, retrieval_id in self.accepted().items():
            row = by_id.get(retrieval_id)
            assert row is not None, f"I5: accepted {mutation} has no row"
            assert row.state in SETTLED and row.settled_at is not None, row
            assert row.attempt <= max_attempts, row
            if row.state == "completed":
                assert row.result is not None
            if row.state in ("unconfirmed", "expired"):
                assert row.result is None

    def _check_settle_once(self) -> None:
        """A retrieval settles once: once an answer showed it settled, no request sent after
        that answer came shows it open, and every answer that shows it settled shows the same.
        (Requests that overlap may be answered in either order: one that read it open can be
        answered after one that read it settled.)"""
        first_settled: dict[str, dict[str, Any]] = {}
        settled_by: dict[str, float] = {}  # when the first answer showing it settled came
        answers = [
            (op, op.body["retrieval"])
            for op in self.ops
            if op.status in (200, 202) and op.body and "retrieval" in op.body
        ]
        for op, retrieval in answers:
            if retrieval["state"] in SETTLED:
                seen = first_settled.setdefault(retrieval["id"], retrieval)
                assert seen == retrieval, f"changed after settling:\n{seen}\n{retrieval}"
                settled_by[retrieval["id"]] = min(settled_by.get(retrieval["id"], op.at), op.at)
        for op, retrieval in answers:
            settled_at = settled_by.get(retrieval["id"])
            if retrieval["state"] not in SETTLED and settled_at is not None:
                assert op.started <= settled_at, f"left a settled state: {retrieval}"


def check_revisions(workspace: uuid.UUID) -> None:
    """I3: per evidence item, one revision per distinct content hash, numbered 1..n."""
    from worker.store.models import Evidence

    with db.session_scope(readonly=True) as session:
        evidence_ids = (
            session.execute(
                sa.select(Evidence.__table__.c.id).where(  # type: ignore[attr-defined]
                    Evidence.__table__.c.workspace_id == workspace  # type: ignore[attr-defined]
                )
            )
            .scalars()
            .all()
        )
        for evidence_id in evidence_ids:
            revisions = session.execute(
                sa.select(
                    EvidenceRevision.__table__.c.revision,  # type: ignore[attr-defined]
                    EvidenceRevision.__table__.c.content_sha256,  # type: ignore[attr-defined]
                ).where(EvidenceRevision.__table__.c.evidence_id == evidence_id)  # type: ignore[attr-defined]
            ).all()
            hashes = [h for _, h in revisions]
            assert len(hashes) == len(set(hashes)), f"I3: duplicate content in {evidence_id}"
            assert sorted(n for n, _ in revisions) == list(range(1, len(revisions) + 1))
