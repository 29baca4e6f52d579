"""Webhook endpoints of a workspace, and their deliveries (docs/webhooks.md)."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response

from api.http.deps import PrincipalDep
from api.schemas import UuidParam
from api.services import webhook_endpoints as webhooks
from api.webhook_schemas import WebhookCreateRequest, WebhookUpdateRequest

router = APIRouter(prefix="/research-api/webhooks", tags=["webhooks"])

DeliveryState = Literal["pending", "delivered", "failed"]


@router.post("", status_code=201)
def create(body: WebhookCreateRequest, principal: PrincipalDep) -> dict[str, Any]:
    """Register an endpoint; its signing secret is in this answer only."""
    return webhooks.create_webhook(principal, body)


@router.get("")
def list_(
    principal: PrincipalDep,
    workspace_id: Annotated[UuidParam | None, Query(description="Only this workspace's.")] = None,
) -> dict[str, Any]:
    """The endpoints of the key's workspaces (or of one of them)."""
    return webhooks.list_webhooks(principal, workspace_id)


@router.get("/{webhook_id}")
def get(webhook_id: UuidParam, principal: PrincipalDep) -> dict[str, Any]:
    """One endpoint (without its secret)."""
    return webhooks.get_webhook(principal, webhook_id)


@router.patch("/{webhook_id}")
def update(
    webhook_id: UuidParam, body: WebhookUpdateRequest, principal: PrincipalDep
) -> dict[str, Any]:
    """Change the URL, events, description, or enable / disable it."""
    return webhooks.update_webhook(principal, webhook_id, body)


@router.post("/{webhook_id}/rotate-secret")
def rotate_secret(webhook_id: UuidParam, principal: PrincipalDep) -> dict[str, Any]:
    """A new signing secret (in this answer only); the old one signs too during the grace."""
    return webhooks.rotate_secret(principal, webhook_id)


@router.delete("/{webhook_id}", status_code=204)
def delete(webhook_id: UuidParam, principal: PrincipalDep) -> Response:
    """Delete the endpoint and its deliveries."""
    webhooks.delete_webhook(principal, webhook_id)
    return Response(status_code=204)


@router.get("/{webhook_id}/deliveries")
def deliveries(
    webhook_id: UuidParam,
    principal: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=webhooks.MAX_DELIVERIES)] = 50,
    state: Annotated[DeliveryState | None, Query()] = None,
) -> dict[str, Any]:
    """The endpoint's deliveries, newest first: state, attempts, last error, next attempt."""
    return webhooks.list_deliveries(principal, webhook_id, limit, state)


@router.post("/{webhook_id}/deliveries/{delivery_id}/redeliver", status_code=202)
def redeliver(
    webhook_id: UuidParam, delivery_id: UuidParam, principal: PrincipalDep
) -> dict[str, Any]:
    """Send one delivery again now, with the same id and payload."""
    return webhooks.redeliver(principal, webhook_id, delivery_id)
