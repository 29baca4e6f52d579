"""API keys' rows: store a new key's hash, find a live key by its hash.

Secrets are made and hashed in `api.auth`; only hashes reach this table.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

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
) -> None:
    """Record a new key by its hash, with the workspaces and scopes it grants."""
    session.add(
        ApiKey(
            key_hash=key_hash,
            prefix=prefix,
            workspaces=[str(w) for w in workspaces],
            scopes=list(scopes),
            created_at=now,
        )
    )


def find_live_key(session: Session, key_hash: str) -> ApiKey | None:
    """The unrevoked key with this hash, or None."""
    return session.execute(
        sa.select(ApiKey).where(API_KEY.c.key_hash == key_hash, API_KEY.c.revoked_at.is_(None))
    ).scalar_one_or_none()
