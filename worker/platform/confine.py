"""A failure about one item confined to that item: logged, counted, and never looping.

The batch lane's claim group and grouped settle, a batch thread's follow-ons, the sweep's steps
and the singles path each do several items' work together. An exception about one item (a
stored URL no step can normalise, a row this version cannot read, a bug one input finds) must
not fail the others, nor come back for ever: the group's work is done again with each item on
its own, and the item that fails alone is given a way out (nothing found for its look-up, its
claim given back until its last attempt and then `unconfirmed`).

Errors about the database itself (a dropped connection, a lock) are no item's: `group_wide`
tells them apart, and they fail the group as before, which retries or leaves it to the sweep.

Each confined failure is logged (`failure_confined`) and counted twice: in this process
(`FAILURES`, prometheus-client: `evidence_process_confined_failures_total`) and for the fleet
in Redis (`worker.platform.fleet_counts`), which the API's `/metrics` renders
as `evidence_confined_failures_total`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import structlog
from prometheus_client import Counter
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from worker.platform import fleet_counts

log = structlog.get_logger(__name__)

T = TypeVar("T")

#: Where a failure was confined: the claim's look-up, one retrieval's run (its settle
#: included: a grouped settle that fails is written again one by one, and the one that still
#: fails raises in its own run), a batch thread's follow-on, the sweep, a webhook delivery.
PATHS = ("claim", "run", "follow_on", "sweep", "webhook")
#: What became of the item: its look-up answered "nothing found"; its claim given back
#: (`repended`) or given up (`unconfirmed`); left to the lease and the next sweep (`left`);
#: recorded as a failed webhook attempt (`failed`).
OUTCOMES = ("nothing_found", "repended", "unconfirmed", "left", "failed")

FAILURES = Counter(
    "evidence_process_confined_failures",
    "Failures about one item confined to it (the rest of its group went on), by path and "
    "what became of the item.",
    ["path", "outcome"],
)
#: The Redis hash of the fleet's counts (`path|outcome`).
METRICS_KEY = "evidence:metrics:confined"

_COUNTS = fleet_counts.PairCounts(
    METRICS_KEY, lambda path, outcome: path in PATHS and outcome in OUTCOMES
)


def group_wide(exc: BaseException) -> bool:
    """Whether `exc` is about the database rather than one item (connection, lock, pool):
    such an error fails the whole group, as it would fail each item alone."""
    if isinstance(exc, OperationalError | PoolTimeout):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


def record(path: str, outcome: str, error: BaseException | None = None, **fields: Any) -> None:
    """Log and count one confined failure; never raises (Redis trouble is logged once a while)."""
    log.warning(
        "failure_confined",
        path=path,
        outcome=outcome,
        error=None if error is None else type(error).__name__,
        **fields,
    )
    FAILURES.labels(path, outcome).inc()
    _COUNTS.add(path, outcome)


def read() -> dict[tuple[str, str], int] | None:
    """The fleet's counts by (path, outcome), or None when Redis cannot be read now."""
    return _COUNTS.read()


def each_alone(
    path: str,
    items: list[T],
    work: Callable[[T], Any],
    describe: Callable[[T], dict[str, Any]],
    outcome: str = "left",
) -> list[T]:
    """Do `work` for each item on its own; the items whose work raised (each logged and
    counted). A group-wide error is raised: it is no item's."""
    failed: list[T] = []
    for item in items:
        try:
            work(item)
        except Exception as exc:
            if group_wide(exc):
                raise
            record(path, outcome, exc, **describe(item))
            failed.append(item)
    return failed
