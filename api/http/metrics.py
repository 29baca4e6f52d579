"""Prometheus metrics served by the API at `/metrics`.

Two kinds of numbers, chosen so one scrape of any API process describes the whole fleet:

* Counted in this process: HTTP requests by route and code, their durations, and retrievals
  created (by kind). Set `PROMETHEUS_MULTIPROC_DIR` when running several API processes
  (`evidence api --workers N`) and they are summed across them (prometheus-client's own mode).
* Read at scrape time from where the truth lives: settled retrievals by kind, state, status and
  reason, rows by state, queue depth and oldest open age from the database; the broker's queue
  length from Redis; fetch durations and sizes from the counters workers keep in Redis
  (`worker.fetch.fleet_metrics`). Those are cheap aggregate reads, cached for `CACHE_SECONDS`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator

from fastapi import APIRouter, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from worker import clock
from worker.fetch import fleet_metrics as fetch_metrics
from worker.jobs import outbox
from worker.states import RetrievalState as S
from worker.store import db, retrievals

#: Seconds a scrape's database/broker/Redis reads are reused for (0 = always fresh).
CACHE_SECONDS = float(os.environ.get("EVIDENCE_METRICS_CACHE_SECONDS", "5"))
OPEN_STATES = (S.PENDING.value, S.RUNNING.value)
#: prometheus-client leaves these two unannotated: their signatures, so calls to them type-check.
_disable_created_metrics: Callable[[], None] = disable_created_metrics
_multiprocess_collector: Callable[[CollectorRegistry], object] = MultiProcessCollector
REGISTRY = CollectorRegistry()
_disable_created_metrics()  # `_created` series only add noise to every counter

HTTP_REQUESTS = Counter(
    "evidence_http_requests",
    "HTTP requests answered, by method, route template and status code.",
    ["method", "route", "code"],
    registry=REGISTRY,
)
HTTP_DURATION = Histogram(
    "evidence_http_request_duration_seconds",
    "Time to answer an HTTP request, by method and route template.",
    ["method", "route"],
    registry=REGISTRY,
)
RETRIEVALS_CREATED = Counter(
    "evidence_retrievals_created",
    "Retrievals created by this API process (202 answers), by kind.",
    ["kind"],
    registry=REGISTRY,
)


class StateCollector(Collector):
    """Fleet-wide numbers read from the database, the broker and Redis at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None

    def collect(self) -> Iterator[Metric]:
        """Yield the cached families, refreshing them when older than CACHE_SECONDS."""
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= CACHE_SECONDS:
                self._cached = (now, list(self._read()))
            families = self._cached[1]
        yield from families

    def _read(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "evidence_metrics_source_up",
            "Whether this scrape could read the source (database, broker, redis).",
            labels=["source"],
        )
        rows = _database_rows()
        up.add_metric(["database"], float(rows is not None))
        if rows is not None:
            yield from _retrieval_families(rows)
        queued = outbox.queue_length()
        up.add_metric(["broker"], float(queued is not None))
        depth = GaugeMetricFamily(
            "evidence_queue_depth",
            "Work waiting: pending retrievals in the database, messages in the broker queue.",
            labels=["source"],
        )
        if rows is not None:
            depth.add_metric(["database"], float(rows.pending))
        if queued is not None:
            depth.add_metric(["broker"], float(queued))
        yield depth
        stats = fetch_metrics.read_stats()
        up.add_metric(["redis"], float(stats is not None))
        if stats is not None:
            yield from _fetch_families(stats)
        yield up


class Rows:
    """What one scrape read from the retrieval table."""

    def __init__(self) -> None:
        self.groups: list[tuple[str, str, str | None, str | None, int]] = []
        self.oldest: dict[str, float | None] = {}

    @property
    def pending(self) -> int:
        return sum(n for _, state, _, _, n in self.groups if state == S.PENDING.value)


def _database_rows() -> Rows | None:
    """Counts by (kind, state, status, reason) and the oldest open ages; None when unreachable."""
    rows = Rows()
    try:
        with db.session_scope(readonly=True) as session:
            rows.groups = retrievals.count_by_outcome(session)
            rows.oldest = retrievals.oldest_open_age(session, clock.now())
    except Exception:  # noqa: BLE001  (a scrape reports the database as down, never fails)
        return None
    return rows


def _retrieval_families(rows: Rows) -> Iterator[Metric]:
    by_state = GaugeMetricFamily(
        "evidence_retrievals",
        "Retrievals in the database, by kind and state.",
        labels=["kind", "state"],
    )
    settled = CounterMetricFamily(
        "evidence_retrievals_settled",
        "Settled retrievals in the database, by kind, state, result status and reason.",
        labels=["kind", "state", "status", "reason"],
    )
    totals: dict[tuple[str, str], int] = {}
    for kind, state, status, reason, count in rows.groups:
        totals[(kind, state)] = totals.get((kind, state), 0) + count
        if state not in OPEN_STATES:
            settled.add_metric([kind, state, status or "none", reason or "none"], float(count))
    for (kind, state), count in sorted(totals.items()):
        by_state.add_metric([kind, state], float(count))
    oldest = GaugeMetricFamily(
        "evidence_oldest_open_age_seconds",
        "Age of the oldest pending or running retrieval (0 when there is none).",
        labels=["state"],
    )
    for state, age in sorted(rows.oldest.items()):
        oldest.add_metric([state], age or 0.0)
    yield from (by_state, settled, oldest)


def _fetch_families(stats: fetch_metrics.FetchStats) -> Iterator[Metric]:
    names = {
        "duration": ("evidence_fetch_duration_seconds", "Fetch time (with politeness waits)."),
        "bytes": ("evidence_fetch_response_bytes", "Body bytes a fetch returned."),
    }
    for name, (metric, doc) in names.items():
        family = HistogramMetricFamily(
            metric, f"{doc} By outcome: ok, truncated, or the reason.", labels=["outcome"]
        )
        for outcome, histogram in sorted(stats.histograms.get(name, {}).items()):
            buckets = histogram.cumulative(fetch_metrics.HISTOGRAMS[name])
            family.add_metric([outcome], buckets, histogram.total)
        yield family


STATE = StateCollector()
REGISTRY.register(STATE)
router = APIRouter(include_in_schema=False)


def scrape_registry() -> CollectorRegistry:
    """The registry to render: this process's, or every API process's in multiprocess mode."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    _multiprocess_collector(registry)
    registry.register(STATE)
    return registry


@router.get("/metrics")
def metrics() -> Response:
    """Prometheus text exposition."""
    return Response(generate_latest(scrape_registry()), media_type=CONTENT_TYPE_LATEST)
