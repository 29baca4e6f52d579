"""API keys: creation, hashing, and the one place that checks scope and workspace access.

Keys are 256-bit random secrets, so a single SHA-256 is a sound one-way hash for them (a slow
password hash defends low-entropy secrets; these are not). Only the hash is stored.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from api.errors import not_entitled
from worker.store import keys

KEY_PREFIX = "evk_"
SCOPE_RESEARCH = "agent:research"
#: How long a verified key is trusted without asking the database again (so a revocation
#: takes effect within this many seconds); saves a round trip on every request.
KEY_CACHE_SECONDS = 10.0
KEY_CACHE_SIZE = 1024


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


def create_key(
    session: Session, workspaces: list[uuid.UUID], scopes: list[str], now: datetime
) -> str:
    """Store a new key's hash and return the key itself (shown once, never stored)."""
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    keys.insert_key(session, hash_key(secret), secret[:12], workspaces, scopes, now)
    return secret


class _KeyCache:
    """Recently verified keys by hash; only hits are kept, so unknown keys cannot fill it."""

    def __init__(self) -> None:
        self._entries: dict[str, tuple[float, Principal]] = {}

    def get(self, key_hash: str) -> Principal | None:
        entry = self._entries.get(key_hash)
        if entry is None or entry[0] < time.monotonic():
            return None
        return entry[1]

    def put(self, key_hash: str, principal: Principal) -> None:
        if len(self._entries) >= KEY_CACHE_SIZE:
            self._entries.clear()
        self._entries[key_hash] = (time.monotonic() + KEY_CACHE_SECONDS, principal)

    def clear(self) -> None:
        self._entries.clear()


key_cache = _KeyCache()


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
    key = keys.find_live_key(session, key_hash)
    if key is None:
        raise not_entitled("the API key is not valid", status=401)
    principal = Principal(
        key_id=key.id,
        workspaces=frozenset(uuid.UUID(w) for w in key.workspaces),
        scopes=frozenset(key.scopes),
    )
    key_cache.put(key_hash, principal)
    return principal
