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
    monkeypatch.setattr(poll_advice, "running_answers", Notes(clock))
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

    def test_the_next_second_finds_it_still_looping(self, clock: Clock) -> None:
        """Two in one second, then one early in the next: looping still (no reprieve at each
        second's start)."""
        clock.now = 1000.9
        poll_advice.early.looping(WORKSPACE)
        assert poll_advice.early.looping(WORKSPACE)
        clock.now = 1001.1
        assert poll_advice.early.would_loop(WORKSPACE)
        assert poll_advice.early.looping(WORKSPACE)

    def test_the_count_starts_afresh_each_second(self, clock: Clock) -> None:
        """One at the end of a second and one at the start of the next: one a second, within
        the rate (a count over a sliding window would have caught it)."""
        clock.now = 1000.9
        assert not poll_advice.early.looping(WORKSPACE)
        clock.now = 1001.1
        assert not poll_advice.early.would_loop(WORKSPACE)
        assert not poll_advice.early.looping(WORKSPACE)

    def test_under_the_rate_before_looping_is_never_looping(self, clock: Clock) -> None:
        """One early poll a second (the rate is one): never looping, however long it goes on."""
        for _ in range(100):
            clock.now += 1
            assert not poll_advice.early.would_loop(WORKSPACE)
            assert not poll_advice.early.looping(WORKSPACE)

    def test_found_looping_it_stays_so_while_it_polls_early(self, clock: Clock) -> None:
        """Once looping, fewer early polls (its polls now wait, so fewer come) keep it looping:
        one every 20 s for as long as it keeps coming (the linger is 30 s)."""
        poll_advice.early.looping(WORKSPACE)
        assert poll_advice.early.looping(WORKSPACE)
        for _ in range(10):
            clock.now += 20
            assert poll_advice.early.would_loop(WORKSPACE)
            assert poll_advice.early.looping(WORKSPACE)
        assert not poll_advice.early.looping(OTHER)  # per workspace

    def test_a_wait_that_ends_starts_the_linger_again(self, clock: Clock) -> None:
        """All its polls waited 30 s, with no early poll meanwhile: as they come back, it is
        still looping."""
        poll_advice.early.looping(WORKSPACE)
        poll_advice.early.looping(WORKSPACE)
        clock.now += poll_advice.LINGER_SECONDS - 1
        poll_advice.early.held(WORKSPACE)
        clock.now += poll_advice.LINGER_SECONDS - 1
        assert poll_advice.early.looping(WORKSPACE)
        poll_advice.early.held(OTHER)  # never found looping: nothing to keep
        assert not poll_advice.early.would_loop(OTHER)

    def test_no_early_poll_for_the_linger_ends_it(self, clock: Clock) -> None:
        poll_advice.early.looping(WORKSPACE)
        poll_advice.early.looping(WORKSPACE)
        clock.now += poll_advice.LINGER_SECONDS - 0.1
        assert poll_advice.early.would_loop(WORKSPACE)
        clock.now += 0.2
        assert not poll_advice.early.would_loop(WORKSPACE)
        assert not poll_advice.early.looping(WORKSPACE)
        assert poll_advice.early.looping(WORKSPACE)  # two in a second again: looping again


def test_an_agent_polling_five_retrievals_four_times_a_second_never_loops() -> None:
    """Five open retrievals, each polled every 0.25 s against a 1 s advice: 20 early polls a
    second, all in one process, for a minute; never held."""
    clock = Clock()
    early = EarlyPolls(clock)
    for _ in range(60 * 20):
        clock.now += 1 / 20
        assert not early.looping(WORKSPACE)


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


class TestRunning:
    """After an answer that said `running`, a looping workspace's early poll waits for the
    settle (the long-poll's bound), not for the 1 s advice: nothing else about a running
    retrieval changes."""

    def test_it_waits_the_long_polls_bound(self, clock: Clock) -> None:
        poll_advice.given(KEY, RETRIEVAL, 1, running=True)
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0  # one early poll
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == poll_advice.MAX_WAIT_SECONDS

    def test_only_while_it_is_early(self, clock: Clock) -> None:
        """A poll after the advice is on time: read at once, running or not."""
        poll_advice.given(KEY, RETRIEVAL, 1, running=True)
        poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL)
        clock.now += 1
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0

    def test_a_later_pending_answer_takes_it_back(self, clock: Clock) -> None:
        """Back to pending (a retry): the next early poll waits for its advice only."""
        poll_advice.given(KEY, RETRIEVAL, 1, running=True)
        poll_advice.given(KEY, RETRIEVAL, 4)
        poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL)
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 4.0
        poll_advice.given(KEY, RETRIEVAL, 1, running=True)
        poll_advice.given(KEY, RETRIEVAL, None)  # settled
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL) == 0.0

    def test_noted_by_another_process(self, clock: Clock) -> None:
        poll_advice.hold_seconds(KEY, WORKSPACE, OTHER, elsewhere=1.0)  # an early poll, counted
        held = poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL, 1.0, running_elsewhere=True)
        assert held == poll_advice.MAX_WAIT_SECONDS
        assert poll_advice.hold_seconds(KEY, WORKSPACE, RETRIEVAL, 1.0) == 1.0  # a pending one

    def test_per_key(self, clock: Clock) -> None:
        poll_advice.given(KEY, RETRIEVAL, 1, running=True)
        poll_advice.given(OTHER_KEY, RETRIEVAL, 1)
        poll_advice.hold_seconds(OTHER_KEY, WORKSPACE, RETRIEVAL)
        assert poll_advice.hold_seconds(OTHER_KEY, WORKSPACE, RETRIEVAL) == 1.0


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

        async def elsewhere(key_id: uuid.UUID, retrieval_id: uuid.UUID) -> tuple[float, bool]:
            calls.append(retrieval_id)
            return 0.0, False

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
        assert asyncio.run(poll_advice._elsewhere(KEY, RETRIEVAL)) == (0.0, False)
