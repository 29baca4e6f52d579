"""The write-rate limiter against a real Redis: a single's token comes from a short lease the
process takes ahead, the bucket never grants more than its rate across processes, and what a
lease does not use goes back."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis

from api.services import admission as quotas
from api.services.admission import Limits, RateLimiter, lease_size, shortfall_wait
from tests.conftest import Env
from tests.support.redis_scripts import ScriptRuns


@pytest.fixture
def bucket(env: Env) -> Iterator[uuid.UUID]:
    workspace = uuid.uuid4()
    yield workspace
    redis.Redis.from_url(env.redis.url).delete(f"{quotas.BUCKET_PREFIX}{workspace}")


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> ScriptRuns:
    return ScriptRuns(monkeypatch, quotas._TAKE)


def bucket_state(env: Env, workspace: uuid.UUID) -> tuple[float, int]:
    """The bucket's tokens, and the Redis time (µs) they were counted at."""
    key = f"{quotas.BUCKET_PREFIX}{workspace}"
    tokens, ts_us = redis.Redis.from_url(env.redis.url).hmget(key, "tokens", "ts_us")
    assert tokens is not None and ts_us is not None
    return float(tokens), int(ts_us)


def bucket_tokens(env: Env, workspace: uuid.UUID) -> float:
    return bucket_state(env, workspace)[0]


def redis_time(env: Env) -> float:
    seconds, micros = redis.Redis.from_url(env.redis.url).time()
    return seconds + micros / 1_000_000


class TestLeaseSize:
    def test_starts_at_one(self) -> None:
        assert lease_size(0, False, Limits(10, 1000.0, 2000)) == 1
        assert lease_size(0, True, Limits(10, 1000.0, 2000)) == 1

    def test_follows_what_the_last_lease_used(self) -> None:
        assert lease_size(7, False, Limits(10, 1000.0, 2000)) == 7

    def test_doubles_when_the_last_ran_out_early(self) -> None:
        assert lease_size(4, True, Limits(10, 1000.0, 2000)) == 8

    def test_never_more_than_a_lease_of_the_rate(self) -> None:
        # 100/s for LEASE_SECONDS (0.1 s): 10.
        assert lease_size(30, True, Limits(10, 100.0, 2000)) == 10
        assert lease_size(10_000, True, Limits(10, 1e6, 2000)) == quotas.MAX_LEASE_TOKENS

    def test_a_slow_rate_takes_one_at_a_time(self) -> None:
        assert lease_size(5, True, Limits(10, 0.5, 2)) == 1


class TestShortfallWait:
    def test_time_to_refill_what_is_missing(self) -> None:
        assert shortfall_wait(1, 0.25, Limits(10, 0.5, 2)) == pytest.approx(1.5)
        assert shortfall_wait(3, 1.0, Limits(10, 1.0, 10)) == pytest.approx(2.0)

    def test_never_waits_for_more_than_the_burst(self) -> None:
        assert shortfall_wait(100, 0.0, Limits(10, 1.0, 5)) == pytest.approx(5.0)


class TestLeases:
    def test_singles_ask_redis_once_a_lease(self, bucket: uuid.UUID, runs: ScriptRuns) -> None:
        """Forty singles in quick succession: the lease grows 1, 2, 4, 8 ...; far fewer calls."""
        limiter, limits = RateLimiter(), Limits(10, 10_000.0, 10_000)
        grants = [limiter.take(bucket, 1, limits) for _ in range(40)]
        calls = runs.count
        assert all(g.granted == 1 for g in grants)
        assert calls <= 10, calls  # one a single: 40

    def test_a_replay_costs_no_round_trip(
        self, bucket: uuid.UUID, runs: ScriptRuns, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Taken, then given back (a replay): within the lease, Redis is not asked again."""
        monkeypatch.setattr(quotas, "LEASE_SECONDS", 30.0)
        limiter, limits = RateLimiter(), Limits(10, 0.5, 2)
        for _ in range(20):
            assert limiter.take(bucket, 1, limits).granted == 1
            limiter.refund(bucket, 1, limits)
        assert runs.count == 1

    def test_unused_tokens_go_back_to_the_bucket(
        self, env: Env, bucket: uuid.UUID, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A lease's leftover tokens return with the next take once it has expired: nothing is
        lost. (A slow rate: the bucket refills by under half a token over the test.)"""
        monkeypatch.setattr(quotas, "LEASE_SECONDS", 30.0)  # leases of up to 3 tokens
        burst = 100
        limiter, limits = RateLimiter(), Limits(10, 0.1, burst)
        limiter.take(bucket, 1, limits)
        limiter.take(bucket, 1, limits)  # ran out early: the next lease is twice as large
        lease = limiter._leases[bucket]
        assert lease.tokens == 1  # one of two left
        assert bucket_tokens(env, bucket) == pytest.approx(burst - 3, abs=0.5)
        lease.until = 0.0  # expired
        limiter.take(bucket, 1, limits)
        # 3 taken from the bucket, 1 of them unused and given back, 1 more taken: 3 granted.
        granted, held = 3, limiter._leases[bucket].tokens
        assert bucket_tokens(env, bucket) + held == pytest.approx(burst - granted, abs=0.5)

    def test_a_forked_process_does_not_spend_its_parents_lease(
        self, bucket: uuid.UUID, runs: ScriptRuns, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(quotas, "LEASE_SECONDS", 30.0)
        limiter, limits = RateLimiter(), Limits(10, 10.0, 100)
        limiter.take(bucket, 1, limits)
        limiter.take(bucket, 1, limits)  # a lease of two: one token left in it
        assert limiter._leases[bucket].tokens == 1
        parent = quotas.os.getpid()
        monkeypatch.setattr(quotas.os, "getpid", lambda: parent + 1)
        before = runs.count
        assert limiter.take(bucket, 1, limits).granted == 1
        assert runs.count - before == 1  # its own lease, from the bucket

    def test_leases_are_kept_for_a_bounded_number_of_workspaces(
        self, env: Env, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Past the cap the process starts afresh: memory does not grow with workspaces seen."""
        monkeypatch.setattr(quotas, "MAX_LEASED_WORKSPACES", 2)
        limiter, limits = RateLimiter(), Limits(10, 10.0, 100)
        workspaces = [uuid.uuid4() for _ in range(3)]
        try:
            for workspace in workspaces:
                assert limiter.take(workspace, 1, limits).granted == 1
            assert list(limiter._leases) == [workspaces[2]]
        finally:
            keys = [f"{quotas.BUCKET_PREFIX}{w}" for w in workspaces]
            redis.Redis.from_url(env.redis.url).delete(*keys)

    def test_a_refusal_says_when_one_token_comes_back(self, env: Env, bucket: uuid.UUID) -> None:
        limiter, limits = RateLimiter(), Limits(10, 0.5, 2)
        assert [limiter.take(bucket, 1, limits).granted for _ in range(3)] == [1, 1, 0]
        refused = limiter.take(bucket, 1, limits)
        assert refused.granted == 0 and refused.retry_after in (1, 2)

    def test_processes_together_never_exceed_the_rate(self, env: Env, bucket: uuid.UUID) -> None:
        """Two limiters (two API processes), eight threads each, taking singles as fast as they
        can for half a second: no more granted than the burst plus the rate over that time, and
        every token accounted for: granted, held in a lease, or still in the bucket."""
        rate, burst = 200.0, 20
        limits = Limits(10, rate, burst)
        processes = [RateLimiter(), RateLimiter()]
        granted = [0] * 16
        stop = threading.Event()
        began = redis_time(env)

        def hammer(n: int) -> None:
            limiter = processes[n % 2]
            while not stop.is_set():
                granted[n] += limiter.take(bucket, 1, limits).granted

        threads = [threading.Thread(target=hammer, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        stop.set()
        for thread in threads:
            thread.join()
        elapsed = redis_time(env) - began  # the bucket's clock
        supply = burst + rate * elapsed
        held = sum(lease.tokens for p in processes for lease in p._leases.values())
        assert sum(granted) <= supply
        # The bucket refilled from the first take to the last, a few ms inside the half second.
        accounted = sum(granted) + held + bucket_tokens(env, bucket)
        assert supply - rate * 0.2 <= accounted <= supply


class TestBucketClock:
    def test_refill_balances_over_many_takes(self, env: Env, bucket: uuid.UUID) -> None:
        """The bucket gains exactly its rate times the time between takes on Redis' clock: over
        hundreds of takes, what was granted balances what refilled to a hundredth of a token. A
        clock kept to 100 µs gained or lost up to 5 tokens a take at this rate."""
        rate = 100_000.0
        limits = Limits(10, rate, 1_000_000)
        limiter = RateLimiter()
        assert limiter.take(bucket, 1_000_000, limits).granted == 1_000_000  # drain it
        first_tokens, first_us = bucket_state(env, bucket)
        granted = sum(limiter.take(bucket, 2, limits).granted for _ in range(400))
        last_tokens, last_us = bucket_state(env, bucket)
        refilled = rate * (last_us - first_us) / 1_000_000
        assert granted > 0
        assert abs(first_tokens + refilled - granted - last_tokens) < 0.01
