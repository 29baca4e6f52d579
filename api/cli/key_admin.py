"""What `evidence keys` computes: durations and instants read from its flags, and a key's
listing (id, prefix, grants, times, state; never the secret, which is not stored)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from api.auth import key_state
from worker.domain import clock
from worker.store.models import ApiKey

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+)([smhdw])")
#: The longest duration accepted (datetime's range ends at year 9999 anyway).
MAX_DURATION = timedelta(days=100 * 365)

#: The listing's columns, in order: the table's headers and the JSON document's keys.
COLUMNS = (
    ("id", "id"),
    ("prefix", "prefix"),
    ("state", "state"),
    ("workspaces", "workspaces"),
    ("scopes", "scopes"),
    ("created", "created_at"),
    ("last used", "last_used_at"),
    ("expires", "expires_at"),
    ("revoked", "revoked_at"),
)


def parse_duration(text: str) -> timedelta:
    """`90d`, `12h`, `1h30m`, `45s`, `2w` as a positive timedelta; ValueError otherwise."""
    spec = text.strip().lower()
    parts = _PART.findall(spec)
    if not spec or "".join(n + u for n, u in parts) != spec:
        raise ValueError(f"{text!r} is not a duration such as 90d, 12h, 1h30m or 45s")
    seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError("the duration must be longer than 0 s")
    if seconds > MAX_DURATION.total_seconds():
        raise ValueError("the duration must be at most 100 years")
    return timedelta(seconds=seconds)


def parse_instant(text: str, now: datetime) -> datetime:
    """An ISO 8601 date or time in the future (UTC when it names no offset); ValueError if not."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO 8601 time such as 2027-01-31T12:00Z") from None
    value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if value <= now:
        raise ValueError(f"{text!r} is not in the future")
    return value


def _time(value: datetime | None) -> str | None:
    return clock.isoformat(value) if value is not None else None


def document(key: ApiKey, now: datetime) -> dict[str, Any]:
    """A key as `keys list --json` prints it."""
    return {
        "id": str(key.id),
        "prefix": key.prefix,
        "state": key_state(key.revoked_at, key.expires_at, now),
        "workspaces": list(key.workspaces),
        "scopes": list(key.scopes),
        "created_at": _time(key.created_at),
        "last_used_at": _time(key.last_used_at),
        "expires_at": _time(key.expires_at),
        "revoked_at": _time(key.revoked_at),
    }


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(value) or "-"
    return str(value)


def table(documents: list[dict[str, Any]]) -> list[str]:
    """The documents as aligned text lines, a header first (times in UTC, `-` for none)."""
    header = [title for title, _ in COLUMNS]
    rows = [[_cell(d[field]) for _, field in COLUMNS] for d in documents]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
