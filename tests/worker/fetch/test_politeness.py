"""Politeness through Redis: shared back-off after 429, per-host slots, degrading open."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import redis

from tests.conftest import ENV
from tests.support import hostile
from tests.support.slowdown import scaled
from tests.support.tls_site import TLSSite
from worker.domain.reasons import Reason
from worker.fetch.fetcher import Fetcher
from worker.fetch.politeness import Politeness, SharedState
from worker.fetch.types import FetchFailure

UNREACHABLE_REDIS = "redis://127.0.0.1:1/15"


@pytest.fixture(autouse=True)
def _clean_redis() -> Iterator[None]:
    with redis.Redis.from_url(hostile.private_redis_url()) as client:
        client.flushdb()
        yield
        client.flushdb()


@pytest.fixture
def site() -> Iterator[TLSSite]:
    with TLSSite() as running:
        running.page("/ok", "<p>ok</p>")
        yield running


@pytest.fixture
def state() -> Iterator[SharedState]:
    """Politeness state on the test Redis, its client closed after the test."""
    shared = SharedState(hostile.private_redis_url())
    yield shared
    shared.close()


@pytest.fixture
def make(site: TLSSite, tmp_path: Path) -> Iterator[Any]:
    made: list[Fetcher] = []
    ca = site.write_ca(tmp_path / "ca.pem")

    def build(politeness: Politeness | None = None, **overrides: Any) -> Fetcher:
        settings = hostile.fetch_settings([site.port], ca_bundle=ca, **overrides)
        fetcher = Fetcher(
            settings,  # type: ignore[arg-type]
            dialer=hostile.LoopbackOnlyDialer(),  # type: ignore[arg-type]
            politeness=politeness,
        )
        made.append(fetcher)
        return fetcher

    yield build
    for fetcher in made:
        fetcher.close()


def test_fetch_tests_use_this_runs_own_redis() -> None:
    """The fetch tests flush their Redis database: it is on this run's own redis-server, so two
    runs on one machine (or the machine's services) never lose each other's state."""
    settings = hostile.fetch_settings([443])
    assert urlsplit(settings.politeness_redis_url).port == ENV.redis.port  # type: ignore[attr-defined]


def failure_of(fetcher: Fetcher, url: str) -> FetchFailure:
    with pytest.raises(FetchFailure) as caught:
        fetcher.fetch(url)
    return caught.value


class TestBackoff:
    """A 429 makes every fetcher leave the host alone until Retry-After passes."""

    def test_shared_across_fetchers(self, site: TLSSite, make: Any) -> None:
        """After a 429, another Fetcher answers rate_limited without touching the host."""
        site.add("/busy", hostile.rate_limited("120"))
        first = failure_of(make(), site.url("/busy"))
        assert (first.reason, first.retry_after_seconds) == (Reason.RATE_LIMITED, 120)
        second = failure_of(make(), site.url("/ok"))
        assert second.reason is Reason.RATE_LIMITED
        assert second.retry_after_seconds is not None and 115 <= second.retry_after_seconds <= 120
        assert "/ok" not in site.hits

    def test_media_fetch_backs_off_too(self, site: TLSSite, make: Any) -> None:
        """A 429 on an image fetch backs off the host for page fetches as well."""
        site.add("/busy.png", hostile.rate_limited("120"))
        with pytest.raises(FetchFailure) as caught:
            make().fetch_media(site.url("/busy.png"), 1024)
        assert caught.value.reason is Reason.RATE_LIMITED
        assert failure_of(make(), site.url("/ok")).reason is Reason.RATE_LIMITED
        assert "/ok" not in site.hits

    def test_expires(self, site: TLSSite, make: Any) -> None:
        """Once Retry-After has passed, the host is fetched again."""
        site.add("/busy", hostile.rate_limited("1"))
        fetcher = make()
        assert failure_of(fetcher, site.url("/busy")).reason is Reason.RATE_LIMITED
        assert failure_of(fetcher, site.url("/ok")).retry_after_seconds == 1
        time.sleep(1.1)
        assert fetcher.fetch(site.url("/ok")).body == b"<p>ok</p>"

    def test_robots_txt_is_not_fetched_from_a_host_backing_off(
        self, site: TLSSite, make: Any
    ) -> None:
        """With robots.txt on and not yet known, a host backing off gets no request at all."""
        site.page("/robots.txt", "User-agent: *\nDisallow:\n", "text/plain")
        site.add("/busy", hostile.rate_limited("120"))
        assert failure_of(make(), site.url("/busy")).reason is Reason.RATE_LIMITED
        fetcher = make(robots_txt=True)
        assert failure_of(fetcher, site.url("/ok")).reason is Reason.RATE_LIMITED
        assert "/robots.txt" not in site.hits and "/ok" not in site.hits

    def test_one_round_trip_asks_the_back_off_and_takes_the_slot(
        self, site: TLSSite, make: Any, state: SharedState, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Each fetch asks Redis twice: the slot (with the back-off) and its release."""
        calls: list[str] = []
        real = state._guarded

        def counted(fallback: Any, method: str, ask: Any) -> Any:
            calls.append(method)
            return real(fallback, method, ask)

        monkeypatch.setattr(state, "_guarded", counted)
        fetcher = make(politeness=Politeness(state))
        assert fetcher.fetch(site.url("/ok")).body == b"<p>ok</p>"
        assert calls == ["evalsha", "zrem"]

    def test_other_hosts_unaffected(self, site: TLSSite, make: Any, state: SharedState) -> None:
        """A back-off on one origin does not touch another."""
        Politeness(state).record_backoff("https://example.org:443", 100)
        assert make().fetch(site.url("/ok")).body == b"<p>ok</p>"

    def test_never_shortened(self, state: SharedState) -> None:
        """A shorter Retry-After does not cut an existing longer back-off."""
        politeness = Politeness(state)
        politeness.record_backoff("https://h:443", 100)
        politeness.record_backoff("https://h:443", 5)
        remaining = politeness.backoff_remaining("https://h:443")
        assert remaining is not None and remaining > 90


class TestSlots:
    """At most per_host_limit fetches of one host run at once, fleet-wide."""

    def test_full_host_waits_then_rate_limited(
        self, site: TLSSite, make: Any, state: SharedState
    ) -> None:
        """With every slot taken, a fetch waits out its deadline and is rate_limited."""
        politeness = Politeness(state, per_host_limit=1)
        fetcher = make(politeness=politeness, fetch_total_timeout_seconds=0.5)
        origin = f"https://127.0.0.1:{site.port}"
        start = time.monotonic()
        with politeness.slot(origin, 0):
            failure = failure_of(fetcher, site.url("/ok"))
        assert failure.reason is Reason.RATE_LIMITED and failure.retry_after_seconds
        assert time.monotonic() - start < 0.5 + min(scaled(1.5), 5.0)  # the deadline, not later
        assert "/ok" not in site.hits

    def test_slot_released(self, site: TLSSite, make: Any, state: SharedState) -> None:
        """Slots are given back after each fetch, success or failure."""
        politeness = Politeness(state, per_host_limit=1)
        fetcher = make(politeness=politeness)
        for _ in range(3):
            fetcher.fetch(site.url("/ok"))
        assert failure_of(fetcher, site.url("/missing")).reason is Reason.NOT_FOUND
        with redis.Redis.from_url(hostile.private_redis_url()) as client:
            assert client.zcard(f"evidence:slots:https://127.0.0.1:{site.port}") == 0

    def test_crashed_holder_expires(self, state: SharedState) -> None:
        """A slot whose holder died is reclaimed after its lease."""
        politeness = Politeness(state, per_host_limit=1, slot_lease_seconds=0.3)
        assert politeness._acquire("x", "dead-holder")
        assert not politeness._acquire("x", "waiting")
        time.sleep(0.35)
        with politeness.slot("x", 0):
            pass


class TestRedisDown:
    """An unreachable Redis never fails a fetch."""

    def test_fetch_degrades_open(self, site: TLSSite, make: Any) -> None:
        """With Redis unreachable, fetches (and robots.txt) proceed."""
        site.page("/robots.txt", "User-agent: *\nDisallow:\n", "text/plain")
        fetcher = make(redis_url=UNREACHABLE_REDIS, robots_txt=True)
        start = time.monotonic()
        assert fetcher.fetch(site.url("/ok")).body == b"<p>ok</p>"
        assert fetcher.fetch(site.url("/ok")).body == b"<p>ok</p>"
        assert time.monotonic() - start < scaled(3.0)  # no wait on the unreachable Redis

    def test_429_with_redis_down(self, site: TLSSite, make: Any) -> None:
        """A 429 is still reported when its back-off cannot be shared."""
        site.add("/busy", hostile.rate_limited("30"))
        failure = failure_of(make(redis_url=UNREACHABLE_REDIS), site.url("/busy"))
        assert (failure.reason, failure.retry_after_seconds) == (Reason.RATE_LIMITED, 30)


class TestLocalGate:
    """A process's own fetches of one host queue on a semaphore, not on Redis polls."""

    def test_at_most_limit_at_once_per_origin(self) -> None:
        """Ten threads, limit 2: never more than 2 inside for one origin; others unaffected."""
        import threading

        from worker.fetch.politeness import LocalGate

        gate = LocalGate(2)
        inside = {"a": 0, "b": 0}
        most = {"a": 0, "b": 0}
        lock = threading.Lock()

        def visit(origin: str) -> None:
            with gate.hold(origin, 10) as acquired:
                assert acquired
                with lock:
                    inside[origin] += 1
                    most[origin] = max(most[origin], inside[origin])
                time.sleep(0.05)
                with lock:
                    inside[origin] -= 1

        threads = [threading.Thread(target=visit, args=("ab"[n % 2],)) for n in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert most == {"a": 2, "b": 2}
        assert gate._gates == {}  # nothing kept for origins nobody is using

    def test_waiting_past_the_deadline_is_rate_limited(self, make: Any, site: TLSSite) -> None:
        """A fetch that cannot get one of the process's permits in time is rate_limited, and
        while it waits it does not poll Redis."""
        politeness = Politeness(SharedState(hostile.private_redis_url()), per_host_limit=1)
        fetcher = make(politeness)
        origin = site.url("/").rstrip("/")
        calls: list[str] = []
        real_call = politeness.state.call

        def counting(fallback: Any, method: str, *args: Any, **kwargs: Any) -> Any:
            calls.append(method)
            return real_call(fallback, method, *args, **kwargs)

        politeness.state.call = counting  # type: ignore[method-assign]
        with politeness.local.hold(origin, 1):
            started = time.monotonic()
            with pytest.raises(FetchFailure) as caught, politeness.slot(origin, 0.5):
                pass
            assert 0.4 < time.monotonic() - started < 0.5 + min(scaled(1.5), 5.0)
        assert caught.value.reason is Reason.RATE_LIMITED
        assert "eval" not in calls
        assert fetcher.fetch(site.url("/ok")).status_code == 200
