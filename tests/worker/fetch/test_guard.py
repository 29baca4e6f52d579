"""The pure egress guard: URL forms, host literals and address ranges."""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_address, ip_network

import pytest

from worker.fetch.guard import (
    ParsedTarget,
    Verdict,
    check_address,
    check_addresses,
    check_url,
    guard_url,
    parse_host_literal,
    parse_ipv4_like_inet_aton,
)

PORTS = [443]

BLOCKED_ADDRESSES = [
    # IPv4 special-purpose ranges, edges included.
    "0.0.0.0",
    "0.255.255.255",
    "10.0.0.1",
    "10.255.255.255",
    "100.64.0.1",
    "100.127.255.255",
    "100.100.100.200",
    "127.0.0.1",
    "127.0.0.2",
    "127.255.255.254",
    "169.254.0.1",
    "169.254.169.254",
    "169.254.170.2",
    "172.16.0.1",
    "172.31.255.255",
    "192.0.0.1",
    "192.0.0.192",
    "192.0.2.1",
    "192.88.99.1",
    "192.168.0.1",
    "192.168.255.255",
    "198.18.0.1",
    "198.19.255.255",
    "198.51.100.7",
    "203.0.113.9",
    "224.0.0.1",
    "239.255.255.250",
    "240.0.0.1",
    "255.255.255.255",
    # IPv6.
    "::",
    "::1",
    "::127.0.0.1",
    "::8.8.8.8",
    "::ffff:127.0.0.1",
    "::ffff:10.0.0.1",
    "::ffff:8.8.8.8",
    "::ffff:0:8.8.8.8",
    "64:ff9b::7f00:1",
    "64:ff9b::808:808",
    "64:ff9b:1::a00:1",
    "100::1",
    "2001::1",
    "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    "2001:2::1",
    "2001:10::1",
    "2001:db8::1",
    "3fff::1",
    "5f00::1",
    "2002:7f00:1::1",
    "2002:a00:1::1",
    "2002:a9fe:a9fe::1",
    "2002:c0a8:101::1",
    "2002::1",
    "fc00::1",
    "fd00::1",
    "fd00:ec2::254",
    "fe80::1",
    "febf::1",
    "fec0::1",
    "ff02::1",
    "ff05::1:3",
]

PUBLIC_ADDRESSES = [
    "1.1.1.1",
    "8.8.8.8",
    "9.255.255.255",
    "11.0.0.1",
    "100.63.255.255",
    "100.128.0.1",
    "172.15.255.255",
    "172.32.0.1",
    "192.0.3.1",
    "192.169.0.1",
    "198.17.255.255",
    "198.20.0.1",
    "223.255.255.254",
    "93.184.216.34",
    "2606:4700:4700::1111",
    "2a00:1450:4001:81b::200e",
    "2002:808:808::1",
]


class TestCheckAddress:
    """Only globally routable unicast addresses pass."""

    @pytest.mark.parametrize("ip", BLOCKED_ADDRESSES)
    def test_blocked(self, ip: str) -> None:
        """Every special-purpose, private, metadata or translated address is refused."""
        verdict = check_address(ip)
        assert not verdict.allowed
        assert verdict.reason

    @pytest.mark.parametrize("ip", PUBLIC_ADDRESSES)
    def test_public(self, ip: str) -> None:
        """Ordinary public unicast addresses (and 6to4 of a public one) pass."""
        assert check_address(ip).allowed

    @pytest.mark.parametrize("ip", ["fe80::1%eth0", "fe80::1%1", "not-an-ip", "", "1.2.3"])
    def test_garbage_and_scoped(self, ip: str) -> None:
        """Scoped addresses and non-addresses are refused, never guessed at."""
        assert not check_address(ip).allowed

    def test_metadata_is_named(self) -> None:
        """A metadata address says what it is, for the log and detail."""
        assert "metadata" in check_address("169.254.169.254").reason
        assert "metadata" in check_address("fd00:ec2::254").reason


class TestAllowCidrs:
    """The allow-list exempts exactly its networks and nothing around them."""

    ALLOW = [ip_network("127.0.0.1/32")]

    def test_listed_address_passes(self) -> None:
        """127.0.0.1 passes when 127.0.0.1/32 is listed."""
        assert check_address("127.0.0.1", self.ALLOW).allowed

    @pytest.mark.parametrize(
        "ip", ["127.0.0.2", "127.0.0.0", "::1", "::ffff:127.0.0.1", "::127.0.0.1", "10.0.0.1"]
    )
    def test_neighbours_stay_blocked(self, ip: str) -> None:
        """Neighbours and IPv6 spellings of the listed address stay blocked."""
        assert not check_address(ip, self.ALLOW).allowed

    def test_ipv6_network(self) -> None:
        """An IPv6 allow entry works for its own family only."""
        allow = [ip_network("fd00:1::/64")]
        assert check_address("fd00:1::5", allow).allowed
        assert not check_address("fd00:2::5", allow).allowed


class TestCheckAddresses:
    """A resolution passes only if every address passes."""

    @pytest.mark.parametrize(
        "ips",
        [
            ["8.8.8.8", "10.0.0.1"],
            ["10.0.0.1", "8.8.8.8"],
            ["2606:4700:4700::1111", "::1"],
            ["1.1.1.1", "169.254.169.254"],
            [],
        ],
    )
    def test_mixed_or_empty_refused(self, ips: list[str]) -> None:
        """One private address among public ones (or no address at all) refuses the host."""
        assert not check_addresses(ips).allowed

    def test_all_public_pass(self) -> None:
        """All-public resolutions pass."""
        assert check_addresses(["8.8.8.8", "2606:4700:4700::1111"]).allowed


INET_ATON = [
    ("127.0.0.1", "127.0.0.1"),
    ("2130706433", "127.0.0.1"),
    ("0x7f000001", "127.0.0.1"),
    ("017700000001", "127.0.0.1"),
    ("0177.0.0.1", "127.0.0.1"),
    ("0x7f.1", "127.0.0.1"),
    ("0x7F.0.0.1", "127.0.0.1"),
    ("127.1", "127.0.0.1"),
    ("127.0.1", "127.0.0.1"),
    ("127.0.0.01", "127.0.0.1"),
    ("10.1", "10.0.0.1"),
    ("1.0x10000", "1.1.0.0"),
    ("0", "0.0.0.0"),
    ("3232235777", "192.168.1.1"),
    ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
    ("0251.0376.0251.0376", "169.254.169.254"),
    ("2852039166", "169.254.169.254"),
]


class TestHostLiterals:
    """Host literals are read as the C resolver reads them."""

    @pytest.mark.parametrize(("text", "expected"), INET_ATON)
    def test_inet_aton_notations(self, text: str, expected: str) -> None:
        """Decimal, octal, hex and short forms give the resolver's address."""
        assert parse_ipv4_like_inet_aton(text) == IPv4Address(expected)
        assert parse_host_literal(text) == IPv4Address(expected)

    @pytest.mark.parametrize(
        "text",
        [
            "256.0.0.1",
            "1.2.3.4.5",
            "08.0.0.1",
            "0x",
            "4294967296",
            "1.256.1",
            "example.123",
            "1.2.3.0x",
        ],
    )
    def test_malformed_numeric_refused(self, text: str) -> None:
        """A host ending in a number that is not a valid address is refused, not resolved."""
        assert isinstance(parse_host_literal(text), Verdict)

    @pytest.mark.parametrize("text", ["example.org", "a.b.c", "1.example", "0x.example"])
    def test_names_are_not_literals(self, text: str) -> None:
        """Host names are left for resolution."""
        assert parse_host_literal(text) is None

    @pytest.mark.parametrize(
        ("text", "expected"),
        [("[::1]", "::1"), ("[0:0:0:0:0:0:0:1]", "::1"), ("[::ffff:7f00:1]", "::ffff:7f00:1")],
    )
    def test_ipv6(self, text: str, expected: str) -> None:
        """Bracketed IPv6 literals parse to their address."""
        assert parse_host_literal(text) == IPv6Address(expected)

    @pytest.mark.parametrize("text", ["[fe80::1%eth0]", "[fe80::1%25eth0]", "[::1::2]", "[zz::]"])
    def test_ipv6_zone_or_malformed_refused(self, text: str) -> None:
        """Zone ids and malformed IPv6 are refused."""
        assert isinstance(parse_host_literal(text), Verdict)

    def test_trailing_dot(self) -> None:
        """A trailing dot does not hide a literal."""
        assert parse_host_literal("127.0.0.1.") == ip_address("127.0.0.1")


UNSAFE_URLS = [
    "http://example.org/",
    "ftp://example.org/",
    "file:///etc/passwd",
    "gopher://example.org/",
    "javascript:alert(1)",
    "data:text/html,hi",
    "example.org/path",
    "//example.org/",
    "https:///path",
    "https://",
    "https://user@example.org/",
    "https://user:pw@example.org/",
    "https://example.org:8443/",
    "https://example.org:80/",
    "https://example.org:0/",
    "https://example.org:65536/",
    "https://example.org:-1/",
    "https://example.org:44 3/",
    "https://example.org:４４３/",
    "https://exa mple.org/",
    "https://example.org/\n",
    "https://exa\tmple.org/",
    "https://example.org\\@evil.org/",
    # Other spellings of a private address (percent-encoded, fullwidth, ideographic dots, an
    # empty userinfo, hex parts) are still that address.
    "https://%31%32%37.0.0.1/",
    "https://:@127.0.0.1/",
    "https://１２７.０.０.１/",
    "https://127。0。0。1/",
    "https://[0:0:0:0:0:ffff:127.0.0.1]/",
    "https://0x7f.0x0.0x0.0x1/",
    "https://127.0.0.1/",
    "https://127.0.0.2/",
    "https://2130706433/",
    "https://0177.0.0.1/",
    "https://0x7f.1/",
    "https://127.1/",
    "https://127.0.0.1./",
    "https://[::1]/",
    "https://[::ffff:127.0.0.1]/",
    "https://[::ffff:a9fe:a9fe]/",
    "https://[fe80::1%25eth0]/",
    "https://[64:ff9b::a9fe:a9fe]/",
    "https://[2002:a9fe:a9fe::]/",
    "https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
    "https://169.254.169.254/latest/meta-data/",
    "https://[fd00:ec2::254]/",
    "https://0xa9fea9fe/",
    "https://10.0.0.1/",
    "https://100.64.0.1/",
    "https://0.0.0.0/",
    "https://198.18.0.1/",
    "https://intranet/",
    "https://" + "a" * 64 + ".example/",
    "https://" + ".".join(["abcdefghi"] * 26) + ".org/",
    "https://exa_mple-.org/",
    "https://-example.org/",
    "https://xn--a.org/",
    "https://example.org/" + "a" * 9000,
    "https://[::1/",
    "https://[::1]x/",
    "https://a:b:c/",
    "https://::1/",
    "https://93.184.215.14:443:22/",
    "https://93.184.215.14:99999/",
    "https://127.0.0.1:+443/",
    "https://93.184.215.14:443abc/",
]


class TestCheckUrl:
    """Static URL checks."""

    @pytest.mark.parametrize("url", UNSAFE_URLS)
    def test_unsafe_refused(self, url: str) -> None:
        """Schemes, userinfo, ports, literals and odd host forms are refused."""
        assert isinstance(guard_url(url, PORTS), Verdict)

    @pytest.mark.parametrize(
        ("url", "normalised", "host"),
        [
            ("https://Example.ORG/a?b=1#frag", "https://example.org/a?b=1", "example.org"),
            ("HTTPS://example.org", "https://example.org/", "example.org"),
            ("https://example.org.:443/", "https://example.org/", "example.org"),
            ("https://bücher.de/x", "https://xn--bcher-kva.de/x", "xn--bcher-kva.de"),
            ("https://BÜCHER.de/", "https://xn--bcher-kva.de/", "xn--bcher-kva.de"),
            ("https://8.8.8.8/", "https://8.8.8.8/", "8.8.8.8"),
            ("https://134744072/", "https://8.8.8.8/", "8.8.8.8"),
            (
                "https://[2606:4700:4700:0::1111]/",
                "https://[2606:4700:4700::1111]/",
                "2606:4700:4700::1111",
            ),
            ("https://a_b.example.org/", "https://a_b.example.org/", "a_b.example.org"),
        ],
    )
    def test_safe_normalised(self, url: str, normalised: str, host: str) -> None:
        """Public URLs pass, normalised (lower case, IDNA, canonical IP, no fragment)."""
        target = guard_url(url, PORTS)
        assert isinstance(target, ParsedTarget), target
        assert (target.url, target.host, target.port) == (normalised, host, 443)

    @pytest.mark.parametrize(
        ("url", "reason"),
        [
            ("https://", "URL does not parse: no host"),
            ("https:///", "URL does not parse: no host"),
            ("https://::1/", "URL does not parse: IPv6 address not in brackets: '::1'"),
            ("https://93.184.215.14:443:22/", "URL does not parse: invalid port: '443:22'"),
            (
                "https://93.184.215.14:99999/",
                "URL does not parse: invalid port: 99999 (above 65535)",
            ),
            ("https://127.0.0.1:+443/", "URL does not parse: invalid port: '+443'"),
            ("https://93.184.215.14:443abc/", "URL does not parse: invalid port: '443abc'"),
            ("https://example.org:0/", "port not allowed: 0"),
        ],
    )
    def test_refusal_names_the_fault(self, url: str, reason: str) -> None:
        """A URL that does not parse says why: `https://` has no host (not a port problem)."""
        assert guard_url(url, PORTS) == Verdict(False, reason)

    @pytest.mark.parametrize("url", ["https://@example.org/", "https://%65xample.org/"])
    def test_read_as_the_standard_reads_them(self, url: str) -> None:
        """Once refused by the hand-written splitter, now read as browsers read them.

        The WHATWG URL Standard drops an empty userinfo and decodes a percent-encoded host
        before mapping it, so both are `https://example.org/`: that is the URL requested (no
        credentials are sent), and a private address spelled so is still refused (above).
        """
        target = guard_url(url, PORTS)
        assert isinstance(target, ParsedTarget), target
        assert (target.url, target.host, target.ip) == ("https://example.org/", "example.org", None)

    def test_allowed_port(self) -> None:
        """A port passes only when it is listed."""
        assert isinstance(check_url("https://example.org:8443/", [443, 8443]), ParsedTarget)
        assert isinstance(check_url("https://example.org:8443/", [443]), Verdict)

    def test_path_keeps_query(self) -> None:
        """`path` is path plus query, as robots.txt matching needs."""
        target = check_url("https://example.org/a/b?x=1", PORTS)
        assert isinstance(target, ParsedTarget)
        assert target.path == "/a/b?x=1"
        assert target.origin == "https://example.org:443"

    def test_allow_cidr_applies_to_literals(self) -> None:
        """guard_url honours the allow-list for exactly the listed network."""
        allow = [ip_network("127.0.0.1/32")]
        assert isinstance(guard_url("https://127.0.0.1/", PORTS, allow), ParsedTarget)
        assert isinstance(guard_url("https://2130706433/", PORTS, allow), ParsedTarget)
        assert isinstance(guard_url("https://2130706434/", PORTS, allow), Verdict)
        assert isinstance(guard_url("https://[::1]/", PORTS, allow), Verdict)

    def test_localhost_is_a_name_to_resolve(self) -> None:
        """`localhost` passes the static check; its addresses decide (and are loopback)."""
        assert isinstance(check_url("https://localhost/", PORTS), ParsedTarget)
