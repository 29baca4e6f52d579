"""`evidence webhooks …`: operators manage any workspace's webhook endpoints.

The same functions as the routes (`api.services.webhook_endpoints`) with an operator's principal,
which may use every workspace. Each command prints JSON (one document per line for lists); the
secret appears only in the output of `create` and `rotate`.
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from api.auth import SCOPE_RESEARCH, Principal

app = typer.Typer(
    help="Webhook endpoints (signed `retrieval.settled` events).", no_args_is_help=True
)


class _Operator(Principal):
    """The operator at the console: every workspace, every scope."""

    def can_read(self, workspace_id: uuid.UUID) -> bool:
        return True

    def require(self, workspace_id: uuid.UUID | None, scope: str = SCOPE_RESEARCH) -> None:
        return None


OPERATOR = _Operator(uuid.UUID(int=0), frozenset(), frozenset({SCOPE_RESEARCH}))


def _print(document: Any) -> None:
    typer.echo(json.dumps(document, ensure_ascii=False))


def _run(call: Any) -> Any:
    """Run a service call; its refusal is one line on stderr and exit 1."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.errors import ApiError

    try:
        return call()
    except ApiError as error:
        field = f" ({error.field})" if error.field else ""
        typer.echo(f"error: {error.message}{field}", err=True)
        raise typer.Exit(1) from None
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        typer.echo(f"error: {where}: {first['msg']}", err=True)
        raise typer.Exit(1) from None


WebhookId = Annotated[uuid.UUID, typer.Argument(help="The webhook's id.")]


@app.command("create")
def create(
    workspace: Annotated[uuid.UUID, typer.Option(help="The workspace it belongs to.")],
    url: Annotated[str, typer.Option(help="The receiver: a public https URL.")],
    event: Annotated[list[str], typer.Option(help="Event type to send.")] = ["retrieval.settled"],  # noqa: B006
    description: Annotated[str | None, typer.Option(help="A note for people.")] = None,
) -> None:
    """Register an endpoint; prints it with its signing secret (shown only now)."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import webhook_endpoints as webhooks
    from api.webhook_schemas import WebhookCreateRequest

    body = {"workspace_id": str(workspace), "url": url, "events": event, "description": description}
    _print(
        _run(lambda: webhooks.create_webhook(OPERATOR, WebhookCreateRequest.model_validate(body)))
    )


@app.command("list")
def list_(
    workspace: Annotated[
        uuid.UUID | None, typer.Option(help="Only this workspace's (default: all).")
    ] = None,
) -> None:
    """One endpoint per line (never a secret)."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import webhook_endpoints as webhooks
    from worker.store.db import read_only_session
    from worker.webhooks import endpoints

    with read_only_session() as session:
        rows = endpoints.list_endpoints(session, None if workspace is None else [workspace])
    for row in rows:
        _print(webhooks.webhook_doc(row))


@app.command("show")
def show(webhook_id: WebhookId) -> None:
    """One endpoint."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import webhook_endpoints as webhooks

    _print(_run(lambda: webhooks.get_webhook(OPERATOR, webhook_id)))


def _set_enabled(webhook_id: uuid.UUID, enabled: bool) -> None:
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import webhook_endpoints as webhooks
    from api.webhook_schemas import WebhookUpdateRequest

    body = WebhookUpdateRequest(enabled=enabled)
    _print(_run(lambda: webhooks.update_webhook(OPERATOR, webhook_id, body)))


@app.command("enable")
def enable(webhook_id: WebhookId) -> None:
    """Enable it again (clears a disable reason; pending deliveries resume)."""
    _set_enabled(webhook_id, True)


@app.command("disable")
def disable(webhook_id: WebhookId) -> None:
    """Stop sending to it (pending deliveries wait, within their retry window)."""
    _set_enabled(webhook_id, False)


@app.command("rotate")
def rotate(webhook_id: WebhookId) -> None:
    """A new signing secret (printed once); the old one also signs for the grace period."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import webhook_endpoints as webhooks

    _print(_run(lambda: webhooks.rotate_secret(OPERATOR, webhook_id)))


@app.command("delete")
def delete(webhook_id: WebhookId) -> None:
    """Delete the endpoint and its deliveries."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import webhook_endpoints as webhooks

    _run(lambda: webhooks.delete_webhook(OPERATOR, webhook_id))
    typer.echo(f"deleted {webhook_id}", err=True)


@app.command("deliveries")
def deliveries(
    webhook_id: WebhookId,
    state: Annotated[str | None, typer.Option(help="pending, delivered or failed.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=100)] = 50,
) -> None:
    """The endpoint's deliveries, newest first, one per line."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import webhook_endpoints as webhooks

    answer = _run(lambda: webhooks.list_deliveries(OPERATOR, webhook_id, limit, state))
    for delivery in answer["deliveries"]:
        _print(delivery)


@app.command("redeliver")
def redeliver(
    webhook_id: WebhookId,
    delivery_id: Annotated[uuid.UUID, typer.Argument(help="The delivery's id.")],
) -> None:
    """Send one delivery again now (same id and payload)."""
    # Imported when the command runs: `evidence --help` and the other commands stay quick.
    from api.services import webhook_endpoints as webhooks

    _print(_run(lambda: webhooks.redeliver(OPERATOR, webhook_id, delivery_id)))
