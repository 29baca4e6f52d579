"""Memento (RFC 7089) pieces that need no database: HTTP dates, the closest memento to a
datetime, and link-format (RFC 6690) TimeMaps and `Link` values, written and read back.

A memento's datetime is its revision's `created_at` cut to the second, as an HTTP date can say
it; every choice is made on that published datetime, so asking for a memento's own
`Memento-Datetime` finds it (or, within one second, the latest recorded then).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import format_datetime
from urllib.parse import quote

#: The one form RFC 7089 allows for `Accept-Datetime` and `Memento-Datetime` (RFC 1123 in GMT).
_HTTP_DATE = "%a, %d %b %Y %H:%M:%S GMT"
#: What a URI in angle brackets may keep: RFC 3986's reserved and unreserved characters, and
#: `%` (already escaped). Anything else (`<`, `>`, `"`, spaces, non-ASCII) is percent-encoded,
#: so a stored key that predates URL checks cannot break the format.
_URI_SAFE = "!#$%&'()*+,/:;=?@[]~"


@dataclass(frozen=True)
class Memento:
    """A revision as Memento sees it: its URI-M and its datetime (UTC, whole seconds)."""

    uri: str
    datetime: datetime


class BadHttpDate(ValueError):
    """Not an RFC 1123 date in GMT, exactly as HTTP writes one."""


def http_date(moment: datetime) -> str:
    """`moment` as an HTTP date (RFC 1123, GMT); naive datetimes are taken as UTC."""
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return format_datetime(aware.astimezone(UTC), usegmt=True)


def parse_http_date(text: str) -> datetime:
    """An HTTP date as an aware UTC datetime; raises BadHttpDate for anything else.

    Strict: only the canonical form is accepted (two-digit day, English names, `GMT`, the
    weekday that date falls on), since RFC 7089 requires it and a lenient reading could pick a
    revision for a date the client never meant.
    """
    try:
        parsed = datetime.strptime(text, _HTTP_DATE).replace(tzinfo=UTC)
    except ValueError:
        raise BadHttpDate(f"not an RFC 1123 date in GMT: {text[:64]!r}") from None
    if http_date(parsed) != text:  # the wrong weekday, or a non-canonical spelling
        raise BadHttpDate(f"not an RFC 1123 date in GMT: {text[:64]!r}")
    return parsed


def memento_time(moment: datetime) -> datetime:
    """A revision's stored time as its memento's datetime: UTC, cut to the second."""
    aware = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    return aware.astimezone(UTC).replace(microsecond=0)


def closest(mementos: Sequence[Memento], at: datetime) -> int:
    """The index of the memento closest to `at` in `mementos` (sorted by datetime, stably).

    Before the first: the first; after the last: the last. Equally far before and after: the
    one before (the page as it was then). Several at one datetime: the last of them in order
    (the latest recorded). Raises ValueError when there are none.
    """
    if not mementos:
        raise ValueError("no mementos")
    times = [m.datetime for m in mementos]
    after = bisect.bisect_right(times, at)  # the first strictly after `at`
    if after == 0:
        return bisect.bisect_right(times, times[0]) - 1
    before = after - 1  # the last at or before `at`: the latest of its datetime already
    if after == len(times):
        return before
    later = bisect.bisect_right(times, times[after]) - 1
    return before if at - times[before] <= times[after] - at else later


def uri(text: str) -> str:
    """`text` safe between angle brackets."""
    return quote(text, safe=_URI_SAFE)


def link(target: str, rel: str, **params: str) -> str:
    """One link-value: `<target>; rel="…"` and quoted parameters, in the order given."""
    parts = [f"<{uri(target)}>", f'rel="{rel}"']
    parts += [f'{name}="{value}"' for name, value in params.items()]
    return "; ".join(parts)


def memento_rels(index: int, count: int) -> str:
    """The relation types of the memento at `index` of `count`: first, last, prev, next."""
    rels = (["first"] if index == 0 else []) + (["last"] if index == count - 1 else [])
    return " ".join([*rels, "memento"])


def timemap(original: str, timegate: str, self_uri: str, mementos: Sequence[Memento]) -> str:
    """A TimeMap in link-format (RFC 7089 §5.1.1): the original, its TimeGate, the map itself
    with the span it covers, then every memento with its datetime, oldest first."""
    span = {}
    if mementos:
        span = {"from": http_date(mementos[0].datetime), "until": http_date(mementos[-1].datetime)}
    lines = [
        link(original, "original"),
        link(timegate, "timegate"),
        link(self_uri, "self", type="application/link-format", **span),
    ]
    lines += [
        link(m.uri, memento_rels(n, len(mementos)), datetime=http_date(m.datetime))
        for n, m in enumerate(mementos)
    ]
    return ",\n".join(lines) + "\n"


def joined(links: Iterable[str]) -> str:
    """Link values as one `Link` header value."""
    return ", ".join(links)


_LINK = re.compile(r'\s*<([^<>]*)>((?:\s*;\s*[!#$%&\'*+\-.^_`|~0-9A-Za-z]+\s*=\s*"[^"]*")*)\s*')
_PARAM = re.compile(r'\s*;\s*([!#$%&\'*+\-.^_`|~0-9A-Za-z]+)\s*=\s*"([^"]*)"')


@dataclass(frozen=True)
class Link:
    """One parsed link-value: its target and parameters (names lower-cased)."""

    target: str
    params: dict[str, str]

    @property
    def rels(self) -> frozenset[str]:
        return frozenset(self.params.get("rel", "").lower().split())


def parse_links(text: str) -> list[Link]:
    """Link values as `link` and `timemap` write them (quoted parameters), in order; raises
    ValueError on anything else. Commas inside quoted values (dates) are not separators."""
    found: list[Link] = []
    position = 0
    while True:
        match = _LINK.match(text, position)
        if match is None:
            raise ValueError(f"not a link-value at {position}: {text[position : position + 40]!r}")
        params = {name.lower(): value for name, value in _PARAM.findall(match.group(2))}
        found.append(Link(match.group(1), params))
        position = match.end()
        if position == len(text):
            return found
        if text[position] != ",":
            raise ValueError(f"expected ',' at {position}: {text[position : position + 40]!r}")
        position += 1
