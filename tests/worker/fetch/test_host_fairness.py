"""A busy host's slots are shared between the workspaces waiting for it (real Redis, loopback).

Workspace A holds every slot of a host with URLs that hang and has more of them queued, in
two "processes" (two fetchers, each with its own local gates, sharing Redis); workspace B's
fetch of the same host takes the next slot that frees, before any of A's queued ones.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support import hostile
from tests.support.services import wait_for
from tests.support.tls_site import Page, TLSSite, send
from worker.fetch.fetcher import Fetcher
from worker.fetch.politeness import Politeness, SharedState, for_workspace
from worker.fetch.types import FetchFailure
from worker.platform.ranked_gate import BATCH, INTERACTIVE

LIMIT = 2


@pytest.fixture(autouse=True)
def _clean_redis() -> Iterator[None]:
    with redis.Redis.from_url(hostile.private_redis_url()) as client:
        client.flushdb()
        yield
        client.flushdb()


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    with redis.Redis.from_url(hostile.private_redis_url(), decode_responses=True) as made:
        yield made


@pytest.fixture
def state() -> Iterator[SharedState]:
    shared = SharedState(hostile.private_redis_url())
    yield shared
    shared.close()


def waiting(client: redis.Redis, origin: str) -> list[str]:
    """The members of `origin`'s line in Redis: `rank|workspace|token`."""
    return list(client.zrange(f"evidence:waiting:{origin}", 0, -1))


class TestFairTurns:
    """The slot that frees goes to the waiting workspace that holds fewest."""

    def test_workspace_holding_none_goes_before_one_holding_all(
        self, tmp_path: Path, client: redis.Redis
    ) -> None:
        """A holds both slots and queues six more in two processes; B's fetch is next in."""
        started: list[str] = []
        hang = threading.Semaphore(0)

        def held(handler: BaseHTTPRequestHandler) -> None:
            started.append("a")
            hang.acquire(timeout=60)
            send(handler, Page(b"<p>a</p>"))

        def quick(handler: BaseHTTPRequestHandler) -> None:
            started.append("b")
            send(handler, Page(b"<p>b</p>"))

        with TLSSite() as site:
            site.add("/a", held)
            site.add("/b", quick)
            ca = site.write_ca(tmp_path / "ca.pem")
            origin = f"https://127.0.0.1:{site.port}"
            settings = hostile.fetch_settings(
                [site.port], ca_bundle=ca, fetch_total_timeout_seconds=60.0
            )
            states = [SharedState(hostile.private_redis_url()) for _ in range(2)]
            processes = [
                Fetcher(
                    settings,  # type: ignore[arg-type]
                    dialer=hostile.LoopbackOnlyDialer(),  # type: ignore[arg-type]
                    politeness=Politeness(shared, per_host_limit=LIMIT),
                )
                for shared in states
            ]
            bodies: dict[str, list[bytes]] = {"A": [], "B": []}

            def fetch(fetcher: Fetcher, workspace: str, path: str) -> None:
                with for_workspace(workspace):
                    bodies[workspace].append(fetcher.fetch(site.url(path)).body)

            a_threads = [
                threading.Thread(target=fetch, args=(processes[n % 2], "A", "/a")) for n in range(8)
            ]
            b_thread = threading.Thread(target=fetch, args=(processes[0], "B", "/b"))
            try:
                for thread in a_threads:
                    thread.start()
                # A holds both slots; each process's other A permit polls in Redis's line.
                wait_for(lambda: len(started) == LIMIT and len(waiting(client, origin)) == 2, 10)
                b_thread.start()
                wait_for(lambda: any("|B|" in m for m in waiting(client, origin)), 10)
                hang.release()  # one of A's slots frees
                wait_for(lambda: len(started) > LIMIT, 10)
                assert started[LIMIT] == "b", started
                b_thread.join(30)
                assert bodies["B"] == [b"<p>b</p>"]
            finally:
                hang.release(20)
                for thread in [*a_threads, b_thread]:
                    thread.join(60)
                for fetcher in processes:
                    fetcher.close()
                for shared in states:
                    shared.close()
        assert bodies["A"] == [b"<p>a</p>"] * 8
        assert waiting(client, origin) == []


class TestTurnOrder:
    """The script's choice, one poll at a time (each `_acquire` is one poll)."""

    def test_fewest_held_first(self, state: SharedState) -> None:
        """A free slot is not taken by a workspace holding more while one holding fewer waits."""
        politeness = Politeness(state, per_host_limit=2)
        assert politeness._acquire("h", "a1", "A") and politeness._acquire("h", "a2", "A")
        assert not politeness._acquire("h", "a3", "A")
        assert not politeness._acquire("h", "b1", "B")
        state.client.zrem("evidence:slots:h", "A|a1")
        assert not politeness._acquire("h", "a3", "A")  # B holds none, A one: B's turn
        assert politeness._acquire("h", "b1", "B")

    def test_interactive_before_fewest_held(self, state: SharedState) -> None:
        """Interactive work still goes first: a batch fetch of a workspace holding nothing
        waits for another workspace's interactive one."""
        politeness = Politeness(state, per_host_limit=1)
        assert politeness._acquire("h", "a1", "A", INTERACTIVE)
        assert not politeness._acquire("h", "a2", "A", INTERACTIVE)
        assert not politeness._acquire("h", "b1", "B", BATCH)
        state.client.zrem("evidence:slots:h", "A|a1")
        assert not politeness._acquire("h", "b1", "B", BATCH)
        assert politeness._acquire("h", "a2", "A", INTERACTIVE)

    def test_round_robin_when_holding_as_many(self, state: SharedState) -> None:
        """Workspaces holding as many: the one served longest ago goes first."""
        politeness = Politeness(state, per_host_limit=1)
        assert politeness._acquire("h", "b0", "B")  # B served last
        state.client.zrem("evidence:slots:h", "B|b0")
        assert politeness._acquire("h", "c0", "C")  # ...then C, the latest
        assert not politeness._acquire("h", "c1", "C")
        assert not politeness._acquire("h", "b1", "B")
        state.client.zrem("evidence:slots:h", "C|c0")
        assert not politeness._acquire("h", "c1", "C")  # B was served longer ago
        assert politeness._acquire("h", "b1", "B")

    def test_a_waiter_who_gave_up_leaves_the_line(
        self, state: SharedState, client: redis.Redis
    ) -> None:
        """Waiting past the deadline is rate_limited and takes the waiter out of Redis's line,
        so the next free slot does not wait for it."""
        politeness = Politeness(state, per_host_limit=1)
        assert politeness._acquire("h", "a1", "A")
        with (
            for_workspace("B"),
            pytest.raises(FetchFailure, match="already running"),
            politeness.slot("h", 0.2),
        ):
            pass
        assert waiting(client, "h") == []
        state.client.zrem("evidence:slots:h", "A|a1")
        assert politeness._acquire("h", "c1", "C")


def test_uncontended_host_asks_redis_as_before(
    state: SharedState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nobody waiting, a slot is still one script run and one ZREM."""
    calls: list[str] = []
    real = state._guarded

    def counted(fallback: Any, method: str, ask: Any) -> Any:
        calls.append(method)
        return real(fallback, method, ask)

    monkeypatch.setattr(state, "_guarded", counted)
    politeness = Politeness(state, per_host_limit=2)
    with for_workspace("A"), politeness.slot("h", 1), politeness.slot("h", 1):
        pass
    assert calls == ["evalsha", "evalsha", "zrem", "zrem"]
