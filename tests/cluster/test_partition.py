"""A worker host cut from Redis and PostgreSQL (still reaching the origin) while it runs
retrievals, then healed: what it was running is run again elsewhere once its lease ran out,
its own late settles are fenced (no late settle wins), and it rejoins and takes work again.

The partition lasts until the work it held was re-run and settled by the other hosts: longer
than the lease plus a sweep (about 13 s here) by construction, which is what makes it mean
something (the issue's 60 s was against the default 90 s lease).
"""

from __future__ import annotations

import time
import uuid

import pytest
import sqlalchemy as sa

from tests.cluster.host_faults import (
    bounds_of,
    check_exactly_once,
    host_log_events,
    late_settles,
    rows_by_id,
    start_workers,
    submit_batch,
    webhook_receiver,
    worker_env,
)
from tests.cluster.hosts import Cluster
from tests.faults.history import History
from tests.support.services import wait_for
from worker.store import db

CUT = "w1"
OTHERS = ["w2", "w3"]
IN_FLIGHT = 8
#: Pages held 2 s by the origin: the cut host is partitioned with its claims mid-fetch.
FIRST = 40
HOLD = 2.0
#: Submitted after the heal, enough for the healed host to take a share.
AFTER = 150


def running_ids(workspace: uuid.UUID) -> set[str]:
    with db.session_scope(readonly=True) as session:
        return {
            str(i)
            for i in session.execute(
                sa.text("SELECT id FROM retrieval WHERE workspace_id = :w AND state = 'running'"),
                {"w": workspace},
            ).scalars()
        }


def test_partitioned_host_is_fenced_then_rejoins(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    workspace = uuid.uuid4()
    bounds = bounds_of(cluster)
    with webhook_receiver(cluster, workspace) as receiver:
        env = worker_env(receiver)
        (cut,) = start_workers(cluster, [CUT], IN_FLIGHT, env).values()
        history = History(cluster.api(workspace), workspace)
        submit_batch(history, cluster.page_urls(FIRST, hold=HOLD))
        # Only the host to be cut runs: every running row is one of its claims.
        wait_for(lambda: len(running_ids(workspace)) >= IN_FLIGHT // 2, timeout=60, interval=0.1)
        cluster.partition(CUT)
        cut_at = time.monotonic()
        held = running_ids(workspace)
        start_workers(cluster, OTHERS, IN_FLIGHT, env)

        # Its claims run out and are re-run by the others, while it is still cut off.
        rows = {str(row.id): row for row in history.wait_settled(bounds.settled_within(60))}
        for retrieval_id in held:
            row = rows[retrieval_id]
            assert row.state == "completed" and row.attempt == 2, row
        before = rows_by_id(sorted(held))
        for retrieval_id in held:
            history.get(retrieval_id)
        cut_for = time.monotonic() - cut_at

        # (A claim whose commit's answer the cut lost was never logged, nor is it settled.)
        logged = held & {
            e["retrieval_id"] for e in host_log_events(cut) if e.get("event") == "claimed"
        }
        assert logged, "the cut host logged none of its claims"
        offset = cut.log_path.stat().st_size
        cluster.heal(CUT)
        healed_at = time.monotonic()
        # What it was running, it tries to settle once it reaches the database again: fenced.
        outcomes = wait_for(lambda: late_settles(cut, logged), timeout=120, interval=0.5)
        fenced_after = time.monotonic() - healed_at
        changed = {i for i, row in rows_by_id(sorted(held)).items() if row != before[i]}
        assert not changed, f"late settles changed {len(changed)} retrievals settled elsewhere"
        assert outcomes == {"settle_fenced"}, outcomes

        # It rejoins: work submitted now is settled by it too.
        wait_for(lambda: cluster.ping(CUT), timeout=60, interval=0.5)
        later = set(submit_batch(history, cluster.page_urls(AFTER)))
        check_exactly_once(history, receiver, bounds, bounds.settled_within(60))
        by_cut = {
            e["retrieval_id"]
            for e in host_log_events(cut, offset)
            if e.get("event") == "settled" and e.get("retrieval_id") in later
        }
        assert by_cut, f"{CUT} settled none of the {AFTER} retrievals submitted after the heal"
    with capsys.disabled():
        print(
            f"\npartition: {CUT} cut {cut_for:.1f} s holding {len(held)} claims (lease "
            f"{bounds.lease:g} s, sweep {bounds.sweep:g} s), re-run elsewhere on attempt 2; its "
            f"late settles fenced {fenced_after:.1f} s after the heal; then it settled "
            f"{len(by_cut)} of {AFTER} new retrievals"
        )
