"""API keys: creation, hashing, and the one place that checks scope and workspace access.

Keys are 256-bit random secrets, so a single SHA-256 is a sound one-way hash for them (a slow
password hash defends low-entropy secrets; these are not). Only the hash is stored, with the
key's first characters (`prefix`) so an operator can tell keys apart.

A revoked or expired key answers 401 within KEY_CACHE_SECONDS on every process: each one
trusts a verified key only that long, then reads its row again.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from api.errors import not_entitled
from worker.domain import clock
from worker.store import db, keys
from worker.store.models import ApiKey

log = structlog.get_logger(__name__)

KEY_PREFIX = "evk_"
#: Characters of a key kept in the clear (`evk_` and 8 of its 43 random ones: 48 of 256 bits).
PREFIX_LENGTH = 12
SCOPE_RESEARCH = "agent:research"
#: How long a verified key is trusted without asking the database again: a revocation takes
#: effect on every process within this many seconds (promised: 5). Saves a round trip on all
#: but one request per key and process in this long.
KEY_CACHE_SECONDS = 2.0
KEY_CACHE_SIZE = 1024
#: `last_used_at` is written at most this often per key (not on every request).
LAST_USED_EVERY = timedelta(minutes=1)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the key's workspaces and scopes."""

    key_id: uuid.UUID
    workspaces: frozenset[uuid.UUID]
    scopes: frozenset[str]

    def can_read(self, workspace_id: uuid.UUID) -> bool:
        """Whether this key may see `workspace_id` (callers answer 404 when not)."""
        return workspace_id in self.workspaces

    def require(self, workspace_id: uuid.UUID | None, scope: str = SCOPE_RESEARCH) -> None:
        """Refuse (403 `not_entitled`) unless the key has `scope` and access to the workspace."""
        if scope not in self.scopes:
            raise not_entitled(f"this key lacks the scope {scope}")
        if workspace_id is not None and workspace_id not in self.workspaces:
            raise not_entitled("this key has no access to that workspace")


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class NewKey:
    """A key just made: its id and prefix (shown from now on) and the secret (shown once)."""

    id: uuid.UUID
    prefix: str
    secret: str


def issue_key(
    session: Session,
    workspaces: list[uuid.UUID],
    scopes: list[str],
    now: datetime,
    expires_at: datetime | None = None,
) -> NewKey:
    """Store a new key's hash and prefix; return it with the secret (never stored)."""
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    prefix = secret[:PREFIX_LENGTH]
    key_id = keys.insert_key(session, hash_key(secret), prefix, workspaces, scopes, now, expires_at)
    return NewKey(key_id, prefix, secret)


def create_key(
    session: Session, workspaces: list[uuid.UUID], scopes: list[str], now: datetime
) -> str:
    """Store a new key's hash and return the key itself (shown once, never stored)."""
    return issue_key(session, workspaces, scopes, now).secret


def rotate_key(
    session: Session, key_id: uuid.UUID, now: datetime, grace: timedelta = timedelta(0)
) -> NewKey | None:
    """A new key with the old one's workspaces, scopes and expiry; the old one is revoked
    `grace` from now (None: no such key). A key already revoked may be rotated too (its
    replacement is how an operator restores access after a leak)."""
    old = keys.get_key(session, key_id)
    if old is None:
        return None
    new = issue_key(
        session,
        [uuid.UUID(w) for w in old.workspaces],
        list(old.scopes),
        now,
        old.expires_at,
    )
    keys.revoke_key(session, key_id, now + grace)
    return new


ACTIVE, REVOKED, EXPIRED = "active", "revoked", "expired"
#: What a call with a key that may no longer be used is told (401 `not_entitled`).
REFUSALS = {REVOKED: "the API key was revoked", EXPIRED: "the API key has expired"}


def key_state(revoked_at: datetime | None, expires_at: datetime | None, now: datetime) -> str:
    """ACTIVE, REVOKED or EXPIRED at `now` (a key revoked from later on is active until then)."""
    if revoked_at is not None and clock.as_utc(revoked_at) <= now:
        return REVOKED
    if expires_at is not None and clock.as_utc(expires_at) <= now:
        return EXPIRED
    return ACTIVE


def trust_seconds(revoked_at: datetime | None, expires_at: datetime | None, now: datetime) -> float:
    """How long a usable key may be answered from the cache: KEY_CACHE_SECONDS, less if it is
    revoked or expires sooner."""
    ends = [clock.as_utc(t) for t in (revoked_at, expires_at) if t is not None]
    left = [(end - now).total_seconds() for end in ends]
    return min([KEY_CACHE_SECONDS, *left])


def use_is_stale(last_used_at: datetime | None, now: datetime) -> bool:
    """Whether `last_used_at` is old enough to be written again (LAST_USED_EVERY)."""
    return last_used_at is None or now - clock.as_utc(last_used_at) >= LAST_USED_EVERY


class KeyCache:
    """Recently verified keys by hash; only hits are kept, so unknown keys cannot fill it."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._entries: dict[str, tuple[float, Principal]] = {}
        self._monotonic = monotonic

    def get(self, key_hash: str) -> Principal | None:
        entry = self._entries.get(key_hash)
        if entry is None or entry[0] <= self._monotonic():
            return None
        return entry[1]

    def put(self, key_hash: str, principal: Principal, seconds: float = KEY_CACHE_SECONDS) -> None:
        """Trust `principal` for `seconds` (at most KEY_CACHE_SECONDS)."""
        if seconds <= 0:
            return
        if len(self._entries) >= KEY_CACHE_SIZE:
            self._entries.clear()
        seconds = min(seconds, KEY_CACHE_SECONDS)
        self._entries[key_hash] = (self._monotonic() + seconds, principal)

    def clear(self) -> None:
        self._entries.clear()


key_cache = KeyCache()


def _bearer_hash(authorization: str | None) -> str:
    """The hash of a `Bearer` header's key, or refuse with 401."""
    scheme, _, token = (authorization or "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise not_entitled("a Bearer API key is required", status=401)
    return hash_key(token)


def cached_principal(authorization: str | None) -> Principal | None:
    """The principal of a key verified in the last KEY_CACHE_SECONDS, without the database.

    None means "ask `authenticate`"; a malformed header is refused (401) here already. Cheap
    enough for the event loop, so a request whose key is cached needs no worker thread for it.
    """
    return key_cache.get(_bearer_hash(authorization))


def authenticate(session: Session, authorization: str | None) -> Principal:
    """Resolve a `Bearer` header to a principal, or refuse with 401."""
    key_hash = _bearer_hash(authorization)
    cached = key_cache.get(key_hash)
    if cached is not None:
        return cached
    key = keys.find_key(session, key_hash)
    if key is None:
        raise not_entitled("the API key is not valid", status=401)
    now = clock.now()
    state = key_state(key.revoked_at, key.expires_at, now)
    if state != ACTIVE:
        raise not_entitled(REFUSALS[state], status=401)
    principal = Principal(
        key_id=key.id,
        workspaces=frozenset(uuid.UUID(w) for w in key.workspaces),
        scopes=frozenset(key.scopes),
    )
    if use_is_stale(key.last_used_at, now):
        _note_use(key, now)
    key_cache.put(key_hash, principal, trust_seconds(key.revoked_at, key.expires_at, now))
    return principal


def _note_use(key: ApiKey, now: datetime) -> None:
    """Write the key's last use, best effort: a call never fails for want of this write."""
    try:
        db.with_transient_retry(
            lambda s: keys.note_use(s, key.id, now, LAST_USED_EVERY), attempts=1
        )
    except SQLAlchemyError as exc:
        log.warning("key_last_used_not_written", key_id=str(key.id), error=type(exc).__name__)


def _authenticate(authorization: str | None) -> Principal:
    with db.read_only_session() as session:
        return authenticate(session, authorization)


async def principal_for(authorization: str | None) -> Principal:
    """The principal of an `Authorization` header value; ApiError (401) when there is none."""
    # A key verified in the last few seconds is answered in the event loop; only a cache miss
    # costs a worker thread and a database read (each thread hop costs about as much CPU as
    # the read itself, and the retrieval routes are polled hundreds of times a second).
    principal = cached_principal(authorization)
    if principal is None:
        principal = await run_in_threadpool(_authenticate, authorization)
    return principal
