"""Per-workspace quota overrides set by operators (`evidence quotas set`); NULL = the default."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

from worker.store.models import WorkspaceQuota
from worker.store.typed import rowcount

QUOTA: sa.Table = WorkspaceQuota.__table__  # type: ignore[attr-defined]
Q = QUOTA.c
T = TypeVar("T")


@dataclass(frozen=True)
class Override:
    """What an operator set for one workspace (None: the setting's default applies)."""

    workspace_id: uuid.UUID
    open_retrievals: int | None
    write_rate: float | None
    write_burst: int | None
    updated_at: datetime | None = None
    read_rate: float | None = None
    read_burst: int | None = None


def get_override(session: Session, workspace_id: uuid.UUID) -> Override | None:
    """The workspace's overrides, or None when it has none."""
    row = session.execute(sa.select(QUOTA).where(Q.workspace_id == workspace_id)).one_or_none()
    return None if row is None else Override(**row._mapping)


def list_overrides(session: Session) -> list[Override]:
    """Every workspace with overrides."""
    rows = session.execute(sa.select(QUOTA).order_by(Q.workspace_id))
    return [Override(**row._mapping) for row in rows]


def set_override(session: Session, override: Override, now: datetime) -> Override:
    """Store the given overrides; fields left None keep what was set before (if anything)."""
    current = get_override(session, override.workspace_id)
    merged = Override(
        override.workspace_id,
        _pick(override.open_retrievals, current.open_retrievals if current else None),
        _pick(override.write_rate, current.write_rate if current else None),
        _pick(override.write_burst, current.write_burst if current else None),
        now,
        _pick(override.read_rate, current.read_rate if current else None),
        _pick(override.read_burst, current.read_burst if current else None),
    )
    values = merged.__dict__
    if current is None:
        session.execute(sa.insert(QUOTA).values(values))
    else:
        session.execute(
            sa.update(QUOTA).where(Q.workspace_id == override.workspace_id).values(values)
        )
    return merged


def clear_override(session: Session, workspace_id: uuid.UUID) -> bool:
    """Drop the workspace's overrides (back to the defaults); whether it had any."""
    return bool(rowcount(session.execute(sa.delete(QUOTA).where(Q.workspace_id == workspace_id))))


def _pick(new: T | None, old: T | None) -> T | None:
    return new if new is not None else old
