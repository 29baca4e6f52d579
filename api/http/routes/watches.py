"""Watches of a workspace: URLs retrieved again on a schedule (docs/watches.md)."""

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from api.http.deps import PrincipalDep
from api.schemas import UuidParam
from api.services import watches
from api.watch_schemas import WatchCreateRequest, WatchUpdateRequest

router = APIRouter(prefix="/research-api/watches", tags=["watches"])


@router.post("", status_code=201)
def create(body: WatchCreateRequest, principal: PrincipalDep) -> dict[str, Any]:
    """Watch a URL: an ordinary batch-lane retrieval of it at every slot of the interval."""
    return watches.create_watch(principal, body)


@router.get("")
def list_(
    principal: PrincipalDep,
    workspace_id: Annotated[UuidParam | None, Query(description="Only this workspace's.")] = None,
) -> dict[str, Any]:
    """The watches of the key's workspaces (or of one of them)."""
    return watches.list_watches(principal, workspace_id)


@router.get("/{watch_id}")
def get(watch_id: UuidParam, principal: PrincipalDep) -> dict[str, Any]:
    """One watch, with its schedule: next and last run, missed runs."""
    return watches.get_watch(principal, watch_id)


@router.patch("/{watch_id}")
def update(
    watch_id: UuidParam, body: WatchUpdateRequest, principal: PrincipalDep
) -> dict[str, Any]:
    """Change the URL, kind, language or interval, or enable / disable it."""
    return watches.update_watch(principal, watch_id, body)


@router.delete("/{watch_id}", status_code=204)
def delete(watch_id: UuidParam, principal: PrincipalDep) -> Response:
    """Stop watching."""
    watches.delete_watch(principal, watch_id)
    return Response(status_code=204)
