"""The real Fetcher against hostile loopback TLS sites: every bound and every reason."""

from __future__ import annotations

import socket
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support import hostile
from tests.support.services import RedisServer, wait_for
from tests.support.slowdown import scaled
from tests.support.tls_site import Page, TLSSite, send
from worker.domain.reasons import Reason
from worker.fetch.errors import parse_retry_after
from worker.fetch.fetcher import Fetcher
from worker.fetch.media import ALLOWED_MIME_TYPES, parse_content_type
from worker.fetch.politeness import Politeness, SharedState
from worker.fetch.types import FetchedResponse, FetchFailure

#: Past a bound, how late its fetch may end: 1.5 s on a quiet machine, more on a busy one, but
#: always well short of the hostile servers' 10 s, so each test still tells which bound held.
SLACK = min(scaled(1.5), 5.0)


@pytest.fixture(autouse=True)
def _clean_redis() -> Iterator[None]:
    with redis.Redis.from_url(hostile.private_redis_url()) as client:
        client.flushdb()
        yield
        client.flushdb()


@pytest.fixture(scope="module")
def _shared_site() -> Iterator[TLSSite]:
    with TLSSite() as running:
        yield running


@pytest.fixture
def site(_shared_site: TLSSite) -> TLSSite:
    _shared_site.routes.clear()
    _shared_site.hits.clear()
    return _shared_site


@pytest.fixture
def dialer() -> hostile.LoopbackOnlyDialer:
    return hostile.LoopbackOnlyDialer()


@pytest.fixture
def make(site: TLSSite, tmp_path: Path, dialer: hostile.LoopbackOnlyDialer) -> Iterator[Any]:
    made: list[Fetcher] = []
    ca = site.write_ca(tmp_path / "ca.pem")

    def build(
        ports: list[int] | None = None, politeness: Politeness | None = None, **overrides: Any
    ) -> Fetcher:
        overrides.setdefault("ca_bundle", ca)
        settings = hostile.fetch_settings(ports or [site.port], **overrides)
        fetcher = Fetcher(
            settings,  # type: ignore[arg-type]
            resolver=hostile.static_resolver(hostile.TEST_HOSTS),
            dialer=dialer,  # type: ignore[arg-type]
            politeness=politeness,
        )
        made.append(fetcher)
        return fetcher

    yield build
    for fetcher in made:
        fetcher.close()


def fail(fetcher: Fetcher, url: str) -> FetchFailure:
    with pytest.raises(FetchFailure) as caught:
        fetcher.fetch(url)
    return caught.value


def timed(call: Callable[[], Any]) -> tuple[Any, float]:
    start = time.monotonic()
    try:
        return call(), time.monotonic() - start
    except FetchFailure as failure:
        return failure, time.monotonic() - start


class TestSuccess:
    """Ordinary pages come back whole, decoded and classified."""

    def test_plain_page(self, site: TLSSite, make: Any) -> None:
        """A 200 HTML page returns body, final URL, mime type and charset."""
        url = site.page("/a", "<html><p>hello</p></html>", "text/html; charset=ISO-8859-1")
        response = make().fetch(url)
        assert isinstance(response, FetchedResponse)
        assert (response.url, response.status_code, response.truncated) == (url, 200, False)
        assert response.body == b"<html><p>hello</p></html>"
        assert (response.mime_type, response.charset) == ("text/html", "windows-1252")

    def test_hostname_with_sni(self, site: TLSSite, make: Any, dialer: Any) -> None:
        """A name is resolved once and dialled by address; TLS is verified for the name."""
        site.page("/q", "<p>x</p>")
        assert make().fetch(site.url("/q", host="site.test")).body == b"<p>x</p>"
        assert all(host == "127.0.0.1" for host, _ in dialer.dialled)

    def test_connection_reused(self, site: TLSSite, make: Any, dialer: Any) -> None:
        """Two fetches of one origin share one pooled connection."""
        fetcher = make()
        url = site.page("/k", "<p>keep</p>")
        fetcher.fetch(url)
        fetcher.fetch(url)
        assert len(dialer.dialled) == 1

    @pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate", "br"])
    def test_content_encodings(self, site: TLSSite, make: Any, encoding: str) -> None:
        """gzip, zlib deflate, raw deflate and brotli bodies are decoded."""
        body = b"<html>" + b"<p>words</p>" * 500 + b"</html>"
        site.add("/enc", hostile.encoded(body, encoding))
        response = make().fetch(site.url("/enc"))
        assert response.body == body and not response.truncated

    def test_user_agent_is_honest(self, site: TLSSite, make: Any) -> None:
        """The configured User-Agent is sent."""
        seen: list[str] = []

        def echo(handler: BaseHTTPRequestHandler) -> None:
            seen.append(handler.headers.get("User-Agent", ""))
            hostile.serve(handler, Page(b"<p>ua</p>"))

        site.add("/ua", echo)
        make(user_agent="TestBot/1.0 (+https://example.org)").fetch(site.url("/ua"))
        assert seen == ["TestBot/1.0 (+https://example.org)"]

    @pytest.mark.parametrize(
        ("path", "body", "content_type", "expected"),
        [
            ("/s1", b"<!DOCTYPE html><html></html>", "", "text/html"),
            ("/s2", b"WEBVTT\n\n00:00.000 --> 00:01.000\nhi\n", "", "text/vtt"),
            ("/s3", b"1\n00:00:01,000 --> 00:00:02,000\nhi\n", "", "application/x-subrip"),
            ("/s4", b"just some words", "", "text/plain"),
            ("/cap.vtt", b"WEBVTT\n", "", "text/vtt"),
            ("/cap.srt", b"1\n", "", "application/x-subrip"),
            ("/x", b"<p>", "application/xhtml+xml", "application/xhtml+xml"),
        ],
    )
    def test_sniffed_types(
        self, site: TLSSite, make: Any, path: str, body: bytes, content_type: str, expected: str
    ) -> None:
        """Bodies served without a type are sniffed or taken from .vtt/.srt."""
        site.page(path, body, content_type)
        response = make().fetch(site.url(path))
        assert response.mime_type == expected
        assert response.mime_type in ALLOWED_MIME_TYPES


class TestUnsafe:
    """Unsafe targets are refused before any dial."""

    @pytest.mark.parametrize(
        "url",
        [
            "http://127.0.0.1:{port}/",
            "https://user@127.0.0.1:{port}/",
            "https://127.0.0.2:{port}/",
            "https://2130706434:{port}/",
            "https://[::1]:{port}/",
            "https://evil.test:{port}/",
            "https://six.test:{port}/",
            "https://localhost:{port}/",
            "https://private.test:{port}/",
            "https://metadata.test:{port}/",
            "https://mixed.test:{port}/",
            "https://mapped.test:{port}/",
            "https://127.0.0.1:1/",
        ],
    )
    def test_refused_without_dialling(self, site: TLSSite, make: Any, dialer: Any, url: str):
        """Forbidden schemes, ports, literals and resolutions are unsafe_url, never dialled."""
        failure = fail(make(), url.format(port=site.port))
        assert failure.reason is Reason.UNSAFE_URL
        assert dialer.dialled == []

    @pytest.mark.parametrize(
        "location",
        [
            "https://127.0.0.2:{port}/",
            "https://[::1]:{port}/",
            "https://localhost:{port}/",
            "https://evil.test:{port}/",
            "https://private.test:{port}/",
            "http://127.0.0.1:{port}/",
            "https://127.0.0.1:1/",
            "https://0x7f000002:{port}/",
            "file:///etc/passwd",
        ],
    )
    def test_redirect_to_unsafe(self, site: TLSSite, make: Any, dialer: Any, location: str):
        """A redirect to anything unsafe is unsafe_url and only the first hop is dialled."""
        url = site.add("/r", hostile.redirect(location.format(port=site.port)))
        failure = fail(make(), url)
        assert failure.reason is Reason.UNSAFE_URL
        assert failure.source_url == url
        assert {host for host, _ in dialer.dialled} == {"127.0.0.1"}


class TestRedirects:
    """Redirects are followed by hand, at most five."""

    def test_five_redirects_followed(self, site: TLSSite, make: Any) -> None:
        """Five hops reach the final page, whose URL is reported."""
        first = hostile.redirect_chain(site, "/c", 5, Page(b"<p>end</p>"))
        response = make().fetch(first)
        assert response.url == site.url("/c/5") and response.body == b"<p>end</p>"

    def test_six_redirects_unavailable(self, site: TLSSite, make: Any) -> None:
        """A sixth redirect is not followed."""
        first = hostile.redirect_chain(site, "/c", 6, Page(b"<p>end</p>"))
        assert fail(make(), first).reason is Reason.UNAVAILABLE
        assert site.hits.get("/c/6") is None

    def test_loop_unavailable(self, site: TLSSite, make: Any) -> None:
        """A loop ends as unavailable after visiting each URL once."""
        assert fail(make(), hostile.redirect_loop(site, "/l")).reason is Reason.UNAVAILABLE
        assert site.hits == {"/l/a": 1, "/l/b": 1}

    def test_redirect_to_named_host(self, site: TLSSite, make: Any) -> None:
        """A redirect to another allowed name is re-resolved and checked."""
        site.page("/dest", "<p>d</p>")
        url = site.add("/go", hostile.redirect(site.url("/dest", host="site.test")))
        assert make().fetch(url).url == site.url("/dest", host="site.test")

    def test_redirect_without_location(self, site: TLSSite, make: Any) -> None:
        """A 3xx without Location is unavailable."""
        url = site.page("/nl", b"", "text/plain", 302)
        assert fail(make(), url).reason is Reason.UNAVAILABLE


class TestBounds:
    """Time, size and header bounds hold, each within its limit."""

    def test_trickle_hits_total_deadline(self, site: TLSSite, make: Any) -> None:
        """A drip-fed body ends as timeout at the total deadline, not per read."""
        url = site.add("/t", hostile.trickle(b"<p>" + b"x" * 500, interval=0.1))
        failure, elapsed = timed(lambda: make(fetch_total_timeout_seconds=1.0).fetch(url))
        assert isinstance(failure, FetchFailure) and failure.reason is Reason.TIMEOUT
        assert elapsed < 1.0 + SLACK

    def test_silent_server_read_timeout(self, site: TLSSite, make: Any) -> None:
        """A server that never answers times out at the read bound."""
        url = site.add("/s", hostile.stall(seconds=10))
        fetcher = make(fetch_read_timeout_seconds=0.5)
        failure, elapsed = timed(lambda: fetcher.fetch(url))
        assert isinstance(failure, FetchFailure) and failure.reason is Reason.TIMEOUT
        assert elapsed < 0.5 + SLACK

    def test_stall_after_headers(self, site: TLSSite, make: Any) -> None:
        """A body that never comes times out at the read bound."""
        url = site.add("/sh", hostile.stall(before_headers=False, seconds=10))
        failure, elapsed = timed(lambda: make(fetch_read_timeout_seconds=0.5).fetch(url))
        assert isinstance(failure, FetchFailure) and failure.reason is Reason.TIMEOUT
        assert elapsed < 0.5 + SLACK

    def test_endless_chunked_truncated(self, site: TLSSite, make: Any) -> None:
        """An endless chunked body stops at the byte bound, truncated."""
        response, elapsed = timed(lambda: make().fetch(site.add("/e", hostile.endless_chunked())))
        assert isinstance(response, FetchedResponse)
        assert response.truncated and len(response.body) == 64 * 1024
        assert elapsed < SLACK

    def test_slow_endless_chunked_times_out(self, site: TLSSite, make: Any) -> None:
        """A slow endless body ends at the total deadline."""
        url = site.add("/se", hostile.endless_chunked(b"<p>x</p>", interval=0.05))
        failure, elapsed = timed(lambda: make(fetch_total_timeout_seconds=1.0).fetch(url))
        assert isinstance(failure, FetchFailure) and failure.reason is Reason.TIMEOUT
        assert elapsed < 1.0 + SLACK

    @pytest.mark.parametrize("size", [64 * 1024, 64 * 1024 + 1])
    def test_exact_bound(self, site: TLSSite, make: Any, size: int) -> None:
        """A body of exactly the bound is whole; one byte more is truncated."""
        url = site.page("/b", b"a" * size, "text/plain")
        response = make().fetch(url)
        assert len(response.body) == 64 * 1024
        assert response.truncated is (size > 64 * 1024)

    @pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
    def test_decompression_bomb_bounded(self, site: TLSSite, make: Any, encoding: str) -> None:
        """A 256 MiB bomb yields the bounded prefix, truncated, with bounded memory."""
        handler = hostile.compression_bomb(encoding, 256 * 1024 * 1024)
        url = site.add("/bomb", handler)
        fetcher = make(fetch_max_bytes=1024 * 1024)
        tracemalloc.start()
        try:
            response, elapsed = timed(lambda: fetcher.fetch(url))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert isinstance(response, FetchedResponse)
        assert response.truncated and len(response.body) == 1024 * 1024
        assert peak < 16 * 1024 * 1024
        assert elapsed < 3.0

    def test_huge_headers(self, site: TLSSite, make: Any) -> None:
        """A 256 KiB header block is refused as unavailable."""
        assert fail(make(), site.add("/hh", hostile.huge_headers())).reason is Reason.UNAVAILABLE

    def test_many_headers(self, site: TLSSite, make: Any) -> None:
        """A thousand headers are refused as unavailable."""
        assert fail(make(), site.add("/mh", hostile.many_headers())).reason is Reason.UNAVAILABLE


class TestClassification:
    """Statuses, transport failures and media types map to the contract's reasons."""

    @pytest.mark.parametrize(
        ("status", "reason"),
        [
            (401, Reason.ACCESS_DENIED),
            (403, Reason.ACCESS_DENIED),
            (404, Reason.NOT_FOUND),
            (410, Reason.NOT_FOUND),
            (400, Reason.UNAVAILABLE),
            (418, Reason.UNAVAILABLE),
            (500, Reason.UNAVAILABLE),
            (503, Reason.UNAVAILABLE),
            (304, Reason.UNAVAILABLE),
        ],
    )
    def test_status(self, site: TLSSite, make: Any, status: int, reason: Reason) -> None:
        """Each status class gives its reason, with the URL as source_url."""
        url = site.page("/st", b"no", "text/plain", status)
        failure = fail(make(), url)
        assert (failure.reason, failure.source_url) == (reason, url)

    @pytest.mark.parametrize(
        ("retry_after", "expected"), [("120", 120), (None, 60), ("soon", 60), ("0", 1)]
    )
    def test_429(self, site: TLSSite, make: Any, retry_after: str | None, expected: int) -> None:
        """429 is rate_limited with Retry-After parsed, clamped or defaulted."""
        failure = fail(make(), site.add("/rl", hostile.rate_limited(retry_after)))
        assert failure.reason is Reason.RATE_LIMITED
        assert failure.retry_after_seconds == expected

    def test_connection_refused(self, site: TLSSite, make: Any) -> None:
        """Nothing listening is egress_unavailable."""
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        failure = fail(make(ports=[port]), f"https://127.0.0.1:{port}/")
        assert failure.reason is Reason.EGRESS_UNAVAILABLE

    def test_dns_failure(self, site: TLSSite, make: Any) -> None:
        """An unresolvable name is egress_unavailable."""
        failure = fail(make(), f"https://nowhere.test:{site.port}/")
        assert failure.reason is Reason.EGRESS_UNAVAILABLE

    def test_untrusted_certificate(self, site: TLSSite, make: Any) -> None:
        """Without the test CA the TLS handshake fails: egress_unavailable, no retry."""
        failure = fail(make(ca_bundle=None), site.page("/tls", "<p>x</p>"))
        assert failure.reason is Reason.EGRESS_UNAVAILABLE
        assert site.hits.get("/tls") is None

    def test_certificate_checked_against_name(self, site: TLSSite, make: Any) -> None:
        """A name the certificate does not cover fails even at an allowed address."""
        site.page("/n", "<p>x</p>")
        failure = fail(make(), site.url("/n", host="other.test"))
        assert failure.reason is Reason.EGRESS_UNAVAILABLE

    @pytest.mark.parametrize(
        "content_type",
        ["image/png", "application/pdf", "application/json", "application/octet-stream"],
    )
    def test_unsupported_type(self, site: TLSSite, make: Any, content_type: str) -> None:
        """Declared types outside the schema enum are unsupported_media."""
        failure = fail(make(), site.page("/u", b"data", content_type))
        assert failure.reason is Reason.UNSUPPORTED_MEDIA

    @pytest.mark.parametrize("kind", sorted(hostile.BINARY_SAMPLES))
    def test_binary_lies(self, site: TLSSite, make: Any, kind: str) -> None:
        """Binary bodies served as text/html are unsupported_media."""
        failure = fail(make(), site.add("/lie", hostile.binary_as(kind)))
        assert failure.reason is Reason.UNSUPPORTED_MEDIA

    def test_unknown_content_encoding(self, site: TLSSite, make: Any) -> None:
        """An encoding we did not offer is unavailable."""
        url = site.page("/z", b"x", "text/html", headers={"Content-Encoding": "zstd"})
        assert fail(make(), url).reason is Reason.UNAVAILABLE


class TestRebinding:
    """A name is resolved once per connection and the checked address is the one dialled."""

    def test_single_resolution(self, site: TLSSite, tmp_path: Path) -> None:
        """The first answer is checked and dialled; a later (private) answer never is."""
        answers = [["127.0.0.1"]]
        calls: list[str] = []

        def rebinding(host: str, port: int) -> list[str]:
            calls.append(host)
            return answers[0] if len(calls) == 1 else ["10.0.0.1"]

        site.page("/rb", "<p>rb</p>")
        ca = site.write_ca(tmp_path / "ca.pem")
        dialer = hostile.LoopbackOnlyDialer()
        settings = hostile.fetch_settings([site.port], ca_bundle=ca)
        with Fetcher(settings, resolver=rebinding, dialer=dialer) as first:  # type: ignore[arg-type]
            assert first.fetch(site.url("/rb", host="site.test")).body == b"<p>rb</p>"
            assert calls == ["site.test"]
            assert dialer.dialled == [("127.0.0.1", site.port)]
        # A fresh pool, so the second fetch must dial (and resolve) again.
        with Fetcher(settings, resolver=rebinding, dialer=dialer) as second:  # type: ignore[arg-type]
            failure = fail(second, site.url("/rb", host="site.test"))
            assert failure.reason is Reason.UNSAFE_URL
            assert dialer.dialled == [("127.0.0.1", site.port)]


class TestSlowDns:
    """A hung DNS lookup obeys the connect bound."""

    def test_dns_timeout(self, site: TLSSite, tmp_path: Path) -> None:
        """A resolver that never answers ends as timeout within the connect bound."""

        def hung(host: str, port: int) -> list[str]:
            time.sleep(3)
            return ["127.0.0.1"]

        ca = site.write_ca(tmp_path / "ca.pem")
        settings = hostile.fetch_settings(
            [site.port], ca_bundle=ca, fetch_connect_timeout_seconds=0.5
        )
        dialer = hostile.LoopbackOnlyDialer()
        fetcher = Fetcher(settings, resolver=hung, dialer=dialer)  # type: ignore[arg-type]
        try:
            failure, elapsed = timed(lambda: fetcher.fetch(site.url("/x", host="site.test")))
        finally:
            fetcher.close()
        assert isinstance(failure, FetchFailure) and failure.reason is Reason.TIMEOUT
        assert elapsed < 0.5 + SLACK and dialer.dialled == []


class TestRetryAfterAndContentType:
    """Pure header parsing used by classification."""

    NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)

    @pytest.mark.parametrize(
        ("value", "expected"),
        [
            ("30", 30),
            ("0", 1),
            ("999999999", 86_400),
            ("-5", 60),
            ("1.5", 60),
            ("", 60),
            (None, 60),
            ("Wed, 01 Jan 2025 12:02:00 GMT", 120),
            ("Wed, 01 Jan 2025 11:00:00 GMT", 1),
            ("Fri, 01 Jan 2100 00:00:00 GMT", 86_400),
            ("Wed, 99 Foo 2025", 60),
        ],
    )
    def test_retry_after(self, value: str | None, expected: int) -> None:
        """Delta seconds or HTTP-date, clamped to 1..86400, 60 when absent or garbage."""
        assert parse_retry_after(value, now=self.NOW) == expected

    @pytest.mark.parametrize(
        ("header", "expected"),
        [
            ("text/html; charset=UTF-8", ("text/html", "utf-8")),
            ('TEXT/HTML;Charset="windows-1252"', ("text/html", "windows-1252")),
            ("text/html; charset=latin1", ("text/html", "windows-1252")),
            ("text/html; charset=rot13", ("text/html", None)),
            ("text/plain; charset=utf-7", ("text/plain", None)),
            ("text/plain; charset=base64", ("text/plain", None)),
            ("text/plain; charset=bogus", ("text/plain", None)),
            ("", (None, None)),
            (None, (None, None)),
        ],
    )
    def test_content_type(self, header: str | None, expected: tuple[str | None, ...]) -> None:
        """Media type lower-cased; charset as its Encoding Standard name, else None."""
        assert parse_content_type(header) == expected


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A redis-server only the fetcher under test talks to, so its client list is exact."""
    server = RedisServer(tmp_path).start()
    yield server
    server.stop()


def other_clients(observer: redis.Redis) -> list[str]:
    """Addresses of the clients connected to the observer's server, the observer excepted."""
    own = observer.client_id()
    return [c["addr"] for c in observer.client_list() if int(c["id"]) != own]


class TestClose:
    """A closed fetcher leaves no connection open: not to the site, not to Redis."""

    def test_close_ends_pooled_and_redis_connections(
        self, site: TLSSite, make: Any, private_redis: RedisServer
    ) -> None:
        fetcher = make(redis_url=private_redis.url)
        fetcher.fetch(site.page("/close", "<p>bye</p>"))
        transport = fetcher.client._transport
        assert len(transport.connections) == 1, "the keep-alive connection is pooled"
        with redis.Redis.from_url(private_redis.url) as observer:
            assert len(other_clients(observer)) == 1, "politeness asked Redis"
            fetcher.close()
            assert fetcher.client.is_closed and transport.connections == []
            wait_for(lambda: not other_clients(observer), timeout=5, interval=0.05)

    def test_a_politeness_passed_in_stays_open(
        self, site: TLSSite, make: Any, private_redis: RedisServer
    ) -> None:
        """The caller owns what it passed in: closing the fetcher leaves its Redis client alone."""
        politeness = Politeness(SharedState(private_redis.url))
        fetcher = make(politeness=politeness)
        fetcher.fetch(site.page("/shared", "<p>shared</p>"))
        fetcher.close()
        assert politeness.state.client.ping()
        with redis.Redis.from_url(private_redis.url) as observer:
            assert len(other_clients(observer)) == 1
        politeness.state.close()


def test_no_cookie_is_kept_or_sent(site: TLSSite, make: Any) -> None:
    """One fetcher serves every workspace: a cookie a page set must not ride on the next fetch
    of that host (another tenant's, perhaps)."""
    sent: list[str | None] = []

    def echo(handler: BaseHTTPRequestHandler) -> None:
        sent.append(handler.headers.get("Cookie"))
        send(handler, Page(b"<p>echo</p>", "text/html", 200, {}))

    site.page("/login", "<p>hi</p>", headers={"Set-Cookie": "session=tenant-a; Path=/"})
    site.add("/echo", echo)
    fetcher = make()
    fetcher.fetch(site.url("/login"))
    fetcher.fetch(site.url("/echo"))
    assert sent == [None]
    assert len(fetcher.client.cookies.jar) == 0


def test_the_per_host_limit_is_the_setting(make: Any) -> None:
    """`EVIDENCE_FETCH_PER_HOST_LIMIT` bounds a host's fetches and its kept-alive connections."""
    fetcher = make(fetch_per_host_limit=3)
    assert fetcher.politeness.per_host_limit == 3
    assert fetcher.politeness.local.limit == 3
    pool = fetcher.client._transport._make_pool()
    assert pool._max_keepalive_connections == 3
    pool.close()


class TestOriginPools:
    """One connection pool per origin, so a pool's per-request scan covers one host's few
    connections; a pool that served nothing for the keep-alive expiry is closed."""

    def test_each_origin_keeps_its_own_connections(self, site: TLSSite, make: Any) -> None:
        fetcher = make()
        for host in ("127.0.0.1", "127.0.0.1", "site.test", "site.test"):
            site.page("/pooled", "<p>pooled</p>")
            assert fetcher.fetch(site.url("/pooled", host=host)).status_code == 200
        transport = fetcher.client._transport
        hosts = sorted(host.decode() for _, host, _ in transport._pools)
        assert hosts == ["127.0.0.1", "site.test"]
        # Two fetches of one origin, one after the other, reuse its kept-alive connection.
        assert len(transport.connections) == 2
        assert all(len(entry.pool.connections) == 1 for entry in transport._pools.values())

    @pytest.fixture
    def brief(self, make: Any, monkeypatch: pytest.MonkeyPatch) -> Fetcher:
        """A fetcher whose idle connections (and origins) expire after 0.2 s."""
        monkeypatch.setattr("worker.fetch.fetcher.KEEPALIVE_EXPIRY_SECONDS", 0.2)
        return make()  # type: ignore[no-any-return]

    def test_an_idle_origin_is_closed_after_the_keepalive_expiry(
        self, site: TLSSite, brief: Fetcher
    ) -> None:
        fetcher = brief
        site.page("/idle", "<p>idle</p>")
        fetcher.fetch(site.url("/idle", host="site.test"))
        transport = fetcher.client._transport
        (first,) = transport.connections
        time.sleep(0.3)
        fetcher.fetch(site.url("/idle", host="127.0.0.1"))
        hosts = [host for _, host, _ in transport._pools]
        assert hosts == [b"127.0.0.1"], "the origin unused for the expiry was dropped"
        assert first.is_closed() and first not in transport.connections

    def test_an_origin_with_a_response_open_is_kept(self, site: TLSSite, brief: Fetcher) -> None:
        """A body still being read holds its pool, however old: it is dropped once closed."""
        fetcher = brief
        site.page("/open", "<p>open</p>")
        client = fetcher.client
        request = client.build_request("GET", site.url("/open", host="site.test"))
        streaming = client.send(request, stream=True)
        time.sleep(0.3)
        fetcher.fetch(site.url("/open", host="127.0.0.1"))
        assert len(client._transport._pools) == 2, "the open response's origin stays"
        assert streaming.read() == b"<p>open</p>"
        streaming.close()
        time.sleep(0.3)
        fetcher.fetch(site.url("/open", host="127.0.0.1"))
        assert [h for _, h, _ in client._transport._pools] == [b"127.0.0.1"]

    def test_a_failed_request_gives_its_origin_back(
        self, site: TLSSite, make: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A fetch whose connection fails counts no longer against its origin: the origin is
        closed after the expiry like any idle one (else it would be kept for ever)."""
        monkeypatch.setattr("worker.fetch.fetcher.KEEPALIVE_EXPIRY_SECONDS", 0.2)
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = dead.getsockname()[1]
        try:
            fetcher = make(ports=[site.port, port])
            with pytest.raises(FetchFailure):
                fetcher.fetch(f"https://127.0.0.1:{port}/refused")
            transport = fetcher.client._transport
            assert [entry.in_use for entry in transport._pools.values()] == [0]
            time.sleep(0.3)
            site.page("/alive", "<p>alive</p>")
            fetcher.fetch(site.url("/alive"))
            assert [p for _, _, p in transport._pools] == [site.port]
        finally:
            dead.close()

    def test_past_the_most_idle_origins_the_least_recently_used_is_closed(
        self, site: TLSSite, make: Any
    ) -> None:
        """A batch over thousands of hosts keeps a bounded number of idle origins' sockets."""
        fetcher = make()
        transport = fetcher.client._transport
        transport._max_idle_origins = 1
        site.page("/wide", "<p>wide</p>")
        fetcher.fetch(site.url("/wide", host="site.test"))
        (first,) = transport.connections
        fetcher.fetch(site.url("/wide", host="127.0.0.1"))
        assert [host for _, host, _ in transport._pools] == [b"127.0.0.1"]
        assert first.is_closed()
        fetcher.fetch(site.url("/wide", host="127.0.0.1"))  # a kept origin is not evicted
        assert [host for _, host, _ in transport._pools] == [b"127.0.0.1"]

    def test_a_closed_transport_refuses_requests(self, site: TLSSite, make: Any) -> None:
        fetcher = make()
        site.page("/after", "<p>after</p>")
        fetcher.fetch(site.url("/after"))
        fetcher.close()
        with pytest.raises(RuntimeError):
            fetcher.client._transport.handle_request(
                fetcher.client.build_request("GET", site.url("/after"))
            )
        assert fetcher.client._transport.connections == []


def test_deadline_scope_inside_another_never_extends_it() -> None:
    """A fetch's own total timeout inside a retrieval's deadline ends by the earlier one."""
    from worker.fetch.egress import deadline_scope, remaining_seconds

    with deadline_scope(1.0):
        with deadline_scope(30.0):
            left = remaining_seconds()
            assert left is not None and left <= 1.0
        with deadline_scope(0.2):
            left = remaining_seconds()
            assert left is not None and left <= 0.2
        left = remaining_seconds()
        assert left is not None and 0.2 < left <= 1.0
    assert remaining_seconds() is None
