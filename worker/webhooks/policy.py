"""Retry timing: exponential back-off with jitter, pure so it can be tested without a clock."""

from __future__ import annotations

import random
from datetime import timedelta

#: Share of each delay that is random ("equal jitter"): retries of many deliveries that failed
#: together (a receiver outage) spread out instead of arriving together when it comes back.
JITTER = 0.5


def retry_delay(
    attempt: int, base_seconds: float, cap_seconds: float, rng: random.Random | None = None
) -> timedelta:
    """Delay after failed attempt number `attempt` (1-based): base * 2^(attempt-1), capped,
    of which the last `JITTER` share is random."""
    ceiling = min(cap_seconds, base_seconds * 2 ** min(max(attempt - 1, 0), 32))
    spread = (rng or random).uniform(0, ceiling * JITTER)
    return timedelta(seconds=ceiling * (1 - JITTER) + spread)
