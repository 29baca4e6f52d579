"""Evidence items as "reports": an integer id per workspace, and the columns hits show."""

from __future__ import annotations

import functools
import uuid
from datetime import date
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.domain.clock import as_utc
from worker.store import at_commit, db
from worker.store.models import Evidence, EvidenceRevision
from worker.store.read_models import EvidenceReport, WorkspaceReportCounter

EVIDENCE: sa.Table = Evidence.__table__  # type: ignore[attr-defined]
REVISION: sa.Table = EvidenceRevision.__table__  # type: ignore[attr-defined]
REPORT: sa.Table = EvidenceReport.__table__  # type: ignore[attr-defined]
COUNTER: sa.Table = WorkspaceReportCounter.__table__  # type: ignore[attr-defined]


_REPORT_OF = sa.select(REPORT.c.report_id).where(
    REPORT.c.evidence_id == sa.bindparam("b_evidence_id")
)
_REPORTS_OF = sa.select(REPORT.c.evidence_id).where(
    REPORT.c.evidence_id.in_(sa.bindparam("b_ids", expanding=True))
)
_INSERT_REPORT = sa.insert(REPORT)


@functools.cache
def _next_report_ids(dialect: str) -> sa.Insert:
    """Bump the workspace's counter by `b_count` (creating it at that) and return the new value.

    The upsert takes the counter row's lock, so concurrent allocations in one workspace wait
    for each other and each gets the next numbers (PostgreSQL re-reads the committed row under
    READ COMMITTED); SQLite's writers already run one at a time. Other workspaces never wait.
    """
    count = sa.bindparam("b_count", type_=sa.Integer)
    stmt = db.insert_for(dialect)(COUNTER).values(
        workspace_id=sa.bindparam("b_workspace_id"), last_report_id=count
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=["workspace_id"], set_={"last_report_id": COUNTER.c.last_report_id + count}
    )
    return stmt.returning(COUNTER.c.last_report_id)


@functools.cache
def _number_report() -> sa.Insert:
    """PostgreSQL: bump the counter and record the item's report id in one statement (the
    upsert as a data-modifying CTE, its new value inserted from it)."""
    counter = _next_report_ids(db.POSTGRESQL).cte("counter")
    numbered = sa.select(
        sa.bindparam("b_evidence_id", type_=sa.Uuid),
        sa.bindparam("b_workspace_id", type_=sa.Uuid),
        counter.c.last_report_id,
    )
    return (
        sa.insert(REPORT)
        .add_cte(counter)
        .from_select(["evidence_id", "workspace_id", "report_id"], numbered)
        .returning(REPORT.c.report_id)
    )


#: `session.info` key: items to number when the transaction commits (evidence id -> workspace,
#: whether the item is new in this transaction).
_TO_NUMBER = "evidence.reports_to_number"


def number_at_commit(
    session: Session, workspace_id: uuid.UUID, evidence_id: uuid.UUID, *, new_item: bool = False
) -> None:
    """Give the item its report id as the transaction's last statement (`ensure_report`).

    Numbering locks the workspace's counter row until the commit, so every other new item of
    the workspace waits for this transaction to end: done first, the wait covered the rest of a
    settle (the passages, the outcome, the freshness rows), and a batch's settles queued behind
    each other on it (most of a worker's database turns spent waiting, measured at the
    latency mix). Done last, it covers one statement and the commit.
    """
    session.info.setdefault(_TO_NUMBER, {})[evidence_id] = (workspace_id, new_item)
    at_commit.run_last(session, _number_pending)


def _number_pending(session: Session) -> None:
    """Number the transaction's new items: one counter bump per workspace, not per item.

    Workspaces are numbered in id order, so two transactions that both number items of the
    same two workspaces take the counters' locks in the same order (no deadlock).
    """
    pending: dict[uuid.UUID, tuple[uuid.UUID, bool]] = session.info.pop(_TO_NUMBER, {})
    if len(pending) == 1:
        [(evidence_id, (workspace_id, new_item))] = pending.items()
        ensure_report(session, workspace_id, evidence_id, new_item=new_item)
        return
    known = [evidence_id for evidence_id, (_, new_item) in pending.items() if not new_item]
    numbered = set(session.execute(_REPORTS_OF, {"b_ids": known}).scalars()) if known else set()
    by_workspace: dict[uuid.UUID, list[uuid.UUID]] = {}
    for evidence_id, (workspace_id, _) in pending.items():
        if evidence_id not in numbered:
            by_workspace.setdefault(workspace_id, []).append(evidence_id)
    for workspace_id in sorted(by_workspace):
        _number_many(session, workspace_id, by_workspace[workspace_id])


def _number_many(session: Session, workspace_id: uuid.UUID, evidence_ids: list[uuid.UUID]) -> None:
    """Give `evidence_ids` (none numbered yet) the workspace's next report ids, in order."""
    params = {"b_workspace_id": workspace_id, "b_count": len(evidence_ids)}
    last = int(session.execute(_next_report_ids(db.dialect(session)), params).scalar_one())
    first = last - len(evidence_ids) + 1
    rows = [
        {"evidence_id": evidence_id, "workspace_id": workspace_id, "report_id": first + offset}
        for offset, evidence_id in enumerate(evidence_ids)
    ]
    session.execute(_INSERT_REPORT, rows)


def ensure_report(
    session: Session, workspace_id: uuid.UUID, evidence_id: uuid.UUID, *, new_item: bool = False
) -> int:
    """The evidence item's report id, numbering it next in its workspace the first time.

    Callers hold the item's row lock (`evidence_store.record` upserts it first), so two
    writers of one item never both number it. `new_item`: the item was created in this
    transaction, so it has none yet (no need to look).
    """
    if not new_item:
        existing = session.execute(_REPORT_OF, {"b_evidence_id": evidence_id}).scalar_one_or_none()
        if existing is not None:
            return int(existing)
    dialect = db.dialect(session)
    if dialect == db.POSTGRESQL:
        params = {"b_evidence_id": evidence_id, "b_workspace_id": workspace_id, "b_count": 1}
        return int(session.execute(_number_report(), params).scalar_one())
    params = {"b_workspace_id": workspace_id, "b_count": 1}
    report_id = int(session.execute(_next_report_ids(dialect), params).scalar_one())
    session.execute(
        _INSERT_REPORT,
        {"evidence_id": evidence_id, "workspace_id": workspace_id, "report_id": report_id},
    )
    return report_id


def with_report(stmt: sa.Select[Any], table: sa.Table) -> sa.Select[Any]:
    """Join a passage/image table to its evidence item, revision and report id."""
    return (
        stmt.add_columns(
            REPORT.c.report_id,
            REVISION.c.title,
            REVISION.c.created_at.label("revised_at"),
            EVIDENCE.c.url_key,
        )
        .select_from(table)
        .join(EVIDENCE, EVIDENCE.c.id == table.c.evidence_id)
        .join(
            REVISION,
            (REVISION.c.evidence_id == table.c.evidence_id)
            & (REVISION.c.revision == table.c.revision),
        )
        .join(REPORT, REPORT.c.evidence_id == table.c.evidence_id)
    )


def filter_evidence(
    stmt: sa.Select[Any], table: sa.Table, *, kind: str | None = None, language: str | None = None
) -> sa.Select[Any]:
    """Keep latest revisions only, of one kind and language (primary subtag matches) if given."""
    stmt = stmt.where(table.c.revision == EVIDENCE.c.latest_revision)
    if kind:
        stmt = stmt.where(EVIDENCE.c.kind == kind)
    if language:
        tag = language.lower()
        stmt = stmt.where(sa.or_(EVIDENCE.c.language == tag, EVIDENCE.c.language.like(f"{tag}-%")))
    return stmt


def report_fields(row: Any, score: float) -> dict[str, Any]:
    """report_id, title, date and score of a hit, as the read tools show them."""
    revised: date = as_utc(row.revised_at).date()
    return {
        "report_id": int(row.report_id),
        "title": row.title or row.url_key,
        "date": revised.isoformat(),
        "score": float(score),
    }
