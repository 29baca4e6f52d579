"""API keys' rows: store a new key's hash, find a key by its hash, list, revoke, note use.

Secrets are made and hashed in `api.auth`; only hashes reach this table. Whether a key may
still be used (revoked, expired) is decided in `api.auth.key_state`.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.store.models import ApiKey

API_KEY: sa.Table = ApiKey.__table__  # type: ignore[attr-defined]


def insert_key(
    session: Session,
    key_hash: str,
    prefix: str,
    workspaces: Iterable[uuid.UUID],
    scopes: Iterable[str],
    now: datetime,
    expires_at: datetime | None = None,
) -> uuid.UUID:
    """Record a new key by its hash, with the workspaces and scopes it grants; its id."""
    key = ApiKey(
        key_hash=key_hash,
        prefix=prefix,
        workspaces=[str(w) for w in workspaces],
        scopes=list(scopes),
        created_at=now,
        expires_at=expires_at,
    )
    session.add(key)
    return key.id


def find_key(session: Session, key_hash: str) -> ApiKey | None:
    """The key with this hash, revoked and expired ones included, or None."""
    return session.execute(
        sa.select(ApiKey).where(API_KEY.c.key_hash == key_hash)
    ).scalar_one_or_none()


def get_key(session: Session, key_id: uuid.UUID) -> ApiKey | None:
    """The key with this id, or None."""
    return session.get(ApiKey, key_id)


def list_keys(session: Session) -> list[ApiKey]:
    """Every key, oldest first."""
    return list(
        session.execute(sa.select(ApiKey).order_by(API_KEY.c.created_at, API_KEY.c.id)).scalars()
    )


def revoke_key(session: Session, key_id: uuid.UUID, at: datetime) -> None:
    """Make the key stop working at `at`, unless it already stops earlier."""
    session.execute(
        sa.update(API_KEY)
        .where(
            API_KEY.c.id == key_id,
            sa.or_(API_KEY.c.revoked_at.is_(None), API_KEY.c.revoked_at > at),
        )
        .values(revoked_at=at)
    )


def note_use(session: Session, key_id: uuid.UUID, now: datetime, every: timedelta) -> None:
    """Record that the key was used now, unless that was already recorded within `every`.

    The condition makes concurrent processes write it once between them.
    """
    session.execute(
        sa.update(API_KEY)
        .where(
            API_KEY.c.id == key_id,
            sa.or_(API_KEY.c.last_used_at.is_(None), API_KEY.c.last_used_at <= now - every),
        )
        .values(last_used_at=now)
    )
