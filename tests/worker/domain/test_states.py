"""The retrieval state machine, stated once and checked exhaustively."""

import itertools

import pytest

from worker.domain.states import (
    OPEN_STATES,
    SETTLED_STATES,
    TRANSITIONS,
    RetrievalState,
    can_transition,
    lost_work_target,
    sources_of,
)

S = RetrievalState
ALLOWED = {
    (S.PENDING, S.RUNNING),
    (S.PENDING, S.CANCELLED),
    (S.PENDING, S.EXPIRED),
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.PENDING),
    (S.RUNNING, S.CANCELLED),
    (S.RUNNING, S.UNCONFIRMED),
    (S.RUNNING, S.EXPIRED),
}


class TestTransitions:
    """Which moves between states are allowed."""

    @pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
    def test_every_pair(self, current: RetrievalState, target: RetrievalState) -> None:
        """Exactly the listed transitions are allowed; every other pair is refused."""
        assert can_transition(current, target) is ((current, target) in ALLOWED)

    def test_settled_states_are_final(self) -> None:
        """Nothing leaves a settled state, so its result and settled_at never change."""
        for state in SETTLED_STATES:
            assert TRANSITIONS[state] == frozenset()

    def test_open_and_settled_partition_the_states(self) -> None:
        """Every state is either open or settled, never both."""
        assert set(S) == OPEN_STATES | SETTLED_STATES
        assert not OPEN_STATES & SETTLED_STATES

    def test_contract_state_names(self) -> None:
        """State values are the contract's enum."""
        assert {s.value for s in S} == {
            "pending",
            "running",
            "completed",
            "cancelled",
            "unconfirmed",
            "expired",
        }

    def test_sources_of_cancel_and_expiry(self) -> None:
        """Cancel and expiry apply only to open retrievals; completion only to running ones."""
        assert sources_of(S.CANCELLED) == OPEN_STATES
        assert sources_of(S.EXPIRED) == OPEN_STATES
        assert sources_of(S.COMPLETED) == {S.RUNNING}


class TestLostWork:
    """Where a running retrieval goes when its lease runs out."""

    @pytest.mark.parametrize(
        ("attempt", "max_attempts", "target"),
        [(1, 3, S.PENDING), (2, 3, S.PENDING), (3, 3, S.UNCONFIRMED), (1, 1, S.UNCONFIRMED)],
    )
    def test_retry_until_last_attempt(
        self, attempt: int, max_attempts: int, target: RetrievalState
    ) -> None:
        """Lost work is retried while attempts remain, then becomes unconfirmed."""
        assert lost_work_target(attempt, max_attempts) is target
