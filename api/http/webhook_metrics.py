"""Webhook numbers for `/metrics`, read at scrape time like the retrieval ones.

`evidence_webhook_deliveries{state}`: deliveries in the database by state (pending, delivered,
failed); `evidence_webhook_endpoints{enabled}`; `evidence_webhook_attempt_duration_seconds
{outcome}`: every attempt's send time, recorded by the workers in Redis (its `_count` counts
attempts by outcome). Cached like the other fleet-wide families.
"""

from __future__ import annotations

from collections.abc import Iterator

import sqlalchemy as sa
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric

from api.http.cached_collector import CachedCollector
from worker.store import db
from worker.webhooks import metrics as attempt_metrics
from worker.webhooks import records as store


class WebhookCollector(CachedCollector):
    """Deliveries and endpoints from the database, attempt durations from Redis."""

    def _read(self) -> Iterator[Metric]:
        states: dict[str, int] | None
        try:
            with db.session_scope(readonly=True) as session:
                states = store.count_by_state(session)
                enabled: dict[bool, int] | None = dict(
                    session.execute(
                        sa.select(store.ENDPOINT.c.enabled, sa.func.count()).group_by(
                            store.ENDPOINT.c.enabled
                        )
                    ).all()
                )
        except Exception:  # noqa: BLE001  (a scrape leaves them out, never fails)
            states, enabled = None, None
        if states is not None and enabled is not None:
            deliveries = GaugeMetricFamily(
                "evidence_webhook_deliveries",
                "Webhook deliveries in the database, by state.",
                labels=["state"],
            )
            for state in store.DELIVERY_STATES:
                deliveries.add_metric([state], float(states.get(state, 0)))
            yield deliveries
            endpoints = GaugeMetricFamily(
                "evidence_webhook_endpoints", "Webhook endpoints, by enabled.", labels=["enabled"]
            )
            for flag in (True, False):
                endpoints.add_metric([str(flag).lower()], float(enabled.get(flag, 0)))
            yield endpoints
        histograms = attempt_metrics.read()
        if histograms is not None:
            family = HistogramMetricFamily(
                "evidence_webhook_attempt_duration_seconds",
                "Webhook send time per attempt, by outcome: delivered, http_4xx, http_5xx, "
                "redirect, timeout, refused, error.",
                labels=["outcome"],
            )
            for outcome, histogram in sorted(histograms.items()):
                buckets = histogram.cumulative(attempt_metrics.DURATION_BUCKETS)
                family.add_metric([outcome], buckets, histogram.total)
            yield family
