"""The one clock: every `now()` in the service comes from here, so tests can move time."""

from datetime import UTC, datetime


def now() -> datetime:
    """Return the current time, timezone-aware, in UTC."""
    return datetime.now(UTC)


def as_utc(value: datetime) -> datetime:
    """Treat a naive datetime (as SQLite returns them) as UTC."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def isoformat(value: datetime) -> str:
    """Format as RFC 3339 in UTC with millisecond precision and a `Z` suffix."""
    return as_utc(value).strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
