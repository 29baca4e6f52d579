"""The one URL parser (WHATWG, through ada), and the normaliser and guard that read through it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from worker.domain.urls import HostKind, ParsedUrl, UrlRefusal, parse
from worker.fetch.guard import ParsedTarget, Verdict, check_url
from worker.store.evidence import normalise_url

#: Deterministic and unhurried: the same examples on every run, no per-example deadline.
EXAMPLES = settings(max_examples=400, deadline=None, derandomize=True)

#: The malformed URLs the API once accepted (each stopped the batch lane), and the missing host.
ISSUE_URLS = [
    ("https://::1/", "IPv6 address not in brackets: '::1'"),
    ("https://93.184.215.14:443:22/", "invalid port: '443:22'"),
    ("https://93.184.215.14:99999/", "invalid port: 99999 (above 65535)"),
    ("https://127.0.0.1:+443/", "invalid port: '+443'"),
    ("https://93.184.215.14:443abc/", "invalid port: '443abc'"),
    ("https://", "no host"),
]


class TestRefusals:
    """Text the standard refuses is a refusal naming the fault, never an exception."""

    @pytest.mark.parametrize(("url", "reason"), ISSUE_URLS)
    def test_issue_urls(self, url: str, reason: str) -> None:
        assert parse(url) == UrlRefusal(reason)

    @pytest.mark.parametrize(
        ("url", "reason"),
        [
            ("", "empty"),
            (" \t\n", "empty"),
            ("example.org/path", "no scheme: not an absolute URL"),
            ("//example.org/", "no scheme: not an absolute URL"),
            ("1http://example.org/", "no scheme: not an absolute URL"),
            ("https:///", "no host"),
            ("https://:443/", "no host"),
            ("https://user@/", "no host"),
            ("https://[::1/", "invalid IPv6 address (no closing ']'): '[::1'"),
            ("https://[::1]x/", "unexpected text after the IPv6 address: 'x'"),
            ("https://[zz::]/", "invalid IPv6 address: '[zz::]'"),
            ("https://[fe80::1%25eth0]/", "invalid IPv6 address: '[fe80::1%25eth0]'"),
            ("https://[::1]:x/", "invalid port: 'x'"),
            ("https://example.org:-1/", "invalid port: '-1'"),
            ("https://example.org:４４３/", "invalid port: '４４３'"),
            ("https://example.org:65536/", "invalid port: 65536 (above 65535)"),
            ("https://a:b:c/", "invalid port: 'b:c'"),
            ("https://256.0.0.1/", "invalid IPv4 address: '256.0.0.1'"),
            ("https://1.2.3.4.5/", "invalid IPv4 address: '1.2.3.4.5'"),
            ("https://4294967296/", "invalid IPv4 address: '4294967296'"),
            ("https://08.0.0.1/", "invalid IPv4 address: '08.0.0.1'"),
            ("https://example.123/", "invalid IPv4 address: 'example.123'"),
            ("https://exa mple.org/", "invalid host: 'exa mple.org'"),
            ("https://ex%00ample.org/", "invalid host: 'ex%00ample.org'"),
            ("https://ex<ample.org/", "invalid host: 'ex<ample.org'"),
            ("https://\ud800.org/", "not valid Unicode (a lone surrogate)"),
            ("foo://[x/", "invalid IPv6 address (no closing ']'): '[x'"),
        ],
    )
    def test_each_fault_is_named(self, url: str, reason: str) -> None:
        assert parse(url) == UrlRefusal(reason)

    def test_a_huge_port_is_named_not_echoed(self) -> None:
        """5 000 digits: no int conversion limit is hit, and the message stays short."""
        refusal = parse("https://example.org:" + "9" * 5000 + "/")
        assert isinstance(refusal, UrlRefusal)
        assert refusal.reason.startswith("invalid port: 999") and len(refusal.reason) < 100
        assert str(refusal) == refusal.reason

    def test_leading_zeros_are_a_port(self) -> None:
        """The standard reads `000…0443` as 443, however many zeros."""
        parsed = parse("https://example.org:" + "0" * 5000 + "8443/")
        assert isinstance(parsed, ParsedUrl) and parsed.port == 8443

    def test_not_text(self) -> None:
        assert parse(b"https://example.org/") == UrlRefusal("not text: bytes")


class TestParsed:
    """What the standard reads, component by component."""

    def test_components(self) -> None:
        parsed = parse("HTTPS://u:p@Example.ORG:8443/a/../b?q=1#frag")
        assert parsed == ParsedUrl(
            href="https://u:p@example.org:8443/b?q=1#frag",
            scheme="https",
            username="u",
            password="p",
            host="example.org",
            host_kind=HostKind.DOMAIN,
            port=8443,
            path="/b",
            query="q=1",
            fragment="frag",
        )
        assert parsed.has_host and parsed.has_credentials
        assert parsed.effective_port == 8443
        assert parsed.without_fragment == "https://u:p@example.org:8443/b?q=1"

    @pytest.mark.parametrize(
        ("url", "host", "kind"),
        [
            ("https://0x7f.1/", "127.0.0.1", HostKind.IPV4),
            ("https://2130706433/", "127.0.0.1", HostKind.IPV4),
            ("https://127.1/", "127.0.0.1", HostKind.IPV4),
            ("https://0177.0.0.1/", "127.0.0.1", HostKind.IPV4),
            ("https://127.0.0.1./", "127.0.0.1", HostKind.IPV4),
            ("https://１２７.０.０.２/", "127.0.0.2", HostKind.IPV4),
            ("https://127。0。0。2/", "127.0.0.2", HostKind.IPV4),
            ("https://%31%32%37.0.0.1/", "127.0.0.1", HostKind.IPV4),
            ("https://[::ffff:127.0.0.1]/", "::ffff:7f00:1", HostKind.IPV6),
            ("https://[0:0:0:0:0:0:0:1]/", "::1", HostKind.IPV6),
            ("https://bücher.de/", "xn--bcher-kva.de", HostKind.DOMAIN),
            ("https://LOCALHOST./", "localhost.", HostKind.DOMAIN),
            ("https://ｌｏｃａｌｈｏｓｔ/", "localhost", HostKind.DOMAIN),
            ("foo://Example.ORG/", "Example.ORG", HostKind.OPAQUE),
            ("mailto:a@example.org", "", HostKind.NONE),
            ("file:///etc/passwd", "", HostKind.NONE),
        ],
    )
    def test_hosts(self, url: str, host: str, kind: HostKind) -> None:
        """Every IPv4 notation is the address it names; names are IDNA-mapped ASCII."""
        parsed = parse(url)
        assert isinstance(parsed, ParsedUrl), parsed
        assert (parsed.host, parsed.host_kind) == (host, kind)
        assert parsed.has_host is (kind is not HostKind.NONE)

    def test_ipv6_authority_has_brackets(self) -> None:
        parsed = parse("https://[2606:4700:4700:0::1111]:8443/")
        assert isinstance(parsed, ParsedUrl)
        assert parsed.authority_host == "[2606:4700:4700::1111]"
        assert parse("https://example.org/").authority_host == "example.org"  # type: ignore[union-attr]

    @pytest.mark.parametrize(
        ("url", "port", "effective"),
        [
            ("https://example.org/", None, 443),
            ("https://example.org:443/", None, 443),
            ("https://example.org:0/", 0, 0),
            ("http://example.org:80/", None, 80),
            ("http://example.org:443/", 443, 443),
            ("foo://example.org/", None, None),
        ],
    )
    def test_ports(self, url: str, port: int | None, effective: int | None) -> None:
        """A default port is no port; `effective_port` is what a connection would use."""
        parsed = parse(url)
        assert isinstance(parsed, ParsedUrl)
        assert (parsed.port, parsed.effective_port) == (port, effective)

    @pytest.mark.parametrize(
        ("url", "expected"),
        [
            ("https://example.org", "https://example.org/"),
            ("https://example.org/a?#f", "https://example.org/a"),
            ("https://example.org/a?b#", "https://example.org/a?b"),
            ("https://example.org/a#b#c", "https://example.org/a"),
            ("https://example.org/%23?x=%23#y", "https://example.org/%23?x=%23"),
            ("foo:bar#x", "foo:bar"),
        ],
    )
    def test_without_fragment(self, url: str, expected: str) -> None:
        parsed = parse(url)
        assert isinstance(parsed, ParsedUrl)
        assert parsed.without_fragment == expected


class TestNormaliseUrl:
    """The evidence key: the standard's serialisation, and a key of its own for the rest."""

    @pytest.mark.parametrize(
        ("url", "key"),
        [
            ("HTTPS://Example.ORG:443/a?b=1#frag", "https://example.org/a?b=1"),
            ("https://example.org", "https://example.org/"),
            ("https://example.org:8443/x", "https://example.org:8443/x"),
            ("http://example.org:80/", "http://example.org/"),
            ("https://[0:0::1]:443/", "https://[::1]/"),
            ("https://0x7f.1/", "https://127.0.0.1/"),
        ],
    )
    def test_canonical(self, url: str, key: str) -> None:
        assert normalise_url(url) == key

    @pytest.mark.parametrize("url", [url for url, _ in ISSUE_URLS])
    def test_stored_malformed_urls_are_their_own_key(self, url: str) -> None:
        """Rows stored before the door refused these must still be looked up: no exception."""
        assert normalise_url(url) == url

    @EXAMPLES
    @given(st.text())
    def test_never_raises(self, text: str) -> None:
        """Any text at all: the parser and the normaliser answer, the key is deterministic."""
        result = parse(text)
        assert isinstance(result, ParsedUrl | UrlRefusal)
        assert normalise_url(text) == normalise_url(text)

    @EXAMPLES
    @given(
        st.from_regex(
            r"[a-zA-Z][a-zA-Z0-9+.-]{0,6}://[^\s/?#]{0,30}(:[0-9a-z+:-]{0,8})?(/[^\s#]{0,20})?",
            fullmatch=True,
        )
    )
    def test_never_raises_on_url_like_text(self, text: str) -> None:
        """Text shaped like a URL, ports and hosts mangled: never an exception."""
        assert isinstance(parse(text), ParsedUrl | UrlRefusal)
        assert isinstance(normalise_url(text), str)
        assert isinstance(check_url(text, [443]), ParsedTarget | Verdict)
