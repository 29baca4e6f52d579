"""When a watch runs: slots on a per-watch grid, late runs collapsed into one. Pure.

A watch of interval I runs at the instants `offset + k·I` (k an integer, counted from the Unix
epoch), its offset a stable hash of its id in [0, I): 10 000 watches of one interval are spread
evenly over it instead of firing together, and every scheduler on every host computes the same
slots. A scheduler that comes back after missing slots runs the watch once, for the latest slot
due, and counts the ones it skipped (`missed`), so downtime never turns into a burst of runs.
Times are whole milliseconds since the epoch inside, so slots compare exactly.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

#: The shortest interval a watch may have (5 minutes, the issue's floor).
MIN_INTERVAL_SECONDS = 300
#: The longest: 30 days (a slot grid coarser than this is a reminder, not a watch).
MAX_INTERVAL_SECONDS = 30 * 86_400
#: Namespace of the runs' mutation ids (uuid5 of the watch and its slot).
RUN_NAMESPACE = uuid.UUID("6f1d3c2e-58a4-4b8e-9a51-0c7e2f3b9d41")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _ms(value: datetime) -> int:
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _at(ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=ms)


def offset_ms(watch_id: uuid.UUID, interval_seconds: int) -> int:
    """The watch's place in its interval: a hash of its id, the same on every host."""
    digest = hashlib.sha256(watch_id.bytes).digest()
    return int.from_bytes(digest[:8], "big") % (interval_seconds * 1000)


def first_slot(watch_id: uuid.UUID, interval_seconds: int, now: datetime) -> datetime:
    """The watch's first slot strictly after `now` (a new or re-enabled watch starts there)."""
    period = interval_seconds * 1000
    offset = offset_ms(watch_id, interval_seconds)
    k = (_ms(now) - offset) // period + 1
    return _at(offset + k * period)


@dataclass(frozen=True)
class Run:
    """What a scheduler does with a due watch: one run, for `slot`."""

    #: The slot this run stands for: the latest one due (its mutation id is derived from it).
    slot: datetime
    #: Slots before it that passed without a run (the scheduler was down or behind).
    missed: int
    #: The slot after it: the watch's next `next_run_at`.
    next_run_at: datetime


def due_run(
    watch_id: uuid.UUID, interval_seconds: int, next_run_at: datetime, now: datetime
) -> Run | None:
    """The run due at `now` for a watch whose next slot is `next_run_at`; None if not due."""
    if next_run_at > now:
        return None
    period = interval_seconds * 1000
    offset = offset_ms(watch_id, interval_seconds)
    latest = offset + (_ms(now) - offset) // period * period
    # next_run_at is on the grid unless the interval changed under it: count whole periods.
    missed = max(0, (latest - _ms(next_run_at)) // period)
    return Run(slot=_at(latest), missed=missed, next_run_at=_at(latest + period))


def run_mutation_id(watch_id: uuid.UUID, slot: datetime) -> uuid.UUID:
    """The mutation id of the watch's run for `slot`: a run started twice is a replay."""
    return uuid.uuid5(RUN_NAMESPACE, f"{watch_id}/{_ms(slot)}")
