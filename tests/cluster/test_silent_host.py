"""A host whose link goes down while a session of its own holds what others wait for, outside
any transaction (the idle-in-transaction bound does not apply, as it does not to a session
cut off in the middle of sending a statement): the server gives up on the silent peer within
EVIDENCE_DB_PEER_TIMEOUT_SECONDS and ends the session, and what it held is free again.

Here the server's socket faces the relay (tests/cluster/relay.py), which gives up on the host
on the server's behalf with the same split of the bound.
"""

from __future__ import annotations

import os
import sys
import time

import pytest
import sqlalchemy as sa

from tests.cluster.hosts import Cluster
from tests.cluster.settings import PEER_TIMEOUT_SECONDS
from tests.support.services import wait_for
from tests.support.slowdown import scaled

LOCK = 7_300_452
#: A session of the host's that takes a session-level lock and then says nothing.
HOLDER = """
import sys, time
import sqlalchemy as sa
from worker.store import db
with db.get_engine().connect() as conn:
    conn.execute(sa.select(sa.func.pg_advisory_lock(int(sys.argv[1]))))
    conn.commit()
    print("locked", flush=True)
    time.sleep(3600)
"""


def test_a_silent_hosts_session_is_ended_within_the_peer_bound(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = sa.create_engine(os.environ["EVIDENCE_DATABASE_URL"])

    def lock_free() -> bool:
        with engine.connect() as conn:
            taken = bool(conn.execute(sa.select(sa.func.pg_try_advisory_lock(LOCK))).scalar())
            if taken:
                conn.execute(sa.select(sa.func.pg_advisory_unlock(LOCK)))
            return taken

    try:
        holder = cluster.run("w1", "holder", [sys.executable, "-c", HOLDER, str(LOCK)])
        wait_for(lambda: "locked" in holder.log_path.read_text(), timeout=60, interval=0.2)
        assert not lock_free(), "the host's session does not hold the lock"
        cluster.link_down("w1")
        down = time.monotonic()
        bound = scaled(PEER_TIMEOUT_SECONDS)
        wait_for(lock_free, timeout=bound + scaled(15), interval=0.5)
        freed = time.monotonic() - down
    finally:
        engine.dispose()
    with capsys.disabled():
        print(f"\nsilent host: its session ended {freed:.1f} s after its link went down "
              f"(bound {bound:g} s)")  # fmt: skip
