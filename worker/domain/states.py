"""The retrieval state machine: states, allowed transitions, and what "settled" means.

The database enforces these transitions with guarded UPDATEs (see `worker.retrieval.records`);
this module is the single, pure statement of the rules those statements implement.
"""

from enum import StrEnum


class RetrievalState(StrEnum):
    """`retrieval.state` values."""

    #: Accepted and durably recorded; waiting for a worker.
    PENDING = "pending"
    #: A worker holds it under a lease, with an attempt number that fences its settle.
    RUNNING = "running"
    #: A worker settled it; `result.status` says how it went.
    COMPLETED = "completed"
    #: Cancelled before it settled.
    CANCELLED = "cancelled"
    #: Lost on its last attempt, or its result could not be recorded.
    UNCONFIRMED = "unconfirmed"
    #: Not settled by `valid_until`.
    EXPIRED = "expired"


S = RetrievalState

#: States a retrieval can still leave.
OPEN_STATES = frozenset({S.PENDING, S.RUNNING})
#: States that never change again (their `settled_at` and `result` are final).
SETTLED_STATES = frozenset({S.COMPLETED, S.CANCELLED, S.UNCONFIRMED, S.EXPIRED})

#: Every allowed transition; anything else is refused.
TRANSITIONS: dict[RetrievalState, frozenset[RetrievalState]] = {
    S.PENDING: frozenset({S.RUNNING, S.CANCELLED, S.EXPIRED}),
    S.RUNNING: frozenset({S.COMPLETED, S.PENDING, S.CANCELLED, S.UNCONFIRMED, S.EXPIRED}),
    S.COMPLETED: frozenset(),
    S.CANCELLED: frozenset(),
    S.UNCONFIRMED: frozenset(),
    S.EXPIRED: frozenset(),
}


def can_transition(current: RetrievalState, target: RetrievalState) -> bool:
    """Whether `current -> target` is allowed."""
    return target in TRANSITIONS[current]


def sources_of(target: RetrievalState) -> frozenset[RetrievalState]:
    """The states from which `target` may be reached (used to build guarded UPDATEs)."""
    return frozenset(state for state, targets in TRANSITIONS.items() if target in targets)


def lost_work_target(attempt: int, max_attempts: int) -> RetrievalState:
    """Where a running retrieval whose lease ran out goes: back to pending, or unconfirmed."""
    return S.PENDING if attempt < max_attempts else S.UNCONFIRMED
