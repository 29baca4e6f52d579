"""A threads-pool worker freezes its startup heap once Celery is ready, so full collections no
longer walk it (the API's freeze at start: tests/api/services/test_warm_up.py)."""

from __future__ import annotations

import json

from tests.conftest import Services
from tests.support.services import wait_for


def _frozen(services: Services) -> list[int]:
    counts = []
    for line in services.worker.log().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "heap_frozen":
            counts.append(int(entry["objects"]))
    return counts


def test_worker_freezes_what_startup_made(services: Services) -> None:
    counts = wait_for(lambda: _frozen(services), timeout=30)
    assert isinstance(counts, list)
    # Celery, kombu, SQLAlchemy, the pipeline: tens of thousands of objects, frozen once per
    # worker process started (the session's worker may have been restarted by a fault test).
    assert all(count > 50_000 for count in counts)
