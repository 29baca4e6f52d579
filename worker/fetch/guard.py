"""The egress guard: pure decisions about which URLs and addresses the fetcher may reach.

Why this module exists: the service fetches URLs chosen by its callers, so every URL is an
attempt to make our workers reach something (SSRF). Every decision lives here as a pure
function (no sockets, no DNS) so it can be tested exhaustively, and the network layer
(`worker.fetch.egress`) calls the same functions for the addresses it actually dials. URLs are
split by the WHATWG URL Standard (`worker.domain.urls`), which reads `2130706433`, `0177.0.0.1`,
`0x7f.1` and `127.1` as 127.0.0.1; a host the egress layer is handed is read the way the C
resolver (inet_aton / getaddrinfo) reads it, which agrees on those.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

import idna

from worker.domain import urls

IPAddress = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network

#: Longest URL accepted, in characters.
MAX_URL_CHARS = 8192
#: Longest host name (RFC 1035), in characters, without the trailing dot.
MAX_HOST_CHARS = 253
#: Longest DNS label (RFC 1035), in characters.
MAX_LABEL_CHARS = 63
#: Redirects followed before giving up.
MAX_REDIRECTS = 5
#: Statuses whose Location is followed.
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})

_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?")
_NUMERIC_LABEL = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")
_CONTROL = re.compile(r"[\x00-\x20\x7f\\]")

#: Named networks that are never a public web server (checked before `is_global`).
BLOCKED_NETWORKS: tuple[tuple[Network, str], ...] = tuple(
    (ip_network(cidr), label)
    for cidr, label in (
        ("0.0.0.0/8", "this network"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "carrier-grade NAT"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4 relay anycast"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("::ffff:0:0:0/96", "IPv4-translated"),
        ("64:ff9b::/96", "NAT64"),
        ("64:ff9b:1::/48", "local NAT64"),
        ("100::/64", "discard-only"),
        ("2001::/32", "Teredo"),
        ("2001::/23", "IETF protocol assignments"),
        ("2001:db8::/32", "documentation"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "segment routing"),
        ("fc00::/7", "unique local"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local"),
        ("ff00::/8", "multicast"),
    )
)

#: Cloud metadata services, named so that logs say what was attempted.
METADATA_ADDRESSES: dict[IPAddress, str] = {
    ip_address("169.254.169.254"): "cloud metadata",
    ip_address("169.254.170.2"): "ECS task metadata",
    ip_address("100.100.100.200"): "Alibaba metadata",
    ip_address("192.0.0.192"): "Oracle metadata",
    ip_address("fd00:ec2::254"): "EC2 IPv6 metadata",
}

_SIX_TO_FOUR = ip_network("2002::/16")


@dataclass(frozen=True)
class Verdict:
    """A refusal (or acceptance) with a human-readable reason for logs and `detail`."""

    allowed: bool
    reason: str = ""


@dataclass(frozen=True)
class ParsedTarget:
    """A URL that passed the static checks; `url` is its normalised form to request."""

    url: str
    host: str
    port: int
    #: Path and query (`/a?b=1`), as robots.txt rules see it.
    path: str
    #: The address when the host is an IP literal (no resolution will happen).
    ip: IPAddress | None = None

    @property
    def origin(self) -> str:
        """Scheme, host and port, e.g. `https://example.org:443` (keys for caches and limits)."""
        host = f"[{self.ip}]" if isinstance(self.ip, IPv6Address) else self.host
        return f"https://{host}:{self.port}"


def parse_ipv4_like_inet_aton(text: str) -> IPv4Address | None:
    """Parse `text` as inet_aton does (1-4 parts, octal/hex/decimal); None if it is not one."""
    parts = text.split(".")
    if not 1 <= len(parts) <= 4:
        return None
    values: list[int] = []
    for part in parts:
        if not _NUMERIC_LABEL.fullmatch(part) or part.lower() == "0x":
            return None
        if part[:2].lower() == "0x":
            values.append(int(part[2:], 16))
        elif len(part) > 1 and part.startswith("0"):
            if any(c in "89" for c in part):
                return None
            values.append(int(part, 8))
        else:
            values.append(int(part))
    *head, last = values
    if any(v > 255 for v in head) or last >= 256 ** (4 - len(head)):
        return None
    number = last
    for index, value in enumerate(head):
        number |= value << (8 * (3 - index))
    return IPv4Address(number)


def parse_host_literal(host: str) -> IPAddress | Verdict | None:
    """The IP a host literal denotes, a refusal for malformed/zoned literals, or None for names."""
    text = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if ":" in text:
        if "%" in text:
            return Verdict(False, "IPv6 zone identifiers are not allowed")
        try:
            return IPv6Address(text)
        except ValueError:
            return Verdict(False, f"malformed IPv6 literal: {host!r}")
    text = text[:-1] if text.endswith(".") else text
    labels = text.split(".")
    if not labels or not _NUMERIC_LABEL.fullmatch(labels[-1]):
        return None
    parsed = parse_ipv4_like_inet_aton(text)
    return parsed if parsed is not None else Verdict(False, f"malformed IPv4 literal: {host!r}")


def normalise_host_name(host: str) -> str | Verdict:
    """IDNA-encode and validate a DNS name (lower case, no trailing dot)."""
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > MAX_HOST_CHARS * 4:
        return Verdict(False, "host name missing or too long")
    try:
        if name.isascii():
            ascii_name = name.lower()
            for label in ascii_name.split("."):
                if label.startswith("xn--"):
                    idna.decode(label)
        else:
            ascii_name = idna.encode(name, uts46=True).decode("ascii").lower()
    except (idna.IDNAError, UnicodeError, ValueError):
        return Verdict(False, f"host is not a valid IDNA name: {host!r}")
    if len(ascii_name) > MAX_HOST_CHARS:
        return Verdict(False, "host name too long")
    for label in ascii_name.split("."):
        if len(label) > MAX_LABEL_CHARS or not _LABEL.fullmatch(label):
            return Verdict(False, f"invalid host label: {label!r}")
    if "." not in ascii_name and ascii_name != "localhost":
        return Verdict(False, "single-label host names are not public")
    return ascii_name


def check_url(url: str, allowed_ports: list[int] | frozenset[int]) -> ParsedTarget | Verdict:
    """Static checks of a URL (scheme, userinfo, port, host form); addresses come later.

    The URL is split by `worker.domain.urls.parse` (the WHATWG URL Standard, as browsers and the
    API's door read it), so the host checked here is the one every other step sees: IDNA-mapped, and
    any IPv4 notation (`0x7f.1`, `2130706433`, fullwidth digits) already the address it names.
    """
    if not isinstance(url, str) or len(url) > MAX_URL_CHARS:
        return Verdict(False, "URL missing or too long")
    # The standard would silently drop these; a URL that needs them dropped is refused.
    if _CONTROL.search(url):
        return Verdict(False, "URL contains whitespace, control characters or backslashes")
    parsed = urls.parse(url)
    if isinstance(parsed, urls.UrlRefusal):
        return Verdict(False, f"URL does not parse: {parsed.reason}")
    if parsed.scheme != "https":
        return Verdict(False, f"scheme not allowed: {parsed.scheme!r}")
    if parsed.has_credentials:
        return Verdict(False, "userinfo in URL is not allowed")
    port = 443 if parsed.port is None else parsed.port
    if port not in allowed_ports:
        return Verdict(False, f"port not allowed: {port}")
    literal: IPAddress | None = None
    if parsed.host_kind is urls.HostKind.IPV4:
        literal = IPv4Address(parsed.host)
        host = authority_host = str(literal)
    elif parsed.host_kind is urls.HostKind.IPV6:
        if "%" in parsed.host:  # the standard has no zones; refused should one ever appear
            return Verdict(False, "IPv6 zone identifiers are not allowed")
        literal = IPv6Address(parsed.host)
        host, authority_host = str(literal), f"[{literal}]"
    else:
        name = normalise_host_name(parsed.host)
        if isinstance(name, Verdict):
            return name
        host = authority_host = name
    netloc = authority_host if port == 443 else f"{authority_host}:{port}"
    query = f"?{parsed.query}" if parsed.query else ""
    return ParsedTarget(
        url=f"https://{netloc}{parsed.path}{query}",
        host=host,
        port=port,
        path=f"{parsed.path}{query}",
        ip=literal,
    )


def check_address(
    ip: IPAddress | str, allow_cidrs: list[Network] | tuple[Network, ...] = ()
) -> Verdict:
    """Accept only globally routable unicast addresses, or ones inside an allow-listed network."""
    if isinstance(ip, str):
        if "%" in ip:
            return Verdict(False, f"scoped address: {ip}")
        try:
            ip = ip_address(ip)
        except ValueError:
            return Verdict(False, f"not an IP address: {ip!r}")
    for network in allow_cidrs:
        if ip.version == network.version and ip in network:
            return Verdict(True, f"allow-listed by {network}")
    if ip in METADATA_ADDRESSES:
        return Verdict(False, f"{ip} is {METADATA_ADDRESSES[ip]}")
    for network, label in BLOCKED_NETWORKS:
        if ip.version == network.version and ip in network:
            return Verdict(False, f"{ip} is {label} ({network})")
    if isinstance(ip, IPv6Address) and ip in _SIX_TO_FOUR and ip.sixtofour is not None:
        verdict = check_address(ip.sixtofour)
        if not verdict.allowed:
            return Verdict(False, f"{ip} embeds {verdict.reason}")
    if not ip.is_global or ip.is_multicast:
        return Verdict(False, f"{ip} is not globally routable")
    return Verdict(True)


def check_addresses(
    ips: list[str] | list[IPAddress], allow_cidrs: list[Network] | tuple[Network, ...] = ()
) -> Verdict:
    """Refuse a resolution unless it is non-empty and EVERY address passes `check_address`."""
    if not ips:
        return Verdict(False, "host resolved to no addresses")
    for ip in ips:
        verdict = check_address(ip, allow_cidrs)
        if not verdict.allowed:
            return verdict
    return Verdict(True)


def guard_url(
    url: str,
    allowed_ports: list[int] | frozenset[int],
    allow_cidrs: list[Network] | tuple[Network, ...] = (),
) -> ParsedTarget | Verdict:
    """`check_url`, plus `check_address` when the host is an IP literal."""
    target = check_url(url, allowed_ports)
    if isinstance(target, ParsedTarget) and target.ip is not None:
        verdict = check_address(target.ip, allow_cidrs)
        if not verdict.allowed:
            return verdict
    return target
