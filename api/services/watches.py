"""What the watch routes and `evidence watches` do, as plain functions over a principal.

A watch belongs to one workspace: the key needs the research scope and that workspace, and a
watch of a workspace the key cannot read is a 404, never a 403, so its existence does not leak.
"""

from __future__ import annotations

import uuid
from typing import Any

import sqlalchemy as sa

from api.auth import Principal
from api.errors import ApiError, invalid_input, not_found
from api.watch_schemas import WatchCreateRequest, WatchUpdateRequest
from worker.domain import clock
from worker.domain.clock import isoformat
from worker.platform.settings import get_settings
from worker.store import db
from worker.store.db import read_only_session
from worker.watches import store

#: Watches one list answers at most.
MAX_LIST = 1000


def _instant(value: Any) -> str | None:
    return None if value is None else isoformat(clock.as_utc(value))


def watch_doc(row: sa.Row[Any]) -> dict[str, Any]:
    """A watch as the routes answer it."""
    return {
        "id": str(row.id),
        "workspace_id": str(row.workspace_id),
        "url": row.url,
        "kind": row.kind,
        "language": row.language or None,
        "interval_seconds": row.interval_seconds,
        "enabled": row.enabled,
        "next_run_at": _instant(row.next_run_at),
        "last_run_at": _instant(row.last_run_at),
        "missed_runs": row.missed_runs,
        "last_retrieval_id": None if row.last_retrieval_id is None else str(row.last_retrieval_id),
        "failing": row.failing,
        "created_at": _instant(row.created_at),
        "updated_at": _instant(row.updated_at),
    }


def _readable(principal: Principal, row: sa.Row[Any] | None) -> sa.Row[Any]:
    """The watch if the key may see it; else 404 (as if it did not exist)."""
    if row is None or not principal.can_read(row.workspace_id):
        raise not_found("no such watch")
    return row


def _watch(principal: Principal, watch_id: uuid.UUID) -> sa.Row[Any]:
    principal.require(None)
    with read_only_session() as session:
        return _readable(principal, store.get_watch(session, watch_id))


def create_watch(principal: Principal, body: WatchCreateRequest) -> dict[str, Any]:
    """Start watching a URL; its first run is at its first slot after now."""
    workspace_id = uuid.UUID(body.workspace_id)
    principal.require(workspace_id)
    limit = get_settings().watch_limit_per_workspace

    def insert(session: Any) -> sa.Row[Any]:
        if store.count_watches(session, workspace_id) >= limit:
            raise ApiError(
                409,
                "invalid_input",
                f"this workspace already has {limit} watches (the most allowed)",
                "workspace_id",
            )
        return store.insert_watch(
            session,
            workspace_id,
            body.url,
            body.kind,
            body.language or "",
            body.interval_seconds,
            body.enabled,
            clock.now(),
        )

    return {"watch": watch_doc(db.with_transient_retry(insert))}


def list_watches(principal: Principal, workspace_id: uuid.UUID | None) -> dict[str, Any]:
    """The watches of one workspace, or of every workspace the key may use, oldest first."""
    principal.require(workspace_id)
    workspaces = [workspace_id] if workspace_id else sorted(principal.workspaces)
    with read_only_session() as session:
        rows = store.list_watches(session, workspaces, MAX_LIST)
    return {"watches": [watch_doc(row) for row in rows]}


def get_watch(principal: Principal, watch_id: uuid.UUID) -> dict[str, Any]:
    return {"watch": watch_doc(_watch(principal, watch_id))}


#: Fields that may be omitted but never sent as null (`language: null` clears the language).
_NOT_NULL = ("url", "kind", "interval_seconds", "enabled")


def update_watch(
    principal: Principal, watch_id: uuid.UUID, body: WatchUpdateRequest
) -> dict[str, Any]:
    """Change what it watches, how often, or enable / disable it."""
    given = body.model_fields_set
    for name in _NOT_NULL:
        if name in given and getattr(body, name) is None:
            raise invalid_input(f"{name} may be omitted but not null", name)
    if not given:
        raise invalid_input(
            "nothing to change: give url, kind, language, interval_seconds or enabled"
        )
    _watch(principal, watch_id)
    changes = {name: getattr(body, name) for name in given}
    if "language" in changes:
        changes["language"] = changes["language"] or ""
    row = db.with_transient_retry(lambda s: store.update_watch(s, watch_id, changes, clock.now()))
    return {"watch": watch_doc(_readable(principal, row))}


def delete_watch(principal: Principal, watch_id: uuid.UUID) -> None:
    """Stop watching (its runs already started settle as ordinary retrievals)."""
    _watch(principal, watch_id)
    db.with_transient_retry(lambda s: store.delete_watch(s, watch_id))
