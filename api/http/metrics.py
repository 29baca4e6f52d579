"""Prometheus metrics served by the API at `/metrics`.

Two kinds of numbers, chosen so one scrape of any API process describes the whole fleet:

* Counted in this process: HTTP requests by route and code, their durations, and retrievals
  created (by kind). Set `PROMETHEUS_MULTIPROC_DIR` when running several API processes
  (`evidence api --workers N`) and they are summed across them (prometheus-client's own mode).
* Read at scrape time from where the truth lives: settled retrievals by kind, state, status and
  reason, rows by state, queue depth and oldest open age (in all and per lane), and open
  retrievals of the busiest workspaces from the database; the broker's queue lengths from
  Redis; fetch durations and sizes from the counters workers keep in Redis
  (`worker.fetch.fleet_metrics`); the archive's bytes per workspace from its index
  (`api.http.archive_metrics`). Those are cheap aggregate reads, cached for `CACHE_SECONDS`.

Per-workspace series are bounded: the `TOP_WORKSPACES` workspaces with the most open
retrievals get their own label value, all others are summed under `workspace="other"`.
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

from api.http.archive_metrics import ArchiveCollector
from api.http.webhook_metrics import WebhookCollector
from api.services.counters import REGISTRY
from worker.domain import clock
from worker.domain.states import RetrievalState as S
from worker.fetch import fleet_metrics as fetch_metrics
from worker.jobs import outbox
from worker.jobs.celery_app import LANE_QUEUES
from worker.platform import confine
from worker.retrieval.freshness import metrics as freshness_metrics
from worker.store import db, retrieval_view
from worker.store.models import LANES
from worker.watches import liveness as watch_liveness

#: Seconds a scrape's database/broker/Redis reads are reused for (0 = always fresh).
CACHE_SECONDS = float(os.environ.get("EVIDENCE_METRICS_CACHE_SECONDS", "5"))
OPEN_STATES = (S.PENDING.value, S.RUNNING.value)
#: prometheus-client leaves these two unannotated: their signatures, so calls to them type-check.
_multiprocess_collector: Callable[[CollectorRegistry], object] = MultiProcessCollector
#: Workspaces with their own `evidence_workspace_open_retrievals` series (the rest: "other").
TOP_WORKSPACES = 10

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
        queues = outbox.queue_lengths(list(LANE_QUEUES.values()))
        up.add_metric(["broker"], float(queues is not None))
        depth = GaugeMetricFamily(
            "evidence_queue_depth",
            "Work waiting: pending retrievals in the database, messages in the broker queues.",
            labels=["source"],
        )
        lanes = GaugeMetricFamily(
            "evidence_lane_queue_depth",
            "Work waiting per lane: pending retrievals in the database, messages in the lane's "
            "broker queue.",
            labels=["lane", "source"],
        )
        if rows is not None:
            depth.add_metric(["database"], float(rows.pending))
            for lane in LANES:
                lanes.add_metric([lane, "database"], float(rows.lanes.get(lane, (0, None))[0]))
        if queues is not None:
            depth.add_metric(["broker"], float(sum(queues.values())))
            for lane in LANES:
                lanes.add_metric([lane, "broker"], float(queues[LANE_QUEUES[lane]]))
        yield depth
        yield lanes
        stats = fetch_metrics.read_stats()
        up.add_metric(["redis"], float(stats is not None))
        if stats is not None:
            yield from _fetch_families(stats)
        freshness = freshness_metrics.read()
        if freshness is not None:
            yield _freshness_family(freshness)
        confined = confine.read()
        if confined is not None:
            yield _confined_family(confined)
        yield _watch_tick_family()
        yield up


def _watch_tick_family() -> Metric:
    """When the watch scheduler last finished a tick: alert when time() minus it grows."""
    family = GaugeMetricFamily(
        "evidence_watch_scheduler_last_tick_timestamp_seconds",
        "Unix time of the watch scheduler's last finished tick (absent: none recorded).",
    )
    last = watch_liveness.last_tick()
    if last is not None:
        family.add_metric([], last)
    return family


class Rows:
    """What one scrape read from the retrieval table."""

    def __init__(self) -> None:
        self.groups: list[tuple[str, str, str | None, str | None, int]] = []
        self.oldest: dict[str, float | None] = {}
        #: Per lane: (pending retrievals, age in seconds of the oldest one or None).
        self.lanes: dict[str, tuple[int, float | None]] = {}
        #: Open retrievals by (workspace, lane, state).
        self.open: list[tuple[str, str, str, int]] = []

    @property
    def pending(self) -> int:
        return sum(n for _, state, _, _, n in self.groups if state == S.PENDING.value)


def _database_rows() -> Rows | None:
    """Counts by (kind, state, status, reason) and the oldest open ages; None when unreachable."""
    rows = Rows()
    try:
        with db.session_scope(readonly=True) as session:
            if db.dialect(session) == db.POSTGRESQL:
                # One snapshot for every count of the scrape, so the series add up.
                session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
            now = clock.now()
            rows.groups = retrieval_view.count_by_outcome(session)
            rows.oldest = retrieval_view.oldest_open_age(session, now)
            rows.lanes = retrieval_view.pending_by_lane(session, now)
            rows.open = retrieval_view.open_by_workspace(session)
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
    lane_age = GaugeMetricFamily(
        "evidence_lane_oldest_pending_age_seconds",
        "Age of the oldest pending retrieval of each lane: how long its work waits for a worker "
        "(0 when there is none).",
        labels=["lane"],
    )
    for lane in LANES:
        lane_age.add_metric([lane], rows.lanes.get(lane, (0, None))[1] or 0.0)
    yield from (by_state, settled, oldest, lane_age, *_workspace_families(rows))


def top_workspaces(
    open_rows: list[tuple[str, str, str, int]], top: int = TOP_WORKSPACES
) -> dict[tuple[str, str, str], int]:
    """Open counts by (workspace, lane, state) for the `top` busiest workspaces; "other" sums
    every other workspace, so the label's values stay bounded whatever the number of tenants."""
    totals: dict[str, int] = {}
    for workspace, _, _, n in open_rows:
        totals[workspace] = totals.get(workspace, 0) + n
    busiest = set(sorted(totals, key=lambda w: (-totals[w], w))[:top])
    out: dict[tuple[str, str, str], int] = {}
    for workspace, lane, state, n in open_rows:
        key = (workspace if workspace in busiest else "other", lane, state)
        out[key] = out.get(key, 0) + n
    return out


def _workspace_families(rows: Rows) -> Iterator[Metric]:
    family = GaugeMetricFamily(
        "evidence_workspace_open_retrievals",
        f"Open retrievals of the {TOP_WORKSPACES} workspaces with the most, by lane and state; "
        'workspace="other" sums the rest.',
        labels=["workspace", "lane", "state"],
    )
    for (workspace, lane, state), n in sorted(top_workspaces(rows.open).items()):
        family.add_metric([workspace, lane, state], float(n))
    active = GaugeMetricFamily(
        "evidence_workspaces_with_open_retrievals",
        "Workspaces that have at least one open retrieval.",
    )
    active.add_metric([], float(len({w for w, _, _, _ in rows.open})))
    yield family
    yield active


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


def _freshness_family(counts: dict[tuple[str, str], int]) -> Metric:
    family = CounterMetricFamily(
        "evidence_freshness_outcomes",
        "Settled retrievals with content, by how their evidence stayed fresh: revalidated (every "
        "URL answered 304), reused (within the client's max-age, no fetch), new_revision (a "
        "full fetch, new content), unchanged (a full fetch, content already stored); by kind.",
        labels=["outcome", "kind"],
    )
    for (outcome, kind), count in sorted(counts.items()):
        family.add_metric([outcome, kind], float(count))
    return family


def _confined_family(counts: dict[tuple[str, str], int]) -> Metric:
    family = CounterMetricFamily(
        "evidence_confined_failures",
        "Failures about one item confined to it while the rest of its group went on "
        "(`worker.platform.confine`), by path and what became of the item.",
        labels=["path", "outcome"],
    )
    for (path, outcome), count in sorted(counts.items()):
        family.add_metric([path, outcome], float(count))
    return family


STATE = StateCollector()
REGISTRY.register(STATE)
WEBHOOKS = WebhookCollector(CACHE_SECONDS)
REGISTRY.register(WEBHOOKS)
ARCHIVE = ArchiveCollector(CACHE_SECONDS)
REGISTRY.register(ARCHIVE)
router = APIRouter(include_in_schema=False)


def scrape_registry() -> CollectorRegistry:
    """The registry to render: this process's, or every API process's in multiprocess mode."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    _multiprocess_collector(registry)
    registry.register(STATE)
    registry.register(WEBHOOKS)
    registry.register(ARCHIVE)
    return registry


@router.get("/metrics")
def metrics() -> Response:
    """Prometheus text exposition."""
    return Response(generate_latest(scrape_registry()), media_type=CONTENT_TYPE_LATEST)
