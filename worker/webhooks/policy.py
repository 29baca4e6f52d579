"""Webhook policy, pure: which endpoint URLs registration accepts, and retry timing
(exponential back-off with jitter, testable without a clock)."""

from __future__ import annotations

import random
from datetime import timedelta

from worker.fetch.guard import Network, Verdict, guard_url

#: Names that never lead to a public receiver, with every name under them: RFC 6761
#: (`localhost`, `invalid`, `test`), RFC 2606 (`example`), RFC 6762 (`local`), RFC 7686
#: (`onion`), RFC 8375 (`home.arpa`), RFC 9476 (`alt`), ICANN's private-use `internal`, and the
#: `localdomain` that resolvers commonly map to this machine.
NON_PUBLIC_NAMES = frozenset(
    {"localhost", "localdomain", "local", "internal", "home.arpa", "invalid", "test", "example"}
    | {"onion", "alt"}
)

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


def endpoint_refusal(
    url: str,
    allowed_ports: list[int] | frozenset[int],
    allow_cidrs: list[Network] | tuple[Network, ...] = (),
) -> str | None:
    """Why registration refuses `url` as an endpoint, or None.

    The fetch guard's static rules read the URL as a browser does (WHATWG URL Standard, IDNA),
    so `https://１２７.０.０.２/` and `https://127。0。0。2/` are the loopback address they name,
    and `LOCALHOST.` is `localhost`; a host name must also be a public one. The addresses a
    name resolves to are checked at every send, not here.
    """
    target = guard_url(url, allowed_ports, allow_cidrs)
    if isinstance(target, Verdict):
        return target.reason
    if target.ip is None:
        labels = target.host.split(".")
        for start in range(len(labels)):
            if ".".join(labels[start:]) in NON_PUBLIC_NAMES:
                return f"{target.host} is not a public host name"
    return None
