"""How retrievals stayed fresh, counted in Redis for the fleet (as `fleet_metrics` counts fetches).

Each settled retrieval with content adds one to `outcome|kind`: `revalidated` (every URL
answered 304), `reused` (within the client's `max-age`, no fetch), `new_revision` (a full fetch
whose content was new), `unchanged` (a full fetch whose content matched a stored revision).
The API's `/metrics` renders them as `evidence_freshness_outcomes_total`.
"""

from __future__ import annotations

from worker.platform import fleet_counts

#: The Redis hash holding the counters.
METRICS_KEY = "evidence:metrics:freshness"
OUTCOMES = ("revalidated", "reused", "new_revision", "unchanged")

_COUNTS = fleet_counts.PairCounts(
    METRICS_KEY, lambda outcome, kind: outcome in OUTCOMES and bool(kind)
)


def record(outcome: str, kind: str) -> None:
    """Count one retrieval's freshness `outcome`; Redis trouble is logged, never raised."""
    _COUNTS.add(outcome, kind)


def read() -> dict[tuple[str, str], int] | None:
    """Counts by (outcome, kind), or None when Redis cannot be read now."""
    return _COUNTS.read()
