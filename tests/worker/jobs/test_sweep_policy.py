"""How many presumed-lost messages the sweep republishes."""

import pytest

from worker.jobs.sweep import publish_limit


class TestPublishLimit:
    """Republishing only what the broker cannot still be holding."""

    @pytest.mark.parametrize(
        ("stale", "queued", "expected"),
        [(10, 0, 10), (10, 4, 6), (10, 10, 0), (10, 5000, 0), (0, 0, 0), (10, None, 0)],
    )
    def test_limit(self, stale: int, queued: int | None, expected: int) -> None:
        """A queue that still holds a backlog is not copied; an emptied one is refilled."""
        assert publish_limit(stale, queued) == expected
