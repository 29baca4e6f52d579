"""The notes behind early polls waiting for their advice: when each advice falls due, and how
many early polls a workspace made in this second and the last (api.services.poll_advice)."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio

from api.services import poll_advice, waiters
from api.services.poll_advice import EarlyPolls
from api.services.read_admission import Notes
from tests.support.services import free_port
from worker.platform import redis_clients


class Clock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


KEY, OTHER_KEY = uuid.uuid4(), uuid.uuid4()
RETRIEVAL, WORKSPACE, OTHER = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """This module's notes and counts on a clock of the test's; early past one a second."""
    clock = Clock()
    monkeypatch.setattr(poll_advice, "advice", Notes(clock))
    monkeypatch.setattr(poll_advice, "early", EarlyPolls(clock))
    monkeypatch.setattr(poll_advice, "EARLY_POLLS_PER_SECOND", 1)
    return clock


def remaining(key: uuid.UUID = KEY) -> float:
    return poll_advice.advice.remaining(key, str(RETRIEVAL))


class TestAdvice:
    def test_falls_due_after_its_seconds(self, clock: Clock) -> None:
        assert remaining() == 0.0  # none given
        poll_advice.given(KEY, RETRIEVAL, 5)
        clock.now += 2
        assert remaining() == 3.0
        assert remaining(OTHER_KEY) == 0.0  # given to one key only
        clock.now += 4
        assert remaining() == 0.0

    def test_a_settled_answer_withdraws_it(self, clock: Clock) -> None:
        poll_advice.given(KEY, RETRIEVAL, 5)
        poll_advice.given(KEY, RETRIEVAL, None)
        assert remaining() == 0.0

    def test_a_later_answer_replaces_it(self, clock: Clock) -> None:
        poll_advice.given(KEY, RETRIEVAL, 30)
        poll_advice.given(KEY, RETRIEVAL, 1)
        assert remaining() == 1.0


class TestEarlyPolls:
    def test_over_the_rate_in_one_second(self, clock: Clock) -> None:
        clock.now = 1000.2
        looping = [poll_advice.early.looping(WORKSPACE) for _ in range(2)]
        assert looping == [False, True]
        assert not poll_advice.early.looping(OTHER)  # counted per workspace

    def test_the_last_second_counts_too(self, clock: Clock) -> None:
        """Two in one second, then one in the next: still looping (no reprieve at each
        second's start); one more second with one, and it is not."""
        clock.now = 1000.9
        poll_advice.early.looping(WORKSPACE)
        poll_advice.early.looping(WORKSPACE)
        clock.now = 1001.1
        assert poll_advice.early.looping(WORKSPACE)
        clock.now = 1002.5
        assert not poll_advice.early.looping(WORKSPACE)  # the second before had one

    def test_a_gap_forgets_the_past(self, clock: Clock) -> None:
        poll_advice.early.looping(WORKSPACE)
        poll_advice.early.looping(WORKSPACE)
        clock.now += 5
        assert not poll_advice.early.looping(WORKSPACE)


class TestHoldSeconds:
    def test_only_an_early_poll_of_a_looping_workspace_waits(self, clock: Clock) -> None:
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0  # no advice: not early
        poll_advice.given(KEY, RETRIEVAL, 4)
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0  # one early poll
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 4.0  # two: looping

    def test_never_longer_than_a_long_poll(self, clock: Clock) -> None:
        poll_advice.given(KEY, RETRIEVAL, 120)
        poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL)
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == poll_advice.MAX_WAIT_SECONDS

    def test_a_poll_on_time_is_not_counted_early(self, clock: Clock) -> None:
        poll_advice.given(KEY, RETRIEVAL, 1)
        clock.now += 1
        for _ in range(5):
            assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0
        poll_advice.given(KEY, RETRIEVAL, 1)
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0  # the first early one


class TestNotes:
    """The notes both kinds of answer are kept in (read_admission.Notes)."""

    def test_forget_and_expiry(self) -> None:
        clock = Clock()
        notes = Notes(clock)
        notes.note(KEY, "a", 2)
        notes.note(KEY, "b", 2)
        notes.forget(KEY, "a")
        assert notes.remaining(KEY, "a") == 0.0
        clock.now += 2
        assert notes.remaining(KEY, "b") == 0.0

    def test_starts_afresh_when_full(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from api.services import read_admission

        monkeypatch.setattr(read_admission, "NOTES_SIZE", 2)
        notes = Notes(Clock())
        for subject in ("a", "b", "c"):
            notes.note(KEY, subject, 5)
        assert notes.remaining(KEY, "a") == 0.0
        assert notes.remaining(KEY, "c") == 5.0


class TestShared:
    """The advice other processes gave, in Redis: asked only for a looping workspace, and never
    failing a poll when Redis cannot answer."""

    @pytest.fixture
    def asked(self, clock: Clock, monkeypatch: pytest.MonkeyPatch) -> list[uuid.UUID]:
        """The retrievals Redis was asked about (it says none stands); a hub never started."""
        calls: list[uuid.UUID] = []

        async def elsewhere(key_id: uuid.UUID, retrieval_id: uuid.UUID) -> float:
            calls.append(retrieval_id)
            return 0.0

        monkeypatch.setattr(poll_advice, "_elsewhere", elsewhere)
        monkeypatch.setattr(waiters, "hub", lambda: waiters.Hub("redis://127.0.0.1:1"))
        return calls

    def test_only_a_looping_workspace_asks(self, asked: list[uuid.UUID]) -> None:
        asyncio.run(poll_advice.wait_for_advice(KEY, WORKSPACE, RETRIEVAL))
        assert asked == []  # no early poll yet: answered at once, whatever it was told
        poll_advice.given(KEY, OTHER, 5)
        poll_advice.hold_seconds(KEY, WORKSPACE, OTHER)  # one early poll, seen here
        asyncio.run(poll_advice.wait_for_advice(KEY, WORKSPACE, RETRIEVAL))
        assert asked == [RETRIEVAL]

    def test_redis_that_cannot_answer_leaves_only_this_process_notes(
        self, clock: Clock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        dead = f"redis://127.0.0.1:{free_port()}"

        def client() -> object:
            return redis.asyncio.Redis.from_url(dead, socket_connect_timeout=0.5)

        monkeypatch.setattr(redis_clients, "shared_async", client)
        monkeypatch.setattr(redis_clients, "shared", lambda: redis_clients.connect(dead))

        poll_advice.share(KEY, RETRIEVAL, 5)  # nothing raised: the advice is soft
        assert asyncio.run(poll_advice._elsewhere(KEY, RETRIEVAL)) == 0.0
