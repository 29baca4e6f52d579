"""The harness itself: hosts reach what they should, and faults cut what they say they cut."""

from __future__ import annotations

import subprocess
import sys

from tests.cluster.hosts import API_PORT, POSTGRES_PORT, REDIS_PORT, Cluster

PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("open")
except OSError as error:
    print(type(error).__name__)
"""


def reaches(cluster: Cluster, host: str, address: str, port: int, timeout: float = 1.5) -> bool:
    """Whether a TCP connection from inside `host` to address:port opens."""
    done = subprocess.run(
        [*cluster.host(host).exec_prefix(), sys.executable, "-c", PROBE, address, str(port),
         str(timeout)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip() == "open"


def services_of(cluster: Cluster) -> list[tuple[str, int]]:
    """Redis, the API and the PostgreSQL relay: what a worker host needs."""
    services = cluster.host("services").address
    assert cluster.network is not None
    return [
        (services, REDIS_PORT),
        (services, API_PORT),
        (cluster.network.gateway, POSTGRES_PORT),
    ]


def test_partition_cuts_services_only_and_heals(cluster: Cluster) -> None:
    origin = (cluster.origins[0], 443)
    assert all(reaches(cluster, "w1", *target) for target in services_of(cluster))
    cluster.partition("w1")
    assert not any(reaches(cluster, "w1", *target) for target in services_of(cluster))
    assert reaches(cluster, "w1", *origin)
    assert all(reaches(cluster, "w2", *target) for target in services_of(cluster))
    cluster.heal("w1")
    assert all(reaches(cluster, "w1", *target) for target in services_of(cluster))


def test_link_down_cuts_everything_and_comes_back(cluster: Cluster) -> None:
    cluster.link_down("w2")
    assert not reaches(cluster, "w2", *services_of(cluster)[0])
    assert not reaches(cluster, "w2", cluster.origins[0], 443)
    cluster.link_up("w2")
    assert reaches(cluster, "w2", *services_of(cluster)[0])


def test_no_route_leaves_the_bridge(cluster: Cluster) -> None:
    """A host has no default route: an address outside its /24 is unreachable at once."""
    assert not reaches(cluster, "w1", "127.0.0.1", POSTGRES_PORT)  # its own loopback, not ours
    assert not reaches(cluster, "w1", "192.0.2.1", 443)


def test_kill_host_kills_every_process(cluster: Cluster) -> None:
    cluster.start_worker("w3", in_flight=4)
    assert len(cluster.pids("w3")) >= 2  # the supervisor, the worker, its extraction process
    cluster.kill_host("w3")
    assert cluster.pids("w3") == []
    assert not cluster.ping("w3")
