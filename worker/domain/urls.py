"""One URL parser for every step: the WHATWG URL Standard (what browsers do), through ada.

The API's door, the fetch guard, the evidence normaliser and the webhook check all split a URL
with `parse`, so a URL the door accepts is one every later step reads the same way (the host
IDNA-mapped, `0x7f.1` and fullwidth digits read as the IPv4 address they are, the port checked),
and text the standard refuses gets a refusal naming the fault, for a 400 or a log line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

import ada_url

#: Schemes with a default port, as the standard lists them (`file` has a host but no port).
DEFAULT_PORTS: dict[str, int] = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
#: Special schemes: their host is a domain (IDNA) or an IP address, never opaque text.
SPECIAL_SCHEMES = frozenset({*DEFAULT_PORTS, "file"})
MAX_PORT = 65535

_ATTRIBUTES = (
    *("href", "username", "password", "protocol", "port", "hostname"),
    *("pathname", "search", "hash", "host_type"),
)
#: What the standard strips before parsing: C0 controls and spaces at either end; tab and
#: newline anywhere.
_C0_AND_SPACE = "".join(chr(code) for code in range(0x21))
_TAB_NEWLINE = str.maketrans("", "", "\t\n\r")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_NUMBER = re.compile(r"(?:0[xX][0-9A-Fa-f]*|[0-9]+)\.?")


class HostKind(StrEnum):
    """What the host of a parsed URL is."""

    DOMAIN = "domain"  # a special scheme's name: IDNA-mapped, lower-case ASCII
    IPV4 = "ipv4"
    IPV6 = "ipv6"
    OPAQUE = "opaque"  # another scheme's host, percent-encoded as written
    NONE = "none"  # no host (`mailto:x`, `file:///etc/passwd`)


@dataclass(frozen=True)
class ParsedUrl:
    """A URL as the standard reads it; `href` is its serialisation."""

    href: str
    #: Lower case, without the colon.
    scheme: str
    username: str
    password: str
    #: ASCII; an IPv4 address in dotted decimal, an IPv6 one compressed and without brackets;
    #: "" when `host_kind` is NONE.
    host: str
    host_kind: HostKind
    #: The port written, unless it is the scheme's default (then None, as the standard has it).
    port: int | None
    path: str
    #: Without the `?` ("" when there is none, or it is empty).
    query: str
    #: Without the `#`.
    fragment: str

    @property
    def has_host(self) -> bool:
        return self.host_kind is not HostKind.NONE

    @property
    def has_credentials(self) -> bool:
        return bool(self.username or self.password)

    @property
    def authority_host(self) -> str:
        """The host as it is written in a URL (an IPv6 address in brackets)."""
        return f"[{self.host}]" if self.host_kind is HostKind.IPV6 else self.host

    @property
    def effective_port(self) -> int | None:
        """The port a connection uses: the written one, else the scheme's default."""
        return self.port if self.port is not None else DEFAULT_PORTS.get(self.scheme)

    @property
    def without_fragment(self) -> str:
        """`href` without its fragment, and without a `?` that has no query after it."""
        # The first `#` starts the fragment: the standard percent-encodes any earlier one.
        text = self.href.partition("#")[0]
        return text[:-1] if not self.query and text.endswith("?") else text


@dataclass(frozen=True)
class UrlRefusal:
    """Text the standard does not read as a URL, and why (e.g. `invalid port: '443:22'`)."""

    reason: str

    def __str__(self) -> str:
        return self.reason


def parse(text: object) -> ParsedUrl | UrlRefusal:
    """Read `text` as the WHATWG URL Standard does (never raises, whatever it is given)."""
    if not isinstance(text, str):
        return UrlRefusal(f"not text: {type(text).__name__}")
    try:
        parts = ada_url.parse_url(text, _ATTRIBUTES)
    except ValueError:
        return UrlRefusal(diagnose(text))
    scheme = parts["protocol"].removesuffix(":")
    hostname = parts["hostname"]
    if not hostname:
        kind = HostKind.NONE
    elif parts["host_type"] == ada_url.HostType.IPV4:
        kind = HostKind.IPV4
    elif parts["host_type"] == ada_url.HostType.IPV6:
        kind, hostname = HostKind.IPV6, hostname.strip("[]")
    else:
        kind = HostKind.DOMAIN if scheme in SPECIAL_SCHEMES else HostKind.OPAQUE
    return ParsedUrl(
        href=parts["href"],
        scheme=scheme,
        username=parts["username"],
        password=parts["password"],
        host=hostname,
        host_kind=kind,
        port=int(parts["port"]) if parts["port"] else None,
        path=parts["pathname"],
        query=parts["search"].removeprefix("?"),
        fragment=parts["hash"].removeprefix("#"),
    )


def diagnose(text: str) -> str:
    """Why the standard refuses `text`, in words (ada says only that it does).

    It retraces the parser's steps only as far as naming the fault needs: the scheme, the
    authority, the port, the host; what it cannot name is "does not parse as a URL".
    """
    cleaned = text.strip(_C0_AND_SPACE).translate(_TAB_NEWLINE)
    if not cleaned:
        return "empty"
    if any(0xD800 <= ord(char) <= 0xDFFF for char in cleaned):
        return "not valid Unicode (a lone surrogate)"
    scheme = _SCHEME.match(cleaned)
    if scheme is None:
        return "no scheme: not an absolute URL"
    name, rest = scheme.group()[:-1].lower(), cleaned[scheme.end() :]
    if name in SPECIAL_SCHEMES:
        rest, ends = rest.lstrip("/\\"), "/\\?#"
    elif rest.startswith("//"):
        rest, ends = rest[2:], "/?#"
    else:
        return "does not parse as a URL"
    authority = re.split(f"[{re.escape(ends)}]", rest, maxsplit=1)[0]
    host_port = authority.rpartition("@")[2]
    if host_port.startswith("["):
        end = host_port.find("]")
        if end < 0:
            return f"invalid IPv6 address (no closing ']'): {host_port!r}"
        host, after = host_port[: end + 1], host_port[end + 1 :]
        if after and not after.startswith(":"):
            return f"unexpected text after the IPv6 address: {after!r}"
        if not _parses(f"https://{host}/"):
            return f"invalid IPv6 address: {host!r}"
        port = after[1:]
    else:
        host, _, port = host_port.partition(":")
        if not host and ":" in port:
            return f"IPv6 address not in brackets: {host_port!r}"
    if port and not (port.isascii() and port.isdigit()):
        return f"invalid port: {port!r}"
    digits = port.lstrip("0")
    if len(digits) > len(str(MAX_PORT)) or int(digits or "0") > MAX_PORT:
        return f"invalid port: {_short(port)} (above {MAX_PORT})"
    if not host:
        return "no host"
    if name in SPECIAL_SCHEMES and not _parses(f"https://{host}/"):
        last = host.rstrip(".").rpartition(".")[2] if host.rstrip(".") else host
        if _NUMBER.fullmatch(last):
            return f"invalid IPv4 address: {_short(host)!r}"
        return f"invalid host: {_short(host)!r}"
    return "does not parse as a URL"


def _parses(text: str) -> bool:
    try:
        ada_url.parse_url(text, ("href",))
    except ValueError:
        return False
    return True


def _short(text: str, limit: int = 64) -> str:
    """`text`, cut for a message (a 5 000-digit port is named, not echoed)."""
    return text if len(text) <= limit else f"{text[:limit]}…"
