"""What every process of a cluster is given: its environment, and a database of its own."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from tests.cluster.netns import Host, Network, alive
from tests.support.services import POSTGRES_ADMIN_URL
from tests.support.slowdown import scaled

REDIS_PORT = 6379
POSTGRES_PORT = 5432
#: Seconds PostgreSQL lets a session of the cluster sit idle inside a transaction (the cluster's
#: lease is 12 s): the link-down case found a host cut off mid-transaction holding its locks,
#: and with them the sweep and every other host's webhook dispatch, for as long as TCP takes.
IDLE_IN_TRANSACTION_SECONDS = 8
#: Seconds PostgreSQL (here the relay, on its behalf: tests/cluster/relay.py) keeps a silent
#: host's session: the link-down case also found a host cut off in the middle of sending its
#: settle, which the idle bound does not cover, holding its group's rows past the lease.
PEER_TIMEOUT_SECONDS = 8


def cluster_env(network: Network, services: Host, database: str, ca: Path) -> dict[str, str]:
    """The environment an operator would give every process of the cluster."""
    from tests.conftest import session_env

    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    relayed = base.replace(base.rsplit("@", 1)[1], f"{network.gateway}:{POSTGRES_PORT}")
    return {
        **session_env(),
        "EVIDENCE_DATABASE_URL": f"{relayed}/{database}",
        "EVIDENCE_BROKER_URL": f"redis://{services.address}:{REDIS_PORT}/0",
        # Test settings only: the fetch guard lets these hosts' own addresses through.
        "EVIDENCE_EGRESS_ALLOW_CIDRS": str(network.subnet),
        "EVIDENCE_CA_BUNDLE": str(ca),
        "EVIDENCE_FETCH_ALLOWED_PORTS": "443",
        # PostgreSQL's connections are shared with everything else on the machine.
        "EVIDENCE_DB_POOL_SIZE": "4",
        # The service's own bound on a session idle in a transaction, shorter than the cluster's
        # lease: a host cut off mid-transaction must not hold its locks past it.
        "EVIDENCE_DB_IDLE_TRANSACTION_TIMEOUT_SECONDS": str(scaled(IDLE_IN_TRANSACTION_SECONDS)),
        "EVIDENCE_DB_PEER_TIMEOUT_SECONDS": str(scaled(PEER_TIMEOUT_SECONDS)),
        "EVIDENCE_EXTRACT_PROCESSES": "1",
    }


def create_database() -> tuple[str, str]:
    """An empty database named for this process (its name, its URL), after dropping those of
    earlier runs whose process is gone."""
    import psycopg

    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE 'evidence_cluster_%'"
        ).fetchall()
        for (name,) in names:
            if not alive(int(name.split("_")[2])):
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        name = f"evidence_cluster_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        conn.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    return name, f"{base}/{name}"
