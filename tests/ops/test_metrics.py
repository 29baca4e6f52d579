"""`/metrics` on a real API process counts what a real run did, across API and worker processes."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import pytest

from tests.ops.conftest import LiveApi, scrape, value
from tests.support.factories import SETTLED, Api, body, cancel_open, parked
from tests.support.pages import article
from tests.support.services import wait_for
from tests.support.tls_site import TLSSite
from worker.domain import clock
from worker.retrieval import records as retrievals
from worker.store import db, retrieval_view

pytestmark = pytest.mark.usefixtures("services")


def run(live_api: LiveApi, tenant: tuple[uuid.UUID, str], urls: list[str]) -> list[dict]:
    """POST each URL through the live API and wait until all settle."""
    workspace, key = tenant
    with httpx.Client(base_url=live_api.url, timeout=10) as client:
        api = Api(client, key)
        ids = [api.post(body(url, workspace)).json()["retrieval"]["id"] for url in urls]
        return [api.wait(rid, SETTLED, timeout=60) for rid in ids]


class TestMetricsEndpoint:
    """The API's /metrics: Prometheus text, request counts, created and settled retrievals."""

    def test_counts_a_real_run(
        self, live_api: LiveApi, tenant: tuple[uuid.UUID, str], pages: list[str], site: TLSSite
    ) -> None:
        """Requests, created, settled (by status and reason) and fetch histograms all move."""
        missing = site.url(f"/ops/missing-{uuid.uuid4().hex}")
        before = scrape(f"{live_api.url}/metrics")
        settled = run(live_api, tenant, [*pages, missing])
        assert [r["result"]["status"] for r in settled] == ["ready"] * 3 + ["unavailable"]
        after = scrape(f"{live_api.url}/metrics")

        def delta(name: str, **labels: str) -> float:
            return value(after, name, **labels) - value(before, name, **labels)

        route = "/research-api/evidence/retrieve"
        assert delta("evidence_http_requests_total", route=route, code="202") == 4
        get_route = "/research-api/evidence/retrievals/{retrieval_id}"
        assert delta("evidence_http_requests_total", route=get_route, code="200") >= 4
        assert delta("evidence_http_request_duration_seconds_count", route=route) == 4
        assert delta("evidence_retrievals_created_total", kind="url_text") == 4
        ready = {"kind": "url_text", "state": "completed", "status": "ready", "reason": "none"}
        assert delta("evidence_retrievals_settled_total", **ready) >= 3
        gone = {"status": "unavailable", "reason": "not_found"}
        assert delta("evidence_retrievals_settled_total", **gone) >= 1
        assert delta("evidence_fetch_duration_seconds_count", outcome="ok") >= 3
        assert delta("evidence_fetch_duration_seconds_count", outcome="not_found") >= 1
        page_bytes = len(article("Lakes at dawn", marker="x" * 37).encode())
        assert delta("evidence_fetch_response_bytes_sum", outcome="ok") >= 3 * page_bytes
        assert value(after, "evidence_fetch_response_bytes_bucket", outcome="ok", le="+Inf") >= 3
        for source in ("database", "broker", "redis"):
            assert value(after, "evidence_metrics_source_up", source=source) == 1

    def test_queue_depth_counts_pending_rows(
        self, live_api: LiveApi, tenant: tuple[uuid.UUID, str], pages: list[str]
    ) -> None:
        """A recorded, unpublished row shows as database queue depth until the sweep settles it."""
        workspace, _ = tenant
        new = retrievals.NewRetrieval(workspace, uuid.uuid4(), pages[0], "url_text", None)
        row, _ = db.with_transient_retry(
            lambda s: retrievals.create_retrieval(s, new, clock.now(), timedelta(hours=1))
        )
        samples = scrape(f"{live_api.url}/metrics")
        assert value(samples, "evidence_queue_depth", source="database") >= 1
        assert value(samples, "evidence_retrievals", kind="url_text", state="pending") >= 1
        assert value(samples, "evidence_oldest_open_age_seconds", state="pending") >= 0
        assert ("evidence_queue_depth", frozenset({("source", "broker")})) in samples

        def settled() -> bool:
            with db.session_scope(readonly=True) as session:
                return retrieval_view.get_retrieval(session, row.id).state in SETTLED  # type: ignore[union-attr]

        wait_for(settled, timeout=60, interval=0.3)

    def test_route_labels_are_templates(self, live_api: LiveApi) -> None:
        """Unknown paths count as `unmatched`, so a scanner cannot blow up label cardinality."""
        for n in range(3):
            httpx.get(f"{live_api.url}/no/such/{uuid.uuid4()}/{n}")
        samples = scrape(f"{live_api.url}/metrics")
        routes = {dict(labels).get("route") for (name, labels) in samples if "http_req" in name}
        assert "unmatched" in routes
        assert not any(route and "/no/such/" in route for route in routes)


class TestLanesAndWorkspaces:
    """Per-lane depth and age, and open retrievals of the busiest workspaces (bounded labels)."""

    def test_lanes_and_busiest_workspace(
        self, live_api: LiveApi, tenant: tuple[uuid.UUID, str]
    ) -> None:
        """75 pending batch retrievals of one workspace show in its lane and under its id."""
        workspace, _ = tenant
        ids = parked(workspace, 75)
        import sqlalchemy as sa

        from worker.store.models import Retrieval

        T = Retrieval.__table__.c  # type: ignore[attr-defined]
        db.with_transient_retry(
            lambda s: s.execute(
                sa.update(Retrieval)
                .where(T.id.in_([uuid.UUID(i) for i in ids]))
                .values(lane="batch")
            )
        )
        try:
            samples = scrape(f"{live_api.url}/metrics")
        finally:
            cancel_open(workspace)
        assert value(samples, "evidence_lane_queue_depth", lane="batch", source="database") >= 75
        for lane in ("interactive", "batch"):
            assert ("evidence_lane_queue_depth", labels(lane=lane, source="broker")) in samples
            assert value(samples, "evidence_lane_oldest_pending_age_seconds", lane=lane) >= 0
        mine = {"workspace": str(workspace), "lane": "batch", "state": "pending"}
        assert value(samples, "evidence_workspace_open_retrievals", **mine) == 75
        by_workspace = value(samples, "evidence_workspace_open_retrievals")
        open_rows = value(samples, "evidence_retrievals", state="pending") + value(
            samples, "evidence_retrievals", state="running"
        )
        assert by_workspace == open_rows  # the top ones and "other" add up to every open row
        assert value(samples, "evidence_workspaces_with_open_retrievals") >= 1

    def test_label_values_stay_bounded(self) -> None:
        """However many workspaces have open work, at most TOP_WORKSPACES + "other" show."""
        from api.http.metrics import TOP_WORKSPACES, top_workspaces

        rows = [(f"w{n:03d}", "batch", "pending", n + 1) for n in range(200)]
        rows.append(("w199", "interactive", "running", 1))
        top = top_workspaces(rows)
        names = {workspace for workspace, _, _ in top}
        assert len(names) == TOP_WORKSPACES + 1 and "other" in names
        assert {f"w{n:03d}" for n in range(190, 200)} <= names
        assert top[("w199", "interactive", "running")] == 1
        assert sum(top.values()) == sum(n for *_, n in rows)


def labels(**pairs: str) -> frozenset[tuple[str, str]]:
    return frozenset(pairs.items())


class TestFetchHistograms:
    """Workers' Redis bucket counters become Prometheus histograms."""

    def test_buckets_are_cumulative(self) -> None:
        """Per-bucket counts add up into `le` buckets ending with +Inf; stray fields are ignored."""
        from worker.fetch import fleet_metrics
        from worker.platform import fleet_counts

        index = fleet_counts.bucket_index(fleet_metrics.DURATION_BUCKETS, 0.3)
        assert fleet_metrics.DURATION_BUCKETS[index] == 0.5
        assert fleet_counts.bucket_index(fleet_metrics.DURATION_BUCKETS, 999) == len(
            fleet_metrics.DURATION_BUCKETS
        )
        raw = {
            b"duration|ok|b0": b"2",
            b"duration|ok|b3": b"1",
            b"duration|ok|sum": b"0.6",
            b"duration|ok|b99": b"5",
            b"other|ok|b0": b"7",
        }
        histogram = fleet_metrics.parse_stats(raw).histograms["duration"]["ok"]
        buckets = histogram.cumulative(fleet_metrics.DURATION_BUCKETS)
        assert buckets[0] == ("0.05", 2.0) and buckets[3] == ("0.5", 3.0)
        assert buckets[-1] == ("+Inf", 3.0) and histogram.total == 0.6
