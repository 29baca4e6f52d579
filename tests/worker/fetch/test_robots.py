"""robots.txt: RFC 9309 matching, and the policy through the real Fetcher and Redis cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.support import hostile
from tests.support.tls_site import Page, TLSSite
from worker.domain.reasons import Reason
from worker.fetch.fetcher import Fetcher
from worker.fetch.guard import ParsedTarget, guard_url
from worker.fetch.politeness import SharedState
from worker.fetch.robots import (
    RULES,
    RobotsAnswer,
    RobotsPolicy,
    RobotsRules,
    glob_match,
    normalise_path,
    product_token,
)
from worker.fetch.types import FetchFailure

RFC_EXAMPLE = """
User-Agent: *
Disallow: *.gif$
Disallow: /example/
Allow: /publications/

User-Agent: foobot
Disallow:/
Allow:/example/page.html
Allow:/example/allowed.gif

User-Agent: barbot
User-Agent: bazbot
Disallow: /example/page.html

User-Agent: quxbot
"""


class TestMatching:
    """Pure RFC 9309 matching."""

    @pytest.mark.parametrize(
        ("agent", "path", "allowed"),
        [
            ("foobot", "/", False),
            ("foobot", "/example/page.html", True),
            ("foobot", "/example/allowed.gif", True),
            ("foobot", "/other", False),
            ("FooBot", "/other", False),
            ("barbot", "/example/page.html", False),
            ("bazbot", "/example/page.html", False),
            ("bazbot", "/example/other.html", True),
            ("quxbot", "/anything.gif", True),
            ("otherbot", "/x.gif", False),
            ("otherbot", "/x.gif?y", True),
            ("otherbot", "/example/a", False),
            ("otherbot", "/publications/a", True),
            ("otherbot", "/robots.txt", True),
        ],
    )
    def test_rfc_example(self, agent: str, path: str, allowed: bool) -> None:
        """The RFC's example groups answer as the RFC says."""
        assert RobotsRules.parse(RFC_EXAMPLE).allowed(agent, path) is allowed

    @pytest.mark.parametrize(
        ("rules", "path", "allowed"),
        [
            ("Allow: /p\nDisallow: /", "/page", True),
            ("Allow: /folder\nDisallow: /folder", "/folder/page", True),
            ("Allow: /page\nDisallow: /*.htm", "/page.htm", False),
            ("Allow: /$\nDisallow: /", "/", True),
            ("Allow: /$\nDisallow: /", "/page.htm", False),
            ("Disallow: /fish*", "/fishheads", False),
            ("Disallow: /*.php$", "/index.php", False),
            ("Disallow: /*.php$", "/index.php?x", True),
            ("Disallow: /a*b*c", "/axxbyyc", False),
            ("Disallow: /a*b*c", "/axxcyyb", True),
            ("Disallow: /%7Ejoe", "/~joe/x", False),
            ("Disallow: /~joe", "/%7ejoe/x", False),
            ("Disallow: /caf\u00e9", "/caf%C3%A9", False),
            ("Disallow:", "/anything", True),
            ("", "/anything", True),
        ],
    )
    def test_precedence_and_patterns(self, rules: str, path: str, allowed: bool) -> None:
        """Longest match wins, allow wins ties, `*`/`$` and %-encoding normalise."""
        text = "User-agent: *\n" + rules
        assert RobotsRules.parse(text).allowed("evidenceretrieval", path) is allowed

    def test_groups_merge_and_specific_wins(self) -> None:
        """Groups for our token merge; `*` is used only when none names us."""
        text = (
            "User-agent: *\nDisallow: /\n\n"
            "User-agent: EvidenceRetrieval\nDisallow: /a\n\n"
            "User-agent: evidenceretrieval/2.0\nDisallow: /b\n"
        )
        rules = RobotsRules.parse(text)
        assert not rules.allowed("evidenceretrieval", "/a")
        assert not rules.allowed("evidenceretrieval", "/b")
        assert rules.allowed("evidenceretrieval", "/c")

    def test_rules_before_agent_and_comments_ignored(self) -> None:
        """Rules outside a group and comments do not apply."""
        text = "Disallow: /\n# User-agent: *\nUser-agent: * # all\nDisallow: /x # no x\n"
        rules = RobotsRules.parse(text)
        assert rules.allowed("any", "/y") and not rules.allowed("any", "/x")

    def test_glob_is_linear_on_hostile_patterns(self) -> None:
        """Many-star patterns against long paths finish quickly (no backtracking)."""
        assert not glob_match("/" + "a*" * 200 + "b", "/" + "a" * 5000)

    def test_helpers(self) -> None:
        """Product token and path normalisation."""
        assert product_token("EvidenceRetrieval/0.1 (+https://x)") == "evidenceretrieval"
        assert normalise_path("/%7e%2f%c3%a9") == "/~%2F%C3%A9"


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
        running.page("/private/page", "<p>secret</p>")
        yield running


@pytest.fixture
def make(site: TLSSite, tmp_path: Path) -> Iterator[Any]:
    made: list[Fetcher] = []
    ca = site.write_ca(tmp_path / "ca.pem")

    def build(**overrides: Any) -> Fetcher:
        overrides.setdefault("robots_txt", True)
        settings = hostile.fetch_settings([site.port], ca_bundle=ca, **overrides)
        fetcher = Fetcher(settings, dialer=hostile.LoopbackOnlyDialer())  # type: ignore[arg-type]
        made.append(fetcher)
        return fetcher

    yield build
    for fetcher in made:
        fetcher.close()


class TestPolicy:
    """robots.txt fetched through the guarded fetcher, obeyed and cached."""

    def test_disallowed_path(self, site: TLSSite, make: Any) -> None:
        """A disallowed path is access_denied, mentions robots.txt, and is never fetched."""
        site.page("/robots.txt", "User-agent: *\nDisallow: /private/\n", "text/plain")
        with pytest.raises(FetchFailure) as caught:
            make().fetch(site.url("/private/page"))
        assert caught.value.reason is Reason.ACCESS_DENIED
        assert "robots.txt" in caught.value.detail
        assert "/private/page" not in site.hits

    def test_allowed_path_and_cache(self, site: TLSSite, make: Any) -> None:
        """Allowed paths are fetched; robots.txt is fetched once per origin (cached in Redis)."""
        site.page("/robots.txt", "User-agent: *\nDisallow: /private/\n", "text/plain")
        make().fetch(site.url("/ok"))
        make().fetch(site.url("/ok"))
        assert site.hits["/robots.txt"] == 1 and site.hits["/ok"] == 2

    def test_one_fetch_for_many_threads(self, site: TLSSite, make: Any) -> None:
        """Sixteen threads of one process asking at once: robots.txt is fetched once."""
        from concurrent.futures import ThreadPoolExecutor

        site.page("/robots.txt", "User-agent: *\nDisallow: /private/\n", "text/plain")
        site.delay_seconds = 0.3  # every answer takes a while, so the threads overlap
        fetcher = make()
        with ThreadPoolExecutor(max_workers=16) as pool:
            codes = list(pool.map(lambda _: fetcher.fetch(site.url("/ok")).status_code, range(16)))
        assert codes == [200] * 16
        assert site.hits["/robots.txt"] == 1 and site.hits["/ok"] == 16

    def test_our_token_group(self, site: TLSSite, make: Any) -> None:
        """A group naming our product token applies to us."""
        site.page("/robots.txt", "User-agent: EvidenceRetrieval\nDisallow: /ok\n", "text/plain")
        with pytest.raises(FetchFailure) as caught:
            make().fetch(site.url("/ok"))
        assert caught.value.reason is Reason.ACCESS_DENIED

    def test_missing_robots_allows(self, site: TLSSite, make: Any) -> None:
        """robots.txt 404 allows everything."""
        assert make().fetch(site.url("/private/page")).body == b"<p>secret</p>"

    @pytest.mark.parametrize("status", [500, 503])
    def test_server_error_disallows(self, site: TLSSite, make: Any, status: int) -> None:
        """robots.txt 5xx disallows everything (RFC 9309 §2.3.1.4)."""
        site.page("/robots.txt", "oops", "text/plain", status)
        with pytest.raises(FetchFailure) as caught:
            make().fetch(site.url("/ok"))
        assert caught.value.reason is Reason.ACCESS_DENIED
        assert "/ok" not in site.hits

    def test_robots_redirect_to_unsafe_allows(self, site: TLSSite, make: Any) -> None:
        """A robots.txt redirecting somewhere unsafe is treated as unavailable (allow)."""
        site.add("/robots.txt", hostile.redirect(f"https://127.0.0.2:{site.port}/robots.txt"))
        assert make().fetch(site.url("/ok")).body == b"<p>ok</p>"

    def test_robots_redirect_followed(self, site: TLSSite, make: Any) -> None:
        """A robots.txt redirect on the same site is followed and its rules obeyed."""
        site.add("/robots.txt", hostile.redirect("/real-robots.txt"))
        site.page("/real-robots.txt", "User-agent: *\nDisallow: /ok\n", "text/plain")
        with pytest.raises(FetchFailure) as caught:
            make().fetch(site.url("/ok"))
        assert caught.value.reason is Reason.ACCESS_DENIED

    def test_robots_timeout(self, site: TLSSite, make: Any) -> None:
        """A robots.txt that never answers ends the fetch as timeout, page not fetched."""
        site.add("/robots.txt", hostile.stall(seconds=5))
        with pytest.raises(FetchFailure) as caught:
            make(fetch_read_timeout_seconds=0.5).fetch(site.url("/ok"))
        assert caught.value.reason is Reason.TIMEOUT
        assert "robots.txt" in caught.value.detail and "/ok" not in site.hits

    def test_huge_robots_prefix_parsed(self, site: TLSSite, make: Any) -> None:
        """A robots.txt over 500 KiB is cut; rules in the prefix still apply."""
        text = "User-agent: *\nDisallow: /ok\n" + "# filler\n" * 100_000
        site.add("/robots.txt", Page(text.encode(), "text/plain"))
        with pytest.raises(FetchFailure) as caught:
            make(fetch_max_bytes=2 * 1024 * 1024).fetch(site.url("/ok"))
        assert caught.value.reason is Reason.ACCESS_DENIED

    def test_policy_off(self, site: TLSSite, make: Any) -> None:
        """robots_txt=False neither fetches nor obeys robots.txt."""
        site.page("/robots.txt", "User-agent: *\nDisallow: /\n", "text/plain")
        assert make(robots_txt=False).fetch(site.url("/ok")).body == b"<p>ok</p>"
        assert "/robots.txt" not in site.hits


class CountingRedis:
    """A dict standing in for Redis that counts GETs."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}
        self.gets = 0

    def get(self, key: str) -> Any:
        self.gets += 1
        return self.data.get(key)

    def set(self, key: str, value: Any, ex: int | None = None) -> None:
        self.data[key] = value


class TestLocalMemo:
    """Each worker process reuses an origin's parsed answer for a while before asking Redis."""

    def target(self, path: str) -> ParsedTarget:
        parsed = guard_url(f"https://example.org{path}", [443], [])
        assert isinstance(parsed, ParsedTarget)
        return parsed

    def policy(self, client: CountingRedis, fetches: list[str], ttl: float) -> RobotsPolicy:
        def fetch(url: str) -> RobotsAnswer:
            fetches.append(url)
            return RobotsAnswer(RULES, "User-agent: *\nDisallow: /private/\n")

        state = SharedState("redis://unused", client=client)
        return RobotsPolicy(state, "EvidenceRetrieval/0.1", fetch, local_ttl_seconds=ttl)

    def test_memo_spares_redis_and_parsing(self) -> None:
        """Within the memo's lifetime, checks ask neither Redis nor the site again."""
        client, fetches = CountingRedis(), []
        policy = self.policy(client, fetches, ttl=60)
        for _ in range(5):
            policy.check(self.target("/ok"))
        with pytest.raises(FetchFailure):
            policy.check(self.target("/private/x"))
        assert client.gets == 1 and len(fetches) == 1

    def test_memo_expires_to_redis(self) -> None:
        """After the memo's lifetime the answer comes from Redis (shared), not a new fetch."""
        client, fetches = CountingRedis(), []
        policy = self.policy(client, fetches, ttl=0)
        policy.check(self.target("/ok"))
        policy.check(self.target("/ok"))
        assert client.gets == 2 and len(fetches) == 1
