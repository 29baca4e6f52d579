"""Report ids are numbered per workspace: 1, 2, 3, … whatever other workspaces store."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from sqlalchemy.orm import Session

from tests.conftest import Env
from tests.support.databases import fresh_database as new_database
from tests.support.factories import Api, make_key
from tests.support.read_client import ReadApi
from worker.content.results import Content, content_result
from worker.domain import clock
from worker.store import db, evidence, reports
from worker.store.migrate import alembic_config, upgrade

pytestmark = pytest.mark.lifecycle

#: Threads creating evidence items at once, and items each creates.
THREADS = 8
PER_THREAD = 4


def _record(workspace: uuid.UUID, marker: str) -> uuid.UUID:
    """Store a new evidence item whose text carries `marker`; return its id."""
    url = f"https://example.org/{marker}/{uuid.uuid4().hex}"
    content = Content(
        text=f"Field notes about {marker} and the river.",
        title=f"Notes {marker}",
        source_url=url,
        content_kind="document_text",
    )
    result = content_result("url_text", content, clock.now())
    evidence_id, _, _ = db.with_transient_retry(
        lambda s: evidence.record(s, workspace, "url_text", url, result, clock.now())
    )
    return evidence_id


def _report_ids(workspace: uuid.UUID) -> dict[uuid.UUID, int]:
    with db.session_scope(readonly=True) as session:
        rows = session.execute(
            sa.select(reports.REPORT.c.evidence_id, reports.REPORT.c.report_id)
            .join(reports.EVIDENCE, reports.EVIDENCE.c.id == reports.REPORT.c.evidence_id)
            .where(reports.EVIDENCE.c.workspace_id == workspace)
        )
        return {row.evidence_id: row.report_id for row in rows}


class TestPerWorkspace:
    """What a workspace sees of report ids."""

    def test_each_workspace_counts_from_one(self, http: object) -> None:
        """Items stored alternately in two workspaces are numbered 1, 2, 3 in each."""
        first, second = uuid.uuid4(), uuid.uuid4()
        marker = "quillon" + uuid.uuid4().hex[:8]
        created: dict[uuid.UUID, list[uuid.UUID]] = {first: [], second: []}
        for _ in range(3):
            for workspace in (first, second):
                created[workspace].append(_record(workspace, marker))
        for workspace, ids in created.items():
            assert [_report_ids(workspace)[e] for e in ids] == [1, 2, 3]
            # As the read tools show them: every hit carries its item's per-workspace number.
            read = ReadApi(Api(http, make_key([workspace])))
            query = {"workspace_id": str(workspace), "query": marker, "limit": 50}
            hits = read.ok("chunks/search", query)["result"]["chunks"]
            assert sorted({hit["report_id"] for hit in hits}) == [1, 2, 3]

    def test_new_revision_keeps_the_report_id(self) -> None:
        """A changed item keeps its number; the next new item gets the next one."""
        workspace = uuid.uuid4()
        url = f"https://example.org/kept/{uuid.uuid4().hex}"

        def store(text: str) -> tuple[uuid.UUID, int]:
            content = Content(text=text, source_url=url, content_kind="document_text")
            result = content_result("url_text", content, clock.now())
            return db.with_transient_retry(
                lambda s: evidence.record(s, workspace, "url_text", url, result, clock.now())
            )[:2]

        evidence_id, revision = store("First version of the notes.")
        again, revised = store("Second version of the notes, changed.")
        assert (again, revised) == (evidence_id, revision + 1)
        other = _record(workspace, "next")
        assert _report_ids(workspace) == {evidence_id: 1, other: 2}

    def test_concurrent_creates_get_distinct_ids(self) -> None:
        """Threads creating items at once in two workspaces: each gets exactly 1..N, no repeats."""
        workspaces = (uuid.uuid4(), uuid.uuid4())
        barrier = threading.Barrier(THREADS)
        errors: list[BaseException] = []

        def work(n: int) -> None:
            try:
                barrier.wait(timeout=30)
                for i in range(PER_THREAD):
                    _record(workspaces[(n + i) % 2], f"race{n}x{i}")
            except BaseException as exc:  # noqa: BLE001  (reported by the test thread)
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert not errors, errors
        per_workspace = THREADS * PER_THREAD // 2
        for workspace in workspaces:
            ids = sorted(_report_ids(workspace).values())
            assert ids == list(range(1, per_workspace + 1))


@pytest.fixture
def fresh_database(env: Env, tmp_path: Path) -> Iterator[str]:
    """An empty database of the suite's kind, dropped afterwards."""
    with new_database(env.db_kind, tmp_path) as url:
        yield url


#: evidence_report as migration 0002 made it: one sequence for every workspace.
OLD_REPORT = sa.Table(
    "evidence_report",
    sa.MetaData(),
    sa.Column("report_id", sa.Integer, primary_key=True),
    sa.Column("evidence_id", sa.Uuid, nullable=False),
)


class TestMigration:
    """Migration 0003 keeps every existing report id and numbers new items per workspace."""

    @staticmethod
    def _item(connection: sa.Connection, workspace: uuid.UUID, at: int) -> uuid.UUID:
        evidence_id = uuid.uuid4()
        connection.execute(
            sa.insert(evidence.EVIDENCE).values(
                id=evidence_id,
                workspace_id=workspace,
                kind="url_text",
                url_key=f"https://example.org/{evidence_id}",
                language="",
                latest_revision=0,
                created_at=clock.now() + timedelta(seconds=at),
            )
        )
        return evidence_id

    @staticmethod
    def _ids(connection: sa.Connection, table: sa.Table) -> dict[uuid.UUID, int]:
        rows = connection.execute(sa.select(table.c.evidence_id, table.c.report_id))
        return {row.evidence_id: row.report_id for row in rows}

    def test_upgrade_keeps_ids_and_counts_on_per_workspace(self, fresh_database: str) -> None:
        """Old ids survive the upgrade; each workspace then continues after its own highest."""
        url = fresh_database
        upgrade(url, "0002")
        first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        engine = db.make_engine(url)
        try:
            with engine.begin() as connection:
                order = [first, second, first, second, first]
                items = [self._item(connection, ws, n) for n, ws in enumerate(order)]
                for evidence_id in items:
                    connection.execute(sa.insert(OLD_REPORT).values(evidence_id=evidence_id))
                old = self._ids(connection, OLD_REPORT)
            assert [old[e] for e in items] == [1, 2, 3, 4, 5]  # one sequence for everyone

            upgrade(url, "head")
            with engine.begin() as connection:
                assert self._ids(connection, reports.REPORT) == old
                fresh = {ws: self._item(connection, ws, 10) for ws in (first, second, third)}
            with Session(engine) as session, session.begin():
                numbered = {ws: reports.ensure_report(session, ws, e) for ws, e in fresh.items()}
                assert reports.ensure_report(session, first, fresh[first]) == numbered[first]
            assert numbered == {first: 6, second: 5, third: 1}

            # Downgrade goes back to one sequence, renumbering in creation order.
            command.downgrade(alembic_config(url), "0002")
            with engine.begin() as connection:
                renumbered = self._ids(connection, OLD_REPORT)
            assert [renumbered[e] for e in items] == [1, 2, 3, 4, 5]
            assert sorted(renumbered.values()) == list(range(1, 9))
            upgrade(url, "head")
        finally:
            engine.dispose()
