"""Read admission: polls and reads taken from their workspace's read-rate bucket.

What costs one token of the workspace's read bucket (`admission.readers`, rate
EVIDENCE_QUOTA_READ_RATE, size EVIDENCE_QUOTA_READ_BURST, overrides from `evidence quotas set`):
a `GET …/retrievals/{id}` (with `Prefer: wait=N`, once for the whole wait: its re-reads on
notifications are free), a replayed POST (and the MCP retrieve tool's replay), a read-side call
(evidence, chunks, images, briefs); a batch-get costs one token per BATCH_GET_IDS_PER_TOKEN ids
(one indexed query, but a payload per id), and so do a batch POST's replayed items. Cancels
are not limited (they only reduce work).

Over the rate the answer is the write rate's 429 (`rate_limited`, `retry_after_seconds`,
`Retry-After`). Each API process notes what it refused, per workspace and subject (a retrieval
id, a mutation id, a batch-get's ids): asked again before the `Retry-After` it was given, it
answers 429 from that note, with neither Redis nor the database. On the async routes (GET,
batch-get) every read refusal is held before it is answered, between half and all of
HOLD_SECONDS, so that a client polling in a loop on N connections gets at most about N/1.5
answers a second, and its connections come back spread out rather than all at once. The
note lasts the hold plus the Retry-After, as a client that respects the header counts from
the answer: an impatient poller back after the hold is refused from the
note, and only one that waited is asked about in Redis. The note is per process on purpose:
another process that has not seen the refusal asks the bucket, which is shared in Redis, so
the workspace never gets more than its rate across processes; sharing the notes would cost
every early poll a Redis round trip to save at most one per process.

The workspace charged is the one the read names (a retrieve body's, a search's), else the
retrieval's (learned from this process's earlier answers), else the key's when it has only one.
A key of several workspaces reading an id this process has not seen is charged after the read,
to the workspace of what it read (a miss: the lowest of its workspaces).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import random
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TypeVar

from api.auth import Principal
from api.errors import ApiError
from api.services import admission as quotas

P = TypeVar("P")
_sleep = asyncio.sleep  # what a hold awaits (a test records it)

#: Longest a read refusal is held before its 429 is answered (on the async routes), in seconds.
HOLD_SECONDS = 2.0
#: Ids of a batch-get that cost one token (1 000 ids: 10 tokens).
BATCH_GET_IDS_PER_TOKEN = 100
#: Refusals and retrieval workspaces each process remembers; past it, it starts afresh.
NOTES_SIZE = 65_536


class Notes:
    """Until when something this process answered stands: (a workspace or key, a subject) ->
    a time on `clock`. Here, the refusals (when the client may come back); in
    `api.services.poll_advice`, the poll advice given (when it falls due)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[tuple[uuid.UUID, str], float] = {}
        self._lock = threading.Lock()

    def remaining(self, owner: uuid.UUID, subject: str) -> float:
        """Seconds until the note on this subject ends; 0 when none stands."""
        until = self._until.get((owner, subject))
        if until is None:
            return 0.0
        left = until - self._clock()
        if left <= 0:
            self._until.pop((owner, subject), None)
            return 0.0
        return left

    def note(self, owner: uuid.UUID, subject: str, seconds: float) -> None:
        with self._lock:
            if len(self._until) >= NOTES_SIZE:
                self._until.clear()
            self._until[(owner, subject)] = self._clock() + seconds

    def forget(self, owner: uuid.UUID, subject: str) -> None:
        self._until.pop((owner, subject), None)

    def clear(self) -> None:
        self._until.clear()


notes = Notes()
#: Retrieval id -> its workspace, from answers this process gave (a retrieval never moves).
_workspace_of: dict[uuid.UUID, uuid.UUID] = {}


def learn(retrieval_id: uuid.UUID, workspace_id: uuid.UUID) -> None:
    """Remember a retrieval's workspace, so its next poll is charged before it is read."""
    if len(_workspace_of) >= NOTES_SIZE:
        _workspace_of.clear()
    _workspace_of[retrieval_id] = workspace_id


def workspace_for(principal: Principal, retrieval_id: uuid.UUID | None = None) -> uuid.UUID | None:
    """The workspace a read is charged to before it is read; None when it is known only after."""
    if retrieval_id is not None:
        known = _workspace_of.get(retrieval_id)
        if known is not None and principal.can_read(known):
            return known
    if len(principal.workspaces) == 1:
        return next(iter(principal.workspaces))
    return None


def fallback_workspace(principal: Principal) -> uuid.UUID | None:
    """Who pays for a read that found nothing of a key of several workspaces."""
    return min(principal.workspaces, default=None)


_mutations: dict[tuple[uuid.UUID, uuid.UUID], None] = {}


def mutation_subject(mutation_id: uuid.UUID) -> str:
    return f"mutation:{mutation_id}"


def answered(workspace_id: uuid.UUID, mutation_id: uuid.UUID) -> None:
    """Note a mutation this process answered: a POST of it again is a replay (a poll)."""
    if len(_mutations) >= NOTES_SIZE:
        _mutations.clear()
    _mutations[(workspace_id, mutation_id)] = None


def replay_subject(workspace_id: uuid.UUID, mutation_id: uuid.UUID) -> str | None:
    """The subject of a POST this process knows to be a replay; None when it may be new."""
    return mutation_subject(mutation_id) if (workspace_id, mutation_id) in _mutations else None


def ids_subject(ids: Iterable[uuid.UUID]) -> str:
    """A batch-get's subject: its ids, in a short stable form."""
    digest = hashlib.blake2b(digest_size=12)
    for retrieval_id in sorted(ids):
        digest.update(retrieval_id.bytes)
    return f"ids:{digest.hexdigest()}"


def batch_get_tokens(count: int) -> int:
    return max(1, -(-count // BATCH_GET_IDS_PER_TOKEN))


class ReadRefusal(ApiError):
    """A read's 429, with how long the route holds it before answering (`held`)."""

    def __init__(self, refusal: ApiError, hold: float) -> None:
        super().__init__(
            refusal.status, refusal.code, refusal.message, refusal.field, refusal.details,
            refusal.retry_after,
        )  # fmt: skip
        self.hold = hold


def hold_for() -> float:
    """How long to hold a refusal: half to all of HOLD_SECONDS, at random, so that connections
    refused together come back spread out. It may outlast the Retry-After (which a client
    counts from the answer): the hold is for clients that ignore it."""
    return HOLD_SECONDS * random.uniform(0.5, 1.0)


def _early(workspace_id: uuid.UUID, subject: str, left: float, holds: bool) -> ApiError:
    hold = hold_for() if holds else 0.0
    # Counted from the answer, after the hold: a client that waits it out is not early.
    retry_after = quotas.retry_seconds(max(0.0, left - hold))
    if hold + retry_after < left:  # the advice is capped: the note ends with it, never later
        notes.note(workspace_id, subject, hold + retry_after)
    refusal = quotas.rate_limited(
        f"this workspace was over its read rate for this; retry after {retry_after} s",
        retry_after,
    )
    return ReadRefusal(refusal, hold)


def check(workspace_id: uuid.UUID, subject: str | None, *, holds: bool = False) -> None:
    """Refuse from this process's note a subject asked about before its Retry-After: no Redis,
    no database, no I/O at all (so it may run in the event loop). `holds`: the caller answers
    inside `held`."""
    if subject is not None:
        left = notes.remaining(workspace_id, subject)
        if left > 0:
            raise _early(workspace_id, subject, left, holds)


@contextlib.asynccontextmanager
async def held() -> AsyncIterator[None]:
    """Around an async route's admission and read: a read refusal (429) is answered only after
    its hold (`hold_for`), so that a client asking again at once costs a sleeping coroutine
    meanwhile rather than a busy CPU."""
    try:
        yield
    except ReadRefusal as exc:
        if exc.hold > 0:
            await _sleep(exc.hold)
        raise


def admit(
    workspace_id: uuid.UUID, subject: str | None = None, tokens: int = 1, *, holds: bool = False
) -> None:
    """Take `tokens` from the workspace's read bucket, or raise its 429 (and note the refusal).
    `holds`: the caller answers inside `held`, so the refusal is held (and its note longer).

    Blocking (Redis now and then, the override cache's database read every few seconds): call it
    from a worker thread."""
    check(workspace_id, subject, holds=holds)
    limits = quotas.limits_for(workspace_id)
    bucket = limits.reads()
    grant = quotas.readers.take(workspace_id, tokens, bucket)
    if grant.granted >= tokens:
        return
    quotas.readers.refund(workspace_id, grant.granted, bucket)
    retry_after = grant.retry_after or 1
    hold = hold_for() if holds else 0.0
    if subject is not None:
        notes.note(workspace_id, subject, hold + retry_after)
    raise ReadRefusal(quotas.over_read_rate(limits, retry_after), hold)


def charged_once(
    read: Callable[[], P],
    principal: Principal,
    charged: uuid.UUID | None,
    subject: str | None,
    owners: Callable[[P], dict[uuid.UUID, uuid.UUID]],
    tokens: int = 1,
) -> Callable[[], P]:
    """`read` taking its tokens on its first call only (a long-poll counts once): before
    reading when the workspace `charged` is known, else after, from the retrievals read
    (`owners`: id -> workspace), whose workspaces this process then learns."""
    first = [True]

    def admitted() -> P:
        if not first[0]:
            return read()
        first[0] = False
        if charged is not None:
            admit(charged, subject, tokens, holds=True)
            value = read()
            for retrieval_id, workspace_id in owners(value).items():
                learn(retrieval_id, workspace_id)
            return value
        fallback = fallback_workspace(principal)
        try:
            value = read()
        except ApiError:  # a 404: the miss is paid for like a hit
            if fallback is not None:
                admit(fallback, subject, tokens, holds=True)
            raise
        found = owners(value)
        for retrieval_id, workspace_id in found.items():
            learn(retrieval_id, workspace_id)
        payers = sorted(set(found.values())) or ([fallback] if fallback is not None else [])
        for workspace_id in payers:
            admit(workspace_id, subject, tokens, holds=True)
        return value

    return admitted


def admit_read_side(principal: Principal, workspace_id: uuid.UUID | None = None) -> None:
    """A read-side call's token: charged to the workspace it names, else the key's (its lowest
    of several). No note is kept: such reads are not polls of one subject."""
    payer = workspace_id if workspace_id is not None else workspace_for(principal)
    payer = payer if payer is not None else fallback_workspace(principal)
    if payer is not None:
        admit(payer)


def reset() -> None:
    """Forget the notes and the learned workspaces (tests)."""
    notes.clear()
    _workspace_of.clear()
    _mutations.clear()
