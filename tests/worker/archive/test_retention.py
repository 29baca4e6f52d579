"""Retention of the archived exchanges, and their disk use in /metrics.

Real retrievals (the worker's own entry point, in this process) fill the archive; the index's
times are then moved back to make records old. Old rows go, a response a recent revisit still
refers to stays, a sealed file goes once no row names it and it is old, the evidence stays.
"""

from __future__ import annotations

import os
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from tests.lifecycle.test_freshness import Origin, completed, run, serve
from tests.support.factories import Api
from tests.support.pages import article
from tests.support.tls_site import TLSSite
from tests.worker.archive.test_warc_archive import rows


@pytest.fixture
def archive_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from worker.platform.settings import get_settings

    directory = tmp_path / "archive"
    monkeypatch.setattr(get_settings(), "archive_dir", directory)
    return directory


def age(retrieval_id: str, days: float) -> None:
    """Make the retrieval's archived exchange `days` older (in Python: SQLite has no interval
    arithmetic)."""
    from worker.store import db
    from worker.store.archive_index import ARCHIVE_RECORD, T

    def write(session: object) -> None:
        found = session.execute(  # type: ignore[attr-defined]
            sa.select(T.id, T.fetched_at).where(T.retrieval_id == uuid.UUID(retrieval_id))
        )
        for row_id, fetched_at in list(found):
            session.execute(  # type: ignore[attr-defined]
                sa.update(ARCHIVE_RECORD)
                .where(T.id == row_id)
                .values(fetched_at=fetched_at - timedelta(days=days))
            )

    db.with_transient_retry(write)


def test_purge_keeps_what_a_revisit_needs_then_removes_files(
    api: Api, site: TLSSite, workspace: uuid.UUID, archive_dir: Path
) -> None:
    from worker.archive import capture, retention
    from worker.domain import clock

    origin = Origin(article(f"Retained lakes {uuid.uuid4().hex}").encode())
    url = serve(site, origin)
    first = completed(api, run(workspace, url))
    other = completed(api, run(workspace, serve(site, Origin(article("Other lakes").encode()))))
    age(first["id"], 30)
    age(other["id"], 30)
    second = completed(api, run(workspace, url))  # unchanged: a revisit of the first
    capture.warc_files().close()  # sealed: this process writes no more to it
    (sealed,) = archive_dir.glob("*.warc.gz")
    old = (clock.now() - timedelta(days=40)).timestamp()
    os.utime(sealed, (old, old))

    purged = retention.purge(archive_dir, clock.now(), days=7)
    kept = rows([first["id"], other["id"], second["id"]])
    # The other page's row is gone; the first response stays for its recent revisit.
    assert sorted(str(r.retrieval_id) for r in kept) == sorted([first["id"], second["id"]])
    assert purged.rows >= 1 and purged.files == 0 and sealed.exists()

    age(second["id"], 30)
    purged = retention.purge(archive_dir, clock.now(), days=7)
    assert rows([first["id"], second["id"]]) == []
    assert purged.files == 1 and not sealed.exists() and purged.bytes > 0
    # The evidence itself stays.
    evidence_id = first["evidence"]["evidence_id"]
    answer = api.evidence(evidence_id)
    assert answer.status_code == 200


def test_open_and_recent_files_are_never_purged(archive_dir: Path) -> None:
    """A file still being written, or written within the retention, stays."""
    from worker.archive import retention
    from worker.domain import clock

    archive_dir.mkdir(parents=True)
    live = archive_dir / "a.warc.gz.open"
    recent = archive_dir / "b.warc.gz"
    for path in (live, recent):
        path.write_bytes(b"x")
    old = (clock.now() - timedelta(days=40)).timestamp()
    os.utime(live, (old, old))
    purged = retention.purge(archive_dir, clock.now(), days=7)
    assert purged.files == 0 and live.exists() and recent.exists()


def test_archive_bytes_per_workspace_in_metrics(
    api: Api, site: TLSSite, workspace: uuid.UUID, archive_dir: Path
) -> None:
    """`evidence_archive_bytes{workspace}` sums the workspace's archived records."""
    from api.http.archive_metrics import ArchiveCollector, bounded

    retrieval = completed(api, run(workspace, serve(site, Origin(article("Metered").encode()))))
    (row,) = rows([retrieval["id"]])
    families = {f.name: f for f in ArchiveCollector(0).collect()}
    samples = {
        s.labels.get("workspace"): s.value for s in families["evidence_archive_bytes"].samples
    }
    assert samples.get(str(workspace), samples.get("other", 0)) >= row.group_bytes
    scraped = api.client.get("/metrics").text
    names = {f.name for f in text_string_to_metric_families(scraped)}
    assert {"evidence_archive_bytes", "evidence_archive_exchanges"} <= names
    assert bounded({f"w{n}": n for n in range(1, 13)}, top=10) == {
        **{f"w{n}": n for n in range(3, 13)},
        "other": 3,
    }


def test_the_sweep_purges_when_a_retention_is_set(
    api: Api,
    site: TLSSite,
    workspace: uuid.UUID,
    archive_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`EVIDENCE_ARCHIVE_RETENTION_DAYS` set: the sweep purges (at most every few minutes)."""
    from worker.archive import retention
    from worker.jobs.sweep import run_sweep
    from worker.platform.settings import get_settings

    retrieval = completed(api, run(workspace, serve(site, Origin(article("Swept").encode()))))
    age(retrieval["id"], 30)
    monkeypatch.setattr(retention, "_last_run", None)
    run_sweep()  # no retention set: kept
    assert len(rows([retrieval["id"]])) == 1
    monkeypatch.setattr(get_settings(), "archive_retention_days", 7.0)
    run_sweep()  # not due yet: the last maintenance was just now
    assert len(rows([retrieval["id"]])) == 1
    monkeypatch.setattr(retention, "_last_run", None)
    run_sweep()
    assert rows([retrieval["id"]]) == []
