"""Politeness is global: one origin never serves more fetches at once than the per-origin
limit, whatever the number of worker hosts fetching from it."""

from __future__ import annotations

import uuid

from bench.cluster_throughput import count_states
from tests.cluster.hosts import Cluster
from tests.support.factories import body
from tests.support.services import wait_for

LIMIT = 3
HOSTS = ("w1", "w2", "w3")
#: Each host could fetch this many at once: all three together, far past the limit.
IN_FLIGHT = 6
URLS = 60
WORKER_ENV = {
    "EVIDENCE_FETCH_PER_HOST_LIMIT": str(LIMIT),
    # Waiting for a slot spends the fetch's own deadline: with room to wait, every fetch is
    # made (none ends rate_limited or abandoned at its deadline while the origin still
    # serves it, which the origin would count as one more at once).
    "EVIDENCE_FETCH_TOTAL_TIMEOUT_SECONDS": "60",
}


def test_one_origin_never_exceeds_the_per_origin_limit_across_hosts(cluster: Cluster) -> None:
    for host in HOSTS:
        cluster.start_worker(host, in_flight=IN_FLIGHT, env=WORKER_ENV)
    workspace = uuid.uuid4()
    api = cluster.api(workspace)
    origin = cluster.origins[0]
    urls = cluster.page_urls(URLS, origins=1)
    response = api.batch([body(url, workspace) for url in urls])
    assert {result["status"] for result in response.json()["results"]} == {202}
    wait_for(lambda: count_states([workspace])[0] == URLS, timeout=120, interval=0.5)

    stats = cluster.origin_stats()
    assert set(stats) == {origin}, stats
    seen = stats[origin]
    assert seen["served"] == URLS, seen
    assert seen["max"] <= LIMIT, f"{seen['max']} fetches of one origin at once, limit {LIMIT}"
    # Not vacuous: the limit was reached, by hosts fetching side by side.
    assert seen["max"] == LIMIT, seen
    hosts = {cluster.host(name).address for name in HOSTS}
    assert len(set(seen["clients"]) & hosts) >= 2, seen["clients"]
