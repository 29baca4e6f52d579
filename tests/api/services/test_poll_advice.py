"""The notes behind early polls waiting for their advice: when each advice falls due, and how
many early polls a workspace made in this second and the last (api.services.poll_advice)."""

from __future__ import annotations

import uuid

import pytest

from api.services import poll_advice
from api.services.poll_advice import Advice, EarlyPolls


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


KEY, OTHER_KEY = uuid.uuid4(), uuid.uuid4()
RETRIEVAL, WORKSPACE, OTHER = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


class TestAdvice:
    def test_falls_due_after_its_seconds(self) -> None:
        clock = Clock()
        advice = Advice(clock)
        assert advice.remaining(KEY, RETRIEVAL) == 0.0  # none given
        advice.given(KEY, RETRIEVAL, 5)
        clock.now += 2
        assert advice.remaining(KEY, RETRIEVAL) == 3.0
        assert advice.remaining(OTHER_KEY, RETRIEVAL) == 0.0  # given to one key only
        clock.now += 4
        assert advice.remaining(KEY, RETRIEVAL) == 0.0

    def test_a_settled_answer_withdraws_it(self) -> None:
        advice = Advice(Clock())
        advice.given(KEY, RETRIEVAL, 5)
        advice.given(KEY, RETRIEVAL, None)
        assert advice.remaining(KEY, RETRIEVAL) == 0.0

    def test_a_later_answer_replaces_it(self) -> None:
        advice = Advice(Clock())
        advice.given(KEY, RETRIEVAL, 30)
        advice.given(KEY, RETRIEVAL, 1)
        assert advice.remaining(KEY, RETRIEVAL) == 1.0

    def test_starts_afresh_when_full(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(poll_advice, "NOTES_SIZE", 2)
        advice = Advice(Clock())
        first, second, third = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
        advice.given(KEY, first, 5)
        advice.given(KEY, second, 5)
        advice.given(KEY, third, 5)
        assert advice.remaining(KEY, first) == 0.0
        assert advice.remaining(KEY, third) == 5.0


class TestEarlyPolls:
    def test_over_the_rate_in_one_second(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 3)
        early = EarlyPolls(Clock(1000.2))
        assert [early.looping(WORKSPACE) for _ in range(4)] == [False, False, False, True]
        assert not early.looping(OTHER)  # counted per workspace

    def test_the_last_second_counts_too(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Four in one second, then one in the next: still looping (no reprieve at each
        second's start); one more second without any, and it is not."""
        monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 3)
        clock = Clock(1000.9)
        early = EarlyPolls(clock)
        for _ in range(4):
            early.looping(WORKSPACE)
        clock.now = 1001.1
        assert early.looping(WORKSPACE)
        clock.now = 1002.5
        assert not early.looping(WORKSPACE)  # the second before had one

    def test_a_gap_forgets_the_past(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 3)
        clock = Clock(1000.0)
        early = EarlyPolls(clock)
        for _ in range(4):
            early.looping(WORKSPACE)
        clock.now = 1005.0
        assert not early.looping(WORKSPACE)


class TestHoldSeconds:
    @pytest.fixture(autouse=True)
    def _fresh(self, monkeypatch: pytest.MonkeyPatch) -> Clock:
        clock = Clock()
        monkeypatch.setattr(poll_advice, "advice", Advice(clock))
        monkeypatch.setattr(poll_advice, "early", EarlyPolls(clock))
        monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 1)
        return clock

    def test_only_an_early_poll_of_a_looping_workspace_waits(self) -> None:
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0  # no advice: not early
        poll_advice.advice.given(KEY, RETRIEVAL, 4)
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0  # one early poll
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 4.0  # two: looping

    def test_never_longer_than_a_long_poll(self) -> None:
        poll_advice.advice.given(KEY, RETRIEVAL, 120)
        poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL)
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == poll_advice.MAX_WAIT_SECONDS

    def test_a_poll_on_time_is_not_counted_early(self, _fresh: Clock) -> None:
        poll_advice.advice.given(KEY, RETRIEVAL, 1)
        _fresh.now += 1
        for _ in range(5):
            assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0
        poll_advice.advice.given(KEY, RETRIEVAL, 1)
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0  # the first early one
