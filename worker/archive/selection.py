"""What a WACZ export holds, chosen in plain functions (pure: the index's rows in, decisions out).

An export names evidence items, or a whole workspace. It holds each chosen exchange's records
and, for a revisit, the response it refers to (its payload, which a replay needs), each group
once, in the order they were written. Malformed ids are all reported at once, before anything
is read: nothing is exported from a list with one bad item.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from worker.store.archive_reads import IndexedExchange

#: Evidence ids one export may name.
MAX_EVIDENCE_IDS = 1000
#: A malformed item's value is echoed back cut to this many characters.
_ECHO = 64


@dataclass(frozen=True)
class BadItem:
    """One refused item of an evidence id list: its index, what was sent, and why."""

    index: int
    value: str
    reason: str  # "not_a_uuid", "duplicate", "not_found"

    def as_dict(self) -> dict[str, object]:
        return {"index": self.index, "value": self.value, "reason": self.reason}


def _echo(value: object) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text[:_ECHO]


def parse_evidence_ids(values: Sequence[object]) -> tuple[list[uuid.UUID], list[BadItem]]:
    """The ids, in order, and every item that is not one: not a UUID in its canonical text
    (any case), or the same id as an earlier item."""
    ids: list[uuid.UUID] = []
    bad: list[BadItem] = []
    seen: set[uuid.UUID] = set()
    for index, value in enumerate(values):
        parsed = _uuid(value)
        if parsed is None:
            bad.append(BadItem(index, _echo(value), "not_a_uuid"))
        elif parsed in seen:
            bad.append(BadItem(index, _echo(value), "duplicate"))
        else:
            seen.add(parsed)
            ids.append(parsed)
    return ids, bad


def _uuid(value: object) -> uuid.UUID | None:
    if not isinstance(value, str) or len(value) != 36:
        return None  # uuid.UUID also reads braces, `urn:uuid:` and no dashes: not ids here
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        return None
    return parsed if str(parsed) == value.lower() else None


def not_found(values: Sequence[object], known: Collection[uuid.UUID]) -> list[BadItem]:
    """Items naming well-formed ids that are not among `known` (the workspace's items): unknown
    and another workspace's ids alike."""
    missing = []
    for index, value in enumerate(values):
        parsed = _uuid(value)
        if parsed is not None and parsed not in known:
            missing.append(BadItem(index, _echo(value), "not_found"))
    return missing


def referred(chosen: Iterable[IndexedExchange]) -> set[str]:
    """Record ids of the responses the chosen revisits refer to, not chosen themselves."""
    rows = list(chosen)
    have = {row.record_id for row in rows}
    return {row.refers_to for row in rows if row.refers_to and row.refers_to not in have}


def with_referred(
    chosen: Iterable[IndexedExchange], responses: Mapping[str, IndexedExchange]
) -> list[IndexedExchange]:
    """The chosen exchanges and the responses their revisits refer to (found in `responses`:
    one purged is left out, its revisit kept), each once, in written order (file, offset)."""
    rows = list(chosen)
    wanted = referred(rows)
    groups = {(row.file, row.offset): row for row in rows}
    for record_id in wanted:
        response = responses.get(record_id)
        if response is not None:
            groups[(response.file, response.offset)] = response
    return [groups[key] for key in sorted(groups)]


def export_bytes(exchanges: Iterable[IndexedExchange]) -> int:
    """The archived bytes an export copies: every group's records (gzipped, as stored)."""
    return sum(row.group_bytes for row in exchanges)


@dataclass(frozen=True)
class Page:
    """One entry of the WACZ's pages list: a URL as it was at a time."""

    id: str
    url: str
    ts: datetime


def page_id(record_id: str) -> str:
    """A page's id: its record's uuid, in hex."""
    return record_id.strip("<>").removeprefix("urn:uuid:").replace("-", "")


def pages(exchanges: Iterable[IndexedExchange]) -> list[Page]:
    """One page per archived payload (response record), by fetch time. Revisits (an unchanged
    re-fetch, a 304) are in the WARC and its index, but a page of their own would replay as the
    304's headers in some tools."""
    found = [
        Page(page_id(row.record_id), row.url, row.fetched_at)
        for row in exchanges
        if row.record_type == "response"
    ]
    return sorted(found, key=lambda page: (page.ts, page.url, page.id))


def over_limit(total: int, limit: int) -> bool:
    """Whether an export of `total` archived bytes is refused under `limit`."""
    return total > limit
