"""The load client's poll modes (`bench.load client`), against a stand-in API on loopback: what
each mode sends, which pool its polls use, and what a read flood and a stop time leave."""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bench.load import GET, POST, _client
from bench.overload import (
    _a_loaded,
    _median,
    _pair,
    _routes,
    _server,
    _without,
    commands,
    server_quantiles,
    targets,
)

SETTLES_AFTER = 3  # GETs of a retrieval before it is `completed` (ids "never-…" never are)


class _Api(BaseHTTPRequestHandler):
    """POST retrieve: a pending retrieval, Retry-After 5; GET: pending until its third GET."""

    protocol_version = "HTTP/1.1"

    def _send(self, status: int, body: dict[str, Any], retry_after: str | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        if retry_after:
            self.send_header("Retry-After", retry_after)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        server: Any = self.server
        with server.lock:
            server.post_connections.add(self.client_address)
            server.posts += 1
            server.urls.append(json.loads(body)["url"])
            rid = f"{server.prefix}{server.posts}"
        self._send(202, {"retrieval": {"id": rid, "state": "pending"}}, "5")

    def do_GET(self) -> None:
        server: Any = self.server
        rid = self.path.rsplit("/", 1)[1]
        with server.lock:
            if self.path == "/healthz":
                server.fills.add(self.client_address)
            else:
                server.gets[rid] = server.gets.get(rid, 0) + 1
                server.get_connections.add(self.client_address)
            seen = server.gets.get(rid, 0)
        if rid == "limited":
            self._send(429, {"error": "rate_limited"}, "1")
            return
        done = seen >= SETTLES_AFTER and not rid.startswith("never")
        self._send(200, {"retrieval": {"id": rid, "state": "completed" if done else "pending"}})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[Any]:
    httpd: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    httpd.daemon_threads = True
    httpd.lock = threading.Lock()
    httpd.posts, httpd.prefix, httpd.gets, httpd.urls = 0, "r", {}, []
    httpd.fills, httpd.get_connections, httpd.post_connections = set(), set(), set()
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()


def _args(api: Any, **options: Any) -> argparse.Namespace:
    defaults: dict[str, Any] = {
        "api": f"http://127.0.0.1:{api.server_address[1]}",
        "key": "k",
        "workspace": "w",
        "url": "https://example.test/",
        "urls": "",
        "rate": 50.0,
        "duration": 0.1,  # 5 slots
        "poll_interval": 1.0,
        "settle_timeout": 3.0,
        "connections": 2,
        "poll_connections": 0,
        "poll_mode": "honour",
        "poll_gap": 0.0,
        "honor_retry_after": True,
        "stop_after": 0.0,
        "get_ids": "",
        "ids_out": "",
        "poll_ids": "",
        "process_index": 0,
        "process_count": 1,
        "start_at": 0.0,
    }
    return argparse.Namespace(**(defaults | options))


def test_ignore_polls_again_at_once_and_honour_waits(api: Any) -> None:
    ignored = asyncio.run(_client(_args(api, poll_mode="ignore")))
    assert len(ignored["settle_s"]) == 5 and ignored["unsettled"] == 0
    assert ignored["retry_after"] == []
    assert sorted(api.gets.values()) == [SETTLES_AFTER] * 5
    api.gets.clear()
    # Honouring Retry-After (5 s) past the 3 s settle timeout: not one poll is sent.
    honoured = asyncio.run(_client(_args(api)))
    assert honoured["unsettled"] == 5 and honoured["settle_s"] == []
    assert honoured["retry_after"] == [5.0] * 5 and api.gets == {}


def test_none_posts_only(api: Any) -> None:
    got = asyncio.run(_client(_args(api, poll_mode="none")))
    assert api.posts == 5 and api.gets == {}
    assert len(got["requests"][POST]) == 5 and got["requests"][GET] == []


def test_posts_take_the_sites_urls_in_turn(api: Any, tmp_path: Path) -> None:
    """Of two processes on one schedule, each POSTs the URLs of its own slots, in order."""
    urls = tmp_path / "urls.txt"
    urls.write_text("https://a.test/0\nhttps://b.test/1\n\nhttps://a.test/2\n")
    for index in (0, 1):
        options = {"poll_mode": "none", "urls": str(urls), "process_count": 2}
        asyncio.run(_client(_args(api, process_index=index, duration=0.12, **options)))
    # Slots 0-5 of the one schedule take line slot % 3 (the blank line is no URL).
    a0, b1, a2 = "https://a.test/0", "https://b.test/1", "https://a.test/2"
    assert api.urls == [a0, a2, b1] + [b1, a0, a2]


def test_polls_use_a_pool_of_their_own(api: Any) -> None:
    asyncio.run(_client(_args(api, poll_mode="ignore", connections=1, poll_connections=3)))
    assert len(api.fills) == 4  # one POST connection and three for the polls, all opened first
    assert len(api.post_connections) == 1 and api.get_connections
    assert api.get_connections <= api.fills and api.get_connections.isdisjoint(api.post_connections)


def test_a_flood_gets_the_ids_round_robin_and_counts_429s(api: Any, tmp_path: Path) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("a\nb\nlimited\n")
    got = asyncio.run(_client(_args(api, rate=60.0, duration=0.1, get_ids=str(ids))))
    assert api.posts == 0 and api.gets == {"a": 2, "b": 2, "limited": 2}
    assert len(got["requests"][GET]) == 6
    assert got["errors"] == {f"{GET}: HTTP 429": 2}


def test_stop_after_abandons_what_is_still_open(api: Any) -> None:
    api.prefix = "never-"
    got = asyncio.run(_client(_args(api, poll_mode="ignore", poll_gap=0.01, stop_after=0.5)))
    assert got["abandoned"] == 5 and got["settle_s"] == [] and got["unsettled"] == 0
    assert all(n > 1 for n in api.gets.values())


def test_routes_counts_429s_by_route() -> None:
    summary = {
        "routes": {
            POST: {"count": 2, "p50_ms": 1.0, "p99_ms": 2.0},
            GET: {"count": 0, "p50_ms": 0, "p99_ms": 0},
        },
        "errors": {f"{POST}: HTTP 429": 3, f"{GET}: no answer": 1},
        "abandoned": 0,
        "client": {"send_lag_ms": {"p99": 0.5}},
    }
    got = _routes(summary)
    assert got["http_429"] == {POST: 3}
    assert "get" not in got and got["post"]["n"] == 2


def test_server_quantiles_are_of_the_answers_between_two_scrapes() -> None:
    post, get, health = ("POST", "/retrieve"), ("GET", "/retrievals/{id}"), ("GET", "/healthz")
    inf = float("inf")
    before = {
        post: [(0.005, 90.0), (0.25, 100.0), (inf, 100.0)],
        health: [(0.005, 3.0), (inf, 3.0)],
    }
    after = {
        # 100 more POSTs: 98 within 5 ms, one within 250 ms, one past the last bound.
        post: [(0.005, 188.0), (0.25, 199.0), (inf, 200.0)],
        get: [(0.005, 0.0), (0.25, 4.0), (inf, 4.0)],
        health: [(0.005, 3.0), (inf, 3.0)],
    }
    got = server_quantiles(before, after)
    assert got["POST /retrieve"] == {"n": 100.0, "p50_le_ms": 5.0, "p99_le_ms": 250.0}
    assert got["GET /retrievals/{id}"] == {"n": 4.0, "p50_le_ms": 250.0, "p99_le_ms": 250.0}
    assert "GET /healthz" not in got  # nothing answered between the scrapes
    after[post][-1] = (inf, 210.0)  # ten more past the last bound: p99 is unbounded
    assert server_quantiles(before, after)["POST /retrieve"]["p99_le_ms"] is None
    assert _server(server_quantiles(before, after), "POST") == "5.0 / >"


def test_the_make_run_set_is_the_procfile_less_its_addresses(tmp_path: Path) -> None:
    assert _without(
        ["api", "--host", "h", "--port", "1", "--workers", "2"], "--host", "--port"
    ) == [
        "api",
        "--workers",
        "2",
    ]
    made = commands("make-run", tmp_path)
    procfile = (Path(__file__).parents[2] / "deploy" / "Procfile").read_text()
    worker_line = next(line for line in procfile.splitlines() if line.startswith("worker:"))
    assert worker_line.split(":", 1)[1].split() == ["evidence", *made["worker"]]
    assert "--port" not in made["api"] and "--host" not in made["api"]
    assert made["beat"] == ["beat", "--schedule", str(tmp_path / "beat")]
    assert commands("cli-defaults", tmp_path) == {
        "api": ["api"],
        "worker": ["worker"],
        "beat": ["beat", "--schedule", str(tmp_path / "beat")],
    }


def test_api_workers_replace_the_sets_process_count(tmp_path: Path) -> None:
    made = commands("make-run", tmp_path, api_workers=4)
    assert made["api"][made["api"].index("--workers") + 1] == "4"
    assert made["api"].count("--workers") == 1
    assert commands("cli-defaults", tmp_path, api_workers=3)["api"] == ["api", "--workers", "3"]


def _loaded_or_not(settled: float, post_p99: float | None, api_cpu: float) -> dict[str, Any]:
    post = {} if post_p99 is None else {"post": {"p99_ms": post_p99}}
    return {
        "A": post,
        "B": {"get": {"p99_ms": 20.0}},
        "A_settled_per_s": settled,
        "A_get_per_s": 0 if post_p99 is None else 120,
        "cpu_pct": {"api": api_cpu},
    }


def test_a_pair_is_the_ratio_of_its_own_phases() -> None:
    pair = _pair(_loaded_or_not(30.0, None, 40.0), _loaded_or_not(24.0, 61.5, 60.0))
    assert pair == {
        "settled_per_s": [30.0, 24.0],
        "settled_ratio": 0.8,
        "post_p99_ms": 61.5,
        "b_get_p99_ms": 20.0,
        "a_get_per_s": 120,
        "api_cpu_pct": [40.0, 60.0],
    }


def test_the_targets_take_the_median_pair() -> None:
    def pair(ratio: float, post_p99: float | None) -> dict[str, Any]:
        return {"settled_ratio": ratio, "post_p99_ms": post_p99, "b_get_p99_ms": 20.0}

    flood = {"B_settle_ratio": 1.2, "B": {"settle": {"unsettled": 0}}}
    # The first pair misses both, the other two meet them: the median pair meets them.
    pairs = [pair(0.49, 120.0), pair(0.82, 46.0), pair(0.84, 37.0)]
    got = targets({"flood": flood, "pairs": pairs, "settled_ratio": _median([0.49, 0.82, 0.84])})
    assert got == {
        "post_p99_lt_50ms": True,
        "b_get_p99_lt_100ms": True,
        "settled_ge_70pct": True,
        "flood_b_within_2x_idle": True,
    }
    # Two of three miss: so does the median.
    pairs = [pair(0.49, 120.0), pair(0.6, 46.0), pair(0.84, 70.0)]
    got = targets({"flood": flood, "pairs": pairs, "settled_ratio": _median([0.49, 0.6, 0.84])})
    assert not got["post_p99_lt_50ms"] and not got["settled_ge_70pct"]
    # A loaded phase without a POST answered counts as a miss, not as a pass.
    assert not targets({"flood": flood, "pairs": [pair(0.9, None)], "settled_ratio": 0.9})[
        "post_p99_lt_50ms"
    ]


def test_a_loaded_phase_starts_its_pollers_on_an_empty_id_file(tmp_path: Path) -> None:
    ids = tmp_path / "loaded-ids.txt"
    ids.write_text("an earlier pair's retrieval\n")
    args = argparse.Namespace(
        client_processes=2, poll_gap=0.0, poll_connections=256, connections=128, rate=200.0,
        duration=20.0,
    )  # fmt: skip
    posters, pollers = _a_loaded(args, "key", "workspace", ids, combined=False)
    assert ids.read_text() == ""
    assert posters.options[-2:] == ["--ids-out", str(ids)] and str(ids) in pollers.options


def test_the_median_skips_unknown_values_and_means_the_middle_two() -> None:
    assert _median([3.0, None, 1.0, 2.0]) == 2.0
    # Of two pairs, neither the better nor the worse: a POST p99 of 46.9 and 75.6 ms is 61.3.
    assert _median([75.64, 46.94]) == 61.29
    assert _median([None]) is None


def test_posters_hand_their_retrievals_to_pollers_in_other_clients(
    api: Any, tmp_path: Path
) -> None:
    ids = tmp_path / "ids.txt"
    poster = _args(api, rate=50.0, duration=0.2, poll_mode="none", ids_out=str(ids))  # 10 slots

    def poller(index: int) -> argparse.Namespace:
        return _args(
            api, poll_mode="ignore", poll_ids=str(ids), poll_connections=2, stop_after=1.0,
            process_index=index, process_count=2,
        )  # fmt: skip

    async def together() -> list[dict[str, Any]]:
        return list(await asyncio.gather(_client(poster), _client(poller(0)), _client(poller(1))))

    posted, first, second = asyncio.run(together())
    assert len(posted["requests"][POST]) == 10 and posted["requests"][GET] == []
    assert len(ids.read_text().splitlines()) == 10
    # Every retrieval polled until it settled, by one poller: the lines split between the two.
    assert sorted(api.gets.values()) == [SETTLES_AFTER] * 10
    assert len(first["settle_s"]) == len(second["settle_s"]) == 5
    assert first["requests"][POST] == second["requests"][POST] == []
    assert first["abandoned"] == second["abandoned"] == 0
