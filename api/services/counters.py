"""What the services count, in the registry the HTTP API serves at `/metrics` (`api.http.metrics`).

The registry is the API process's own: counters of what its requests did (the fleet's numbers
are read from Redis and the database at scrape time).
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, disable_created_metrics

#: prometheus-client leaves it unannotated: its signature, so the call type-checks.
_disable_created_metrics: Callable[[], None] = disable_created_metrics

REGISTRY = CollectorRegistry()
_disable_created_metrics()  # `_created` series only add noise to every counter

RETRIEVALS_CREATED = Counter(
    "evidence_retrievals_created",
    "Retrievals created by this API process (202 answers), by kind.",
    ["kind"],
    registry=REGISTRY,
)
POLLS_HELD = Counter(
    "evidence_polls_held",
    "Polls of an open retrieval that came back before its Retry-After, from a workspace polling"
    " early in a loop, and waited for it (api.services.poll_advice).",
    registry=REGISTRY,
)
