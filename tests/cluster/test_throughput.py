"""Throughput adds up across worker hosts, and every retrieval settles exactly once.

The figures are printed (bench/cluster_throughput.py is the full-size run); what is asserted is
the outcome: every retrieval of every phase completed, with one evidence revision, and its
page fetched once (the origin counts what it served).
"""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from bench.cluster_throughput import Phase, report, run_phase
from tests.cluster.hosts import Cluster
from tests.faults.history import check_revisions
from worker.store import db
from worker.store.models import Retrieval

IN_FLIGHT = 4
PER_HOST = 30


def assert_settled_once(cluster: Cluster, phase: Phase) -> None:
    """Each URL of the phase: one row, completed and ready, attempt 1, one revision, and the
    origin served its page once."""
    table = Retrieval.__table__  # type: ignore[attr-defined]
    with db.session_scope(readonly=True) as session:
        rows = session.execute(
            sa.select(table.c.url, table.c.state, table.c.attempt, table.c.result).where(
                table.c.workspace_id.in_(phase.workspaces)
            )
        ).all()
    assert sorted(row.url for row in rows) == sorted(phase.urls)
    for row in rows:
        assert row.state == "completed" and row.result["status"] == "ready", row
        assert row.attempt == 1, row
    for workspace in phase.workspaces:
        check_revisions(workspace)
    served = sum(origin["served"] for origin in cluster.origin_stats().values())
    assert served == phase.retrievals, f"{served} pages served for {phase.retrievals} retrievals"


def test_throughput_adds_up_and_each_retrieval_settles_once(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    phases = []
    for hosts in (1, 2, 3):
        phase = run_phase(
            cluster,
            hosts,
            PER_HOST * hosts,
            warm_up=2 * IN_FLIGHT * hosts,
            workspaces=2,
            in_flight=IN_FLIGHT,
        )
        assert_settled_once(cluster, phase)
        phases.append(phase)
    with capsys.disabled():
        print("\n" + report(phases, IN_FLIGHT, cluster.hold_seconds))
